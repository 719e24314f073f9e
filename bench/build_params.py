"""The index build (issue 24 part 4, issue 35 item 3): qdrant-edge's bulk path for a new population, CPU-seconds and recall.

    .venv/bin/python bench/build_params.py [--points 20000[,100000,...]] [--queries 200] [--data lowrank]
        [--only "NAME;NAME"] [--search-ef 100,128] [--dir FOLDER] [--json-out FILE]

One set of N 384-dim vectors (``random``: i.i.d. Gaussian, what the hash embedder gives; ``lowrank``: a 32-dim
Gaussian projected to 384 dims plus 5 % noise, closer to a text model's embeddings; ~200-byte payloads with a
doc_id), upserted in batches of 1,000 into a fresh edge shard per variant, then ``optimize()`` (the HNSW build
that ``EdgeStore.finish_bulk`` runs). Per variant: upsert points per CPU-second, build CPU-seconds (per point
and points per CPU-second) and wall, the segments it left, top-10 recall against exact search
(``SearchParams(exact=True)``) over the same queries, and the p50 and CPU per search of those searches (Qdrant's
default search considers ef = the graph's ef_construct candidates; ``--search-ef`` measures other values too).
CPU is the process's (all engine threads). Several ``--points`` build every variant at each size (the smaller
sets are prefixes of the largest) and print the build's growth exponent between sizes.

Every variant starts from the shard reindex created until issue 35 (``reindex.adapters.stores.edge._engine``: indexing
threshold 2,000 KB, segment target 8, Qdrant's HNSW defaults m 16 / ef_construct 100 / threads auto; the row
"today") and changes one or two things: ``m``, ``ef_construct``, the indexing threads, the segment target, the
largest segment, int8 scalar quantisation; one variant goes through reindex's own writer (``EdgeStore.upsert`` +
``finish_bulk``, with reindex's defaults of the day: m 24, ef_construct 48 since issue 35), one uses Qdrant's
optimiser defaults (no segment target).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import qdrant_edge as qe

DIM = 384


# The shard reindex created until issue 35 (reindex.adapters.stores.edge._engine.create_shard with Qdrant's graph, m 16 and
# ef_construct 100): what every variant changes. reindex's defaults since are the variant "m 24, ef_construct 48"
# searched with ef 100 (``--search-ef 100``).
BASE = {"m": 16, "ef": 100, "threads": 0, "segments": 8, "threshold_kb": 2_000}


def variants() -> dict[str, dict]:
    return {
        "today (m 16, ef_construct 100, segment target 8)": {},  # "today": before issue 35
        "ef_construct 80": {"ef": 80},
        "ef_construct 64": {"ef": 64},
        "ef_construct 32": {"ef": 32},
        "m 12": {"m": 12},
        "m 12, ef_construct 80": {"m": 12, "ef": 80},
        "m 8": {"m": 8},
        "m 8, ef_construct 64": {"m": 8, "ef": 64},
        "m 24, ef_construct 64": {"m": 24, "ef": 64},
        "m 24, ef_construct 48": {"m": 24, "ef": 48},
        "m 32, ef_construct 64": {"m": 32, "ef": 64},
        "1 indexing thread": {"threads": 1},
        "segment target 2": {"segments": 2},
        "segment target 16": {"segments": 16},
        "largest segment 50 k points": {"max_segment_kb": 50_000 * 384 * 4 // 1024},
        "Qdrant's optimiser defaults (no segment target)": {"segments": None},
        "int8 scalar quantisation, originals on disk": {"int8": True},
        "int8, m 24, ef_construct 48": {"int8": True, "m": 24, "ef": 48},
        "reindex EdgeStore.upsert + finish_bulk": {"reindex": True},  # with reindex's defaults of the day
    }


def build_through_reindex(folder: Path, vecs: np.ndarray, ids: list[str]) -> dict:
    """The same points through reindex's writer (Point conversion, one flush per batch, its shard config)."""
    from reindex.adapters.stores.edge import open_edge_store
    from reindex.adapters.stores.vectors import Point

    store = open_edge_store(folder)
    store.create_collection("c", dimension=DIM, distance="cosine", bulk=True)
    c0 = time.process_time()
    for s in range(0, len(ids), 1000):
        store.upsert("c", [Point(ids[i], vecs[i], {"doc_id": f"doc-{i // 8}", "text": "x" * 200})
                           for i in range(s, min(len(ids), s + 1000))])
    c1, w1 = time.process_time(), time.perf_counter()
    store.finish_bulk("c")
    c2, w2 = time.process_time(), time.perf_counter()
    store.close()
    shard = qe.EdgeShard.load(str(next((folder / "collections" / "c").glob("gen-*[0-9]"))))
    return {"shard": shard, "upsert_cpu": c1 - c0, "build_cpu": c2 - c1, "build_wall": w2 - w1}


