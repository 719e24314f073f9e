"""Paragraph chunking: whole paragraphs grouped up to ``size`` tokens."""

from __future__ import annotations

from dataclasses import dataclass

from reindex.adapters.chunkers._segments import DocChunker, BLANK_LINE, Doc, group_ends, pattern_level, recursive_ends
from reindex.adapters.chunkers.base import Chunk
from reindex.adapters.chunkers.recursive import recursive_levels
from reindex.domain.config import ParagraphChunkerConfig

__all__ = ["ParagraphChunker"]


@dataclass(frozen=True, slots=True)
class ParagraphChunker(DocChunker):
    """Paragraphs (text between blank lines) are merged greedily into chunks of at most ``size``
    tokens. A paragraph longer than ``size`` is chunked on its own with the recursive method
    (line breaks → sentence ends → fixed windows) and never shares a chunk with its neighbours, so
    every chunk boundary outside a long paragraph is a paragraph boundary. The chunks partition the
    document."""

    config: ParagraphChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        size = self.config.size
        inner_levels = recursive_levels(doc)[1:]
        ends = group_ends(
            doc,
            0,
            doc.n,
            size,
            pattern_level(doc, BLANK_LINE),
            lambda lo, hi: recursive_ends(doc, lo, hi, size, inner_levels),
        )
        return doc.chunks([0, *ends])
