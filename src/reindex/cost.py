"""The cost model: work → tokens, dollars, hours, vectors, bytes, peak footprint, sensitivity tables.

Pure: no I/O and nothing beyond the standard library, so a plan can be recomputed anywhere and the
arithmetic can be checked by hand. Four parts:

* **Window arithmetic** (seed 001): how many chunks a document of ``L`` tokens makes under a
  fixed or sliding window, and how many tokens are billed for embedding them.
* **Histogram estimates**: the same arithmetic over a length histogram (documents per length)
  for a chunker change, with reuse of single-chunk documents, prices, the peak footprint and
  sensitivity tables (overlap, the long-document tail, what-if sizes and overlaps).
* **Pricing** of exact work computed by the planner: dollars, hours, vectors and bytes.
* **Sampling projection**: a stratified estimator of a corpus total from a length-stratified
  sample, with a seeded percentile bootstrap interval (``reindex plan --sample N``).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from reindex.errors import ConfigError
from reindex.stats import Interval, quantile

if TYPE_CHECKING:  # only for annotations: importing config at run time would pull in pydantic
    from reindex.config import FixedChunkerConfig, SlidingChunkerConfig

K = TypeVar("K", bound=Hashable)

Precision = Literal["float32", "float16", "int8"]

#: Bytes per stored vector component. ``int8`` is scalar quantisation: one byte per component
#: searched in RAM, with the float32 originals kept on disk for rescoring.
BYTES_PER_COMPONENT: dict[str, int] = {"float32": 4, "float16": 2, "int8": 1}

#: Qdrant's capacity-planning rule of thumb (Qdrant docs, "Capacity planning"):
#: ``memory_size = number_of_vectors * vector_dimension * 4 bytes * 1.5``; the extra 50 % covers
#: metadata (indexes such as the HNSW graph, point versions) and temporary segments created
#: during optimisation.
INDEX_OVERHEAD = 1.5

#: Payload fields stored with every chunk besides its text (doc id, ordinal, fingerprint, token
#: count, offsets, pipeline id), in bytes. An estimate; the planner passes measured sizes when
#: it has them.
PAYLOAD_FIELD_BYTES = 200

#: Bytes of text per token when only token counts are known (the common "one token is about
#: four characters of English" rule, one byte per character in UTF-8).
BYTES_PER_TOKEN = 4.0

#: Documents longer than this many tokens form the "tail" in sensitivity tables (seed 001).
TAIL_TOKENS = 4000

#: What-if grid of sizes and overlaps for window chunkers (the chosen config is always added).
WHAT_IF_SIZES: tuple[int, ...] = (128, 256, 384, 512)
WHAT_IF_OVERLAPS: tuple[float, ...] = (0.0, 0.1, 0.2)


# --------------------------------------------------------------------------------------------
# Window arithmetic
# --------------------------------------------------------------------------------------------


def chunk_count(doc_tokens: int, size: int, overlap: float) -> int:
    """Chunks of a ``doc_tokens``-token document under windows of ``size`` tokens advancing by
    ``int(size * (1 - overlap))`` tokens (seed 001's formula; an empty document makes none)."""
    _check_window(doc_tokens, size, overlap)
    if doc_tokens == 0:
        # Seed 001's code says 1 here; our chunkers return no chunk for an empty document.
        return 0
    if doc_tokens <= size:
        return 1
    stride = int(size * (1 - overlap))
    return 1 + math.ceil((doc_tokens - size) / stride)


def billed_tokens(doc_tokens: int, size: int, overlap: float) -> int:
    """Tokens sent to the embedder for one document: its tokens plus ``int(size * overlap)``
    repeated tokens for every chunk after the first (seed 001's formula)."""
    n = chunk_count(doc_tokens, size, overlap)
    if n == 0:
        return 0
    return doc_tokens + (n - 1) * int(size * overlap)


def _check_window(doc_tokens: int, size: int, overlap: float) -> None:
    if doc_tokens < 0:
        raise ValueError(f"doc_tokens must be >= 0, got {doc_tokens}")
    if size <= 0:
        raise ValueError(f"size must be > 0, got {size}")
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    if int(size * (1 - overlap)) < 1:
        raise ConfigError(
            f"a window of {size} tokens with overlap {overlap:g} never advances; use a larger size or a smaller overlap"
        )


@dataclass(frozen=True, slots=True)
class Window:
    """A window chunker reduced to its arithmetic: ``kind`` is ``fixed`` (overlap 0) or ``sliding``."""

    kind: Literal["fixed", "sliding"]
    size: int
    overlap: float = 0.0

    def __post_init__(self) -> None:
        if self.kind == "fixed" and self.overlap != 0.0:
            raise ValueError("a fixed window has no overlap")
        _check_window(0, self.size, self.overlap)

    @property
    def stride(self) -> int:
        """Tokens between the starts of consecutive windows."""
        return int(self.size * (1 - self.overlap))

    def label(self) -> str:
        """``sliding:size=256,overlap=0.2`` (the chunker spec of this window)."""
        if self.kind == "fixed":
            return f"fixed:size={self.size}"
        return f"sliding:size={self.size},overlap={self.overlap:g}"


def window_of(chunker: Window | FixedChunkerConfig | SlidingChunkerConfig, role: str = "") -> Window:
    """The window arithmetic of a fixed or sliding chunker config. Other kinds place boundaries
    by content, so their chunk counts cannot be computed from lengths alone: ConfigError."""
    if isinstance(chunker, Window):
        return chunker
    kind = getattr(chunker, "kind", None)
    if kind == "fixed":
        return Window("fixed", int(chunker.size))
    if kind == "sliding":
        return Window("sliding", int(chunker.size), float(getattr(chunker, "overlap", 0.0)))
    which = f"the {role} chunker" if role else "the chunker"
    raise ConfigError(
        f"histogram estimates need window arithmetic (fixed or sliding chunkers), but {which} is {kind!r}; "
        "use `reindex plan --sample N` to measure it on a sample of documents instead"
    )


# --------------------------------------------------------------------------------------------
# Money, time, bytes
# --------------------------------------------------------------------------------------------


def usd(tokens: int, usd_per_mtok: float) -> float:
    """API spend: ``tokens / 1e6 × usd_per_mtok``."""
    if usd_per_mtok < 0:
        raise ValueError(f"usd_per_mtok must be >= 0, got {usd_per_mtok}")
    return tokens / 1e6 * usd_per_mtok


def hours(tokens: int, tokens_per_minute: float) -> float:
    """Wall clock at a sustained throughput: ``tokens / tokens_per_minute / 60``."""
    if not tokens_per_minute > 0:
        raise ValueError(f"tokens_per_minute must be > 0, got {tokens_per_minute}")
    return tokens / tokens_per_minute / 60.0


def vector_bytes(n_vectors: int, dimension: int, bytes_per_component: int) -> int:
    """Raw size of ``n_vectors`` vectors: ``n × dimension × bytes_per_component``."""
    return n_vectors * dimension * bytes_per_component


def payload_bytes(chunks: int, text_bytes: int, *, field_bytes: int = PAYLOAD_FIELD_BYTES) -> int:
    """Estimated payload of ``chunks`` points: their text plus ``field_bytes`` of fields each."""
    return text_bytes + chunks * field_bytes


@dataclass(frozen=True, slots=True)
class Usage:
    """RAM and disk of one population (or of several together)."""

    ram_bytes: int
    disk_bytes: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.ram_bytes + other.ram_bytes, self.disk_bytes + other.disk_bytes)


