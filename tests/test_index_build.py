"""The index build (issue 35, item 3): ``store.hnsw`` reaches the engine on the edge store and on a server and is
read back from the collection's config; bad values are refused in one line; the plan prices the build (points ×
CPU-seconds per point for the chosen parameters, growing as n^b), from the rate the last apply with the same
parameters measured, else from the bench's figures, and says where it runs."""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from helpers_index import Workspace
from reindex import cost as costmod
from reindex.domain.config import load_config
from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.errors import ConfigError
from reindex.books.manifests import read_build_rate, write_build_rate
from reindex.planner import build_rate_name
from reindex.reports import plan_markdown, plan_text
from reindex.adapters.stores.edge import open_reader
from reindex.adapters.stores.edge import _engine as edge_engine
from reindex.adapters.stores.opening import backend_for, open_vector_store
from reindex.adapters.stores.vectors import Point, VectorStoreError
from reindex.context import backends, rates

# 128 dims: a segment is sealed (and its graph built) past the engine's 2,000 KB indexing threshold, ~4,000 points.
DIM = 128


def _points(n: int) -> list[Point]:
    vecs = np.random.default_rng(0).standard_normal((n, DIM)).astype(np.float32)
    return [Point(str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))), vecs[i], {"doc_id": f"d{i // 10}"}) for i in range(n)]


def _segment_graphs(folder: Path) -> set[tuple[int, int]]:
    """(m, ef_construct) of every sealed segment's HNSW index, as the engine wrote its segment.json."""
    out = set()
    for seg in folder.glob("collections/c/gen-*/segments/*/segment.json"):
        index = json.loads(seg.read_text())["config"]["vector_data"][""]["index"]
        if index["type"] == "hnsw":
            out.add((index["options"]["m"], index["options"]["ef_construct"]))
    return out


def test_store_hnsw_reaches_the_edge_engine_and_the_collection_reports_it(tmp_path: Path) -> None:
    cfg_path = tmp_path / "reindex.yaml"
    cfg_path.write_text(f"index: docs\nsource: ./c\nstore: {{path: {tmp_path / 'q'}, hnsw: {{m: 8, ef_construct: 40}}}}\n")
    store = backends.vector_store_for(load_config(cfg_path))  # the config's way to the engine
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    store.upsert("c", _points(6_000))
    store.finish_bulk("c")
    assert store.collection_info("c")["hnsw"] == {"m": 8, "ef_construct": 40}
    store.swap_alias("docs", "c", None)
    store.close()
    # The graph the engine built: every sealed segment's index was made with these parameters.
    assert _segment_graphs(tmp_path / "q") == {(8, 40)}
    reader = open_reader(tmp_path / "q")
    try:
        assert reader.collection_info("docs")["hnsw"] == {"m": 8, "ef_construct": 40}
    finally:
        reader.close()
    # Without the option: reindex's defaults, reported as the engine recorded them.
    plain = open_vector_store(None, str(tmp_path / "plain"))
    plain.create_collection("c", dimension=DIM, distance="cosine")
    assert plain.collection_info("c")["hnsw"] == {"m": HNSW_DEFAULTS["m"], "ef_construct": HNSW_DEFAULTS["ef_construct"]}
    plain.close()


