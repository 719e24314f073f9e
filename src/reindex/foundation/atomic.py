"""Durable, atomic file writes: the one place that writes a file the project keeps.

A reader sees either the old content or the new, never a torn file, and after a return the new
content and its name survive a power loss (data fsync, rename, folder fsync)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

__all__ = ["TMP_PREFIX", "atomic_write", "atomic_write_text", "fsync_dir", "make_folders", "write_temp"]

TMP_PREFIX = ".tmp-"


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename or create in ``folder`` durable. Best effort: some platforms cannot open a folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_folders(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each one's name made durable in its parent (a folder
    created for a first plan or approval would otherwise vanish with the file in it on a power loss)."""
    missing = []
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for f in reversed(missing):
        try:
            f.mkdir()
        except FileExistsError:
            continue  # another writer made it meanwhile: its creator syncs it
        fsync_dir(f.parent)


def write_temp(path: Path, data: bytes) -> Path:
    """Write ``data`` to a fresh, fsynced temp file beside ``path`` and return the temp file's path."""
    make_folders(path.parent)
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def atomic_write(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically and durably; returns the path."""
    path = Path(path)
    tmp = write_temp(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write` for UTF-8 text."""
    return atomic_write(path, text.encode("utf-8"))
