"""Sticky (edit-aware) re-chunking: keep the previous version's chunks that survive an edit, cut only
the gaps between them.

A stateless chunker sees only the new text, so an edit can move boundaries far from itself and every
moved chunk is a new embedding input. Sticky re-chunking takes the previous version's chunk texts
(in order) and the new text and:

1. **Aligns** previous chunks to the new text: every occurrence of a previous chunk whose ends are
   valid cuts of the new document (see ``_segments``) is a candidate; the kept set is the chain of
   candidates, increasing in previous order *and* in position, without overlap, with the most
   tokens (then characters) in all: a weighted longest-common-subsequence over chunks, solved
   exactly by dynamic programming with a Fenwick tree (O(k log k) for k candidates). A greedy
   left-to-right search is not used because one moved chunk found late in the text would make it
   drop every chunk that precedes it there; maximising kept tokens keeps the rest. Ties between
   chains of equal tokens and characters (repeated text) go to the chain whose chunks moved least
   from their previous offsets (the previous chunks tile the previous text, so their offsets are
   known), then to the one whose last chunk starts first: the result is a function of (previous
   chunks, new text) alone.
2. **Cuts the gaps** (the new text between kept chunks) with the configured stateless chunker, on
   the gap text, and maps its cuts back to token cuts of the whole document.
3. **Enforces the size bounds** ``[lo, hi]`` (see :func:`size_bounds`): a gap piece under ``lo``
   tokens is merged into the previous piece of its gap, else the next one, when the result stays
   within ``hi``. A whole gap still under ``lo`` is merged into the adjacent kept chunk that gives
   the smaller result (the previous one on a tie) when that stays within ``hi``: the lower bound is
   the only thing that alters a kept chunk. A previous chunk over ``hi`` tokens in the new document
   is never kept. A document with no kept chunk is cut by the chunker alone, so sticky equals
   stateless when there are no previous chunks.
4. **Controls drift** (:func:`rechunk_document`): the result is compared with a fresh cut of the new
   text (share of chunks outside the bounds, and the Wasserstein-1 distance between the two
   chunk-length distributions divided by the fresh cut's median); past either threshold of the
   config the document is cut freshly. A document whose previous chunks still tile it exactly
   (nothing changed) is returned as it was, without a drift check, so a re-cut is only ever paid
   together with an edit.

Chunks partition the new text exactly (``"".join(c.text) == text``) with offsets and token counts
in the new document, like every partitioning chunker.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reindex.chunkers._segments import Doc
from reindex.chunkers.base import Chunk, Chunker
from reindex.config import STICKY_KINDS, RechunkConfig, parse_chunker_spec
from reindex.errors import ChunkerError
from reindex.tokenizers import Tokenizer

__all__ = [
    "Drift",
    "Rechunked",
    "StickyConfig",
    "align_previous",
    "chunk_drift",
    "rechunk_document",
    "size_bounds",
    "sticky_chunks",
    "wasserstein1",
]

# Occurrences of one previous chunk considered in the new text: bounds the work on documents with
# much repeated text; the first ones are taken, so the limit never makes the result depend on more
# than (previous chunks, new text).
MAX_OCCURRENCES = 64


@dataclass(frozen=True, slots=True)
class StickyConfig:
    """Sticky re-chunking parameters in tokens: the size bounds and the drift thresholds."""

    lo: int  # chunks below this many tokens are out of bounds; gap pieces below it are merged
    hi: int  # the chunker's hard cap
    max_drift: float  # W1(sticky lengths, fresh lengths) / fresh median above this ⇒ fresh re-cut
    max_out_of_bounds: float  # out-of-bounds share above the fresh cut's by more than this ⇒ re-cut

    @classmethod
    def of(cls, chunker_config: object, rechunk: RechunkConfig | None = None) -> StickyConfig:
        """The sticky parameters of a chunker config (or spec string) and the text half's rechunk config."""
        rc = rechunk or RechunkConfig(mode="sticky")
        lo, hi = size_bounds(chunker_config, rc.min_share)
        return cls(lo, hi, rc.max_drift, rc.max_out_of_bounds)


