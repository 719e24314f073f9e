"""Fixed character windows: a baseline that ignores tokens when cutting (tokens are still counted)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import FixedCharsChunkerConfig, chunker_spec
from reindex.adapters.tokenizers import Tokenizer

__all__ = ["FixedCharsChunker"]


@dataclass(frozen=True, slots=True)
class FixedCharsChunker:
    """Windows of ``size`` characters advancing by ``int(size * (1 - overlap))`` (at least 1); the
    last window ends at the end of the document. Without overlap the chunks partition the document.
    A window may cut through a word, and a window of only whitespace has 0 tokens."""

    config: FixedCharsChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", chunker_spec(self.config))

    def chunk(self, text: str) -> list[Chunk]:
        """Character windows of ``text`` in order; [] for an empty or whitespace-only document."""
        if not text or text.isspace():
            return []
        size, length = self.config.size, len(text)
        step = max(1, int(size * (1 - self.config.overlap)))
        count = 1 if length <= size else 1 + math.ceil((length - size) / step)
        starts = [k * step for k in range(count)]
        ends = [min(s + size, length) for s in starts]
        # Tokens are counted in document context: one tokenisation, then binary searches.
        token_starts = np.ascontiguousarray(self.tokenizer.offsets(text)[:, 0])
        lo = np.searchsorted(token_starts, starts, "left")
        hi = np.searchsorted(token_starts, ends, "left")
        counts = (hi - lo).tolist()
        return [
            Chunk(ordinal=i, start=s, end=e, tokens=c, text=text[s:e])
            for i, (s, e, c) in enumerate(zip(starts, ends, counts))
        ]
