"""The writer: ``EdgeStore``, one process per store folder. Writes go to a working generation; a published
generation is never written again (see the package's docstring for the contract with readers)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reindex.foundation.atomic import atomic_write, fsync_dir
from reindex.adapters.stores.edge import _engine as engine
from reindex.adapters.stores.edge._generations import (
    ALIASES,
    COLLECTIONS,
    MARKER,
    RECORD,
    STORE_FORMAT,
    TRASH,
    Record,
    check_folder,
    derive_generation,
    gen_dir,
    generations,
    make_lease,
    read_aliases,
    read_record,
    remove_if_unleased,
    resolve,
)
from reindex.adapters.stores.edge._space import (
    WRITE_MARGIN_BYTES,
    check_free,
    check_write,
    free_bytes,
    generation_copy_bytes,
    prefill,
)
from reindex.adapters.stores.vectors import Hit, Point, VectorStoreError, hnsw_params

__all__ = ["EdgeStore"]


def _refuse_foreign_collections(root: Path) -> None:
    """A stock qdrant-client pointed at this folder (``QdrantClient(path=…)``, e.g. under langchain-qdrant)
    writes ``.lock`` and ``meta.json``: reindex ignores those, but refuses to write beside collections that client
    created (``meta.json`` lists them): their points are in no population, and no reader of the alias sees them."""
    try:
        meta = json.loads((root / "meta.json").read_bytes())
    except (OSError, ValueError):
        return
    names = sorted(meta.get("collections") or {}) if isinstance(meta, dict) else []
    if names and (root / MARKER).exists():
        raise VectorStoreError(
            f"`{root}` also holds collections a stock qdrant-client wrote into it ({', '.join(names)}; meta.json, "
            "collection/): reindex never reads them and a stock client cannot read reindex's store. Move meta.json, "
            ".lock and collection/ out of the folder (give qdrant-client a folder of its own) and run again; "
            "readers of this index use reindex's retrievers (reindex.retrievers)."
        )


@dataclass(slots=True)
class _Open:
    """A collection the writer has open: its working generation and the engine's shard on it."""

    record: Record
    gen: int
    shard: Any


