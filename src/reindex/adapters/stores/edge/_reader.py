"""Readers: ``EdgeReader``, any number of processes beside the one writer. Each call follows the alias and
the published generation; a lease keeps the writer from deleting a generation a reader has open, and a
private mirror (``_reader_view``) keeps the engine's load from writing into the store."""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reindex.errors import TransientError
from reindex.adapters.stores.edge import _engine as engine
from reindex.adapters.stores.edge._generations import (
    COLLECTIONS,
    MARKER,
    RECORD,
    Record,
    check_folder,
    copy_sparse,
    gen_dir,
    ino,
    is_edge_folder,
    lease_path,
    read_aliases,
    read_record,
    resolve,
)
from reindex.adapters.stores.edge._space import fills_holes_when_mapped, free_bytes, populated_by_load, prefill
from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.adapters.stores.vectors import Hit, NoStoreError, Point, VectorStoreError, hnsw_params

__all__ = ["EdgeReader"]

log = logging.getLogger("reindex")


_VIEW_PREFIX = "reindex-reader-"
_VIEWS: set[Path] = set()  # this process's mirrors, removed at exit if a reader was never closed


@atexit.register
def _remove_views() -> None:
    for view in list(_VIEWS):
        shutil.rmtree(view, ignore_errors=True)
    _VIEWS.clear()


def _sweep_views() -> None:
    """Remove the mirrors of reader processes that died without closing (killed): named by their pid."""
    for root in _view_roots():
        with contextlib.suppress(OSError):
            for name in os.listdir(root):
                pid = name[len(_VIEW_PREFIX):].split("-", 1)[0] if name.startswith(_VIEW_PREFIX) else ""
                if not pid.isdigit() or int(pid) == os.getpid():
                    continue
                try:
                    os.kill(int(pid), 0)
                except ProcessLookupError:
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                except OSError:
                    pass  # alive, another user's


def _view_roots() -> list[str]:
    # RAM-backed where there is one, so that a reader still opens when the store's disk (or /tmp) is full.
    shm = "/dev/shm"
    return ([shm] if os.path.isdir(shm) and os.access(shm, os.W_OK) else []) + [tempfile.gettempdir()]


def _view_root(copies: dict[Path, tuple[int, int]], store: Path) -> str:
    """The first place for a view holding ``copies`` (file: bytes on a disk file system, on a memory one) with
    room for them (none: the first writable one)."""
    free, need = {}, 0
    for root in _view_roots():
        with contextlib.suppress(OSError):
            need = sum(c[1] if fills_holes_when_mapped(root) else c[0] for c in copies.values())
            free[root] = free_bytes(root)
            if free[root] >= need:
                return root
    where = ", ".join(f"{r} has {n / 2**20:,.1f} MiB" for r, n in free.items()) or "none is writable"
    raise VectorStoreError(
        f"`{store}` is read-only, so a reader keeps a private copy of the {need / 2**20:,.1f} MiB of its files that "
        f"the engine opens for writing, and {where} free: set TMPDIR to a folder with that much room")


# Files of a segment that the engine opens read-only when it loads it (strace of loads, qdrant-edge 0.9.0): a
# reader of a read-only store links them from the store; it copies the rest (payload pages, trackers, deletion
# flags, an appendable segment's vectors), which the engine opens for writing even to read, and which a
# read-only mount refuses.
_OPENED_READ_ONLY = (
    re.compile(r"^id_tracker\.mappings$"),
    re.compile(r"^vector_storage/matrix\.dat$"),  # a sealed segment's vectors
    re.compile(r"^vector_index/[^/]+$"),  # the HNSW graph
    re.compile(r"^payload_index/[^/]+/(point_to_values|values_to_points|deleted)\.bin$"),  # keyword index data
)


