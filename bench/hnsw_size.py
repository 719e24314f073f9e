"""What a denser HNSW graph costs on disk: one edge shard per graph (m, ef_construct) built from the same N 384-dim
embedding-like vectors (bench/build_params.py's ``lowrank`` data), then the allocated bytes per point of the HNSW
index files (``vector_index`` in each segment) and of the whole shard.

    PYTHONPATH=src .venv/bin/python bench/hnsw_size.py [--points 20000] [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np
import qdrant_edge as qe

DIM = 384
GRAPHS = ((16, 100), (24, 48), (24, 64))


def allocated(folder: Path, part: str = "") -> int:
    return sum(f.stat().st_blocks * 512 for f in folder.rglob("*") if f.is_file() and part in str(f.relative_to(folder)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=20_000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    n = args.points
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((n, 32)) @ rng.standard_normal((32, DIM))
    vecs += 0.05 * np.linalg.norm(vecs, axis=1, keepdims=True) / np.sqrt(DIM) * rng.standard_normal(vecs.shape)
    vecs = vecs.astype(np.float32)
    print("| graph | points | HNSW files B/point | whole shard B/point |")
    print("| --- | ---: | ---: | ---: |")
    for m, ef in GRAPHS:
        folder = Path(tempfile.mkdtemp(prefix="hnsw-size-", dir=args.dir))
        try:
            cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine), wal_enabled=False,
                                hnsw_config=qe.HnswIndexConfig(m=m, ef_construct=ef, full_scan_threshold=10_000),
                                optimizers=qe.EdgeOptimizersConfig(indexing_threshold=2_000, default_segment_number=8))
            shard = qe.EdgeShard.create(str(folder), cfg)
            for s in range(0, n, 1000):
                shard.update(qe.UpdateOperation.upsert_points([
                    qe.Point(str(uuid.uuid5(uuid.NAMESPACE_URL, str(i))), vecs[i].tolist(), {})
                    for i in range(s, min(n, s + 1000))]))
            shard.optimize()
            shard.flush()
            shard.close()
            print(f"| m {m}, ef_construct {ef} | {n:,} | {allocated(folder, 'vector_index') / n:.0f} | "
                  f"{allocated(folder) / n:.0f} |", flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
