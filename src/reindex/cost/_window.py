"""Window arithmetic (seed 001): how many chunks a document of ``L`` tokens makes under a fixed or
sliding window, and how many tokens are billed for embedding them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from reindex.errors import ConfigError

if TYPE_CHECKING:  # only for annotations: importing config at run time would pull in pydantic
    from reindex.domain.config import FixedChunkerConfig, SlidingChunkerConfig

__all__ = ["Window", "billed_tokens", "chunk_count", "window_of"]


def chunk_count(doc_tokens: int, size: int, overlap: float) -> int:
    """Chunks of a ``doc_tokens``-token document under windows of ``size`` tokens advancing by
    ``int(size * (1 - overlap))`` tokens (seed 001's formula; an empty document makes none)."""
    _check_window(doc_tokens, size, overlap)
    if doc_tokens == 0:
        # Seed 001's code says 1 here; our chunkers return no chunk for an empty document.
        return 0
    if doc_tokens <= size:
        return 1
    stride = int(size * (1 - overlap))
    return 1 + math.ceil((doc_tokens - size) / stride)


def billed_tokens(doc_tokens: int, size: int, overlap: float) -> int:
    """Tokens sent to the embedder for one document: its tokens plus ``int(size * overlap)``
    repeated tokens for every chunk after the first (seed 001's formula)."""
    n = chunk_count(doc_tokens, size, overlap)
    if n == 0:
        return 0
    return doc_tokens + (n - 1) * int(size * overlap)


def _check_window(doc_tokens: int, size: int, overlap: float) -> None:
    if doc_tokens < 0:
        raise ValueError(f"doc_tokens must be >= 0, got {doc_tokens}")
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    if int(size * (1 - overlap)) < 1:
        raise ConfigError(
            f"a window of {size} tokens with overlap {overlap:g} never advances; use a larger size or a smaller overlap"
        )


@dataclass(frozen=True, slots=True)
class Window:
    """A window chunker reduced to its arithmetic: ``kind`` is ``fixed`` (overlap 0) or ``sliding``."""

    kind: Literal["fixed", "sliding"]
    size: int
    overlap: float = 0.0

    def __post_init__(self) -> None:
        if self.kind == "fixed" and self.overlap != 0.0:
            raise ValueError("a fixed window has no overlap")
        _check_window(0, self.size, self.overlap)

    @property
    def stride(self) -> int:
        """Tokens between the starts of consecutive windows."""
        return int(self.size * (1 - self.overlap))

    def label(self) -> str:
        """``sliding:size=256,overlap=0.2`` (the chunker spec of this window)."""
        if self.kind == "fixed":
            return f"fixed:size={self.size}"
        return f"sliding:size={self.size},overlap={self.overlap:g}"


def window_of(chunker: Window | FixedChunkerConfig | SlidingChunkerConfig, role: str = "") -> Window:
    """The window arithmetic of a fixed or sliding chunker config. Other kinds place boundaries
    by content, so their chunk counts cannot be computed from lengths alone: ConfigError."""
    if isinstance(chunker, Window):
        return chunker
    kind = getattr(chunker, "kind", None)
    if kind == "fixed":
        return Window("fixed", int(chunker.size))
    if kind == "sliding":
        return Window("sliding", int(chunker.size), float(getattr(chunker, "overlap", 0.0)))
    which = f"the {role} chunker" if role else "the chunker"
    raise ConfigError(
        f"histogram estimates need window arithmetic (fixed or sliding chunkers), but {which} is {kind!r}; "
        "use `reindex plan --sample N` to measure it on a sample of documents instead"
    )
