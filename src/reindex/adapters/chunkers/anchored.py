"""Boundary-stable ("anchored") chunking: cuts only where the local text decides, so an edit can
move boundaries no further than one window from itself.

Candidates are the structural positions of the document: section starts (headings), paragraph
ends (blank lines), line ends and sentence or clause ends (CJK-aware). Each candidate gets a
priority: its level first (heading > blank line > line break > sentence end), then a 64-bit hash
of the text just before it (at most ``_HASH_CHARS`` characters back to the previous candidate),
then its position (earlier wins, only to break exact ties between repeated texts). A candidate is a
cut when it outranks every other candidate within ``w`` tokens on either side and lies at least
``w / 4`` tokens from both ends of the stretch it is in (a "local maximum", like winnowing or AE
chunking; the short end margin lets a short front matter or closing section stand alone). So every decision reads only the ``2w`` tokens around a candidate; an edit changes the
decisions of candidates within ``w`` tokens of it and nothing else. Two cuts are at least ``w``
apart and, because a cut needs to beat about ``2w`` tokens of competitors, rarely much longer than
``2w``: lengths are far less spread than threshold CDC's geometric lengths, which matters because an
edit lands in a chunk with probability proportional to its length.

A stretch between two cuts that is longer than ``cap`` is cut again inside, by the same rule with
half the window (still local: its ends are cuts that only nearby edits move), and, when it has no
structural candidates left, at word ends chosen by a rolling hash of the last few words; a single
word longer than ``cap`` falls back to fixed windows. The document is tokenised once; everything
else works on token offsets. The chunks partition the document.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from reindex.adapters.chunkers._segments import DocChunker, BLANK_LINE, CLAUSE_END, LINE_BREAK, Doc, windows
from reindex.adapters.chunkers.base import Chunk
from reindex.adapters.chunkers.cdc import rolling_hash, word_hashes
from reindex.adapters.chunkers.markdown import heading_positions
from reindex.domain.config import AnchoredChunkerConfig

__all__ = ["WINDOW_RATIO", "AnchoredChunker", "local_maxima"]

# The window w as a share of the target size: local maxima over ±w land about 2w apart, minus what
# structure (blank lines beating line breaks) and the short end margins take away; 0.6 puts the
# median near ``size`` on both dev corpora (PEPs and Chinese Markdown), see docs/measure.md.
WINDOW_RATIO = 0.6
# Characters of text before a candidate that its hash reads (bounded by the previous candidate):
# short, so an edit in the middle of a long paragraph leaves the paragraph end's priority alone.
_HASH_CHARS = 64
# Words in the rolling hash of the word-level fallback.
_WORD_WINDOW = 4
_MIN_WINDOW = 4
# How much a structural level outweighs the hash: 1.0 = a higher level always wins.
_LEVEL_WEIGHT = 1.0
# Minimum distance of a cut from the ends of its stretch (document or over-long stretch), as a share
# of the window. 1.0 forced headers into the next chunk; 0.25 cut R_c on <=5 % edits by ~2 points.
_END_RATIO = 0.25

LEVEL_SENTENCE, LEVEL_LINE, LEVEL_BLANK, LEVEL_HEADING = 1, 2, 3, 4


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``max(values[lo_i:hi_i])`` for every i (``-1`` where the range is empty); a sparse table."""
    m = values.shape[0]
    out = np.full(lo.shape[0], -1, dtype=np.int64)
    if m == 0:
        return out
    table = [values.astype(np.int64)]
    k = 1
    while (1 << k) <= m:
        prev = table[-1]
        half = 1 << (k - 1)
        table.append(np.maximum(prev[: prev.shape[0] - half], prev[half:]))
        k += 1
    length = hi - lo
    ok = length > 0
    if not ok.any():
        return out
    lvl = np.zeros_like(length)
    lvl[ok] = np.floor(np.log2(length[ok])).astype(np.int64)
    for k in np.unique(lvl[ok]).tolist():
        sel = ok & (lvl == k)
        row = table[k]
        a = lo[sel]
        b = hi[sel] - (1 << k)
        out[sel] = np.maximum(row[a], row[b])
    return out


def local_maxima(pos: np.ndarray, rank: np.ndarray, lo: int, hi: int, w: int, end: int | None = None) -> np.ndarray:
    """Positions (sorted, unique) in ``(lo, hi)`` whose rank beats every other position within ``w``
    of them and that are at least ``w`` from ``lo`` and ``hi``."""
    if pos.shape[0] == 0:
        return pos
    idx = np.arange(pos.shape[0])
    left = np.searchsorted(pos, pos - w, "left")
    right = np.searchsorted(pos, pos + w, "right")
    lmax = _range_max(rank, left, idx)
    rmax = _range_max(rank, idx + 1, right)
    end = w if end is None else end
    keep = (rank > lmax) & (rank > rmax) & (pos - lo >= end) & (hi - pos >= end)
    return pos[keep]


