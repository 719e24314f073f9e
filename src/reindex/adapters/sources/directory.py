"""A folder of text files: walked recursively in sorted order, one file read at a time."""

from __future__ import annotations

from collections.abc import Callable

import errno
import os
from datetime import UTC, datetime
from collections.abc import Iterator
import fnmatch
import functools
import re
from pathlib import Path
from typing import Any

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.adapters.sources.base import Admission, BadDocument, Document, ScanReport, special_file_kind, title_of
from reindex.adapters.sources.cursors import Changes, Cursor, listing_changes

__all__ = ["DirectorySource", "FILE_FIELDS", "check_file_fields", "file_metadata", "matches"]

# Metadata a directory source can carry, each opt-in by naming it in ``source.metadata_fields``.
FILE_FIELDS = ("path", "title", "modified")


def check_file_fields(fields: list[str], where: str) -> None:
    """Refuse metadata field names a directory source cannot fill."""
    unknown = [f for f in fields if f not in FILE_FIELDS]
    if unknown:
        raise SourceError(f"{where}: source.metadata_fields {', '.join(map(repr, unknown))}: a directory source "
                          f"offers {', '.join(FILE_FIELDS)}")


def file_metadata(fields: list[str], rel: str, path: Path, data: bytes) -> tuple[tuple[str, object], ...]:
    """The configured file attributes: ``path`` (POSIX, relative to the folder: the doc id), ``title``
    (:func:`reindex.adapters.sources.base.title_of`), ``modified`` (UTC ISO-8601 of the file's mtime, seconds)."""
    out = []
    for f in fields:
        if f == "path":
            out.append((f, rel))
        elif f == "title":
            out.append((f, title_of(rel, data)))
        elif f == "modified":
            mtime = datetime.fromtimestamp(int(path.stat().st_mtime), tz=UTC)
            out.append((f, mtime.isoformat().replace("+00:00", "Z")))
    return tuple(out)


def matches(name: str, patterns: list[str]) -> bool:
    """Whether a file name matches any include pattern (case-insensitive, like ``*.md`` ~ ``A.MD``)."""
    return _include_pattern(tuple(patterns)).match(name.lower()) is not None


@functools.lru_cache(maxsize=64)
def _include_pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One compiled expression for all of ``patterns`` (lower-cased), as ``fnmatchcase`` reads each: a folder
    listing asks it once per file, so the patterns are translated once per source, not per file."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p.lower())})" for p in patterns) or "(?!)")


