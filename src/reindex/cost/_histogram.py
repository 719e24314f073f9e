"""Histogram estimates: window arithmetic over a length histogram (documents per length) for a chunker
change, with reuse of single-chunk documents, prices, the peak footprint and sensitivity tables
(overlap, the long-document tail, what-if sizes and overlaps)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reindex.cost._money import Cost, Footprint, Precision, Work, payload_bytes, price
from reindex.cost._window import Window, billed_tokens, chunk_count, window_of
from reindex.errors import ConfigError

if TYPE_CHECKING:  # only for annotations: importing config at run time would pull in pydantic
    from reindex.domain.config import FixedChunkerConfig, SlidingChunkerConfig

__all__ = ["BYTES_PER_TOKEN", "TAIL_TOKENS", "WHAT_IF_OVERLAPS", "WHAT_IF_SIZES", "Bucket", "Estimate", "Sensitivity",
           "WhatIf", "estimate_histogram", "histogram_of"]

#: Bytes of text per token when only token counts are known (the common "one token is about
#: four characters of English" rule, one byte per character in UTF-8).
BYTES_PER_TOKEN = 4.0

#: Documents longer than this many tokens form the "tail" in sensitivity tables (seed 001).
TAIL_TOKENS = 4000

#: What-if grid of sizes and overlaps for window chunkers (the chosen config is always added).
WHAT_IF_SIZES: tuple[int, ...] = (128, 256, 384, 512)
WHAT_IF_OVERLAPS: tuple[float, ...] = (0.0, 0.1, 0.2)


@dataclass(frozen=True, slots=True)
class Bucket:
    """``documents`` documents of (representative) length ``tokens`` tokens each."""

    documents: int
    tokens: int

    def __post_init__(self) -> None:
        if self.documents < 0 or self.tokens < 0:
            raise ValueError(f"a bucket needs documents >= 0 and tokens >= 0, got {self.documents}, {self.tokens}")


def histogram_of(lengths: Iterable[int]) -> list[Bucket]:
    """The exact histogram of some document lengths (one bucket per distinct length, ascending)."""
    counts: dict[int, int] = {}
    for n in lengths:
        counts[n] = counts.get(n, 0) + 1
    return [Bucket(documents=d, tokens=t) for t, d in sorted(counts.items())]


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One row of the what-if table: the same change with another window for the new config."""

    window: Window
    chunks: int
    ratio: float  # chunks / chunks of the old config
    tokens_full_reembed: int
    tokens_to_embed: int
    usd: float
    hours: float
    vectors_peak: int


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """How much the estimate moves with overlap and with the long-document tail."""

    chunks_no_overlap: int  # the new size at 0 % overlap
    tokens_no_overlap: int
    tail_tokens: int  # documents longer than this are the tail
    tail_documents: int
    tail_document_share: float
    tail_chunks: int  # chunks of the tail under the new config
    tail_chunk_share: float
    what_if: tuple[WhatIf, ...]


@dataclass(frozen=True, slots=True)
class Estimate:
    """A chunker change priced from a length histogram (window arithmetic, seed 001).

    Reuse: a document no longer than both window sizes is one chunk, its whole text, under both
    configs, so its vector is reused (when the vector half is unchanged); an unchanged window
    reuses everything. Partial reuse inside longer documents (e.g. an identical first window) is
    not counted, so the estimate errs towards more work.
    """

    old: Window
    new: Window
    documents: int
    corpus_tokens: int
    chunks_old: int
    chunks_new: int
    chunks_reused: int
    tokens_billed_old: int
    tokens_full_reembed: int
    tokens_reused: int
    tokens_to_embed: int
    cost: Cost
    sensitivity: Sensitivity

    @property
    def ratio(self) -> float:
        """New population size over old."""
        return self.chunks_new / self.chunks_old

    @property
    def usd(self) -> float:
        """API spend for the tokens to embed."""
        return self.cost.usd

    @property
    def hours(self) -> float:
        """Wall clock for the tokens to embed."""
        return self.cost.hours

    @property
    def peak_vectors(self) -> int:
        """Vectors while both populations exist: ``chunks_old + chunks_new``."""
        return self.cost.vectors_peak

    @property
    def footprint(self) -> Footprint:
        """RAM and disk of old, new and peak."""
        return self.cost.footprint


@dataclass(frozen=True, slots=True)
class _Tally:
    chunks: int
    billed: int
    chunks_reused: int
    tokens_reused: int


def _tally(buckets: Sequence[Bucket], old: Window, new: Window, same_vectors: bool) -> _Tally:
    chunks = billed = chunks_reused = tokens_reused = 0
    everything = same_vectors and old == new
    shortest = min(old.size, new.size)
    for b in buckets:
        n = chunk_count(b.tokens, new.size, new.overlap)
        t = billed_tokens(b.tokens, new.size, new.overlap)
        chunks += b.documents * n
        billed += b.documents * t
        if everything or (same_vectors and 0 < b.tokens <= shortest):
            chunks_reused += b.documents * n
            tokens_reused += b.documents * t
    return _Tally(chunks, billed, chunks_reused, tokens_reused)


