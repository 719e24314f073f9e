"""Sliding windows: ``size`` tokens advancing by ``int(size * (1 - overlap))`` tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

from reindex.adapters.chunkers._segments import DocChunker, Doc
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import SlidingChunkerConfig

__all__ = ["SlidingChunker", "sliding_count", "sliding_stride"]


def sliding_stride(size: int, overlap: float) -> int:
    """Tokens between the starts of consecutive windows (at least 1)."""
    return max(1, int(size * (1 - overlap)))


def sliding_count(doc_tokens: int, size: int, overlap: float) -> int:
    """Number of windows over a document of ``doc_tokens`` tokens (seed 001's ``chunk_count``)."""
    if doc_tokens <= size:
        return 1
    return 1 + math.ceil((doc_tokens - size) / sliding_stride(size, overlap))


@dataclass(frozen=True, slots=True)
class SlidingChunker(DocChunker):
    """Window ``k`` covers tokens ``[k·stride, k·stride + size)``; the last window ends at the end of
    the document, so the total of chunk tokens is seed 001's ``billed_tokens``. With ``overlap=0``
    the windows tile the document. Where several tokens share one character (BERT on Hangul), a
    window may exceed ``size`` by the tokens of that one character, and a stride smaller than
    that character's tokens can repeat a window."""

    config: SlidingChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Overlapping windows of a tokenised, non-blank document, in order."""
        size, n = self.config.size, doc.n
        stride = sliding_stride(size, self.config.overlap)
        spans: list[tuple[int, int]] = []
        for k in range(sliding_count(n, size, self.config.overlap)):
            # Start and end go through the same monotone snap (the identity unless several tokens
            # share one start), so windows never leave a gap and overlap=0 tiles the document.
            a = doc.snap(k * stride)
            b = n if k * stride + size >= n else doc.snap(k * stride + size)
            if b <= a:
                b = doc.snap_up(a + 1)
            spans.append((a, b))
        return doc.ranges(spans)
