"""Money, time and bytes: dollars and hours of tokens, vector and payload bytes, the RAM/disk usage
of a population, and the pricing of exact work computed by the planner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reindex.adapters.stores.footprints import BYTES_PER_COMPONENT, INDEX_OVERHEAD, Usage
from reindex.adapters.stores.opening import footprint_model

__all__ = ["BYTES_PER_COMPONENT", "INDEX_OVERHEAD", "PAYLOAD_FIELD_BYTES", "Backend", "Cost", "Footprint",
           "Precision", "Usage", "Work", "build_usage", "footprint", "hours", "payload_bytes", "population_usage", "price",
           "usd", "vector_bytes"]

Precision = Literal["float32", "float16", "int8"]

#: A store backend's name in the registry (:data:`reindex.adapters.stores.opening.REGISTRY`): ``server`` (a Qdrant
#: server, ``store.url``), ``edge`` (the embedded default), ``local`` (qdrant-client local mode), or one registered
#: since. Each brings its cost model (:mod:`reindex.adapters.stores.footprints`).
Backend = str

#: Payload fields stored with every chunk besides its text (doc id, ordinal, fingerprint, token
#: count, offsets, pipeline id), in bytes. An estimate; the planner passes measured sizes when
#: it has them.
PAYLOAD_FIELD_BYTES = 200


def _model(backend: str):
    """The cost model a backend declared with its registry entry."""
    return footprint_model(backend)


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


def population_usage(n_vectors: int, dimension: int, payload: int, precision: Precision = "float32",
                     backend: Backend = "server") -> Usage:
    """RAM and disk of one population *while it serves*, by the cost model ``backend`` declared with its registry
    entry (:mod:`reindex.adapters.stores.footprints`: the Qdrant capacity rule for a server, the fitted edge
    formulas, local mode's measurement)."""
    _check(n_vectors, dimension, payload, precision, backend)
    return _model(backend).serving(n_vectors, dimension, payload, precision)


def _check(n_vectors: int, dimension: int, payload: int, precision: str, backend: str) -> None:
    if precision not in BYTES_PER_COMPONENT:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_COMPONENT)}, got {precision!r}")
    _model(backend)  # an unknown backend is refused there, naming the registered ones
    if n_vectors < 0 or dimension <= 0 or payload < 0:
        raise ValueError(f"need n_vectors >= 0, dimension > 0, payload >= 0 (got {n_vectors}, {dimension}, {payload})")


def build_usage(n_vectors: int, dimension: int, payload: int, precision: Precision = "float32",
                backend: Backend = "server") -> Usage:
    """RAM and disk of one population *while apply builds it*. Only the embedded edge store differs from
    :func:`population_usage`: apply maps the appendable segment, the optimized copy and the HNSW build
    buffers, ``129 MiB + n × (5 × d × s + 290) + 2 × payload`` of RAM over an idle process (fitted: 9.8 KB per
    384-dim point with ~970 B payloads), and the folder holds both segments, 2× the serving disk. A server
    builds in its own memory (the capacity rule covers its optimisation segments); local mode holds the
    population in memory either way."""
    _check(n_vectors, dimension, payload, precision, backend)
    return _model(backend).building(n_vectors, dimension, payload, precision)


@dataclass(frozen=True, slots=True)
class Footprint:
    """RAM and disk before (old population), after (new population) and at the peak during the
    build and cutover, when both populations exist at once."""

    old: Usage
    new: Usage
    peak: Usage


Mode = Literal["initial", "shadow", "in-place"]


def footprint(work: Work, mode: Mode, *, added_points: int = 0, backend: Backend = "server") -> tuple[int, Footprint]:
    """Peak vectors and the RAM/disk footprint of ``work`` done in ``mode`` on ``backend``.

    * ``initial``: the new population alone, as it is built.
    * ``shadow`` (pipeline-scoped): the new population is complete, reused points included, before the
      old one is retired: old (serving) + new (as built); vectors old + new.
    * ``in-place`` (document-scoped): ``added_points`` new points are written before the stale ones are
      deleted, so the peak is the old population plus them (at least the new one). The edge store writes
      in place through a copy-on-write generation while readers keep the published one: old + the copy
      (old + added points), RAM and disk alike.
    """
    if mode not in ("initial", "shadow", "in-place"):
        raise ValueError(f"mode must be initial, shadow or in-place, got {mode!r}")
    d_old, p_old = work.dimension_old or work.dimension, work.precision_old or work.precision
    old = population_usage(work.chunks_old, d_old, work.payload_bytes_old, p_old, backend)
    new = population_usage(work.chunks_new, work.dimension, work.payload_bytes_new, work.precision, backend)
    built = build_usage(work.chunks_new, work.dimension, work.payload_bytes_new, work.precision, backend)
    if mode == "initial":
        return work.chunks_new, Footprint(old=old, new=new, peak=built)
    if mode == "shadow":
        return work.chunks_old + work.chunks_new, Footprint(old=old, new=new, peak=old + built)
    peak_vectors = max(work.chunks_old + added_points, work.chunks_new)
    peak = _model(backend).in_place(old, new, old_points=work.chunks_old, added=added_points, dimension=work.dimension,
                                    payload=max(work.payload_bytes_old, work.payload_bytes_new),
                                    precision=work.precision)
    return peak_vectors, Footprint(old=old, new=new, peak=peak)


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
