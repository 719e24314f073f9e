"""The vector store against both real embedded backends (``edge``: qdrant-edge, the default; ``local``:
qdrant-client local mode) in tmp folders, killed writer processes, and a loopback HTTP server that
answers like a failing Qdrant server."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from reindex.errors import TransientError
from reindex.adapters.stores.opening import open_vector_store
from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.adapters.stores.qdrant import Hit, Point, QdrantStore, VectorStore, VectorStoreError

DIM = 8


def _points(n: int, *, doc: str = "doc", seed: int = 0, start: int = 0) -> list[Point]:
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [
        Point(str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc}/{start + i}")), vecs[i], {"doc_id": doc, "ordinal": start + i})
        for i in range(n)
    ]


BACKENDS = ["edge", "local"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(tmp_path: Path, backend: str) -> Iterator[QdrantStore]:
    s = open_vector_store(None, str(tmp_path / "qdrant"), backend=backend)
    assert isinstance(s, VectorStore)
    yield s  # type: ignore[misc]
    s.close()


def test_round_trip(store: QdrantStore) -> None:
    store.create_collection("idx__a", dimension=DIM, distance="cosine", bulk=True)
    store.create_payload_index("idx__a", "doc_id")  # a no-op in local mode, but must not fail
    a, b = _points(5, doc="a"), _points(3, doc="b", seed=1)
    store.upsert("idx__a", a)
    store.upsert("idx__a", [Point(p.id, p.vector.tolist(), p.payload) for p in b])  # list vectors too
    store.finish_bulk("idx__a")

    assert store.collection_exists("idx__a") and not store.collection_exists("idx")
    assert store.count("idx__a") == 8
    assert store.count("idx__a", doc_id="a") == 5 and store.count("idx__a", doc_id="zzz") == 0
    info = store.collection_info("idx__a")
    assert (info["points_count"], info["dimension"], info["distance"]) == (8, DIM, "cosine")

    missing = str(uuid.uuid4())
    got = {p.id: p for p in store.retrieve("idx__a", [a[0].id, missing, b[2].id])}
    assert set(got) == {a[0].id, b[2].id}
    np.testing.assert_allclose(got[a[0].id].vector, a[0].vector, rtol=1e-6)
    assert got[b[2].id].payload == {"doc_id": "b", "ordinal": 2}
    assert all(p.vector is None for p in store.retrieve("idx__a", [a[0].id], with_vectors=False))

    hits = store.query("idx__a", a[3].vector, limit=3)
    assert isinstance(hits[0], Hit) and hits[0].id == a[3].id and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert len(hits) == 3 and hits[0].score >= hits[1].score >= hits[2].score
    only_b = store.query("idx__a", a[3].vector, limit=10, doc_id="b")  # filtered: one document's points
    assert sorted(h.id for h in only_b) == sorted(p.id for p in b)
    assert store.query("idx__a", a[3].vector, limit=10, doc_id="zzz") == []

    store.upsert("idx__a", [Point(a[0].id, a[1].vector, {"doc_id": "a", "ordinal": 99})])  # same id replaces
    store.delete_points("idx__a", [a[1].id, missing])
    scrolled = {p.id: p for p in store.scroll("idx__a", with_vectors=True, batch=3)}
    assert len(scrolled) == 7 and a[1].id not in scrolled
    assert scrolled[a[0].id].payload["ordinal"] == 99
    np.testing.assert_allclose(scrolled[a[0].id].vector, a[1].vector, rtol=1e-6)
    assert all(p.vector is None for p in store.scroll("idx__a"))


def test_aliases_swap_atomically_and_guard_their_collection(store: QdrantStore) -> None:
    for name in ("idx__old", "idx__new"):
        store.create_collection(name, dimension=DIM, distance="dot")
    store.upsert("idx__old", _points(2, doc="old"))
    store.upsert("idx__new", _points(4, doc="new", seed=2))

    store.swap_alias("idx", "idx__old", None)  # creates
    assert store.get_alias("idx") == "idx__old" and store.count("idx") == 2
    assert store.get_alias("idx__old") is None  # a collection is not an alias

    with pytest.raises(VectorStoreError, match="points at `idx__old`, not `idx__x`"):
        store.swap_alias("idx", "idx__new", "idx__x")
    assert store.get_alias("idx") == "idx__old"

    store.swap_alias("idx", "idx__new", "idx__old")  # moves
    store.swap_alias("idx", "idx__new", "idx__old")  # a retried swap is a no-op
    assert store.list_aliases() == {"idx": "idx__new"}
    assert store.count("idx") == 4 and store.query("idx", _points(1, doc="new", seed=2)[0].vector, limit=1)

    with pytest.raises(VectorStoreError, match="alias `idx` points at"):
        store.delete_collection("idx__new")
    store.delete_collection("idx__old")
    store.delete_collection("idx__old")  # already gone: nothing to do
    assert store.list_collections() == ["idx__new"]

    store.delete_alias("idx")
    store.delete_alias("idx")
    assert store.list_aliases() == {} and store.get_alias("idx") is None
    store.delete_collection("idx__new")
    assert store.list_collections() == []


def test_bad_input_is_a_one_line_error(store: QdrantStore) -> None:
    with pytest.raises(VectorStoreError, match="Unknown distance"):
        store.create_collection("c", dimension=DIM, distance="hamming")
    store.create_collection("c", dimension=DIM, distance="cosine")
    with pytest.raises(VectorStoreError, match="Unknown payload index kind"):
        store.create_payload_index("c", "doc_id", "geo-ish")
    with pytest.raises(VectorStoreError, match="has no vector"):
        store.upsert("c", [Point(str(uuid.uuid4()), None, {})])
    with pytest.raises(VectorStoreError) as err:
        store.count("nope")
    assert "\n" not in str(err.value) and "nope" in str(err.value)
    # a bad point in a batch rejects the whole batch
    good = _points(3)
    bad = Point(str(uuid.uuid4()), np.ones(DIM + 1, dtype=np.float32), {})
    with pytest.raises(VectorStoreError):
        store.upsert("c", [*good, bad])
    assert store.count("c") == 0


def test_failed_write_rolls_back_the_whole_batch_in_memory_and_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local mode only: a write that fails half-way through a batch leaves nothing of it."""
    import sqlite3

    from qdrant_client.local.persistence import CollectionPersistence

    folder = tmp_path / "q"
    store = open_vector_store(None, str(folder), backend="local")
    store.create_collection("c", dimension=DIM, distance="cosine")
    store.upsert("c", _points(4))
    real, calls = CollectionPersistence.persist, [0]

    def flaky(self: CollectionPersistence, point: object) -> None:
        calls[0] += 1
        if calls[0] == 6:
            raise sqlite3.OperationalError("disk I/O error")
        real(self, point)

    monkeypatch.setattr(CollectionPersistence, "persist", flaky)
    batch = _points(10, start=4)
    with pytest.raises(TransientError, match="disk I/O error"):
        store.upsert("c", batch)
    assert store.count("c") == 4  # the 5 points written before the failure were undone in memory too
    monkeypatch.setattr(CollectionPersistence, "persist", real)
    store.upsert("c", batch)  # a retry works
    assert store.count("c") == 14
    store.close()
    reopened = open_vector_store(None, str(folder), backend="local")
    assert reopened.count("c") == 14
    reopened.close()


