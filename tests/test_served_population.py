"""Invariant 14: a reader embeds queries with the vector half of the population the alias serves, never the config
file's; it follows cutover and rollback without a restart, and a config edit changes nothing it sees until a cutover.

One index, three vector halves of the ``hash`` provider: 64 dimensions, then 96 dimensions with a passage prefix
(queries embedded with that prefix too). Every reader path is made once, before the config is edited, and never
recreated: ``reindex query`` (a process), ``api.query``, ``Index.query``, ``Querier``, LangChain's
``ReindexRetriever`` and ``ReindexVectorStore``, LlamaIndex's ``ReindexRetriever``. Each must return the chunk
whose text is the query at score 1.0 (the hash embedder gives the same vector only to the same input) from the
old population after the edit and the shadow's build, from the new one after the cutover, and from the old one
again after a rollback: never a dimension error, never a near-random score."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env

from reindex import api
from reindex.api import Index

LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"


def _vector(ws: Workspace, dimension: int, prefix: str | None = None) -> None:
    """Rewrite the config's vector half (the text half stays)."""
    text = ws.config.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("vector:"))
    extra = f", prefix: {json.dumps(prefix)}" if prefix is not None else ""
    ws.config.write_text(text.replace(line, f"vector: {{provider: hash, dimension: {dimension}{extra}}}"),
                         encoding="utf-8")


class Readers:
    """Every reader path, made once."""

    def __init__(self, ws: Workspace) -> None:
        from reindex.retrievers.langchain import ReindexRetriever as LcRetriever
        from reindex.retrievers.langchain import ReindexVectorStore
        from reindex.retrievers.llamaindex import ReindexRetriever as LiRetriever

        self.ws = ws
        self.querier = api.Querier(ws.config)
        self.index = Index.open(ws.config)
        self.lc = LcRetriever(config=str(ws.config), k=1)
        self.lc_store = ReindexVectorStore(ws.config)
        self.li = LiRetriever(ws.config, similarity_top_k=1)

    def answers(self, text: str) -> dict[str, tuple[str, float, str | None]]:
        """path → (top chunk text, its score, the collection that answered where the path says)."""
        out: dict[str, tuple[str, float, str | None]] = {}
        for name, r in (("api.query", api.query(text, self.ws.config, k=1)), ("Querier", self.querier.query(text, k=1)),
                        ("Index.query", self.index.query(text, k=1))):
            out[name] = (r.results[0]["page_content"], r.results[0]["score"], getattr(r, "population", None))
        doc = self.lc.invoke(text)[0]
        out["langchain retriever"] = (doc.page_content, doc.metadata["_score"], None)
        doc, score = self.lc_store.similarity_search_with_score(text, k=1)[0]
        out["ReindexVectorStore"] = (doc.page_content, score, None)
        node = self.li.retrieve(text)[0]
        out["llamaindex retriever"] = (node.node.get_content(), node.score, None)
        cli = subprocess.run([str(REINDEX_BIN), "query", text, "-c", str(self.ws.config), "--k", "1", "--json"],
                             capture_output=True, text=True, env=subprocess_env(), cwd=self.ws.root, timeout=300)
        assert cli.returncode == 0, cli.stderr
        got = json.loads(cli.stdout)
        out["reindex query"] = (got["results"][0]["page_content"], got["results"][0]["score"], got.get("population"))
        return out

    def close(self) -> None:
        self.querier.close()
        self.index.close()


def _assert_served(readers: Readers, text: str, collection: str) -> None:
    for path, (found, score, population) in readers.answers(text).items():
        assert found == text, f"{path}: answered another chunk (score {score})"
        assert score == pytest.approx(1.0, abs=1e-4), f"{path}: score {score}, not the exact text's 1.0"
        if population is not None:
            assert population == collection, f"{path}: answered from {population}, not {collection}"


@pytest.mark.parametrize("second", [(96, "passage: "), (64, "passage: ")], ids=["new-dimension-and-prefix",
                                                                                  "same-dimension-prefix-only"])
def test_every_reader_queries_the_population_it_serves_through_edit_build_cutover_and_rollback(tmp_path, second):
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    _vector(ws, 64)
    a = ws.build_live()
    with ws.store() as s:
        text = next(p.payload["page_content"] for p in s.scroll(a) if len(p.payload["page_content"]) > 200)
    readers = Readers(ws)
    try:
        _assert_served(readers, text, a)

        _vector(ws, *second)  # the config now names another vector half: nothing a reader sees may change
        _assert_served(readers, text, a)
        plan, path = ws.plan()
        assert plan.kind == "pipeline-scoped/vector"
        ws.approve(path)
        b = ws.apply(path).collection
        assert b != a
        _assert_served(readers, text, a)  # built, not cut over

        report = ws.cutover(path).report
        assert report["swap"]
        agree = report["evaluation"]["agreement"]  # a vector-half change: both models timed on the shadow's chunks
        assert agree["chunks"] > 0 and agree["old_tokens_per_cpu_second"] > 0 and agree["new_tokens_per_cpu_second"] > 0
        assert ("mean_cosine" in agree) == (second[0] == 64)  # one space (same model and dimension) or two
        _assert_served(readers, text, b)

        api.rollback(ws.config)
        assert ws.alias() == a
        _assert_served(readers, text, a)  # the config still names b's vector half
    finally:
        readers.close()


def test_a_reader_says_once_that_the_config_names_another_model_and_which_population_answered(tmp_path, caplog):
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    _vector(ws, 64)
    a = ws.build_live()
    with ws.store() as s:
        text = next(iter(s.scroll(a))).payload["page_content"]
    with api.Querier(ws.config) as q:
        r = q.query(text, k=1)
        assert r.note is None and r.population == a and r.model["dimension"] == 64 and r.mode == "old"
        _vector(ws, 32)
        caplog.clear()
        with caplog.at_level("WARNING", logger="reindex"):
            first, second = q.query(text, k=1), q.query(text, k=1)
        assert first.population == a and first.results[0]["score"] == pytest.approx(1.0, abs=1e-4)
        assert first.note and "differs from the one that answered" in first.note and second.note == first.note
        assert sum("differs from the one that answered" in m for m in caplog.messages) == 1  # said once

    cli = subprocess.run([str(REINDEX_BIN), "query", text, "-c", str(ws.config), "--k", "1"], capture_output=True,
                         text=True, env=subprocess_env(), cwd=ws.root, timeout=300)
    assert cli.returncode == 0, cli.stderr
    head = cli.stdout.splitlines()[0]
    assert head.startswith(f"{a} (hash ") and "64 dims" in head
    assert "note: the config's vector half" in cli.stdout


def test_status_shows_each_populations_model(tmp_path):
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    _vector(ws, 64)
    ws.build_live()
    _vector(ws, 48, "passage: ")
    plan, path = ws.plan()
    ws.approve(path)
    ws.apply(path)
    models = {p["state"]: p["model"] for p in api.status(ws.config)["populations"]}
    assert models["live"] == {"provider": "hash", "model": "all-MiniLM-L6-v2", "backend": "torch",
                              "precision": "float32", "dimension": 64, "label": "hash 64d"}
    assert models["ready"]["dimension"] == 48
    cli = subprocess.run([str(REINDEX_BIN), "status", "-c", str(ws.config)], capture_output=True, text=True,
                         env=subprocess_env(), cwd=ws.root, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "hash 64d" in cli.stdout and "hash 48d" in cli.stdout
