"""Messages that must send the user the right way (issue 26): exact text of the CLI, on real runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.cli import main
from reindex.usecases.runs import record_rejection


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _report_lines(out: str) -> list[str]:
    """What `reindex apply` printed from its `done:` line on (the runner's notice may come first)."""
    lines = out.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("done: ")):]


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    return ws


def test_query_before_any_build_names_the_commands_that_build_an_index(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.context import backends

    def no_model(*a, **k):
        raise AssertionError("a query of an index with nothing to search loaded a model")

    monkeypatch.setattr(backends, "make_embedder", no_model)  # said before any model is loaded
    ws = Workspace(tmp_path / "ws")
    r = _cli("query", "style guide", "-c", str(ws.config))
    assert r.exit_code == 1
    assert r.stderr == ("error: index 'docs' has nothing to search yet: build it with `reindex plan`, then "
                        "`reindex apply PLAN` and `reindex cutover PLAN`\n")
    ws.plan()  # a plan alone builds nothing: the same answer (the store folder now may or may not exist)
    assert _cli("query", "style guide", "-c", str(ws.config)).stderr == r.stderr


def test_applying_a_plan_rejected_in_the_ui_says_rejected_by_whom_and_to_plan_again(live: Workspace) -> None:
    live.write_config(120)
    plan, path = live.plan()
    assert plan.body["approval"]["required"]
    rec, _ = record_rejection(path, "bob (Prefect form)", "too big")  # what the approval form records
    r = _cli("apply", str(path), "-c", str(live.config), "--no-progress", "--no-prefect")
    assert r.exit_code == 1
    assert r.stderr == (f"error: plan {plan.plan_hash[:12]} was rejected by bob (Prefect form) at {rec.at} (too big): "
                        "a rejected plan cannot be approved or applied; run `reindex plan` again for a new plan\n")


def test_a_document_scoped_apply_names_what_each_chunk_count_counts(live: Workspace) -> None:
    edited = live.edit_documents()
    plan, path = live.plan()
    assert plan.kind == "document-scoped"
    r = _cli("apply", str(path), "-c", str(live.config), "--no-progress", "--no-prefect")
    assert r.exit_code == 0, r.output
    a = json.loads(Path(str(path).removesuffix(".json") + ".run.json").read_text())["actual"]
    assert a["documents"] == len(edited) and a["chunks_written"] < plan.body["work"]["chunks_new"]
    assert _report_lines(r.stdout)[1] == (
        f"  chunks written {a['chunks_written']:,} for {len(edited)} affected documents (the index holds "
        f"{plan.body['work']['chunks_new']:,} chunks after the change); reused "
        f"{a['reused_from_old'] + a['reused_from_target']:,} vectors in place; embedded {a['embedded']:,} texts "
        f"({a['tokens_embedded']:,} tokens; planned {plan.body['work']['chunks_to_embed']:,} / "
        f"{plan.body['work']['tokens_to_embed']:,})")


DOCS = [{"id": i, "text": f"Document {i} talks about {w} and more {w}. " * 5, "lang": "en"}
        for i, w in (("a", "apples"), ("b", "boats"), ("c", "cheese"))]


def test_a_metadata_only_change_says_metadata_changed_and_payloads_rewritten(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text("index: docs\nsource: {uri: ./docs.jsonl, metadata_fields: [lang]}\n"
                   "text: {chunker: {kind: recursive, size: 40}}\nvector: {provider: hash}\napply: {shards: 2}\n")
    plan, path = api.make_plan(cfg, out=tmp_path / "plans")
    assert api.apply_plan(path, cfg, prefect=False).status == "done" and api.cutover(path, cfg).report["swap"]
    corpus.write_text("".join(json.dumps({**d, "lang": "fr"} if d["id"] == "b" else d) + "\n" for d in DOCS))

    r = _cli("plan", "-c", str(cfg), "--out", str(tmp_path / "plans"))
    assert r.exit_code == 2, r.output
    assert "  documents: 1 metadata changed (same text, same chunks), 2 unchanged, 0 bad" in r.output.splitlines()
    path = r.output.splitlines()[-1].removeprefix("  plan: ")
    applied = _cli("apply", path, "-c", str(cfg), "--no-progress", "--no-prefect")
    assert applied.exit_code == 0, applied.output
    points_of_b = api.query("boats", cfg, k=10, filters={"doc_id": "b"}).results
    assert _report_lines(applied.stdout)[1:3] == [
        f"  payloads rewritten {len(points_of_b)} points of 1 document, in place; nothing embedded, no vector written",
        f"  points in {plan.body['identity']['new']['collection']}: {plan.body['work']['chunks_new']}; deleted 0; "
        "shards run 1, skipped 0",
    ]


def test_an_apply_that_embeds_nothing_never_makes_the_embedder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's metadata-only change: its apply must not load the model (seconds of import and load)."""
    from reindex.context import backends

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    corpus, cfg = tmp_path / "docs.jsonl", tmp_path / "reindex.yaml"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    cfg.write_text("index: docs\nsource: {uri: ./docs.jsonl, metadata_fields: []}\n"
                   "text: {chunker: {kind: recursive, size: 40}}\nvector: {provider: hash}\n")
    _plan, path = api.make_plan(cfg, out=tmp_path / "plans")
    assert api.apply_plan(path, cfg, prefect=False).status == "done" and api.cutover(path, cfg).report["swap"]
    made = []
    real = backends.make_embedder
    monkeypatch.setattr(backends, "make_embedder", lambda *a, **kw: made.append(a) or real(*a, **kw))
    cfg.write_text(cfg.read_text().replace("metadata_fields: []", "metadata_fields: [lang]"))
    plan, path = api.make_plan(cfg, out=tmp_path / "plans")
    assert plan.kind == "payload-only" and plan.body["work"]["tokens_to_embed"] == 0
    assert api.apply_plan(path, cfg, prefect=False).report["actual"]["payload_updated"] > 0
    assert made == []
    cfg.write_text(cfg.read_text().replace("size: 40", "size: 30"))  # a plan that embeds: made once, up front
    plan, path = api.make_plan(cfg, out=tmp_path / "plans")
    api.approve_plan(path, "tester")
    assert api.apply_plan(path, cfg, prefect=False).report["actual"]["embedded"] > 0 and len(made) == 1
