"""Money, time and bytes: dollars and hours of tokens, vector and payload bytes, the RAM/disk usage
of a population, and the pricing of exact work computed by the planner."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["BACKENDS", "BYTES_PER_COMPONENT", "INDEX_OVERHEAD", "PAYLOAD_FIELD_BYTES", "Backend", "Cost", "Footprint",
           "Precision", "Usage", "Work", "build_usage", "footprint", "hours", "payload_bytes", "population_usage", "price",
           "usd", "vector_bytes"]

Precision = Literal["float32", "float16", "int8"]

#: Where the populations live: a Qdrant server (``store.url``), the embedded qdrant-edge store
#: (``store.backend: edge``, the default) or qdrant-client local mode (``store.backend: local``).
Backend = Literal["server", "edge", "local"]
BACKENDS: tuple[str, ...] = ("server", "edge", "local")

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

_MIB = 2**20

# The embedded stores, fitted on measurements. Edge: bench/footprint.py (the real pipeline: PEP snapshot at 1×
# and 10×, 18,003 and 180,030 points of 384 dims, ~970 B of payload each; apply, cutover and the store folder
# measured) and bench/scale.py (a reader alone, 30k and 300k points); bench/RESULTS.md has both tables.
#   edge, serving  disk (allocated) 455 MiB at 180k after the HNSW build = n × (vector + ~290 B + payload);
#                  a reader maps 116 → 586 MiB at 30k → 300k = 65 MiB + 1,817 B/point (vectors + HNSW)
#   edge, building apply's RSS over an idle reindex process 298 → 1,819 MiB at 18k → 180k = 129 MiB +
#                  9,843 B/point ≈ 5 vector copies + 2 payload copies + 290 B (appendable segment, the
#                  optimized copy, HNSW build buffers, manifest rows); the store folder peaks at 2× its
#                  serving size (both segments exist until the optimized one replaces the appendable one)
#   local mode     844 MiB RAM right after opening 30,103 points (~29 KB/point: every point a Python object,
#                  its vector as Python floats), 143 MiB disk at 30k.
#: Per point, besides its vector: HNSW links, id tracker, version and the doc_id index.
EDGE_POINT_OVERHEAD = 290
#: Anonymous memory of a process that has the embedded store open (engine, not Python).
EDGE_PROCESS_RAM = 65 * _MIB
#: What an apply process adds over an idle one before the first point (engine, tokenizer, buffers).
EDGE_APPLY_RAM = 129 * _MIB
#: Vector and payload copies mapped by apply while it builds a population (fitted, see above).
EDGE_BUILD_VECTOR_COPIES = 5
EDGE_BUILD_PAYLOAD_COPIES = 2
#: The store folder while a population's HNSW is built, over its serving size.
EDGE_BUILD_DISK_FACTOR = 2
#: qdrant-client local mode keeps ~76 bytes of RAM per vector component (844 MiB right after opening 30,103
#: 384-dim points: 29 KB each).
LOCAL_RAM_PER_COMPONENT = 76
#: local mode's pickled float64 copy on disk plus its row overhead, per point besides the payload.
LOCAL_DISK_POINT_OVERHEAD = 900


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


def population_usage(n_vectors: int, dimension: int, payload: int, precision: Precision = "float32",
                     backend: Backend = "server") -> Usage:
    """RAM and disk of one population *while it serves*, by one documented formula per backend.

    ``edge`` (the embedded default; constants fitted on bench/footprint.py and bench/scale.py, see above): RAM
    is what a reader process maps, ``65 MiB + n × (d × b + 290)``; disk (allocated) is
    ``n × (d × s + 290) + q × n × d + payload`` (payload uncompressed: the engine compresses some of it). ``local`` (qdrant-client local
    mode): RAM ``n × d × 76`` in *every* process that opens the folder, disk ``n × (d × 8 + 900) + payload``.
    ``server``:

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
    _check(n_vectors, dimension, payload, precision, backend)
    if backend == "edge":
        searched = n_vectors * (dimension * BYTES_PER_COMPONENT[precision] + EDGE_POINT_OVERHEAD)
        stored = n_vectors * (dimension * (4 if precision == "int8" else BYTES_PER_COMPONENT[precision]) + EDGE_POINT_OVERHEAD)
        quantised = n_vectors * dimension if precision == "int8" else 0
        empty = n_vectors == 0
        return Usage(ram_bytes=0 if empty else EDGE_PROCESS_RAM + searched, disk_bytes=stored + quantised + payload)
    if backend == "local":
        return Usage(ram_bytes=n_vectors * dimension * LOCAL_RAM_PER_COMPONENT,
                     disk_bytes=n_vectors * (dimension * 8 + LOCAL_DISK_POINT_OVERHEAD) + payload)
    searched = vector_bytes(n_vectors, dimension, BYTES_PER_COMPONENT[precision])
    stored = vector_bytes(n_vectors, dimension, 4 if precision == "int8" else BYTES_PER_COMPONENT[precision])
    quantised = searched if precision == "int8" else 0
    # ceil: a byte estimate should never round a requirement down.
    return Usage(
        ram_bytes=math.ceil(searched * INDEX_OVERHEAD),
        disk_bytes=math.ceil(stored * INDEX_OVERHEAD) + quantised + payload,
    )


def _check(n_vectors: int, dimension: int, payload: int, precision: str, backend: str) -> None:
    if precision not in BYTES_PER_COMPONENT:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_COMPONENT)}, got {precision!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
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
    serving = population_usage(n_vectors, dimension, payload, precision, backend)
    if backend != "edge" or n_vectors == 0:
        return serving
    stored = dimension * (4 if precision == "int8" else BYTES_PER_COMPONENT[precision])
    ram = (EDGE_APPLY_RAM + n_vectors * (EDGE_BUILD_VECTOR_COPIES * stored + EDGE_POINT_OVERHEAD)
           + EDGE_BUILD_PAYLOAD_COPIES * payload)
    return Usage(ram_bytes=max(ram, serving.ram_bytes), disk_bytes=EDGE_BUILD_DISK_FACTOR * serving.disk_bytes)


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
    if backend == "edge":
        copy = population_usage(work.chunks_old + added_points, work.dimension, max(work.payload_bytes_old,
                                work.payload_bytes_new), work.precision, backend)
        return peak_vectors, Footprint(old=old, new=new, peak=old + copy)
    extra = population_usage(added_points, work.dimension, 0, work.precision, backend)
    grown = old + extra
    peak = Usage(max(grown.ram_bytes, new.ram_bytes), max(grown.disk_bytes, new.disk_bytes))
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
