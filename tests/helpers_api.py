"""A loopback OpenAI-compatible embeddings server that enforces rate limits the way APIs do: a request over
the requests-per-minute or tokens-per-minute budget is answered 429 with ``Retry-After``. Budgets are token
buckets refilled continuously, holding at most ``burst_s`` seconds of the rate (APIs publish per-minute
limits but enforce them at a finer grain). Tokens are whitespace words. Used by tests/test_openai_embedder.py
and bench/api_throughput.py."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np


@dataclass
class Limits:
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    burst_s: float = 1.0
    latency_s: float = 0.0
    retry_after_s: float = 1.0  # what a 429 says
    forced_429: int = 0  # the first N requests are refused whatever the budget (Retry-After: retry_after_s)
    dimension: int = 8


@dataclass
class ServerLog:
    accepted: list[tuple[float, float, int]] = field(default_factory=list)  # (arrival, answered, tokens)
    refused: list[float] = field(default_factory=list)  # arrival times of 429s
    arrivals: list[float] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


class _Bucket:
    def __init__(self, per_minute: float, burst_s: float) -> None:
        self.rate, self.capacity = per_minute / 60.0, per_minute / 60.0 * burst_s
        self.level, self.at = self.capacity, time.monotonic()

    def take(self, n: float, now: float) -> bool:
        self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
        self.at = now
        if n > self.level:
            return False
        self.level -= n
        return True

    def give_back(self, n: float) -> None:
        self.level = min(self.capacity, self.level + n)


class LimitedServer:
    """``with LimitedServer(Limits(...)) as s:`` → ``s.url`` (…/v1), ``s.log``."""

    def __init__(self, limits: Limits) -> None:
        self.limits, self.log, self.lock = limits, ServerLog(), threading.Lock()
        self.requests = _Bucket(limits.requests_per_minute, limits.burst_s) if limits.requests_per_minute else None
        self.tokens = _Bucket(limits.tokens_per_minute, limits.burst_s) if limits.tokens_per_minute else None
        self.forced = limits.forced_429
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.answer(self, body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def answer(self, handler: BaseHTTPRequestHandler, body: dict) -> None:
        now = time.monotonic()
        tokens = sum(len(t.split()) for t in body["input"])
        with self.lock:
            self.log.arrivals.append(now)
            ok = True
            if self.forced > 0:
                self.forced -= 1
                ok = False
            if ok and self.requests is not None and not self.requests.take(1, now):
                ok = False
            if ok and self.tokens is not None and not self.tokens.take(tokens, now):
                ok = False
                if self.requests is not None:
                    self.requests.give_back(1)
            if not ok:
                self.log.refused.append(now)
            else:
                self.log.in_flight += 1
                self.log.max_in_flight = max(self.log.max_in_flight, self.log.in_flight)
        if not ok:
            _send(handler, 429, {"error": {"message": "rate limit reached"}},
                  {"Retry-After": f"{self.limits.retry_after_s:g}"})
            return
        try:
            if self.limits.latency_s:
                time.sleep(self.limits.latency_s)
            data = []
            for i, text in enumerate(body["input"]):
                seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
                data.append({"index": i, "embedding": np.random.default_rng(seed).standard_normal(self.limits.dimension).tolist()})
            _send(handler, 200, {"data": data, "usage": {"prompt_tokens": tokens}})
        finally:
            with self.lock:
                self.log.in_flight -= 1
                self.log.accepted.append((now, time.monotonic(), tokens))

    def __enter__(self) -> "LimitedServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _send(handler: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict | None = None) -> None:
    raw = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(raw)))
    for k, v in (headers or {}).items():
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(raw)


def sustained_tokens_per_minute(log: ServerLog, skip_s: float = 0.0) -> float:
    """Tokens accepted per minute between the first accepted arrival (plus ``skip_s``) and the last."""
    arrivals = sorted((a, n) for a, _, n in log.accepted)
    if len(arrivals) < 2:
        return 0.0
    start = arrivals[0][0] + skip_s
    kept = [(a, n) for a, n in arrivals if a >= start]
    span = kept[-1][0] - kept[0][0]
    # Tokens after the first kept request over the span between the first and the last arrival.
    return sum(n for _, n in kept[1:]) / span * 60 if span > 0 else 0.0