@pytest.mark.parametrize(("body", "message"), [
    ("store: {hnsw: {m: 2}}", "reindex.yaml: store.hnsw.m: Value error, got 2; expected a whole number from 4 to 128"),
    ("store: {hnsw: {m: 129}}", "reindex.yaml: store.hnsw.m: Value error, got 129; expected a whole number from 4 to 128"),
    ("store: {hnsw: {ef_construct: 3}}",
     "reindex.yaml: store.hnsw.ef_construct: Value error, got 3; expected a whole number from 4 to 4096"),
    ("store: {hnsw: {ef_construct: 5000}}",
     "reindex.yaml: store.hnsw.ef_construct: Value error, got 5000; expected a whole number from 4 to 4096"),
    ("store: {hnsw: {m: 8.5}}", "reindex.yaml: store.hnsw.m: got 8.5; expected a whole number"),
    ("store: {hnsw: {m: true}}", "reindex.yaml: store.hnsw.m: got true; expected a whole number"),
    ("store: {hnsw: {ef: 2}}", "reindex.yaml: store.hnsw.ef: Value error, got 2; expected a whole number from 4 to 4096"),
    ("store: {hnsw: {efconstruct: 64}}", "reindex.yaml: store.hnsw.efconstruct: unknown field"),
])
def test_bad_hnsw_options_are_refused_in_one_line(tmp_path: Path, body: str, message: str) -> None:
    p = tmp_path / "reindex.yaml"
    p.write_text(f"index: docs\nsource: ./c\n{body}\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value).replace(str(tmp_path) + "/", "") == message


@pytest.mark.parametrize(("hnsw", "message"), [
    ({"m": 2}, "store.hnsw.m: got 2; expected a whole number from 4 to 128"),
    ({"ef_construct": "64"}, "store.hnsw.ef_construct: got '64'; expected a whole number from 4 to 4096"),
    ({"ef": 5000}, "store.hnsw.ef: got 5000; expected a whole number from 4 to 4096"),
    ({"m": 16, "efconstruct": 64}, "store.hnsw.efconstruct: unknown field; use m, ef_construct and ef"),
])
def test_a_store_opened_without_a_config_checks_the_graph_parameters_too(tmp_path: Path, hnsw: dict,
                                                                          message: str) -> None:
    from qdrant_client import QdrantClient

    from reindex.adapters.stores.qdrant import QdrantStore

    with pytest.raises(VectorStoreError) as edge:
        open_vector_store(None, str(tmp_path / "q"), hnsw=hnsw)
    with pytest.raises(VectorStoreError) as server:
        QdrantStore(QdrantClient(":memory:"), where="http://qdrant:6333", hnsw=hnsw)
    assert str(edge.value) == str(server.value) == message


# A server: qdrant-client over HTTP to a loopback server that keeps what each collection was created with and
# reports it back in its collection info, as Qdrant does (no Qdrant server can run here; local mode ignores HNSW).


class _Qdrant(http.server.BaseHTTPRequestHandler):
    created: dict[str, dict] = {}
    searched: list[dict] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, result: Any) -> None:
        body = json.dumps({"result": result, "status": "ok", "time": 0.0}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # a query: recorded, answered with no points
        self.searched.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._send({"points": []})

    def do_PUT(self) -> None:
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        self.created[name] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send(True)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/":
            self._reply_raw({"title": "qdrant", "version": "1.20.0"})
            return
        if path == "/aliases":
            self._send({"aliases": []})
            return
        if path == "/collections":
            self._send({"collections": [{"name": n} for n in self.created]})
            return
        body = self.created[path.rsplit("/", 1)[-1]]
        graph = {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000, "max_indexing_threads": 0,
                 **(body.get("hnsw_config") or {})}
        self._send({
            "status": "green", "optimizer_status": "ok", "indexed_vectors_count": 0, "points_count": 0,
            "segments_count": 1, "payload_schema": {},
            "config": {"params": {"vectors": body["vectors"], "shard_number": 1, "replication_factor": 1},
                       "hnsw_config": graph,
                       "optimizer_config": {"deleted_threshold": 0.2, "vacuum_min_vector_number": 1000,
                                            "default_segment_number": 0, "indexing_threshold": 0,
                                            "flush_interval_sec": 5, "max_optimization_threads": 1},
                       "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0}}})

    def _reply_raw(self, value: dict) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def qdrant_url() -> Iterator[str]:
    _Qdrant.created, _Qdrant.searched = {}, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Qdrant)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_store_hnsw_reaches_a_server_at_collection_creation_and_its_config_reports_it(tmp_path: Path,
                                                                                      qdrant_url: str) -> None:
    cfg_path = tmp_path / "reindex.yaml"
    cfg_path.write_text(f"index: docs\nsource: ./c\nstore: {{url: '{qdrant_url}', hnsw: {{m: 24, ef_construct: 64, "
                        "ef: 80}}\n")
    store = backends.vector_store_for(load_config(cfg_path))
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    assert _Qdrant.created["c"]["hnsw_config"] == {"m": 24, "ef_construct": 64}  # what went over the wire
    assert store.collection_info("c")["hnsw"] == {"m": 24, "ef_construct": 64}
    store.query("c", np.ones(DIM, np.float32), limit=3)
    assert _Qdrant.searched[-1]["params"]["hnsw_ef"] == 80  # every search asks for store.hnsw.ef candidates
    store.close()
    plain = open_vector_store(qdrant_url, None)  # no config: reindex's defaults, sent as such
    plain.create_collection("d", dimension=DIM, distance="cosine")
    want = {k: HNSW_DEFAULTS[k] for k in ("m", "ef_construct")}
    assert _Qdrant.created["d"]["hnsw_config"] == want and plain.collection_info("d")["hnsw"] == want
    plain.query("d", np.ones(DIM, np.float32), limit=3)
    assert _Qdrant.searched[-1]["params"]["hnsw_ef"] == HNSW_DEFAULTS["ef"]
    plain.close()


def test_store_hnsw_ef_is_what_every_search_considers(tmp_path: Path) -> None:
    """A poor graph (m 4, ef_construct 8) on 25,000 random 128-dim points, one segment over the engine's full-scan
    threshold (10 MB), searched by a writer and by readers with 4 and 256 candidates: more candidates find more of
    the exact top 10; null searches with the graph's ef_construct."""
    n = 25_000
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))) for i in range(n)]
    queries = rng.standard_normal((30, DIM)).astype(np.float32)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    truth = [{ids[i] for i in np.argsort(-(unit @ q))[:10]} for q in queries]

    def recall(store: Any, name: str) -> float:
        return sum(len(t & {h.id for h in store.query(name, q, limit=10)}) for q, t in zip(queries, truth)) / 300

    writer = open_vector_store(None, str(tmp_path / "q"), hnsw={"m": 4, "ef_construct": 8, "ef": 4})
    writer.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    writer.upsert("c", [Point(ids[i], vecs[i], {"doc_id": "d"}) for i in range(n)])
    writer.finish_bulk("c")
    writer.swap_alias("a", "c", None)
    few = recall(writer, "a")
    writer.close()
    got = {}
    for ef in (4, 256, None):
        reader = open_reader(tmp_path / "q", ef=ef)
        try:
            got[ef] = recall(reader, "a")
        finally:
            reader.close()
    assert got[4] == few
    assert got[256] > got[4] + 0.05, got
    assert got[None] < got[256] - 0.05, got  # the engine's default: ef_construct 8
    # A reader opened from a config searches with its store.hnsw.ef.
    cfg_path = tmp_path / "reindex.yaml"
    cfg_path.write_text(f"index: docs\nsource: ./c\nstore: {{path: {tmp_path / 'q'}, hnsw: {{ef: 256}}}}\n")
    reader = backend_for(load_config(cfg_path).store).open_reader()
    try:
        assert recall(reader, "a") == got[256]
    finally:
        reader.close()


