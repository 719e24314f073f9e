"""Cursors: what a source remembers to find its changes without reading unchanged content.

Three kinds (DESIGN.md, "cursor"):

* ``listing`` (a folder, an S3 prefix): each document's signature as the listing gives it, (size, mtime_ns)
  of a file, (ETag, LastModified, size) of an object. A document whose signature moved is read and hashed;
  the others are not opened.
* ``mark`` (Parquet or PostgreSQL with ``source.cursor``): the highest value of a monotonic column that the
  population holds. Rows at or past it are read (``>=``: a row that ties with the mark is read again and
  told apart by its content hash, so a row written with the mark's value after the last read is not missed);
  removals come from a tombstone column (``source.deleted_field``) or an id-only listing.
* ``offset`` (a change log): the byte offset up to which the log is folded into the population, with a
  digest of the bytes just before it, so that a rewritten or truncated log is refused, never misread.

A source that can be tracked has a ``cursor_kind`` and implements :class:`Tracked`. A JSON Lines file has
none: every sync reads it whole (:func:`full_read_reason`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from reindex.adapters.sources.base import Document, ScanReport

__all__ = ["Changes", "Cursor", "Tracked", "full_read_reason", "listing_changes", "tracker_of"]

CURSOR_VERSION = "reindex/cursor/v1"
KINDS = ("listing", "mark", "offset")


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a source stood: ``kind``, a small ``position`` (JSON: a mark, an offset) and, for a listing,
    ``entries`` (doc id → signature). ``digest`` covers all three (entries in id order)."""

    kind: str
    position: Mapping[str, Any]
    entries: Mapping[str, str]
    digest: str

    @classmethod
    def of(cls, kind: str, position: Mapping[str, Any] | None = None, entries: Mapping[str, str] | None = None) -> Cursor:
        if kind not in KINDS:
            raise ValueError(f"unknown cursor kind {kind!r}")
        position, entries = dict(position or {}), dict(entries or {})
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps([CURSOR_VERSION, kind, position], sort_keys=True, separators=(",", ":")).encode())
        for doc_id in sorted(entries):
            h.update(f"\n{doc_id}\0{entries[doc_id]}".encode())
        return cls(kind, position, entries, h.hexdigest())

    def restricted(self, ids: Collection[str]) -> Cursor:
        """This cursor with only the entries of ``ids`` (a listing: the documents a population holds, so that
        a document it does not hold, a bad one, is read again next time and reported again)."""
        if self.kind != "listing":
            return self
        return Cursor.of(self.kind, self.position, {d: s for d, s in self.entries.items() if d in ids})

    def describe(self) -> str:
        """One line: ``listing of 703 documents``, ``mark 2026-12-01 10:00:00+00``, ``offset 1,234``."""
        if self.kind == "listing":
            return f"listing of {len(self.entries):,} documents"
        if self.kind == "mark":
            return f"mark {self.position.get('mark')}"
        return f"offset {int(self.position.get('offset', 0)):,}"


