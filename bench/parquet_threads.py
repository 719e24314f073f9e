"""Parquet reads on the calling thread vs Arrow's thread pool (``reindex.foundation.tables.USE_THREADS``), side by side in one
run, at two sizes: what single-threaded decoding costs a scan of a Parquet source and a read of chunk-manifest
parts, now that every read in ``reindex.foundation.tables`` uses it (a threaded read started Arrow's pool, whose threads made
7 of 60 refused ``reindex apply`` runs abort at interpreter exit on a loaded box).

    PYTHONPATH=src .venv/bin/python bench/parquet_threads.py [--docs 10000 100000] [--repeat 5]

Per size: a Parquet source of ``--docs`` rows (an id, ~1.5 KB of text, an integer ``updated_at``; row groups of
1,000, zstd, as bench/cursors.py writes it) read whole through ``ParquetReader.batches`` (what a source scan does)
and group by group through ``ParquetReader.read_group`` (what a cursor sync does); and a manifest-like buffer
(``--docs`` × 3 rows of ids, fingerprints and token counts) through ``columns_from_parquet``. Each read runs with
threads off and on, alternating, ``--repeat`` times; medians of wall and of process CPU (every thread's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reindex.foundation import tables

TEXT = (Path(__file__).resolve().parents[1] / "src" / "reindex" / "sample" / "corpus").glob("*")


def _source(path: Path, docs: int) -> None:
    body = "".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(TEXT))
    texts = [body[(i * 1500) % (len(body) - 1500):][:1500] for i in range(docs)]
    table = pa.table({"id": [f"d{i:07d}" for i in range(docs)], "text": texts, "updated_at": list(range(docs))})
    pq.write_table(table, path, row_group_size=1000, compression="zstd")


def _manifest(rows: int) -> bytes:
    return tables.parquet_from_columns(
        {"doc_id": [f"d{i // 3:07d}" for i in range(rows)], "fingerprint": [f"{i * 2654435761 % 2**64:016x}" for i in range(rows)],
         "tokens": [i % 250 for i in range(rows)]},
        {"doc_id": "string", "fingerprint": "string", "tokens": "int32"})


def _timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {args.repeat}")
    print("| docs | read | threads off: wall s / CPU s | threads on: wall s / CPU s | off ÷ on (wall) | off ÷ on (CPU) |")
    print("|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for docs in args.docs:
            path = Path(tmp) / f"s{docs}.parquet"
            _source(path, docs)
            manifest = _manifest(docs * 3)
            reader = tables.ParquetReader(path)
            reads = {
                "source scan (batches)": lambda: sum(len(b["text"]) for b in reader.batches(["id", "text", "updated_at"], 1000)),
                "every row group (read_group)": lambda: [reader.read_group(g, ["id", "text"]) for g in range(reader.row_groups)],
                "manifest columns (columns_from_parquet)": lambda: tables.columns_from_parquet(manifest, ["doc_id", "fingerprint", "tokens"]),
            }
            for name, fn in reads.items():
                got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
                for _ in range(args.repeat):
                    for threads in (False, True):
                        tables.USE_THREADS = threads
                        got[threads].append(_timed(fn))
                tables.USE_THREADS = False
                med = {t: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for t, v in got.items()}
                off, on = med[False], med[True]
                print(f"| {docs:,} | {name} | {off[0]:.3f} / {off[1]:.3f} | {on[0]:.3f} / {on[1]:.3f} | "
                      f"{off[0] / on[0]:.2f} | {off[1] / on[1]:.2f} |")


if __name__ == "__main__":
    main()
