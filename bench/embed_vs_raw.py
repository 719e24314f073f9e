"""Embed CPU ÷ the raw library call, per provider, side by side in one run (issue 44, item 1).

For each provider the same texts go through (interleaved, ``--repeat`` rounds, medians of process CPU-seconds):

* **raw**: the library call the embedder stands on, on the same inputs (``StaticModel.encode``,
  ``SentenceTransformer.encode``, the LangChain class's ``embed_documents``, one ``httpx`` POST per request to a
  local OpenAI-compatible stub); the hash provider has no library under it;
* **ours**: ``embedder.embed`` (each text tokenized once: its count and the model's input from the same ids);
* **before**: the path of the previous release, kept as the embedder's fallback (reindex's tokenizer counts every
  text, then the library tokenizes it again), for the static model and MiniLM.

Texts: chunks of the shared PEP snapshot (recursive 250, MiniLM tokens), ``--static-chunks`` for the static
model, hash and the LangChain fake, ``--minilm-chunks`` for MiniLM (float32 torch, the process's default
threads unless ``--threads``). The static model is the distillation of the packaged MiniLM (in the model cache;
made first, and timed, when absent).

    HF_HUB_OFFLINE=1 nice .venv/bin/python bench/embed_vs_raw.py [--repeat 5] [--minilm-chunks 96]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SNAPSHOT = REPO.parent / "shared" / "corpus" / "snapshot_new.parquet"


def chunks(n: int) -> list[str]:
    import pyarrow.parquet as pq

    from reindex.adapters.pipeline import TextPipeline
    from reindex.adapters.sources.base import Document
    from reindex.domain.config import TextHalf

    t = pq.read_table(SNAPSHOT, columns=["doc_id", "text"]).to_pydict()
    pipe = TextPipeline(TextHalf(), "bench")
    out: list[str] = []
    for d, text in zip(t["doc_id"], t["text"]):
        out += [r.text for r in pipe.chunk_document(Document.of(d, text.encode()))]
        if len(out) >= n:
            break
    return out[:n]


def cpu(fn) -> float:
    c = time.process_time()
    fn()
    return time.process_time() - c


def side_by_side(ways: dict, repeat: int) -> dict[str, float]:
    """Median CPU-seconds of each way, the ways' order rotating every round (a load change hits all)."""
    for f in ways.values():
        f()  # warm-up: first-call allocations are not throughput
    got: dict[str, list[float]] = {k: [] for k in ways}
    names = list(ways)
    for i in range(repeat):
        for name in names[i % len(names):] + names[: i % len(names)]:
            got[name].append(cpu(ways[name]))
    return {k: statistics.median(v) for k, v in got.items()}


class _Stub(BaseHTTPRequestHandler):
    """An OpenAI-compatible ``/embeddings`` answering deterministic vectors (what a local server would send)."""

    dim = 256

    def log_message(self, *a) -> None:  # noqa: ANN002
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"index": i, "embedding": [((i + j) % 7) / 7.0 + 0.01 for j in range(self.dim)]}
                for i, _ in enumerate(body["input"])]
        out = json.dumps({"data": data, "usage": {"prompt_tokens": sum(len(t.split()) for t in body["input"])}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--static-chunks", type=int, default=2000)
    ap.add_argument("--minilm-chunks", type=int, default=96)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads for MiniLM (0: torch's default)")
    ap.add_argument("--providers", default="static,minilm,hash,langchain,openai")
    args = ap.parse_args()
    import torch

    from reindex.adapters.embedders import make_embedder, model_files
    from reindex.domain.config import EmbedConfig, VectorHalf

    if args.threads:
        torch.set_num_threads(args.threads)
    wanted = args.providers.split(",")
    texts = chunks(max(args.static_chunks, args.minilm_chunks))
    rows = []
    print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op threads", flush=True)
    if "static" in wanted:
        vector = VectorHalf(provider="model2vec", dimension=256)
        t0 = time.process_time()
        model_files(vector)  # distilled here (once; cached) when absent
        if time.process_time() - t0 > 1:
            print(f"distilled the static model: {time.process_time() - t0:.1f} CPU-s", flush=True)
        emb = make_embedder(vector)
        part = texts[: args.static_chunks]
        fed = emb._fed

        def before() -> None:
            emb._fed = False
            try:
                emb.embed(part)
            finally:
                emb._fed = fed
        rows.append(("model2vec (static, 256 d)", len(part), side_by_side(
            {"raw": lambda: emb.raw(part), "ours": lambda: emb.embed(part), "before": before}, args.repeat)))
    if "minilm" in wanted:
        emb = make_embedder(VectorHalf(), options=EmbedConfig(device="cpu"))
        part = texts[: args.minilm_chunks]
        feed = emb._feed

        def before() -> None:
            emb._feed = None
            try:
                emb.embed(part)
            finally:
                emb._feed = feed
        rows.append((f"all-MiniLM-L6-v2 (torch, {torch.get_num_threads()} thr)", len(part), side_by_side(
            {"raw": lambda: emb.raw(part), "ours": lambda: emb.embed(part), "before": before}, args.repeat)))
    if "hash" in wanted:
        emb = make_embedder(VectorHalf(provider="hash"))
        part = texts[: args.static_chunks]
        rows.append(("hash (no library)", len(part), side_by_side({"ours": lambda: emb.embed(part)}, args.repeat)))
    if "langchain" in wanted:
        try:
            emb = make_embedder(VectorHalf(provider="langchain", model="langchain_core.embeddings.DeterministicFakeEmbedding",
                                           params={"size": 256}, dimension=256))
        except Exception as err:  # noqa: BLE001 - not installed: said, not fatal
            print(f"langchain: skipped ({err})")
        else:
            part = texts[: args.static_chunks]
            rows.append(("langchain DeterministicFakeEmbedding", len(part), side_by_side(
                {"raw": lambda: emb.raw(part), "ours": lambda: emb.embed(part)}, args.repeat)))
    if "openai" in wanted:
        import httpx

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        os.environ["BENCH_KEY"] = "k"
        options = EmbedConfig(base_url=url, api_key_env="BENCH_KEY", concurrency=1)
        emb = make_embedder(VectorHalf(provider="openai", model="stub", dimension=256, backend="api"), options=options)
        part = texts[:256]
        step = options.request_texts
        client = httpx.Client(base_url=url, headers={"Authorization": "Bearer k"})

        def raw() -> None:
            for i in range(0, len(part), step):
                r = client.post("/embeddings", json={"model": "stub", "input": part[i:i + step], "encoding_format": "float"})
                np.asarray([d["embedding"] for d in r.json()["data"]], dtype=np.float32)
        rows.append(("openai-compatible (local stub)", len(part), side_by_side(
            {"raw": raw, "ours": lambda: emb.embed(part)}, args.repeat)))
        server.shutdown()
    print(f"\nmedian of {args.repeat} (CPU-s)               texts      raw     ours   before   ours/raw  before/raw")
    for name, n, r in rows:
        raw = r.get("raw")
        print(f"{name:36s} {n:6d} {raw if raw is not None else float('nan'):8.3f} {r['ours']:8.3f} "
              f"{r.get('before', float('nan')):8.3f} {r['ours'] / raw if raw else float('nan'):10.3f} "
              f"{r['before'] / raw if raw and 'before' in r else float('nan'):11.3f}")
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
