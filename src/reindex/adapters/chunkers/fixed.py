"""Fixed-size chunking: greedy, non-overlapping windows of ``size`` tokens."""

from __future__ import annotations

from dataclasses import dataclass

from reindex.adapters.chunkers._segments import DocChunker, Doc, windows
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import FixedChunkerConfig

__all__ = ["FixedChunker"]


@dataclass(frozen=True, slots=True)
class FixedChunker(DocChunker):
    """Cuts before token ``size``, ``2·size``, …; the chunks partition the document."""

    config: FixedChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        return doc.chunks([0, *windows(doc, 0, doc.n, self.config.size), doc.n])
