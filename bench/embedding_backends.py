"""Embedding at the hardware's speed, on this CPU (issue 25). Same-run ratios: the box is shared and noisy.

(a) batches: today's calls (the distinct texts of one batch of documents, longest first, 64 texts a call)
    vs token-budget calls (the same texts, longest first, as many per call as fit ``budget`` padded
    tokens: len(call) × longest ≤ budget), for float32 torch and int8 ONNX; tokens/s, runs interleaved.
(b) apply ÷ raw encode per backend: an initial apply of documents (in-process runner, 2 shards) vs
    ``model.encode`` of exactly the texts it embedded; tokens/s inside apply's embedding calls and over its
    shards phase, each ÷ the mean of a raw encode before and after; and per CPU-second (the whole apply's
    process CPU, chunking and store writes included, ÷ raw encode's), which the box's load disturbs less.
(c) int8 ONNX vs float32 torch on the shared labelled queries (English, ``queries.jsonl`` → the PEP
    snapshot; the pool is the queries' own documents, recursive chunks of 250 tokens): encode speedup on
    the pool's chunks (wall and CPU seconds), document recall@10, recall@1 and MRR of each and the paired
    differences with bootstrap intervals over queries (:func:`reindex.foundation.stats.paired_bootstrap`), plus the
    mean cosine of the two backends' vectors.

(d) float tolerance on this CPU (float32 torch): a text alone vs in a padded batch, 1 vs 2 threads, and
    float32 ONNX vs torch. GPUs are not measured here (no device on this machine).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/embedding_backends.py [--parts a,b,c,d] [--chunks 320] [--queries 84]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from reindex import api  # noqa: E402
from reindex.domain.config import EmbedConfig, TextHalf, VectorHalf  # noqa: E402
from reindex.books.manifests import DOC_BATCH  # noqa: E402
from reindex.adapters.pipeline import TextPipeline  # noqa: E402
from reindex.adapters.sources.base import Document  # noqa: E402
from reindex.foundation.stats import paired_bootstrap  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
CPU = EmbedConfig(device="cpu")


def vector_of(backend: str, precision: str) -> VectorHalf:
    """A resolved vector half of the default model on ``backend``/``precision``."""
    from reindex.usecases.configure import resolve
    from reindex.domain.config import config_from_dict

    cfg = config_from_dict({"index": "b", "source": ".", "vector": {"backend": backend, "precision": precision}})
    return resolve(cfg).vector


BACKENDS = {"torch/float32": ("torch", "float32"), "onnx/int8": ("onnx", "int8")}


def snapshot() -> dict[str, str]:
    import pyarrow.parquet as pq

    t = pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pydict()
    return dict(zip(t["doc_id"], t["text"]))


def chunk_docs(docs: dict[str, str], vid: str = "bench") -> dict[str, list[tuple[str, int]]]:
    """doc id → (chunk text, tokens) with the default text half (recursive 250, MiniLM's tokenizer)."""
    pipe = TextPipeline(TextHalf(), vid)
    out = {}
    for d, text in docs.items():
        recs = pipe.chunk_document(Document.of(d, text.encode()))
        out[d] = [(r.text, r.tokens) for r in recs]
    return out


def sample_docs(corpus: dict[str, str], chunks: int, seed: int = 0) -> dict[str, list[tuple[str, int]]]:
    """Random documents, whole, until ``chunks`` chunks."""
    ids = sorted(corpus)
    random.Random(seed).shuffle(ids)
    out: dict[str, list[tuple[str, int]]] = {}
    total = 0
    for d in ids:
        got = chunk_docs({d: corpus[d]})[d]
        out[d] = got
        total += len(got)
        if total >= chunks:
            break
    return out


# ------------------------------------------------------------------------------------------------ (a)


def calls_today(batch: list[tuple[str, int]], size: int = 64) -> list[list[str]]:
    order = [t for t, _ in sorted(batch, key=lambda x: len(x[0]), reverse=True)]
    return [order[i : i + size] for i in range(0, len(order), size)]


def calls_by_tokens(batch: list[tuple[str, int]], budget: int, cap: int = 256) -> list[list[str]]:
    order = sorted(batch, key=lambda x: x[1], reverse=True)
    calls: list[list[str]] = []
    cur: list[str] = []
    longest = 0
    for text, n in order:
        n = min(n + 2, cap)
        if cur and (len(cur) + 1) * max(longest, n) > budget:
            calls.append(cur)
            cur, longest = [], 0
        cur.append(text)
        longest = max(longest, n)
    if cur:
        calls.append(cur)
    return calls


def part_a(corpus: dict[str, str], chunks: int, reps: int) -> dict:
    docs = sample_docs(corpus, chunks)
    ids = list(docs)
    doc_batches = [[c for d in ids[i : i + DOC_BATCH] for c in dict.fromkeys(docs[d])] for i in range(0, len(ids), DOC_BATCH)]
    n_texts = sum(len(b) for b in doc_batches)
    out: dict = {"documents": len(ids), "texts": n_texts, "doc_batches": len(doc_batches)}
    for name, (backend, precision) in BACKENDS.items():
        emb = api.make_embedder(vector_of(backend, precision), batch_size=64, options=CPU)
        emb.embed([t for t, _ in doc_batches[0][:8]])  # warm-up
        plans = {"today (64 texts/call)": [calls_today(b) for b in doc_batches]}
        for budget in (8192, 32768):
            plans[f"tokens ≤ {budget}/call"] = [calls_by_tokens(b, budget) for b in doc_batches]
        rates: dict[str, list[float]] = {k: [] for k in plans}
        cpu_rates: dict[str, list[float]] = {k: [] for k in plans}
        for _ in range(reps):
            for label, per_batch in plans.items():
                tokens, t0, c0 = 0, time.perf_counter(), time.process_time()
                for calls in per_batch:
                    for call in calls:
                        emb.batch_size = len(call)  # one forward pass per call
                        tokens += emb.embed(call).tokens
                rates[label].append(tokens / (time.perf_counter() - t0))
                cpu_rates[label].append(tokens / (time.process_time() - c0))
        base = statistics.mean(rates["today (64 texts/call)"])
        cpu_base = statistics.mean(cpu_rates["today (64 texts/call)"])
        out[name] = {k: {"tokens_per_s": round(statistics.mean(v)), "vs_today": round(statistics.mean(v) / base, 3),
                         "tokens_per_cpu_s": round(statistics.mean(cpu_rates[k])),
                         "vs_today_cpu": round(statistics.mean(cpu_rates[k]) / cpu_base, 3),
                         "calls": sum(len(c) for c in plans[k]),
                         "runs": [round(x) for x in v]} for k, v in rates.items()}
        print(name, json.dumps(out[name]), flush=True)
    return out


# ------------------------------------------------------------------------------------------------ (b)


def part_b(corpus: dict[str, str], chunks: int) -> dict:
    docs = sample_docs(corpus, chunks, seed=1)
    out: dict = {"documents": len(docs)}
    root = Path(tempfile.mkdtemp(prefix="reindex-bench-emb-"))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": list(docs), "text": [corpus[d] for d in docs]}), root / "corpus.parquet")
        texts = list(dict.fromkeys(t for d in docs for t, _ in docs[d]))
        for name, (backend, precision) in BACKENDS.items():
            ws = root / name.replace("/", "-")
            ws.mkdir()
            cfg = ws / "reindex.yaml"
            cfg.write_text(f"index: b\nsource: {root / 'corpus.parquet'}\napply: {{shards: 2}}\nembed: {{device: cpu}}\n"
                           f"vector: {{backend: {backend}, precision: {precision}}}\n", encoding="utf-8")
            emb = api.make_embedder(vector_of(backend, precision), batch_size=64, options=CPU)
            emb.embed(texts[:8])

            def raw() -> tuple[int, float, float]:
                t0, c0 = time.perf_counter(), time.process_time()
                res = emb.embed(sorted(texts, key=len, reverse=True))
                return res.tokens, time.perf_counter() - t0, time.process_time() - c0

            r1 = raw()
            _, path = api.make_plan(cfg, out=ws / "plans")
            c0 = time.process_time()
            run = api.apply_plan(path, cfg, prefect=False)
            apply_cpu = time.process_time() - c0  # everything apply does in this process, not only embedding
            r2 = raw()
            raw_tps = statistics.mean([r1[0] / r1[1], r2[0] / r2[1]])
            raw_cpu_tps = statistics.mean([r1[0] / r1[2], r2[0] / r2[2]])
            th = run.report["throughput"]
            apply_tps = th["tokens_embedded"] / th["embed_seconds"]
            shards_tps = th["tokens_embedded"] / run.report["phases"]["shards+catch-up"]
            out[name] = {"texts": len(texts), "raw_tokens_per_s": round(raw_tps), "raw_runs": [round(r1[0] / r1[1]), round(r2[0] / r2[1])],
                         "apply_embed_tokens_per_s": round(apply_tps), "apply_shards_tokens_per_s": round(shards_tps),
                         "embed_calls_over_raw": round(apply_tps / raw_tps, 3), "shards_phase_over_raw": round(shards_tps / raw_tps, 3),
                         "raw_tokens_per_cpu_s": round(raw_cpu_tps),
                         "apply_tokens_per_cpu_s": round(th["tokens_embedded"] / apply_cpu),
                         "apply_cpu_over_raw_cpu": round(th["tokens_embedded"] / apply_cpu / raw_cpu_tps, 3),
                         "embedded": run.report["actual"]["embedded"], "device": run.report["embedder"]["device"]}
            print(name, json.dumps(out[name]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------------ (c)


def part_c(corpus: dict[str, str], n_queries: int) -> dict:
    qs = [json.loads(line) for line in (CORPUS / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    qs = [q for q in qs if q["lang"] == "en" and q["doc_path"] in corpus][:n_queries]
    pool = sorted({q["doc_path"] for q in qs})
    chunked = chunk_docs({d: corpus[d] for d in pool})
    texts, owners = [], []
    for d in pool:
        for t, _ in chunked[d]:
            texts.append(t)
            owners.append(d)
    owners_arr = np.asarray(owners, dtype=object)
    out: dict = {"queries": len(qs), "documents": len(pool), "chunks": len(texts)}
    recalls: dict[str, list[float]] = {}
    firsts: dict[str, list[float]] = {}
    rrs: dict[str, list[float]] = {}
    vecs: dict[str, np.ndarray] = {}
    for name, (backend, precision) in BACKENDS.items():
        emb = api.make_embedder(vector_of(backend, precision), batch_size=64, options=CPU)
        emb.embed(texts[:8])
        t0, c0 = time.perf_counter(), time.process_time()
        res = emb.embed(texts)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        qv = emb.embed([q["query"] for q in qs]).vectors
        vecs[name] = res.vectors
        scores = qv @ res.vectors.T
        rec, top1, rr = [], [], []
        for i, q in enumerate(qs):
            ranked = list(dict.fromkeys(owners_arr[np.argsort(-scores[i], kind="stable")].tolist()))
            rank = ranked.index(q["doc_path"]) + 1
            rec.append(1.0 if rank <= 10 else 0.0)
            top1.append(1.0 if rank == 1 else 0.0)
            rr.append(1.0 / rank)
        recalls[name], firsts[name], rrs[name] = rec, top1, rr
        out[name] = {"encode_seconds": round(seconds, 1), "encode_cpu_seconds": round(cpu, 1), "tokens": res.tokens,
                     "tokens_per_s": round(res.tokens / seconds), "tokens_per_cpu_s": round(res.tokens / cpu),
                     "recall_at_10": round(statistics.mean(rec), 4), "recall_at_1": round(statistics.mean(top1), 4),
                     "mrr": round(statistics.mean(rr), 4)}
        print(name, json.dumps(out[name]), flush=True)
    a, b = "torch/float32", "onnx/int8"
    out["speedup_int8_over_float32"] = {"wall": round(out[a]["encode_seconds"] / out[b]["encode_seconds"], 2),
                                        "cpu": round(out[a]["encode_cpu_seconds"] / out[b]["encode_cpu_seconds"], 2)}
    for label, per in (("recall_at_10", recalls), ("recall_at_1", firsts), ("mrr", rrs)):
        diff = paired_bootstrap([y - x for x, y in zip(per[a], per[b])], seed=0)
        out[f"{label}_int8_minus_float32"] = {k: round(v, 4) if isinstance(v, float) else v for k, v in diff.items()}
    cos = np.sum(vecs[a] * vecs[b], axis=1)
    out["cosine_int8_to_float32"] = {"mean": round(float(cos.mean()), 4), "min": round(float(cos.min()), 4)}
    print(json.dumps({k: v for k, v in out.items() if k not in BACKENDS}))
    return out


# ------------------------------------------------------------------------------------------------ (d)


def part_d(corpus: dict[str, str], n: int = 48) -> dict:
    """Float tolerance of float32 torch on this CPU: the same texts alone vs in a padded batch, on 1 vs 2
    threads, and float32 ONNX (another runtime, same weights) vs torch. Max |Δ| of a coordinate, least cosine."""
    import torch

    docs = sample_docs(corpus, n, seed=2)
    texts = [t for d in docs for t, _ in docs[d]][:n]
    emb = api.make_embedder(vector_of("torch", "float32"), batch_size=64, options=CPU)
    ox = api.make_embedder(vector_of("onnx", "float32"), batch_size=64, options=CPU)

    def cmp(a: np.ndarray, b: np.ndarray) -> dict:
        return {"max_abs_diff": float(f"{np.abs(a - b).max():.3g}"), "min_cosine": round(float(np.sum(a * b, axis=1).min()), 7)}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    batched_1 = emb.embed(texts).vectors
    alone_1 = np.concatenate([emb.embed([t]).vectors for t in texts])
    torch.set_num_threads(max(2, threads))
    batched_2 = emb.embed(texts).vectors
    torch.set_num_threads(threads)
    out = {"texts": len(texts), "alone_vs_batch_of_64": cmp(alone_1, batched_1),
           "threads_1_vs_2": cmp(batched_1, batched_2), "onnx_float32_vs_torch": cmp(ox.embed(texts).vectors, batched_1)}
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="a,b,c,d")
    ap.add_argument("--chunks", type=int, default=320, help="(a), (b): documents until this many chunks")
    ap.add_argument("--reps", type=int, default=2, help="(a): interleaved repetitions")
    ap.add_argument("--queries", type=int, default=84, help="(c): English labelled queries")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    corpus = snapshot()
    results: dict = {"threads": None}
    import torch

    results["threads"] = torch.get_num_threads()
    parts = set(args.parts.split(","))
    if "a" in parts:
        results["a"] = part_a(corpus, args.chunks, args.reps)
    if "b" in parts:
        results["b"] = part_b(corpus, args.chunks)
    if "c" in parts:
        results["c"] = part_c(corpus, args.queries)
    if "d" in parts:
        results["d"] = part_d(corpus)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
