"""Objects under an S3 prefix (AWS, MinIO, any S3-compatible server), read one at a time.

Credentials come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, …) only: never from the config, never logged. The endpoint comes from
``source.endpoint_url`` or ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

from collections.abc import Callable

import posixpath
from collections.abc import Iterator

from reindex.domain.config import SourceConfig
from reindex.errors import ReindexError, SourceError, StateError
from reindex.adapters.sources.base import Admission, Document, ScanReport
from reindex.adapters.sources.cursors import Changes, Cursor, listing_changes
from reindex.adapters.sources.directory import matches
from reindex.adapters.stores.objects import S3ObjectStore, split_s3_uri

__all__ = ["S3Source", "object_metadata"]


def object_metadata(fields: list[str], key: str, user: dict[str, str], modified: str) -> tuple[tuple[str, object], ...]:
    """The configured object attributes: ``key`` (relative to the prefix: the doc id), ``last_modified``
    (UTC ISO-8601), and any other name from the object's user metadata (``x-amz-meta-<name>``; None when
    the object has none of that name)."""
    out: list[tuple[str, object]] = []
    for f in fields:
        if f == "key":
            out.append((f, key))
        elif f == "last_modified":
            out.append((f, modified))
        else:
            out.append((f, user.get(f.lower())))
    return tuple(out)


class S3Source:
    """Objects under ``s3://bucket/prefix`` whose base names match ``include``; doc id = key
    relative to the prefix. Keys come in S3's listing order (sorted). An object that cannot be
    read is a bad document; a bucket that cannot be listed is a SourceError."""

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("include", "endpoint_url", "metadata_fields")

    def __init__(self, cfg: SourceConfig, store: S3ObjectStore | None = None) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        try:
            bucket, prefix = split_s3_uri(cfg.uri)
        except StateError as err:
            raise SourceError(str(err)) from None
        if any(part in (".", "..") for part in prefix.split("/")):
            # S3 keeps '..' in a key literally, but a server or proxy that resolves dot segments would read
            # another object than the one listed: a prefix means one thing only. (A listed key with such a
            # part is a bad document: the object store refuses the key.)
            raise SourceError(f"source {cfg.uri}: the prefix has a '.' or '..' part, which S3 takes literally "
                              "(some servers resolve it); name the prefix without it")
        self.store = store if store is not None else S3ObjectStore(bucket, prefix, endpoint_url=cfg.endpoint_url)

    def describe(self) -> str:
        return f"S3 {self.store.describe()} (include {', '.join(self.cfg.include)})"

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="object", keep=keep)
        keys = self.store.iter_keys()
        n = 0
        while True:
            try:
                key = next(keys)
            except StopIteration:
                return
            except StateError as err:
                raise SourceError(f"cannot list source {self.uri}: {err}") from None
            if not matches(posixpath.basename(key), self.cfg.include):
                admission.report.skipped += 1
                continue
            n += 1
            if admission.skip(key, n):
                continue
            doc = self._read(admission, key, n)
            if doc is not None:
                yield doc

    def _read(self, admission: Admission, key: str, n: int) -> Document | None:
        """Object ``key`` (the ``n``-th listed) as a document, or None after reporting why it is bad."""
        try:
            got = self.store.get_with_metadata(key) if self.cfg.metadata_fields else self.store.get(key)
        except ReindexError as err:
            admission.reject(key, f"unreadable: {err}")
            return None
        if got is None:
            admission.reject(key, "unreadable: object was deleted during the scan")
            return None
        meta: tuple[tuple[str, object], ...] = ()
        if isinstance(got, tuple):
            got, user, modified = got
            meta = object_metadata(self.cfg.metadata_fields, key, user, modified)
        return admission.admit(key, got, n, metadata=meta)

    # -- the cursor: a listing of (ETag, LastModified, size) per object; only objects whose triple moved are read

    cursor_kind = "listing"

    def position(self) -> Cursor:
        """Every object's (ETag, LastModified, size), from the bucket's listing only."""
        return Cursor.of("listing", {}, dict(self._signatures(ScanReport())))

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """Objects added, or whose ETag, LastModified or size moved since ``since`` (read), and objects gone."""
        return listing_changes(self._signatures(report), since, self._read_wanted, report, "objects")

    def _signatures(self, report: ScanReport) -> Iterator[tuple[str, str]]:
        try:
            for key, etag, modified, size in self.store.iter_listing():
                if not matches(posixpath.basename(key), self.cfg.include):
                    report.skipped += 1
                    continue
                yield key, f"{etag}|{modified}|{size}"
        except StateError as err:
            raise SourceError(f"cannot list source {self.uri}: {err}") from None

    def _read_wanted(self, wanted: set[str], report: ScanReport) -> Iterator[Document]:
        """The objects of ``wanted``, in key order, read by key (the listing named them: no second listing)."""
        admission = Admission(report, unit="object")
        for n, key in enumerate(sorted(wanted), 1):
            doc = self._read(admission, key, n)
            if doc is not None:
                yield doc
