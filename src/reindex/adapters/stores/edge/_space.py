"""What a store's file system allocates for the engine's files, and the checks that keep a full disk from
killing a process with SIGBUS.

The engine preallocates sparse files (an appendable segment's vector chunk of 32 MiB, payload-index pages of
4 MiB, flags and trackers of 1 MiB) and reads and writes most of them through shared memory maps. A page the
kernel cannot allocate under a mapping is a SIGBUS, not an error: the process dies with no message and its lock
stays until its lease ends. Where that happens (measured with qdrant-edge 0.9.0, bench/disk_alloc.py):

* a disk file system (ext4, xfs, btrfs) allocates a hole when it is written: a write through a mapping on a
  full disk (an upsert) is a SIGBUS; loading a generation allocates nothing;
* a memory file system (tmpfs) allocates a hole also when it is read through a mapping, and a load populates
  (reads) every mapped file but the payload storage's: the first load of a generation allocates its
  preallocated files in full (the sample's 0.8 MiB generation: 40.3 MiB), and a full tmpfs is a SIGBUS there;
* the engine's optimiser (the index build, compaction) checks its own space and fails with an error.

So: before a load on a memory file system the holes the load would fill are allocated with ``fallocate``
(:func:`prefill`: a full file system is an error there, with the numbers); before every write the free space is
checked against the bytes it writes (:func:`check_write`). The estimates a command's guard adds up
(:func:`load_bytes`, :func:`generation_copy_bytes`) come from the same rules.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from pathlib import Path

from reindex.adapters.stores.edge._generations import COLLECTIONS, gen_dir, generations, is_write_once
from reindex.adapters.stores.vectors import VectorStoreError

__all__ = [
    "WRITE_MARGIN_BYTES",
    "check_free",
    "check_write",
    "file_system",
    "fills_holes_when_mapped",
    "free_bytes",
    "generation_copy_bytes",
    "load_bytes",
    "newest_load_bytes",
    "populated_by_load",
    "prefill",
]

# File systems whose files are memory pages (shmem): a hole read through a shared mapping is allocated.
_MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"})
# Files a load leaves sparse (the payload storage is read with reads, not populated through its mapping).
_NOT_POPULATED = re.compile(r"(^|/)payload_storage/")
# Room every write keeps beyond three times the bytes it writes: the engine touches a page or two of a dozen
# files (trackers, flags, id mappings, payload-index pages) besides the data.
WRITE_MARGIN_BYTES = 1 << 20


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def file_system(path: str | os.PathLike[str]) -> str:
    """The type of the file system holding ``path`` (``tmpfs``, ``ext4``, ...; "" when unknown), from the
    mount table: the longest mount point above it, the last mounted there."""
    try:
        table = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    real = os.path.realpath(path)
    best, kind = "", ""
    for line in table:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[1])  # \040 is a space
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind


def fills_holes_when_mapped(path: str | os.PathLike[str]) -> bool:
    """Whether reading a sparse file through a mapping allocates its holes on ``path``'s file system."""
    return file_system(path) in _MEMORY_FILE_SYSTEMS


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Free bytes (for this user) on the file system of ``path``, or of its nearest existing parent."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def _allocated(st: os.stat_result) -> int:
    return min(st.st_size, st.st_blocks * 512)


def populated_by_load(rel: str) -> bool:
    """Whether a load reads the file ``rel`` (a path inside a generation) through its mapping, in full."""
    return not _NOT_POPULATED.search(rel)


def _holes(folder: Path) -> list[tuple[Path, int, int]]:
    """(file, size, allocated bytes) of the regular files in ``folder`` a load populates, with holes."""
    out = []
    for root, _dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder).as_posix()
        for f in files:
            if not populated_by_load(f"{rel}/{f}"):
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, f))
                if not os.path.islink(os.path.join(root, f)) and st.st_blocks * 512 < st.st_size:
                    out.append((Path(root) / f, st.st_size, st.st_blocks * 512))
    return out


def load_bytes(folder: Path) -> int:
    """What loading the generation ``folder`` allocates: on a memory file system the holes of the files the
    engine populates, elsewhere nothing."""
    if not fills_holes_when_mapped(folder):
        return 0
    return sum(size - allocated for _path, size, allocated in _holes(folder))


def newest_load_bytes(root: str | os.PathLike[str], collection: str) -> int:
    """:func:`load_bytes` of ``collection``'s newest generation in the store ``root`` (0 when it has none)."""
    coll = Path(root) / COLLECTIONS / collection
    gens = generations(coll)
    return load_bytes(gen_dir(coll, gens[-1])) if gens else 0


def generation_copy_bytes(folder: str | os.PathLike[str], collection: str) -> int:
    """At most the bytes a delta generation of ``collection``'s newest generation allocates
    (:func:`~reindex.adapters.stores.edge._generations.derive_generation`, then its load): the allocated blocks of every
    file it copies, and on a memory file system also the holes of those the load populates; the write-once
    files of sealed segments it hard-links cost nothing. 0 when the collection does not exist."""
    coll = Path(folder) / COLLECTIONS / collection
    gens = generations(coll)
    if not gens:
        return 0
    src = gen_dir(coll, gens[-1])
    memory = fills_holes_when_mapped(src)
    total = 0
    for root, _dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        segment = src / rel.parts[0] / rel.parts[1] if len(rel.parts) >= 2 and rel.parts[0] == "segments" else None
        for f in files:
            if segment is not None and is_write_once(segment, (Path(root) / f).relative_to(segment).as_posix()):
                continue
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, f))
                populated = memory and populated_by_load((rel / f).as_posix())
                total += st.st_size if populated else _allocated(st)
    return total


class _NoSpace(VectorStoreError):
    """Not enough free space for what the engine is about to map or write."""


def prefill(folder: Path, what: str) -> None:
    """On a memory file system, allocate now the holes a load of the generation ``folder`` would fill through
    its mappings (``fallocate``), so that a full file system is this one-line error and never a SIGBUS inside the
    engine; on other file systems nothing. ``what``: the load, for the message. Files this process may not
    write (a read-only store) are left as they are."""
    if not fills_holes_when_mapped(folder):
        return
    holes = _holes(folder)
    need = sum(size - allocated for _path, size, allocated in holes)
    if not need:
        return
    kind = file_system(folder)
    free = free_bytes(folder)

    def no_space() -> _NoSpace:
        return _NoSpace(
            f"not enough free space in `{folder}` to {what}: the engine maps {_mib(need)} of preallocated files "
            f"there, which {kind} allocates when they are mapped, and {_mib(free)} is free; free some space (or put "
            "store.path on a disk file system) and run the command again")

    if need > free:
        raise no_space()
    for path, size, _allocated_bytes in holes:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT):
                continue
            raise
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                free = free_bytes(folder)
                raise no_space() from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
        finally:
            os.close(fd)


def check_write(folder: Path, data_bytes: int, what: str) -> None:
    """Refuse a write of about ``data_bytes`` into the store ``folder`` unless three times that and
    :data:`WRITE_MARGIN_BYTES` are free: the engine writes through mappings, and a page it cannot allocate
    there is a SIGBUS (a disk file system, measured), not an error."""
    check_free(folder, 3 * data_bytes + WRITE_MARGIN_BYTES, what)


def check_free(folder: Path, need: int, what: str) -> None:
    """Refuse (one line) unless ``need`` bytes are free on the file system of ``folder``."""
    free = free_bytes(folder)
    if free < need:
        raise _NoSpace(f"not enough free space in `{folder}` to {what}: it needs about {_mib(need)} and "
                       f"{_mib(free)} is free; free some space and run the command again (finished work is kept)")
