"""Fixed-size chunking: greedy, non-overlapping windows of ``size`` tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from reindex.chunkers._segments import Doc, windows
from reindex.chunkers.base import Chunk
from reindex.config import FixedChunkerConfig, chunker_spec
from reindex.tokenizers import Tokenizer


@dataclass(frozen=True, slots=True)
class FixedChunker:
    """Cuts before token ``size``, ``2·size``, …; the chunks partition the document."""

    config: FixedChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", chunker_spec(self.config))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; [] for an empty or whitespace-only document."""
        doc = Doc.of(text, self.tokenizer)
        if doc is None:
            return []
        return doc.chunks([0, *windows(doc, 0, doc.n, self.config.size), doc.n])
