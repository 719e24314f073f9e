"""Bring your own splitter: a LangChain text splitter class by import path, or any ``module:function``
returning chunk texts (chonkie, semchunk or your own code), behind the :class:`Chunker` protocol.

The splitter returns texts only; offsets into the normalised document are recovered by locating each
chunk in order (:func:`locate_chunks`), and tokens are counted with the configured tokenizer in document
context, as for the built-in chunkers. A chunk that is not a substring of the document (a splitter that
rewrites whitespace or adds separators) is an error naming the splitter, never a guessed offset.

This module is the one place that imports a splitter's library (by the path in the config)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reindex.adapters.chunkers.base import Chunk
from reindex.domain.config import CallableChunkerConfig, LangchainChunkerConfig, chunker_spec, params_from_env, scrub
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import Tokenizer

__all__ = ["CallableChunker", "LangchainChunker", "load_object", "locate_chunks"]


def load_object(path: str, what: str) -> Any:
    """The object at ``package.module.Name`` or ``module:name``; a ChunkerError saying what is missing."""
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    if not module or not name:
        raise ChunkerError(f"{what} {path!r}: expected package.module.Name or module:name")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise ChunkerError(f"{what} {path!r}: cannot import {module!r} ({err}); install the library that provides it") from None
    obj = mod
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ChunkerError(f"{what} {path!r}: module {module!r} has no attribute {name!r}")
        obj = getattr(obj, part)
    return obj


def locate_chunks(text: str, pieces: list[str], splitter: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each piece in ``text``, in order, with ``text[start:end] == piece``.

    Each piece is placed at its first occurrence after the previous piece's start: pieces come in
    document order and may overlap (splitters with overlap repeat text), so the next piece can begin
    inside the previous one but never before its start. Where a document repeats a passage verbatim,
    that is the earliest placement consistent with the order. A piece with no such occurrence raises."""
    out: list[tuple[int, int]] = []
    prev_start = -1
    for i, piece in enumerate(pieces):
        start = text.find(piece, prev_start + 1)
        if start < 0:
            where = "anywhere in" if text.find(piece) < 0 else "after the previous chunk in"
            preview = piece[:60] + ("…" if len(piece) > 60 else "")
            raise ChunkerError(
                f"splitter {splitter}: chunk {i} ({preview!r}) does not occur {where} the normalised text; reindex "
                "needs chunks that are substrings of the document (a splitter must not rewrite whitespace or add separators)"
            )
        out.append((start, start + len(piece)))
        prev_start = start
    return out


def _texts(result: Any, splitter: str) -> list[str]:
    """Chunk texts from a splitter's return value: strings, or objects with a ``text`` string (chonkie)."""
    try:
        items = list(result)
    except TypeError:
        raise ChunkerError(f"splitter {splitter} returned {type(result).__name__}, not a list of chunk texts") from None
    texts = []
    for item in items:
        value = item if isinstance(item, str) else getattr(item, "text", None)
        if not isinstance(value, str):
            raise ChunkerError(f"splitter {splitter} returned a {type(item).__name__}, not a chunk text (str or .text)")
        texts.append(value)
    return texts


@dataclass(frozen=True, slots=True)
class _ExternalChunker:
    """Shared body: call the splitter, locate its chunks, count their tokens."""

    tokenizer: Tokenizer
    spec: str
    name: str  # the class or callable path, for messages
    split: Callable[[str], Any]

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` in order; [] for an empty or whitespace-only document."""
        if not text or text.isspace():
            return []
        try:
            result = self.split(text)
        except Exception as err:  # noqa: BLE001 - the user's code: any failure is one line naming it
            detail = " ".join(str(err).split())[:300]
            raise ChunkerError(f"splitter {self.name} raised {type(err).__name__}" + (f": {detail}" if detail else "")
                               + "; fix the splitter or its text.chunker.params") from None
        # Whitespace-only pieces carry nothing to embed (the built-in chunkers never emit them either).
        pieces = [p for p in _texts(result, self.name) if p.strip()]
        spans = locate_chunks(text, pieces, self.name)
        # Tokens in document context: one tokenisation, then binary searches (as fixed_chars does).
        token_starts = np.ascontiguousarray(self.tokenizer.offsets(text)[:, 0])
        starts = [s for s, _ in spans]
        ends = [e for _, e in spans]
        counts = (np.searchsorted(token_starts, ends, "left") - np.searchsorted(token_starts, starts, "left")).tolist()
        return [Chunk(ordinal=i, start=s, end=e, tokens=c, text=text[s:e])
                for i, ((s, e), c) in enumerate(zip(spans, counts))]


@dataclass(frozen=True, slots=True)
class LangchainChunker:
    """A LangChain ``TextSplitter`` subclass, built once with ``params``; ``split_text`` cuts each document."""

    config: LangchainChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)
    _impl: _ExternalChunker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        cls = load_object(self.config.splitter, "text.chunker.splitter")
        params = params_from_env(self.config.params, "text.chunker.params")
        try:
            splitter = cls(**params)
        except Exception as err:  # noqa: BLE001 - any constructor failure is one clear line
            raise ChunkerError(scrub(f"text.chunker: cannot build {self.config.splitter}(**{self.config.params}): {err}",
                                     self.config.params)) from None
        if not callable(getattr(splitter, "split_text", None)):
            raise ChunkerError(f"text.chunker.splitter {self.config.splitter!r} has no split_text(text) method; "
                               "give a LangChain TextSplitter class, or use kind: callable")
        spec = chunker_spec(self.config)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "_impl", _ExternalChunker(self.tokenizer, spec, self.config.splitter, splitter.split_text))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` as the splitter cuts it, with offsets and token counts."""
        return self._impl.chunk(text)


@dataclass(frozen=True, slots=True)
class CallableChunker:
    """``module:function`` called as ``function(text, **params)``, returning chunk texts in order."""

    config: CallableChunkerConfig
    tokenizer: Tokenizer
    spec: str = field(init=False)
    _impl: _ExternalChunker = field(init=False, repr=False)

    def __post_init__(self) -> None:
        fn = load_object(self.config.callable, "text.chunker.callable")
        if not callable(fn):
            raise ChunkerError(f"text.chunker.callable {self.config.callable!r} is a {type(fn).__name__}, not a function")
        params = params_from_env(self.config.params, "text.chunker.params")
        try:
            inspect.signature(fn).bind("text", **params)
        except TypeError as err:
            raise ChunkerError(scrub(f"text.chunker.params: {self.config.callable}(text, **{self.config.params}) cannot "
                                     f"be called: {err}", self.config.params)) from None
        except ValueError:
            pass  # no signature to check (a builtin): a bad call is reported when it happens
        spec = chunker_spec(self.config)
        object.__setattr__(self, "spec", spec)
        object.__setattr__(self, "_impl", _ExternalChunker(self.tokenizer, spec, self.config.callable,
                                                           lambda text: fn(text, **params)))

    def chunk(self, text: str) -> list[Chunk]:
        """Chunks of ``text`` as the function cuts it, with offsets and token counts."""
        return self._impl.chunk(text)
