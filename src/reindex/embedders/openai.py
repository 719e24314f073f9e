"""An OpenAI-compatible embeddings API over HTTP (httpx): ``POST {base_url}/embeddings``.

The API key is read from the environment variable the config names, never from the config, and never
appears in messages. Connection errors, timeouts, 429 and 5xx are retried with exponential backoff
and jitter (tenacity, bounded); a client-side token-per-minute limit paces requests."""

from __future__ import annotations

import collections
import os
import threading
import time

import httpx
import numpy as np

from reindex.retry import call_with_retries
from reindex.config import EmbedConfig, VectorHalf
from reindex.embedders.base import EmbedResult
from reindex.errors import ConfigError, ModelError, TransientError


class _RateLimiter:
    """At most ``per_minute`` tokens in any 60-second window (sliding log)."""

    def __init__(self, per_minute: float | None) -> None:
        self.per_minute = per_minute
        self.log: collections.deque[tuple[float, int]] = collections.deque()
        self.lock = threading.Lock()

    def wait(self, tokens: int) -> None:
        if not self.per_minute:
            return
        tokens = min(tokens, int(self.per_minute))
        while True:
            with self.lock:
                now = time.monotonic()
                while self.log and now - self.log[0][0] >= 60:
                    self.log.popleft()
                used = sum(n for _, n in self.log)
                if used + tokens <= self.per_minute:
                    self.log.append((now, tokens))
                    return
                sleep = 60 - (now - self.log[0][0]) + 0.01
            time.sleep(sleep)


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
        self._limit = _RateLimiter(options.max_tokens_per_minute)

    def _post(self, texts: list[str]) -> dict:
        try:
            r = self._client.post("/embeddings", json={"model": self.vector.model, "input": texts, "encoding_format": "float"})
        except (httpx.TimeoutException, httpx.TransportError) as err:
            raise TransientError(f"embedding API {self.options.base_url}: {type(err).__name__}") from None
        if r.status_code == 429 or r.status_code >= 500:
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
        self._limit.wait(sum(max(1, len(t) // 4) for t in inputs))  # ~4 characters per token until usage is known
        attempts = self.options.max_retries + 1
        try:
            body = call_with_retries(lambda: self._post(inputs), attempts=attempts,
                                     retry_if=lambda e: isinstance(e, TransientError), initial_s=0.5, max_s=20)
        except TransientError as err:
            # This client is the one retry layer for API calls: once its attempts are spent the error is
            # terminal, so no layer above retries it again (re-running the apply resumes the shard).
            raise ModelError(f"{err} (still failing after {attempts} attempts; re-run to resume)") from None
        data = sorted(body.get("data", []), key=lambda d: d.get("index", 0))
        if len(data) != len(inputs):
            raise ModelError(f"embedding API returned {len(data)} vectors for {len(inputs)} inputs")
        vecs = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        if vecs.shape[1] != self.dimension:
            raise ConfigError(f"vector.dimension is {self.dimension} but the API returned {vecs.shape[1]}-dimensional vectors")
        if self.vector.normalize:
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        tokens = int(body.get("usage", {}).get("prompt_tokens", 0))
        return EmbedResult(vecs, 0, tokens)

    def close(self) -> None:
        self._client.close()
