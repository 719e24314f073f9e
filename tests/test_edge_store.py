"""The edge backend's promises to other processes: readers query the live alias while a writer builds a
shadow, swaps the alias and syncs in place (0 failed queries, never two populations or two versions in
one answer); copy-on-write generations and their cleanup; the old local-mode folders are refused with
the exact conversion command, and that conversion works; every acknowledged write is fsynced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reindex.adapters.stores.edge import EdgeReader, LocalModeFolderError, open_edge_store, open_reader
from reindex.adapters.stores.migrate import convert_local_store
from reindex.adapters.stores.opening import open_vector_store
from reindex.adapters.stores.vectors import Point
from reindex.adapters.stores.vectors import VectorStore, VectorStoreError

DIM = 16
LIMIT = 20


def _points(n: int, *, pop: str, version: int, seed: int, start: int = 0) -> list[Point]:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    return [
        Point(str(uuid.uuid5(uuid.NAMESPACE_URL, f"{pop}/{start + i}")), vecs[i],
              {"doc_id": f"d{(start + i) // 5}", "pop": pop, "version": version})
        for i in range(n)
    ]


_READER = """
import json, os, sys, time
import numpy as np
from reindex.adapters.stores.edge import open_reader
folder, out_path, stop_path, dim, limit, alias = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
reader = open_reader(folder)
rng = np.random.default_rng(os.getpid())
with open(out_path, "w") as out:
    while not os.path.exists(stop_path):
        t = time.time()
        try:
            hits = reader.query(alias, rng.standard_normal(dim), limit=limit)
            row = {"t": t, "ok": True, "n": len(hits), "ids": [h.id for h in hits],
                   "tags": sorted({f"{h.payload.get('pop')}/{h.payload.get('version')}" for h in hits})}
        except Exception as exc:
            row = {"t": t, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(row) + "\\n")
        out.flush()
