"""What the cutover's index-health check costs where the graph is walked: `side_health` (200 stored vectors searched
by ANN and exactly) of one edge-store population of N clustered 384-dimension vectors built with reindex's graph, twice
per size. Prints N, CPU-s, wall seconds, how it was searched, recall@10 against exact search and the ANN p50.

    .venv/bin/python bench/index_health.py 20000 100000
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid

import numpy as np

from reindex.adapters.stores.edge import open_edge_store
from reindex.adapters.stores.vectors import Point
from reindex.decisions.index_health import side_health


def one(n: int, dim: int = 384) -> None:
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(64, dim))
    x = (centres[rng.integers(0, 64, n)] + 0.5 * rng.normal(size=(n, dim))).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        store = open_edge_store(folder)
        store.create_collection("c", dimension=dim, distance="cosine")
        for i in range(0, n, 2000):
            store.upsert("c", [Point(str(uuid.uuid4()), x[j], {"doc_id": "d"}) for j in range(i, min(n, i + 2000))])
        store.finish_bulk("c")
        for _ in range(2):
            c, w = time.process_time(), time.perf_counter()
            h = side_health(store, "c")
            print(n, "cpu", round(time.process_time() - c, 3), "wall", round(time.perf_counter() - w, 3), h["searched"],
                  h["recall_at_10_vs_exact"], h["ann_ms_p50"], flush=True)
        store.close()


if __name__ == "__main__":
    for size in (int(a) for a in sys.argv[1:] or ["20000", "100000"]):
        one(size)