def size_bounds(chunker_config: object, min_share: float) -> tuple[int, int]:
    """``(lo, hi)`` in tokens: ``hi`` is the chunker's hard cap (``size``; ``cap`` for cdc; ``cap``
    or 2·size for anchored), ``lo = max(1, round(min_share × target))`` with target = ``size``
    (``(min+max)/2`` for cdc). Only token-limited, non-overlapping chunkers have them."""
    cfg = parse_chunker_spec(chunker_config) if isinstance(chunker_config, str) else chunker_config
    kind = getattr(cfg, "kind", None)
    if getattr(cfg, "overlap", 0):
        raise ChunkerError(f"sticky re-chunking needs chunks that partition the text; {kind} with overlap does not")
    if kind not in STICKY_KINDS:
        raise ChunkerError(
            f"sticky re-chunking needs a token-limited chunker ({', '.join(STICKY_KINDS)}); {kind!r} has no size bounds in tokens"
        )
    if kind == "cdc":
        target, hi = (cfg.min + cfg.max) / 2, cfg.cap
    elif kind == "anchored":
        target, hi = cfg.size, cfg.cap or 2 * cfg.size
    else:
        target, hi = cfg.size, cfg.size
    return max(1, round(min_share * target)), int(hi)


# --------------------------------------------------------------------------------------------
# Alignment
# --------------------------------------------------------------------------------------------


def _valid_cut_chars(doc: Doc) -> np.ndarray:
    """Sorted character positions where a chunk may start or end: 0, every valid cut, len(text)."""
    s = doc.starts
    valid = s[1:][s[1:] > s[:-1]] if doc.n > 1 else np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(([0], valid, [len(doc.text)])).astype(np.int64))


def align_previous(previous: Sequence[str], doc: Doc, hi: int | None = None) -> list[tuple[int, int, int]]:
    """The kept previous chunks: ``(previous index, token start, token end)`` in document order.

    Candidates are occurrences whose ends are valid cuts and that hold 1..``hi`` tokens; the kept
    chain increases in previous index and position, does not overlap and has the most tokens, then
    characters, then the least total displacement from the previous offsets, then the earliest
    last chunk. (Lexicographic order on these sums is compatible with addition, so the dynamic
    programme is exact for it.)"""
    text = doc.text
    cuts = _valid_cut_chars(doc)
    cands: list[tuple[int, int, int, int, int, int]] = []  # (start, index, end, tokens, chars, -displacement)
    offset = 0
    for i, prev in enumerate(previous):
        old_at = offset
        offset += len(prev)
        if not prev or prev.isspace():
            continue
        at = text.find(prev)
        found = 0
        while at >= 0 and found < MAX_OCCURRENCES:
            end = at + len(prev)
            ok_a = cuts[min(np.searchsorted(cuts, at), cuts.shape[0] - 1)] == at
            ok_b = cuts[min(np.searchsorted(cuts, end), cuts.shape[0] - 1)] == end
            if ok_a and ok_b:
                a = 0 if at == 0 else int(np.searchsorted(doc.starts, at, "left"))
                b = int(np.searchsorted(doc.starts, end, "left"))
                if b > a and (hi is None or b - a <= hi):
                    cands.append((at, i, end, b - a, len(prev), -abs(at - old_at)))
            found += 1
            at = text.find(prev, at + 1)
    if not cands:
        return []
    cands.sort(key=lambda c: (c[0], c[1]))
    k = len(cands)
    size = len(previous)
    # Fenwick tree over previous indices holding the best (tokens, chars, -displacement, -order)
    # chain ending at an index; candidates enter it once the scan passes their end, so every chain is
    # non-overlapping.
    none = (-1, 0, 0, 0)
    tree: list[tuple[int, int, int, int]] = [none] * (size + 1)
    owner: list[int] = [-1] * (size + 1)
    score: list[tuple[int, int, int, int]] = [none] * k
    back: list[int] = [-1] * k
    by_end = sorted(range(k), key=lambda j: (cands[j][2], j))
    pending = 0
    for j, (start, idx, _end, toks, chars, disp) in enumerate(cands):
        while pending < k and cands[by_end[pending]][2] <= start:
            q = by_end[pending]
            pos, val = cands[q][1] + 1, score[q]
            while pos <= size:
                if val > tree[pos]:
                    tree[pos], owner[pos] = val, q
                pos += pos & -pos
            pending += 1
        best, best_q, pos = none, -1, idx  # prefix over indices < idx (1-based positions 1..idx)
        while pos > 0:
            if tree[pos] > best:
                best, best_q = tree[pos], owner[pos]
            pos -= pos & -pos
        base = score[best_q] if best_q >= 0 else (0, 0, 0, 0)
        score[j] = (base[0] + toks, base[1] + chars, base[2] + disp, -j)
        back[j] = best_q
    j = max(range(k), key=lambda x: score[x])
    out = []
    while j >= 0:
        start, idx, end = cands[j][:3]
        a = 0 if start == 0 else int(np.searchsorted(doc.starts, start, "left"))
        out.append((idx, a, int(np.searchsorted(doc.starts, end, "left"))))
        j = back[j]
    return out[::-1]