# The price


def test_the_build_price_follows_the_bench_curve_and_the_graph() -> None:
    d = HNSW_DEFAULTS
    graph = {"m": d["m"], "ef_construct": d["ef_construct"], "dimension": 384}
    # Through the bench's per-size figures exactly, faster than linearly between them.
    for n, per_point in costmod.BUILD_CURVE:
        assert costmod.price_build(n, **graph).cpu_seconds == pytest.approx(n * per_point)
    one = costmod.price_build(100_000, **graph, cpus=2)
    two = costmod.price_build(200_000, **graph, cpus=2)
    assert one.source == two.source == "default" and one.threads == 2
    b = costmod.growth_exponent(200_000)
    assert 1.1 < b < 1.4 and two.cpu_seconds / one.cpu_seconds == pytest.approx(2 ** b)
    assert two.cpu_seconds_per_point > one.cpu_seconds_per_point
    assert costmod.price_build(1_000_000, **graph).cpu_seconds == pytest.approx(
        400_000 * costmod.BUILD_CURVE[-1][1] * 2.5 ** costmod.growth_exponent(400_000))  # past the curve: its last power
    assert one.seconds == pytest.approx(one.cpu_seconds / 2)
    assert costmod.price_build(100_000, **graph, cpus=64).threads == 8
    # The graph: cheaper with fewer links or candidates, by the fitted powers; int8 and the dimension.
    cheaper = costmod.price_build(100_000, m=d["m"] // 2, ef_construct=d["ef_construct"] // 2, dimension=384)
    assert cheaper.cpu_seconds == pytest.approx(one.cpu_seconds * 0.5 ** costmod.EF_EXPONENT * 0.5 ** costmod.M_EXPONENT)
    assert costmod.price_build(100_000, m=d["m"], ef_construct=d["ef_construct"], dimension=768).cpu_seconds == \
        pytest.approx(2 * one.cpu_seconds)
    int8 = costmod.price_build(100_000, **graph, precision="int8")
    assert int8.cpu_seconds == pytest.approx(costmod.INT8_FACTOR * one.cpu_seconds)
    # From a measured build: its own CPU-seconds at its own size, grown along the same curve.
    rec = {"points": 50_000, "cpu_seconds": 40.0}
    at = costmod.price_build(50_000, **graph, measured=rec)
    assert (at.source, at.cpu_seconds) == ("apply", 40.0)
    assert costmod.price_build(200_000, **graph, measured=rec).cpu_seconds == pytest.approx(
        40.0 * costmod.curve_cpu(200_000) / costmod.curve_cpu(50_000))
    assert costmod.price_build(0, **graph).cpu_seconds == 0.0


def _build(plan) -> dict:
    return plan.body["cost"]["index_build"]


def _key(m: int = HNSW_DEFAULTS["m"], ef_construct: int = HNSW_DEFAULTS["ef_construct"]) -> str:
    return f"edge-384d-float32-m{m}-ef{ef_construct}"


def test_the_plan_prices_the_build_from_the_recorded_rate_of_the_same_parameters(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    first = _build(ws.plan()[0])
    points = first["points"]
    assert points == ws.plan()[0].body["work"]["chunks_new"] > 0
    assert first["source"] == "default" and first["runs"] == "apply" and first["measured"] is None
    d = HNSW_DEFAULTS
    assert first["params"] == {"m": d["m"], "ef_construct": d["ef_construct"], "precision": "float32", "dimension": 384}
    assert first["cpu_seconds_per_point"] == pytest.approx(costmod.default_build_cpu(
        points, m=d["m"], ef_construct=d["ef_construct"], dimension=384) / points, rel=0.01)
    # A build measured with these parameters: the plan follows it, grown along the curve from its size to the plan's.
    name = build_rate_name(ws.cfg())
    assert name == _key()
    write_build_rate(ws.state(), name, {"points": 100, "cpu_seconds": 30.0, "seconds": 20.0, "at": 1_790_000_000.0,
                                        "plan_hash": "f" * 32, "load": 1.5, "cpus": 2})
    measured = _build(ws.plan()[0])
    assert measured["source"] == "apply" and measured["measured"]["points"] == 100
    assert measured["cpu_seconds"] == pytest.approx(30.0 * costmod.curve_cpu(points) / costmod.curve_cpu(100), rel=1e-3)
    # Other graph parameters: that record is not theirs; the bench's figures for them, priced lower.
    ws.write_config(extra="store: {hnsw: {m: 8, ef_construct: 64}}\n")
    other = _build(ws.plan()[0])
    assert other["source"] == "default" and other["params"]["m"] == 8 and other["params"]["ef_construct"] == 64
    assert other["cpu_seconds_per_point"] == pytest.approx(
        costmod.default_build_cpu(points, m=8, ef_construct=64, dimension=384) / points, rel=0.01)
    assert other["cpu_seconds_per_point"] < 0.9 * first["cpu_seconds_per_point"]


def test_an_apply_records_its_build_and_the_next_plan_prices_with_it(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rates, "MIN_POINTS_TO_MEASURE_BUILD", 10)  # the sample's 320 points are enough here
    # and the engine seals (and builds a graph for) a segment of them: below its threshold optimize does next to
    # nothing, which a CI box's CPU clock read as 0.000 s
    monkeypatch.setattr(edge_engine, "INDEXING_THRESHOLD_KB", 10)
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    r = ws.apply(path)
    build = r.report["index_build"]
    assert build["points"] == plan.body["work"]["chunks_new"] and build["cpu_seconds"] > 0
    rec = read_build_rate(ws.state(), _key())
    assert rec == build["recorded"] and rec["points"] == build["points"] and rec["cpu_seconds"] == build["cpu_seconds"]
    assert {"load", "cpus", "machine", "at", "seconds", "m", "ef_construct"} <= rec.keys()
    # A copy of the index twice the size: the next plan prices its build from the record, along the curve.
    for f in sorted(ws.corpus.iterdir()):
        (ws.corpus / f"copy-{f.name}").write_text(f.read_text() + "\ncopy\n")
    again = _build(ws.plan()[0])
    assert again["source"] == "apply" and again["measured"]["plan_hash"] == plan.plan_hash
    assert again["cpu_seconds"] == pytest.approx(round(rec["cpu_seconds"] * costmod.curve_cpu(again["points"])
                                                       / costmod.curve_cpu(rec["points"]), 3), abs=2e-3)


def test_a_small_apply_records_no_build_rate(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    r = ws.apply(path)
    assert r.report["index_build"]["recorded"] is None  # 186 points: below MIN_POINTS_TO_MEASURE_BUILD
    assert read_build_rate(ws.state(), _key()) is None


def test_a_server_store_prices_the_build_on_the_server_and_local_mode_builds_none(tmp_path: Path,
                                                                                qdrant_url: str) -> None:
    ws = Workspace(tmp_path / "ws", extra=f"store: {{url: '{qdrant_url}'}}\n")
    b = _build(ws.plan()[0])
    assert (b["runs"], b["source"], b["threads"]) == ("server", "default", costmod.MAX_INDEXING_THREADS)
    assert b["cpu_seconds"] > 0 and b["seconds"] == pytest.approx(b["cpu_seconds"] / 8, abs=1e-3)
    local = Workspace(tmp_path / "local", extra="store: {backend: local}\n")
    assert (_build(local.plan()[0])["source"], _build(local.plan()[0])["cpu_seconds"]) == ("none", 0.0)


def test_every_form_of_the_plan_shows_the_build_beside_the_embedding_hours(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    b = _build(plan)
    text = plan_text(plan, str(path))
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("index build:"))
    assert f"{b['points']:,} points ×" in line and "in apply" in line and "m 24, ef_construct 48" in line
    assert "the bench's figures" in line
    assert text.index("tokens to embed:") < text.index("index build:")
    md = plan_markdown(plan)
    assert "| Index build |" in md and md.index("| Wall clock |") < md.index("| Index build |")
    assert plan.summary()["index_build"] == b
    assert any(k == "index build" for k, _ in plan.numbers.rows())


def test_a_shadow_build_indexes_every_point_of_the_new_population_and_a_sync_the_points_it_writes(
        tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n")
    ws.build_live()
    change, _ = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n")
    w = change.body["work"]
    assert w["chunks_reused"] > 0 and w["chunks_to_embed"] < w["chunks_new"]
    assert _build(change)["points"] == w["chunks_new"]  # reused points are upserted into the new graph too
    ws.write_config(extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n")
    names = ws.edit_documents()
    assert names
    sync, _ = ws.plan()
    assert sync.kind.value == "document-scoped"
    assert _build(sync)["points"] == sync.body["work"]["chunks_to_embed"] < sync.body["work"]["chunks_new"]


def test_an_index_build_that_blocks_every_renewal_past_the_lease_keeps_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge engine's build holds the interpreter lock for its whole length: no heartbeat renews during it (a
    50 ms Python ticker did not tick once in a 70 s build of 60 k points). Apply extends its lease by the build's
    planned CPU-seconds first (``apply.build_lease``). Here the build holds the interpreter for twice the lease's
    ttl (6 s, renewed every 2 s: a loaded box still renews in time), priced at 6 CPU-s: the apply finishes with its
    lock; without the extension it stops with LockLost."""
    import sys
    import time

    import reindex.cost._build as build_mod
    import reindex.context.locking as locking
    from reindex import api
    from reindex.adapters.stores.edge import EdgeStore

    monkeypatch.setattr(build_mod, "default_build_cpu", lambda points, **kw: 6.0)
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    assert plan.body["cost"]["index_build"]["cpu_seconds"] == 6.0 and plan.body["cost"]["index_build"]["runs"] == "apply"
    real_acquire = locking.acquire_lock
    monkeypatch.setattr(locking, "acquire_lock", lambda *a, **kw: real_acquire(*a, **{**kw, "ttl": 6.0}))
    real_build = EdgeStore.finish_bulk
    held: list[float] = []

    def build_holding_the_interpreter(self: EdgeStore, name: str) -> None:
        before = sys.getswitchinterval()
        sys.setswitchinterval(60.0)  # no other thread of this process runs until this one blocks
        try:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 12.0:
                pass
            held.append(time.perf_counter() - t0)
        finally:
            sys.setswitchinterval(before)
        real_build(self, name)

    monkeypatch.setattr(EdgeStore, "finish_bulk", build_holding_the_interpreter)
    r = api.apply_plan(path, ws.config, use_prefect=False)
    assert held and held[0] >= 12.0
    assert r.status == "done", r.report.get("failures")
    assert r.report["index_build"]["seconds"] >= 12.0


def test_a_lease_of_a_few_seconds_holds_through_a_build_beside_two_busy_loops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, done when: a build whose lease is 3 s holds the interpreter for three leases with two busy CPU loops
    beside it (load ≥ 2 more on 2 cores) and priced at 0 CPU-s, so that no extension covers it: the lease keeper, a
    process of its own, renews it meanwhile and the apply ends with its lock (it lost it in 2 of 3 builds at load
    33–40 before)."""
    import subprocess
    import sys
    import time

    import reindex.cost._build as build_mod
    import reindex.context.locking as locking
    from reindex import api
    from reindex.adapters.stores.edge import EdgeStore

    monkeypatch.setattr(build_mod, "default_build_cpu", lambda points, **kw: 0.0)
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    assert plan.body["cost"]["index_build"]["cpu_seconds"] == 0.0
    real_acquire = locking.acquire_lock
    monkeypatch.setattr(locking, "acquire_lock", lambda *a, **kw: real_acquire(*a, **{**kw, "ttl": 3.0}))
    real_build = EdgeStore.finish_bulk
    held: list[float] = []

    def build_holding_the_interpreter(self: EdgeStore, name: str) -> None:
        before = sys.getswitchinterval()
        sys.setswitchinterval(60.0)  # no other thread of this process runs until this one blocks
        try:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 9.0:
                pass
            held.append(time.perf_counter() - t0)
        finally:
            sys.setswitchinterval(before)
        real_build(self, name)

    monkeypatch.setattr(EdgeStore, "finish_bulk", build_holding_the_interpreter)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        r = api.apply_plan(path, ws.config, use_prefect=False)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert held and held[0] >= 9.0
    assert r.status == "done", r.report.get("failures")
    assert r.report["index_build"]["seconds"] >= 9.0


def test_store_hnsw_is_in_the_config_digest_only_when_it_is_not_the_default() -> None:
    # Plans made before store.hnsw existed still apply (their digest is pinned in test_source_root); a plan priced
    # with one graph does not apply once the config asks for another.
    from reindex.domain.config import config_from_dict
    from reindex.domain.identity import config_digest

    def cfg(**store: object) -> Any:
        return config_from_dict({"index": "docs", "source": {"uri": "/a/corpus"}, "vector": {"provider": "hash"},
                                 "store": store})

    default = config_digest(cfg())
    assert config_digest(cfg(hnsw=dict(HNSW_DEFAULTS))) == default
    assert config_digest(cfg(hnsw={"m": 16, "ef_construct": 100})) != default
    assert config_digest(cfg(hnsw={"ef": 128})) != default