def build(folder: Path, vecs: np.ndarray, ids: list[str], v: dict) -> dict:
    if v.get("reindex"):
        return build_through_reindex(folder, vecs, ids)
    p = {**BASE, **v}
    hnsw = qe.HnswIndexConfig(m=p["m"], ef_construct=p["ef"], full_scan_threshold=10_000,
                              max_indexing_threads=p["threads"])
    optimizers = qe.EdgeOptimizersConfig(indexing_threshold=p["threshold_kb"], default_segment_number=p["segments"],
                                         max_segment_size=p.get("max_segment_kb"))
    quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) \
        if p.get("int8") else None
    cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine, on_disk=True if quantization else None),
                        wal_enabled=False, hnsw_config=hnsw, optimizers=optimizers, quantization_config=quantization)
    shard = qe.EdgeShard.create(str(folder), cfg)
    c0 = time.process_time()
    for s in range(0, len(ids), 1000):
        shard.update(qe.UpdateOperation.upsert_points([
            qe.Point(ids[i], vecs[i].tolist(), {"doc_id": f"doc-{i // 8}", "text": "x" * 200})
            for i in range(s, min(len(ids), s + 1000))]))
    shard.flush()
    c1, w1 = time.process_time(), time.perf_counter()
    shard.optimize()
    shard.flush()
    c2, w2 = time.process_time(), time.perf_counter()
    return {"shard": shard, "upsert_cpu": c1 - c0, "build_cpu": c2 - c1, "build_wall": w2 - w1}


def exact_top(shard, queries: np.ndarray, k: int = 10) -> list[set]:
    return [{p.id for p in shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()),
                                                       params=qe.SearchParams(exact=True)))} for q in queries]


def recall(shard, queries: np.ndarray, truth: list[set], k: int = 10, ef: int | None = None) -> tuple[float, float, float]:
    """(recall@k against ``truth`` of the search with ``hnsw_ef`` ``ef`` (None: the engine's default, which is the
    graph's ef_construct), p50 ms of those searches, CPU ms per search: the process's CPU over all of them, which
    a loaded box moves less than the wall p50)."""
    hit, times = 0, []
    params = qe.SearchParams(hnsw_ef=ef) if ef is not None else None
    requests = [qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()), params=params) for q in queries]
    c0 = time.process_time()
    for request, exact in zip(requests, truth):
        t0 = time.perf_counter()
        approx = {p.id for p in shard.query(request)}
        times.append((time.perf_counter() - t0) * 1000)
        hit += len(approx & exact)
    cpu_ms = (time.process_time() - c0) * 1000 / len(requests)
    return hit / (k * len(queries)), float(np.percentile(times, 50)), cpu_ms


#: Search-time variants for an int8 population (``--rescore``): qdrant-edge's QuantizationSearchParams.
SEARCH_VARIANTS = {
    "int8 default params": None,
    "int8, rescore off": qe.QuantizationSearchParams(rescore=False),
    "int8, rescore on": qe.QuantizationSearchParams(rescore=True),
    "int8, rescore, oversampling 2": qe.QuantizationSearchParams(rescore=True, oversampling=2.0),
    "int8, rescore, oversampling 4": qe.QuantizationSearchParams(rescore=True, oversampling=4.0),
    "int8 ignored (float32 HNSW search)": qe.QuantizationSearchParams(ignore=True),
}


