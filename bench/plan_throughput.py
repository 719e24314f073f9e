"""Exact planning throughput on the PEP corpus next to the raw tokenizer, and the error of sampled
projections, measured side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/plan_throughput.py [--corpus ../shared/corpus] [--seeds 5]

Planning a chunker change (sliding 512/10 % → 256/20 %) against an explicit baseline chunks the corpus
twice (old and new config), so its throughput is reported per MB of text chunked (2 × corpus) and
compared with tokenising the same text once per pass with the raw tokenizer (the ceiling).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from reindex import api
from reindex.adapters.tokenizers import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tmp: Path, name: str, corpus: Path, chunker: str) -> Path:
    p = tmp / name
    p.write_text(f"index: peps\nsource: {corpus}\ntext: {{chunker: {chunker}}}\nstate: {{uri: {tmp / 'state'}}}\n"
                 "cost: {usd_per_mtok: 0.02, tokens_per_minute: 3500000}\n")
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sample", type=int, default=200)
    args = ap.parse_args()
    new = args.corpus / "snapshot_new.parquet"
    texts = pq.read_table(new, columns=["text"]).column("text").to_pylist()
    mb = sum(len(t.encode()) for t in texts) / 1e6

    tok = load_tokenizer("all-MiniLM-L6-v2")
    t0, c0 = time.perf_counter(), time.process_time()
    for t in texts:
        tok.offsets(t)
    raw_wall, raw_cpu = time.perf_counter() - t0, time.process_time() - c0

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        old_cfg = _cfg(tmp, "512.yaml", new, "{kind: sliding, size: 512, overlap: 0.1}")
        new_cfg = _cfg(tmp, "256.yaml", new, "{kind: sliding, size: 256, overlap: 0.2}")
        t0, c0 = time.perf_counter(), time.process_time()
        exact, _ = api.make_plan(new_cfg, baseline_config=old_cfg, out=None)
        plan_wall, plan_cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            sampled, _ = api.make_plan(new_cfg, baseline_config=old_cfg, out=None, sample=args.sample, seed=seed)
            secs = time.perf_counter() - t0
            rows.append((seed, sampled.body["projection"]["intervals"], secs))

    w = exact.body["work"]
    print(f"PEP corpus: {len(texts)} documents, {mb:.2f} MB; chunker change sliding 512/10% → 256/20%")
    print(f"{'':32} {'MB/s cpu':>9} {'MB/s wall':>10} {'ratio (cpu)':>12}")
    print(f"{'raw tokenizer (offsets, 1 pass)':32} {mb / raw_cpu:9.2f} {mb / raw_wall:10.2f} {1.0:12.2f}")
    print(f"{'exact plan (2 passes)':32} {2 * mb / plan_cpu:9.2f} {2 * mb / plan_wall:10.2f} "
          f"{(2 * mb / plan_cpu) / (mb / raw_cpu):12.2f}")
    print(f"exact: chunks {w['chunks_old']:,} → {w['chunks_new']:,}, reused {w['chunks_reused']:,}, "
          f"tokens to embed {w['tokens_to_embed']:,}; planning {plan_wall:.1f} s wall")
    print(f"\nsampled projection, N = {args.sample} of {len(texts)} (error of the point estimate; interval covers exact?)")
    print(f"{'seed':>4} {'chunks_new err':>15} {'covers':>7} {'tokens err':>11} {'covers':>7} {'chunks_old err':>15} {'covers':>7} {'seconds':>8}")
    for seed, iv, secs in rows:
        cells = []
        for f in ("chunks_new", "tokens_to_embed", "chunks_old"):
            e = (iv[f]["estimate"] - w[f]) / w[f] * 100
            cells.append(f"{e:+14.2f}%" if f != "tokens_to_embed" else f"{e:+10.2f}%")
            cells.append(f"{'yes' if iv[f]['low'] <= w[f] <= iv[f]['high'] else 'NO':>7}")
        print(f"{seed:>4} {cells[0]} {cells[1]} {cells[2]} {cells[3]} {cells[4]} {cells[5]} {secs:8.1f}")


if __name__ == "__main__":
    main()
