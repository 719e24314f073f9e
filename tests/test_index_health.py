"""Index health (issue 41, item 1): the cutover checks the index that will serve readers — fully built, its ANN
recall@10 against exact search, its query latency — on the embedded store for real, and on a Qdrant server through
what qdrant-client sends and receives (a loopback HTTP server answering Qdrant's REST API: no server runs here).

Real data: the bundled 24-PEP sample chunked small (1,578 chunks at 32 tokens) and embedded by the ``hash`` embedder
at 2,048 dimensions (12.6 MB of vectors: past the engine's full-scan threshold of 10,000 KB, so searches walk the
graph), and random vectors written straight into an edge store. A graph built with m 4 and ef_construct 4 (the
lowest ``store.hnsw`` admits) finds about a third of the exact top-10 there; reindex's defaults find ≥ 0.95."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.cli import main
from reindex.decisions import cutover as co
from reindex.decisions import gate as gt
from reindex.decisions import evaluation as ev
from reindex.decisions.index_health import index_state, side_health, wait_until_indexed
from reindex.errors import TransientError
from reindex.adapters.stores.edge import open_edge_store
from reindex.adapters.stores.objects import open_object_store
from reindex.adapters.stores.vectors import Point
from reindex.reports import cutover_html, cutover_markdown

CONFIG = """\
index: docs
source: ./corpus
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash, dimension: 2048}}
apply: {{shards: 4}}
cutover: {{min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}}
{store}"""
POOR = "store: {hnsw: {m: 4, ef_construct: 4}}"


def _policy(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(**{"require_exact_count": True, "min_recall_delta": -0.02, "min_overlap": 0.5,
                              "min_index_recall": 0.95, "max_latency_ratio": 2.0, "index_wait_seconds": 0.0, **kw})


def _random_collection(store, name: str, n: int, dim: int, *, build: bool, seed: int = 0,
                       clusters: int = 0) -> np.ndarray:
    """``n`` random vectors (``clusters``: around that many centres, as embeddings cluster) written as apply writes."""
    rng = np.random.default_rng(seed)
    if clusters:
        x = (rng.standard_normal((clusters, dim))[rng.integers(0, clusters, n)]
             + 0.5 * rng.standard_normal((n, dim))).astype(np.float32)
    else:
        x = rng.standard_normal((n, dim)).astype(np.float32)
    store.create_collection(name, dimension=dim, distance="cosine")
    for start in range(0, n, 1000):  # as apply writes: batches, each flushed
        store.upsert(name, [Point(str(uuid.uuid5(uuid.NAMESPACE_OID, f"{name}-{i}")), x[i], {"doc_id": f"d{i}"})
                            for i in range(start, min(n, start + 1000))])
    if build:
        store.finish_bulk(name)
    return x


def test_an_index_that_was_never_built_fails_index_recall_and_built_it_passes_with_its_figure(tmp_path: Path) -> None:
    store = open_edge_store(tmp_path / "store")
    try:
        _random_collection(store, "unbuilt", 1500, 2048, build=False)
        st = index_state(store.collection_info("unbuilt"))
        assert (st.points, st.indexed_vectors, st.ready, st.building) == (1500, 0, False, False)
        assert "1,500 of 1,500 vectors (12,000 KB) have no index, over the indexing threshold of 2,000 KB" in st.detail
        assert "nothing builds it now: the embedded store builds its index during apply" in st.detail
        # Nothing would ever build it: the wait returns at once, whatever cutover.index_wait allows.
        t = time.monotonic()
        assert wait_until_indexed(store, "unbuilt", 600)[0] == st and time.monotonic() - t < 60
        health = {"new": side_health(store, "unbuilt"), "old": None}
        # Scanned, its answers are exact (recall 1.000): only the state says it is not built.
        assert health["new"]["recall_at_10_vs_exact"] == 1.0 and health["new"]["sampled"] == 200
        rule = gt.index_recall_rule(health, _policy())
        assert not rule.passed and rule.outcome == "fail"
        assert rule.detail.startswith("unbuilt is not fully indexed: 1,500 of 1,500 vectors")

        store.finish_bulk("unbuilt")
        health = {"new": side_health(store, "unbuilt"), "old": None}
        assert health["new"]["ready"] and health["new"]["searched"] == "graph"
        rule = gt.index_recall_rule(health, _policy())
        r = health["new"]["recall_at_10_vs_exact"]
        assert rule.passed and r >= 0.95, rule.detail
        assert rule.detail.startswith(f"recall@10 of unbuilt's index vs exact search {r:.3f} on 200 stored vectors")
    finally:
        store.close()


def test_a_shadow_scanned_in_full_is_slower_than_the_live_graph_and_fails_the_latency_rule(tmp_path: Path) -> None:
    """What readers will pay, measured as the gate measures it: the same queries on both sides, each the fastest of
    five interleaved searches. Both hold the same 12,000 clustered vectors of 1,024 dimensions (48 MB); the live
    population walks its graph, the shadow (never indexed) is scanned by every search."""
    store = open_edge_store(tmp_path / "store")
    try:
        x = _random_collection(store, "live", 12000, 1024, build=True, clusters=64)
        _random_collection(store, "shadow", 12000, 1024, build=False, clusters=64)
        qs = [ev.Query(f"q{i}", f"q{i}") for i in range(60)]
        vectors = {q.text: x[i] for i, q in enumerate(qs)}
        embed = lambda texts: [vectors[t] for t in texts]  # noqa: E731
        evaluation = ev.evaluate(store, "live", "shadow", qs, embed, embed, k=10)
        health: dict = {"old": {"collection": "live"}, "new": {"collection": "shadow"}}
        gt.add_latency(health, evaluation, None)
        rule = gt.latency_rule(health, _policy())
        old, new = health["old"]["latency_ms_p95"], health["new"]["latency_ms_p95"]
        assert not rule.passed and new > 2 * old and new - old >= gt.LATENCY_SLACK_MS, rule.detail
        assert rule.detail.startswith(f"query latency p95 {old:.2f} → {new:.2f} ms")
        assert gt.latency_rule(health, _policy(max_latency_ratio=1e6)).passed
        # And the first build has no live side to compare with: no latency rule.
        assert gt.latency_rule({"new": health["new"], "old": None}, _policy()) is None
    finally:
        store.close()


@pytest.fixture(scope="module")
def poor_shadow(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Live: 1,578 chunks, reindex's graph. Shadow: a chunker change (24 tokens, 2,127 chunks) built with the poorest
    graph store.hnsw admits (m 4, ef_construct 4; searches keep ef 100)."""
    ws = Workspace(tmp_path_factory.mktemp("health") / "ws")
    ws.config.write_text(CONFIG.format(size=32, store=""), encoding="utf-8")
    live = ws.build_live()
    ws.config.write_text(CONFIG.format(size=24, store=POOR), encoding="utf-8")
    plan, path = ws.plan()
    ws.approve(path)
    shadow = ws.apply(path).collection
    return {"ws": ws, "live": live, "shadow": shadow, "path": path}