def test_reopen_keeps_points_and_aliases(tmp_path: Path, backend: str) -> None:
    folder = tmp_path / "nested" / "qdrant"  # created on open
    store = open_vector_store(None, str(folder), backend=backend)
    store.create_collection("idx__a", dimension=DIM, distance="euclid")
    pts = _points(50)
    store.upsert("idx__a", pts)
    store.delete_points("idx__a", [pts[0].id])
    store.swap_alias("idx", "idx__a", None)
    store.close()
    store.close()  # idempotent

    store = open_vector_store(None, str(folder), backend=backend)
    try:
        assert store.get_alias("idx") == "idx__a"
        assert store.collection_info("idx")["distance"] == "euclid"
        got = {p.id: p for p in store.retrieve("idx", [p.id for p in pts])}
        assert len(got) == 49 and pts[0].id not in got
        for p in pts[1:]:
            assert np.array_equal(np.asarray(got[p.id].vector, dtype=np.float32), p.vector)
            assert got[p.id].payload == p.payload
        store.upsert("idx__a", _points(5, doc="later"))  # still writable after reopening
        assert store.count("idx__a") == 54
    finally:
        store.close()


def test_second_opener_gets_a_clear_error(store: QdrantStore, tmp_path: Path, backend: str) -> None:
    folder = tmp_path / "qdrant"
    with pytest.raises(VectorStoreError) as err:
        open_vector_store(None, str(folder), backend=backend)
    message = str(err.value)
    assert str(folder) in message and "another reindex process" in message and "\n" not in message


