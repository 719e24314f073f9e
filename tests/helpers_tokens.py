"""Counting what the tokenizer encodes, through the third-party seam: the ``tokenizers`` library's
``Tokenizer`` replaced by a class whose ``from_file`` wraps the real object (every ``encode``, ``encode_batch``
and ``encode_batch_fast`` counted: calls and characters), and ``reindex.adapters.tokenizers.load_tokenizer``'s
per-process cache emptied before and after so that reindex loads the wrapped one and no other test keeps it."""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterator

import pytest


class _Counted:
    """A real ``tokenizers.Tokenizer`` whose encodes are counted in ``counts``."""

    def __init__(self, real: Any, counts: Counter) -> None:
        self._real, self._counts = real, counts

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        self._counts["calls"] += 1
        self._counts["chars"] += len(text)
        return self._real.encode(text, *args, **kwargs)

    def encode_batch(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self._counts["calls"] += len(texts)
        self._counts["chars"] += sum(len(t) for t in texts)
        return self._real.encode_batch(texts, *args, **kwargs)

    def encode_batch_fast(self, texts: list[str], *args: Any, **kwargs: Any) -> Any:
        self._counts["calls"] += len(texts)
        self._counts["chars"] += sum(len(t) for t in texts)
        return self._real.encode_batch_fast(texts, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # pre_tokenizer, no_truncation, no_padding, …
        return getattr(self._real, name)


@pytest.fixture
def tokenizer_counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    """Counts (``calls``, ``chars``) of every encode of tokenizers loaded while the test runs."""
    import tokenizers

    from reindex.adapters.tokenizers import load_tokenizer

    counts: Counter = Counter()
    real = tokenizers.Tokenizer

    class Counting:
        @staticmethod
        def from_file(path: str) -> _Counted:
            return _Counted(real.from_file(path), counts)

    monkeypatch.setattr(tokenizers, "Tokenizer", Counting)
    load_tokenizer.cache_clear()
    try:
        yield counts
    finally:
        load_tokenizer.cache_clear()