def test_a_shadow_built_with_a_poor_graph_fails_index_recall_in_the_cutover(poor_shadow: dict) -> None:
    t = poor_shadow
    ws: Workspace = t["ws"]
    res = CliRunner().invoke(main, ["cutover", str(t["path"]), "-c", str(ws.config), "--json"])
    assert res.exit_code == 3, res.output
    report = json.loads(res.stdout)
    rules = {r["rule"]: r for r in report["rules"]}
    failed = [r["rule"] for r in report["rules"] if not r["passed"]]
    # The poor graph can also make the change measurably worse on the probes (its answers are a third of the exact
    # top-10): then the evidence rule fails too; nothing else does.
    assert failed[0] == "index-recall" and set(failed) <= {"index-recall", "evidence"}, rules
    h = report["index_health"]
    assert set(h["new"]) >= {"points", "indexed_vectors", "recall_at_10_vs_exact", "sampled", "latency_ms_p50",
                             "latency_ms_p95"}
    assert (h["new"]["collection"], h["new"]["points"], h["new"]["indexed_vectors"]) == (t["shadow"], 2127, 2127)
    assert h["new"]["searched"] == "graph" and h["old"]["searched"] == "graph"
    assert h["new"]["recall_at_10_vs_exact"] < 0.8 and h["old"]["recall_at_10_vs_exact"] >= 0.95, h
    assert h["new"]["sampled"] == h["old"]["sampled"] == 200
    assert rules["index-recall"]["detail"].startswith(
        f"recall@10 of {t['shadow']}'s index vs exact search {h['new']['recall_at_10_vs_exact']:.3f} on 200 stored "
        f"vectors (live {t['live']}: {h['old']['recall_at_10_vs_exact']:.3f}); must be ≥ 0.95")
    # its cost, stated: seconds and its share of the cutover
    assert 0 < h["seconds"] < report["seconds"] and h["share_of_cutover"] == pytest.approx(
        h["seconds"] / report["seconds"], abs=1e-3)
    assert ws.alias() == t["live"]
    md, html = cutover_markdown(report), cutover_html(report)
    figure = f"{h['new']['recall_at_10_vs_exact']:.3f}"
    assert "## Index health" in md and f"| new (shadow) | {t['shadow']} | 2,127 of 2,127 | graph | {figure} |" in md
    assert 'data-table="Index health"' in html and f"<td>{figure}</td>" in html