class DirectorySource:
    """Files under a folder whose names match ``include``; doc id = POSIX path relative to the folder.

    Order: entries of each folder sorted by name, folders entered where they sort, so the order is
    the same on every machine. Hidden files and folders (``.git``, ``.DS_Store``) are not part of
    the corpus.

    Nothing outside the folder is read (DESIGN invariant 16): a symlink whose target resolves outside the
    folder's real path is a bad document (``outside the source: …``), never read, and a file is checked
    again once opened (where it really is), so a link swapped in during the scan is caught too. Symlinks to
    files inside the folder are read under the link's name; symlinked folders inside it are not entered
    (their files are read under their own path). ``source.follow_symlinks: true`` reads links wherever they
    point and enters linked folders outside the folder (a folder that links back to one it is inside is a
    loop: reported, not entered). Hard links cannot be told from files and are read.
    """

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("include", "follow_symlinks", "metadata_fields")

    def __init__(self, cfg: SourceConfig, root: Path) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        self.root = root
        self.real_root = Path(os.path.realpath(root))
        check_file_fields(cfg.metadata_fields, str(root))

    def describe(self) -> str:
        return f"directory {self.root} (include {', '.join(self.cfg.include)})"

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="file", keep=keep)
        for n, (doc_id, path, problem) in enumerate(self._files(admission.report), 1):
            if admission.skip(doc_id, n):
                continue
            doc = self._document(admission, n, doc_id, path, problem)
            if doc is not None:
                yield doc

    def _document(self, admission: Admission, n: int, doc_id: str, path: str, problem: str | None) -> Document | None:
        """The ``n``-th listed file as a document, or None after reporting why it cannot be one."""
        if problem is not None:
            admission.reject(doc_id, problem)
            return None
        path = Path(path)
        try:
            data = self._read(path)
        except _Outside as out:
            admission.reject(doc_id, _outside(str(out)))
            return None
        except OSError as err:
            admission.reject(doc_id, f"unreadable: {err.strerror or err}")
            return None
        meta = file_metadata(self.cfg.metadata_fields, doc_id, path, data)
        return admission.admit(doc_id, data, n, metadata=meta)

    def _read(self, path: Path) -> bytes:
        """The file's bytes, after checking where the opened file really is (Linux: /proc/self/fd)."""
        with path.open("rb") as f:
            if not self.cfg.follow_symlinks:
                proc = f"/proc/self/fd/{f.fileno()}"
                where = Path(os.readlink(proc)) if os.path.islink(proc) else Path(os.path.realpath(path))
                if not where.is_relative_to(self.real_root):
                    raise _Outside(str(where))
            return f.read()

    def _files(self, report: ScanReport) -> Iterator[tuple[str, str, str | None]]:
        """(doc id, path, why it cannot be read or None) of every file that matches ``include``.

        Paths are strings joined as the walk goes (a ``Path`` per file cost ~70 % of listing 100,000 files:
        bench/RESULTS.md, "Source cursors"); a file becomes a ``Path`` only when it is read."""
        # Depth-first; a folder's entries are pushed in reverse name order so they pop in order.
        include = _include_pattern(tuple(self.cfg.include))
        pending = self._entries(str(self.root), "", report, (self.real_root,))
        while pending:
            name, path, rel, kind, detail = pending.pop()
            if kind == "dir":
                pending.extend(self._entries(path, rel + "/", report, detail))
            elif kind == "bad-dir":
                report.add_bad(BadDocument(f"{rel}/", detail))
            elif include.match(name.lower()) is None:
                report.skipped += 1
            else:
                yield rel, path, detail

    def _entries(self, folder: str, prefix: str, report: ScanReport,
                 ancestors: tuple[Path, ...]) -> list[tuple[str, str, str, str, Any]]:
        """(name, path, doc id, kind, detail) of the visible entries of ``folder`` (whose doc ids start with
        ``prefix``), reverse sorted: kind ``dir`` (detail: the real paths of the folders it is inside, for loops),
        ``file`` (detail: None, or why a linked file is not read) or ``bad-dir`` (detail: why a linked folder is
        not entered). A FIFO, socket or device whose name matches ``include`` is a bad document (never opened:
        reading a FIFO waits for a writer forever)."""
        try:
            with os.scandir(folder) as it:
                items = []
                for e in it:
                    name = e.name
                    if name.startswith("."):
                        continue
                    path, rel = e.path, prefix + name
                    if e.is_symlink():
                        item = self._link(Path(path), ancestors)
                        if item is not None:
                            items.append((name, path, rel, item[0], item[1]))
                    elif e.is_dir(follow_symlinks=False):
                        # Loops can only come through followed links: only then are real paths needed.
                        inner = (*ancestors, Path(os.path.realpath(path))) if self.cfg.follow_symlinks else ancestors
                        items.append((name, path, rel, "dir", inner))
                    elif e.is_file(follow_symlinks=False):
                        items.append((name, path, rel, "file", None))
                    elif matches(name, self.cfg.include):
                        kind = special_file_kind(e.stat(follow_symlinks=False).st_mode)
                        report.add_bad(BadDocument(rel, f"unreadable: {kind or 'a folder'}, not a regular file"))
        except OSError as err:
            report.add_bad(BadDocument(f"{prefix[:-1] or '.'}/", f"unreadable: folder: {err.strerror or err}"))
            return []
        return sorted(items, key=lambda t: t[0], reverse=True)

    def _link(self, path: Path, ancestors: tuple[Path, ...]) -> tuple[str, Any] | None:
        """(kind, detail) of a symlink in the folder, what it is to the scan: a file to read (or not, and why), a
        folder to enter, a folder not to enter (and why), or None (a folder inside the source: read under its own
        path)."""
        try:
            target = Path(os.path.realpath(path, strict=True))
        except OSError as err:
            if err.errno == errno.ELOOP:
                return "file", "unreadable: symlink loop"
            return "file", f"unreadable: broken symlink (its target {os.readlink(path)} does not exist)"
        inside = target.is_relative_to(self.real_root)
        if target.is_dir():
            if inside:
                return None
            if not self.cfg.follow_symlinks:
                return "bad-dir", _outside(str(target), "folder")
            if any(a.is_relative_to(target) for a in ancestors):
                return "bad-dir", f"unreadable: symlink loop (links back to {target}, a folder it is inside)"
            return "dir", (*ancestors, target)
        if inside or self.cfg.follow_symlinks:
            return "file", None
        return "file", _outside(str(target))


    # -- the cursor: a listing of (size, mtime_ns) per file; only files whose pair moved are opened ----------

    cursor_kind = "listing"

    def position(self) -> Cursor:
        """Every file's (size, mtime_ns), from the folder's metadata only."""
        files = self._listing(ScanReport())
        return Cursor.of("listing", {}, {d: _signature(p, problem) for d, (p, problem) in files.items()})

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """Files added, or whose size or mtime moved since ``since`` (read and hashed), and files gone: one walk
        of the folder; only the files whose pair moved are opened."""
        files = self._listing(report)

        def read(wanted: set[str], into: ScanReport) -> Iterator[Document]:
            admission = Admission(into, unit="file")
            for n, (doc_id, (path, problem)) in enumerate(files.items(), 1):  # in the walk's order
                if doc_id in wanted:
                    doc = self._document(admission, n, doc_id, path, problem)
                    if doc is not None:
                        yield doc

        signatures = ((d, _signature(p, problem)) for d, (p, problem) in files.items())
        return listing_changes(signatures, since, read, report, "files")

    def _listing(self, report: ScanReport) -> dict[str, tuple[str, str | None]]:
        return {doc_id: (path, problem) for doc_id, path, problem in self._files(report)}


def _signature(path: str, problem: str | None) -> str:
    """A file's (size, mtime_ns); ``unreadable`` for one that cannot be stat'ed or is not read (a link out of
    the folder): such a file is never taken as gone, it is read (or refused) and reported every time."""
    if problem is not None:
        return "unreadable"
    try:
        st = os.stat(path)
    except OSError:
        return "unreadable"
    return f"{st.st_size}:{st.st_mtime_ns}"


class _Outside(Exception):
    """An opened file turned out to be outside the source (a symlink swapped in during the scan)."""


def _outside(target: str, what: str = "file") -> str:
    return (f"outside the source: symlink to a {what} outside the source folder ({target}); not read (set "
            "source.follow_symlinks: true to read it)")