# --------------------------------------------------------------------------------------------
# Gaps and bounds
# --------------------------------------------------------------------------------------------


def _cut_gap(doc: Doc, a: int, b: int, chunker: Chunker) -> list[int]:
    """Token cuts strictly inside gap ``[a, b)`` where the chunker cuts the gap's text."""
    ca, cb = doc.char_at(a), doc.char_end(b)
    pieces = chunker.chunk(doc.text[ca:cb])
    ends = [ca + p.end for p in pieces[:-1]]
    return doc.cuts_at(ends, a, b).tolist()


def _merge_small(bounds: list[int], lo: int, hi: int) -> list[int]:
    """Bounds of one gap's pieces with every piece under ``lo`` merged into the previous piece, else
    the next, when the merged piece stays within ``hi``."""
    b = list(bounds)
    i = 0
    while i < len(b) - 1 and len(b) > 2:
        size = b[i + 1] - b[i]
        if size < lo:
            if i > 0 and b[i + 1] - b[i - 1] <= hi:
                del b[i]  # merged into the previous piece; look at the merged piece again
                i -= 1
                continue
            if i + 2 < len(b) and b[i + 2] - b[i] <= hi:
                del b[i + 1]
                continue
        i += 1
    return b


def sticky_chunks(previous: Sequence[str], text: str, chunker: Chunker, tokenizer: Tokenizer, config: StickyConfig) -> tuple[list[Chunk], int]:
    """``(chunks, kept)``: ``text`` re-chunked against the previous version's chunk texts without
    drift control; ``kept`` counts previous chunks kept unchanged."""
    doc = Doc.of(text, tokenizer)
    if doc is None:
        return [], 0
    kept = align_previous(previous, doc, config.hi)
    if not kept:
        return chunker.chunk(text), 0
    # Segments in document order: [start, end, is_kept].
    segs: list[list] = []
    cursor = 0
    for _, a, b in kept:
        if a > cursor:
            segs.append([cursor, a, False])
        segs.append([a, b, True])
        cursor = b
    if cursor < doc.n:
        segs.append([cursor, doc.n, False])
    # A whole gap under the lower bound joins a kept neighbour (the one giving the smaller chunk).
    i = 0
    while i < len(segs):
        a, b, is_kept = segs[i]
        if not is_kept and b - a < config.lo:
            options = []
            for j in (i - 1, i + 1):
                if 0 <= j < len(segs) and segs[j][2]:
                    merged = max(b, segs[j][1]) - min(a, segs[j][0])
                    if merged <= config.hi:
                        options.append((merged, j))
            if options:
                _, j = min(options)
                lo_i, hi_i = min(i, j), max(i, j)
                segs[lo_i : hi_i + 1] = [[segs[lo_i][0], segs[hi_i][1], False, "merged"]]
                i = lo_i + 1
                continue
        i += 1
    spans: list[tuple[int, int]] = []
    n_kept = 0
    for seg in segs:
        a, b, is_kept = seg[0], seg[1], seg[2]
        if is_kept:
            spans.append((a, b))
            n_kept += 1
        elif len(seg) > 3:  # a small gap merged into a kept chunk: one chunk, within hi
            spans.append((a, b))
        else:
            bounds = _merge_small([a, *_cut_gap(doc, a, b, chunker), b], config.lo, config.hi)
            spans.extend(itertools.pairwise(bounds))
    return doc.ranges(spans), n_kept


