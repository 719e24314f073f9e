"""Recursive chunking: blank lines, then line breaks, then sentence ends, then fixed windows, with
the pieces merged greedily up to ``size`` tokens (LangChain's recursive splitter, on token offsets)."""

from __future__ import annotations

from dataclasses import dataclass

from reindex.adapters.chunkers._segments import DocChunker, BLANK_LINE, CLAUSE_END, LINE_BREAK, Doc, Level, pattern_level, recursive_ends
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import RecursiveChunkerConfig

__all__ = ["RecursiveChunker", "recursive_levels"]


def recursive_levels(doc: Doc) -> list[Level]:
    """Split levels of the recursive method, coarsest first (fixed windows come after the last)."""
    return [pattern_level(doc, BLANK_LINE), pattern_level(doc, LINE_BREAK), pattern_level(doc, CLAUSE_END)]


@dataclass(frozen=True, slots=True)
class RecursiveChunker(DocChunker):
    """Splits the document at the coarsest separator that makes every piece fit in ``size`` tokens
    (blank line → line break → sentence end, CJK-aware → fixed window), then packs adjacent pieces
    greedily into chunks of at most ``size`` tokens. The chunks partition the document."""

    config: RecursiveChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        return doc.chunks([0, *recursive_ends(doc, 0, doc.n, self.config.size, recursive_levels(doc))])