reader.close()
"""


class Readers:
    """Reader processes querying alias ``idx`` of a store folder in a loop, one JSON line per answer."""

    def __init__(
        self, folder: Path, tmp: Path, n: int = 2, dim: int = DIM, limit: int = LIMIT, alias: str = "idx"
    ) -> None:
        self.stop = tmp / "stop"
        self.outs = [tmp / f"reader-{i}.jsonl" for i in range(n)]
        self.procs = [
            subprocess.Popen([sys.executable, "-c", _READER, str(folder), str(out), str(self.stop), str(dim), str(limit),
                              alias],
                             stderr=subprocess.PIPE, text=True)
            for out in self.outs
        ]

    def rows(self) -> list[list[dict]]:
        out = []
        for path in self.outs:
            lines = path.read_text().splitlines() if path.exists() else []
            out.append([json.loads(x) for x in lines if x.endswith("}")])
        return out

    def wait_for(
        self, tag: str | None = None, ids: set[str] | None = None, not_ids: set[str] | None = None,
        timeout: float = 60,
    ) -> None:
        """Until every reader has answered at least twice with ``tag``, or from the point ids ``ids`` (and
        not from ``not_ids`` alone: the answer proves the new state)."""
        def match(r: dict) -> bool:
            if not r.get("ok", False):
                return False
            if ids is None:
                return r["tags"] == [tag]
            return set(r["ids"]) <= ids and not (not_ids is not None and set(r["ids"]) <= not_ids)

        end = time.time() + timeout
        while time.time() < end:
            if all(sum(match(r) for r in rows) >= 2 for rows in self.rows()):
                return
            for p in self.procs:
                assert p.poll() is None, p.stderr.read() if p.stderr else ""
            time.sleep(0.05)
        raise AssertionError(f"readers never answered from {tag}")

    def finish(self) -> list[list[dict]]:
        self.stop.touch()
        for p in self.procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-2000:]
        return self.rows()


def _between(rows: list[dict], t0: float, t1: float) -> list[dict]:
    return [r for r in rows if t0 <= r["t"] <= t1]


def test_readers_follow_the_alias_through_a_shadow_build_a_swap_and_an_in_place_sync(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    store = open_vector_store(None, str(folder))  # the default backend: edge
    store.create_collection("idx__a", dimension=DIM, distance="cosine", bulk=True)
    store.create_payload_index("idx__a", "doc_id")
    store.upsert("idx__a", _points(300, pop="a", version=1, seed=1))
    store.finish_bulk("idx__a")
    store.swap_alias("idx", "idx__a", None)
    readers = Readers(folder, tmp_path)
    try:
        readers.wait_for("a/1")

        t_build = time.time()  # a pipeline-scoped build: the shadow, many acknowledged batches
        store.create_collection("idx__b", dimension=DIM, distance="cosine", bulk=True)
        store.create_payload_index("idx__b", "doc_id")
        for k in range(12):
            store.upsert("idx__b", _points(50, pop="b", version=1, seed=100 + k, start=50 * k))
            time.sleep(0.05)
        store.finish_bulk("idx__b")
        t_swap = time.time()
        store.swap_alias("idx", "idx__b", "idx__a")  # the cutover
        readers.wait_for("b/1")

        t_sync = time.time()  # an in-place sync: every point rewritten (version 2), some deleted
        for k in range(12):
            store.upsert("idx__b", _points(50, pop="b", version=2, seed=200 + k, start=50 * k))
            time.sleep(0.05)
        store.delete_points("idx__b", [p.id for p in _points(10, pop="b", version=2, seed=0, start=590)])
        t_close = time.time()
        store.close()  # publishes the sync as a whole
        readers.wait_for("b/2")
        t_end = time.time()
    finally:
        results = readers.finish()
        store.close()

    for rows in results:
        failed = [r for r in rows if not r["ok"]]
        assert not failed, failed[:3]
        assert all(r["n"] == LIMIT for r in rows)
        assert all(len(r["tags"]) == 1 for r in rows), [r["tags"] for r in rows if len(r["tags"]) != 1][:3]
        order = [r["tags"][0] for r in rows]
        stages = ["a/1", "b/1", "b/2"]
        assert [stages.index(t) for t in order] == sorted(stages.index(t) for t in order)  # never back
        assert set(order) == set(stages)
        # Answers landed while the shadow was built, and while the sync was writing, from the old state.
        assert {r["tags"][0] for r in _between(rows, t_build, t_swap)} == {"a/1"}
        assert len(_between(rows, t_build, t_swap)) >= 5
        assert {r["tags"][0] for r in _between(rows, time.time() - 3600, t_sync)} <= {"a/1", "b/1"}
        assert {r["tags"][0] for r in _between(rows, t_sync + 0.2, t_close)} == {"b/1"}
        assert len(_between(rows, t_sync, t_close)) >= 5
        assert {r["tags"][0] for r in _between(rows, t_end, time.time() + 3600)} <= {"b/2"}

    # Once the readers let go, the superseded generations are deleted: one per collection is left.
    store = open_edge_store(folder)
    try:
        gens = sorted(p.name for p in (folder / "collections" / "idx__b").iterdir() if p.is_dir())
        assert len(gens) == 1, gens
        assert store.count("idx") == 590 and store.count("idx", doc_id="d0") == 5
    finally:
        store.close()


def test_copy_on_write_keeps_what_readers_see_until_publish(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("idx__a", dimension=DIM, distance="dot")
    first = _points(10, pop="a", version=1, seed=1)
    store.upsert("idx__a", first)
    reader = open_reader(folder)
    with pytest.raises(VectorStoreError, match="not been published"):
        reader.count("idx__a")  # a shadow being built is not visible
    store.swap_alias("idx", "idx__a", None)
    assert reader.count("idx") == 10

    store.upsert("idx__a", _points(5, pop="a", version=1, seed=2, start=10))
    store.delete_points("idx__a", [first[0].id])
    assert store.count("idx") == 14  # the writer sees its own writes
    assert reader.count("idx") == 10 and reader.retrieve("idx", [first[0].id])  # readers: the published state
    coll = folder / "collections" / "idx__a"
    assert (coll / "gen-000001").is_dir() and (coll / "gen-000002").is_dir()

    store.publish("idx__a")
    assert reader.count("idx") == 14 and not reader.retrieve("idx", [first[0].id])
    store.upsert("idx__a", _points(1, pop="a", version=1, seed=3, start=99))  # copies generation 2 -> 3
    store.publish("idx__a")
    # Generation 1 was released when the reader moved to 2, so it is gone; 2 is still held.
    assert not (coll / "gen-000001").exists() and (coll / "gen-000002").exists()
    assert reader.count("idx") == 15
    reader.close()
    store.close()


def test_a_held_generation_is_not_deleted_until_the_reader_lets_go(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("c", dimension=DIM, distance="dot")
    store.upsert("c", _points(10, pop="a", version=1, seed=1))
    store.publish("c")
    reader = open_reader(folder)
    assert reader.count("c") == 10  # holds generation 1
    store.upsert("c", _points(10, pop="a", version=1, seed=2, start=10))
    store.publish("c")  # generation 2; generation 1 is leased
    coll = folder / "collections" / "c"
    assert (coll / "gen-000001").is_dir()
    other = open_reader(folder)
    assert other.count("c") == 20
    reader.close()
    store.upsert("c", _points(1, pop="a", version=1, seed=3, start=99))
    store.publish("c")  # sweeps generation 1 (released) and 2 (the other reader moves on at its next call)
    assert not (coll / "gen-000001").exists()
    assert (coll / "gen-000002").exists()  # still held by `other`
    assert other.count("c") == 21
    store.close()
    other.close()
    open_edge_store(folder).close()  # a writer's open sweeps what is no longer held
    assert sorted(p.name for p in coll.iterdir() if p.is_dir()) == ["gen-000003"]


def test_deleted_collection_and_readers(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    for name in ("a", "b"):
        store.create_collection(name, dimension=DIM, distance="dot")
        store.upsert(name, _points(3, pop=name, version=1, seed=1))
    store.swap_alias("idx", "a", None)
    store.swap_alias("idx", "b", "a")
    reader = open_reader(folder)
    assert reader.count("idx") == 3 and reader.get_alias("idx") == "b"
    store.delete_collection("a")
    assert store.list_collections() == ["b"] and reader.list_collections() == ["b"]
    with pytest.raises(VectorStoreError, match="does not exist"):
        reader.count("a")
    store.close()
    assert not any((folder / "trash").iterdir())
    reader.close()


def test_reader_needs_a_store_folder(tmp_path: Path) -> None:
    with pytest.raises(VectorStoreError, match="not a reindex embedded store"):
        open_reader(tmp_path)
    assert isinstance(open_reader(_made(tmp_path / "s")), EdgeReader)


def _made(folder: Path) -> Path:
    open_edge_store(folder).close()
    return folder


def test_reader_processes_through_a_real_apply_cutover_and_in_place_sync(tmp_path: Path) -> None:
    """``reindex.api``: plan, apply and cut over a pipeline-scoped change, then a document-scoped sync,
    with two reader processes querying alias ``docs`` all along: 0 failed queries, and every answer comes
    wholly from one state of one population (A; B as built; B after the sync)."""
    from helpers_index import Workspace

    ws = Workspace(tmp_path / "ws")
    a = ws.build_live()
    folder = ws.root / ".reindex" / "qdrant"
    ids_a = ws.snapshot(a).ids
    readers = Readers(folder, tmp_path, dim=ws.cfg().vector.dimension, limit=10, alias="docs")
    try:
        readers.wait_for(ids=ids_a)
        _plan, path = ws.planned_change(120)  # pipeline-scoped/text: a shadow population B
        t_apply = time.time()
        r = ws.apply(path)
        t_applied = time.time()
        assert r.status == "done" and r.collection != a, r.report
        b = r.collection
        ids_b = ws.snapshot(b).ids
        c = ws.cutover(path)
        assert c.report["swap"], c.report["rules"]
        readers.wait_for(ids=ids_b, not_ids=ids_a)

        ws.edit_documents()  # document-scoped: written into B in place
        plan, path = ws.plan()
        assert plan.kind == "document-scoped", plan.kind
        if plan.body["approval"]["required"]:
            ws.approve(path)
        t_sync = time.time()
        r = ws.apply(path)
        t_synced = time.time()
        assert r.status == "done" and r.collection == b, r.report
        ids_b2 = ws.snapshot(b).ids
        assert ids_b2 != ids_b
        readers.wait_for(ids=ids_b2, not_ids=ids_b)  # the sync became visible as a whole
    finally:
        results = readers.finish()

    states = [ids_a, ids_b, ids_b2]  # in the order readers must meet them
    for rows in results:
        assert rows and not [r for r in rows if not r["ok"]], [r for r in rows if not r["ok"]][:3]
        stage = 0
        for row in rows:
            assert row["n"] == 10
            fits = [i for i, ids in enumerate(states) if set(row["ids"]) <= ids]
            assert fits, f"an answer mixes populations or states: {row['ids']}"
            later = [i for i in fits if i >= stage]
            assert later, f"an answer went back from state {stage} to {fits}"
            stage = later[0]
        # Readers were answered from A while B was built, and from B while the sync wrote into it
        # (the sync is published when apply closes its store, just before apply returns).
        during_apply = _between(rows, t_apply, t_applied)
        assert len(during_apply) >= 3 and all(set(r["ids"]) <= ids_a for r in during_apply)
        during_sync = _between(rows, t_sync, t_synced)
        assert sum(set(r["ids"]) <= ids_b and not set(r["ids"]) <= ids_b2 for r in during_sync) >= 3


# --------------------------------------------------------------------------------------------
# Folders made by the previous embedded store (qdrant-client local mode)
# --------------------------------------------------------------------------------------------


def test_local_mode_folder_is_refused_with_the_command_that_converts_it(tmp_path: Path) -> None:
    old = tmp_path / "qdrant"
    local = open_vector_store(None, str(old), backend="local")
    local.create_collection("docs__a", dimension=DIM, distance="cosine")
    pts = _points(40, pop="a", version=1, seed=1)
    local.upsert("docs__a", pts)
    local.create_collection("docs__b", dimension=DIM, distance="euclid")
    local.swap_alias("docs", "docs__a", None)
    local.close()

    with pytest.raises(LocalModeFolderError) as err:
        open_vector_store(None, str(old))
    message = str(err.value)
    assert f"python -m reindex.adapters.stores.migrate {old} {old}.edge" in message and "store.backend: local" in message
    with pytest.raises(LocalModeFolderError):
        open_reader(old)

    new = Path(f"{old}.edge")
    run = subprocess.run([sys.executable, "-m", "reindex.adapters.stores.migrate", str(old), str(new)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "converted 2 collections, 1 aliases" in run.stdout
    store = open_vector_store(None, str(new))
    try:
        assert store.list_aliases() == {"docs": "docs__a"}
        assert store.list_collections() == ["docs__a", "docs__b"]
        assert store.collection_info("docs__b")["distance"] == "euclid"
        got = {p.id: p for p in store.retrieve("docs", [p.id for p in pts])}
        assert len(got) == 40
        for p in pts:
            want = p.vector / np.linalg.norm(p.vector)  # cosine stores normalised vectors (both backends)
            np.testing.assert_allclose(got[p.id].vector, want, rtol=1e-5, atol=1e-6)
            assert got[p.id].payload == p.payload
        assert store.count("docs", doc_id="d0") == 5
    finally:
        store.close()
    again = subprocess.run([sys.executable, "-m", "reindex.adapters.stores.migrate", str(old), str(new)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "not empty" in again.stderr
    with pytest.raises(VectorStoreError, match="store.backend is `local`"):
        open_vector_store(None, str(new), backend="local")
    with pytest.raises(VectorStoreError, match="Unknown store.backend"):
        open_vector_store(None, str(new), backend="sqlite")


def test_convert_refuses_a_folder_that_is_not_local_mode(tmp_path: Path) -> None:
    with pytest.raises(VectorStoreError, match="not a qdrant-client local-mode folder"):
        convert_local_store(tmp_path / "nothing", tmp_path / "out")


# --------------------------------------------------------------------------------------------
# Durability: an acknowledged write has been fsynced (what kill -9 cannot show: power loss)
# --------------------------------------------------------------------------------------------

_SYNC_WRITER = """
import os, sys, uuid
import numpy as np
from reindex.adapters.stores.opening import open_vector_store
from reindex.adapters.stores.vectors import Point
store = open_vector_store(None, sys.argv[1], backend=sys.argv[2])
store.create_collection("c", dimension=8, distance="dot")
points = [Point(str(uuid.uuid4()), np.ones(8, dtype=np.float32), {"doc_id": "d"}) for _ in range(32)]
store.upsert("c", points[:16])
os.write(2, b"<<UPSERT-BEGIN>>")
store.upsert("c", points[16:])
os.write(2, b"<<UPSERT-END>>")
os._exit(0)
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
@pytest.mark.parametrize("backend", ["edge", "local"])
def test_an_acknowledged_upsert_has_been_fsynced(tmp_path: Path, backend: str) -> None:
    """kill -9 keeps the page cache, so it cannot tell a synced write from an unsynced one; a power loss
    can. This watches the system calls: between the start of ``upsert`` and its return there must be an
    fsync/fdatasync/msync(MS_SYNC). It fails with SQLite ``synchronous=OFF`` or without edge's flush."""
    trace = tmp_path / "trace.txt"
    run = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=write,fsync,fdatasync,msync", "-o", str(trace),
         sys.executable, "-c", _SYNC_WRITER, str(tmp_path / "s"), backend],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    text = trace.read_text()
    assert "<<UPSERT-BEGIN>>" in text and "<<UPSERT-END>>" in text
    inside = text.split("<<UPSERT-BEGIN>>", 1)[1].split("<<UPSERT-END>>", 1)[0]
    syncs = [line for line in inside.splitlines()
             if " fsync(" in line or " fdatasync(" in line or ("msync(" in line and "MS_SYNC" in line)]
    assert syncs, f"no sync call while upsert ran ({backend})"


