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
from reindex.models import find_tokenizer_file, resolve_model_path

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


@dataclass(frozen=True, slots=True)
class HFTokenizer:
    """A Hugging Face fast tokenizer (``tokenizer.json``), without truncation, padding or special tokens."""

    name: str
    backend: Any = field(repr=False, compare=False)

    def offsets(self, text: str) -> np.ndarray:
        """Character offsets of every token of ``text``."""
        offs = self.backend.encode(text, add_special_tokens=False).offsets
        if not offs:
            return _EMPTY.copy()
        # fromiter over the flattened tuples is about twice as fast as np.array(list_of_tuples).
        flat = np.fromiter(itertools.chain.from_iterable(offs), dtype=np.int64, count=2 * len(offs))
        return flat.reshape(-1, 2)

    def count(self, text: str) -> int:
        """Number of tokens of ``text``."""
        return len(self.backend.encode(text, add_special_tokens=False).ids)

    def count_batch(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts``, encoded in one batch."""
        if not texts:
            return []
        return [len(e.ids) for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]


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
