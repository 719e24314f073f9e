"""Sticky (edit-aware) re-chunking: keep the previous version's chunks that survive an edit, cut only
the gaps between them.

A stateless chunker sees only the new text, so an edit can move boundaries far from itself and every
moved chunk is a new embedding input. Sticky re-chunking takes the previous version's chunk texts
(in order) and the new text and:

1. **Aligns** previous chunks to the new text: every occurrence of a previous chunk whose ends are
   valid cuts of the new document (see ``_segments``) is a candidate, in any order (a moved section
   is a candidate like any other; a text that now occurs twice is one embedding for both places);
   the kept set is the non-overlapping set of candidates with the most tokens (then characters):
   weighted interval scheduling, solved exactly by dynamic programming over the candidates sorted by
   end (O(k log k) for k candidates). That is the least R_c any partition reusing whole previous
   chunks can reach, before the size bounds (:func:`reuse_floor`). Ties between sets of equal
   tokens and characters (repeated text) go to the set whose chunks moved least from their previous
   offsets (the previous chunks tile the previous text, so their offsets are known), then to the
   set found first in the scan: the result is a function of (previous chunks, new text) alone.
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

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reindex.adapters.chunkers._segments import LINE_BREAK, SENTENCE_END, Doc
from reindex.adapters.chunkers.base import Chunk, Chunker
from reindex.domain.config import STICKY_KINDS, RechunkConfig, parse_chunker_spec
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import Tokenizer

__all__ = [
    "Drift",
    "Rechunked",
    "StickyConfig",
    "align_previous",
    "chunk_drift",
    "rechunk_document",
    "reuse_floor",
    "size_bounds",
    "sticky_chunks",
    "wasserstein1",
]

# Occurrences of one previous chunk considered in the new text: bounds the work on documents with
# much repeated text. The first MAX_OCCURRENCES are taken, and NEAR_OCCURRENCES from the last one at or
# before each of two anchors: the chunk's previous offset, and that offset moved by the document's change
# in length (where a chunk after a single edit lands). Without the anchors a short chunk repeated more
# than MAX_OCCURRENCES times (a one-character piece) could not be found at its own place, and an
# unchanged document would not be recognised as one. Either way the candidates depend on (previous
# chunks, new text) alone.
MAX_OCCURRENCES = 64
NEAR_OCCURRENCES = 4


@dataclass(frozen=True, slots=True)
class StickyConfig:
    """Sticky re-chunking parameters in tokens: the size bounds and the drift thresholds."""

    lo: int  # chunks below this many tokens are out of bounds; gap pieces below it are merged
    hi: int  # the chunker's hard cap
    max_drift: float  # W1(sticky lengths, fresh lengths) / fresh median above this ⇒ fresh re-cut
    max_out_of_bounds: float  # out-of-bounds share above the fresh cut's by more than this ⇒ re-cut
    isolate_edits: bool = False  # cut a gap at the edges of its changed span (see _isolation_cuts)

    @classmethod
    def of(cls, chunker_config: object, rechunk: RechunkConfig | None = None) -> StickyConfig:
        """The sticky parameters of a chunker config (or spec string) and the text half's rechunk config."""
        rc = rechunk or RechunkConfig(mode="sticky")
        lo, hi = size_bounds(chunker_config, rc.min_share)
        return cls(lo, hi, rc.max_drift, rc.max_out_of_bounds, rc.isolate_edits)


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


def _candidates(previous: Sequence[str], doc: Doc, hi: int | None) -> list[tuple[int, int, int, int, int, int]]:
    """Occurrences of previous chunks in ``doc`` whose ends are valid cuts and that hold 1..``hi``
    tokens: ``(token start, token end, previous index, tokens, chars, -displacement)``, where the
    displacement is the distance in characters from the chunk's previous offset."""
    text = doc.text
    cuts = _valid_cut_chars(doc)
    out: list[tuple[int, int, int, int, int, int]] = []
    delta = len(text) - sum(len(p) for p in previous)
    offset = 0
    for i, prev in enumerate(previous):
        old_at = offset
        offset += len(prev)
        if not prev or prev.isspace():
            continue
        for at in _occurrences(text, prev, (old_at, old_at + delta)):
            end = at + len(prev)
            ok_a = cuts[min(np.searchsorted(cuts, at), cuts.shape[0] - 1)] == at
            ok_b = cuts[min(np.searchsorted(cuts, end), cuts.shape[0] - 1)] == end
            if ok_a and ok_b:
                a = 0 if at == 0 else int(np.searchsorted(doc.starts, at, "left"))
                b = int(np.searchsorted(doc.starts, end, "left"))
                if b > a and (hi is None or b - a <= hi):
                    out.append((a, b, i, b - a, len(prev), -abs(at - old_at)))
    return out