def test_no_url_and_no_path_is_an_error() -> None:
    with pytest.raises(VectorStoreError, match="store.url"):
        open_vector_store(None, None)


# --------------------------------------------------------------------------------------------
# Durability: kill -9 a writer mid-way
# --------------------------------------------------------------------------------------------

BATCH = 64
_WRITER = f"""
import os, signal, sys, uuid
import numpy as np
from reindex.adapters.stores.opening import open_vector_store
from reindex.adapters.stores.vectors import Point
B, DIM = {BATCH}, 32
backend, crash_in_batch, stop_after = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def batch(b):
    vecs = np.random.default_rng(b).standard_normal((B, DIM)).astype(np.float32)
    return [Point(str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{{b}}.{{i}}")), vecs[i], {{"doc_id": f"d{{b}}", "i": i, "text": "x" * 1000}})
            for i in range(B)]

store = open_vector_store(None, sys.argv[1], backend=backend)
if crash_in_batch:
    # A crash point inside the next batch: the engine has taken the points, the commit has not happened.
    if backend == "edge":
        from reindex.adapters.stores.edge import EdgeStore
        def _apply(self, o, op, action, size=0):
            o.shard.update(op)
            os.kill(os.getpid(), signal.SIGKILL)
        EdgeStore._apply = _apply
    else:
        from qdrant_client.local.persistence import CollectionPersistence
        real, calls = CollectionPersistence.persist, [0]
        def persist(self, point):
            calls[0] += 1
            if calls[0] == B // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            real(self, point)
        CollectionPersistence.persist = persist
if not store.collection_exists("c"):
    store.create_collection("c", dimension=DIM, distance="dot")
done = store.count("c")
for b in range(done // B, done // B + stop_after):  # a partial batch (edge, killed in a flush) is rewritten
    store.upsert("c", batch(b))
    print((b + 1) * B, flush=True)
store.close()
"""


