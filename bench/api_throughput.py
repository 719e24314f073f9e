"""The OpenAI-compatible embedder at a loopback server's enforced limits (tests/helpers_api.py: token buckets
of ``--burst`` seconds, 429 + Retry-After past them, ``--latency`` per answer): sustained tokens/min ÷ the
tokens-per-minute limit, and requests/min ÷ the requests limit, over ``--seconds`` of work shared by
``--threads`` shard threads calling one embedder (one client per process, as in apply). The first
``--skip`` seconds are left out of the rate (start-up).

    .venv/bin/python bench/api_throughput.py [--seconds 40] [--tpm 600000] [--rpm 3000] [--latency 0.15]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reindex.domain.config import EmbedConfig, VectorHalf  # noqa: E402
from reindex.adapters.embedders import make_embedder  # noqa: E402
from tests.helpers_api import Limits, LimitedServer, sustained_tokens_per_minute  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--tpm", type=float, default=600_000, help="tokens-per-minute limit (server and client)")
    ap.add_argument("--rpm", type=float, default=3_000, help="requests-per-minute limit (server and client)")
    ap.add_argument("--latency", type=float, default=0.15, help="seconds per answer")
    ap.add_argument("--burst", type=float, default=1.0, help="server bucket size in seconds of the rate")
    ap.add_argument("--threads", type=int, default=4, help="shard threads sharing the embedder")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--request-texts", type=int, default=16)
    ap.add_argument("--batch", type=int, default=64, help="texts per embed() call (apply.embed_batch_size)")
    ap.add_argument("--skip", type=float, default=5.0)
    args = ap.parse_args()

    os.environ["BENCH_EMBED_KEY"] = "sk-bench"
    limits = Limits(requests_per_minute=args.rpm, tokens_per_minute=args.tpm, latency_s=args.latency,
                    burst_s=args.burst, retry_after_s=1.0)
    text = " ".join(f"w{i}" for i in range(40))  # 41 tokens with the prefix word
    with LimitedServer(limits) as server:
        vector = VectorHalf(provider="openai", model="m", revision="r", dimension=8, backend="api", prefix="p ")
        emb = make_embedder(vector, options=EmbedConfig(
            base_url=server.url, api_key_env="BENCH_EMBED_KEY", max_tokens_per_minute=args.tpm,
            max_requests_per_minute=args.rpm, concurrency=args.concurrency, request_texts=args.request_texts,
            max_retries=10))
        stop = time.monotonic() + args.seconds
        done = [0]

        def shard() -> None:
            while time.monotonic() < stop:
                done[0] += emb.embed([text] * args.batch).tokens

        threads = [threading.Thread(target=shard) for _ in range(args.threads)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        log = server.log
    tpm = sustained_tokens_per_minute(log, skip_s=args.skip)
    arrivals = sorted(a for a, _, _ in log.accepted)
    kept = [a for a in arrivals if a >= arrivals[0] + args.skip]
    rpm = (len(kept) - 1) / (kept[-1] - kept[0]) * 60 if len(kept) > 1 else 0.0
    out = {
        "seconds": round(wall, 1), "limits": {"tokens_per_minute": args.tpm, "requests_per_minute": args.rpm},
        "latency_s": args.latency, "threads": args.threads, "concurrency": args.concurrency,
        "request_texts": args.request_texts, "tokens_embedded": done[0], "requests": len(log.accepted),
        "refused_429": len(log.refused), "max_in_flight": log.max_in_flight,
        "sustained_tokens_per_minute": round(tpm), "tokens_ratio_to_limit": round(tpm / args.tpm, 3),
        "sustained_requests_per_minute": round(rpm), "requests_ratio_to_limit": round(rpm / args.rpm, 3),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