def test_the_same_change_built_with_reindexs_graph_passes_with_its_recall_in_the_report(poor_shadow: dict) -> None:
    t = poor_shadow
    ws: Workspace = t["ws"]
    ws.config.write_text(CONFIG.format(size=28, store=""), encoding="utf-8")
    _plan, path = ws.plan()
    ws.approve(path)
    shadow = ws.apply(path).collection
    res = CliRunner().invoke(main, ["cutover", str(path), "-c", str(ws.config)])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("  ok   index-recall: "))
    report = json.loads(Path(str(path).removesuffix(".json") + ".cutover.json").read_text())
    r = report["index_health"]["new"]["recall_at_10_vs_exact"]
    assert r >= 0.95 and f"vs exact search {r:.3f} on 200 stored vectors" in line
    assert f"  index new: {shadow} " in res.stdout and f"recall@10 vs exact {r:.3f} on 200 stored vectors" in res.stdout
    assert ws.alias() == shadow
    # `reindex status` shows the live population's index state; `reindex doctor` its health.
    live = next(p for p in api.status(ws.config)["populations"] if p["state"] == "live")
    assert live["index"]["ready"] and live["index"]["searched"] == "graph" and live["index"]["points"] == 1795
    shown = CliRunner().invoke(main, ["status", "-c", str(ws.config)]).output
    assert "            index 1,795/1,795 vectors, searched graph" in shown
    doc = CliRunner().invoke(main, ["doctor", "-c", str(ws.config), "--json"])
    health = next(p["index_health"] for p in json.loads(doc.stdout)["populations"] if "index_health" in p)
    assert health["collection"] == shadow and health["recall_at_10_vs_exact"] >= 0.95 and health["sampled"] == 200


# --------------------------------------------------------------------------------------------
# A Qdrant server, through qdrant-client: the protocol on a loopback server
# --------------------------------------------------------------------------------------------


def _collection_info(status: str, points: int, indexed: int) -> dict:
    """GET /collections/{name} as Qdrant 1.20 answers it (a single unnamed vector of 384 dimensions)."""
    return {"status": status, "optimizer_status": "ok", "indexed_vectors_count": indexed, "points_count": points,
            "segments_count": 4, "payload_schema": {},
            "config": {"params": {"vectors": {"size": 384, "distance": "Cosine"}, "shard_number": 1,
                                  "replication_factor": 1, "write_consistency_factor": 1, "on_disk_payload": True},
                       "hnsw_config": {"m": 24, "ef_construct": 48, "full_scan_threshold": 10000,
                                       "max_indexing_threads": 0, "on_disk": False},
                       "optimizer_config": {"deleted_threshold": 0.2, "vacuum_min_vector_number": 1000,
                                            "default_segment_number": 0, "max_segment_size": None,
                                            "memmap_threshold": None, "indexing_threshold": 20000,
                                            "flush_interval_sec": 5, "max_optimization_threads": None},
                       "wal_config": {"wal_capacity_mb": 32, "wal_segments_ahead": 0},
                       "quantization_config": None}}


