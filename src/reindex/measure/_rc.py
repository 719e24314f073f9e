"""R_c of one pair: a chunker's embedding inputs, recompute fraction, the no-edit control."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from reindex.measure._pairs import RevisionPair

__all__ = ["AnyChunker", "Candidate", "Counter", "PairResult", "chunk_texts", "failed_pair", "measure_pair", "pair_result",
           "recompute", "recompute_fraction"]


class AnyChunker(Protocol):
    """What measure needs of a chunker: ``chunk(text)`` returning chunks (``.text``) or strings."""

    def chunk(self, text: str) -> Sequence[Any]: ...


Counter = Callable[[list[str]], list[int]]


def chunk_texts(chunker: AnyChunker, text: str) -> list[str]:
    """The embedding inputs a chunker makes of ``text``, in order."""
    return [c if isinstance(c, str) else c.text for c in chunker.chunk(text)]


def recompute(old_inputs: Iterable[str], new_inputs: Iterable[str], count: Counter) -> tuple[int, int]:
    """``(missed tokens, all tokens)`` of the distinct new inputs; a miss is a new input not
    byte-identical to any old input (of the same document: callers pass one document's inputs)."""
    old = set(old_inputs)
    distinct = list(dict.fromkeys(new_inputs))
    if not distinct:
        return 0, 0
    counts = count(distinct)
    missed = sum(c for t, c in zip(distinct, counts) if t not in old)
    return missed, sum(counts)


def recompute_fraction(old_inputs: Iterable[str], new_inputs: Iterable[str], count: Counter) -> float:
    """R_c of one document revision (0 when the new version has no inputs)."""
    missed, total = recompute(old_inputs, new_inputs, count)
    return missed / total if total else 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A chunker under measurement: a name (its spec) and a factory of fresh instances."""

    spec: str
    build: Callable[[], AnyChunker]
    size_param: str | None = None  # what --calibrate set, for the report


@dataclass(frozen=True, slots=True)
class PairResult:
    """R_c of one chunker on one pair (``error`` set when the chunker raised)."""

    pair_id: str
    lang: str
    doc_key: str
    band: str
    edit_fraction: float
    rc: float
    missed_tokens: int
    new_tokens: int
    no_edit_missed: int
    chunk_tokens: tuple[int, ...]  # model tokens of every new-version input, in order
    error: str | None = None


def measure_pair(chunker: AnyChunker, control: AnyChunker, pair: RevisionPair, count: Counter) -> PairResult:
    """R_c of one pair, plus the no-edit control (old version chunked by two fresh instances)."""
    try:
        old = chunk_texts(chunker, pair.old_text)
        new = chunk_texts(chunker, pair.new_text)
        again = chunk_texts(control, pair.old_text)
    except Exception as err:  # noqa: BLE001 - a chunker failing on a document is a result
        return failed_pair(pair, err)
    return pair_result(pair, old, new, again, count)


def failed_pair(pair: RevisionPair, err: BaseException) -> PairResult:
    """The result of a pair whose chunker raised ``err``."""
    return PairResult(pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction, math.nan, 0, 0, 0, (),
                      f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200])


def pair_result(pair: RevisionPair, old: Sequence[str], new: Sequence[str], again: Sequence[str],
                count: Counter) -> PairResult:
    """R_c of one pair from its inputs: the old version's, the new version's, and the old version's again
    (a second chunker instance: the no-edit control)."""
    distinct = list(dict.fromkeys(new))
    counts = count(distinct) if distinct else []
    by_text = dict(zip(distinct, counts))
    old_set = set(old)
    missed = sum(c for t, c in by_text.items() if t not in old_set)
    total = sum(counts)
    control_miss = [t for t in dict.fromkeys(again) if t not in old_set]
    no_edit_missed = sum(count(control_miss)) if control_miss else 0
    return PairResult(
        pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction,
        missed / total if total else 0.0, missed, total, no_edit_missed, tuple(by_text[t] for t in new),
    )
