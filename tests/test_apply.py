"""Apply (issue 5): idempotence, exact reuse, in-place sync seen by readers, refusals, and a build
through the real Prefect flow with injected transient faults.

Everything runs in-process on the bundled 24-PEP sample (recursive:size=150, 4 shards, the ``hash``
embedder) against embedded Qdrant in a tmp folder; only the fault-injection test starts Prefect."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from helpers_index import Snapshot, Workspace, prefect_api_url, read_log
from reindex import api
from reindex.context import backends
from reindex.planner.approvals import ApprovalError, approval_path
from reindex.adapters.embedders import make_embedder
from reindex.errors import TransientError
from reindex.books.locks import LockHeld, acquire_lock, read_lock
from reindex.planner import PlanError


@pytest.fixture
def embed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every text the hash embedder embeds in this process is logged here (one digest a line)."""
    path = tmp_path / "embed.log"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(path))
    return path


def _assert_vectors_are_embeddings_of_their_text(ws: Workspace, snap: Snapshot) -> None:
    """With the hash embedder a correct vector is a pure function of (vector half, text): any reused
    vector that came from another text or another vector half shows up here."""
    emb = make_embedder(ws.cfg().vector)
    ids = sorted(snap.points)
    want = emb.embed([snap.points[i][1]["page_content"] for i in ids]).vectors
    got = np.stack([snap.points[i][0] for i in ids])
    bad = [ids[n] for n in np.flatnonzero(~np.isclose(got, want, atol=1e-6).all(axis=1))]
    assert not bad, f"{len(bad)} points carry a vector that is not their text's embedding"


# --------------------------------------------------------------------------------------------
# Idempotence
# --------------------------------------------------------------------------------------------


