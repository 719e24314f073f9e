"""The index build (issue 24 part 4): qdrant-edge's bulk path for a new population, CPU-seconds and recall.

    .venv/bin/python bench/build_params.py [--points 20000] [--queries 200] [--dir FOLDER]

One set of N random 384-dim vectors (what the hash embedder gives; ~200-byte payloads with a doc_id),
upserted in batches of 1,000 into a fresh edge shard per variant, then ``optimize()`` (the HNSW build that
``EdgeStore.finish_bulk`` runs). Per variant: upsert points per CPU-second, build points per CPU-second
and wall, and top-10 recall against exact search (``SearchParams(exact=True)``) over the same queries.
CPU is the process's (all engine threads). Variants: Qdrant's defaults (m 16, ef_construct 100, threads
auto), a lower ef_construct, a lower m, one indexing thread, and the optimiser's segment target.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import qdrant_edge as qe

DIM = 384


def variants() -> dict[str, dict]:
    return {
        "defaults (m16 ef100, threads auto)": {},
        "ef_construct 64": {"hnsw": (16, 64, 0)},
        "ef_construct 32": {"hnsw": (16, 32, 0)},
        "m 8, ef_construct 64": {"hnsw": (8, 64, 0)},
        "1 indexing thread": {"hnsw": (16, 100, 1)},
        "segment target 8 (reindex's)": {"segments": 8},
        "reindex EdgeStore.upsert + finish_bulk": {"reindex": True},
        "int8 scalar quantisation, originals on disk": {"int8": True},
    }


def build_through_reindex(folder: Path, vecs: np.ndarray, ids: list[str]) -> dict:
    """The same points through reindex's writer (Point conversion, one flush per batch, its shard config)."""
    from reindex.stores.edge import open_edge_store
    from reindex.stores.vectors import Point

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
    hnsw = qe.HnswIndexConfig(m=v["hnsw"][0], ef_construct=v["hnsw"][1], full_scan_threshold=10_000,
                              max_indexing_threads=v["hnsw"][2]) if "hnsw" in v else None
    optimizers = qe.EdgeOptimizersConfig(indexing_threshold=2_000, default_segment_number=v.get("segments"))
    quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) \
        if v.get("int8") else None
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


def recall(shard, queries: np.ndarray, k: int = 10) -> float:
    hit = 0
    for q in queries:
        approx = {p.id for p in shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist())))}
        exact = {p.id for p in shard.query(qe.QueryRequest(limit=k, query=qe.Query.Nearest(q.tolist()),
                                                           params=qe.SearchParams(exact=True)))}
        hit += len(approx & exact)
    return hit / (k * len(queries))


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
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated: run the variants whose name contains one of these (default: all)")
    ap.add_argument("--data", choices=("random", "lowrank"), default="random",
                    help="random: i.i.d. Gaussian (the hash embedder; the hardest case for HNSW); lowrank: a 32-dim "
                    "Gaussian projected to 384 dims plus 5 %% noise (closer to a text model's embeddings)")
    args = ap.parse_args()
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
    first = None
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
    print(f"| variant ({args.points:,} {args.data} points, 384 dims) | upsert points/CPU-s | build points/CPU-s | build wall s | "
          "recall@10 | build CPU vs defaults |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    try:
        for i, (name, v) in enumerate(variants().items()):
            if not any(part in name for part in args.only.split(",")):
                continue
            r = build(base / str(i), vecs, ids, v)
            rec = recall(r["shard"], queries)
            r["shard"].close()
            shutil.rmtree(base / str(i), ignore_errors=True)
            first = first or r["build_cpu"]
            print(f"| {name} | {args.points / r['upsert_cpu']:,.0f} | {args.points / r['build_cpu']:,.0f} | "
                  f"{r['build_wall']:.1f} | {rec:.3f} | {r['build_cpu'] / first:.2f}x |", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