def _private_copies(folder: Path) -> dict[Path, tuple[int, int]]:
    """The files of the generation ``folder`` a reader of a read-only store copies, with what each costs on a
    disk file system (its allocated bytes) and on a memory one (also the holes a load fills)."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for f in files:
            inside = "/".join((*rel.parts[2:], f)) if len(rel.parts) >= 2 and rel.parts[0] == "segments" else ""
            if inside and any(p.match(inside) for p in _OPENED_READ_ONLY):
                continue
            st = os.stat(Path(root) / f)
            allocated = min(st.st_size, st.st_blocks * 512)
            out[rel / f] = (allocated, st.st_size if populated_by_load((rel / f).as_posix()) else allocated)
    return out


def _reader_view(folder: Path, *, read_only: bool = False) -> Path:
    """A private folder mirroring the generation ``folder`` for a reader to load: the engine's load rewrites the
    shard's ``edge_config.json`` and each segment's ``segment.json`` (atomic replace), so those are copies here and
    everything else links to the store. Loading it writes nothing into the store (on a full disk too).

    ``read_only`` (the reader cannot write into the store): also the files the engine opens for writing are
    copies (sparse), see ``_OPENED_READ_ONLY``; the sealed vectors and HNSW graph stay links."""
    copies = _private_copies(folder) if read_only else {}
    view = Path(tempfile.mkdtemp(prefix=f"{_VIEW_PREFIX}{os.getpid()}-", dir=_view_root(copies, folder.parents[2])))
    if read_only:
        try:
            for root, dirs, files in os.walk(folder):
                rel = Path(root).relative_to(folder)
                for d in dirs:
                    (view / rel / d).mkdir()
                for f in files:
                    if rel / f in copies:
                        copy_sparse(Path(root) / f, view / rel / f, sync=False)
                    else:
                        os.symlink(Path(root) / f, view / rel / f)
        except BaseException:
            shutil.rmtree(view, ignore_errors=True)
            raise
        _VIEWS.add(view)
        return view
    try:
        for entry in os.scandir(folder):
            if entry.name == "segments" and entry.is_dir():
                (view / "segments").mkdir()
                for seg in os.scandir(entry.path):
                    mirror = view / "segments" / seg.name
                    if not seg.is_dir():
                        os.symlink(seg.path, mirror)
                        continue
                    mirror.mkdir()
                    for item in os.scandir(seg.path):
                        _mirror_entry(item, mirror / item.name)
            else:
                _mirror_entry(entry, view / entry.name)
    except BaseException:
        shutil.rmtree(view, ignore_errors=True)
        raise
    _VIEWS.add(view)
    return view


def _mirror_entry(entry: os.DirEntry, dst: Path) -> None:
    if entry.name.endswith(".json") and entry.is_file():
        shutil.copyfile(entry.path, dst)
    else:
        os.symlink(entry.path, dst)


def _take_lease(lease: Path) -> tuple[int, bool] | None:
    """A descriptor of the generation's lease file for a shared lock (the writer deletes a superseded generation
    only when it can lock its lease exclusively) and whether the store is writable; None when the collection's
    folder is gone.

    A read-only store (a read-only mount, a folder the reader may not write): the lease file cannot be created,
    but a lock needs no write access, so the writer's lease file is opened read-only and locked as usual (the
    writer creates it when it publishes the generation). -1 when there is none to open (a generation published
    by an older writer that no reader has leased yet): the reader then reads unleased. The engine maps the
    generation's files when it loads them, and a mapping outlives the files' deletion (the writer never
    truncates a published file), so the only risk is a call that reads a file the engine opens later, after the
    writer has deleted a superseded generation: that call fails, and the next one (the Querier retries once)
    finds the published generation moved and opens the current one."""
    try:
        return os.open(lease, os.O_RDWR | os.O_CREAT, 0o644), True
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
    try:
        return os.open(lease, os.O_RDONLY), False
    except FileNotFoundError:
        return -1, False


def _close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


@dataclass(slots=True)
class _Held:
    """A published generation a reader has open, and the lease that keeps the writer from deleting it."""

    name: str
    gen: int
    record: Record
    shard: Any
    lease_fd: int  # -1: unleased (a read-only store whose generation has no lease file: see _take_lease)
    view: Path | None = None  # the private folder the shard was loaded from (:func:`_reader_view`)
    ino: int = 0  # the generation folder's inode: a store rebuilt under the same names is new data


class EdgeReader:
    """Read-only access from any process: every call follows the alias and the published generation.

    Safe while a writer builds a shadow, syncs in place, or swaps the alias: an answer comes from one
    published generation of one population.
    """

    embedded = True

    def __init__(self, root: Path, *, oversampling: float | None = None,
                 ef: int | None = HNSW_DEFAULTS["ef"]) -> None:
        self._params = engine.search_params(oversampling, hnsw_params({"ef": ef})["ef"])
        check_folder(root)
        if not is_edge_folder(root):
            raise NoStoreError(f"`{root}` is not a reindex embedded store (no {MARKER}); nothing to read.")
        self._root = root
        self._held: dict[str, _Held] = {}
        self._lock = threading.RLock()
        self._warned_unleased = False
        _sweep_views()

    def __repr__(self) -> str:
        return f"EdgeReader({str(self._root)!r})"

    def _current(self, name: str) -> _Held:
        """The published generation ``name`` (alias or collection) resolves to now, opened if new.

        One generation is held per name asked for; when the alias or the collection moves on, the
        previous one is released (closed, lease dropped) so the writer can delete it.
        """
        for _ in range(20):
            target = resolve(self._root, name)
            coll = self._root / COLLECTIONS / target
            record = read_record(coll)
            if record is None:
                raise VectorStoreError(f"Collection `{target}` does not exist in `{self._root}`.")
            if record.published is None:
                raise VectorStoreError(f"Collection `{target}` has not been published yet; query it after its swap.")
            held = self._held.get(name)
            if held is not None and held.name == target and held.gen == record.published and held.ino == ino(
                    gen_dir(coll, record.published)):
                return held
            opened = self._open_gen(target, record)
            if opened is None:
                continue  # the writer moved on between reading the record and taking the lease
            if held is not None:
                self._release(held)
            self._held[name] = opened
            return opened
        raise TransientError(f"Collection `{name}` in `{self._root}` keeps changing under the reader; retry.")

    def _open_gen(self, target: str, record: Record) -> _Held | None:
        assert record.published is not None
        folder = gen_dir(self._root / COLLECTIONS / target, record.published)
        lease = lease_path(folder)
        taken = _take_lease(lease)
        if taken is None:
            return None
        fd, writable = taken
        try:
            if fd >= 0:
                fcntl.flock(fd, fcntl.LOCK_SH)
                # The lease must be the file at that name (not one a sweep just unlinked).
                if os.fstat(fd).st_ino != os.stat(lease).st_ino:
                    os.close(fd)
                    return None
            if not folder.is_dir():  # the generation must still be there
                _close(fd)
                return None
            if fd < 0 and not self._warned_unleased:
                self._warned_unleased = True
                log.warning("`%s` is read-only and `%s` has no lease file: reading without a lease (a writer may "
                            "delete the generation once it is superseded; this reader then opens the current one)",
                            self._root, lease.name)
            try:
                view: Path | None = _reader_view(folder, read_only=not writable)
            except FileNotFoundError:
                raise
            except OSError:
                if not writable:
                    raise
                view = None  # no room for a view either: load the generation itself (the engine writes there)
            try:
                with engine.edge_errors(f"open collection `{target}`"):
                    # The files the engine maps: the store's (a view links to them), or a read-only store's copies.
                    prefill(folder if writable or view is None else view, f"open collection `{target}`")
                    shard = engine.load(view or folder)
            except BaseException:
                if view is not None:
                    shutil.rmtree(view, ignore_errors=True)
                    _VIEWS.discard(view)
                raise
        except FileNotFoundError:
            _close(fd)
            return None
        except BaseException:
            _close(fd)
            raise
        return _Held(target, record.published, record, shard, fd, view, ino(folder))

    def _release(self, held: _Held) -> None:
        with contextlib.suppress(Exception):
            held.shard.close()
        if held.view is not None:
            shutil.rmtree(held.view, ignore_errors=True)
            _VIEWS.discard(held.view)
        _close(held.lease_fd)

    def get_alias(self, alias: str) -> str | None:
        return read_aliases(self._root).get(alias)

    def list_aliases(self) -> dict[str, str]:
        return read_aliases(self._root)

    def list_collections(self) -> list[str]:
        base = self._root / COLLECTIONS
        return sorted(c.name for c in base.iterdir() if (c / RECORD).is_file()) if base.is_dir() else []

    def collection_exists(self, name: str) -> bool:
        return (self._root / COLLECTIONS / name / RECORD).is_file()

    def collection_info(self, name: str) -> dict[str, Any]:
        with self._lock, engine.edge_errors(f"describe collection `{name}`"):
            held = self._current(name)
            return engine.describe(held.shard, held.record, gen_dir(self._root / COLLECTIONS / held.name, held.gen))

    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None, exact: bool = False,
    ) -> list[Hit]:
        """Nearest points in the published generation ``name`` resolves to now, best first (``exact``: every vector
        scored, no index)."""
        with self._lock, engine.edge_errors(f"query `{name}`"):
            return engine.query_points(self._current(name).shard, vector, limit, doc_id, where,
                                       engine.EXACT if exact else self._params)

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        with self._lock, engine.edge_errors(f"count points in `{name}`"):
            return engine.count_points(self._current(name).shard, doc_id)

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        with self._lock, engine.edge_errors(f"retrieve points from `{name}`"):
            return engine.retrieve_points(self._current(name).shard, ids, with_vectors)

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        """Every point of one published generation (the one current when the scroll starts)."""
        with self._lock:
            held = self._current(name)
        offset: Any = None
        while True:
            with self._lock, engine.edge_errors(f"scroll `{name}`"):
                page, offset = engine.scroll_page(held.shard, offset, batch, with_vectors)
            yield from page
            if offset is None:
                return

    # Writes belong to the one writer process (open_vector_store); a reader refuses them.

    def _read_only(self, *_args: Any, **_kwargs: Any) -> None:
        raise VectorStoreError(
            f"`{self._root}` is open read-only (open_reader); write through open_vector_store in the writer process."
        )

    create_collection = finish_bulk = prepare_writes = publish = share = create_payload_index = delete_collection = _read_only
    upsert = delete_points = overwrite_payload = swap_alias = delete_alias = _read_only

    def close(self) -> None:
        with self._lock:
            for held in self._held.values():
                self._release(held)
            self._held.clear()