# --------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------


def wasserstein1(a: Sequence[float], b: Sequence[float]) -> float:
    """Wasserstein-1 (earth mover's) distance between two empirical distributions: the area between
    their quantile functions. 0 for two empty samples; inf when exactly one is empty."""
    x, y = np.sort(np.asarray(a, dtype=np.float64)), np.sort(np.asarray(b, dtype=np.float64))
    n, m = x.shape[0], y.shape[0]
    if n == 0 or m == 0:
        return 0.0 if n == m else float("inf")
    u = np.unique(np.concatenate((np.arange(1, n + 1) / n, np.arange(1, m + 1) / m)))
    du = np.diff(np.concatenate(([0.0], u)))
    mid = u - du / 2  # inside each interval both quantile functions are constant
    ix = np.minimum((mid * n).astype(np.int64), n - 1)
    iy = np.minimum((mid * m).astype(np.int64), m - 1)
    return float(np.sum(du * np.abs(x[ix] - y[iy])))


@dataclass(frozen=True, slots=True)
class Drift:
    """How far a sticky chunking has moved from a fresh cut of the same text."""

    chunks: int
    fresh_chunks: int
    out_of_bounds: float  # share of sticky chunks with tokens < lo or > hi
    fresh_out_of_bounds: float  # the same share for the fresh cut
    distance: float  # W1 between the two chunk-length distributions / the fresh cut's median

    def exceeds(self, config: StickyConfig) -> bool:
        """Whether either drift threshold of ``config`` is passed."""
        return self.distance > config.max_drift or self.out_of_bounds - self.fresh_out_of_bounds > config.max_out_of_bounds

    def as_dict(self) -> dict:
        return {"chunks": self.chunks, "fresh_chunks": self.fresh_chunks, "out_of_bounds": round(self.out_of_bounds, 6),
                "fresh_out_of_bounds": round(self.fresh_out_of_bounds, 6), "distance": round(self.distance, 6)}


def chunk_drift(lengths: Sequence[int], fresh_lengths: Sequence[int], lo: int, hi: int) -> Drift:
    """Drift of chunk token lengths ``lengths`` from a fresh cut's ``fresh_lengths`` under bounds ``[lo, hi]``."""

    def oob(ls: Sequence[int]) -> float:
        return sum(1 for n in ls if n < lo or n > hi) / len(ls) if ls else 0.0

    med = float(np.median(fresh_lengths)) if len(fresh_lengths) else 0.0
    w = wasserstein1(lengths, fresh_lengths)
    dist = 0.0 if w == 0 else (w / med if med > 0 else float("inf"))
    return Drift(len(lengths), len(fresh_lengths), oob(lengths), oob(fresh_lengths), dist)


@dataclass(frozen=True, slots=True)
class Rechunked:
    """One document re-chunked in sticky mode."""

    chunks: tuple[Chunk, ...]
    kept: int  # previous chunks kept unchanged
    recut: bool  # drift control replaced the sticky chunks by a fresh cut
    drift: Drift | None  # drift of the sticky chunks (None when nothing was checked)


def rechunk_document(previous: Sequence[str], text: str, chunker: Chunker, tokenizer: Tokenizer, config: StickyConfig) -> Rechunked:
    """Sticky chunks of ``text`` given the previous version's chunk texts in order, with drift
    control: a fresh cut when the sticky chunks drift past ``config``'s thresholds. Deterministic in
    (previous, text, chunker, config); equal to ``chunker.chunk(text)`` when ``previous`` is empty."""
    chunks, kept = sticky_chunks(previous, text, chunker, tokenizer, config)
    if kept == 0:
        return Rechunked(tuple(chunks), 0, False, None)
    if kept == len(chunks) and kept == len(previous):
        # Every previous chunk kept and nothing else: the document is unchanged; never re-cut it.
        return Rechunked(tuple(chunks), kept, False, None)
    fresh = chunker.chunk(text)
    drift = chunk_drift([c.tokens for c in chunks], [c.tokens for c in fresh], config.lo, config.hi)
    if drift.exceeds(config):
        return Rechunked(tuple(fresh), 0, True, drift)
    return Rechunked(tuple(chunks), kept, False, drift)
