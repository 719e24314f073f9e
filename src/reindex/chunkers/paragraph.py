"""Paragraph chunking: whole paragraphs grouped up to ``size`` tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from reindex.chunkers._segments import BLANK_LINE, Doc, group_ends, pattern_level, recursive_ends
from reindex.chunkers.base import Chunk
from reindex.chunkers.recursive import recursive_levels
from reindex.config import ParagraphChunkerConfig, chunker_spec
from reindex.tokenizers import Tokenizer


@dataclass(frozen=True, slots=True)
class ParagraphChunker:
    """Paragraphs (text between blank lines) are merged greedily into chunks of at most ``size``
    tokens. A paragraph longer than ``size`` is chunked on its own with the recursive method
    (line breaks → sentence ends → fixed windows) and never shares a chunk with its neighbours, so
    every chunk boundary outside a long paragraph is a paragraph boundary. The chunks partition the
    document."""

    config: ParagraphChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", chunker_spec(self.config))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; [] for an empty or whitespace-only document."""
        doc = Doc.of(text, self.tokenizer)
        if doc is None:
            return []
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
