"""A reader's query embedding ÷ the raw one-thread encode, in a held reader (issue 44, item 2).

One process, all-MiniLM-L6-v2 (float32 torch), the box's default torch threads in the main thread (what a build
runs with). A bare edge store of ``--points`` random 384-d points under alias ``docs`` (no population record:
the reader embeds with the config file's vector half, which is MiniLM), then for each of ``--queries`` query
texts, the ways in rotating order, process CPU and wall of each call:

* **querier**: ``api.Querier.query(text, k=10)`` on a held reader (embedding, search, shaping);
* **reader embed**: a reader's query embedder alone (``Context.side(…).query_embedder()``, what ``Querier`` embeds
  with: one intra-op thread on the query pool);
* **before**: the embedder readers used before (``reindex.context.backends.make_embedder``), called on the main
  thread at the process's default threads;
* **raw 1-thread**: ``SentenceTransformer.encode([text])`` on a thread set to one torch thread.

Prints medians per query (ms of CPU and wall), the ratios to raw, and the main thread's torch threads before and
after (unchanged: the reader's setting is its own).

    HF_HUB_OFFLINE=1 nice .venv/bin/python bench/query_embed.py [--queries 60] [--points 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = "index: docs\nsource: ./corpus\nstate: {uri: ./state}\nstore: {path: ./store}\nembed: {device: cpu}\n"


def build(root: Path, n: int) -> Path:
    from reindex import api
    from reindex.adapters.stores.edge import open_edge_store
    from reindex.adapters.stores.vectors import Point

    (root / "corpus").mkdir(parents=True)
    config = root / "reindex.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    cfg = api.load_resolved(config)
    store = open_edge_store(root / "store")
    store.create_collection("docs__bench", dimension=cfg.vector.dimension, distance="cosine", bulk=True)
    store.create_payload_index("docs__bench", "doc_id")
    rng = np.random.default_rng(0)
    for start in range(0, n, 512):
        vecs = rng.standard_normal((min(512, n - start), cfg.vector.dimension)).astype(np.float32)
        store.upsert("docs__bench", [
            Point(str(uuid.uuid5(uuid.NAMESPACE_URL, str(start + i))), v,
                  {"doc_id": f"doc-{(start + i) // 8}", "ordinal": (start + i) % 8, "page_content": f"chunk {start + i}",
                   "metadata": {"doc_id": f"doc-{(start + i) // 8}"}}) for i, v in enumerate(vecs)])
    store.finish_bulk("docs__bench")
    store.swap_alias("docs", "docs__bench", None)
    store.close()
    return config


def queries(n: int) -> list[str]:
    import json

    path = REPO.parent / "shared" / "corpus" / "queries.jsonl"
    out = [json.loads(line)["query"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return (out * (n // max(len(out), 1) + 1))[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--points", type=int, default=2000)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    import logging

    import torch

    from reindex import api
    from reindex.context import Context, backends

    logging.getLogger("reindex").setLevel(logging.ERROR)  # the "no population record" note, once
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-query-embed-"))
    shutil.rmtree(root, ignore_errors=True)
    config = build(root, args.points)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        main_threads = torch.get_num_threads()
        cfg = api.load_resolved(config)
        querier = api.Querier(config)
        reader_q = Context(cfg).next_side().query_embedder()
        before_q = backends.make_embedder(cfg.vector.for_queries(), options=cfg.embed)
        model = before_q.model
        ways = {
            "querier": lambda t: querier.query(t, k=10),
            "reader embed": lambda t: reader_q.embed([t]),
            "before": lambda t: before_q.embed([t]),
        }
        texts = queries(args.queries)
        for f in ways.values():
            f(texts[0])
        _raw_cpu(model, texts[0])
        cpu: dict[str, list[float]] = {k: [] for k in [*ways, "raw 1-thread"]}
        wall: dict[str, list[float]] = {k: [] for k in cpu}
        names = list(ways)
        for i, text in enumerate(texts):
            for name in names[i % 3:] + names[: i % 3]:
                time.sleep(0.01)  # the last call's OpenMP spinning is over before the next is timed
                c, w = time.process_time(), time.perf_counter()
                ways[name](text)
                cpu[name].append(time.process_time() - c)
                wall[name].append(time.perf_counter() - w)
            time.sleep(0.01)
            t_raw = _raw_cpu(model, text)
            cpu["raw 1-thread"].append(t_raw[0])
            wall["raw 1-thread"].append(t_raw[1])
        after_threads = torch.get_num_threads()
        med = {k: (statistics.median(cpu[k]) * 1e3, statistics.median(wall[k]) * 1e3) for k in cpu}
        r = med["raw 1-thread"]
        print(f"{len(texts)} queries, {args.points} points, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
              f"main thread torch threads {main_threads} before, {after_threads} after")
        print(f"{'per query (median)':24s} {'CPU ms':>8s} {'wall ms':>8s} {'CPU ÷ raw':>10s} {'wall ÷ raw':>11s}")
        for k, (c, w) in med.items():
            print(f"{k:24s} {c:8.2f} {w:8.2f} {c / r[0]:10.2f} {w / r[1]:11.2f}")
        querier.close()
    finally:
        os.chdir(cwd)
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


_RAW: dict = {}


def _raw_cpu(model, text: str) -> tuple[float, float]:
    """CPU (the process's, over the call) and wall of ``model.encode([text])`` on a thread of one torch thread."""
    out: list[tuple[float, float]] = []

    def run() -> None:
        if "ready" not in _RAW:  # this thread at one torch thread, the process's number left as it was
            from reindex.adapters.embedders.sentence_transformers import one_intra_op_thread

            one_intra_op_thread()
            _RAW["ready"] = True
        c, w = time.process_time(), time.perf_counter()
        model.encode([text], convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        out.append((time.process_time() - c, time.perf_counter() - w))

    t = _RAW.get("thread")
    if t is None:
        from concurrent.futures import ThreadPoolExecutor

        t = _RAW["thread"] = ThreadPoolExecutor(1)
    t.submit(run).result()
    return out[0]


if __name__ == "__main__":
    main()
