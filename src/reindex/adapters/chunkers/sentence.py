"""Sentence chunking: groups of ``sentences`` sentences, ``overlap`` of them repeated, capped at
``size`` tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from reindex.adapters.chunkers._segments import DocChunker, SENTENCE_END, Doc, group_ends, windows
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import SentenceChunkerConfig

__all__ = ["SentenceChunker"]


@dataclass(frozen=True, slots=True)
class SentenceChunker(DocChunker):
    """A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace, at ``。！？`` (no whitespace
    needed), or at a blank line. Group ``k`` holds sentences ``[k·step, k·step + sentences)`` with
    ``step = sentences - overlap``; a group over ``size`` tokens is cut into runs of whole sentences,
    and a single sentence over ``size`` into fixed windows. Without overlap the chunks partition
    the document."""

    config: SentenceChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        cfg = self.config
        bounds = np.concatenate(([0], doc.pattern_cuts(SENTENCE_END, 0, doc.n), [doc.n])).tolist()
        count = len(bounds) - 1  # sentences
        step = cfg.sentences - cfg.overlap
        groups = 1 if count <= cfg.sentences else 1 + math.ceil((count - cfg.sentences) / step)
        size = cfg.size

        barr = np.asarray(bounds, dtype=np.int64)

        def sentence_cuts(lo: int, hi: int) -> np.ndarray:
            a = int(np.searchsorted(barr, lo, "right"))
            b = int(np.searchsorted(barr, hi, "left"))
            return barr[a:b]

        def fixed(lo: int, hi: int) -> list[int]:
            return [*windows(doc, lo, hi, size), hi]

        spans: list[tuple[int, int]] = []
        for k in range(groups):
            lo = bounds[k * step]
            hi = bounds[min(k * step + cfg.sentences, count)]
            if hi - lo <= size:
                spans.append((lo, hi))
                continue
            start = lo
            for end in group_ends(doc, lo, hi, size, sentence_cuts, fixed):
                spans.append((start, end))
                start = end
        return doc.ranges(spans)
