"""A cheap, deterministic embedder for tests and benchmarks (provider ``hash``).

Vectors are unit vectors derived from a hash of the input text: equal texts get equal vectors,
different texts unrelated ones; ``vector.revision`` other than ``hash-v1`` salts the hash (another "model"). No model, microseconds per text, so orchestration cost is visible
in benchmarks. With ``REINDEX_EMBED_LOG`` set, every embedded text's digest is appended to that file
(tests use it to prove no text is embedded twice across a crash and a resume)."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from reindex.foundation import settings
from reindex.domain.config import VectorHalf
from reindex.adapters.embedders.base import EmbedResult

__all__ = ["HashEmbedder"]

_LOG_LOCK = threading.Lock()


class HashEmbedder:
    """Deterministic pseudo-embeddings; token counts are whitespace-separated words."""

    def __init__(self, vector: VectorHalf, *, batch_size: int = 64) -> None:
        self.vector = vector
        self.dimension = vector.dimension
        self.max_tokens = vector.max_tokens
        self.batch_size = batch_size
        # A revision other than the first is another "model": another vector space (benchmarks of a model change).
        self._salt = "" if vector.revision in ("auto", "hash-v1") else vector.revision + "\0"

    def describe(self) -> dict:
        """Where and how this embedder runs (for run reports): no model, on the CPU."""
        return {"provider": "hash", "backend": self.vector.backend, "precision": self.vector.precision, "device": "cpu",
                "threads": 1}

    def _one(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.blake2b((self._salt + self.vector.prefix + text).encode(), digest_size=8).digest(),
                              "little")
        v = np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)
        return v / np.linalg.norm(v) if self.vector.normalize else v

    def embed(self, texts: list[str]) -> EmbedResult:
        log = settings.embed_log()
        if log and texts:
            with _LOG_LOCK, open(log, "a", encoding="utf-8") as fh:
                fh.write("".join(hashlib.blake2b(t.encode(), digest_size=8).hexdigest() + "\n" for t in texts))
                fh.flush()
                os.fsync(fh.fileno())
        tokens = [len(t.split()) for t in texts]
        truncated = sum(1 for n in tokens if self.max_tokens and n > self.max_tokens)
        vecs = np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dimension), np.float32)
        return EmbedResult(vecs, truncated, sum(tokens))
