"""Live mode latency: from a change written to the source to a reader in another process seeing it.

A folder corpus (the bundled 24 PEPs, or ``--copies N`` copies of them with new ids for a larger index), the
hash embedder, built and cut over; then ``reindex sync --watch --interval I`` runs as a child process and this
process (the reader: one ``api.Querier``) appends a unique sentence to a random document, notes the time, and
polls the querier (filtered on that document) every 20 ms until a chunk holds the sentence. ``--changes`` such
edits one after the other; prints p50 / p95 / max of the latency, and the watch's own cycles.

    PYTHONPATH=src .venv/bin/python bench/watch_latency.py [--changes 30] [--interval 0.5] [--copies 1]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import reindex
from reindex import api

SAMPLE = Path(reindex.__file__).resolve().parent / "sample" / "corpus"
REINDEX = Path(sys.executable).with_name("reindex")
CONFIG = """\
index: docs
source: ./corpus
text: {chunker: {kind: recursive, size: 150}}
vector: {provider: hash}
apply: {shards: 4}
approval: {max_tokens: null, max_usd: null}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=30)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--copies", type=int, default=1)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="watch-latency-"))
    try:
        corpus = root / "corpus"
        corpus.mkdir()
        for c in range(args.copies):
            for f in SAMPLE.glob("*"):
                shutil.copy(f, corpus / (f.name if c == 0 else f"c{c}-{f.name}"))
        (root / "reindex.yaml").write_text(CONFIG)
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        run = lambda *a: subprocess.run([str(REINDEX), *a], cwd=root, env=env, check=True, capture_output=True)  # noqa: E731
        plan = subprocess.run([str(REINDEX), "plan", "--json"], cwd=root, env=env, capture_output=True, text=True)
        path = __import__("json").loads(plan.stdout)["plan_file"]
        run("approve", path, "--by", "bench")
        run("apply", path, "--no-progress", "--no-prefect")
        run("cutover", path)
        docs = sorted(p.name for p in corpus.iterdir())
        watcher = subprocess.Popen([str(REINDEX), "sync", "--watch", "--interval", str(args.interval)], cwd=root,
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        rng = random.Random(0)
        latencies = []
        os.chdir(root)
        with api.Querier(root / "reindex.yaml") as q:
            for n in range(args.changes):
                doc = rng.choice(docs)
                sentence = f"Latency probe {n} {rng.random():.9f} of the live mode."
                p = corpus / doc
                p.write_text(p.read_text(encoding="utf-8") + f"\n\n{sentence}\n", encoding="utf-8")
                t0 = time.perf_counter()
                while True:
                    got = q.query("probe", k=500, filters={"doc_id": doc})
                    if any(sentence in r["page_content"] for r in got.results):
                        break
                    if time.perf_counter() - t0 > 120:
                        raise SystemExit(f"change {n} not seen within 120 s")
                    time.sleep(0.02)
                latencies.append(time.perf_counter() - t0)
        watcher.send_signal(signal.SIGTERM)
        out, _ = watcher.communicate(timeout=60)
        lat = sorted(latencies)
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        print(f"documents {len(docs)}; interval {args.interval} s; {args.changes} changes; "
              f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"latency change → reader sees it: p50 {statistics.median(lat):.2f} s, p95 {p95:.2f} s, "
              f"max {lat[-1]:.2f} s")
        print(out.strip().splitlines()[-1] if out.strip() else "")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
