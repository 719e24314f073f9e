"""Embedded store writes: points/s of stock qdrant-client local mode on disk, of reindex's embedded store on
disk (one SQLite transaction per upsert call), and of in-memory local mode (the upper bound).

    .venv/bin/python bench/store_writes.py [--stock N] [--ours N] [--memory N] [--dir FOLDER]

384-dim float32 vectors, ~1 KB payloads, batches of 256, cosine distance. Each store starts empty in a
fresh folder under --dir (default: a temporary folder under build/, on the working disk).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

DIM = 384
BATCH = 256


def _batches(n: int, seed: int = 0) -> list[tuple[list[str], np.ndarray, list[dict]]]:
    rng = np.random.default_rng(seed)
    out = []
    text = "lorem ipsum dolor sit amet " * 37  # ~1 KB
    for start in range(0, n, BATCH):
        k = min(BATCH, n - start)
        ids = [str(uuid.UUID(int=int(rng.integers(1 << 62)) << 64 | start + i)) for i in range(k)]
        vecs = rng.standard_normal((k, DIM)).astype(np.float32)
        payloads = [{"doc_id": f"doc-{(start + i) // 8}", "ordinal": (start + i) % 8, "text": text} for i in range(k)]
        out.append((ids, vecs, payloads))
    return out


def _time(n: int, upsert: Callable[[list[str], np.ndarray, list[dict]], None]) -> float:
    batches = _batches(n)
    t0 = time.perf_counter()
    for ids, vecs, payloads in batches:
        upsert(ids, vecs, payloads)
    return n / (time.perf_counter() - t0)


def bench_stock(n: int, folder: Path | None) -> float:
    """qdrant-client local mode as shipped: one SQLite commit per point (or in memory if folder is None)."""
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(folder)) if folder else QdrantClient(":memory:")
    client.create_collection("bench", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))

    def upsert(ids: list[str], vecs: np.ndarray, payloads: list[dict]) -> None:
        points = [models.PointStruct(id=i, vector=v.tolist(), payload=p) for i, v, p in zip(ids, vecs, payloads)]
        client.upsert("bench", points, wait=True)

    try:
        return _time(n, upsert)
    finally:
        client.close()


def bench_ours(n: int, folder: Path) -> float:
    from reindex.stores.opening import open_vector_store
    from reindex.stores.vectors import Point

    store = open_vector_store(None, str(folder))
    store.create_collection("bench", dimension=DIM, distance="cosine", bulk=True)

    def upsert(ids: list[str], vecs: np.ndarray, payloads: list[dict]) -> None:
        store.upsert("bench", [Point(i, v, p) for i, v, p in zip(ids, vecs, payloads)])

    try:
        rate = _time(n, upsert)
        assert store.count("bench") == n
        return rate
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stock", type=int, default=512, help="points for stock local mode on disk (slow)")
    ap.add_argument("--ours", type=int, default=20_000, help="points for reindex's embedded store on disk")
    ap.add_argument("--memory", type=int, default=20_000, help="points for in-memory local mode")
    ap.add_argument("--dir", type=Path, default=None, help="parent folder for the on-disk stores")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Local mode is not recommended")

    parent = args.dir or Path(__file__).resolve().parent.parent / "build"
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="store-writes-", dir=parent))
    try:
        stock = bench_stock(args.stock, root / "stock")
        ours = bench_ours(args.ours, root / "ours")
        memory = bench_stock(args.memory, None)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rows = [
        ("stock local mode, on disk", args.stock, stock),
        ("reindex embedded store, on disk", args.ours, ours),
        ("local mode in memory (upper bound)", args.memory, memory),
    ]
    print(f"{'store':<36} {'points':>7} {'points/s':>9} {'vs stock':>9} {'vs memory':>10}")
    for label, n, rate in rows:
        print(f"{label:<36} {n:>7} {rate:>9,.0f} {rate / stock:>8.1f}x {rate / memory:>9.2f}x")


if __name__ == "__main__":
    main()
