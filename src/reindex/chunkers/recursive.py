"""Recursive chunking: blank lines, then line breaks, then sentence ends, then fixed windows, with
the pieces merged greedily up to ``size`` tokens (LangChain's recursive splitter, on token offsets)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reindex.chunkers._segments import BLANK_LINE, CLAUSE_END, LINE_BREAK, Doc, Level, pattern_level, recursive_ends
from reindex.chunkers.base import Chunk
from reindex.config import RecursiveChunkerConfig, chunker_spec
from reindex.tokenizers import Tokenizer


def recursive_levels(doc: Doc) -> list[Level]:
    """Split levels of the recursive method, coarsest first (fixed windows come after the last)."""
    return [pattern_level(doc, BLANK_LINE), pattern_level(doc, LINE_BREAK), pattern_level(doc, CLAUSE_END)]


@dataclass(frozen=True, slots=True)
class RecursiveChunker:
    """Splits the document at the coarsest separator that makes every piece fit in ``size`` tokens
    (blank line → line break → sentence end, CJK-aware → fixed window), then packs adjacent pieces
    greedily into chunks of at most ``size`` tokens. The chunks partition the document."""

    config: RecursiveChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", chunker_spec(self.config))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; [] for an empty or whitespace-only document."""
        doc = Doc.of(text, self.tokenizer)
        if doc is None:
            return []
        return doc.chunks([0, *recursive_ends(doc, 0, doc.n, self.config.size, recursive_levels(doc))])