def test_open_vector_reader_picks_the_reader_of_each_backend(tmp_path: Path) -> None:
    from reindex.adapters.stores.opening import open_vector_reader

    folder = _made(tmp_path / "s")
    reader = open_vector_reader(None, str(folder))
    assert isinstance(reader, EdgeReader) and isinstance(reader, VectorStore)
    with pytest.raises(VectorStoreError, match="read-only"):
        reader.upsert("c", [])
    reader.close()
    with pytest.raises(VectorStoreError, match="one process per folder.*python -m reindex.adapters.stores.migrate"):
        open_vector_reader(None, str(tmp_path / "old"), backend="local")
    with pytest.raises(VectorStoreError, match="store.url"):
        open_vector_reader(None, None)


def test_reader_counts_by_document_and_both_sides_filter_by_payload_in_process(tmp_path: Path) -> None:
    # Found by the sampled mutmut run: a reader's count(doc_id=…) and the writer's query(where=…) were only
    # exercised from child processes. 12 points, 5 per document: d0 5, d1 5, d2 2.
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("idx__a", dimension=DIM, distance="dot")
    store.create_payload_index("idx__a", "doc_id", "keyword")
    store.create_payload_index("idx__a", "pop", "keyword")
    pts = _points(12, pop="a", version=1, seed=4)
    pts[0].payload["pop"] = "other"
    store.upsert("idx__a", pts)
    store.swap_alias("idx", "idx__a", None)
    reader = open_reader(folder)
    try:
        assert reader.count("idx") == 12
        assert [reader.count("idx", doc_id=f"d{i}") for i in range(3)] == [5, 5, 2]
        for side in (store, reader):
            hits = side.query("idx", pts[0].vector, limit=12, where={"pop": "other"})
            assert [h.id for h in hits] == [pts[0].id], side
            assert len(side.query("idx", pts[0].vector, limit=12, where={"pop": "a"})) == 11
    finally:
        reader.close()
        store.close()