def _expected_batch(b: int) -> list[Point]:
    vecs = np.random.default_rng(b).standard_normal((BATCH, 32)).astype(np.float32)
    return [
        Point(str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{b}.{i}")), vecs[i], {"doc_id": f"d{b}", "i": i, "text": "x" * 1000})
        for i in range(BATCH)
    ]


def _check_acked(folder: Path, backend: str, acked: int) -> int:
    store = open_vector_store(None, str(folder), backend=backend)
    try:
        n = store.count("c")
        assert n % BATCH == 0 and n >= acked, (n, acked)
        ids = [p.id for b in range(acked // BATCH) for p in _expected_batch(b)]
        got = {p.id: p for p in store.retrieve("c", ids)}
        assert len(got) == acked
        for b in range(acked // BATCH):
            for p in _expected_batch(b):
                assert np.array_equal(np.asarray(got[p.id].vector, dtype=np.float32), p.vector)
                assert got[p.id].payload == p.payload
        return n
    finally:
        store.close()


def test_kill_9_inside_a_batch_loses_no_acknowledged_batch_and_keeps_none_of_the_killed_one(
    tmp_path: Path, backend: str
) -> None:
    """A deterministic crash point inside a batch (after the engine took the points, before the commit)."""
    folder = tmp_path / "q"
    acked = 0
    for _round in range(2):
        clean = subprocess.run([sys.executable, "-c", _WRITER, str(folder), backend, "0", "3"],
                               capture_output=True, text=True, timeout=120)  # three acknowledged batches
        assert clean.returncode == 0, clean.stderr[-2000:]
        acked = int(clean.stdout.split()[-1])
        crashing = subprocess.run([sys.executable, "-c", _WRITER, str(folder), backend, "1", "3"],
                                  capture_output=True, text=True, timeout=120)
        assert crashing.returncode == -signal.SIGKILL, crashing.stderr[-2000:]
        assert crashing.stdout.split() == []  # it died inside its first batch: nothing acknowledged
        assert _check_acked(folder, backend, acked) == acked  # the killed batch left nothing


def test_kill_9_at_random_moments_loses_no_acknowledged_point(tmp_path: Path, backend: str) -> None:
    folder = tmp_path / "q"
    rng = np.random.default_rng(7)
    acked = 0
    for _round in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(folder), backend, "0", "100000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        target = acked + BATCH * int(rng.integers(3, 12))
        for line in proc.stdout:
            acked = max(acked, int(line))
            if acked >= target:
                break
        proc.send_signal(signal.SIGKILL)  # most likely in the middle of the next upsert
        rest, err = proc.communicate(timeout=30)
        acked = max([acked, *(int(x) for x in rest.split())])
        assert proc.returncode == -signal.SIGKILL, err[-2000:]

        store = open_vector_store(None, str(folder), backend=backend)
        try:
            n = store.count("c")
            assert n >= acked, (n, acked)
            if backend == "local":  # one SQLite transaction per call: never part of a batch
                assert n % BATCH == 0, (n, acked)
            ids = [p.id for b in range(acked // BATCH) for p in _expected_batch(b)]
            got = {p.id: p for p in store.retrieve("c", ids)}
            assert len(got) == acked
            for b in range(acked // BATCH):
                for p in _expected_batch(b):
                    assert np.array_equal(np.asarray(got[p.id].vector, dtype=np.float32), p.vector)
                    assert got[p.id].payload == p.payload
        finally:
            store.close()
    assert acked >= 3 * 3 * BATCH


# --------------------------------------------------------------------------------------------
# A server URL: failures map to TransientError / VectorStoreError, the API key stays out
# --------------------------------------------------------------------------------------------


class _Failing(http.server.BaseHTTPRequestHandler):
    status = 503

    def _answer(self) -> None:
        body = json.dumps({"status": {"error": "sekrit-free failure"}, "time": 0}).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_server() -> Iterator[tuple[str, type[_Failing]]]:
    handler = type("Handler", (_Failing,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_server_errors_are_classified_and_never_show_the_key(
    failing_server: tuple[str, type[_Failing]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = failing_server
    monkeypatch.setenv("REINDEX_TEST_QDRANT_KEY", "sekrit-key-123")
    store = open_vector_store(url, None, api_key_env="REINDEX_TEST_QDRANT_KEY")
    try:
        for status, kind in ((503, TransientError), (429, TransientError), (400, VectorStoreError), (404, VectorStoreError)):
            handler.status = status
            with pytest.raises(kind) as err:
                store.count("idx")
            assert str(status) in str(err.value) and "sekrit-key" not in str(err.value) and "\n" not in str(err.value)
    finally:
        store.close()

    dead = open_vector_store("http://127.0.0.1:9", None)  # nothing listens on the discard port
    with pytest.raises(TransientError, match="Cannot reach Qdrant"):
        dead.list_collections()
    dead.close()


# --------------------------------------------------------------------------------------------
# Local mode: the batched-commit path is verified at open; another qdrant-client falls back, warned once
# --------------------------------------------------------------------------------------------


def test_batched_commit_self_check_and_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sqlite3

    from qdrant_client.local.persistence import CollectionPersistence

    from reindex.adapters.stores import qdrant as q

    monkeypatch.setattr(q, "_BATCHING", {})
    assert q.batched_commit_available()  # qdrant-client 1.20.0, as pinned

    def persist_like_1_19(self: CollectionPersistence, point: object) -> None:  # commits by itself
        self.storage.execute("INSERT OR REPLACE INTO points VALUES (?, ?)", (b"k", sqlite3.Binary(b"v")))
        self.storage.commit()

    with monkeypatch.context() as m:
        m.setattr(q, "_BATCHING", {})
        m.setattr(CollectionPersistence, "persist", persist_like_1_19)
        with caplog.at_level("WARNING", logger=q.__name__):
            assert not q.batched_commit_available()
            assert not q.batched_commit_available()  # checked once per process
        warnings_ = [r for r in caplog.records if "fall back to one commit per point" in r.getMessage()]
        assert len(warnings_) == 1
        store = open_vector_store(None, str(tmp_path / "q"), backend="local")
        store.create_collection("c", dimension=DIM, distance="dot")
        conn = store._batch_connection("c")  # type: ignore[attr-defined]
        assert conn is None  # the stock path: no proxy installed
        store.close()
    monkeypatch.setattr(q, "_BATCHING", {})
    store = open_vector_store(None, str(tmp_path / "q2"), backend="local")
    store.create_collection("c", dimension=DIM, distance="dot")
    assert store._batch_connection("c") is not None  # type: ignore[attr-defined]
    store.upsert("c", _points(3))
    assert store.count("c") == 3
    store.close()


def test_local_mode_metadata_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Aliases and collections (meta.json) are fsynced, file and folder, before the call returns."""
    import reindex.adapters.stores.qdrant as q

    synced: list[str] = []
    real_fsync, real_dir = os.fsync, q.fsync_dir
    monkeypatch.setattr(q.os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1])
    monkeypatch.setattr(q, "fsync_dir", lambda d: (synced.append(f"dir:{d}"), real_dir(d))[1])
    store = open_vector_store(None, str(tmp_path / "q"), backend="local")
    want = [str(tmp_path / "q" / "meta.json"), f"dir:{tmp_path / 'q'}"]
    synced.clear()
    store.create_collection("c", dimension=DIM, distance="dot")
    assert synced[:2] == want
    synced.clear()
    store.swap_alias("idx", "c", None)
    assert synced[:2] == want
    store.close()


def test_local_mode_commits_are_durable_wal_with_synchronous_full(tmp_path: Path) -> None:
    """``synchronous=FULL``: a committed batch is fsynced (OFF or NORMAL would lose it on power loss)."""
    store = open_vector_store(None, str(tmp_path / "q"), backend="local")
    store.create_collection("c", dimension=DIM, distance="dot")
    store.upsert("c", _points(3))
    conn = store._batch_connection("c")  # type: ignore[attr-defined]
    assert conn is not None
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_an_int8_server_store_creates_collections_with_scalar_quantisation() -> None:
    """What a server receives (the client is in-memory: it accepts the settings but does not quantise)."""
    from qdrant_client import QdrantClient, models

    sent: list[dict] = []
    for quantization in ("int8", "none"):
        client = QdrantClient(":memory:")
        real = client.create_collection
        client.create_collection = lambda name, **kw: (sent.append(kw), real(name, **kw))[1]  # type: ignore[method-assign]
        store = QdrantStore(client, where="http://qdrant:6333", quantization=quantization)
        store.create_collection("c", dimension=DIM, distance="cosine")
        store.close()
    int8, plain = sent
    assert int8["quantization_config"].scalar.type == models.ScalarType.INT8 and int8["vectors_config"].on_disk
    assert plain["quantization_config"] is None and not plain["vectors_config"].on_disk


def test_a_server_store_with_oversampling_asks_for_rescored_candidates() -> None:
    """store.oversampling reaches the server's query (rescore with the originals, k × N candidates); unset, the query
    carries no quantisation parameters (the server's defaults), only store.hnsw.ef's candidates."""
    from qdrant_client import QdrantClient

    asked: list[dict] = []
    for oversampling in (3.0, None):
        client = QdrantClient(":memory:")
        real = client.query_points
        client.query_points = lambda name, **kw: (asked.append(kw), real(name, **kw))[1]  # type: ignore[method-assign]
        store = QdrantStore(client, where="http://qdrant:6333", quantization="int8", oversampling=oversampling)
        store.create_collection("c", dimension=DIM, distance="cosine")
        store.upsert("c", [Point(str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))), np.full(DIM, i + 1.0, np.float32),
                                 {"doc_id": "d"}) for i in range(3)])
        assert len(store.query("c", np.ones(DIM, np.float32), limit=2)) == 2
        store.close()
    over, plain = asked
    assert over["search_params"].quantization.rescore is True and over["search_params"].quantization.oversampling == 3.0
    assert plain["search_params"].quantization is None and plain["search_params"].hnsw_ef == HNSW_DEFAULTS["ef"]
