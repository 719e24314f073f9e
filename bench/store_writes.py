"""Embedded store writes: points/s of stock qdrant-client local mode on disk, of reindex's embedded store on
disk (one SQLite transaction per upsert call), and of in-memory local mode (the upper bound).

    .venv/bin/python bench/store_writes.py [--stock N] [--ours N] [--memory N] [--dir FOLDER]

384-dim float32 vectors, ~1 KB payloads, batches of 256, cosine distance. Each store starts empty in a
fresh folder under --dir (default: a temporary folder under build/, on the working disk).

Bytes written by a one-document sync (issue 24), at index sizes of DOCS documents each:

    .venv/bin/python bench/store_writes.py --sync 70 703 [--src TREE/src ...] [--dir FOLDER]

For each tree (``--src``, default this one) and size: the first DOCS documents of the PEP snapshot
(``../shared/corpus/snapshot_new.parquet``) as a JSONL source, the hash embedder, the embedded edge store;
``reindex plan`` → ``apply`` → ``cutover`` (each a child process), then one document's text is edited and
the document-scoped plan applied by ``reindex apply PLAN --no-progress -c CONFIG``, whose
``getrusage(RUSAGE_CHILDREN).ru_oublock`` (512-byte blocks written, page cache writeback and fsyncs
included) and wall time are printed, with the store's size on disk (allocated blocks) before and after.
"""

from __future__ import annotations

import argparse
import os
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
    from reindex.adapters.stores.opening import open_vector_store
    from reindex.adapters.stores.vectors import Point

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


SNAPSHOT = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "snapshot_new.parquet"
SYNC_CONFIG = """index: pep
source: ./corpus.jsonl
text: {chunker: {kind: recursive, size: 250}}
vector: {provider: hash}
state: {uri: ./state}
store: {path: ./store}
approval: {pipeline_scoped: false, max_tokens: null, max_usd: null}
cutover: {probes: 20, min_recall_delta: -1.0, min_overlap: 0.0}
"""


def _allocated(folder: Path) -> int:
    """Bytes allocated on disk under ``folder``, each hard-linked file once."""
    seen, total = set(), 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


def _reindex(work: Path, src: str, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[str, float, int]:
    """One ``reindex`` child process: (stdout, wall seconds, bytes it wrote)."""
    import resource
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": src, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "REINDEX_SHARD_WORKERS": "1"}
    env.pop("PREFECT_API_URL", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "reindex", *args, "-c", str(work / "reindex.yaml")], cwd=work, env=env,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode not in ok:
        raise SystemExit(f"reindex {' '.join(args)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return r.stdout, wall, (resource.getrusage(resource.RUSAGE_CHILDREN).ru_oublock - before) * 512


def _plan(work: Path, src: str) -> str:
    import json

    out, _, _ = _reindex(work, src, "plan", "--json", ok=(2,))
    return json.loads(out[out.index("{"):])["plan_file"]


def one_document_sync(docs: int, work: Path, src: str) -> dict:
    """Build an index of ``docs`` documents, edit one, and measure the apply of that sync."""
    import json

    import pyarrow.parquet as pq

    rows = pq.read_table(SNAPSHOT, columns=["doc_id", "text"]).to_pylist()[:docs]
    work.mkdir(parents=True)
    (work / "reindex.yaml").write_text(SYNC_CONFIG, encoding="utf-8")

    def write(rows: list[dict]) -> None:
        with (work / "corpus.jsonl").open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({"id": row["doc_id"], "text": row["text"]}) + "\n")

    write(rows)
    plan = _plan(work, src)
    _reindex(work, src, "apply", plan, "--no-progress")
    _reindex(work, src, "cutover", plan)
    status, _, _ = _reindex(work, src, "status")
    edited = dict(rows[len(rows) // 2])
    edited["text"] += "\n\nAn edit at the end of one document, to be synced in place.\n"
    write(rows[:len(rows) // 2] + [edited] + rows[len(rows) // 2 + 1:])
    plan = _plan(work, src)
    doc = json.loads((work / plan).read_text(encoding="utf-8"))
    kind = doc.get("body", doc)["kind"]
    disk_before = _allocated(work / "store")
    _, wall, written = _reindex(work, src, "apply", plan, "--no-progress")
    points = next(int(w.replace(",", "")) for line in status.splitlines() if "points" in line
                  for w, nxt in zip(line.split(), line.split()[1:]) if nxt == "points")
    return {"docs": docs, "points": points, "kind": kind, "written_mb": written / 1e6, "wall_s": wall,
            "disk_before_mb": disk_before / 1e6, "disk_after_mb": _allocated(work / "store") / 1e6}


def sync_main(sizes: list[int], srcs: list[str], parent: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="sync-writes-", dir=parent))
    try:
        print("| tree | documents | points | kind | written by the sync's apply | its wall | store disk before → after |")
        print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
        for src in srcs:
            for i, docs in enumerate(sizes):
                r = one_document_sync(docs, root / f"{abs(hash(src))}-{docs}", src)
                print(f"| {src} | {r['docs']} | {r['points']:,} | {r['kind']} | {r['written_mb']:.1f} MB | "
                      f"{r['wall_s']:.1f} s | {r['disk_before_mb']:.1f} → {r['disk_after_mb']:.1f} MB |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sync", type=int, nargs="+", default=None,
                    help="measure a one-document sync at these index sizes (documents) instead")
    ap.add_argument("--src", nargs="+", default=[str(Path(__file__).resolve().parent.parent / "src")],
                    help="with --sync: the source trees to run (PYTHONPATH of the reindex children)")
    ap.add_argument("--stock", type=int, default=512, help="points for stock local mode on disk (slow)")
    ap.add_argument("--ours", type=int, default=20_000, help="points for reindex's embedded store on disk")
    ap.add_argument("--memory", type=int, default=20_000, help="points for in-memory local mode")
    ap.add_argument("--dir", type=Path, default=None, help="parent folder for the on-disk stores")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Local mode is not recommended")

    parent = args.dir or Path(__file__).resolve().parent.parent / "build"
    parent.mkdir(parents=True, exist_ok=True)
    if args.sync:
        sync_main(args.sync, args.src, parent)
        return
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
