"""What a population costs in RAM and disk on each store: one cost model per backend, declared with its registry
entry (:mod:`reindex.adapters.stores.opening`), so a new backend brings its own.

A cost model answers three questions, by one documented formula each (:attr:`FootprintModel.formula` is the text
every plan shows beside its figures): what a population takes *while it serves* (:meth:`~FootprintModel.serving`),
*while apply builds it* (:meth:`~FootprintModel.building`), and the peak of an *in-place* change that writes
``added`` points before deleting the stale ones (:meth:`~FootprintModel.in_place`). :mod:`reindex.cost` prices a
plan's work through them; the bytes are pure arithmetic (nothing is opened here).

Bytes per stored vector component: float32 4, float16 2, int8 1 (scalar quantisation: one byte per component
searched in RAM, the float32 originals kept on disk for rescoring)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BYTES_PER_COMPONENT", "EdgeFootprint", "FootprintModel", "INDEX_OVERHEAD", "LocalFootprint",
           "ServerFootprint", "Usage"]

BYTES_PER_COMPONENT: dict[str, int] = {"float32": 4, "float16": 2, "int8": 1}

#: Qdrant's capacity-planning rule of thumb (Qdrant docs, "Capacity planning"):
#: ``memory_size = number_of_vectors * vector_dimension * 4 bytes * 1.5``; the extra 50 % covers metadata (indexes
#: such as the HNSW graph, point versions) and temporary segments created during optimisation.
INDEX_OVERHEAD = 1.5

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class Usage:
    """RAM and disk of one population (or of several together)."""

    ram_bytes: int
    disk_bytes: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.ram_bytes + other.ram_bytes, self.disk_bytes + other.disk_bytes)


def _stored(precision: str) -> int:
    """Bytes per component kept on disk: int8's float32 originals stay for rescoring."""
    return 4 if precision == "int8" else BYTES_PER_COMPONENT[precision]