def test_a_collection_an_alias_points_at_is_never_deleted_by_the_store(tmp_path: Path) -> None:
    """The store's own guard, alone (gc's guard is tested apart in test_safety.py)."""
    store = open_edge_store(tmp_path / "store")
    store.create_collection("a", dimension=DIM, distance="dot")
    store.upsert("a", _points(3, pop="a", version=1, seed=1))
    store.swap_alias("idx", "a", None)
    with pytest.raises(VectorStoreError, match="Collection `a` is what alias `idx` points at"):
        store.delete_collection("a")
    assert store.collection_exists("a") and store.count("idx") == 3
    store.close()


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file and folder under ``folder``: inode and content digest (folders: ``dir``)."""
    import hashlib

    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(folder))] = (st.st_ino, "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_a_generation_has_its_lease_file_from_its_publication_for_readers_that_cannot_create_one(
        tmp_path: Path) -> None:
    """Issue 33: a reader on a read-only mount cannot create a lease file, only open and lock one; the writer makes
    it when it publishes (before the record names the generation), and at its open for a generation published by a
    writer that did not (tests/test_readonly_store.py has the read-only readers)."""
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("c", dimension=DIM, distance="dot")
    store.upsert("c", _points(10, pop="a", version=1, seed=1))
    coll = folder / "collections" / "c"
    assert not list(coll.glob("*.lease"))  # unpublished: no reader may open it
    store.swap_alias("idx", "c", None)
    assert (coll / "gen-000001.lease").is_file()
    store.upsert("c", _points(3, pop="a", version=2, seed=2))
    store.close()  # publishes generation 2 (generation 1 swept: no reader holds it)
    assert sorted(p.name for p in coll.glob("*.lease")) == ["gen-000002.lease"]
    (coll / "gen-000002.lease").unlink()
    open_edge_store(folder).close()
    assert (coll / "gen-000002.lease").is_file()


def test_a_reader_writes_nothing_into_the_store(tmp_path: Path) -> None:
    """Issue 22: opening a collection for reading made the engine rewrite ``edge_config.json`` and every
    ``segment.json`` (atomic replace), so `reindex query` failed on a full disk. A reader now loads a private
    mirror of the generation: no file in the store is created, replaced or changed, except its lease."""
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("idx__a", dimension=DIM, distance="dot")
    store.create_payload_index("idx__a", "doc_id", "keyword")
    store.upsert("idx__a", _points(50, pop="a", version=1, seed=1))
    store.finish_bulk("idx__a")
    store.swap_alias("idx", "idx__a", None)
    store.close()
    lease = "collections/idx__a/gen-000001.lease"
    first = open_reader(folder)
    assert first.count("idx") == 50  # the lease file exists from now on (an empty file, created once)
    first.close()
    before = _files(folder)
    reader = open_reader(folder)
    assert reader.count("idx") == 50 and reader.count("idx", doc_id="d3") == 5
    assert len(reader.query("idx", np.ones(DIM), limit=3)) == 3
    views = [h.view for h in reader._held.values()]
    assert views and all(v is not None and v.is_dir() and not v.is_relative_to(folder) for v in views)
    reader.close()
    assert not any(v.exists() for v in views)  # the mirror goes with the reader
    # A reader killed with its mirror open leaves it behind: the next reader removes it (its pid is gone).
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = views[0].with_name(f"reindex-reader-{dead.stdout.strip()}-abc")
    mine = views[0].with_name(f"reindex-reader-{os.getpid()}-abc")
    left.mkdir()
    mine.mkdir()
    open_reader(folder).close()
    assert not left.exists() and mine.exists()
    mine.rmdir()
    # A process that exits without closing its reader (a CLI query) removes its mirror at exit.
    code = f"from reindex.adapters.stores.edge import open_reader; r = open_reader({str(folder)!r}); r.count('idx'); " \
           "print(next(iter(r._held.values())).view)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(str(views[0].parent)) and not Path(out.stdout.strip()).exists()
    after = _files(folder)
    assert lease in after
    assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after) if before.get(k) != after.get(k)}


def test_a_corrupt_alias_file_is_one_line_naming_it(tmp_path: Path) -> None:
    from reindex.adapters.stores.edge import CorruptAliasesError

    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("idx__a", dimension=DIM, distance="dot")
    store.upsert("idx__a", _points(5, pop="a", version=1, seed=1))
    store.swap_alias("idx", "idx__a", None)
    for bad, why in (('{"aliases": {"idx": "idx__a"', "Expecting"), ('{"other": 1}', "'aliases'"),
                     ('{"aliases": ["idx"]}', "expected {alias: collection} names")):
        (folder / "aliases.json").write_text(bad)
        for who in (store, open_reader(folder)):
            with pytest.raises(CorruptAliasesError) as info:
                who.count("idx")
            assert str(info.value).startswith(f"`{folder / 'aliases.json'}` is not a valid alias file ("), str(info.value)
            assert why in str(info.value) and str(info.value).endswith(
                "); run `reindex status` to rewrite it from the state store's live records")
    with pytest.raises(VectorStoreError, match="no collection idx__gone"):
        store.restore_aliases({"idx": "idx__gone"})
    assert store.restore_aliases({"idx": "idx__a"}) == {"idx": "idx__a"}
    assert open_reader(folder).count("idx") == 5
    store.close()


def test_a_full_disk_is_one_line_saying_so_not_a_retry_later() -> None:
    """Issue 22: a write that fails for lack of space (Python's OSError or the engine's "os error 28") is one
    line saying the disk is full and that finished work is kept; other I/O errors stay transient."""
    import errno

    from reindex.errors import TransientError
    from reindex.adapters.stores.edge._engine import edge_errors as _edge_errors

    full = ("Embedded store ran out of disk during upsert into `c` (no space left on device): free some space and "
            "run the command again (finished work is kept)")
    for exc in (OSError(errno.ENOSPC, "No space left on device"),
                RuntimeError("Service runtime error: Failed to save structure on disk with error: No space left on "
                             "device (os error 28)")):
        with pytest.raises(VectorStoreError) as info, _edge_errors("upsert into `c`"):
            raise exc
        assert str(info.value) == full and not isinstance(info.value, TransientError)
    with pytest.raises(TransientError, match="I/O failed during upsert"), _edge_errors("upsert"):
        raise OSError(errno.EIO, "Input/output error")
    # Issue 33: the engine's optimiser checks its own room (measured on a full tmpfs and ext4): its numbers, one line.
    with pytest.raises(VectorStoreError) as info, _edge_errors("index collection `c`"):
        raise RuntimeError("Service runtime error: Not enough space available for optimization, needed: 81.77 MiB, "
                           "available: 512.00 KiB")
    assert str(info.value) == ("Embedded store ran out of disk during index collection `c` (the engine needed: "
                               "81.77 MiB, available: 512.00 KiB): free some space and run the command again "
                               "(finished work is kept)")


def test_a_reader_holding_a_collection_deleted_and_made_again_under_its_name_reads_the_new_one(tmp_path: Path) -> None:
    """gc deletes a population and a later apply makes it again: same name, same generation number, new
    data. A reader that held the old generation must not go on answering from its deleted files."""
    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("c", dimension=DIM, distance="dot")
    store.upsert("c", _points(4, pop="a", version=1, seed=1))
    store.publish("c")
    reader = open_reader(folder)
    assert reader.count("c") == 4
    store.delete_collection("c")
    store.create_collection("c", dimension=DIM, distance="dot")
    store.upsert("c", _points(7, pop="a", version=2, seed=2))
    store.publish("c")
    assert (folder / "collections" / "c" / "gen-000001").is_dir()  # the same generation name as before
    assert reader.count("c") == 7
    reader.close()
    store.close()


# --------------------------------------------------------------------------------------------
# In-place syncs in O(edit): delta generations
# --------------------------------------------------------------------------------------------


def _digests(gen: Path) -> dict[str, str]:
    """md5 of every segment file of a generation (what readers map; edge_config.json is replaced, by rename,
    by the engine's load itself)."""
    import hashlib

    return {str(p.relative_to(gen)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted((gen / "segments").rglob("*")) if p.is_file()}


def _padded(points: list[Point], seed: int) -> list[Point]:
    """The points with ~2 KB of incompressible text in their payloads."""
    rng = np.random.default_rng(seed)
    return [Point(p.id, p.vector, {**p.payload, "text": rng.bytes(1000).hex()}) for p in points]


def _sealed_store(folder: Path, monkeypatch: pytest.MonkeyPatch, n: int = 1500, pad: bool = False) -> list[Point]:
    """A published collection `c` (alias `idx`) of ``n`` points, indexed into sealed segments (the indexing
    threshold lowered so that a few hundred 16-dim points pass it); ``pad``: ~2 KB payloads."""
    from reindex.adapters.stores.edge import _engine

    monkeypatch.setattr(_engine, "INDEXING_THRESHOLD_KB", 20)
    store = open_edge_store(folder)
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    store.create_payload_index("c", "doc_id")
    points = _points(n, pop="a", version=1, seed=1)
    points = _padded(points, 0) if pad else points
    store.upsert("c", points)
    store.finish_bulk("c")
    store.swap_alias("idx", "c", None)
    store.close()
    return points


def _published_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[Point], Path, dict, Any]:
    """A sealed store with a reader on it: (folder, points, the collection's folder, the digests of every
    file of its published generation, the reader)."""
    folder = tmp_path / "store"
    points = _sealed_store(folder, monkeypatch)
    coll = folder / "collections" / "c"
    return folder, points, coll, _digests(coll / "gen-000001"), open_reader(folder)


def test_a_sync_shares_the_sealed_segments_and_never_changes_a_file_readers_have(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, points, coll, published, reader = _published_and_read(tmp_path, monkeypatch)
    assert reader.count("idx") == 1500

    store = open_edge_store(folder)
    store.upsert("c", _points(20, pop="a", version=2, seed=2))  # replaces 20 points of the sealed segment
    store.delete_points("c", [p.id for p in points[100:105]])
    store.overwrite_payload("c", {points[200].id: {"doc_id": "moved", "pop": "a", "version": 3}})
    store.create_payload_index("c", "version", "integer")
    assert store.derived is not None
    # The vectors, HNSW graph and payload pages are shared, not copied: the copy is a small part.
    assert store.derived["linked"] > 4 * store.derived["copied"], store.derived
    shared = [p for p in (coll / "gen-000002").rglob("*") if p.is_file() and p.stat().st_nlink == 2]
    assert any(p.name == "matrix.dat" for p in shared) and any(p.parent.name == "vector_index" for p in shared)
    assert reader.count("idx") == 1500 and reader.count("idx", doc_id="moved") == 0  # not published yet
    assert _digests(coll / "gen-000001") == published  # not one byte readers map has changed
    store.close()  # publishes (and compacts past the thresholds)

    assert _digests(coll / "gen-000001") == published  # still held by the reader: untouched
    assert reader.count("idx") == 1495 and reader.count("idx", doc_id="moved") == 1
    versions = {p.id: p.payload["version"] for p in reader.retrieve("idx", [p.id for p in points[:20]],
                                                                     with_vectors=False)}
    assert versions == {p.id: 2 for p in points[:20]}
    reader.close()
    open_edge_store(folder).close()  # sweeps generation 1 (links removed: generation 2 keeps the files)
    assert not (coll / "gen-000001").exists()
    again = open_reader(folder)
    assert again.count("idx") == 1495 and len(again.query("idx", np.ones(DIM), limit=5)) == 5
    again.close()


def test_prepare_writes_opens_the_delta_generation_without_loading_the_published_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An in-place sync reads the points it replaces, then writes: with prepare_writes first, the writer
    # loads one generation (the delta) instead of the published one and then the delta.
    from reindex.adapters.stores import edge
    from reindex.adapters.stores.edge import _engine

    loaded: list[str] = []
    real = _engine.load
    monkeypatch.setattr(_engine, "load", lambda path: (loaded.append(Path(path).name), real(path))[1])
    folder, points, coll, published, reader = _published_and_read(tmp_path, monkeypatch)
    loaded.clear()  # (building the store and the reader's own view loaded generations too)

    estimate = edge.generation_copy_bytes(folder, "c")  # what apply's free-disk check asks for
    store = open_edge_store(folder)
    store.prepare_writes("idx")  # through the alias, as apply names the target
    assert loaded == ["gen-000002"] and store.derived is not None
    shared = sum(p.stat().st_blocks * 512 for p in (coll / "gen-000002").rglob("*") if p.is_file() and p.stat().st_nlink > 1)
    # The estimate is what the delta copies: at least that, and nothing of the files it shares.
    assert store.derived["copied"] <= estimate < shared, (estimate, store.derived, shared)
    assert len(store.retrieve("c", [p.id for p in points[:3]])) == 3
    store.upsert("c", _points(5, pop="a", version=2, seed=2))
    store.delete_points("c", [points[100].id])
    store.prepare_writes("c")  # already writable: nothing more
    assert loaded == ["gen-000002"]
    assert reader.count("idx") == 1500 and _digests(coll / "gen-000001") == published
    store.close()
    assert _digests(coll / "gen-000001") == published
    assert reader.count("idx") == 1499
    versions = {p.payload["version"] for p in reader.retrieve("idx", [p.id for p in points[:5]], with_vectors=False)}
    assert versions == {2}
    reader.close()


def test_many_syncs_keep_the_segment_count_and_the_disk_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.adapters.stores.edge import _engine

    monkeypatch.setattr(_engine, "SEGMENT_NUMBER", 3)  # the merge bound, low enough to be reached in a few syncs
    folder = tmp_path / "store"
    _sealed_store(folder, monkeypatch, pad=True)

    def disk() -> int:
        return sum(p.stat().st_blocks * 512 for p in (folder / "collections").rglob("*") if p.is_file())

    built = disk()
    rng = np.random.default_rng(7)
    copied, segments, disks = [], [], []
    for sync in range(7):  # each replaces 15 % of the points: a whole rewrite of the index in all
        start = int(rng.integers(0, 1500 - 225))
        store = open_edge_store(folder)
        # ~2 KB payloads: without compaction the appendable segment, copied by every sync, would grow each time.
        store.upsert("c", _padded(_points(225, pop="a", version=10 + sync, seed=100 + sync, start=start), sync))
        copied.append(store.derived["copied"])
        store.publish("c")  # compacts; the writer still has the shard open
        reader = open_reader(folder)
        info = reader.collection_info("idx")
        gen = json.loads((folder / "collections" / "c" / "collection.json").read_text())["published"]
        # What readers load holds the live segments only (replaced ones' folders are gone before publishing).
        assert len(list((folder / "collections" / "c" / f"gen-{gen:06d}" / "segments").iterdir())) == \
            info["segments_count"]
        store.close()
        disks.append(disk())
        segments.append(info["segments_count"])
        assert info["points_count"] == 1500
        reader.close()
    assert max(segments) <= 3 + 1, segments  # the merge keeps it at the bound (+ the appendable segment)
    # Neither the disk nor the copy grows with the number of syncs: the last ones are no bigger than the first.
    assert max(disks[-3:]) <= 1.25 * max(disks[:4]), (built, disks)
    assert max(copied[-3:]) <= 1.5 * max(copied[:2]), copied
    reader = open_reader(folder)
    assert reader.count("idx") == 1500 and reader.collection_info("idx")["indexed_vectors_count"] > 0
    reader.close()


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_the_sparse_copy_keeps_holes_and_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel_copy: bool) -> None:
    """A preallocated engine file (32 MB, a few KB written) costs what it holds, with or without copy_file_range."""
    import errno
    import os

    from reindex.adapters.stores.edge import _generations

    if not kernel_copy:
        def no_copy_file_range(*_a: object) -> int:
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(_generations.os, "copy_file_range", no_copy_file_range)
    src, dst = tmp_path / "page_0.dat", tmp_path / "copy.dat"
    with open(src, "wb") as f:
        f.truncate(32 << 20)
        f.seek(5 << 20)
        f.write(b"x" * 10_000)
        f.seek((32 << 20) - 3)
        f.write(b"end")
    copied = _generations.copy_sparse(src, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert 10_003 <= copied <= 64 << 10  # the data extents (file-system blocks), not the 32 MB
    assert os.stat(dst).st_blocks * 512 <= 128 << 10


_KILLED_SYNC = """
import os, signal, sys, uuid
import numpy as np
from reindex.adapters.stores.edge import open_edge_store
from reindex.adapters.stores.vectors import Point
rng = np.random.default_rng(5)
points = [Point(str(uuid.uuid5(uuid.NAMESPACE_URL, f"a/{i}")), rng.standard_normal(16).astype(np.float32),
                {"doc_id": f"d{i // 5}", "pop": "a", "version": 2}) for i in range(40)]
store = open_edge_store(sys.argv[1])
store.upsert("c", points[:20])  # derives generation 2 and writes into it, durably
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)  # before the rest and before publishing
store.upsert("c", points[20:])
store.delete_points("c", [str(uuid.uuid5(uuid.NAMESPACE_URL, "a/500"))])
store.close()
"""


def _run_sync(folder: Path, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _KILLED_SYNC, str(folder), how], capture_output=True, text=True,
                          timeout=120)


def test_a_sync_killed_in_its_delta_generation_is_never_seen_and_resumes_to_the_uninterrupted_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    _sealed_store(killed, monkeypatch, n=600)
    shutil.copytree(killed, reference)
    assert _run_sync(reference, "finish").returncode == 0
    coll = killed / "collections" / "c"
    published = _digests(coll / "gen-000001")

    r = _run_sync(killed, "kill")
    assert r.returncode == -9, r.stderr
    assert (coll / "gen-000002").is_dir()  # the delta generation, half written, unpublished
    reader = open_reader(killed)
    assert reader.count("idx") == 600 and {p.payload["version"] for p in reader.scroll("idx")} == {1}
    assert _digests(coll / "gen-000001") == published

    assert _run_sync(killed, "finish").returncode == 0  # the next writer continues generation 2
    assert reader.count("idx") == 599
    want = {p.id: (p.vector, p.payload) for p in open_reader(reference).scroll("idx", with_vectors=True)}
    got = {p.id: (p.vector, p.payload) for p in reader.scroll("idx", with_vectors=True)}
    assert got.keys() == want.keys()
    assert all(np.allclose(got[k][0], want[k][0]) and got[k][1] == want[k][1] for k in want)
    reader.close()


def test_a_half_derived_generation_is_swept_and_the_published_one_kept(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill while the links and copies are being made leaves `gen-000002.tmp`: the next writer removes it
    (unlinking the shared files' second names) and the published generation is whole."""
    from reindex.adapters.stores.edge import _generations

    folder = tmp_path / "store"
    _sealed_store(folder, monkeypatch, n=600)
    coll = folder / "collections" / "c"
    published = _digests(coll / "gen-000001")
    _generations.derive_generation(coll / "gen-000001", coll / "gen-000002.tmp")
    store = open_edge_store(folder)
    assert not (coll / "gen-000002.tmp").exists() and _digests(coll / "gen-000001") == published
    store.upsert("c", _points(3, pop="a", version=9, seed=9))
    store.close()
    reader = open_reader(folder)
    assert reader.count("idx") == 600 and reader.count("idx", doc_id="d0") == 5
    reader.close()


def test_an_int8_store_builds_quantised_segments_and_finds_the_nearest_points(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.adapters.stores.edge import _engine

    monkeypatch.setattr(_engine, "INDEXING_THRESHOLD_KB", 20)
    folder = tmp_path / "store"
    store = open_vector_store(None, str(folder), quantization="int8")
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    points = _points(600, pop="a", version=1, seed=1)
    store.upsert("c", points)
    store.finish_bulk("c")
    store.swap_alias("idx", "c", None)
    store.close()
    configs = [json.loads(p.read_text()) for p in (folder / "collections" / "c").glob("gen-*/segments/*/segment.json")]
    sealed = [c for c in configs if c["config"]["vector_data"][""]["index"]["type"] == "hnsw"]
    assert sealed and all(c["config"]["vector_data"][""]["quantization_config"] for c in sealed)
    reader = open_reader(folder)
    for p in points[:20]:  # a stored vector's nearest point is itself, through the quantised search
        assert reader.query("idx", p.vector, limit=1)[0].id == p.id
    reader.close()
    plain = tmp_path / "plain"
    s = open_vector_store(None, str(plain))
    s.create_collection("c", dimension=DIM, distance="cosine")
    s.upsert("c", points[:10])
    s.finish_bulk("c")
    s.close()
    assert not any(json.loads(p.read_text())["config"]["vector_data"][""]["quantization_config"]
                   for p in (plain / "collections" / "c").glob("gen-*/segments/*/segment.json"))
    with pytest.raises(VectorStoreError, match="Unknown store.quantization `int4`"):
        open_vector_store(None, str(plain), quantization="int4")


def test_oversampling_wins_back_the_recall_an_int8_search_loses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """store.oversampling: a quantised search takes k × oversampling int8 candidates and rescores them with
    the float32 originals. On vectors whose neighbours differ by a few int8 steps, the default search
    (k candidates by the int8 copy) misses true neighbours; oversampling 8 finds them, in the writer's and in
    a reader's searches, and the store config carries it."""
    from reindex.domain import config as config_mod
    from reindex.adapters.stores.edge import _engine

    monkeypatch.setattr(_engine, "INDEXING_THRESHOLD_KB", 20)
    rng = np.random.default_rng(3)
    base = rng.standard_normal(DIM)
    vecs = (base + 0.4 * rng.standard_normal((1500, DIM))).astype(np.float32)  # one tight cluster
    points = [Point(str(uuid.uuid5(uuid.NAMESPACE_URL, f"o/{i}")), vecs[i], {"doc_id": f"d{i // 5}"})
              for i in range(len(vecs))]
    folder = tmp_path / "store"
    store = open_vector_store(None, str(folder), quantization="int8")
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    store.upsert("c", points)
    store.finish_bulk("c")
    store.swap_alias("idx", "c", None)
    store.close()
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    queries = (base + 0.4 * rng.standard_normal((40, DIM))).astype(np.float32)

    def recall(s) -> float:
        hit = 0
        for q in queries:
            truth = {points[i].id for i in np.argsort(-(unit @ (q / np.linalg.norm(q))))[:10]}
            hit += len(truth & {h.id for h in s.query("idx", q, limit=10)})
        return hit / (10 * len(queries))

    plain, over = open_reader(folder), open_reader(folder, oversampling=8)
    r_plain, r_over = recall(plain), recall(over)
    plain.close()
    over.close()
    writer = open_vector_store(None, str(folder), quantization="int8", oversampling=8)
    r_writer = recall(writer)
    writer.close()
    assert r_plain < 0.95 and r_over >= 0.99 and r_writer >= 0.99, (r_plain, r_over, r_writer)
    assert config_mod.StoreConfig(quantization="int8", oversampling=4).oversampling == 4.0
    with pytest.raises(ValueError):
        config_mod.StoreConfig(oversampling=0.5)


def test_the_plan_prices_an_int8_store_in_its_footprint(tmp_path: Path) -> None:
    """store.quantization int8: a serving population's search RAM holds 1 byte per component instead of 4,
    its disk the float32 originals and the int8 copy (the build still maps the float32 vectors)."""
    from helpers_index import Workspace

    from reindex import api

    serving = {}
    for q in ("none", "int8"):
        ws = Workspace(tmp_path / q, extra=f"store: {{quantization: {q}}}")
        plan, _ = api.make_plan(ws.config, out=ws.plans)
        serving[q] = plan.body["cost"]["footprint"]["new"]  # the new population as it serves
        n = plan.body["work"]["chunks_new"]
    d = 384
    assert serving["none"]["ram_bytes"] - serving["int8"]["ram_bytes"] == n * d * 3  # 4 bytes → 1 per component
    assert serving["int8"]["disk_bytes"] - serving["none"]["disk_bytes"] == n * d  # + the quantised copy


def test_a_shadow_shared_while_it_builds_is_read_by_readers_as_it_grows_with_no_alias_moved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 42: a build shares what its shadow holds so far (a cascade's readers read its vectors there); a reader
    # keeps the generation it has until the next share; the build goes on in a derived generation.
    from reindex.adapters.stores.edge import _writer

    folder = tmp_path / "store"
    store = open_edge_store(folder)
    store.create_collection("live", dimension=DIM, distance="cosine")
    store.upsert("live", _points(10, pop="l", version=1, seed=1))
    store.swap_alias("idx", "live", None)
    store.create_collection("shadow", dimension=DIM, distance="cosine", bulk=True)
    first = _points(40, pop="s", version=1, seed=2)
    store.upsert("shadow", first)
    reader = open_reader(folder)
    with pytest.raises(VectorStoreError, match="not been published"):
        reader.count("shadow")  # nothing shared yet: a reader cannot see a shadow being built
    assert store.share("shadow") is None
    assert reader.count("shadow") == 40 and store.list_aliases() == {"idx": "live"}
    store.upsert("shadow", _points(20, pop="s", version=1, seed=3, start=40))  # the build goes on
    assert reader.count("shadow") == 40 and store.count("shadow") == 60  # readers keep what was shared
    assert store.share("shadow") is None and store.share("shadow") is None  # (twice: nothing new, nothing done)
    got = reader.retrieve("shadow", [p.id for p in first[:3]], with_vectors=True)
    assert reader.count("shadow") == 60 and len(got) == 3 and all(p.vector is not None for p in got)
    assert reader.count("idx") == 10
    # No room for the copy the next write makes: nothing is published, and the reason says so.
    store.upsert("shadow", _points(5, pop="s", version=1, seed=4, start=60))
    monkeypatch.setattr(_writer, "free_bytes", lambda _path: 0)
    why = store.share("shadow")
    assert why is not None and "not published for readers" in why and "MiB is free" in why
    assert reader.count("shadow") == 60
    store.close()  # the writer's close publishes what readers already know, as for an in-place sync
    assert reader.count("shadow") == 65
    reader.close()
