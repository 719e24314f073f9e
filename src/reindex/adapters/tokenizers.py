"""Tokenizers that chunk sizes and costs are counted in: a model's fast tokenizer, ``whitespace`` or
``char``. Every tokenizer reports character offsets into the string it was given, so a chunker can
tokenise a document once and answer every size question from the offsets."""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from reindex.errors import ModelError, TokenizerError
from reindex.domain.models import find_tokenizer_file, resolve_model_path

__all__ = ["DEFAULT_TOKENIZER", "WINDOW_CHARS", "CharTokenizer", "HFTokenizer", "Tokenizer",
           "WhitespaceTokenizer", "code_points", "is_space", "load_tokenizer"]

DEFAULT_TOKENIZER = "all-MiniLM-L6-v2"

_EMPTY = np.zeros((0, 2), dtype=np.int64)


@runtime_checkable
class Tokenizer(Protocol):
    """Counts tokens and reports where they are."""

    name: str

    def offsets(self, text: str) -> np.ndarray:
        """``(n, 2)`` int64 array of character ``[start, end)`` of every token (no special tokens)."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (no special tokens)."""
        ...

    def count_batch(self, texts: list[str]) -> list[int]:
        """``count`` of every text, in order."""
        ...


@dataclass(frozen=True, slots=True)
class WhitespaceTokenizer:
    """Tokens are maximal runs of non-whitespace characters."""

    name: str = "whitespace"
    _pattern: re.Pattern[str] = field(default=re.compile(r"\S+"), repr=False, compare=False)

    def offsets(self, text: str) -> np.ndarray:
        """Start and end of every non-whitespace run."""
        spans = [m.span() for m in self._pattern.finditer(text)]
        if not spans:
            return _EMPTY.copy()
        flat = np.fromiter(itertools.chain.from_iterable(spans), dtype=np.int64, count=2 * len(spans))
        return flat.reshape(-1, 2)

    def count(self, text: str) -> int:
        """Number of non-whitespace runs."""
        # str.split() and the regex agree on what whitespace is (both use str.isspace).
        return len(text.split())

    def count_batch(self, texts: list[str]) -> list[int]:
        """``count`` of every text."""
        return [len(t.split()) for t in texts]


def _whitespace_table() -> np.ndarray:
    # Every whitespace code point is below U+3001 (the ideographic space is the last one).
    return np.array([chr(c).isspace() for c in range(0x3001)], dtype=bool)


_WHITESPACE_TABLE = _whitespace_table()


def is_space(codes: np.ndarray) -> np.ndarray:
    """Boolean mask of the whitespace code points (``str.isspace``) in an array of code points."""
    return (codes <= 0x3000) & _WHITESPACE_TABLE[np.minimum(codes, 0x3000)]


