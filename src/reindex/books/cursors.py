"""A population's committed cursor, kept beside its chunk manifest, and the cursor a running sync holds.

Layout under the state URI::

    indexes/<index>/populations/<collection>/cursor.json               the cursor the population holds
    indexes/<index>/populations/<collection>/cursors/<digest>.json     a cursor's kind and position
    indexes/<index>/populations/<collection>/cursors/<digest>.parquet  a listing cursor's entries (doc id, signature)

``cursor.json`` names the cursor (by digest), the source it belongs to (:func:`source_key`: a cursor of
another source, or of the same source configured otherwise, is never used), when the population's content
was last compared with the whole source (``verified_at``: a build, ``reindex sync --verify``) and the run
that committed it. It is written when a build or an in-place sync commits (after its catch-up), so it always
describes what the population holds: every document it holds was read at or past that cursor. Cursors are
content-addressed and immutable; a commit keeps the new one and the one it replaced (a resumed run checks
its plan against the cursor it started from) and deletes older ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from reindex.domain.config import SourceConfig
from reindex.errors import StateError
from reindex.domain.identity import digest_json
from reindex.books.layout import Books
from reindex.books.manifests import read_json, write_json
from reindex.adapters.sources import Cursor, Tracked, open_source, tracker_of
from reindex.adapters.stores.objects import ObjectStore
from reindex.foundation.tables import TableError, columns_from_parquet, parquet_from_columns

__all__ = ["Committed", "Tracking", "commit_cursor", "read_committed", "read_cursor", "resume_tracking", "source_key",
           "verification_due"]

ENTRY_COLUMNS = {"doc_id": "string", "signature": "string"}
# Source fields that only say how it is read, not what it holds: a cursor stays valid when they change.
_READ_ONLY_FIELDS = ("batch_rows", "password_env", "endpoint_url")


def source_key(cfg: SourceConfig) -> str:
    """What a cursor belongs to: the source's config but for how it is read (batch size, credentials' place)."""
    return digest_json({k: v for k, v in cfg.model_dump(mode="json").items() if k not in _READ_ONLY_FIELDS})


@dataclass(frozen=True, slots=True)
class Committed:
    """A population's committed cursor and its record."""

    cursor: Cursor
    source_key: str
    verified_at: float  # when the population's content was last compared with the whole source
    run: str | None  # the plan whose run committed it
    previous: str | None  # the digest of the cursor it replaced
    at: float


@dataclass
class Tracking:
    """The cursor a running apply (or a long-lived sync) holds: where the source stood when the target's
    content was last compared with it, advanced by each catch-up round, committed when the run ends clean.
    ``full``: it was taken before a full read (a build, a verification), so at commit it keeps only the
    documents the population holds (a bad file is read, and reported, again next time)."""

    source: Tracked
    cursor: Cursor
    source_key: str
    verified_at: float
    full: bool = False
    started_from: str | None = None  # the committed cursor's digest the run started from

    def advance(self, cursor: Cursor) -> None:
        self.cursor = cursor


def read_cursor(store: ObjectStore, index: str, collection: str, digest: str) -> Cursor | None:
    """The cursor of ``digest`` kept for a population, None when it is not kept (any more)."""
    books = Books(store, index)
    head = read_json(store, books.cursor_head_key(collection, digest))
    if head is None:
        return None
    entries: dict[str, str] = {}
    if head.get("kind") == "listing":
        key = books.cursor_body_key(collection, digest)
        data = store.get(key)
        if data is None:
            return None
        try:
            cols, _ = columns_from_parquet(data, list(ENTRY_COLUMNS))
        except TableError as err:
            raise StateError(f"{store.describe()}/{key}: not a readable cursor ({err}); delete "
                             f"{books.cursor_key(collection)} and run `reindex sync --verify`") from None
        entries = dict(zip(cols["doc_id"], cols["signature"]))
    cursor = Cursor.of(head["kind"], head.get("position") or {}, entries)
    if cursor.digest != digest:
        raise StateError(f"{books.describe(books.cursor_head_key(collection, digest))}: the cursor's content "
                         f"does not match its digest; delete {books.cursor_key(collection)} and run "
                         "`reindex sync --verify`")
    return cursor


def read_committed(store: ObjectStore, index: str, collection: str) -> Committed | None:
    """The population's committed cursor, None when it has none (built before cursors, or its source has none)."""
    rec = read_json(store, Books(store, index).cursor_key(collection))
    if not rec or not isinstance(rec.get("digest"), str):
        return None
    cursor = read_cursor(store, index, collection, rec["digest"])
    if cursor is None:
        return None
    return Committed(cursor, str(rec.get("source_key")), float(rec.get("verified_at") or 0.0), rec.get("run"),
                     rec.get("previous"), float(rec.get("at") or 0.0))


def commit_cursor(store: ObjectStore, index: str, collection: str, tracking: Tracking, *, run: str | None,
                  holds: Any = None) -> Cursor:
    """Record ``tracking``'s cursor as the one the population holds (``holds``: the ids it holds, for a cursor
    taken before a full read). The cursor's files first, the record last; cursors other than the new one
    and the one it replaces are deleted. Returns the cursor committed."""
    cursor = tracking.cursor.restricted(holds) if tracking.full and holds is not None else tracking.cursor
    books = Books(store, index)
    now = read_json(store, books.cursor_key(collection)) or {}
    if cursor.kind == "listing":
        ids = list(cursor.entries)
        store.put(books.cursor_body_key(collection, cursor.digest),
                  parquet_from_columns({"doc_id": ids, "signature": [cursor.entries[d] for d in ids]}, ENTRY_COLUMNS))
    write_json(store, books.cursor_head_key(collection, cursor.digest),
               {"kind": cursor.kind, "position": dict(cursor.position)})
    previous = now.get("digest") if now.get("digest") != cursor.digest else now.get("previous")
    write_json(store, books.cursor_key(collection),
               {"digest": cursor.digest, "kind": cursor.kind, "source_key": tracking.source_key,
                "verified_at": tracking.verified_at, "run": run, "previous": previous, "at": time.time()})
    keep = {cursor.digest, previous, tracking.started_from}
    for key in store.list(books.cursors_prefix(collection)):
        if books.cursor_digest_of(key) not in keep:
            store.delete(key)
    return cursor


def verification_due(committed: Committed, every_s: float | None, now: float | None = None) -> bool:
    """Whether the population's last full read is older than ``sync.verify_every`` (None: never due)."""
    if every_s is None:
        return False
    return (time.time() if now is None else now) - committed.verified_at >= every_s


def resume_tracking(store: ObjectStore, index: str, collection: str, cfg: SourceConfig) -> Tracking | None:
    """The cursor a population holds, ready to find changes from (a cutover catching its shadow up); None
    when it has none for this source as configured (then changes are found by a full compare)."""
    committed = read_committed(store, index, collection)
    if committed is None or committed.source_key != source_key(cfg):
        return None
    source = tracker_of(open_source(cfg))
    if source is None or source.cursor_kind != committed.cursor.kind:
        return None
    return Tracking(source, committed.cursor, committed.source_key, committed.verified_at,
                    started_from=committed.cursor.digest)
