"""What a keyword payload index with one value per point costs a qdrant-edge shard's load (issue 24).

    .venv/bin/python bench/payload_index_load.py [--points 100000]

Two shards of the same N random 384-dim vectors and payloads (``doc_id``: 25 points a document,
``fingerprint``: one value per point, ~800 bytes of text), built and optimised alike; one with keyword
indexes on doc_id and fingerprint (what populations had before), one on doc_id only (what reindex creates
now). Prints the CPU of each build, three timed loads each and the folder size.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import tempfile
import time
import uuid

import numpy as np
import qdrant_edge as qe


def build(path: str, fields: list[str], vecs: np.ndarray) -> None:
    cfg = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=vecs.shape[1], distance=qe.Distance.Cosine),
                        wal_enabled=False,
                        optimizers=qe.EdgeOptimizersConfig(indexing_threshold=2000, default_segment_number=8))
    s = qe.EdgeShard.create(path, cfg)
    for f in fields:
        s.update(qe.UpdateOperation.create_field_index(f, qe.PayloadSchemaType.Keyword))
    n = len(vecs)
    for i in range(0, n, 2000):
        pts = [qe.Point(str(uuid.UUID(int=j + 1)), vecs[j].tolist(),
                        {"doc_id": f"d{j // 25}", "fingerprint": hashlib.md5(str(j).encode()).hexdigest(),
                         "text": "x" * 800}) for j in range(i, min(n, i + 2000))]
        s.update(qe.UpdateOperation.upsert_points(pts))
    s.optimize()
    s.flush()
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=100_000)
    args = ap.parse_args()
    vecs = np.random.default_rng(1).standard_normal((args.points, 384)).astype(np.float32)
    base = tempfile.mkdtemp(prefix="payload-index-")
    try:
        for name, fields in (("doc_id+fingerprint", ["doc_id", "fingerprint"]), ("doc_id", ["doc_id"])):
            path = f"{base}/{name}"
            t = time.process_time()
            build(path, fields, vecs)
            built = time.process_time() - t
            loads = []
            for _ in range(3):
                t = time.perf_counter()
                s = qe.EdgeShard.load(path)
                loads.append(time.perf_counter() - t)
                s.close()
            size = subprocess.run(["du", "-sm", path], capture_output=True, text=True).stdout.split()[0]
            print(f"{name}: build {built:.1f} CPU-s, load s {[round(x, 3) for x in loads]}, {size} MB", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