def test_applying_a_plan_twice_changes_nothing_and_embeds_nothing(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    first = ws.apply(path)
    assert first.status == "done"
    assert first.report["actual"]["embedded"] == plan.body["work"]["chunks_to_embed"] > 0
    snap = ws.snapshot(first.collection)
    assert len(snap.ids) == plan.body["work"]["chunks_new"]
    embedded_lines = sum(read_log(embed_log).values())
    assert embedded_lines == first.report["actual"]["embedded"]

    second = ws.apply(path)
    assert second.status == "already-applied" and second.collection == first.collection
    assert sum(read_log(embed_log).values()) == embedded_lines, "the second apply embedded something"
    ws.snapshot(first.collection).assert_same(snap)

    # Lose every record that the run finished (done marker, shard manifests): the shards run again,
    # find every point already in place and must neither embed nor change anything.
    state = ws.state()
    run_keys = [k for k in state.list("indexes/docs/") if f"/runs/{plan.plan_hash}/" in k]
    assert any(k.endswith("done.json") for k in run_keys) and sum("shard-" in k for k in run_keys) == 4
    for k in run_keys:
        state.delete(k)
    third = ws.apply(path)
    assert third.status == "done"
    a = third.report["actual"]
    assert (a["shards_run"], a["embedded"], a["reused_from_target"], a["points_in_collection"]) == (
        4, 0, plan.body["work"]["chunks_new"], plan.body["work"]["chunks_new"])
    assert sum(read_log(embed_log).values()) == embedded_lines, "re-running finished shards embedded something"
    ws.snapshot(first.collection).assert_same(snap)


def test_document_scoped_apply_is_idempotent(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped"
    r = ws.apply(path)
    assert r.status == "done" and r.collection == live
    assert r.report["actual"]["embedded"] == plan.body["work"]["chunks_to_embed"]
    snap, lines = ws.snapshot(live), sum(read_log(embed_log).values())

    again = ws.apply(path)
    assert again.status == "already-applied"
    assert sum(read_log(embed_log).values()) == lines
    ws.snapshot(live).assert_same(snap)
    replan, replan_path = ws.plan()
    assert replan.kind == "none"
    assert ws.apply(replan_path).status == "nothing-to-do"
    ws.snapshot(live).assert_same(snap)


# --------------------------------------------------------------------------------------------
# Reuse: exactly the planned vectors, never across a vector-half change
# --------------------------------------------------------------------------------------------


def test_text_half_change_reuses_exactly_the_planned_vectors(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    old = ws.build_live()
    old_snap = ws.snapshot(old)
    plan, path = ws.planned_change(size=120)
    assert plan.kind == "pipeline-scoped/text"
    w = plan.body["work"]
    assert 0 < w["chunks_reused"] < w["chunks_new"]
    before = read_log(embed_log)

    r = ws.apply(path)
    a = r.report["actual"]
    assert r.status == "done" and r.collection != old
    assert a["reused_from_old"] == w["chunks_reused"]
    assert a["embedded"] == w["chunks_to_embed"] == sum((read_log(embed_log) - before).values())
    assert a["tokens_embedded"] == w["tokens_to_embed"]
    assert a["chunks_written"] == a["points_in_collection"] == w["chunks_new"]

    new_snap = ws.snapshot(r.collection)
    _assert_vectors_are_embeddings_of_their_text(ws, new_snap)
    # The reused vectors are the old population's own, bit for bit (same document, same text).
    old_by_doc_text = {(p["doc_id"], p["page_content"]): v for v, p in old_snap.points.values()}
    shared = [(v, old_by_doc_text[(p["doc_id"], p["page_content"])]) for v, p in new_snap.points.values()
              if (p["doc_id"], p["page_content"]) in old_by_doc_text]
    assert len(shared) >= w["chunks_reused"]
    assert all(np.array_equal(v, ov) for v, ov in shared)


def test_vector_half_change_reuses_nothing_even_for_identical_text(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    old = ws.build_live()
    old_snap = ws.snapshot(old)
    plan, path = ws.planned_change(size=150, prefix="passage: ")  # same chunker: every text identical
    assert plan.kind == "pipeline-scoped/vector"
    assert plan.body["work"]["chunks_reused"] == 0
    before = read_log(embed_log)

    r = ws.apply(path)
    a = r.report["actual"]
    assert r.status == "done"
    assert a["reused_from_old"] == 0 and a["reused_from_target"] == 0
    assert a["chunks_written"] == len(old_snap.ids)
    assert sum((read_log(embed_log) - before).values()) == a["embedded"] > 0

    new_snap = ws.snapshot(r.collection)
    _assert_vectors_are_embeddings_of_their_text(ws, new_snap)  # prefixed: none can be an old vector
    old_by_text = {(p["doc_id"], p["ordinal"]): (v, p["page_content"]) for v, p in old_snap.points.values()}
    same_text = 0
    for v, p in new_snap.points.values():
        ov, otext = old_by_text[(p["doc_id"], p["ordinal"])]
        if otext == p["page_content"]:
            same_text += 1
            assert not np.allclose(v, ov), "a vector of the old model was reused for identical text"
    assert same_text == len(old_snap.ids)


# --------------------------------------------------------------------------------------------
# In-place sync: readers never see an edited document without chunks
# --------------------------------------------------------------------------------------------


class _WatchedStore(backends.Borrowed):
    """The shared store, observing each edited document's point count right after every write."""

    def __init__(self, inner: Any, alias: str, docs: list[str]) -> None:
        super().__init__(inner)
        self.alias, self.docs = alias, docs
        self.seen: list[dict[str, int]] = []

    def _observe(self) -> None:
        self.seen.append({d: self._store.count(self.alias, doc_id=d) for d in self.docs})

    def upsert(self, name: str, points: list) -> None:
        self._store.upsert(name, points)
        self._observe()

    def delete_points(self, name: str, ids: list[str]) -> None:
        self._store.delete_points(name, ids)
        self._observe()


def test_readers_never_see_an_edited_document_without_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    edited = ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped" and sorted(plan.body["work"]["affected_documents"]) == edited

    store = api.vector_store_for(ws.cfg())
    watched = _WatchedStore(store, "docs", edited)
    try:
        before = {d: store.count("docs", doc_id=d) for d in edited}
        assert all(before.values())
        reader_counts: list[dict[str, int]] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                try:
                    reader_counts.append({d: store.count("docs", doc_id=d) for d in edited})
                except BaseException as err:  # noqa: BLE001 - reported below
                    errors.append(err)
                    return

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        while not reader_counts:
            time.sleep(0.001)
        reads_before_apply = len(reader_counts)
        with api.Index.open(ws.config, store=watched) as ix:  # the apply writes through the watched store
            r = ix.apply(path, use_prefect=False)
        stop.set()
        for t in threads:
            t.join(10)
        after = {d: store.count("docs", doc_id=d) for d in edited}
    finally:
        store.close()

    assert r.status == "done" and r.collection == live
    assert not errors, errors
    assert len(reader_counts) > reads_before_apply, "the readers did not run during the apply"
    zero = [c for c in reader_counts + watched.seen if min(c.values()) == 0]
    assert not zero, f"a reader saw an edited document with no chunks: {zero[0]}"
    # The write path passed through the transient state (new points added, stale ones not yet gone),
    # which is what a delete-before-add would have shown as a gap.
    rows = {d: sum(1 for row in ws.manifest_rows(live) if row.doc_id == d) for d in edited}
    assert after == rows
    assert r.report["actual"]["deleted"] > 0
    assert any(any(c[d] > max(before[d], after[d]) for d in edited) for c in watched.seen)


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


def test_apply_refuses_an_unapproved_pipeline_scoped_plan(tmp_path: Path, embed_log: Path) -> None:
    from reindex.cli import main

    ws = Workspace(tmp_path / "ws")
    old = ws.build_live()
    ws.write_config(120)
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/text" and plan.body["approval"]["required"]
    before = read_log(embed_log)

    res = CliRunner().invoke(main, ["apply", str(path), "-c", str(ws.config), "--no-progress"])
    assert res.exit_code == 1
    assert res.stderr == (
        f"error: plan {plan.plan_hash[:12]} (pipeline-scoped/text) needs approval "
        "(pipeline-scoped/text plans need approval (approval.pipeline_scoped)); "
        "run `reindex approve PLAN --by NAME`\n"
    )
    assert read_log(embed_log) == before
    with ws.store() as s:
        assert s.list_collections() == [old]
    assert not read_lock(ws.state(), "docs").held

    # An approval of another plan does not count either.
    other_plan, other_path = ws.planned_change(size=100)
    approval_path(path).write_bytes(approval_path(other_path).read_bytes())
    ws.write_config(120)
    with pytest.raises(ApprovalError, match=f"is for plan {other_plan.plan_hash[:12]}, not {plan.plan_hash[:12]}"):
        ws.apply(path)


def test_apply_refuses_a_drifted_plan_unless_replanned(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    doc = ws.corpus / "pep-0212.rst"
    doc.write_bytes(doc.read_bytes() + b"\nA sentence added after planning.\n")
    now = api.corpus_digest_of(ws.cfg())

    with pytest.raises(PlanError) as err:
        ws.apply(path)
    assert str(err.value) == (
        f"{path}: the corpus was {plan.body['inputs']['corpus']['digest'][:12]} at planning but is now "
        f"{now[:12]}. Run `reindex plan` again, or pass --replan"
    )
    assert read_log(embed_log) == {}
    with ws.store() as s:
        assert s.list_collections() == []
    assert not read_lock(ws.state(), "docs").held

    r = ws.apply(path, replan=True)
    assert r.status == "done" and r.plan_hash != plan.plan_hash
    assert Path(str(r.report_path).replace(".run.json", ".json")) != path
    assert r.report["actual"]["points_in_collection"] == r.report["planned"]["chunks_new"]
    with ws.store() as s:
        stored = [p.payload["page_content"] for p in s.scroll(r.collection) if p.payload["doc_id"] == "pep-0212.rst"]
    assert any("A sentence added after planning." in t for t in stored)


def test_a_second_apply_fails_fast_naming_the_lock_holder(tmp_path: Path, embed_log: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    held = acquire_lock(ws.state(), "docs", "other-host:4242:deadbeef", purpose="apply 0123456789ab (initial)")

    t0 = time.perf_counter()
    with pytest.raises(LockHeld) as err:
        ws.apply(path)
    assert time.perf_counter() - t0 < 30  # it does not sit out the holder's 120 s lease (loose: loaded boxes)
    msg = str(err.value)
    assert msg.startswith("index 'docs' is locked by other-host:4242:deadbeef (apply 0123456789ab (initial)), expires in ")
    assert "wait for it to finish" in msg and "lock.json" in msg and "\n" not in msg
    assert read_log(embed_log) == {}
    assert '"owner": "other-host:4242:deadbeef"' in ws.lock_file.read_text(), "apply removed someone else's lock"
    with ws.store() as s:
        assert s.list_collections() == []

    held.release()
    assert ws.apply(path).status == "done"
    # Released locks stay as a "free" record that keeps the fencing token.
    assert read_lock(ws.state(), "docs").state == "free", "apply did not release its lock"

    # A lock whose holder stopped renewing it is taken over once it expires.
    ws.edit_documents()
    plan2, path2 = ws.plan()
    acquire_lock(ws.state(), "docs", "dead-host:1:cafe", purpose="apply (stale)", ttl=0.01)
    time.sleep(0.05)
    assert ws.apply(path2).status == "done"


# --------------------------------------------------------------------------------------------
# Transient faults through the real Prefect flow
# --------------------------------------------------------------------------------------------


class _Faults:
    """Seeded, order-independent fault schedule: a call fails when the hash of (seed, operation,
    arguments) falls in the chosen tenth, and only the first time that exact call is made, so every
    retried shard converges whatever order the threads run in."""

    def __init__(self, seed: int, rate: float = 0.1) -> None:
        self.seed, self.rate = seed, rate
        self.failed: set[str] = set()
        self.calls = {"store": 0, "embed": 0}
        self.raised = {"store-before": 0, "store-after": 0, "embed": 0}
        self.lock = threading.Lock()

    def decide(self, kind: str, op: str, key: str) -> str | None:
        """None (run normally), 'before' (fail without doing it) or 'after' (do it, then fail)."""
        h = hashlib.blake2b(f"{self.seed}\0{op}\0{key}".encode(), digest_size=8).digest()
        with self.lock:
            self.calls[kind] += 1
            if int.from_bytes(h[:4], "little") / 2**32 >= self.rate or h.hex() in self.failed:
                return None
            self.failed.add(h.hex())
            return "after" if (h[4] & 1 and kind == "store") else "before"


def _digest(items: list[str]) -> str:
    return hashlib.blake2b("\n".join(items).encode(), digest_size=8).hexdigest()


class _FlakyStore(backends.Borrowed):
    def __init__(self, inner: Any, faults: _Faults) -> None:
        super().__init__(inner)
        self.faults = faults

    def _call(self, op: str, key: str, fn: Any, *args: Any, **kw: Any) -> Any:
        when = self.faults.decide("store", op, key)
        if when == "before":
            self.faults.raised["store-before"] += 1
            raise TransientError(f"injected: {op} failed before reaching the store")
        out = fn(*args, **kw)
        if when == "after":
            self.faults.raised["store-after"] += 1
            raise TransientError(f"injected: {op} reply lost after the store did it")
        return out

    def retrieve(self, name: str, ids: list[str], **kw: Any) -> Any:
        return self._call("retrieve", name + _digest(sorted(ids)), self._store.retrieve, name, ids, **kw)

    def upsert(self, name: str, points: list) -> None:
        return self._call("upsert", name + _digest(sorted(p.id for p in points)), self._store.upsert, name, points)

    def delete_points(self, name: str, ids: list[str]) -> None:
        return self._call("delete", name + _digest(sorted(ids)), self._store.delete_points, name, ids)

    def close(self) -> None:
        self._store.close()


class _FlakyEmbedder:
    def __init__(self, inner: Any, faults: _Faults) -> None:
        self.inner, self.faults = inner, faults
        self.dimension, self.max_tokens = inner.dimension, inner.max_tokens

    def embed(self, texts: list[str]) -> Any:
        if self.faults.decide("embed", "embed", _digest(sorted(texts))):
            self.faults.raised["embed"] += 1
            raise TransientError("injected: the embedding API answered 503")
        return self.inner.embed(texts)


def test_prefect_flow_retries_transient_faults_to_the_same_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    prefect_api_url(request.config)  # the session's Prefect test server, in this process

    clean = Workspace(tmp_path / "clean")
    clean.build_live()
    _, clean_path = clean.planned_change(size=120)
    want = clean.apply(clean_path)
    want_snap = clean.snapshot(want.collection)

    ws = Workspace(tmp_path / "flaky")
    ws.build_live()
    plan, path = ws.planned_change(size=120)
    faults = _Faults(seed=0)  # 4 of 33 calls fail: 3 embeds, 1 store call whose reply is lost
    real_store_for, real_make = backends.vector_store_for, backends.make_embedder
    monkeypatch.setattr(backends, "vector_store_for", lambda cfg: _FlakyStore(real_store_for(cfg), faults))
    monkeypatch.setattr(backends, "make_embedder", lambda *a, **kw: _FlakyEmbedder(real_make(*a, **kw), faults))
    monkeypatch.setenv("REINDEX_SHARD_WORKERS", "4")

    r = ws.apply(path, use_prefect=True)
    monkeypatch.undo()

    assert faults.raised["embed"] > 0 and faults.raised["store-before"] + faults.raised["store-after"] > 0, faults.raised
    n_raised = sum(faults.raised.values())
    assert 0.03 <= n_raised / sum(faults.calls.values()) <= 0.3, (faults.raised, faults.calls)
    assert r.status == "done", r.report["failures"]
    assert r.collection == want.collection and r.report["failures"] == []
    assert r.report["actual"]["points_in_collection"] == plan.body["work"]["chunks_new"]
    ws.snapshot(r.collection).assert_same(want_snap)


# --------------------------------------------------------------------------------------------
# Catch-up: a document edited while its shard was being built
# --------------------------------------------------------------------------------------------

APPENDED = ("\n\nAddendum written during the build.\n\n" + "This paragraph changes the document while apply is "
            "running, so that catch-up must replay it into the shadow population before cutover. " * 12) + "\n"


def _edit_during_first_embed(monkeypatch: pytest.MonkeyPatch, doc: Path) -> list[int]:
    import reindex.adapters.embedders as embedders

    real_make = embedders.make_embedder
    calls: list[int] = []

    class Editing:
        def __init__(self, inner: Any) -> None:
            self.inner, self.dimension, self.max_tokens = inner, inner.dimension, inner.max_tokens

        def embed(self, texts: list[str]) -> Any:
            if not calls:
                doc.write_bytes(doc.read_bytes() + APPENDED.encode())
            calls.append(len(texts))
            return self.inner.embed(texts)

    monkeypatch.setattr(backends, "make_embedder", lambda *a, **kw: Editing(real_make(*a, **kw)))
    return calls


def test_catch_up_replays_a_document_edited_during_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.engine.execution import shard_of

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    # A document of shard 0: it is read before the first embedding call and changes right after.
    doc_id = sorted(p.name for p in ws.corpus.iterdir() if shard_of(p.name, 4) == 0)[0]
    calls = _edit_during_first_embed(monkeypatch, ws.corpus / doc_id)
    r = ws.apply(path)
    monkeypatch.undo()
    assert calls and r.status == "done"
    assert r.report["catch_up"]["documents"] == 1 and r.report["catch_up"]["rounds"][0]["changed"] == 1

    clean = Workspace(tmp_path / "clean")
    (clean.corpus / doc_id).write_bytes((ws.corpus / doc_id).read_bytes())
    _, clean_path = clean.plan()
    want = clean.apply(clean_path)
    assert want.report["catch_up"]["documents"] == 0
    ws.snapshot(r.collection).assert_same(clean.snapshot(want.collection))
    assert [(x.doc_id, x.content_hash, x.point_id) for x in ws.manifest_rows(r.collection)] == \
        [(x.doc_id, x.content_hash, x.point_id) for x in clean.manifest_rows(want.collection)]


def test_cutover_accepts_a_shadow_that_catch_up_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.engine.execution import shard_of

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    doc_id = sorted(p.name for p in ws.corpus.iterdir() if shard_of(p.name, 4) == 0)[0]
    _edit_during_first_embed(monkeypatch, ws.corpus / doc_id)
    r = ws.apply(path)
    monkeypatch.undo()
    assert r.report["actual"]["points_in_collection"] != plan.body["work"]["chunks_new"]  # catch-up added chunks
    c = ws.cutover(path)
    assert [x["rule"] for x in c.report["rules"] if not x["passed"]] == []
    assert c.report["swap"] is not None


def _count_scans(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record each scan of a directory source: True when it reads every document (no ``keep``)."""
    from reindex.adapters.sources.directory import DirectorySource

    scans: list[bool] = []
    real = DirectorySource.scan

    def scan(self: Any, report: Any = None, keep: Any = None) -> Any:
        scans.append(keep is None)
        return real(self, report, keep)

    monkeypatch.setattr(DirectorySource, "scan", scan)
    return scans


def _count_reads(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[str]:
    """Each file under ``folder`` whose bytes are read (the folder source's one reader)."""
    from reindex.adapters.sources.directory import DirectorySource

    opened: list[str] = []
    real = DirectorySource._read

    def read(self: Any, path: Path) -> bytes:
        if path.is_relative_to(folder):
            opened.append(path.relative_to(folder).as_posix())
        return real(self, path)

    monkeypatch.setattr(DirectorySource, "_read", read)
    return opened


def _live_then_edited(tmp_path: Path) -> tuple[Workspace, str, list[str], Any, Path]:
    """A live index of the sample, then the sample's edits planned: (workspace, live, edited ids, plan, path)."""
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    edited = ws.edit_documents()
    plan, path = ws.plan()
    return ws, live, edited, plan, path


def _built_from_scratch(tmp_path: Path, ws: Workspace, *copied: str) -> tuple[Workspace, str]:
    """The reference: the edited sample (and ``copied`` documents as ``ws`` holds them now) built fresh."""
    clean = Workspace(tmp_path / "clean")
    clean.edit_documents()
    for doc_id in copied:
        (clean.corpus / doc_id).write_bytes((ws.corpus / doc_id).read_bytes())
    return clean, clean.build_live()


def test_an_in_place_sync_reads_only_the_edited_files_once_and_its_shards_take_the_drift_checks_documents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, live, edited, plan, path = _live_then_edited(tmp_path)
    assert plan.kind == "document-scoped" and len(plan.body["work"]["affected_documents"]) == len(edited) > 1
    scans = _count_scans(monkeypatch)
    opened = _count_reads(monkeypatch, ws.corpus)
    from reindex.adapters.stores.edge import _engine

    loads: list[str] = []
    real_load = _engine.load
    monkeypatch.setattr(_engine, "load", lambda p: (loads.append(Path(p).name), real_load(p))[1])
    r = ws.apply(path)
    monkeypatch.undo()
    assert r.status == "done" and r.collection == live and r.report["actual"]["documents"] == len(edited)
    # The drift check lists the folder and reads the edited files from the population's cursor; the catch-up
    # lists it and opens nothing; no shard scans the source.
    assert scans == [] and sorted(opened) == sorted(edited)
    # The writer loads the collection once: the delta generation it writes (prepare_writes before the reads).
    assert len(loads) == 1, loads

    clean, want = _built_from_scratch(tmp_path, ws)
    ws.snapshot(live).assert_same(clean.snapshot(want))


def test_a_sync_of_more_than_the_read_cap_has_its_shards_scan_the_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.usecases import apply as apply_mod

    ws, live, edited, _, path = _live_then_edited(tmp_path)
    sizes = sorted((ws.corpus / d).stat().st_size for d in edited)
    monkeypatch.setattr(apply_mod, "READ_CAP_BYTES", sum(sizes) - 1)  # one byte short of them all
    scans = _count_scans(monkeypatch)
    r = ws.apply(path)
    monkeypatch.undo()
    assert r.status == "done" and r.report["actual"]["documents"] == len(edited)
    # The drift check reads from the cursor (no scan); each shard scans, keeping only its documents.
    assert scans == [False] * r.report["actual"]["shards_run"] and r.report["actual"]["shards_run"] >= 1

    clean, want = _built_from_scratch(tmp_path, ws)
    ws.snapshot(live).assert_same(clean.snapshot(want))


def test_a_planned_document_edited_again_during_its_sync_is_caught_up_with_its_newest_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its shard writes the text the plan priced (read by the drift check); the catch-up then reads the source
    # again, never that copy, and replays the newer text.
    ws, live, edited, _, path = _live_then_edited(tmp_path)
    calls = _edit_during_first_embed(monkeypatch, ws.corpus / edited[0])
    r = ws.apply(path)
    monkeypatch.undo()
    assert calls and r.status == "done"
    assert r.report["catch_up"]["documents"] == 1 and r.report["catch_up"]["rounds"][0]["changed"] == 1
    assert len(r.report["catch_up"]["rounds"]) == 1  # one round: the replay wrote the newest text

    clean, want = _built_from_scratch(tmp_path, ws, edited[0])
    ws.snapshot(live).assert_same(clean.snapshot(want))
    assert [(x.doc_id, x.content_hash, x.point_id) for x in ws.manifest_rows(live)] == \
        [(x.doc_id, x.content_hash, x.point_id) for x in clean.manifest_rows(want)]


def test_the_document_hashes_catch_up_compares_are_the_manifest_rows_own(tmp_path: Path) -> None:
    from reindex.errors import StateError
    from reindex.books.manifests import chunk_manifest_keys, read_document_hashes

    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    r = ws.apply(path)
    rows = ws.manifest_rows(r.collection)
    hashes = read_document_hashes(ws.state(), "docs", r.collection)
    assert hashes == {x.doc_id: x.content_hash for x in rows} and len(hashes) == len(list(ws.corpus.iterdir()))
    # A part that is not Parquet is one line naming it, as a row read says.
    key = chunk_manifest_keys(ws.state(), "docs", r.collection)[0]
    ws.state().put(key, b"not parquet")
    with pytest.raises(StateError, match=f"{key}: not a readable chunk manifest part"):
        read_document_hashes(ws.state(), "docs", r.collection)


def test_a_lock_left_by_a_dead_process_of_this_host_is_taken_over(tmp_path: Path) -> None:
    from helpers_locks import lock_taken_by_a_killed_process

    from reindex.adapters.stores.objects import open_object_store

    store = open_object_store(str(tmp_path / "state"))
    lock_taken_by_a_killed_process(str(tmp_path / "state"))  # a real process took it and was SIGKILLed
    lock = acquire_lock(store, "docs", "me:1:x", purpose="resume")
    assert lock.owner == "me:1:x"
    # A live holder on another host is never taken over before expiry.
    with pytest.raises(LockHeld, match="locked by me:1:x"):
        acquire_lock(store, "docs", "other:2:y", purpose="apply")