@dataclass(frozen=True, slots=True)
class AnchoredChunker(DocChunker):
    """Cuts at structural candidates that win a local contest of level and content hash within
    ``w = 0.6 · size`` tokens either side; stretches over ``cap`` are cut again with half the window,
    then at hashed word ends. Chunks are about ``size`` tokens (median) and at most ``cap``; cuts
    are at least ``w`` apart (a document's first and last chunk may be as short as ``w / 4``). The
    chunks partition the document."""

    config: AnchoredChunkerConfig

    @property
    def window(self) -> int:
        """Half-width of the local contest in tokens."""
        return max(1, round(self.config.size * WINDOW_RATIO))

    @property
    def cap(self) -> int:
        """Hard limit in tokens."""
        return self.config.cap or 2 * self.config.size

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        if doc.n <= self.window:
            return doc.chunks([0, doc.n])
        pos, rank = self._candidates(doc)
        ends: list[int] = []
        self._split(doc, 0, doc.n, pos, rank, self.window, ends, words=None)
        return doc.chunks([0, *ends])

    # -- candidates ----------------------------------------------------------------------------

    def _candidates(self, doc: Doc) -> tuple[np.ndarray, np.ndarray]:
        """Candidate cuts (token indices, sorted) and their ranks (a total order: higher wins)."""
        n = doc.n
        text = doc.text
        found = [
            (doc.cuts_at(heading_positions(text), 0, n), LEVEL_HEADING),
            (doc.pattern_cuts(BLANK_LINE, 0, n), LEVEL_BLANK),
            (doc.pattern_cuts(LINE_BREAK, 0, n), LEVEL_LINE),
            (doc.pattern_cuts(CLAUSE_END, 0, n), LEVEL_SENTENCE),
        ]
        ts = np.concatenate([t for t, _ in found]) if found else np.zeros(0, dtype=np.int64)
        if ts.shape[0] == 0:
            return ts.astype(np.int64), ts.astype(np.int64)
        levels = np.concatenate([np.full(t.shape[0], lvl, dtype=np.int64) for t, lvl in found])
        # One candidate per position, at its strongest level.
        order = np.lexsort((-levels, ts))
        ts, levels = ts[order], levels[order]
        first = np.ones(ts.shape[0], dtype=bool)
        first[1:] = ts[1:] != ts[:-1]
        ts, levels = ts[first].astype(np.int64), levels[first]
        chars = doc.starts[ts]
        prev = np.concatenate(([0], chars[:-1]))
        begin = np.maximum(prev, chars - _HASH_CHARS).tolist()
        hashes = np.fromiter(
            (_hash64(text[a:b]) for a, b in zip(begin, chars.tolist())), dtype=np.uint64, count=ts.shape[0]
        )
        # Rank = position in the order (priority, earlier first); lexsort's last key is primary.
        prio = levels * _LEVEL_WEIGHT + (hashes >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        order = np.lexsort((-ts, prio))
        rank = np.empty(ts.shape[0], dtype=np.int64)
        rank[order] = np.arange(ts.shape[0])
        return ts, rank

    def _word_candidates(self, doc: Doc) -> tuple[np.ndarray, np.ndarray]:
        """Word ends of the whole document ranked by a rolling hash of the words before them."""
        hashes, ends = word_hashes(doc.text)
        rolled = rolling_hash(hashes, _WORD_WINDOW)
        ts = np.searchsorted(doc.starts, ends, "left").astype(np.int64)
        keep = (ts > 0) & (ts < doc.n)
        ts, rolled = ts[keep], rolled[keep]
        first = np.ones(ts.shape[0], dtype=bool)
        first[1:] = ts[1:] != ts[:-1]
        ts, rolled = ts[first], rolled[first]
        order = np.lexsort((-ts, rolled))
        rank = np.empty(ts.shape[0], dtype=np.int64)
        rank[order] = np.arange(ts.shape[0])
        return ts, rank

    # -- splitting -----------------------------------------------------------------------------

    def _split(
        self,
        doc: Doc,
        lo: int,
        hi: int,
        pos: np.ndarray,
        rank: np.ndarray,
        w: int,
        out: list[int],
        words: tuple[np.ndarray, np.ndarray] | None,
        word_level: bool = False,
    ) -> None:
        """Append the chunk ends of ``[lo, hi)`` to ``out``."""
        cap = self.cap
        a, b = np.searchsorted(pos, lo, "right"), np.searchsorted(pos, hi, "left")
        p, r = pos[a:b], rank[a:b]
        end = max(1, round(w * _END_RATIO))
        cuts = local_maxima(p, r, lo, hi, w, end).tolist() if hi - lo > 2 * end else []
        bounds = [lo, *cuts, hi]
        for s, e in zip(bounds[:-1], bounds[1:]):
            if e - s <= cap:
                out.append(e)
                continue
            # Too long: the same contest inside with half the window, then word ends, then windows.
            inner = np.searchsorted(p, s, "right"), np.searchsorted(p, e, "left")
            has_candidates = inner[1] > inner[0]
            if has_candidates and w // 2 >= _MIN_WINDOW:
                self._split(doc, s, e, p, r, w // 2, out, words, word_level)
            elif not word_level:
                if words is None:
                    words = self._word_candidates(doc)
                self._split(doc, s, e, words[0], words[1], self.window, out, words, word_level=True)
            else:
                out.extend(windows(doc, s, e, cap))
                out.append(e)
