"""all-MiniLM-L6-v2 (float32 torch) vs a static model distilled from it (vector.provider model2vec): encode
speed on the shared corpus, side by side in one run, per CPU-second (issue 32.1).

Chunks: the default recursive chunker (250 tokens) over the documents of ``snapshot_new.parquet``, ``--chunks``
drawn with a seed. Both models embed the same chunks through reindex's own embedders, after a warm-up,
``--repeat`` times interleaved (A B A B …: the box is shared, so a load change hits both). Each call is timed
with :class:`reindex.foundation.throughput.CpuClock` (the process's CPU seconds: torch's intra-op threads included) and
in wall seconds. Prints tokens per CPU-second of each (median), the ratio, the load and the torch threads.
The distillation is made (or found) in the model cache first and timed when made.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/static_speed.py [--chunks 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "snapshot_new.parquet"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    from reindex.domain.config import PipelineConfig, SourceConfig, VectorHalf
    from reindex.adapters.embedders import make_embedder, model_files
    from reindex.domain.identity import resolve_config
    from reindex.adapters.pipeline import TextPipeline
    from reindex.adapters.sources import open_source
    from reindex.adapters.sources.base import ScanReport
    from reindex.foundation.throughput import CpuClock, host_load

    text = resolve_config(PipelineConfig(index="bench", source=args.corpus, vector=VectorHalf(provider="hash"))).text
    pipe = TextPipeline(text, "bench")
    texts = [r.text for doc in open_source(SourceConfig(uri=args.corpus)).scan(ScanReport()) for r in pipe.chunk_document(doc)]
    picked = random.Random(args.seed).sample(texts, min(args.chunks, len(texts)))

    static_half = VectorHalf(provider="model2vec", model="all-MiniLM-L6-v2", dimension=256)
    c0, w0 = time.process_time(), time.perf_counter()
    folder = model_files(static_half)
    made = {"cpu_s": round(time.process_time() - c0, 1), "wall_s": round(time.perf_counter() - w0, 1), "folder": str(folder)}
    models = {"minilm": make_embedder(VectorHalf(), batch_size=64, options=None),
              "static": make_embedder(static_half, batch_size=64)}
    for emb in models.values():
        emb.embed(picked[:8])
    clock = CpuClock()
    runs: dict[str, list[dict]] = {k: [] for k in models}
    for _ in range(args.repeat):
        for name, emb in models.items():
            res, wall, cpu = clock.call(emb.embed, picked)
            runs[name].append({"tokens": res.tokens, "cpu_s": cpu, "wall_s": wall})
    out = {"corpus": args.corpus, "chunks": len(picked), "repeat": args.repeat, "torch_threads": torch.get_num_threads(),
           **host_load(), "distillation": made}
    for name, rs in runs.items():
        out[name] = {"tokens": rs[0]["tokens"],
                     "tokens_per_cpu_second": round(statistics.median(r["tokens"] / r["cpu_s"] for r in rs), 1),
                     "tokens_per_wall_second": round(statistics.median(r["tokens"] / r["wall_s"] for r in rs), 1),
                     "chunks_per_cpu_second": round(statistics.median(len(picked) / r["cpu_s"] for r in rs), 1),
                     "cpu_s": [round(r["cpu_s"], 4) for r in rs]}
    # Per chunk, not per token: the two tokenizers differ (the static model's vocabulary is MiniLM's, cleaned).
    out["static_over_minilm_chunks_per_cpu_second"] = round(
        out["static"]["chunks_per_cpu_second"] / out["minilm"]["chunks_per_cpu_second"], 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
