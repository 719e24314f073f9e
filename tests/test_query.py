"""`reindex query`: the live alias as a reader sees it, from another process, also while apply and cutover run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers_index import REINDEX_BIN, Workspace, subprocess_env


def _query(ws: Workspace, *args: str) -> subprocess.CompletedProcess:
    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([str(REINDEX_BIN), "query", *args, "-c", str(ws.config)], cwd=ws.root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_query_returns_chunks_of_the_live_alias_and_filters_by_document(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    first = ws.manifest_rows(live)[0]
    with ws.store() as s:
        [p] = s.retrieve(live, [first.point_id], with_vectors=False)
    text = p.payload["page_content"]
    r = _query(ws, text, "--k", "3", "--json")
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)["results"]
    assert len(results) == 3 and set(results[0]) >= {"doc_id", "score", "page_content", "metadata"}
    assert results[0]["page_content"] == text and results[0]["doc_id"] == first.doc_id  # the hash embedder: exact
    other = next(r.doc_id for r in ws.manifest_rows(live) if r.doc_id != first.doc_id)
    f = _query(ws, text, "--k", "5", "--filter", f"doc_id={other}", "--json")
    assert f.returncode == 0 and {x["doc_id"] for x in json.loads(f.stdout)["results"]} == {other}
    bad = _query(ws, text, "--filter", "title=x")
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "error: --filter title: can filter on doc_id only (add metadata keys to source.metadata_fields)")


def test_query_works_from_another_process_while_apply_and_cutover_run(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    ws.build_live()
    plan, path = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    for step in (["apply", str(path), "--no-progress"], ["cutover", str(path)]):
        writer = subprocess.Popen([str(REINDEX_BIN), *step, "-c", str(ws.config)], cwd=ws.root, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        answers = 0
        while writer.poll() is None or answers == 0:
            r = _query(ws, "the module search path", "--k", "2", "--json")
            assert r.returncode == 0, r.stderr
            assert len(json.loads(r.stdout)["results"]) == 2
            answers += 1
            time.sleep(0.2)
        out, err = writer.communicate()
        assert writer.returncode == 0, err
        assert answers >= 1


def _count_opens(monkeypatch) -> dict[str, int]:
    """Counts of read-only stores opened (``vector_reader_for``) and of edge generations loaded."""
    from reindex.adapters.stores.edge import _engine
    from reindex.context import backends

    counts = {"readers": 0, "loads": 0}
    real_reader, real_load = backends.vector_reader_for, _engine.load

    def reader(cfg):
        counts["readers"] += 1
        return real_reader(cfg)

    def load(path):
        counts["loads"] += 1
        return real_load(path)

    monkeypatch.setattr(backends, "vector_reader_for", reader)
    monkeypatch.setattr(_engine, "load", load)
    return counts


def _run_cli(ws: Workspace, *args: str) -> None:
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run([str(REINDEX_BIN), *args, "-c", str(ws.config)], cwd=ws.root, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def test_a_querier_holds_one_reader_and_follows_a_sync_and_a_cutover_made_by_another_process(
        tmp_path: Path, monkeypatch) -> None:
    from reindex import api

    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    ws = Workspace(tmp_path / "ws", extra=lenient)
    live = ws.build_live()
    with ws.store() as s:
        before = {p.payload["page_content"] for p in s.scroll(live)}
    counts = _count_opens(monkeypatch)
    querier = api.Querier(ws.config)
    text = sorted(before)[0]
    for _ in range(5):
        assert querier.query(text, k=3).results[0]["page_content"] == text  # the hash embedder: exact
    assert counts == {"readers": 1, "loads": 1}  # held: not one open per call

    edited = ws.edit_documents()  # an in-place sync, written and published by another process
    plan, path = ws.plan()
    assert plan.kind == "document-scoped", plan.kind
    ws.approve(path)
    _run_cli(ws, "apply", str(path), "--no-progress")
    with ws.store() as s:
        new = sorted(p.payload["page_content"] for p in s.scroll(live)
                     if p.payload["doc_id"] in edited and p.payload["page_content"] not in before)
    assert new
    counts["loads"] -= 1  # the writer store just opened to look
    for t in (new[0], new[-1]):
        assert querier.query(t, k=3).results[0]["page_content"] == t
    assert counts == {"readers": 1, "loads": 2}  # the published sync: one new generation opened

    _plan, path = ws.planned_change(size=120, extra=lenient)  # a new population and a cutover, elsewhere
    _run_cli(ws, "apply", str(path), "--no-progress")
    _run_cli(ws, "cutover", str(path))
    assert ws.alias() != live
    got = querier.query(new[0], k=4)
    assert counts["readers"] == 1 and counts["loads"] == 3
    assert got.results == api.query(new[0], ws.config, k=4).results  # what a fresh reader answers
    querier.close()


def test_a_querier_reopens_by_itself_when_its_held_reader_fails(tmp_path: Path, monkeypatch) -> None:
    """The held reader's generation gone from under it (here: its query raises once): the next call closes
    it, opens a fresh reader through the backends seam and answers."""
    from reindex import api
    from reindex.errors import TransientError
    from reindex.context import backends

    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    with ws.store() as s:
        text = next(iter(s.scroll(live))).payload["page_content"]
    real_reader, opened = backends.vector_reader_for, []

    class FailsOnce:
        """The first reader opened: answers once, then fails once (as on a retired generation)."""

        def __init__(self, inner) -> None:
            self.inner, self.calls, self.closed = inner, 0, False

        def query(self, *a, **kw):
            self.calls += 1
            if self.calls == 2:
                raise TransientError("generation gone")
            return self.inner.query(*a, **kw)

        def get_alias(self, alias):
            return self.inner.get_alias(alias)

        def close(self) -> None:
            self.closed = True
            self.inner.close()

    def reader(cfg):
        opened.append(real_reader(cfg) if opened else FailsOnce(real_reader(cfg)))
        return opened[-1]

    monkeypatch.setattr(backends, "vector_reader_for", reader)
    with api.Querier(ws.config) as querier:
        assert querier.query(text, k=1).results[0]["page_content"] == text
        assert querier.query(text, k=1).results[0]["page_content"] == text  # answered by a fresh reader
        assert len(opened) == 2 and opened[0].closed
        assert querier.query(text, k=1).results[0]["page_content"] == text
        assert len(opened) == 2  # and that one is held
