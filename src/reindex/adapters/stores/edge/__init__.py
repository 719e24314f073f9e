"""The embedded vector store: Qdrant's own engine in-process (``qdrant-edge-py``), one shard per
population, readers in other processes. The package's face: ``open_edge_store`` (the writer), ``open_reader``
(readers) and the folder checks. Inside: ``_engine`` (the only module that imports ``qdrant_edge``),
``_generations`` (the folder's layout, records, deriving and sweeping generations), ``_writer`` (``EdgeStore``)
and ``_reader`` (``EdgeReader``, its leases and private mirrors).

Decision: this backend, from measurements (``bench/scale.py``, one run, printed side by side; the box
had 2 cores shared with other jobs, load average 7-17; bench/RESULTS.md has the table and command):

=====================  ==========================  ==========================  ==========================
30k points, 384 dims   local mode (old default)    edge, 30k                   edge, 300k
=====================  ==========================  ==========================  ==========================
write, durable         1,365 points/s              3,078 points/s              3,189 points/s
index build            none (brute force)          128 s (HNSW)                2,300 s (HNSW, loaded box)
writer peak RSS        275 MB                      292 MB                      1,783 MB (247 anon + 1,577 file)
reader open            6.28 s                      0.16 s                      1.31 s
reader peak RSS        932 MB                      116 MB                      586 MB (65 anon + 520 file)
top-10 p50 / p95       111.5 / 178.9 ms            2.2 / 3.3 ms                7.3 / 35.7 ms
doc_id-filtered p50    1,691 ms                    0.5 ms                      2.5 ms
count(doc_id) p50      1,515 ms                    0.2 ms                      0.2 ms
disk                   143 MB                      124 MB                      594 MB
=====================  ==========================  ==========================  ==========================

Local mode cannot meet the figures at any size (it is ~50x slower to query at 30k and keeps every
point in Python objects: 28 KB per point), and it locks its folder against readers; it stays only as
``store.backend: local`` for folders not yet converted. Alternatives weighed: a Qdrant server (not
runnable here: no binary, no Docker) and hnswlib/usearch/FAISS plus a separate payload store (a second
engine to make durable, with no filtered search or payload indexes of its own). qdrant-edge is the same
Rust engine as the server (segments, HNSW, payload indexes, filtered search), so one engine's
behaviour serves both deployments. Not met or not measured here: the 1M-point row (the 300k HNSW build
alone took 38 minutes on the loaded box), and extrapolated from 300k the 1M reader would map ~1.7 GB of
vectors and HNSW at open (file-backed pages, reclaimable, but above the 1 GB RSS target) and open in
~4 s; durable writes measured 3,100-3,200 points/s under load (7,000-8,000 on a quieter box), below
the 5,000 target in the recorded run.

Facts about qdrant-edge 0.9.0 measured here (probes, then the tests):

- One ``EdgeShard`` per folder, no collections or aliases. With its WAL enabled a second open of the
  same folder fails (``Can't init WAL: WouldBlock``), in the same process or another. With the WAL
  disabled any number of processes can load the same folder; a load rewrites ``edge_config.json`` with
  the same content and leaves segment contents byte-identical (md5 before/after two readers). Those
  rewrites (and each ``segment.json``'s, atomic replaces) fail on a full disk: readers load a private
  mirror of the generation instead (``_reader._reader_view``) and write nothing into the store.
- ``flush()`` fsyncs/msyncs every changed file (strace: ~17 sync calls per flush); without a WAL an
  update is durable once ``flush()`` returns.
- Nothing is indexed until ``optimize()`` is called (no background optimizer): HNSW is built there,
  in ``finish_bulk``. Point ids may be UUID strings (returned as ``uuid.UUID``).
- Readers' RSS is mostly file-backed: vectors and HNSW are memory-mapped and populated at open.

Layout of a store folder::

    reindex-store.json                 marker: format and backend
    writer.lock                        flock held by the one writer process
    aliases.json                       {alias: collection}, replaced atomically (the alias swap)
    collections/<name>/collection.json dimension, distance, payload indexes, published generation
    collections/<name>/gen-000001/     one edge shard (WAL off): a generation of the population
    collections/<name>/gen-000001.lease  readers hold a shared flock while they have that generation open

Concurrency contract. One writer process per folder (``EdgeStore``, via ``open_vector_store``); any
number of reader processes (``open_reader``). A generation that has been *published* is never written
again: the writer's first write to a published collection derives a new generation from it and writes
there; readers keep answering from the published one. Deriving costs O(edit), not O(index): the big
write-once files of sealed segments (vectors, HNSW graph, payload pages, keyword index) are hard-linked,
only what the engine changes in place is copied (docs/embedded-store.md has the design). Publishing is one
atomic, fsynced replace of ``collection.json`` and happens when an alias is pointed at the collection
(``swap_alias``), when the writer closes, or on ``publish()``. So a pipeline-scoped apply builds its
shadow unseen, an in-place sync becomes visible as a whole at close, and the alias swap is one atomic
file replace. A superseded generation is deleted once no reader holds its lease.

What a reader must do: open with ``open_reader(folder)`` and query by alias. Every call re-reads the
alias and collection records (two small files) and, if they moved, opens the new generation before
answering and releases the old one; an answer never mixes generations or populations. Holding an
``EdgeReader`` is cheap; nothing else is needed across swaps or syncs.

Durability. Every ``upsert``/``delete_points`` call ends with ``flush()``: when it returns its points
survive kill -9 and power loss. A kill during the call may leave none, or (if it dies inside the
flush) part of that one unacknowledged batch; repeated upserts with deterministic ids make that
harmless. Metadata (marker, collection records, aliases) is written with ``reindex.foundation.atomic.atomic_write``
(fsync file, rename, fsync folder).

Folders made by the old embedded store (qdrant-client local mode: ``meta.json`` + ``collection/``) are
detected and refused with the exact conversion command (``python -m reindex.adapters.stores.migrate``). A stock
qdrant-client opened on an edge folder sees no collection and writes ``.lock`` and ``meta.json``: both are
ignored; once it has created collections there the writer refuses the folder
(``_writer._refuse_foreign_collections``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.adapters.stores.edge._generations import (
    STORE_FORMAT,
    CorruptAliasesError,
    LocalModeFolderError,
    is_edge_folder,
    is_local_mode_folder,
)
from reindex.adapters.stores.edge._reader import EdgeReader
from reindex.adapters.stores.edge._space import fills_holes_when_mapped, generation_copy_bytes, newest_load_bytes
from reindex.adapters.stores.edge._writer import EdgeStore

__all__ = [
    "CorruptAliasesError",
    "EdgeReader",
    "EdgeStore",
    "LocalModeFolderError",
    "STORE_FORMAT",
    "fills_holes_when_mapped",
    "generation_copy_bytes",
    "is_edge_folder",
    "is_local_mode_folder",
    "newest_load_bytes",
    "open_edge_store",
    "open_reader",
]


def open_edge_store(folder: str | os.PathLike[str], *, quantization: str = "none",
                    oversampling: float | None = None, hnsw: Mapping[str, int | None] | None = None) -> EdgeStore:
    """The writer's store in ``folder`` (created if missing); one writer process per folder. ``quantization``
    ``int8``: collections it creates search int8 copies (in RAM) and keep the float32 originals on disk.
    ``oversampling``: searches of quantised segments take k × oversampling int8 candidates and rescore them
    with the originals. ``hnsw``: ``{m, ef_construct}`` of the graphs of the collections it creates and ``ef`` of its
    searches (missing: reindex's defaults, :data:`reindex.domain.kinds.HNSW_DEFAULTS`)."""
    return EdgeStore(Path(folder), quantization=quantization, oversampling=oversampling, hnsw=hnsw)


def open_reader(folder: str | os.PathLike[str], *, oversampling: float | None = None,
                ef: int | None = HNSW_DEFAULTS["ef"]) -> EdgeReader:
    """A read-only view of the store in ``folder`` for any process, while a writer works on it
    (``oversampling``: as for :func:`open_edge_store`; ``ef``: the HNSW search's candidates, by default reindex's
    (``store.hnsw.ef``); None: the engine's default, the graph's ef_construct)."""
    return EdgeReader(Path(folder), oversampling=oversampling, ef=ef)
