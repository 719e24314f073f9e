"""Two test models of one latent space, for serving across a model change (``vector.provider: langchain``).

``LatentEmbeddings`` puts a text's words (lowercased, 4 letters or more, hashed into 4,096 signed buckets,
normalised) through a fixed random projection to a 64-dimensional latent ``z``, then through a model's own
random matrix ``A`` (``seed``) to ``dim`` dimensions, plus ``noise`` times a unit vector drawn from the text's
hash. Two instances with different seeds and dimensions are two vector spaces joined by a linear map (``A₁·A₂⁺``)
— exactly what a bridge can learn — and a noisy one retrieves worse than a clean one: with the noisy model live
and the clean one building, a bridge and a cascade beat the live model (they go live); the other way round they
lose (they refuse themselves). Microseconds per text; every call and text is counted (class-level counters), so
a test can prove that collecting pairs embeds nothing."""

from __future__ import annotations

import hashlib
import re
import threading
import time

import numpy as np

BUCKETS = 4096
LATENT = 64
_WORD = re.compile(r"[a-z]{4,}")
_PROJECTION = np.random.default_rng(12345).standard_normal((BUCKETS, LATENT)).astype(np.float64) / np.sqrt(LATENT)


def _seed(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def latent(text: str) -> np.ndarray:
    counts = np.zeros(BUCKETS)
    for w in _WORD.findall(text.lower()):
        h = _seed(w)
        counts[h % BUCKETS] += 1.0 if (h >> 20) & 1 else -1.0
    z = counts @ _PROJECTION
    n = np.linalg.norm(z)
    return z / n if n > 0 else z


class LatentEmbeddings:
    """A LangChain ``Embeddings``-like class (``embed_documents``, ``embed_query``)."""

    calls = 0
    texts = 0
    _lock = threading.Lock()

    def __init__(self, dim: int = 48, seed: int = 1, noise: float = 0.0, delay: float = 0.0) -> None:
        self.dim, self.seed, self.noise, self.delay = dim, seed, noise, delay
        self._a = np.random.default_rng(seed).standard_normal((LATENT, dim)) / np.sqrt(LATENT)

    @classmethod
    def reset(cls) -> None:
        with cls._lock:
            cls.calls = cls.texts = 0

    def _one(self, text: str) -> list[float]:
        v = latent(text) @ self._a
        if self.noise:
            e = np.random.default_rng(_seed(f"{self.seed}\0{text}")).standard_normal(self.dim)
            v = v + self.noise * e / np.linalg.norm(e) * max(float(np.linalg.norm(v)), 1e-6)
        return v.astype(np.float32).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with LatentEmbeddings._lock:
            LatentEmbeddings.calls += 1
            LatentEmbeddings.texts += len(texts)
        if self.delay:  # a slow model: seconds per text (a reader waits for it, no CPU is burnt)
            time.sleep(self.delay * len(texts))
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def vector_line(dim: int, seed: int, noise: float, delay: float = 0.0) -> str:
    """The config's vector half for one latent model (``delay``: seconds per text embedded)."""
    slow = f", delay: {delay}" if delay else ""
    return (f"vector: {{provider: langchain, model: helpers_serving.LatentEmbeddings, "
            f"params: {{dim: {dim}, seed: {seed}, noise: {noise}{slow}}}, dimension: {dim}}}")


NOISY = (48, 1, 1.2)  # the worse model
CLEAN = (64, 2, 0.0)  # the better one
