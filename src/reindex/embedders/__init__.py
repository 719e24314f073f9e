"""Embedders: turn chunk texts into vectors for one vector half."""

from __future__ import annotations

from reindex.config import EmbedConfig, VectorHalf
from reindex.embedders.base import Embedder, EmbedResult
from reindex.errors import ConfigError

__all__ = ["Embedder", "EmbedResult", "make_embedder"]


def make_embedder(vector: VectorHalf, *, batch_size: int = 64, options: EmbedConfig | None = None) -> Embedder:
    """The embedder for a (resolved) vector half; ``options`` reach an HTTP provider."""
    if vector.provider == "sentence-transformers":
        from reindex.embedders.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(vector, batch_size=batch_size)
    if vector.provider == "openai":
        from reindex.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder(vector, options or EmbedConfig(), batch_size=batch_size)
    if vector.provider == "hash":
        from reindex.embedders.hashing import HashEmbedder

        return HashEmbedder(vector, batch_size=batch_size)
    raise ConfigError(f"vector.provider: {vector.provider!r} has no embedder in this version")