class _Qdrant(BaseHTTPRequestHandler):
    """Answers the calls a cutover makes before it evaluates: the server's version, aliases, a collection's info
    (``infos``: collection → list of answers, the last one repeated) and queries (recorded)."""

    infos: dict[str, list[dict]] = {}
    seen: list[tuple[str, str, dict | None]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, result: object, code: int = 200) -> None:
        body = json.dumps({"result": result, "status": "ok", "time": 0.0}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - the handler's API
        self.seen.append(("GET", self.path, None))
        if self.path == "/":
            body = json.dumps({"title": "qdrant - vector search engine", "version": "1.20.0"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/aliases":
            self._send({"aliases": [{"alias_name": "docs", "collection_name": "docs__old"}]})
        elif self.path.startswith("/collections/"):
            name = self.path.split("/")[2].split("?")[0]
            answers = self.infos[name]
            self._send(answers.pop(0) if len(answers) > 1 else answers[0])
        else:
            self._send({}, 404)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.seen.append(("POST", self.path, body))
        self._send({"points": []})


@pytest.fixture
def qdrant() -> dict:
    _Qdrant.infos, _Qdrant.seen = {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Qdrant)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "handler": _Qdrant}
        # qdrant-client checks the server's version in a thread of its own: let it finish before the server goes.
        deadline = time.monotonic() + 10
        while ("GET", "/", None) not in _Qdrant.seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.shutdown()
        server.server_close()


def _inputs(**kw: object) -> co.CutoverInputs:
    def never(*_a: object) -> object:
        raise AssertionError("the cutover went past the index wait")

    base = dict(index="docs", plan_hash="p" * 32, shadow="docs__new", expected_live="docs__old", k=10,
                policy=SimpleNamespace(index_wait_seconds=1.0), force=False, forced_by=lambda: None,
                catch_up=lambda: None, queries=never, evaluate=never, embed=never, fence=lambda: None)
    return co.CutoverInputs(**{**base, **kw})


def test_the_cutover_waits_for_a_server_still_indexing_the_shadow_and_times_out_with_one_line(qdrant: dict,
                                                                                              tmp_path: Path) -> None:
    from reindex.adapters.stores.qdrant import server_store

    h = qdrant["handler"]
    h.infos["docs__new"] = [_collection_info("yellow", 5000, 1200)]
    store = server_store(qdrant["url"])
    state = open_object_store(str(tmp_path / "state"))
    try:
        t = time.monotonic()
        with pytest.raises(TransientError) as err:
            co.run_cutover(store, state, _inputs())
        waited = time.monotonic() - t
    finally:
        store.close()
    message = str(err.value)
    assert "\n" not in message and message.startswith("docs__new is not fully indexed after waiting 1 s "
                                                      "(cutover.index_wait 1 s): the server is indexing it (status "
                                                      "yellow, 1,200 of 5,000 vectors indexed); ")
    assert message.endswith("run `reindex cutover` again once the server has indexed it, or raise cutover.index_wait")
    polls = [p for m, p, _ in h.seen if m == "GET" and p.startswith("/collections/docs__new")]
    assert len(polls) >= 2 and waited >= 1.0  # it asked again before giving up


def test_a_server_that_finishes_indexing_while_the_cutover_waits_is_read_as_built(qdrant: dict) -> None:
    from reindex.adapters.stores.qdrant import server_store

    h = qdrant["handler"]
    h.infos["docs__new"] = [_collection_info("yellow", 50_000, 12_000), _collection_info("yellow", 50_000, 40_000),
                            _collection_info("green", 50_000, 50_000)]
    store = server_store(qdrant["url"])
    slept: list[float] = []
    try:
        st, _ = wait_until_indexed(store, "docs__new", 60, sleep=slept.append)
        assert (st.ready, st.searched, st.points, st.indexed_vectors) == (True, "graph", 50_000, 50_000)
        assert len(slept) == 2  # two looks at a yellow collection, then green
        # green with a remainder below the server's indexing threshold (20,000 KB) is built: that segment is scanned
        h.infos["docs__rest"] = [_collection_info("green", 50_000, 40_000)]
        st = index_state(store.collection_info("docs__rest"))
        assert st.ready and st.searched == "graph + exact" and "10,000 of 50,000 in segments below" in st.detail
        # green, yet far more unindexed than its segments can hold below the threshold: not built, and no wait
        h.infos["docs__off"] = [_collection_info("green", 500_000, 0)]
        st = index_state(store.collection_info("docs__off"))
        assert not st.ready and not st.building and "indexing_threshold 0 disables indexing" in st.detail
        # the reference search: qdrant-client sends exact search to the server as params.exact
        store.query("docs__new", [0.1] * 384, limit=10, exact=True)
        store.query("docs__new", [0.1] * 384, limit=10)
    finally:
        store.close()
    queries = [body for m, p, body in h.seen if m == "POST" and p == "/collections/docs__new/points/query"]
    assert queries[0]["params"]["exact"] is True and queries[0]["limit"] == 10
    assert not (queries[1].get("params") or {}).get("exact")


def test_what_a_catch_up_writes_into_the_shadow_is_indexed_before_the_gate(tmp_path: Path) -> None:
    """A document added after the shadow was built is caught up into it at cutover: ~500 points of 2,048 dimensions,
    past the edge engine's indexing threshold (2,000 KB). The engine indexes only in finish_bulk, and publishing a
    never-published collection did not optimise: those points stayed unindexed, every search scanning them. The
    cutover now builds what its catch-up wrote, before the gate reads the index."""
    ws = Workspace(tmp_path / "ws")
    ws.config.write_text(CONFIG.format(size=32, store=""), encoding="utf-8")
    ws.build_live()
    ws.config.write_text(CONFIG.format(size=24, store=""), encoding="utf-8")
    _plan, path = ws.plan()
    ws.approve(path)
    shadow = ws.apply(path).collection
    words = " ".join(f"word{i}" for i in range(6000))
    (ws.corpus / "zz-added.rst").write_text("Added late\n==========\n\n" + words + "\n", encoding="utf-8")
    report = json.loads(CliRunner().invoke(main, ["cutover", str(path), "-c", str(ws.config), "--json"]).stdout)
    assert report["caught_up"]["documents"] == 1
    new = report["index_health"]["new"]
    assert new["collection"] == shadow and new["ready"] and new["indexed_vectors"] == new["points"], new
    assert "index-recall" not in [r["rule"] for r in report["rules"] if not r["passed"]]


def test_doctor_reads_an_unbuilt_or_poor_live_index_as_a_problem_and_a_healthy_one_as_none() -> None:
    """`reindex doctor`'s `index-recall` finding for the live population (`health_problem`): not ready, or its recall
    against exact search below cutover.min_index_recall; at or above it, no finding."""
    from reindex.decisions.index_health import health_problem

    unbuilt = {"collection": "docs__a", "ready": False, "detail": "1,500 of 1,500 vectors have no index"}
    assert health_problem(unbuilt, 0.95) == "docs__a is not fully indexed: 1,500 of 1,500 vectors have no index"
    poor = {"collection": "docs__a", "ready": True, "recall_at_10_vs_exact": 0.32, "sampled": 200}
    problem = health_problem(poor, 0.95)
    assert problem is not None and "0.320" in problem and "below cutover.min_index_recall 0.95" in problem
    assert health_problem({**poor, "recall_at_10_vs_exact": 0.94}, 0.95) is not None  # just below the floor
    assert health_problem({**poor, "recall_at_10_vs_exact": 0.95}, 0.95) is None
    assert health_problem({**poor, "recall_at_10_vs_exact": None}, 0.95) is None  # nothing sampled: nothing to say