def _occurrences(text: str, sub: str, anchors: Sequence[int]) -> list[int]:
    """Sorted start offsets of ``sub`` in ``text`` considered as candidates: the first MAX_OCCURRENCES,
    and NEAR_OCCURRENCES from the last occurrence at or before each anchor (else the first after it)."""
    found: set[int] = set()
    at, n = text.find(sub), 0
    while at >= 0 and n < MAX_OCCURRENCES:
        found.add(at)
        at, n = text.find(sub, at + 1), n + 1
    if n < MAX_OCCURRENCES:  # every occurrence is already in
        return sorted(found)
    for anchor in anchors:
        anchor = min(max(anchor, 0), len(text))
        at = text.rfind(sub, 0, anchor + len(sub))
        if at < 0:
            at = text.find(sub, anchor)
        n = 0
        while at >= 0 and n < NEAR_OCCURRENCES:
            found.add(at)
            at, n = text.find(sub, at + 1), n + 1
    return sorted(found)


def align_previous(previous: Sequence[str], doc: Doc, hi: int | None = None) -> list[tuple[int, int, int]]:
    """The kept previous chunks: ``(previous index, token start, token end)`` in document order.

    Candidates are occurrences whose ends are valid cuts and that hold 1..``hi`` tokens, in any
    order (a moved section is kept; a chunk whose text now occurs twice is kept at both places).
    The kept set is the non-overlapping set with the most tokens, then characters, then the least
    total displacement from the previous offsets: weighted interval scheduling, exact by dynamic
    programming over the candidates sorted by end (lexicographic order on these sums is compatible
    with addition). On a full tie the set found first in the scan (by end, start, previous index)
    stays, so the result is a function of (previous chunks, new text) alone. Since any partition of
    the new text reuses at most the tokens of such a set, no re-chunking that reuses whole previous
    chunks can embed fewer tokens (see :func:`reuse_floor`)."""
    cands = sorted(_candidates(previous, doc, hi), key=lambda c: (c[1], c[0], c[2]))
    if not cands:
        return []
    ends = [c[1] for c in cands]
    k = len(cands)
    zero = (0, 0, 0)
    best: list[tuple[int, int, int]] = [zero] * (k + 1)  # best[j]: the best set among the first j candidates
    take = [False] * (k + 1)
    pred = [0] * (k + 1)
    for j, (a, _b, _i, toks, chars, disp) in enumerate(cands, start=1):
        p = bisect.bisect_right(ends, a, 0, j - 1)  # candidates ending at or before this one's start
        base = best[p]
        with_j = (base[0] + toks, base[1] + chars, base[2] + disp)
        if with_j > best[j - 1]:  # strictly better: on a tie the set found earlier stays
            best[j], take[j], pred[j] = with_j, True, p
        else:
            best[j] = best[j - 1]
    out = []
    j = k
    while j > 0:
        if take[j]:
            a, b, i = cands[j - 1][:3]
            out.append((i, a, b))
            j = pred[j]
        else:
            j -= 1
    return out[::-1]


def reuse_floor(previous: Sequence[str], text: str, tokenizer: Tokenizer, hi: int | None = None) -> list[str]:
    """The oracle partition of ``text`` for R_c: the kept previous chunks of :func:`align_previous`
    and every maximal stretch between them as one piece, with no size bounds on the pieces. Its R_c
    is the least any re-chunking that reuses whole previous chunks (at valid cuts, ≤ ``hi`` tokens)
    can reach: the kept set covers the most tokens any partition can reuse."""
    doc = Doc.of(text, tokenizer)
    if doc is None:
        return []
    spans: list[tuple[int, int]] = []
    cursor = 0
    for _, a, b in align_previous(previous, doc, hi):
        if a > cursor:
            spans.append((cursor, a))
        spans.append((a, b))
        cursor = b
    if cursor < doc.n:
        spans.append((cursor, doc.n))
    return [c.text for c in doc.ranges(spans)]


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


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on slice equality: C-speed comparisons, O(n log n) at worst
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _isolation_cuts(doc: Doc, a: int, b: int, replaced: str) -> list[int]:
    """Token cuts strictly inside gap ``[a, b)`` that separate its changed span from the unchanged
    text around it: the gap's common prefix and suffix with ``replaced`` (the previous chunks the gap
    replaces, concatenated) are unchanged; the changed span between them is widened to the nearest
    line break or sentence end (paragraph breaks included) on each side, and cut there. Empty when
    nothing of the gap is unchanged or no separator lies between the change and the gap's ends."""
    ca, cb = doc.char_at(a), doc.char_end(b)
    gap = doc.text[ca:cb]
    if not replaced or not gap:
        return []
    pre = _common_prefix(gap, replaced)
    suf = _common_prefix(gap[pre:][::-1], replaced[pre:][::-1])
    if pre == 0 and suf == 0:
        return []
    bounds = sorted({m.end() for m in LINE_BREAK.finditer(gap)} | {m.end() for m in SENTENCE_END.finditer(gap)})
    left = max((x for x in bounds if x <= pre), default=0)
    right = min((x for x in bounds if x >= len(gap) - suf), default=len(gap))
    positions = [ca + x for x in (left, right) if 0 < x < len(gap)]
    return sorted(set(doc.cuts_at(positions, a, b).tolist())) if positions else []


