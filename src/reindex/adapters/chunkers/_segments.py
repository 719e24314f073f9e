"""Shared machinery of the token-limited chunkers: a document tokenised once, cut points in token
space, fixed windows, recursive splitting and greedy grouping.

Every chunker works on *token indices*. A cut at token index ``t`` (``0 < t < n``) puts tokens
``[…, t)`` in one chunk and ``[t, …)`` in the next; its character position is the start of token
``t``. So whitespace between pieces always ends the preceding chunk, the first chunk starts at 0, the
last ends at ``len(text)``, and a chunk's size is a subtraction. A cut is *valid* when token ``t``
starts strictly after token ``t - 1`` (some tokenizers give several tokens of one character the same
start, e.g. BERT on Hangul); only valid cuts are made, so a chunk's token count is also the number of
tokens whose start lies inside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from reindex.adapters.chunkers.base import Chunk
from reindex.adapters.tokenizers import Tokenizer

__all__ = ["BLANK_LINE", "CLAUSE_END", "CODE_FENCE", "HEADING", "LINE_BREAK", "SENTENCE_END", "UNIT_END", "Doc", "DocChunker",
           "Level", "group_ends", "pack", "pattern_level", "recursive_ends", "split_pieces", "windows"]

# Paragraph break: a line break, optional horizontal whitespace, another line break.
BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
LINE_BREAK = re.compile(r"\n")
# Sentence ends: Latin terminators need following whitespace (or the end), so "3.14" and "e.g.x"
# are not cut; CJK terminators need none, because Chinese and Japanese put no space after them.
_LATIN_END = r"[.!?]+['\"”’)\]]*(?=\s|\Z)"
_CJK_END = r"[。！？．｡]+[」』”’）】〕]*"
SENTENCE_END = re.compile(rf"{_LATIN_END}|{_CJK_END}|\n[^\S\n]*\n")
# The recursive chunker also cuts at the full-width semicolon: long Chinese sentences often chain
# clauses with it, and a clause is still a better boundary than a fixed window.
CLAUSE_END = re.compile(rf"{_LATIN_END}|[。！？．｡；]+[」』”’）】〕]*")
# Unit ends (vector.compose: units): a sentence end or a line break. Every match ends at whitespace or just
# after punctuation, where a BERT-style pre-tokenizer splits anyway, so the tokens of a text are the tokens
# of its units one after the other (what makes a static model's composition exact).
UNIT_END = re.compile(rf"{_LATIN_END}|{_CJK_END}|\n")

_RUN1 = r"([=\-~^\"'`#*+_:.<>])\1{2,}[ \t]*"
_RUN2 = r"([=\-~^\"'`#*+_:.<>])\2{2,}[ \t]*"
# Section titles: Markdown ATX (`# Title`), and Markdown setext / reStructuredText titles: a line at
# column 0, after a blank line or at the start, underlined (and optionally overlined) with a run of
# one punctuation character. Indented lines never match, so literal blocks are left alone.
HEADING = re.compile(
    r"^(?:#{1,6}(?=[ \t]|$)"
    rf"|(?:\A|(?<=\n\n))(?:{_RUN1}\n)?(?=\S)[^\n]*\n{_RUN2}$)",
    re.MULTILINE,
)
CODE_FENCE = re.compile(r"^(?:```|~~~)", re.MULTILINE)


class Doc:
    """One document and the start offsets of its tokens (the only tokenisation a chunker does).

    A plain class rather than a frozen dataclass: it lives for one ``chunk()`` call and holds a
    large array that is never compared or hashed."""

    __slots__ = ("text", "starts", "n", "_dup_free")

    def __init__(self, text: str, starts: np.ndarray) -> None:
        self.text = text
        self.starts = starts
        self.n = int(starts.shape[0])
        self._dup_free = bool(self.n < 2 or np.all(starts[1:] > starts[:-1]))

    @classmethod
    def of(cls, text: str, tokenizer: Tokenizer) -> Doc | None:
        """Tokenise ``text`` once; None for an empty or whitespace-only document (nothing to embed)."""
        if not text or text.isspace():
            return None
        offsets = tokenizer.offsets(text)
        starts = np.ascontiguousarray(offsets[:, 0], dtype=np.int64)
        if starts.shape[0] > 1 and not np.all(starts[1:] >= starts[:-1]):
            starts = np.sort(starts, kind="stable")
        return cls(text, starts)

    # -- positions ---------------------------------------------------------------------------

    def char_at(self, t: int) -> int:
        """Character position where a chunk starting at cut ``t`` starts (0 for the first)."""
        if t <= 0:
            return 0
        if t >= self.n:
            return len(self.text)
        return int(self.starts[t])

    def char_end(self, t: int) -> int:
        """Character position where a chunk ending at cut ``t`` ends (``len(text)`` for the last)."""
        if t >= self.n:
            return len(self.text)
        return self.char_at(t)

    def snap(self, t: int) -> int:
        """The nearest valid cut at or before ``t`` (``t`` itself unless tokens share a start)."""
        if self._dup_free or t <= 0 or t >= self.n:
            return t
        return int(np.searchsorted(self.starts, self.starts[t], "left"))

    def snap_up(self, t: int) -> int:
        """The nearest valid cut after ``t`` (used only when snapping down would make no progress)."""
        if self._dup_free or t <= 0 or t >= self.n:
            return t
        return int(np.searchsorted(self.starts, self.starts[t], "right"))

    def cuts_at(self, positions: Sequence[int] | np.ndarray, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Valid cuts strictly inside ``(lo, hi)`` for character positions: each position becomes the
        first token starting at or after it (so a position inside a token moves past that token)."""
        hi = self.n if hi is None else hi
        if len(positions) == 0 or hi - lo < 2:
            return np.zeros(0, dtype=np.int64)
        ts = np.searchsorted(self.starts, np.asarray(positions, dtype=np.int64), "left")
        ts = ts[(ts > lo) & (ts < hi)]
        return np.unique(ts)

    def pattern_cuts(self, pattern: re.Pattern[str], lo: int, hi: int, at_start: bool = False) -> np.ndarray:
        """Valid cuts inside token range ``(lo, hi)`` where ``pattern`` matches (after the match, or
        before it with ``at_start``). Only that range of the text is scanned."""
        if hi - lo < 2:
            return np.zeros(0, dtype=np.int64)
        a, b = self.char_at(lo), self.char_end(hi)
        if at_start:
            positions = [m.start() for m in pattern.finditer(self.text, a, b)]
        else:
            positions = [m.end() for m in pattern.finditer(self.text, a, b)]
        return self.cuts_at(positions, lo, hi)

    # -- output ------------------------------------------------------------------------------

    def chunks(self, cuts: Sequence[int]) -> list[Chunk]:
        """Chunks between consecutive cuts (``cuts`` starts with 0 and ends with ``n``)."""
        return self.ranges([(a, b) for a, b in zip(cuts[:-1], cuts[1:])] or [(0, self.n)])

    def ranges(self, spans: Sequence[tuple[int, int]]) -> list[Chunk]:
        """Chunks for token ranges ``[a, b)`` (possibly overlapping), in the given order."""
        text = self.text
        bounds = [(self.char_at(a), self.char_end(b)) for a, b in spans]
        if not bounds:
            return []
        flat = np.asarray(bounds, dtype=np.int64).reshape(-1)
        # Count from the character bounds, so `tokens` is by definition the number of token starts
        # inside [start, end) even if a caller passed an invalid cut.
        tok = np.searchsorted(self.starts, flat, "left").reshape(-1, 2)
        counts = (tok[:, 1] - tok[:, 0]).tolist()
        return [
            Chunk(ordinal=i, start=s, end=e, tokens=c, text=text[s:e])
            for i, ((s, e), c) in enumerate(zip(bounds, counts))
        ]


# -- splitting ---------------------------------------------------------------------------------


def windows(doc: Doc, lo: int, hi: int, size: int) -> list[int]:
    """Interior cuts of greedy windows of ``size`` tokens over ``[lo, hi)``."""
    if hi - lo <= size:
        return []
    if doc._dup_free:
        return list(range(lo + size, hi, size))
    cuts: list[int] = []
    t = lo
    while hi - t > size:
        c = doc.snap(t + size)
        if c <= t:  # more than `size` tokens share one start: the cap cannot be kept here
            c = doc.snap_up(t + size)
        if c >= hi:
            break
        cuts.append(c)
        t = c
    return cuts


Level = Callable[[int, int], np.ndarray]  # token range (lo, hi) → valid cuts strictly inside it


def pattern_level(doc: Doc, pattern: re.Pattern[str], at_start: bool = False) -> Level:
    """A split level that cuts where ``pattern`` matches."""
    return lambda lo, hi: doc.pattern_cuts(pattern, lo, hi, at_start)


def split_pieces(doc: Doc, lo: int, hi: int, size: int, levels: Sequence[Level], out: list[int]) -> None:
    """Append to ``out`` the ends of pieces of ``[lo, hi)`` that are each at most ``size`` tokens:
    split at the first level's cuts, split any piece still too long at the next level, and so on;
    fixed windows when no level is left."""
    if hi - lo <= size:
        out.append(hi)
        return
    if not levels:
        out.extend(windows(doc, lo, hi, size))
        out.append(hi)
        return
    cuts = levels[0](lo, hi)
    if cuts.shape[0] == 0:
        split_pieces(doc, lo, hi, size, levels[1:], out)
        return
    bounds = np.concatenate(([lo], cuts, [hi]))
    long = np.flatnonzero(np.diff(bounds) > size)
    if long.shape[0] == 0:
        out.extend(bounds[1:].tolist())
        return
    prev = 0
    for i in long.tolist():
        out.extend(bounds[prev + 1 : i + 1].tolist())
        split_pieces(doc, int(bounds[i]), int(bounds[i + 1]), size, levels[1:], out)
        prev = i + 1
    out.extend(bounds[prev + 1 :].tolist())


