"""A store folder on disk: its layout, the records of collections and aliases, and generations (deriving a
delta generation from a published one, sweeping those no reader holds). No engine calls: the writer and
the readers share these."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reindex.foundation.atomic import fsync_dir
from reindex.adapters.stores.vectors import VectorStoreError, one_line

__all__ = [
    "ALIASES",
    "COLLECTIONS",
    "MARKER",
    "RECORD",
    "STORE_FORMAT",
    "TRASH",
    "CorruptAliasesError",
    "LocalModeFolderError",
    "Record",
    "check_folder",
    "copy_sparse",
    "derive_generation",
    "gen_dir",
    "generations",
    "ino",
    "is_write_once",
    "is_edge_folder",
    "is_local_mode_folder",
    "lease_path",
    "make_lease",
    "read_aliases",
    "read_record",
    "remove_if_unleased",
    "resolve",
]

STORE_FORMAT = "reindex-edge/1"
MARKER = "reindex-store.json"
ALIASES = "aliases.json"
COLLECTIONS = "collections"
TRASH = "trash"
RECORD = "collection.json"
_GEN = re.compile(r"^gen-(\d{6})$")


class LocalModeFolderError(VectorStoreError):
    """The folder was made by qdrant-client local mode (the previous embedded store)."""


def is_local_mode_folder(folder: Path) -> bool:
    """True when ``folder`` holds a qdrant-client local-mode store (``meta.json`` + ``collection/``)."""
    return (folder / "meta.json").is_file() and not (folder / MARKER).exists()


def is_edge_folder(folder: Path) -> bool:
    """True when ``folder`` holds a store made by this module."""
    return (folder / MARKER).is_file()


@dataclass(frozen=True, slots=True)
class Record:
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
    def from_bytes(data: bytes) -> Record:
        d = json.loads(data)
        return Record(d["name"], int(d["dimension"]), d["distance"], d["published"], dict(d["payload_indexes"]))

    def replace(self, **changes: Any) -> Record:
        return Record(**{**{k: getattr(self, k) for k in self.__slots__}, **changes})


def gen_dir(coll: Path, gen: int) -> Path:
    """The folder of generation ``gen`` of the collection folder ``coll``."""
    return coll / f"gen-{gen:06d}"


def lease_path(folder: Path) -> Path:
    """The lease file beside the generation folder ``folder``."""
    return folder.with_name(folder.name + ".lease")


def make_lease(folder: Path) -> None:
    """Create the lease file of the generation ``folder`` if it has none, so that readers that cannot create files
    (a read-only mount of the store) can open it to lock; its directory entry is made durable by the record
    write that follows (same folder, fsynced)."""
    with contextlib.suppress(FileNotFoundError):
        os.close(os.open(lease_path(folder), os.O_WRONLY | os.O_CREAT, 0o644))


def generations(coll: Path) -> list[int]:
    """The generation numbers present in ``coll``, oldest first."""
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


def read_record(coll: Path) -> Record | None:
    try:
        return Record.from_bytes((coll / RECORD).read_bytes())
    except FileNotFoundError:
        return None


class CorruptAliasesError(VectorStoreError):
    """``aliases.json`` cannot be read as ``{"aliases": {alias: collection}}``."""


def read_aliases(root: Path) -> dict[str, str]:
    path = root / ALIASES
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


def resolve(root: Path, name: str) -> str:
    """The collection ``name`` names: an alias's target, or itself."""
    return read_aliases(root).get(name, name)


def check_folder(root: Path) -> None:
    if is_local_mode_folder(root):
        raise LocalModeFolderError(
            f"`{root}` holds an index made by the previous embedded store (qdrant-client local mode). "
            f"Convert it once with `python -m reindex.adapters.stores.migrate {root} {root}.edge` and set store.path "
            f"to `{root}.edge`, or keep it as it is with store.backend: local."
        )


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


def is_write_once(segment: Path, rel: str) -> bool:
    """Whether ``rel`` (a path inside ``segment``) is a file the engine never writes after building it."""
    return (segment / _SEALED_SEGMENT_MARK).is_file() and any(p.match(rel) for p in _WRITE_ONCE)


def derive_generation(src: Path, dst: Path) -> dict[str, int]:
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
            if segment is not None and is_write_once(segment, inside):
                os.link(source, target)
                sizes["linked"] += source.stat().st_size
            else:
                sizes["copied"] += copy_sparse(source, target)
        for d in dirs:
            (dst / rel / d).mkdir(exist_ok=True)
    for root, _dirs, _files in os.walk(dst):
        fsync_dir(root)
    return sizes


def copy_sparse(src: Path, dst: Path, *, sync: bool = True) -> int:
    """Copy a file's data extents only (holes stay holes), fsync it (``sync``); returns the bytes copied."""
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
        if sync:
            os.fsync(fout.fileno())
    return copied


def ino(path: Path) -> int:
    """The inode of ``path`` (0: gone), to tell a generation from a later one made under the same name."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return 0


def remove_if_unleased(folder: Path) -> bool:
    """Delete the generation folder ``folder`` if no reader holds it (its lease is free); True when it is gone."""
    lease = lease_path(folder)
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
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            lease.unlink()  # while still locked: a reader that opens the name now gets a new inode
        return True
    finally:
        os.close(fd)