def _replaced_text(previous: Sequence[str], kept_idx: Sequence[int], left: int | None, right: int | None) -> str:
    """The previous text a gap replaces: the previous chunks after its left kept neighbour (index
    ``left``) up to the next kept index, or, at the start of the document, those before its right
    kept neighbour down to the previous kept index. ``kept_idx`` is sorted."""
    if left is not None:
        k = bisect.bisect_right(kept_idx, left)
        stop = kept_idx[k] if k < len(kept_idx) else len(previous)
        return "".join(previous[left + 1 : stop])
    if right is not None:
        k = bisect.bisect_left(kept_idx, right)
        begin = kept_idx[k - 1] + 1 if k > 0 else 0
        return "".join(previous[begin:right])
    return ""


def sticky_chunks(previous: Sequence[str], text: str, chunker: Chunker, tokenizer: Tokenizer, config: StickyConfig) -> tuple[list[Chunk], int]:
    """``(chunks, kept)``: ``text`` re-chunked against the previous version's chunk texts without
    drift control; ``kept`` counts previous chunks kept unchanged."""
    doc = Doc.of(text, tokenizer)
    if doc is None:
        return [], 0
    kept = align_previous(previous, doc, config.hi)
    if not kept:
        return chunker.chunk(text), 0
    # Segments in document order: [start, end, kind, previous index] with kind "kept", "gap" or
    # "merged" (a small gap joined to a kept chunk: one chunk, within hi).
    segs: list[list] = []
    cursor = 0
    for idx, a, b in kept:
        if a > cursor:
            segs.append([cursor, a, "gap", None])
        segs.append([a, b, "kept", idx])
        cursor = b
    if cursor < doc.n:
        segs.append([cursor, doc.n, "gap", None])
    # A whole gap under the lower bound joins a kept neighbour (the one giving the smaller chunk).
    i = 0
    while i < len(segs):
        a, b, kind, _ = segs[i]
        if kind == "gap" and b - a < config.lo:
            options = []
            for j in (i - 1, i + 1):
                if 0 <= j < len(segs) and segs[j][2] == "kept":
                    merged = max(b, segs[j][1]) - min(a, segs[j][0])
                    if merged <= config.hi:
                        options.append((merged, j))
            if options:
                _, j = min(options)
                lo_i, hi_i = min(i, j), max(i, j)
                segs[lo_i : hi_i + 1] = [[segs[lo_i][0], segs[hi_i][1], "merged", segs[j][3]]]
                i = lo_i + 1
                continue
        i += 1
    kept_idx = sorted({idx for idx, _, _ in kept})
    spans: list[tuple[int, int]] = []
    n_kept = 0
    for k, (a, b, kind, _) in enumerate(segs):
        if kind != "gap":
            spans.append((a, b))
            n_kept += kind == "kept"
            continue
        parts = [a, b]
        if config.isolate_edits:
            left = segs[k - 1][3] if k > 0 else None
            right = segs[k + 1][3] if k + 1 < len(segs) else None
            parts = [a, *_isolation_cuts(doc, a, b, _replaced_text(previous, kept_idx, left, right)), b]
        bounds = [a]
        for x, y in itertools.pairwise(parts):
            bounds += [*_cut_gap(doc, x, y, chunker), y]
        spans.extend(itertools.pairwise(_merge_small(bounds, config.lo, config.hi)))
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
