"""Heading-aware chunking for Markdown and reStructuredText: sections, recursive inside."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reindex.adapters.chunkers._segments import DocChunker, CODE_FENCE, HEADING, Doc, group_ends, recursive_ends
from reindex.adapters.chunkers.base import Chunk
from reindex.adapters.chunkers.recursive import recursive_levels
from reindex.domain.config import MarkdownChunkerConfig

__all__ = ["MarkdownChunker", "heading_positions"]


def heading_positions(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Character positions where sections start in ``text[start:end]``: Markdown ATX headings
    (``# Title``), Markdown setext and reStructuredText titles (a title line after a blank line,
    underlined and optionally overlined with ``= - ~ ^ " ' ` # * + _ : . < >``). Headings inside
    fenced code blocks (```` ``` ```` or ``~~~``) do not count."""
    end = len(text) if end is None else end
    found = [m.start() for m in HEADING.finditer(text, start, end)]
    if not found:
        return found
    fences = [m.start() for m in CODE_FENCE.finditer(text, 0, end)]
    if not fences:
        return found
    # A heading is inside a code block when an odd number of fence lines precede it.
    inside = np.searchsorted(np.asarray(fences), np.asarray(found), "right") % 2 == 1
    return [p for p, fenced in zip(found, inside.tolist()) if not fenced]


@dataclass(frozen=True, slots=True)
class MarkdownChunker(DocChunker):
    """Sections start at headings. Adjacent sections are merged greedily into chunks of at most
    ``size`` tokens; a section longer than ``size`` is chunked on its own with the recursive method.
    The chunks partition the document."""

    config: MarkdownChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        size = self.config.size
        levels = recursive_levels(doc)

        def sections(lo: int, hi: int) -> np.ndarray:
            return doc.cuts_at(heading_positions(doc.text, doc.char_at(lo), doc.char_end(hi)), lo, hi)

        ends = group_ends(doc, 0, doc.n, size, sections, lambda lo, hi: recursive_ends(doc, lo, hi, size, levels))
        return doc.chunks([0, *ends])
