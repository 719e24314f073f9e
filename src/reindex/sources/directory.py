"""A folder of text files: walked recursively in sorted order, one file read at a time."""

from __future__ import annotations

from collections.abc import Callable

import os
from datetime import UTC, datetime
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from reindex.config import SourceConfig
from reindex.errors import SourceError
from reindex.sources.base import Admission, BadDocument, Document, ScanReport, title_of
from reindex.sources.cursors import Changes, Cursor, listing_changes

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
    (:func:`reindex.sources.base.title_of`), ``modified`` (UTC ISO-8601 of the file's mtime, seconds)."""
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
    lower = name.lower()
    return any(fnmatchcase(lower, p.lower()) for p in patterns)


class DirectorySource:
    """Files under a folder whose names match ``include``; doc id = POSIX path relative to the folder.

    Order: entries of each folder sorted by name, folders entered where they sort, so the order is
    the same on every machine. Hidden files and folders (``.git``, ``.DS_Store``) are not part of
    the corpus; symlinked folders are not followed (no cycles).
    """

    def __init__(self, cfg: SourceConfig, root: Path) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        self.root = root
        check_file_fields(cfg.metadata_fields, str(root))

    def describe(self) -> str:
        return f"directory {self.root} (include {', '.join(self.cfg.include)})"

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="file", keep=keep)
        for n, (doc_id, path) in enumerate(self._files(admission.report), 1):
            if admission.skip(doc_id, n):
                continue
            try:
                data = path.read_bytes()
            except OSError as err:
                admission.reject(doc_id, f"unreadable: {err.strerror or err}")
                continue
            meta = file_metadata(self.cfg.metadata_fields, doc_id, path, data)
            doc = admission.admit(doc_id, data, n, metadata=meta)
            if doc is not None:
                yield doc

    def _files(self, report: ScanReport) -> Iterator[tuple[str, Path]]:
        # Depth-first; a folder's entries are pushed in reverse name order so they pop in order.
        pending = self._entries(self.root, report)
        while pending:
            name, path, is_dir = pending.pop()
            if is_dir:
                pending.extend(self._entries(path, report))
            elif not matches(name, self.cfg.include):
                report.skipped += 1
            else:
                yield path.relative_to(self.root).as_posix(), path

    def _entries(self, folder: Path, report: ScanReport) -> list[tuple[str, Path, bool]]:
        """(name, path, is folder) of the visible files and real folders in ``folder``, reverse sorted."""
        try:
            with os.scandir(folder) as it:
                items = [
                    (e.name, Path(e.path), e.is_dir(follow_symlinks=False))
                    for e in it
                    if not e.name.startswith(".") and (e.is_dir(follow_symlinks=False) or e.is_file())
                ]
        except OSError as err:
            rel = folder.relative_to(self.root).as_posix()
            report.add_bad(BadDocument(f"{rel}/", f"unreadable: folder: {err.strerror or err}"))
            return []
        return sorted(items, key=lambda t: t[0], reverse=True)

    # -- the cursor: a listing of (size, mtime_ns) per file; only files whose pair moved are opened ----------

    cursor_kind = "listing"

    def position(self) -> Cursor:
        """Every file's (size, mtime_ns), from the folder's metadata only."""
        return Cursor.of("listing", {}, dict(self._signatures(ScanReport())))

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """Files added, or whose size or mtime moved since ``since`` (read and hashed), and files gone."""
        return listing_changes(self._signatures(report), since, self._read_wanted, report, "files")

    def _signatures(self, report: ScanReport) -> Iterator[tuple[str, str]]:
        for doc_id, path in self._files(report):
            try:
                st = path.stat()
            except OSError:
                yield doc_id, "unreadable"  # never "gone": it is read, and reported as unreadable
                continue
            yield doc_id, f"{st.st_size}:{st.st_mtime_ns}"

    def _read_wanted(self, wanted: set[str], report: ScanReport) -> Iterator[Document]:
        """The files of ``wanted`` through :meth:`scan` (the one place files are opened), their bad ones
        reported (the walk's own findings were reported by the listing)."""
        scratch = ScanReport()
        for doc in self.scan(scratch, keep=wanted.__contains__):
            report.add(doc)
            yield doc
        for bad in scratch.bad:
            if bad.doc_id in wanted:
                report.add_bad(bad)
