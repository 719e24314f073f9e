"""The Chunker protocol and the Chunk value. Chunkers are pure, stateless and deterministic: each
sees only the current (normalised) document and returns its chunks in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Chunk", "Chunker"]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: ``text == document[start:end]`` for every chunker without overlap or trimming."""

    ordinal: int
    start: int  # character offset in the normalised document (inclusive)
    end: int  # character offset (exclusive)
    tokens: int  # tokens of this chunk, counted with the configured tokenizer
    text: str


@runtime_checkable
class Chunker(Protocol):
    """Turns one normalised document into chunks."""

    spec: str  # canonical KIND:key=value,… string

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in document order (empty list for an empty document)."""
        ...
