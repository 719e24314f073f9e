"""An OpenAI-compatible embeddings API over HTTP (httpx): ``POST {base_url}/embeddings``.

The API key is read from the environment variable the config names, never from the config, and never
appears in messages. Connection errors, timeouts, 429 and 5xx are retried with exponential backoff
and jitter (tenacity, bounded). Throughput: a batch is split into requests of ``embed.request_texts``
texts, sent concurrently (at most ``embed.concurrency`` in flight, shared by every thread that uses the
embedder: one client per process), paced evenly to ``embed.max_requests_per_minute`` and
``embed.max_tokens_per_minute``; a 429 pauses every request for its ``Retry-After`` and lowers the pace,
which recovers with each success."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from reindex.foundation.retry import call_with_retries
from reindex.domain.config import EmbedConfig, VectorHalf
from reindex.adapters.embedders.base import EmbedResult
from reindex.errors import ConfigError, ModelError, TransientError

__all__ = ["OpenAIEmbedder"]


class _Bucket:
    """Even pacing to ``per_minute`` units (GCRA without burst): a request of ``n`` units is sent once they
    are earned, so any window of ``w`` seconds holds at most ``rate × w`` units."""

    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.tat = time.monotonic()  # when the units granted so far are earned

    def due(self, n: float, now: float, factor: float) -> float:
        """When a request of ``n`` units may be sent, at ``factor`` × the rate."""
        return max(self.tat, now) + n / (self.rate * factor)


class _Pacer:
    """Requests-per-minute and tokens-per-minute pacing shared by every request of one embedder, with a
    global pause for ``Retry-After`` and multiplicative slow-down on 429 (additive recovery)."""

    SLOWDOWN, FLOOR, RECOVERY = 0.7, 0.2, 0.02

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self.requests = _Bucket(requests_per_minute) if requests_per_minute else None
        self.tokens = _Bucket(tokens_per_minute) if tokens_per_minute else None
        self.lock = threading.Lock()
        self.factor = 1.0  # share of the configured rate in use (lowered by 429s)
        self.paused_until = 0.0
        self.throttled = 0  # 429 answers seen

    def wait(self, tokens: int) -> None:
        """Block until a request of ``tokens`` may be sent (the slot is reserved at once: no double booking)."""
        with self.lock:
            now = time.monotonic()
            send = max(now, self.paused_until)
            buckets = [(b, n) for b, n in ((self.requests, 1), (self.tokens, tokens)) if b is not None]
            for bucket, n in buckets:
                send = max(send, bucket.due(n, now, self.factor))
            for bucket, _ in buckets:
                bucket.tat = send
        if send > now:
            time.sleep(send - now)

    def settle(self, estimated: int, actual: int) -> None:
        """Charge the difference between a request's estimated and counted tokens (the API's own count)."""
        if self.tokens is not None and actual != estimated:
            with self.lock:
                self.tokens.tat += (actual - estimated) / (self.tokens.rate * self.factor)

    def succeeded(self) -> None:
        if self.factor < 1.0:
            with self.lock:
                self.factor = min(1.0, self.factor + self.RECOVERY)

    def throttle(self, retry_after: float | None) -> None:
        """A 429: every request waits ``Retry-After`` (when given) and the pace drops."""
        with self.lock:
            self.throttled += 1
            self.factor = max(self.FLOOR, self.factor * self.SLOWDOWN)
            if retry_after:
                self.paused_until = max(self.paused_until, time.monotonic() + retry_after)


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header (delta-seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


class _BearerAuth(httpx.Auth):
    """The configured key on every request. A client-level auth, because without one httpx turns
    ``user:password@`` in a URL into ``Authorization: Basic …`` in place of a default Bearer header."""

    def __init__(self, key: str) -> None:
        self._value = f"Bearer {key}"

    def auth_flow(self, request: httpx.Request):
        request.headers["Authorization"] = self._value
        yield request


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible ``/embeddings`` endpoint."""

    def __init__(self, vector: VectorHalf, options: EmbedConfig, *, batch_size: int = 64) -> None:
        key = os.environ.get(options.api_key_env)
        if not key:
            raise ConfigError(f"embed.api_key_env: environment variable {options.api_key_env} is not set (the API key is read from the environment only)")
        self.vector = vector
        self.options = options
        self.dimension = vector.dimension
        self.max_tokens = vector.max_tokens
        self.batch_size = batch_size
        self._client = httpx.Client(
            base_url=options.base_url.rstrip("/"), timeout=options.timeout_s,
            headers={"User-Agent": "reindex"}, auth=_BearerAuth(key),
        )
        self._pacer = _Pacer(options.max_requests_per_minute, options.max_tokens_per_minute)
        self._pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="reindex-embed")
        self._chars_per_token = 4.0  # learnt from the API's usage counts; ~4 characters per token until then
        self.concurrent = True  # thread-safe: shards share this client and its pacing (one per process)

    def _post(self, texts: list[str]) -> dict:
        try:
            r = self._client.post("/embeddings", json={"model": self.vector.model, "input": texts, "encoding_format": "float"})
        except (httpx.TimeoutException, httpx.TransportError) as err:
            raise TransientError(f"embedding API {self.options.base_url}: {type(err).__name__}") from None
        if r.status_code == 429:
            self._pacer.throttle(_retry_after(r.headers.get("Retry-After")))
            raise TransientError(f"embedding API {self.options.base_url}: HTTP 429")
        if r.status_code >= 500:
            raise TransientError(f"embedding API {self.options.base_url}: HTTP {r.status_code}")
        if r.status_code >= 400:
            detail = ""
            try:
                detail = str(r.json().get("error", {}).get("message", ""))[:200]
            except ValueError:
                pass
            raise ModelError(f"embedding API {self.options.base_url}: HTTP {r.status_code} {detail}".strip())
        return r.json()

    def embed(self, texts: list[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(np.zeros((0, self.dimension), dtype=np.float32), 0, 0)
        inputs = [self.vector.prefix + t for t in texts]
        step = self.options.request_texts
        parts = [inputs[i : i + step] for i in range(0, len(inputs), step)]
        if len(parts) == 1:
            results = [self._request(parts[0])]
        else:
            results = list(self._pool.map(self._request, parts))  # in order; the first failure is raised
        vecs = np.concatenate([v for v, _ in results]) if len(results) > 1 else results[0][0]
        return EmbedResult(vecs, 0, sum(n for _, n in results))

    def _request(self, inputs: list[str]) -> tuple[np.ndarray, int]:
        """One paced request (retried): the vectors of ``inputs`` in order and the API's token count."""
        estimate = max(1, round(sum(len(t) for t in inputs) / self._chars_per_token))

        def attempt() -> dict:
            self._pacer.wait(estimate)  # inside the retried call: a Retry-After pause holds the retry too
            return self._post(inputs)

        attempts = self.options.max_retries + 1
        try:
            body = call_with_retries(attempt, attempts=attempts,
                                     retry_if=lambda e: isinstance(e, TransientError), initial_s=0.5, max_s=20)
        except TransientError as err:
            # This client is the one retry layer for API calls: once its attempts are spent the error is
            # terminal, so no layer above retries it again (re-running the apply resumes the shard).
            raise ModelError(f"{err} (still failing after {attempts} attempts; re-run to resume)") from None
        self._pacer.succeeded()
        data = sorted(body.get("data", []), key=lambda d: d.get("index", 0))
        if len(data) != len(inputs):
            raise ModelError(f"embedding API returned {len(data)} vectors for {len(inputs)} inputs")
        vecs = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        if vecs.shape[1] != self.dimension:
            raise ConfigError(f"vector.dimension is {self.dimension} but the API returned {vecs.shape[1]}-dimensional vectors")
        if self.vector.normalize:
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        tokens = int(body.get("usage", {}).get("prompt_tokens", 0))
        if tokens > 0:
            self._pacer.settle(estimate, tokens)
            self._chars_per_token = 0.8 * self._chars_per_token + 0.2 * (sum(len(t) for t in inputs) / tokens)
        return vecs, tokens

    def describe(self) -> dict:
        """Where and how this embedder runs (for run reports)."""
        return {"provider": "openai", "backend": self.vector.backend, "precision": self.vector.precision,
                "device": None, "concurrency": self.options.concurrency}

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()
