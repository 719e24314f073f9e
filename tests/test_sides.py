"""Invariant 18: one side, one rule. Whatever embeds a population's queries asks the context for that population's
side (its recorded vector half and query prefix); the config file describes only the next population.

The cutover is the room where this broke after readers were fixed: it embedded the shadow's queries with the config
file's vector half, so an edit of ``reindex.yaml`` between ``apply`` and ``cutover`` failed the cutover (another
dimension) or silently changed its evidence (another query prefix). Here the same build is cut over twice, from
two copies of one workspace: once as built, once after editing the config again; the metrics must be equal."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env


from reindex.api import Index

SRC = Path(__file__).resolve().parents[1] / "src" / "reindex"
LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"


def _vector(ws: Workspace, line: str) -> None:
    """Rewrite the config's vector half (one line); the text half stays."""
    text = ws.config.read_text(encoding="utf-8")
    old = next(ln for ln in text.splitlines() if ln.startswith("vector:"))
    ws.config.write_text(text.replace(old, f"vector: {line}"), encoding="utf-8")


def _queries(ws: Workspace, n: int = 12) -> Path:
    """Labelled queries: the first line of text of ``n`` sample documents, each labelled with its document."""
    out = ws.root / "queries.jsonl"
    lines = []
    for doc in sorted(ws.corpus.iterdir())[:n]:
        first = next(ln.strip() for ln in doc.read_text(encoding="utf-8").splitlines() if len(ln.strip()) > 20)
        lines.append(json.dumps({"query": first, "doc_id": doc.name}))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _metrics(report: dict) -> dict:
    """What the gate's evidence says, timings left out."""
    agg = report["evaluation"]["aggregate"]
    return {k: v for k, v in agg.items() if "seconds" not in k and "ms" not in k}


@pytest.mark.parametrize("edit", [
    "{provider: hash, dimension: 48}",  # another dimension: the shadow's vectors are 96-d
    "{provider: hash, dimension: 96, query_prefix: 'query: '}",  # only what queries are embedded with
], ids=["dimension", "query-prefix"])
def test_a_config_edit_between_apply_and_cutover_changes_no_metric(tmp_path: Path, edit: str) -> None:
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    _vector(ws, "{provider: hash, dimension: 64}")
    ws.build_live()
    _vector(ws, "{provider: hash, dimension: 96, prefix: 'passage: '}")
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/vector"
    ws.approve(path)
    assert ws.apply(path).status == "done"
    queries = _queries(ws)
    twin = Workspace.__new__(Workspace)
    twin.root = tmp_path / "twin"
    shutil.copytree(ws.root, twin.root)  # state, store, plans: the same build, cut over as it was made

    reference = twin.cutover(twin.plans / path.name, queries=twin.root / "queries.jsonl")
    _vector(ws, edit)  # the config file now names the next population, not the shadow
    cli = subprocess.run([str(REINDEX_BIN), "cutover", str(path), "--queries", str(queries), "-c", str(ws.config),
                          "--json"], capture_output=True, text=True, env=subprocess_env(), cwd=ws.root, timeout=600)
    assert cli.returncode in (0, 3), cli.stderr
    edited = json.loads(cli.stdout)
    assert _metrics(edited) == _metrics(reference.report)
    assert edited["query_vectors"] == reference.report["query_vectors"]
    assert edited["passed"] == reference.passed and edited["swap"] is not None
    sides = edited["evaluation"]["sides"]  # the report names what embedded each side: the records, not the file
    assert (sides["old"]["label"], sides["new"]["label"]) == ("hash 64d", "hash 96d")


def test_a_populations_side_is_its_record_not_the_config_file(tmp_path: Path) -> None:
    """The live population's side keeps its recorded half after the config file names another; the next side is
    the config file's (and has no collection yet)."""
    from reindex.books.manifests import read_live

    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    _vector(ws, "{provider: hash, dimension: 64}")
    live = ws.build_live()
    with Index.open(ws.config) as ix:
        side = ix.context.side(read_live(ix.state, ix.name))
        assert (side.collection, side.vector.dimension, side.label) == (live, 64, "hash 64d")
        assert side.same_queries(ix.context.next_side())
    _vector(ws, "{provider: hash, dimension: 96, query_prefix: 'query: '}")
    with Index.open(ws.config) as ix:
        side, following = ix.context.side(read_live(ix.state, ix.name)), ix.context.next_side()
        assert side.vector.dimension == 64 and side.vector.query_prefix is None
        assert (following.collection, following.vector.dimension, following.vector.query_prefix) == (None, 96, "query: ")
        assert not side.same_queries(following)


def _calls_for_queries(path: Path) -> list[int]:
    """Lines of ``path`` that call ``<something>.for_queries()``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "for_queries"]


def test_only_the_context_turns_a_vector_half_into_a_query_side() -> None:
    """Readers, cutover, serving, forecast, doctor and calibrate ask ``Context.side``: no other module makes a query
    embedder from a vector half (``for_queries()``); the classifier only compares prefixes."""
    allowed = {SRC / "context" / "__init__.py", SRC / "planner" / "_classify.py", SRC / "domain" / "config" / "_halves.py"}
    found = {p: lines for p in SRC.rglob("*.py") if p not in allowed and (lines := _calls_for_queries(p))}
    assert not found, {str(p.relative_to(SRC)): lines for p, lines in found.items()}


def test_the_query_side_check_sees_a_call(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f(v, ctx):\n    return ctx.embedder(v.for_queries())\n", encoding="utf-8")
    assert _calls_for_queries(probe) == [2]