def population_usage(n_vectors: int, dimension: int, payload: int, precision: Precision = "float32") -> Usage:
    """RAM and disk of one population in Qdrant, by one documented formula.

    With ``b`` the bytes per component searched in RAM (``BYTES_PER_COMPONENT``: float32 4,
    float16 2, int8 scalar quantisation 1) and ``INDEX_OVERHEAD`` = 1.5, Qdrant's capacity-planning
    rule of thumb (``memory_size = number_of_vectors * vector_dimension * 4 bytes * 1.5``, Qdrant
    docs, "Capacity planning"; the 1.5 covers metadata such as the HNSW index and point versions,
    and temporary optimisation segments) generalised to other precisions:

    * ``ram  = ceil(1.5 × n × d × b)``: the searched vectors with their index; payload is on disk.
    * ``disk = ceil(1.5 × n × d × s) + q × n × d + payload``: the stored vectors with their
      persisted index and segments, where ``s`` is the stored precision (4 for float32 and for
      int8, whose float32 originals stay on disk for rescoring; 2 for float16) and ``q`` is 1 for
      int8 (the quantised copy is persisted too) else 0.
    """
    if precision not in BYTES_PER_COMPONENT:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_COMPONENT)}, got {precision!r}")
    if n_vectors < 0 or dimension <= 0 or payload < 0:
        raise ValueError(f"need n_vectors >= 0, dimension > 0, payload >= 0 (got {n_vectors}, {dimension}, {payload})")
    searched = vector_bytes(n_vectors, dimension, BYTES_PER_COMPONENT[precision])
    stored = vector_bytes(n_vectors, dimension, 4 if precision == "int8" else BYTES_PER_COMPONENT[precision])
    quantised = searched if precision == "int8" else 0
    # ceil: a byte estimate should never round a requirement down.
    return Usage(
        ram_bytes=math.ceil(searched * INDEX_OVERHEAD),
        disk_bytes=math.ceil(stored * INDEX_OVERHEAD) + quantised + payload,
    )