class FootprintModel:
    """A backend's cost model (see the module docstring). The default :meth:`building` is :meth:`serving` (the
    store builds in memory it already counts) and :meth:`in_place` is the old population plus the added points,
    at least the new population."""

    #: The words a plan shows beside the figures: how they were computed.
    formula: str = ""

    def serving(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        raise NotImplementedError

    def building(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        return self.serving(n, dimension, payload, precision)

    def in_place(self, old: Usage, new: Usage, *, old_points: int, added: int, dimension: int, payload: int,
                 precision: str) -> Usage:
        extra = self.serving(added, dimension, 0, precision)
        grown = old + extra
        return Usage(max(grown.ram_bytes, new.ram_bytes), max(grown.disk_bytes, new.disk_bytes))


class ServerFootprint(FootprintModel):
    """A Qdrant server (or cluster), by Qdrant's capacity rule generalised to other precisions:
    ``ram = ceil(1.5 × n × d × b)`` (the searched vectors with their index; payload on disk) and
    ``disk = ceil(1.5 × n × d × s) + q × n × d + payload`` (``s`` the stored precision, ``q`` 1 for int8 whose
    quantised copy is persisted too). A server builds in its own memory: the rule covers its optimisation
    segments."""

    formula = ("Qdrant server: ram = ceil(1.5 × vectors × dimension × bytes/component); disk = ceil(1.5 × vectors × "
               "dimension × stored bytes) + quantised copy + payload (Qdrant capacity-planning rule: vectors × "
               "dimension × 4 B × 1.5)")

    def serving(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        searched = n * dimension * BYTES_PER_COMPONENT[precision]
        stored = n * dimension * _stored(precision)
        quantised = searched if precision == "int8" else 0
        # ceil: a byte estimate should never round a requirement down.
        return Usage(ram_bytes=math.ceil(searched * INDEX_OVERHEAD),
                     disk_bytes=math.ceil(stored * INDEX_OVERHEAD) + quantised + payload)


class EdgeFootprint(FootprintModel):
    """The embedded edge store (qdrant-edge), fitted on measurements: bench/footprint.py (the real pipeline: PEP
    snapshot at 1× and 10×, 18,003 and 180,030 points of 384 dims, ~970 B of payload each; apply, cutover and the
    store folder measured) and bench/scale.py (a reader alone, 30k and 300k points); bench/RESULTS.md has both.

    * serving: disk (allocated) 455 MiB at 180k after the HNSW build = ``n × (d × s + 290) + q × n × d + payload``;
      a reader maps 116 → 586 MiB at 30k → 300k = ``65 MiB + n × (d × b + 290)``.
    * building: apply's RSS over an idle process 298 → 1,819 MiB at 18k → 180k = ``129 MiB + n × (5 × d × s + 290)
      + 2 × payload`` (appendable segment, the optimized copy, HNSW build buffers, manifest rows); the folder
      peaks at 2× its serving size (both segments exist until the optimized one replaces the appendable one).
    * in place: a copy-on-write generation beside the published one: old + (old + added), RAM and disk alike."""

    formula = ("embedded edge store (fitted on bench/footprint.py and bench/scale.py): ram of a reader = 65 MiB + "
               "vectors × (dimension × bytes/component + 290 B), of apply building a population = 129 MiB + vectors × "
               "(5 × dimension × 4 B + 290 B) + 2 × payload; disk = vectors × (dimension × 4 B + 290 B) + payload, 2× "
               "while the HNSW is built; in place, a copy-on-write generation beside the published one")

    #: Per point, besides its vector: HNSW links, id tracker, version and the doc_id index.
    POINT_OVERHEAD = 290
    #: Anonymous memory of a process that has the embedded store open (engine, not Python).
    PROCESS_RAM = 65 * _MIB
    #: What an apply process adds over an idle one before the first point (engine, tokenizer, buffers).
    APPLY_RAM = 129 * _MIB
    #: Vector and payload copies mapped by apply while it builds a population (fitted, see above).
    BUILD_VECTOR_COPIES = 5
    BUILD_PAYLOAD_COPIES = 2
    #: The store folder while a population's HNSW is built, over its serving size.
    BUILD_DISK_FACTOR = 2

    def serving(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        searched = n * (dimension * BYTES_PER_COMPONENT[precision] + self.POINT_OVERHEAD)
        stored = n * (dimension * _stored(precision) + self.POINT_OVERHEAD)
        quantised = n * dimension if precision == "int8" else 0
        return Usage(ram_bytes=0 if n == 0 else self.PROCESS_RAM + searched, disk_bytes=stored + quantised + payload)

    def building(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        serving = self.serving(n, dimension, payload, precision)
        if n == 0:
            return serving
        ram = (self.APPLY_RAM + n * (self.BUILD_VECTOR_COPIES * dimension * _stored(precision) + self.POINT_OVERHEAD)
               + self.BUILD_PAYLOAD_COPIES * payload)
        return Usage(ram_bytes=max(ram, serving.ram_bytes), disk_bytes=self.BUILD_DISK_FACTOR * serving.disk_bytes)

    def in_place(self, old: Usage, new: Usage, *, old_points: int, added: int, dimension: int, payload: int,
                 precision: str) -> Usage:
        return old + self.serving(old_points + added, dimension, payload, precision)


class LocalFootprint(FootprintModel):
    """qdrant-client local mode, measured: 844 MiB of RAM right after opening 30,103 384-dim points (~29 KB each:
    every point a Python object, its vector as Python floats) in *every* process that opens the folder, so
    ``ram = n × d × 76``; disk ``n × (d × 8 + 900) + payload`` (its pickled float64 copy and row overhead)."""

    formula = ("qdrant-client local mode (measured): ram = vectors × dimension × 76 B in every process that opens the "
               "folder; disk = vectors × (dimension × 8 B + 900 B) + payload")

    RAM_PER_COMPONENT = 76
    DISK_POINT_OVERHEAD = 900

    def serving(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        return Usage(ram_bytes=n * dimension * self.RAM_PER_COMPONENT,
                     disk_bytes=n * (dimension * 8 + self.DISK_POINT_OVERHEAD) + payload)