@dataclass(frozen=True, slots=True)
class Changes:
    """What a source holds now relative to a cursor, found without reading unchanged content.

    ``documents``: read because their metadata moved past the cursor (an edit, an addition; their content
    may still equal what the population holds: the caller compares content hashes), in source order.
    ``listed``: every id the source holds now, when the kind lists them (a listing, an id-only scan); None
    when the feed names its removals itself. ``deleted``: ids a tombstone or a delete entry removed.
    ``cursor``: where the source stands after these changes. ``digest``: what a plan records and apply's
    drift check recomputes (the new cursor, the documents read and their hashes, the removals)."""

    documents: tuple[Document, ...]
    listed: frozenset[str] | None
    deleted: frozenset[str]
    cursor: Cursor
    bytes_read: int
    digest: str = ""
    how: str = ""  # one line: what was listed or read

    @classmethod
    def of(cls, documents: Iterable[Document], listed: Collection[str] | None, deleted: Collection[str],
           cursor: Cursor, bytes_read: int, how: str, listed_digest: str = "") -> Changes:
        docs = tuple(documents)
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{CURSOR_VERSION}\0{cursor.digest}\0{listed_digest}\n".encode())
        for d in docs:
            h.update(f"{d.doc_id}\0{d.content_hash}\n".encode())
        h.update(b"deleted\n")
        for doc_id in sorted(deleted):
            h.update(f"{doc_id}\n".encode())
        return cls(docs, frozenset(listed) if listed is not None else None, frozenset(deleted), cursor, bytes_read,
                   h.hexdigest(), how)

    def gone_from(self, since: Cursor) -> set[str] | None:
        """The ids a listing cursor ``since`` named that the listing no longer has: where a listing's removals are
        among the documents a population holds (its committed cursor names every document it holds: every one it
        took was listed, and one read and unreadable keeps its entry), found without reading every id it holds.
        None when this cannot tell (a feed names its removals; a mark's id scan has no entries)."""
        if self.listed is None or since.kind != "listing" or not since.entries:
            return None
        return {d for d in since.entries if d not in self.listed}

    def removed(self, known: Collection[str]) -> set[str]:
        """The ids of ``known`` (what the population holds) that the source no longer has."""
        gone = {d for d in self.deleted if d in known}
        if self.listed is not None:
            gone |= {d for d in known if d not in self.listed}
        return gone - {d.doc_id for d in self.documents}


@runtime_checkable
class Tracked(Protocol):
    """A source that finds its changes from a cursor (``cursor_kind`` is not None)."""

    cursor_kind: str | None

    def position(self) -> Cursor:
        """Where the source stands now, from metadata only (a listing, a column's maximum, the log's end):
        taken before a full read, so that what the read saw is at or past it."""
        ...

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """What changed since ``since``, reading the content of those documents only; bad input goes into
        ``report``."""
        ...


def tracker_of(source: Any) -> Tracked | None:
    """``source`` if it can be tracked by a cursor (as configured), else None."""
    return source if getattr(source, "cursor_kind", None) else None


def full_read_reason(source: Any) -> str:
    """Why ``source`` is read whole by every sync, or "" when it has a cursor."""
    if tracker_of(source) is not None:
        return ""
    why = getattr(source, "no_cursor_reason", None)
    return why() if callable(why) else f"{type(source).__name__} has no cursor"


def listing_changes(listing: Iterable[tuple[str, str]], since: Cursor | None,
                    read: Callable[[set[str], ScanReport], Iterator[Document]], report: ScanReport,
                    what: str = "documents") -> Changes:
    """Changes of a listing source: list every document's signature (``listing``: doc id, signature, in
    source order), read (``read(wanted ids, report)``) only those whose signature is not ``since``'s.

    The new cursor holds each listed document's signature, except for a document that was read and not
    admitted (bad now, or gone before it was read): it keeps ``since``'s signature (or none), so it is read
    and reported again next time rather than taken as current."""
    now: dict[str, str] = {}
    wanted: set[str] = set()
    old = since.entries if since is not None else {}
    for doc_id, sig in listing:
        now[doc_id] = sig
        if old.get(doc_id) != sig:
            wanted.add(doc_id)
    docs = list(read(wanted, report)) if wanted else []
    admitted = {d.doc_id for d in docs}
    entries: dict[str, str] = {}
    for doc_id, sig in now.items():
        if doc_id not in wanted or doc_id in admitted:
            entries[doc_id] = sig
        elif doc_id in old:
            entries[doc_id] = old[doc_id]
    size = sum(d.size for d in docs)
    how = f"listed {len(now):,} {what} (metadata only), read {len(wanted):,} whose metadata moved ({_human(size)})"
    return Changes.of(docs, now.keys(), (), Cursor.of("listing", {}, entries), size, how)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"