@dataclass(frozen=True, slots=True)
class Footprint:
    """RAM and disk before (old population), after (new population) and at the peak during the
    build and cutover, when both populations exist at once."""

    old: Usage
    new: Usage
    peak: Usage


# --------------------------------------------------------------------------------------------
# Pricing exact work
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Work:
    """What a change does, as computed by the planner (exactly or as a sampled projection).

    ``chunks_reused`` chunks of the new population take their vector from the old one;
    ``tokens_to_embed`` are the tokens of the rest. ``precision`` is how vectors are *stored*
    (float32, float16, or int8 scalar quantisation), not the inference precision of the model.
    ``dimension_old``/``precision_old`` default to the new values (only a vector-half change
    moves them).
    """

    chunks_old: int
    chunks_new: int
    chunks_reused: int
    tokens_to_embed: int
    payload_bytes_old: int
    payload_bytes_new: int
    dimension: int
    precision: Precision = "float32"
    dimension_old: int | None = None
    precision_old: Precision | None = None

    def __post_init__(self) -> None:
        counts = (self.chunks_old, self.chunks_new, self.chunks_reused, self.tokens_to_embed, self.payload_bytes_old, self.payload_bytes_new)
        if min(counts) < 0:
            raise ValueError(f"work counts must be >= 0, got {counts}")
        if self.chunks_reused > self.chunks_new:
            raise ValueError(f"chunks_reused ({self.chunks_reused}) exceeds chunks_new ({self.chunks_new})")


@dataclass(frozen=True, slots=True)
class Cost:
    """The price of some work: dollars, wall clock, vectors and bytes."""

    tokens_to_embed: int
    usd: float
    hours: float
    usd_per_mtok: float
    tokens_per_minute: float
    vectors_old: int
    vectors_new: int
    vectors_embedded: int
    vectors_peak: int
    footprint: Footprint


def price(work: Work, *, usd_per_mtok: float, tokens_per_minute: float) -> Cost:
    """Price ``work``: ``usd = tokens/1e6 × usd_per_mtok``, ``hours = tokens / tokens_per_minute / 60``,
    peak vectors = old + new (the new population is complete, reused points included, before the
    old one is retired), bytes by ``population_usage``."""
    old = population_usage(
        work.chunks_old, work.dimension_old or work.dimension, work.payload_bytes_old, work.precision_old or work.precision
    )
    new = population_usage(work.chunks_new, work.dimension, work.payload_bytes_new, work.precision)
    return Cost(
        tokens_to_embed=work.tokens_to_embed,
        usd=usd(work.tokens_to_embed, usd_per_mtok),
        hours=hours(work.tokens_to_embed, tokens_per_minute),
        usd_per_mtok=usd_per_mtok,
        tokens_per_minute=tokens_per_minute,
        vectors_old=work.chunks_old,
        vectors_new=work.chunks_new,
        vectors_embedded=work.chunks_new - work.chunks_reused,
        vectors_peak=work.chunks_old + work.chunks_new,
        footprint=Footprint(old=old, new=new, peak=old + new),
    )


# --------------------------------------------------------------------------------------------
# Histogram estimates
# --------------------------------------------------------------------------------------------


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

    # What-if grid: the same family as the new config (a fixed chunker has no overlap to vary).
    overlaps = {0.0} if w_new.kind == "fixed" else {*what_if_overlaps, w_new.overlap}
    rows = []
    for size in sorted({*what_if_sizes, w_new.size}):
        for overlap in sorted(overlaps):
            w = Window(w_new.kind, size, overlap)
            t = _tally(buckets, w_old, w, same_vectors)
            c = price(work_for(t), usd_per_mtok=usd_per_mtok, tokens_per_minute=tokens_per_minute)
            rows.append(
                WhatIf(
                    window=w,
                    chunks=t.chunks,
                    ratio=t.chunks / before.chunks,
                    tokens_full_reembed=t.billed,
                    tokens_to_embed=c.tokens_to_embed,
                    usd=c.usd,
                    hours=c.hours,
                    vectors_peak=c.vectors_peak,
                )
            )

    flat = _tally(buckets, w_old, Window(w_new.kind, w_new.size, 0.0), same_vectors)
    tail = [b for b in buckets if b.tokens > tail_tokens]
    tail_docs = sum(b.documents for b in tail)
    tail_chunks = _tally(tail, w_old, w_new, same_vectors).chunks
    sensitivity = Sensitivity(
        chunks_no_overlap=flat.chunks,
        tokens_no_overlap=flat.billed,
        tail_tokens=tail_tokens,
        tail_documents=tail_docs,
        tail_document_share=tail_docs / documents,
        tail_chunks=tail_chunks,
        tail_chunk_share=tail_chunks / after.chunks,
        what_if=tuple(rows),
    )
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


