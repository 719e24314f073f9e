"""Content-defined chunking: a rolling hash over words picks the boundaries, so a boundary depends
only on the words just before it and an edit moves only the boundaries near it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reindex.adapters.chunkers._segments import DocChunker, Doc
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import CdcChunkerConfig
from reindex.adapters.tokenizers import code_points, is_space

__all__ = ["CdcChunker", "rolling_hash", "word_hashes"]

# Fixed seeds: boundaries must be the same in every process (Python's hash() is randomised).
_CHAR_SEED = np.uint64(0x243F6A8885A308D3)
_WORD_SEED = np.uint64(0x13198A2E03707344)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

# Boundary probability per token, in units of 1 / ((max - min) / 2), before the target length
# (min + max) / 2, between the target and max, and between max and cap. A low rate before the
# target and a high one after it ("normalised chunking") concentrate lengths around the target:
# the expected length is min + 1.01 · (max - min) / 2, and about 5 % of chunks pass max.
_RATE_BEFORE_TARGET = 0.5
_RATE_BEFORE_MAX = 2.5
_RATE_BEFORE_CAP = 8.0


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise (uint64 arithmetic wraps, as intended)."""
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _is_cjk(codes: np.ndarray) -> np.ndarray:
    """CJK ideographs, kana, CJK punctuation and full-width forms: each is a word of its own."""
    return (
        ((codes >= 0x3000) & (codes <= 0x30FF))
        | ((codes >= 0x3400) & (codes <= 0x4DBF))
        | ((codes >= 0x4E00) & (codes <= 0x9FFF))
        | ((codes >= 0xF900) & (codes <= 0xFAFF))
        | ((codes >= 0xFF00) & (codes <= 0xFFEF))
        | ((codes >= 0x20000) & (codes <= 0x3134F))
    )


def word_hashes(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic 64-bit hashes of the words of ``text`` and the character offset after each.
    A word is a run of non-whitespace characters, except that every CJK character is a word."""
    codes = code_points(text)
    chars = np.flatnonzero(~is_space(codes))
    if chars.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    c = codes[chars]
    cjk = _is_cjk(c)
    first_char = np.empty(chars.shape[0], dtype=bool)
    first_char[0] = True
    first_char[1:] = (chars[1:] != chars[:-1] + 1) | cjk[1:] | cjk[:-1]
    firsts = np.flatnonzero(first_char)
    word_of = np.cumsum(first_char) - 1
    position = np.arange(chars.shape[0]) - firsts[word_of]
    # Each character is hashed with its position in the word; XOR combines them per word.
    per_char = _mix((c.astype(np.uint64) ^ _CHAR_SEED) + (position.astype(np.uint64) << np.uint64(32)))
    hashes = _mix(np.bitwise_xor.reduceat(per_char, firsts) ^ _WORD_SEED)
    lasts = np.empty_like(firsts)
    lasts[:-1] = firsts[1:] - 1
    lasts[-1] = chars.shape[0] - 1
    return hashes, chars[lasts].astype(np.int64) + 1


def rolling_hash(hashes: np.ndarray, window: int) -> np.ndarray:
    """Buzhash over ``window`` words: ``h[i] = XOR_j rotl(hashes[i - j], j)`` for ``j < window``."""
    out = hashes.copy()
    for j in range(1, min(window, hashes.shape[0])):
        older = hashes[:-j]
        r = j % 64
        out[j:] ^= (older << np.uint64(r)) | (older >> np.uint64(64 - r)) if r else older
    return out


@dataclass(frozen=True, slots=True)
class CdcChunker(DocChunker):
    """Boundaries are candidate word ends whose rolling hash (over ``window`` words) falls under a
    threshold: never before ``min`` tokens, rarely before the target ``(min + max) / 2``, often
    after it, very often after ``max``, and forced at ``cap`` (at the last word end within ``cap``
    tokens, or at exactly ``cap`` tokens when one word is that long). The threshold is a mask
    generalised to any probability and scaled by the tokens a word covers, so lengths in tokens do
    not depend on the tokens-per-word ratio of the language. The chunks partition the document."""

    config: CdcChunkerConfig

    def chunk_doc(self, doc: Doc) -> list[Chunk]:
        """Chunks of a tokenised, non-blank document."""
        return doc.chunks([0, *self._ends(doc)])

    def _ends(self, doc: Doc) -> list[int]:
        cfg = self.config
        n = doc.n
        if n <= cfg.min:
            return [n]
        hashes, word_ends = word_hashes(doc.text)
        rolled = rolling_hash(hashes, cfg.window)
        uniform = (rolled >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        # A word end as a cut: the first token starting at or after it (always a valid cut).
        cuts = np.searchsorted(doc.starts, word_ends, "left")
        gaps = np.diff(cuts, prepend=0)
        real = gaps > 0
        unit = 1.0 / max(1.0, (cfg.max - cfg.min) / 2)

        def candidates(rate: float) -> np.ndarray:
            return cuts[real & (uniform < rate * unit * gaps)]

        before_target = candidates(_RATE_BEFORE_TARGET)
        before_max = candidates(_RATE_BEFORE_MAX)
        before_cap = candidates(_RATE_BEFORE_CAP)
        word_cuts = cuts[real]
        target = (cfg.min + cfg.max) // 2

        def first(arr: np.ndarray, lo: int, hi: int) -> int | None:
            i = int(np.searchsorted(arr, lo, "left"))
            return int(arr[i]) if i < arr.shape[0] and arr[i] < hi else None

        ends: list[int] = []
        start = 0
        while True:
            cut = first(before_target, start + cfg.min, start + target)
            if cut is None:
                cut = first(before_max, start + max(cfg.min, target), start + cfg.max)
            if cut is None:
                cut = first(before_cap, start + cfg.max, start + cfg.cap + 1)
            if cut is None:
                if n - start <= cfg.cap:
                    break
                i = int(np.searchsorted(word_cuts, start + cfg.cap, "right")) - 1
                if i >= 0 and word_cuts[i] >= start + cfg.min:
                    cut = int(word_cuts[i])
                else:
                    cut = doc.snap(start + cfg.cap)
                    if cut <= start:
                        cut = doc.snap_up(start + cfg.cap)
            if cut >= n:
                break
            ends.append(cut)
            start = cut
        ends.append(n)
        return ends