class EdgeStore:
    """``VectorStore`` embedded in a folder: one writer process; readers use ``open_reader``."""

    embedded = True

    def __init__(self, root: Path, *, quantization: str = "none", oversampling: float | None = None,
                 hnsw: Mapping[str, int | None] | None = None) -> None:
        self._root = root
        self._int8 = quantization == "int8"
        self._hnsw = hnsw_params(hnsw)
        self._params = engine.search_params(oversampling, self._hnsw["ef"])
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VectorStoreError(f"Cannot create the embedded store folder `{root}`: {exc.strerror or exc}.") from exc
        check_folder(root)
        _refuse_foreign_collections(root)
        self._lock_fd = os.open(root / "writer.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise VectorStoreError(
                f"The embedded store folder `{root}` is held by another reindex process (one writer per folder); "
                "wait for it to finish. Readers never need the folder to themselves: use "
                "reindex.adapters.stores.edge.open_reader."
            ) from None
        if not (root / MARKER).exists():
            atomic_write(root / MARKER, (json.dumps({"format": STORE_FORMAT, "engine": "qdrant-edge"}) + "\n").encode())
        (root / COLLECTIONS).mkdir(exist_ok=True)
        self._open: dict[str, _Open] = {}
        self._lock = threading.RLock()
        self._closed = False
        self.derived: dict[str, int] | None = None  # bytes linked/copied by the last delta generation
        self._sweep_all()

    def __repr__(self) -> str:
        return f"EdgeStore({str(self._root)!r})"

    # helpers ----------------------------------------------------------------------------------

    def _coll(self, name: str) -> Path:
        return self._root / COLLECTIONS / name

    def _get(self, name: str) -> _Open:
        """The open working generation of a collection (or of an alias's target)."""
        if self._closed:
            raise VectorStoreError(f"The embedded store `{self._root}` is closed.")
        name = resolve(self._root, name)
        if name in self._open:
            return self._open[name]
        coll = self._coll(name)
        record = read_record(coll)
        gens = generations(coll)
        if record is None or not gens:
            raise VectorStoreError(f"Collection `{name}` does not exist in `{self._root}`.")
        gen = gens[-1]
        with engine.edge_errors(f"open collection `{name}`"):
            prefill(gen_dir(coll, gen), f"open collection `{name}`")
            shard = engine.load(gen_dir(coll, gen))
        self._open[name] = opened = _Open(record, gen, shard)
        return opened

    def _writable(self, name: str) -> _Open:
        """The generation to write: the working one, or, if readers may have it (published), a delta
        generation derived from it (see ``derive_generation``: sealed segments shared, the rest copied)."""
        o = self._get(name)
        if o.record.published != o.gen:
            return o
        with engine.edge_errors(f"derive a generation of collection `{o.record.name}` for writing"):
            o.shard.flush()
            # Closed before the links are made, so nothing of this process writes the shared files again.
            self._open.pop(o.record.name, None)
            with contextlib.suppress(Exception):
                o.shard.close()
            o.gen, o.shard = self._derive(o.record.name, o.gen)
        self._open[o.record.name] = o
        return o

    def _derive(self, name: str, gen: int) -> tuple[int, Any]:
        """Derive generation ``gen + 1`` of ``name`` from ``gen`` (closed in this process) and load it."""
        coll = self._coll(name)
        new = gen + 1
        tmp = coll / f"gen-{new:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        check_free(self._root, generation_copy_bytes(self._root, name) + WRITE_MARGIN_BYTES,
                   f"derive a generation of `{name}` for writing")
        self.derived = derive_generation(gen_dir(coll, gen), tmp)
        os.replace(tmp, gen_dir(coll, new))
        fsync_dir(coll)
        prefill(gen_dir(coll, new), f"open the generation of `{name}` it writes")
        return new, engine.load(gen_dir(coll, new))

    def prepare_writes(self, name: str) -> None:
        """The caller is about to change ``name`` (an in-place sync, before it reads the points it replaces):
        open the generation it will write now. Reads before the first write then load that one generation;
        without this they load the published generation, and the first write closes it and loads the delta
        derived from it: two loads of the whole collection (each ~proportional to its points)."""
        with self._lock:
            if self._closed:
                raise VectorStoreError(f"The embedded store `{self._root}` is closed.")
            resolved = resolve(self._root, name)
            if resolved not in self._open:
                coll = self._coll(resolved)
                record, gens = read_record(coll), generations(coll)
                if record is not None and gens and record.published == gens[-1]:
                    # Derived from the files as published (no WAL: wal_enabled=False), never loaded here.
                    with engine.edge_errors(f"derive a generation of collection `{resolved}` for writing"):
                        gen, shard = self._derive(resolved, gens[-1])
                    self._open[resolved] = _Open(record, gen, shard)
                    return
            self._writable(name)

    def _write_record(self, o: _Open, record: Record) -> None:
        atomic_write(self._coll(record.name) / RECORD, record.to_bytes())
        o.record = record

    def _sweep(self, name: str) -> None:
        """Delete generations readers can no longer reach, and copies a crash left behind."""
        coll = self._coll(name)
        record = read_record(coll)
        if record is None:
            return
        for entry in os.listdir(coll):
            if entry.endswith(".tmp"):
                shutil.rmtree(coll / entry, ignore_errors=True)
            elif entry.endswith(".lease") and not (coll / entry.removesuffix(".lease")).exists():
                remove_if_unleased(coll / entry.removesuffix(".lease"))
        if record.published is not None:
            for gen in generations(coll):
                if gen < record.published:
                    remove_if_unleased(gen_dir(coll, gen))

    def _sweep_all(self) -> None:
        for coll in sorted((self._root / COLLECTIONS).iterdir()):
            record = read_record(coll)
            if record is None:  # a create that crashed before its record was written
                shutil.rmtree(coll, ignore_errors=True)
                continue
            if record.published is not None:  # published by a writer that made no lease file (older versions)
                make_lease(gen_dir(coll, record.published))
            self._sweep(coll.name)
        trash = self._root / TRASH
        if trash.is_dir():
            for coll in sorted(trash.iterdir()):
                if all(remove_if_unleased(gen_dir(coll, g)) for g in generations(coll)):
                    shutil.rmtree(coll, ignore_errors=True)

    # collections ------------------------------------------------------------------------------

    def collection_exists(self, name: str) -> bool:
        return (self._coll(name) / RECORD).is_file()

    def create_collection(
        self, name: str, *, dimension: int, distance: str, bulk: bool = False,
        shard_number: int = 1, replication_factor: int = 1,
    ) -> None:
        """A new, unpublished population. ``bulk`` changes nothing here: HNSW is built in ``finish_bulk``."""
        if distance not in engine.DISTANCES:
            raise VectorStoreError(f"Unknown distance `{distance}`; use one of {', '.join(engine.DISTANCES)}.")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            raise VectorStoreError(f"Collection name `{name}` must use letters, digits, `_`, `-` and `.` only.")
        with self._lock:
            if self.collection_exists(name):
                raise VectorStoreError(f"Collection `{name}` already exists in `{self._root}`.")
            coll = self._coll(name)
            shutil.rmtree(coll, ignore_errors=True)  # a crashed create's leftovers
            with engine.edge_errors(f"create collection `{name}`"):
                check_write(self._root, 0, f"create collection `{name}`")
                shard = engine.create_shard(gen_dir(coll, 1), dimension=dimension, distance=distance, int8=self._int8,
                                            hnsw=self._hnsw)
                shard.flush()
                record = Record(name, dimension, distance, None, {})
                atomic_write(coll / RECORD, record.to_bytes())  # the collection exists from here on
                fsync_dir(coll.parent)
            self._open[name] = _Open(record, 1, shard)

    def finish_bulk(self, name: str) -> None:
        """Build the HNSW and payload indexes of the working generation (blocking; in this process, with the graph
        parameters the collection was created with)."""
        with self._lock, engine.edge_errors(f"index collection `{name}`"):
            o = self._writable(name)
            o.shard.optimize()
            o.shard.flush()

    def create_payload_index(self, name: str, field: str, kind: str = "keyword") -> None:
        if kind not in engine.PAYLOAD_KINDS:
            raise VectorStoreError(f"Unknown payload index kind `{kind}`; use one of {', '.join(engine.PAYLOAD_KINDS)}.")
        with self._lock, engine.edge_errors(f"index payload field `{field}` of `{name}`"):
            o = self._writable(name)
            check_write(self._root, 0, f"index payload field `{field}` of `{name}`")
            o.shard.update(engine.field_index_op(field, kind))
            o.shard.flush()
            self._write_record(o, o.record.replace(payload_indexes={**o.record.payload_indexes, field: kind}))

    def delete_collection(self, name: str) -> None:
        """Delete a collection (absent: nothing to do). Refuses one that an alias points at."""
        targets = [a for a, c in self.list_aliases().items() if c == name]
        if targets:
            raise VectorStoreError(
                f"Collection `{name}` is what alias `{targets[0]}` points at; move or delete the alias first."
            )
        with self._lock:
            if not self.collection_exists(name):
                return
            o = self._open.pop(name, None)
            if o is not None:
                with contextlib.suppress(Exception):
                    o.shard.close()
            trash = self._root / TRASH
            trash.mkdir(exist_ok=True)
            with engine.edge_errors(f"delete collection `{name}`"):
                # One rename takes it out of reach; readers that still hold a generation keep it until released.
                os.replace(self._coll(name), trash / f"{name}.{uuid.uuid4().hex[:8]}")
                fsync_dir(self._root / COLLECTIONS)
                fsync_dir(trash)
            self._sweep_all()

    def list_collections(self) -> list[str]:
        return sorted(c.name for c in (self._root / COLLECTIONS).iterdir() if (c / RECORD).is_file())

    def collection_info(self, name: str) -> dict[str, Any]:
        """Points count, dimension, distance, shards, status and ``hnsw`` (the graph's ``m`` and ``ef_construct`` as
        the engine recorded them) of a collection (or an alias's target)."""
        with self._lock, engine.edge_errors(f"describe collection `{name}`"):
            o = self._get(name)
            return engine.describe(o.shard, o.record, gen_dir(self._coll(o.record.name), o.gen))

    # points -----------------------------------------------------------------------------------

    def upsert(self, name: str, points: list[Point]) -> None:
        """Write ``points`` (same ids replace); durable (flushed and fsynced) when it returns."""
        if not points:
            return
        with self._lock:
            record = self._get(name).record
        # Converting points is most of an upsert's CPU: done outside the lock, so shard threads overlap it
        # with each other's engine writes and flushes.
        op = engine.upsert_op(points, record)
        size = sum(4 * record.dimension + len(repr(p.payload)) for p in points)
        with self._lock:
            self._apply(self._writable(name), op, f"upsert {len(points)} points into `{name}`", size)

    def delete_points(self, name: str, ids: list[str]) -> None:
        """Delete points by id (missing ids are ignored); durable when it returns."""
        if not ids:
            return
        with self._lock:
            o = self._writable(name)
            self._apply(o, engine.delete_op(ids), f"delete {len(ids)} points from `{name}`", 0)

    def overwrite_payload(self, name: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """Replace each listed point's whole payload (vectors untouched); durable when it returns."""
        if not payloads:
            return
        ops = engine.overwrite_payload_ops(payloads)
        action = f"overwrite the payload of {len(ops)} points in `{name}`"
        with self._lock:
            o = self._writable(name)
            check_write(self._root, sum(len(repr(p)) for p in payloads.values()), action)
            try:
                with engine.edge_errors(action):
                    for op in ops:
                        o.shard.update(op)
                    o.shard.flush()  # one durability point for the batch
            except BaseException:
                with contextlib.suppress(Exception):
                    o.shard.close()
                self._open.pop(o.record.name, None)
                raise

    def _apply(self, o: _Open, op: Any, action: str, size: int) -> None:
        """Apply ``op`` (about ``size`` bytes of data) and flush."""
        check_write(self._root, size, action)
        try:
            with engine.edge_errors(action):
                o.shard.update(op)
                o.shard.flush()  # the durability point: fsync of every changed file
        except BaseException:
            # Memory may hold part of what the disk does not: reopen from the last flush.
            with contextlib.suppress(Exception):
                o.shard.close()
            self._open.pop(o.record.name, None)
            raise

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        """The points with these ids, in no guaranteed order; missing ids are simply absent."""
        with self._lock, engine.edge_errors(f"retrieve points from `{name}`"):
            return engine.retrieve_points(self._get(name).shard, ids, with_vectors)

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        """Exact number of points, or of one document's points (payload index on ``doc_id``)."""
        with self._lock, engine.edge_errors(f"count points in `{name}`"):
            return engine.count_points(self._get(name).shard, doc_id)

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        """Every point of a collection, page by page."""
        offset: Any = None
        while True:
            with self._lock, engine.edge_errors(f"scroll `{name}`"):
                page, offset = engine.scroll_page(self._get(name).shard, offset, batch, with_vectors)
            yield from page
            if offset is None:
                return

    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None, exact: bool = False,
    ) -> list[Hit]:
        """Nearest points to ``vector`` in a collection or alias (optionally one document's), best first; ``exact``:
        every vector scored (no index), the reference an index's recall is measured against."""
        with self._lock, engine.edge_errors(f"query `{name}`"):
            return engine.query_points(self._get(name).shard, vector, limit, doc_id, where,
                                       engine.EXACT if exact else self._params)

    # publishing and aliases -------------------------------------------------------------------

    def publish(self, name: str) -> None:
        """Make the working generation of ``name`` the one readers see (flush, one atomic record replace)."""
        self._publish(name, compact=True)

    def _publish(self, name: str, *, compact: bool) -> None:
        with self._lock:
            o = self._get(name)
            if o.record.published == o.gen:
                return
            with engine.edge_errors(f"publish collection `{o.record.name}`"):
                # An in-place sync (``compact``; a shadow shared mid-build is indexed once, by finish_bulk: an
                # optimize per share cost 17.9 s for 8 shares of 20k points against 0.74 s without): let the
                # engine's optimisers compact past their thresholds (seal an
                # appendable segment grown past indexing_threshold, vacuum a segment >20 % deleted, merge
                # when there are too many), so many syncs keep the segment count and disk bounded. Below
                # the thresholds this is a no-op. The engine deletes replaced segments' folders when the
                # shard closes: reopen, so readers never load a generation that still holds them.
                if compact and o.record.published is not None and o.shard.optimize():
                    o.shard.flush()
                    o.shard.close()
                    prefill(gen_dir(self._coll(o.record.name), o.gen), f"open collection `{o.record.name}`")
                    o.shard = engine.load(gen_dir(self._coll(o.record.name), o.gen))
                o.shard.flush()
                make_lease(gen_dir(self._coll(o.record.name), o.gen))  # before readers can see the generation
                self._write_record(o, o.record.replace(published=o.gen))
                self._sweep(o.record.name)

    def share(self, name: str) -> str | None:
        """Publish what ``name`` holds so far (a shadow being built) so that readers in other processes can read
        it: the cascade of a model change reads its candidates' new vectors there instead of embedding them. The
        build goes on: its next write derives a new generation from this one (a copy of what is not sealed yet:
        during a build, O(what the collection holds)), so nothing is published when the folder has no room for that
        copy and two more (the derived generation, a reader's lease on this one, the margin). Returns None when
        published (or already), else why not. No alias moves: readers of an alias see no difference."""
        with self._lock:
            o = self._get(name)
            if o.record.published == o.gen:
                return None
            need = 2 * generation_copy_bytes(self._root, o.record.name) + WRITE_MARGIN_BYTES
            free = free_bytes(self._root)
            if need > free:
                return (f"not published for readers: the next write would copy {need / 2**20:,.1f} MiB and "
                        f"{free / 2**20:,.1f} MiB is free in {self._root}")
            self._publish(o.record.name, compact=False)
            return None

    def get_alias(self, alias: str) -> str | None:
        return self.list_aliases().get(alias)

    def list_aliases(self) -> dict[str, str]:
        with engine.edge_errors("list aliases"):
            return read_aliases(self._root)

    def swap_alias(self, alias: str, new_collection: str, old_collection: str | None) -> None:
        """Point ``alias`` at ``new_collection`` in one atomic file replace (published first).

        ``old_collection`` is where the alias must point now (None: nowhere); if it points elsewhere the
        swap is refused. Already pointing at ``new_collection`` (a retried swap) is success.
        """
        with self._lock:
            aliases = self.list_aliases()
            current = aliases.get(alias)
            if current == new_collection:
                return
            if current != old_collection:
                raise VectorStoreError(
                    f"Alias `{alias}` points at `{current}`, not `{old_collection}` as expected; "
                    "someone else moved it. Check `reindex status` and plan again."
                )
            if not self.collection_exists(new_collection):
                raise VectorStoreError(f"Cannot point alias `{alias}` at `{new_collection}`: no such collection.")
            self.publish(new_collection)
            self._write_aliases({**aliases, alias: new_collection})

    def delete_alias(self, alias: str) -> None:
        """Remove an alias (absent: nothing to do); its collection stays."""
        with self._lock:
            aliases = self.list_aliases()
            if alias in aliases:
                del aliases[alias]
                self._write_aliases(aliases)

    def restore_aliases(self, aliases: Mapping[str, str]) -> dict[str, str]:
        """Replace the alias file with ``aliases`` (its collections must exist), whatever it holds now: the
        repair of a corrupt ``aliases.json`` from the state store's records. Returns what was written."""
        with self._lock:
            missing = sorted(c for c in aliases.values() if not self.collection_exists(c))
            if missing:
                raise VectorStoreError(f"Cannot restore aliases: no collection {', '.join(missing)} in `{self._root}`.")
            self._write_aliases(dict(aliases))  # first: until then every name lookup fails on the corrupt file
            for collection in aliases.values():
                self.publish(collection)  # live populations are published already: normally a no-op
            return dict(sorted(aliases.items()))

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        with engine.edge_errors("write aliases"):
            body = json.dumps({"aliases": dict(sorted(aliases.items()))}, indent=1) + "\n"
            atomic_write(self._root / ALIASES, body.encode())

    def close(self) -> None:
        """Publish in-place changes to collections readers already see, and release the folder."""
        with self._lock:
            if self._closed:
                return
            try:
                for name, o in list(self._open.items()):
                    # A collection readers already know (published before) gets this session's writes;
                    # a never-published one (a shadow being built) stays unseen until swap_alias.
                    if o.record.published is not None and o.record.published != o.gen:
                        self.publish(name)
            finally:
                self._closed = True
                for o in self._open.values():
                    with contextlib.suppress(Exception):
                        o.shard.close()
                self._open.clear()
                with contextlib.suppress(OSError):
                    os.close(self._lock_fd)