def estimate_histogram(
    buckets: Sequence[Bucket],
    old: Window | FixedChunkerConfig | SlidingChunkerConfig,
    new: Window | FixedChunkerConfig | SlidingChunkerConfig,
    *,
    usd_per_mtok: float,
    tokens_per_minute: float,
    dimension: int,
    precision: Precision = "float32",
    same_vectors: bool = True,
    bytes_per_token: float = BYTES_PER_TOKEN,
    tail_tokens: int = TAIL_TOKENS,
    what_if_sizes: Sequence[int] = WHAT_IF_SIZES,
    what_if_overlaps: Sequence[float] = WHAT_IF_OVERLAPS,
) -> Estimate:
    """Price a change from chunker ``old`` to chunker ``new`` (fixed or sliding) over a length
    histogram: chunks and billed tokens by ``chunk_count``/``billed_tokens`` per bucket, reuse of
    single-chunk documents, dollars, hours, footprint and sensitivity.

    ``same_vectors=False`` means the vector half changes too, so nothing is reused. Payload per
    chunk is estimated as ``billed tokens × bytes_per_token + PAYLOAD_FIELD_BYTES``.
    """
    w_old, w_new = window_of(old, "old"), window_of(new, "new")
    documents = sum(b.documents for b in buckets)
    if documents == 0:
        raise ConfigError("the histogram holds no documents; nothing to estimate")
    corpus_tokens = sum(b.documents * b.tokens for b in buckets)
    before = _tally(buckets, w_old, w_old, same_vectors=True)
    after = _tally(buckets, w_old, w_new, same_vectors)

    def work_for(t: _Tally) -> Work:
        return Work(
            chunks_old=before.chunks,
            chunks_new=t.chunks,
            chunks_reused=t.chunks_reused,
            tokens_to_embed=t.billed - t.tokens_reused,
            payload_bytes_old=payload_bytes(before.chunks, round(before.billed * bytes_per_token)),
            payload_bytes_new=payload_bytes(t.chunks, round(t.billed * bytes_per_token)),
            dimension=dimension,
            precision=precision,
        )

    cost = price(work_for(after), usd_per_mtok=usd_per_mtok, tokens_per_minute=tokens_per_minute)

    rows = _what_if_rows(buckets, w_old, w_new, same_vectors, work_for, what_if_sizes, what_if_overlaps,
                         usd_per_mtok=usd_per_mtok, tokens_per_minute=tokens_per_minute, chunks_before=before.chunks)
    sensitivity = _sensitivity(buckets, w_old, w_new, same_vectors, tail_tokens, documents, after.chunks, rows)
    return Estimate(
        old=w_old,
        new=w_new,
        documents=documents,
        corpus_tokens=corpus_tokens,
        chunks_old=before.chunks,
        chunks_new=after.chunks,
        chunks_reused=after.chunks_reused,
        tokens_billed_old=before.billed,
        tokens_full_reembed=after.billed,
        tokens_reused=after.tokens_reused,
        tokens_to_embed=after.billed - after.tokens_reused,
        cost=cost,
        sensitivity=sensitivity,
    )


def _what_if_rows(
    buckets: Sequence[Bucket], w_old: Window, w_new: Window, same_vectors: bool, work_for: Callable[[_Tally], Work],
    sizes: Sequence[int], overlaps: Sequence[float], *, usd_per_mtok: float, tokens_per_minute: float, chunks_before: int,
) -> tuple[WhatIf, ...]:
    """The what-if grid: the same family as the new config (a fixed chunker has no overlap to vary)."""
    grid = {0.0} if w_new.kind == "fixed" else {*overlaps, w_new.overlap}
    rows = []
    for size in sorted({*sizes, w_new.size}):
        for overlap in sorted(grid):
            w = Window(w_new.kind, size, overlap)
            t = _tally(buckets, w_old, w, same_vectors)
            c = price(work_for(t), usd_per_mtok=usd_per_mtok, tokens_per_minute=tokens_per_minute)
            rows.append(
                WhatIf(
                    window=w,
                    chunks=t.chunks,
                    ratio=t.chunks / chunks_before,
                    tokens_full_reembed=t.billed,
                    tokens_to_embed=c.tokens_to_embed,
                    usd=c.usd,
                    hours=c.hours,
                    vectors_peak=c.vectors_peak,
                )
            )
    return tuple(rows)


def _sensitivity(
    buckets: Sequence[Bucket], w_old: Window, w_new: Window, same_vectors: bool, tail_tokens: int, documents: int,
    chunks_after: int, rows: tuple[WhatIf, ...],
) -> Sensitivity:
    """How the estimate moves at 0 % overlap and with the long-document tail."""
    flat = _tally(buckets, w_old, Window(w_new.kind, w_new.size, 0.0), same_vectors)
    tail = [b for b in buckets if b.tokens > tail_tokens]
    tail_docs = sum(b.documents for b in tail)
    tail_chunks = _tally(tail, w_old, w_new, same_vectors).chunks
    return Sensitivity(
        chunks_no_overlap=flat.chunks,
        tokens_no_overlap=flat.billed,
        tail_tokens=tail_tokens,
        tail_documents=tail_docs,
        tail_document_share=tail_docs / documents,
        tail_chunks=tail_chunks,
        tail_chunk_share=tail_chunks / chunks_after,
        what_if=rows,
    )
