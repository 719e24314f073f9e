"""The embedded store at scale: the edge backend (default) beside qdrant-client local mode (the old default).

    .venv/bin/python bench/scale.py [--sizes 30000,300000] [--local-at 30000] [--dir FOLDER]

Random unit vectors of 384 dims, ~1 KB payloads, a ``doc_id`` on every point (10 points per document),
cosine distance, batches of 1,024 through ``VectorStore.upsert`` (durable when it returns). Every
configuration runs in fresh child processes so RSS figures are per process:

- writer: create the collection (bulk), index ``doc_id``, upsert every point (write points/s), build the
  index (``finish_bulk``: HNSW for edge), publish (alias swap), close; peak RSS of the whole run.
- reader: open the store as another process would (edge: ``open_reader`` + first query by alias; local:
  open the folder), time to first answer, then top-10 queries, top-10 filtered by a random doc_id, and
  counts by doc_id (p50/p95 ms); its RSS after the queries.

Prints one Markdown table; the folder's size on disk is the last column.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

DIM = 384
BATCH = 1024
PER_DOC = 10
TEXT = "lorem ipsum dolor sit amet " * 37  # ~1 KB


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _RssSampler:
    """Peaks of anonymous memory and of file-backed (mmap, page cache) memory in this process's RSS,
    sampled every 0.2 s: the engine maps its segment files, and those pages count in RSS but the kernel
    can drop them under pressure, unlike anonymous memory."""

    def __init__(self) -> None:
        self.anon = self.file = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        fields = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) / 1024
        self.anon = max(self.anon, fields.get("RssAnon", 0.0))
        self.file = max(self.file, fields.get("RssFile", 0.0))

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        return {"anon_peak_mb": self.anon, "file_peak_mb": self.file}


def _batch(start: int, k: int) -> tuple[list[str], np.ndarray, list[dict]]:
    rng = np.random.default_rng(start)
    vecs = rng.standard_normal((k, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"p/{start + i}")) for i in range(k)]
    payloads = [{"doc_id": f"doc-{(start + i) // PER_DOC}", "ordinal": (start + i) % PER_DOC, "text": TEXT}
                for i in range(k)]
    return ids, vecs, payloads


def write(backend: str, folder: str, n: int) -> dict:
    from reindex.adapters.stores.opening import open_vector_store
    from reindex.adapters.stores.vectors import Point

    store = open_vector_store(None, folder, backend=backend)
    store.create_collection("bench__a", dimension=DIM, distance="cosine", bulk=True)
    store.create_payload_index("bench__a", "doc_id", "keyword")
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        ids, vecs, payloads = _batch(start, min(BATCH, n - start))
        store.upsert("bench__a", [Point(i, v, p) for i, v, p in zip(ids, vecs, payloads)])
    t_write = time.perf_counter() - t0
    print(json.dumps({"n": n, "backend": backend, "write_pps": n / t_write, "rss_mb": _rss_mb()}), file=sys.stderr,
          flush=True)
    t1 = time.perf_counter()
    store.finish_bulk("bench__a")
    t_index = time.perf_counter() - t1
    store.swap_alias("bench", "bench__a", None)
    store.close()
    return {"write_pps": n / t_write, "write_s": t_write, "index_s": t_index, "writer_peak_mb": _peak_mb()}


def read(backend: str, folder: str, n: int, queries: int) -> dict:
    rng = np.random.default_rng(12345)
    qv = rng.standard_normal((queries, DIM)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    docs = [f"doc-{int(d)}" for d in rng.integers(0, n // PER_DOC, size=queries)]
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    if backend == "edge":
        from reindex.adapters.stores.edge import open_reader

        store = open_reader(folder)
    else:
        from reindex.adapters.stores.opening import open_vector_store

        store = open_vector_store(None, folder, backend="local")
    first = store.query("bench", qv[0], limit=10)
    t_open = time.perf_counter() - t0
    assert len(first) == 10
    rss_open = _rss_mb()

    def timed(fn) -> list[float]:
        out = []
        for i in range(queries):
            t = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - t) * 1000)
        return out

    top = timed(lambda i: store.query("bench", qv[i], limit=10))
    filt = timed(lambda i: store.query("bench", qv[i], limit=10, doc_id=docs[i]))
    counts = timed(lambda i: store.count("bench", doc_id=docs[i]))
    assert store.count("bench", doc_id=docs[0]) == PER_DOC
    hits = store.query("bench", qv[1], limit=10, doc_id=docs[1])
    assert len(hits) == PER_DOC and all(h.payload["doc_id"] == docs[1] for h in hits)
    store.close()
    p = lambda xs, q: float(np.percentile(xs, q))  # noqa: E731
    return {
        "open_s": t_open, "reader_rss_open_mb": rss_open, "reader_rss_mb": _rss_mb(),
        "reader_peak_mb": _peak_mb(), "top10_p50_ms": p(top, 50), "top10_p95_ms": p(top, 95),
        "filtered_p50_ms": p(filt, 50), "filtered_p95_ms": p(filt, 95), "count_p50_ms": p(counts, 50),
        "queries": queries,
    }


def _child(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-3000:]}")
    if out.stderr.strip():
        print(out.stderr.strip()[-2000:], file=sys.stderr, flush=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _du_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="30000,300000")
    ap.add_argument("--local-at", default="30000", help="sizes at which local mode runs too ('' for none)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--child", nargs="*")
    args = ap.parse_args()
    if args.child:
        role, backend, folder, n, *rest = args.child
        sampler = _RssSampler()
        result = write(backend, folder, int(n)) if role == "write" else read(backend, folder, int(n), int(rest[0]))
        print(json.dumps({**result, **{f"{role}_{k}": v for k, v in sampler.stop().items()}}))
        return
    base = Path(args.dir or tempfile.mkdtemp(prefix="reindex-scale-", dir=Path.cwd() / "build"
                                             if (Path.cwd() / "build").is_dir() else None))
    base.mkdir(parents=True, exist_ok=True)
    local_at = {int(x) for x in args.local_at.split(",") if x}
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        for backend in ("local", "edge") if n in local_at else ("edge",):
            folder = base / f"{backend}-{n}"
            shutil.rmtree(folder, ignore_errors=True)
            w = _child("write", backend, str(folder), str(n))
            r = _child("read", backend, str(folder), str(n), "200" if backend == "edge" else "20")
            row = {"backend": backend, "points": n, **w, **r, "disk_mb": _du_mb(folder)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    print("| backend | points | write pts/s (durable) | index build s | writer peak RSS MB (anon + file) | open s | "
          "reader RSS MB (anon + file peak) | top-10 p50 / p95 ms | filtered p50 / p95 ms | count(doc_id) p50 ms | "
          "disk MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['backend']} | {r['points']:,} | {r['write_pps']:,.0f} | {r['index_s']:.1f} | "
              f"{r['writer_peak_mb']:,.0f} ({r['write_anon_peak_mb']:,.0f} + {r['write_file_peak_mb']:,.0f}) | "
              f"{r['open_s']:.2f} | {r['reader_rss_mb']:,.0f} ({r['read_anon_peak_mb']:,.0f} + "
              f"{r['read_file_peak_mb']:,.0f}) | "
              f"{r['top10_p50_ms']:.1f} / {r['top10_p95_ms']:.1f} | {r['filtered_p50_ms']:.1f} / "
              f"{r['filtered_p95_ms']:.1f} | {r['count_p50_ms']:.1f} | {r['disk_mb']:,.0f} |")


if __name__ == "__main__":
    main()