def code_points(text: str) -> np.ndarray:
    """The code points of ``text`` as a uint32 array (index = character offset)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


@dataclass(frozen=True, slots=True)
class CharTokenizer:
    """Every non-whitespace character is a token."""

    name: str = "char"

    def offsets(self, text: str) -> np.ndarray:
        """Position and position + 1 of every non-whitespace character."""
        if not text:
            return _EMPTY.copy()
        # Vectorised: a Python loop per character would make this the slowest tokenizer by far.
        starts = np.flatnonzero(~is_space(code_points(text))).astype(np.int64)
        return np.stack([starts, starts + 1], axis=1)

    def count(self, text: str) -> int:
        """Number of non-whitespace characters."""
        return sum(len(run) for run in text.split())

    def count_batch(self, texts: list[str]) -> list[int]:
        """``count`` of every text."""
        return [self.count(t) for t in texts]


# Pre-tokenizers that split on whitespace: no token spans a whitespace character, so a long text can be
# encoded window by window, cut at whitespace, with exactly the tokens of one whole encode.
_WHITESPACE_SPLITTING = {"BertPreTokenizer", "WhitespaceSplit", "Whitespace"}
#: Characters per window when a long document is encoded in pieces (memory per document stays bounded:
#: one whole encode of a 20 MB document took 3.5 GB, mostly the Python offset tuples).
WINDOW_CHARS = 1 << 18
_SPACE = re.compile(r"\s")


def _windows(text: str, size: int) -> list[tuple[int, int]] | None:
    """``[start, end)`` pieces of ``text`` of at most about ``size`` characters, each ending just after a
    whitespace character; None when some stretch of ``size`` characters holds no whitespace at all."""
    out, start, n = [], 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            cut = max(text.rfind(c, start, end) for c in (" ", "\n", "\t", "\r"))
            if cut <= start:
                m = _SPACE.search(text, start + 1, end)
                if m is None:
                    return None
                cut = m.start()
            end = cut + 1
        out.append((start, end))
        start = end
    return out


@dataclass(frozen=True, slots=True)
class HFTokenizer:
    """A Hugging Face fast tokenizer (``tokenizer.json``), without truncation, padding or special tokens.
    Documents longer than :data:`WINDOW_CHARS` are encoded in whitespace-cut windows when the tokenizer
    splits on whitespace, so memory per document is bounded by the window, not the document."""

    name: str
    backend: Any = field(repr=False, compare=False)
    window_chars: int = field(default=WINDOW_CHARS, compare=False)

    def _pieces(self, text: str) -> list[tuple[int, int]]:
        if len(text) <= self.window_chars:
            return [(0, len(text))]
        if type(self.backend.pre_tokenizer).__name__ not in _WHITESPACE_SPLITTING:
            return [(0, len(text))]
        return _windows(text, self.window_chars) or [(0, len(text))]

    def offsets(self, text: str) -> np.ndarray:
        """Character offsets of every token of ``text``."""
        parts = []
        for start, end in self._pieces(text):
            offs = self.backend.encode(text[start:end], add_special_tokens=False).offsets
            if offs:
                # fromiter over the flattened tuples is about twice as fast as np.array(list_of_tuples).
                flat = np.fromiter(itertools.chain.from_iterable(offs), dtype=np.int64, count=2 * len(offs))
                parts.append(flat.reshape(-1, 2) + start)
            del offs
        if not parts:
            return _EMPTY.copy()
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def count(self, text: str) -> int:
        """Number of tokens of ``text``."""
        return sum(len(self.backend.encode(text[a:b], add_special_tokens=False).ids) for a, b in self._pieces(text))

    def count_batch(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts``, encoded in one batch (long texts window by window)."""
        return [len(ids) for ids in self.ids_batch(texts)]

    def ids_batch(self, texts: list[str]) -> list[list[int]]:
        """Token ids of every text (no special tokens, no truncation), in one batch without offsets (long texts
        window by window): the one tokenization an embedder both counts and feeds to its model."""
        if not texts:
            return []
        if any(len(t) > self.window_chars for t in texts):
            return [[i for a, b in self._pieces(t) for i in self._fast([t[a:b]])[0]] for t in texts]
        return self._fast(list(texts))

    def _fast(self, texts: list[str]) -> list[list[int]]:
        encode = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch  # fast: no offsets
        return [e.ids for e in encode(texts, add_special_tokens=False)]


@functools.lru_cache(maxsize=16)
def load_tokenizer(name: str = DEFAULT_TOKENIZER) -> Tokenizer:
    """The tokenizer called ``name``: ``whitespace``, ``char``, a packaged model name, or a path to a
    model folder or ``tokenizer.json``. Loaded once per name."""
    if name == "whitespace":
        return WhitespaceTokenizer()
    if name == "char":
        return CharTokenizer()
    try:
        path = find_tokenizer_file(resolve_model_path(name))
    except ModelError as err:
        raise TokenizerError(f"tokenizer {name!r}: {err}") from None
    try:
        from tokenizers import Tokenizer as _HFTokenizer
    except ImportError:
        raise TokenizerError("the `tokenizers` package is not installed; run `pip install tokenizers`") from None
    try:
        backend = _HFTokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exception subclasses with long messages
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise TokenizerError(f"tokenizer {name!r}: cannot read {path}: {first}") from None
    # The packaged model's tokenizer.json truncates and pads to 128: every count would be wrong.
    backend.no_truncation()
    backend.no_padding()
    return HFTokenizer(name=name, backend=backend)