# --------------------------------------------------------------------------------------------
# Length-stratified sampling
# --------------------------------------------------------------------------------------------

#: Default stratum edges (document length, in bytes or tokens): [0, 512), [512, 2048), …
STRATUM_EDGES: tuple[int, ...] = (512, 2048, 8192, 32768)


def stratum_of(length: int, edges: Sequence[int] = STRATUM_EDGES) -> int:
    """The index of the length stratum ``length`` falls in (``edges`` ascending; 0 … len(edges))."""
    return bisect.bisect_right(edges, length)


def allocate_sample(stratum_sizes: Mapping[K, int], n: int, *, minimum: int = 2) -> dict[K, int]:
    """Split a sample of ``n`` documents over strata: at least ``minimum`` each (a stratum needs two
    to show any spread), the rest proportional to size by largest remainder; never more than a
    stratum holds. The result may exceed ``n`` only when the minimums alone do."""
    if n < 0 or minimum < 0:
        raise ValueError(f"need n >= 0 and minimum >= 0, got {n}, {minimum}")
    keys = _ordered(stratum_sizes)
    alloc = {k: min(minimum, stratum_sizes[k]) for k in keys}
    left = n - sum(alloc.values())
    while left > 0:
        room = {k: stratum_sizes[k] - alloc[k] for k in keys if stratum_sizes[k] > alloc[k]}
        if not room:
            break
        total = sum(stratum_sizes[k] for k in room)
        shares = {k: left * stratum_sizes[k] / total for k in room}
        given = {k: min(room[k], math.floor(shares[k])) for k in room}
        if sum(given.values()) == 0:
            # Hand out the remainder one by one, largest fractional share first.
            for k in sorted(room, key=lambda k: shares[k] - math.floor(shares[k]), reverse=True)[:left]:
                given[k] = 1
        for k, g in given.items():
            alloc[k] += g
        left -= sum(given.values())
    return alloc


def _ordered(keys: Iterable[K]) -> list[K]:
    # A fixed order whatever order the caller built its mappings in, so a seed means one result.
    return sorted(keys, key=repr)


def _check_strata(samples: Mapping[K, Sequence[float]], stratum_sizes: Mapping[K, int]) -> list[K]:
    for k in samples:
        if k not in stratum_sizes:
            raise ValueError(f"stratum {k!r} has samples but no size")
    keys = _ordered(stratum_sizes)
    for k in keys:
        size, got = stratum_sizes[k], len(samples.get(k, ()))
        if size < 0:
            raise ValueError(f"stratum {k!r} has a negative size {size}")
        if size > 0 and got == 0:
            raise ValueError(f"stratum {k!r} holds {size} documents but none was sampled")
        if got > size:
            raise ValueError(f"stratum {k!r} has {got} samples but only {size} documents")
    return keys


def project_total(samples: Mapping[K, Sequence[float]], stratum_sizes: Mapping[K, int]) -> float:
    """Stratified estimate of a corpus total: ``Σ_h N_h × mean(sample_h)`` over strata ``h`` of
    ``N_h`` documents (unbiased under simple random sampling within each stratum)."""
    keys = _check_strata(samples, stratum_sizes)
    return math.fsum(stratum_sizes[k] * math.fsum(samples[k]) / len(samples[k]) for k in keys if stratum_sizes[k] > 0)


def bootstrap_interval(
    samples: Mapping[K, Sequence[float]],
    stratum_sizes: Mapping[K, int],
    *,
    seed: int,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval of ``project_total``: resample with replacement within each
    stratum (``random.Random(seed)``), re-project, take the ``(1 ± confidence) / 2`` quantiles.

    A stratum sampled completely is known exactly and is not resampled. The draws depend only on
    the seed and the sample sizes, so two quantities measured on the same documents (chunks and
    tokens, say) get paired resamples when given the same seed.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    keys = _check_strata(samples, stratum_sizes)
    estimate = project_total(samples, stratum_sizes)
    rng = random.Random(seed)
    exact = math.fsum(math.fsum(samples[k]) for k in keys if 0 < stratum_sizes[k] == len(samples[k]))
    varying = [(stratum_sizes[k], list(samples[k])) for k in keys if 0 < len(samples[k]) < stratum_sizes[k]]
    totals = []
    for _ in range(resamples):
        total = exact
        for size, values in varying:
            total += size * math.fsum(rng.choices(values, k=len(values))) / len(values)
        totals.append(total)
    totals.sort()
    alpha = (1.0 - confidence) / 2.0
    return Interval(
        estimate=estimate,
        low=quantile(totals, alpha),
        high=quantile(totals, 1.0 - alpha),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )
