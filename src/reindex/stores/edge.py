"""The embedded vector store: Qdrant's own engine in-process (``qdrant-edge-py``), one shard per
population, readers in other processes. The only module that imports ``qdrant_edge``.

Lines: over the ~600-line guide on purpose: the writer (``EdgeStore``), the reader (``EdgeReader``) and the
generation/lease protocol between them are one role and must change together (splitting the reader off
would have to export the private generation and lease helpers).

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
  mirror of the generation instead (``_reader_view``) and write nothing into the store.
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
harmless. Metadata (marker, collection records, aliases) is written with ``reindex.atomic.atomic_write``
(fsync file, rename, fsync folder).

Folders made by the old embedded store (qdrant-client local mode: ``meta.json`` + ``collection/``) are
detected and refused with the exact conversion command (``python -m reindex.stores.migrate``). A stock
qdrant-client opened on an edge folder sees no collection and writes ``.lock`` and ``meta.json``: both are
ignored; once it has created collections there the writer refuses the folder (``_refuse_foreign_collections``).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from reindex.atomic import atomic_write, fsync_dir
from reindex.errors import TransientError
from reindex.stores.vectors import (
    Hit,
    NoStoreError,
    Point,
    VectorStoreError,
    equality_conditions,
    one_line,
)

__all__ = [
    "CorruptAliasesError",
    "EdgeReader",
    "EdgeStore",
    "LocalModeFolderError",
    "STORE_FORMAT",
    "generation_copy_bytes",
    "is_edge_folder",
    "is_local_mode_folder",
    "open_edge_store",
    "open_reader",
]

STORE_FORMAT = "reindex-edge/1"
_MARKER = "reindex-store.json"
_ALIASES = "aliases.json"
_COLLECTIONS = "collections"
_TRASH = "trash"
_RECORD = "collection.json"
_GEN = re.compile(r"^gen-(\d{6})$")

_DISTANCES = {"cosine": qe.Distance.Cosine, "dot": qe.Distance.Dot, "euclid": qe.Distance.Euclid}
_PAYLOAD_KINDS = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
    "bool": qe.PayloadSchemaType.Bool,
    "text": qe.PayloadSchemaType.Text,
    "uuid": qe.PayloadSchemaType.Uuid,
    "datetime": qe.PayloadSchemaType.Datetime,
}
# Loading a generation can race a reader rewriting edge_config.json; a retry after a short pause settles it.
_LOAD_TRIES = 5
# The engine's optimiser thresholds for a new collection, chosen so that an in-place sync costs O(edit):
# a segment whose vectors pass indexing_threshold (KB) is sealed (HNSW, its big files shared by the next
# delta generation) and only the appendable remainder is copied per sync, so a low threshold bounds that
# copy (~1,300 points of 384 dims). The merge optimiser keeps at most ~default_segment_number segments
# (Qdrant's default on 2 CPUs is 2, which would merge the largest segment into a small one every few syncs).
_INDEXING_THRESHOLD_KB = 2_000
_SEGMENT_NUMBER = 8


class LocalModeFolderError(VectorStoreError):
    """The folder was made by qdrant-client local mode (the previous embedded store)."""


def is_local_mode_folder(folder: Path) -> bool:
    """True when ``folder`` holds a qdrant-client local-mode store (``meta.json`` + ``collection/``)."""
    return (folder / "meta.json").is_file() and not (folder / _MARKER).exists()


def is_edge_folder(folder: Path) -> bool:
    """True when ``folder`` holds a store made by this module."""
    return (folder / _MARKER).is_file()


def open_edge_store(folder: str | os.PathLike[str], *, quantization: str = "none",
                    oversampling: float | None = None) -> EdgeStore:
    """The writer's store in ``folder`` (created if missing); one writer process per folder. ``quantization``
    ``int8``: collections it creates search int8 copies (in RAM) and keep the float32 originals on disk.
    ``oversampling``: searches of quantised segments take k × oversampling int8 candidates and rescore them
    with the originals."""
    return EdgeStore(Path(folder), quantization=quantization, oversampling=oversampling)


def generation_copy_bytes(folder: str | os.PathLike[str], collection: str) -> int:
    """At most the bytes a delta generation of ``collection``'s newest generation writes
    (:func:`_derive_generation`): the allocated blocks of every file it copies; the write-once files of
    sealed segments it hard-links cost nothing. 0 when the collection does not exist."""
    coll = Path(folder) / _COLLECTIONS / collection
    gens = _generations(coll)
    if not gens:
        return 0
    src = _gen_dir(coll, gens[-1])
    total = 0
    for root, _dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        segment = src / rel.parts[0] / rel.parts[1] if len(rel.parts) >= 2 and rel.parts[0] == "segments" else None
        for f in files:
            if segment is not None and _write_once(segment, (Path(root) / f).relative_to(segment).as_posix()):
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, f))
                total += min(st.st_size, st.st_blocks * 512)
    return total


def open_reader(folder: str | os.PathLike[str], *, oversampling: float | None = None) -> EdgeReader:
    """A read-only view of the store in ``folder`` for any process, while a writer works on it
    (``oversampling``: as for :func:`open_edge_store`)."""
    return EdgeReader(Path(folder), oversampling=oversampling)


# --------------------------------------------------------------------------------------------
# Records on disk
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Record:
    """``collection.json``: what a population is and which generation readers see."""

    name: str
    dimension: int
    distance: str
    published: int | None
    payload_indexes: dict[str, str]

    def to_bytes(self) -> bytes:
        body = {"name": self.name, "dimension": self.dimension, "distance": self.distance,
                "published": self.published, "payload_indexes": self.payload_indexes}
        return (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()

    @staticmethod
    def from_bytes(data: bytes) -> _Record:
        d = json.loads(data)
        return _Record(d["name"], int(d["dimension"]), d["distance"], d["published"], dict(d["payload_indexes"]))

    def replace(self, **changes: Any) -> _Record:
        return _Record(**{**{k: getattr(self, k) for k in self.__slots__}, **changes})


def _gen_dir(coll: Path, gen: int) -> Path:
    return coll / f"gen-{gen:06d}"


def _lease_path(gen_dir: Path) -> Path:
    return gen_dir.with_name(gen_dir.name + ".lease")


def _generations(coll: Path) -> list[int]:
    try:
        names = os.listdir(coll)
    except FileNotFoundError:
        return []
    return sorted(int(m.group(1)) for n in names if (m := _GEN.match(n)))


def _read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


def _read_record(coll: Path) -> _Record | None:
    try:
        return _Record.from_bytes((coll / _RECORD).read_bytes())
    except FileNotFoundError:
        return None


class CorruptAliasesError(VectorStoreError):
    """``aliases.json`` cannot be read as ``{"aliases": {alias: collection}}``."""


def _read_aliases(root: Path) -> dict[str, str]:
    path = root / _ALIASES
    try:
        data = _read_json(path)
        if not data:
            return {}
        aliases = data["aliases"]
        if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()):
            raise TypeError("expected {alias: collection} names")
        return dict(aliases)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptAliasesError(
            f"`{path}` is not a valid alias file ({one_line(exc)}); run `reindex status` to rewrite it from the "
            "state store's live records"
        ) from None


def _resolve(root: Path, name: str) -> str:
    return _read_aliases(root).get(name, name)


def _check_folder(root: Path) -> None:
    if is_local_mode_folder(root):
        raise LocalModeFolderError(
            f"`{root}` holds an index made by the previous embedded store (qdrant-client local mode). "
            f"Convert it once with `python -m reindex.stores.migrate {root} {root}.edge` and set store.path "
            f"to `{root}.edge`, or keep it as it is with store.backend: local."
        )


def _refuse_foreign_collections(root: Path) -> None:
    """A stock qdrant-client pointed at this folder (``QdrantClient(path=…)``, e.g. under langchain-qdrant)
    writes ``.lock`` and ``meta.json``: reindex ignores those, but refuses to write beside collections that client
    created (``meta.json`` lists them): their points are in no population, and no reader of the alias sees them."""
    try:
        meta = json.loads((root / "meta.json").read_bytes())
    except (OSError, ValueError):
        return
    names = sorted(meta.get("collections") or {}) if isinstance(meta, dict) else []
    if names and (root / _MARKER).exists():
        raise VectorStoreError(
            f"`{root}` also holds collections a stock qdrant-client wrote into it ({', '.join(names)}; meta.json, "
            "collection/): reindex never reads them and a stock client cannot read reindex's store. Move meta.json, "
            ".lock and collection/ out of the folder (give qdrant-client a folder of its own) and run again; "
            "readers of this index use reindex's retrievers (reindex.retrievers)."
        )


@contextlib.contextmanager
def _edge_errors(action: str) -> Iterator[None]:
    """Engine and file-system failures as one-line errors: OSError may clear up, the rest will not."""
    try:
        yield
    except (VectorStoreError, TransientError):
        raise
    except Exception as exc:
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "os error 28" in str(exc):
            raise VectorStoreError(f"Embedded store ran out of disk during {action} (no space left on device): free "
                                   "some space and run the command again (finished work is kept)") from exc
        if isinstance(exc, OSError):
            raise TransientError(f"Embedded store I/O failed during {action}: {one_line(exc)}. Retry later.") from exc
        raise VectorStoreError(f"Embedded store failed to {action}: {one_line(exc)}") from exc


def _load(path: Path) -> Any:
    for attempt in range(_LOAD_TRIES):
        try:
            return qe.EdgeShard.load(str(path))
        except Exception:
            if attempt == _LOAD_TRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


_VIEW_PREFIX = "reindex-reader-"
_VIEWS: set[Path] = set()  # this process's mirrors, removed at exit if a reader was never closed


@atexit.register
def _remove_views() -> None:
    for view in list(_VIEWS):
        shutil.rmtree(view, ignore_errors=True)
    _VIEWS.clear()


def _sweep_views() -> None:
    """Remove the mirrors of reader processes that died without closing (killed): named by their pid."""
    root = _view_root()
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


def _view_root() -> str:
    # RAM-backed where there is one, so that a reader still opens when the store's disk (or /tmp) is full.
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _reader_view(gen_dir: Path) -> Path:
    """A private folder mirroring ``gen_dir`` for a reader to load: the engine's load rewrites the shard's
    ``edge_config.json`` and each segment's ``segment.json`` (atomic replace), so those are copies here and
    everything else links to the store. Loading it writes nothing into the store (on a full disk too)."""
    view = Path(tempfile.mkdtemp(prefix=f"{_VIEW_PREFIX}{os.getpid()}-", dir=_view_root()))
    try:
        for entry in os.scandir(gen_dir):
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


# Files of a sealed (optimised, non-appendable) segment that the engine writes once, when it builds the
# segment, and never again: a delta generation hard-links them instead of copying. Everything else is
# copied, because the engine changes it in place: a sealed segment's deletion bitmap, point versions and
# payload-slot tracker (an update or delete of one of its points marks it there and writes the new version
# into the appendable segment), and every file of an appendable segment. Measured on qdrant-edge 0.9.0
# (md5 of every file before and after upserts, deletes, payload overwrites, a payload index and optimize;
# tests/test_edge_store.py::test_a_sync_shares_the_sealed_segments_and_never_changes_a_file_readers_have).
_SEALED_SEGMENT_MARK = "id_tracker.mappings"  # the immutable id tracker: present only in sealed segments
_WRITE_ONCE = (
    re.compile(r"^id_tracker\.mappings$"),
    re.compile(r"^vector_storage/matrix\.dat$"),  # the vectors
    re.compile(r"^vector_index/[^/]+$"),  # the HNSW graph
    re.compile(r"^payload_storage/page_\d+\.dat$"),  # the payloads (deletes touch the tracker, not pages)
    re.compile(r"^payload_index/[^/]+/(point_to_values|values_to_points)\.bin$"),  # keyword index data
)


def _write_once(segment: Path, rel: str) -> bool:
    """Whether ``rel`` (a path inside ``segment``) is a file the engine never writes after building it."""
    return (segment / _SEALED_SEGMENT_MARK).is_file() and any(p.match(rel) for p in _WRITE_ONCE)


def _derive_generation(src: Path, dst: Path) -> dict[str, int]:
    """A new generation in ``dst`` with the contents of ``src``, for the writer to change while readers keep
    ``src``: write-once files of sealed segments are hard-linked (shared, never written again), the rest
    copied (sparse: the engine preallocates files it has not filled) and fsynced, with every folder.
    Returns bytes ``linked`` and ``copied``, for the cost model and the tests."""
    sizes = {"linked": 0, "copied": 0}
    for root, dirs, files in os.walk(src):
        here = Path(root)
        rel = here.relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        segment = src / rel.parts[0] / rel.parts[1] if len(rel.parts) >= 2 and rel.parts[0] == "segments" else None
        for f in files:
            source, target = here / f, dst / rel / f
            inside = (here / f).relative_to(segment).as_posix() if segment is not None else ""
            if segment is not None and _write_once(segment, inside):
                os.link(source, target)
                sizes["linked"] += source.stat().st_size
            else:
                sizes["copied"] += _copy_sparse(source, target)
        for d in dirs:
            (dst / rel / d).mkdir(exist_ok=True)
    for root, _dirs, _files in os.walk(dst):
        fsync_dir(root)
    return sizes


def _copy_sparse(src: Path, dst: Path) -> int:
    """Copy a file's data extents only (holes stay holes), fsync it; returns the bytes copied."""
    copied = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # only a hole is left
                    break
                raise
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            pos = start
            while pos < end:
                try:
                    n = os.copy_file_range(fin.fileno(), fout.fileno(), end - pos, pos, pos)
                except OSError as exc:  # a file system without it: copy through user space
                    if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    n = os.pwrite(fout.fileno(), os.pread(fin.fileno(), min(end - pos, 1 << 20), pos), pos)
                if n == 0:
                    break
                pos += n
            copied += pos - start
            offset = end
        os.ftruncate(fout.fileno(), size)
        os.fsync(fout.fileno())
    return copied


def _ino(path: Path) -> int:
    """The inode of ``path`` (0: gone), to tell a generation from a later one made under the same name."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return 0


def _remove_if_unleased(gen_dir: Path) -> bool:
    """Delete a generation no reader holds (its lease is free); True when it is gone."""
    lease = _lease_path(gen_dir)
    try:
        fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # its collection folder is already gone
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False  # a reader has it open; a later sweep deletes it
            raise
        shutil.rmtree(gen_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            lease.unlink()  # while still locked: a reader that opens the name now gets a new inode
        return True
    finally:
        os.close(fd)


def _point(record: Any, with_vectors: bool) -> Point:
    vector = record.vector if with_vectors else None
    if isinstance(vector, dict):
        vector = vector.get("")
    return Point(id=str(record.id), vector=vector, payload=dict(record.payload or {}))


def _doc_filter(doc_id: str | None, where: Mapping[str, Any] | None = None) -> Any:
    conditions = equality_conditions(doc_id, where)
    if not conditions:
        return None
    return qe.Filter(must=[qe.FieldCondition(key=k, match=qe.MatchValue(v)) for k, v in conditions])


def _as_list(vector: Sequence[float] | np.ndarray) -> list[float]:
    return vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]


# Read operations on one open shard, shared by the writer and readers.


def _count(shard: Any, doc_id: str | None) -> int:
    return int(shard.count(qe.CountRequest(exact=True, filter=_doc_filter(doc_id))))


def _search_params(oversampling: float | None) -> Any:
    """Search parameters for ``oversampling`` (None: the engine's defaults). Quantised segments take
    ``limit × oversampling`` candidates by their int8 copy and rescore them with the float32 originals;
    unquantised segments ignore it."""
    if oversampling is None:
        return None
    if not oversampling >= 1.0:
        raise VectorStoreError(f"store.oversampling {oversampling!r}: must be at least 1")
    return qe.SearchParams(quantization=qe.QuantizationSearchParams(rescore=True, oversampling=float(oversampling)))


def _query(shard: Any, vector: Sequence[float] | np.ndarray, limit: int, doc_id: str | None,
           where: Mapping[str, Any] | None = None, params: Any = None) -> list[Hit]:
    request = qe.QueryRequest(limit=limit, query=qe.Query.Nearest(_as_list(vector)), with_payload=True,
                              filter=_doc_filter(doc_id, where), params=params)
    return [Hit(id=str(p.id), score=float(p.score), payload=dict(p.payload or {})) for p in shard.query(request)]


def _retrieve(shard: Any, ids: list[str], with_vectors: bool) -> list[Point]:
    if not ids:
        return []
    return [_point(r, with_vectors) for r in shard.retrieve(list(ids), with_payload=True, with_vector=with_vectors)]


def _scroll_page(shard: Any, offset: Any, batch: int, with_vectors: bool) -> tuple[list[Point], Any]:
    records, nxt = shard.scroll(qe.ScrollRequest(offset=offset, limit=batch, with_payload=True,
                                                 with_vector=with_vectors))
    return [_point(r, with_vectors) for r in records], nxt


def _info(shard: Any, record: _Record) -> dict[str, Any]:
    info = shard.info()
    return {
        "name": record.name,
        "points_count": int(info.points_count),
        "indexed_vectors_count": int(info.indexed_vectors_count),
        "dimension": record.dimension,
        "distance": record.distance,
        "shard_number": 1,
        "replication_factor": 1,
        "status": "green",
        "segments_count": int(info.segments_count),
        "payload_indexes": sorted(getattr(info, "payload_schema", None) or {}),
    }


# --------------------------------------------------------------------------------------------
# The writer
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Open:
    """A collection the writer has open: its working generation and the engine's shard on it."""

    record: _Record
    gen: int
    shard: Any


class EdgeStore:
    """``VectorStore`` embedded in a folder: one writer process; readers use ``open_reader``."""

    embedded = True

    def __init__(self, root: Path, *, quantization: str = "none", oversampling: float | None = None) -> None:
        self._root = root
        self._int8 = quantization == "int8"
        self._params = _search_params(oversampling)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VectorStoreError(f"Cannot create the embedded store folder `{root}`: {exc.strerror or exc}.") from exc
        _check_folder(root)
        _refuse_foreign_collections(root)
        self._lock_fd = os.open(root / "writer.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise VectorStoreError(
                f"The embedded store folder `{root}` is held by another reindex process (one writer per folder); "
                "wait for it to finish. Readers never need the folder to themselves: use "
                "reindex.stores.edge.open_reader."
            ) from None
        if not (root / _MARKER).exists():
            atomic_write(root / _MARKER, (json.dumps({"format": STORE_FORMAT, "engine": "qdrant-edge"}) + "\n").encode())
        (root / _COLLECTIONS).mkdir(exist_ok=True)
        self._open: dict[str, _Open] = {}
        self._lock = threading.RLock()
        self._closed = False
        self.derived: dict[str, int] | None = None  # bytes linked/copied by the last delta generation
        self._sweep_all()

    def __repr__(self) -> str:
        return f"EdgeStore({str(self._root)!r})"

    # helpers ----------------------------------------------------------------------------------

    def _coll(self, name: str) -> Path:
        return self._root / _COLLECTIONS / name

    def _get(self, name: str) -> _Open:
        """The open working generation of a collection (or of an alias's target)."""
        if self._closed:
            raise VectorStoreError(f"The embedded store `{self._root}` is closed.")
        name = _resolve(self._root, name)
        if name in self._open:
            return self._open[name]
        coll = self._coll(name)
        record = _read_record(coll)
        gens = _generations(coll)
        if record is None or not gens:
            raise VectorStoreError(f"Collection `{name}` does not exist in `{self._root}`.")
        gen = gens[-1]
        with _edge_errors(f"open collection `{name}`"):
            shard = _load(_gen_dir(coll, gen))
        self._open[name] = opened = _Open(record, gen, shard)
        return opened

    def _writable(self, name: str) -> _Open:
        """The generation to write: the working one, or, if readers may have it (published), a delta
        generation derived from it (see ``_derive_generation``: sealed segments shared, the rest copied)."""
        o = self._get(name)
        if o.record.published != o.gen:
            return o
        with _edge_errors(f"derive a generation of collection `{o.record.name}` for writing"):
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
        self.derived = _derive_generation(_gen_dir(coll, gen), tmp)
        os.replace(tmp, _gen_dir(coll, new))
        fsync_dir(coll)
        return new, _load(_gen_dir(coll, new))

    def prepare_writes(self, name: str) -> None:
        """The caller is about to change ``name`` (an in-place sync, before it reads the points it replaces):
        open the generation it will write now. Reads before the first write then load that one generation;
        without this they load the published generation, and the first write closes it and loads the delta
        derived from it: two loads of the whole collection (each ~proportional to its points)."""
        with self._lock:
            if self._closed:
                raise VectorStoreError(f"The embedded store `{self._root}` is closed.")
            resolved = _resolve(self._root, name)
            if resolved not in self._open:
                coll = self._coll(resolved)
                record, gens = _read_record(coll), _generations(coll)
                if record is not None and gens and record.published == gens[-1]:
                    # Derived from the files as published (no WAL: wal_enabled=False), never loaded here.
                    with _edge_errors(f"derive a generation of collection `{resolved}` for writing"):
                        gen, shard = self._derive(resolved, gens[-1])
                    self._open[resolved] = _Open(record, gen, shard)
                    return
            self._writable(name)

    def _write_record(self, o: _Open, record: _Record) -> None:
        atomic_write(self._coll(record.name) / _RECORD, record.to_bytes())
        o.record = record

    def _sweep(self, name: str) -> None:
        """Delete generations readers can no longer reach, and copies a crash left behind."""
        coll = self._coll(name)
        record = _read_record(coll)
        if record is None:
            return
        for entry in os.listdir(coll):
            if entry.endswith(".tmp"):
                shutil.rmtree(coll / entry, ignore_errors=True)
            elif entry.endswith(".lease") and not (coll / entry.removesuffix(".lease")).exists():
                _remove_if_unleased(coll / entry.removesuffix(".lease"))
        if record.published is not None:
            for gen in _generations(coll):
                if gen < record.published:
                    _remove_if_unleased(_gen_dir(coll, gen))

    def _sweep_all(self) -> None:
        for coll in sorted((self._root / _COLLECTIONS).iterdir()):
            if not (coll / _RECORD).exists():  # a create that crashed before its record was written
                shutil.rmtree(coll, ignore_errors=True)
            else:
                self._sweep(coll.name)
        trash = self._root / _TRASH
        if trash.is_dir():
            for coll in sorted(trash.iterdir()):
                if all(_remove_if_unleased(_gen_dir(coll, g)) for g in _generations(coll)):
                    shutil.rmtree(coll, ignore_errors=True)

    # collections ------------------------------------------------------------------------------

    def collection_exists(self, name: str) -> bool:
        return (self._coll(name) / _RECORD).is_file()

    def create_collection(
        self, name: str, *, dimension: int, distance: str, bulk: bool = False,
        shard_number: int = 1, replication_factor: int = 1,
    ) -> None:
        """A new, unpublished population. ``bulk`` changes nothing here: HNSW is built in ``finish_bulk``."""
        if distance not in _DISTANCES:
            raise VectorStoreError(f"Unknown distance `{distance}`; use one of {', '.join(_DISTANCES)}.")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.startswith("."):
            raise VectorStoreError(f"Collection name `{name}` must use letters, digits, `_`, `-` and `.` only.")
        with self._lock:
            if self.collection_exists(name):
                raise VectorStoreError(f"Collection `{name}` already exists in `{self._root}`.")
            coll = self._coll(name)
            shutil.rmtree(coll, ignore_errors=True)  # a crashed create's leftovers
            # int8: the optimiser builds a 1-byte-per-dimension copy of each sealed segment's vectors, kept in
            # RAM and searched first; the float32 originals stay on disk (mapped) and rescore the candidates.
            quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) \
                if self._int8 else None
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dimension, distance=_DISTANCES[distance],
                                                               on_disk=True if self._int8 else None),
                                   quantization_config=quantization,
                                   wal_enabled=False, optimizers=qe.EdgeOptimizersConfig(
                                       indexing_threshold=_INDEXING_THRESHOLD_KB,
                                       default_segment_number=_SEGMENT_NUMBER))
            with _edge_errors(f"create collection `{name}`"):
                shard = qe.EdgeShard.create(str(_gen_dir(coll, 1)), config)
                shard.flush()
                record = _Record(name, dimension, distance, None, {})
                atomic_write(coll / _RECORD, record.to_bytes())  # the collection exists from here on
                fsync_dir(coll.parent)
            self._open[name] = _Open(record, 1, shard)

    def finish_bulk(self, name: str) -> None:
        """Build the HNSW and payload indexes of the working generation (blocking)."""
        with self._lock, _edge_errors(f"index collection `{name}`"):
            o = self._writable(name)
            o.shard.optimize()
            o.shard.flush()

    def create_payload_index(self, name: str, field: str, kind: str = "keyword") -> None:
        if kind not in _PAYLOAD_KINDS:
            raise VectorStoreError(f"Unknown payload index kind `{kind}`; use one of {', '.join(_PAYLOAD_KINDS)}.")
        with self._lock, _edge_errors(f"index payload field `{field}` of `{name}`"):
            o = self._writable(name)
            o.shard.update(qe.UpdateOperation.create_field_index(field, _PAYLOAD_KINDS[kind]))
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
            trash = self._root / _TRASH
            trash.mkdir(exist_ok=True)
            with _edge_errors(f"delete collection `{name}`"):
                # One rename takes it out of reach; readers that still hold a generation keep it until released.
                os.replace(self._coll(name), trash / f"{name}.{uuid.uuid4().hex[:8]}")
                fsync_dir(self._root / _COLLECTIONS)
                fsync_dir(trash)
            self._sweep_all()

    def list_collections(self) -> list[str]:
        return sorted(c.name for c in (self._root / _COLLECTIONS).iterdir() if (c / _RECORD).is_file())

    def collection_info(self, name: str) -> dict[str, Any]:
        """Points count, dimension, distance, shards and status of a collection (or an alias's target)."""
        with self._lock, _edge_errors(f"describe collection `{name}`"):
            o = self._get(name)
            return _info(o.shard, o.record)

    # points -----------------------------------------------------------------------------------

    def upsert(self, name: str, points: list[Point]) -> None:
        """Write ``points`` (same ids replace); durable (flushed and fsynced) when it returns."""
        if not points:
            return
        with self._lock:
            record = self._get(name).record
        # Converting points is most of an upsert's CPU: done outside the lock, so shard threads overlap it
        # with each other's engine writes and flushes.
        structs = []
        for p in points:
            if p.vector is None:
                raise VectorStoreError(f"Point `{p.id}` has no vector; every upserted point needs one.")
            vector = _as_list(p.vector)
            if len(vector) != record.dimension:
                raise VectorStoreError(
                    f"Point `{p.id}` has {len(vector)} dimensions; `{record.name}` holds {record.dimension}."
                )
            structs.append(qe.Point(p.id, vector, p.payload))
        op = qe.UpdateOperation.upsert_points(structs)
        with self._lock:
            self._apply(self._writable(name), op, f"upsert {len(points)} points into `{name}`")

    def delete_points(self, name: str, ids: list[str]) -> None:
        """Delete points by id (missing ids are ignored); durable when it returns."""
        if not ids:
            return
        with self._lock:
            o = self._writable(name)
            self._apply(o, qe.UpdateOperation.delete_points(list(ids)), f"delete {len(ids)} points from `{name}`")

    def overwrite_payload(self, name: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """Replace each listed point's whole payload (vectors untouched); durable when it returns."""
        if not payloads:
            return
        ops = [qe.UpdateOperation.overwrite_payload([pid], dict(p)) for pid, p in payloads.items()]
        with self._lock:
            o = self._writable(name)
            try:
                with _edge_errors(f"overwrite the payload of {len(ops)} points in `{name}`"):
                    for op in ops:
                        o.shard.update(op)
                    o.shard.flush()  # one durability point for the batch
            except BaseException:
                with contextlib.suppress(Exception):
                    o.shard.close()
                self._open.pop(o.record.name, None)
                raise

    def _apply(self, o: _Open, op: Any, action: str) -> None:
        try:
            with _edge_errors(action):
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
        with self._lock, _edge_errors(f"retrieve points from `{name}`"):
            return _retrieve(self._get(name).shard, ids, with_vectors)

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        """Exact number of points, or of one document's points (payload index on ``doc_id``)."""
        with self._lock, _edge_errors(f"count points in `{name}`"):
            return _count(self._get(name).shard, doc_id)

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        """Every point of a collection, page by page."""
        offset: Any = None
        while True:
            with self._lock, _edge_errors(f"scroll `{name}`"):
                page, offset = _scroll_page(self._get(name).shard, offset, batch, with_vectors)
            yield from page
            if offset is None:
                return

    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """Nearest points to ``vector`` in a collection or alias (optionally one document's), best first."""
        with self._lock, _edge_errors(f"query `{name}`"):
            return _query(self._get(name).shard, vector, limit, doc_id, where, self._params)

    # publishing and aliases -------------------------------------------------------------------

    def publish(self, name: str) -> None:
        """Make the working generation of ``name`` the one readers see (flush, one atomic record replace)."""
        with self._lock:
            o = self._get(name)
            if o.record.published == o.gen:
                return
            with _edge_errors(f"publish collection `{o.record.name}`"):
                # An in-place sync: let the engine's optimisers compact past their thresholds (seal an
                # appendable segment grown past indexing_threshold, vacuum a segment >20 % deleted, merge
                # when there are too many), so many syncs keep the segment count and disk bounded. Below
                # the thresholds this is a no-op. The engine deletes replaced segments' folders when the
                # shard closes: reopen, so readers never load a generation that still holds them.
                if o.record.published is not None and o.shard.optimize():
                    o.shard.flush()
                    o.shard.close()
                    o.shard = _load(_gen_dir(self._coll(o.record.name), o.gen))
                o.shard.flush()
                self._write_record(o, o.record.replace(published=o.gen))
                self._sweep(o.record.name)

    def get_alias(self, alias: str) -> str | None:
        return self.list_aliases().get(alias)

    def list_aliases(self) -> dict[str, str]:
        with _edge_errors("list aliases"):
            return _read_aliases(self._root)

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
        with _edge_errors("write aliases"):
            body = json.dumps({"aliases": dict(sorted(aliases.items()))}, indent=1) + "\n"
            atomic_write(self._root / _ALIASES, body.encode())

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


# --------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Held:
    """A published generation a reader has open, and the lease that keeps the writer from deleting it."""

    name: str
    gen: int
    record: _Record
    shard: Any
    lease_fd: int
    view: Path | None = None  # the private folder the shard was loaded from (:func:`_reader_view`)
    ino: int = 0  # the generation folder's inode: a store rebuilt under the same names is new data


class EdgeReader:
    """Read-only access from any process: every call follows the alias and the published generation.

    Safe while a writer builds a shadow, syncs in place, or swaps the alias: an answer comes from one
    published generation of one population.
    """

    embedded = True

    def __init__(self, root: Path, *, oversampling: float | None = None) -> None:
        self._params = _search_params(oversampling)
        _check_folder(root)
        if not is_edge_folder(root):
            raise NoStoreError(f"`{root}` is not a reindex embedded store (no {_MARKER}); nothing to read.")
        self._root = root
        self._held: dict[str, _Held] = {}
        self._lock = threading.RLock()
        _sweep_views()

    def __repr__(self) -> str:
        return f"EdgeReader({str(self._root)!r})"

    def _current(self, name: str) -> _Held:
        """The published generation ``name`` (alias or collection) resolves to now, opened if new.

        One generation is held per name asked for; when the alias or the collection moves on, the
        previous one is released (closed, lease dropped) so the writer can delete it.
        """
        for _ in range(20):
            target = _resolve(self._root, name)
            coll = self._root / _COLLECTIONS / target
            record = _read_record(coll)
            if record is None:
                raise VectorStoreError(f"Collection `{target}` does not exist in `{self._root}`.")
            if record.published is None:
                raise VectorStoreError(f"Collection `{target}` has not been published yet; query it after its swap.")
            held = self._held.get(name)
            if held is not None and held.name == target and held.gen == record.published and held.ino == _ino(
                    _gen_dir(coll, record.published)):
                return held
            opened = self._open_gen(target, record)
            if opened is None:
                continue  # the writer moved on between reading the record and taking the lease
            if held is not None:
                self._release(held)
            self._held[name] = opened
            return opened
        raise TransientError(f"Collection `{name}` in `{self._root}` keeps changing under the reader; retry.")

    def _open_gen(self, target: str, record: _Record) -> _Held | None:
        assert record.published is not None
        gen_dir = _gen_dir(self._root / _COLLECTIONS / target, record.published)
        lease = _lease_path(gen_dir)
        try:
            fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # The lease must be the file at that name (not one a sweep just unlinked) and the generation present.
            if os.fstat(fd).st_ino != os.stat(lease).st_ino or not gen_dir.is_dir():
                os.close(fd)
                return None
            try:
                view: Path | None = _reader_view(gen_dir)
            except FileNotFoundError:
                raise
            except OSError:
                view = None  # no room for a view either: load the generation itself (the engine writes there)
            try:
                with _edge_errors(f"open collection `{target}`"):
                    shard = _load(view or gen_dir)
            except BaseException:
                if view is not None:
                    shutil.rmtree(view, ignore_errors=True)
                    _VIEWS.discard(view)
                raise
        except FileNotFoundError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return _Held(target, record.published, record, shard, fd, view, _ino(gen_dir))

    def _release(self, held: _Held) -> None:
        with contextlib.suppress(Exception):
            held.shard.close()
        if held.view is not None:
            shutil.rmtree(held.view, ignore_errors=True)
            _VIEWS.discard(held.view)
        with contextlib.suppress(OSError):
            os.close(held.lease_fd)

    def get_alias(self, alias: str) -> str | None:
        return _read_aliases(self._root).get(alias)

    def list_aliases(self) -> dict[str, str]:
        return _read_aliases(self._root)

    def list_collections(self) -> list[str]:
        base = self._root / _COLLECTIONS
        return sorted(c.name for c in base.iterdir() if (c / _RECORD).is_file()) if base.is_dir() else []

    def collection_exists(self, name: str) -> bool:
        return (self._root / _COLLECTIONS / name / _RECORD).is_file()

    def collection_info(self, name: str) -> dict[str, Any]:
        with self._lock, _edge_errors(f"describe collection `{name}`"):
            held = self._current(name)
            return _info(held.shard, held.record)

    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """Nearest points in the published generation ``name`` resolves to now, best first."""
        with self._lock, _edge_errors(f"query `{name}`"):
            return _query(self._current(name).shard, vector, limit, doc_id, where, self._params)

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        with self._lock, _edge_errors(f"count points in `{name}`"):
            return _count(self._current(name).shard, doc_id)

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        with self._lock, _edge_errors(f"retrieve points from `{name}`"):
            return _retrieve(self._current(name).shard, ids, with_vectors)

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        """Every point of one published generation (the one current when the scroll starts)."""
        with self._lock:
            held = self._current(name)
        offset: Any = None
        while True:
            with self._lock, _edge_errors(f"scroll `{name}`"):
                page, offset = _scroll_page(held.shard, offset, batch, with_vectors)
            yield from page
            if offset is None:
                return

    # Writes belong to the one writer process (open_vector_store); a reader refuses them.

    def _read_only(self, *_args: Any, **_kwargs: Any) -> None:
        raise VectorStoreError(
            f"`{self._root}` is open read-only (open_reader); write through open_vector_store in the writer process."
        )

    create_collection = finish_bulk = prepare_writes = create_payload_index = delete_collection = _read_only
    upsert = delete_points = overwrite_payload = swap_alias = delete_alias = _read_only

    def close(self) -> None:
        with self._lock:
            for held in self._held.values():
                self._release(held)
            self._held.clear()