def pack(lo: int, ends: Sequence[int], size: int) -> list[int]:
    """Greedy merge: the ends of consecutive pieces (each at most ``size``, starting at ``lo``)
    grouped into chunks of at most ``size`` tokens; returns the chunk ends."""
    if not ends:
        return []
    arr = np.asarray(ends, dtype=np.int64)
    out: list[int] = []
    start = lo
    last = int(arr[-1])
    # One binary search per chunk rather than a Python step per piece.
    while start < last:
        i = int(np.searchsorted(arr, start + size, "right")) - 1
        if i < 0 or arr[i] <= start:
            # The next piece alone is over `size` (only when more than `size` tokens share one
            # character): it becomes a chunk of its own.
            i = int(np.searchsorted(arr, start, "right"))
        end = int(arr[i])
        out.append(end)
        start = end
    return out


def recursive_ends(doc: Doc, lo: int, hi: int, size: int, levels: Sequence[Level]) -> list[int]:
    """Chunk ends of ``[lo, hi)``: recursive split into pieces, then greedy merge up to ``size``."""
    pieces: list[int] = []
    split_pieces(doc, lo, hi, size, levels, pieces)
    return pack(lo, pieces, size)


def group_ends(
    doc: Doc,
    lo: int,
    hi: int,
    size: int,
    units: Level,
    inner: Callable[[int, int], list[int]],
) -> list[int]:
    """Chunk ends of ``[lo, hi)`` from whole units (paragraphs, sections) merged greedily up to
    ``size``; a unit longer than ``size`` is chunked alone by ``inner`` and never shares a chunk."""
    if hi - lo <= size:
        return [hi]
    cuts = units(lo, hi)
    bounds = np.concatenate(([lo], cuts, [hi])).tolist()
    out: list[int] = []
    start = lo
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a > size:
            if start < a:
                out.append(a)
            out.extend(inner(a, b))
            start = b
        elif b - start > size:
            out.append(a)
            start = a
    if start < hi:
        out.append(hi)
    return out


@dataclass(frozen=True, slots=True)
class DocChunker:
    """The shared shape of our chunkers: a config, a tokenizer, the canonical spec, and ``chunk``
    that tokenises the document once and hands the :class:`Doc` to ``chunk_doc``."""

    config: Any
    tokenizer: Tokenizer
    spec: str = field(init=False)

    def __post_init__(self) -> None:
        from reindex.domain.config import chunker_spec

        object.__setattr__(self, "spec", chunker_spec(self.config))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; [] for an empty or whitespace-only document."""
        doc = Doc.of(text, self.tokenizer)
        if doc is None:
            return []
        return self.chunk_doc(doc)

    def chunk_doc(self, doc: "Doc") -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        raise NotImplementedError
