"""The Embedder protocol."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["EmbedResult", "Embedder"]


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """Vectors for a batch of texts, in order, and how many inputs the model truncated."""

    vectors: np.ndarray  # float32, shape (n, dimension)
    truncated: int
    tokens: int  # model tokens of the inputs (before truncation)


@runtime_checkable
class Embedder(Protocol):
    """Embeds texts with one model; the vector half it implements decides the vectors."""

    dimension: int
    max_tokens: int | None  # input limit in model tokens (without special tokens), if known

    def embed(self, texts: list[str]) -> EmbedResult:
        """Vectors of ``texts`` (prefix applied, normalised if the vector half says so)."""
        ...