def search_variants(shard, queries: np.ndarray, k: int = 10) -> list[tuple[str, float, float]]:
    """(variant, recall@k vs exact float32 search, p50 ms) for each of SEARCH_VARIANTS on one shard."""
    exact = [{p.id for p in shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()), params=qe.SearchParams(
        exact=True, quantization=qe.QuantizationSearchParams(ignore=True))))} for q in queries]
    out = []
    for name, qp in SEARCH_VARIANTS.items():
        params = qe.SearchParams(quantization=qp) if qp is not None else None
        hit, times = 0, []
        for q, truth in zip(queries, exact):
            t0 = time.perf_counter()
            got = {p.id for p in shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()), params=params))}
            times.append((time.perf_counter() - t0) * 1000)
            hit += len(got & truth)
        out.append((name, hit / (k * len(queries)), float(np.percentile(times, 50))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rescore", action="store_true",
                    help="build the int8 variant only and compare its search-time parameters (rescore, oversampling)")
    ap.add_argument("--points", default="20000", help="points per build; comma-separated sizes run every variant at "
                    "each (smaller sets are prefixes of the largest) and fit the build's growth exponent")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json-out", type=Path, default=None, help="write the rows as JSON here too (after each variant)")
    ap.add_argument("--search-ef", default="", help="comma-separated hnsw_ef values: each variant's recall and p50 "
                    "are also measured searching with them (the default search uses ef = the graph's ef_construct)")
    ap.add_argument("--only", default="", help="semicolon-separated: run the variants named so, or whose name contains "
                    "one of these (default: all)")
    ap.add_argument("--data", choices=("random", "lowrank"), default="random",
                    help="random: i.i.d. Gaussian (the hash embedder; the hardest case for HNSW); lowrank: a 32-dim "
                    "Gaussian projected to 384 dims plus 5 %% noise (closer to a text model's embeddings)")
    args = ap.parse_args()
    sizes = sorted(int(x) for x in str(args.points).split(","))
    args.points = sizes[-1]
    rng = np.random.default_rng(0)
    if args.data == "random":
        vecs = rng.standard_normal((args.points, DIM)).astype(np.float32)
        queries = rng.standard_normal((args.queries, DIM)).astype(np.float32)
    else:
        proj = rng.standard_normal((32, DIM))
        both = rng.standard_normal((args.points + args.queries, 32)) @ proj
        both += 0.05 * np.linalg.norm(both, axis=1, keepdims=True) / np.sqrt(DIM) * rng.standard_normal(both.shape)
        vecs, queries = both[:args.points].astype(np.float32), both[args.points:].astype(np.float32)
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))) for i in range(args.points)]
    base = Path(tempfile.mkdtemp(prefix="build-params-", dir=args.dir))
    if args.rescore:
        folder = base / "int8"
        try:
            r = build(folder, vecs, ids, {"int8": True})
            print(f"int8 build: {args.points / r['build_cpu']:,.0f} points/CPU-s, wall {r['build_wall']:.1f} s")
            print("| search variant | recall@10 vs exact float32 | p50 ms |")
            print("| --- | ---: | ---: |")
            for name, rec, p50 in search_variants(r["shard"], queries):
                print(f"| {name} | {rec:.3f} | {p50:.2f} |", flush=True)
            r["shard"].close()
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    rows: list[dict] = []
    try:
        for points in sizes:  # smaller sets are prefixes of the largest: one distribution, one set of queries
            table(points, vecs[:points], ids[:points], queries, base, args, rows)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if len(sizes) > 1:
        print("\nGrowth of the build's CPU between sizes, per variant: cpu(n2) / cpu(n1) = (n2 / n1)^b")
        print("| variant | sizes | b |")
        print("| --- | --- | ---: |")
        for name in dict.fromkeys(r["variant"] for r in rows):
            mine = [r for r in rows if r["variant"] == name]
            for r1, r2 in zip(mine, mine[1:]):
                b = math.log(r2["build_cpu"] / r1["build_cpu"]) / math.log(r2["points"] / r1["points"])
                print(f"| {name} | {r1['points']:,} → {r2['points']:,} | {b:.3f} |")
            if len(mine) > 2:
                xs = [math.log(r["points"]) for r in mine]
                ys = [math.log(r["build_cpu"]) for r in mine]
                mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
                b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
                print(f"| {name} | least squares over {len(mine)} sizes | {b:.3f} |")


def table(points: int, vecs: np.ndarray, ids: list[str], queries: np.ndarray, base: Path, args: argparse.Namespace,
          rows: list[dict]) -> None:
    """Build every selected variant on ``points`` points and print its row (and add it to ``rows``)."""
    print(f"load {os.getloadavg()[0]:.1f} at start, {os.cpu_count()} CPUs")
    print(f"| variant ({points:,} {args.data} points, 384 dims) | upsert points/CPU-s | build CPU-s | "
          "build ms CPU/point | build wall s | segments | recall@10 | search p50 ms (CPU ms) | build CPU vs first row |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    truth, first = None, None
    for i, (name, v) in enumerate(variants().items()):
        if not any(part == name or (part not in variants() and part in name) for part in args.only.split(";")):
            continue
        r = build(base / str(i), vecs, ids, v)
        if truth is None:  # exact search is the same on every variant's points (float32 originals)
            truth = exact_top(r["shard"], queries)
        rec, p50, cpu_ms = recall(r["shard"], queries, truth)
        by_ef = {int(ef): recall(r["shard"], queries, truth, ef=int(ef)) for ef in args.search_ef.split(",") if ef}
        segments = int(r["shard"].info().segments_count)
        r["shard"].close()
        shutil.rmtree(base / str(i), ignore_errors=True)
        first = first or r["build_cpu"]
        row = {"variant": name, "points": points, "data": args.data, "params": {**BASE, **v},
               "upsert_cpu": round(r["upsert_cpu"], 3), "build_cpu": round(r["build_cpu"], 3),
               "build_wall": round(r["build_wall"], 3), "segments": segments, "recall_at_10": round(rec, 4),
               "search_p50_ms": round(p50, 3), "search_cpu_ms": round(cpu_ms, 3), "load": round(os.getloadavg()[0], 2),
               "search_ef": {ef: {"recall_at_10": round(a, 4), "p50_ms": round(b, 3), "cpu_ms": round(c, 3)}
                             for ef, (a, b, c) in by_ef.items()}}
        rows.append(row)
        print(f"| {name} | {points / r['upsert_cpu']:,.0f} | {r['build_cpu']:,.1f} | "
              f"{1000 * r['build_cpu'] / points:.3f} | {r['build_wall']:.1f} | {segments} | {rec:.3f} | "
              f"{p50:.2f} ({cpu_ms:.2f} CPU) | {r['build_cpu'] / first:.2f}x |"
              + "".join(f" search ef {ef}: recall {a:.3f}, p50 {b:.2f} ms ({c:.2f} ms CPU) |"
                        for ef, (a, b, c) in by_ef.items()),
              flush=True)
        if args.json_out:
            args.json_out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
