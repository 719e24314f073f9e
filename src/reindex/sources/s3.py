"""Objects under an S3 prefix (AWS, MinIO, any S3-compatible server), read one at a time.

Credentials come from the environment (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
``AWS_PROFILE``, …) only: never from the config, never logged. The endpoint comes from
``source.endpoint_url`` or ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

from collections.abc import Callable

import posixpath
from collections.abc import Iterator

from reindex.config import SourceConfig
from reindex.errors import ReindexError, SourceError, StateError
from reindex.sources.base import Admission, Document, ScanReport
from reindex.sources.directory import matches
from reindex.stores.objects import S3ObjectStore, split_s3_uri


class S3Source:
    """Objects under ``s3://bucket/prefix`` whose base names match ``include``; doc id = key
    relative to the prefix. Keys come in S3's listing order (sorted). An object that cannot be
    read is a bad document; a bucket that cannot be listed is a SourceError."""

    def __init__(self, cfg: SourceConfig, store: S3ObjectStore | None = None) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        try:
            bucket, prefix = split_s3_uri(cfg.uri)
        except StateError as err:
            raise SourceError(str(err)) from None
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
            try:
                data = self.store.get(key)
            except ReindexError as err:
                admission.reject(key, f"unreadable: {err}")
                continue
            if data is None:
                admission.reject(key, "unreadable: object was deleted during the scan")
                continue
            doc = admission.admit(key, data, n)
            if doc is not None:
                yield doc
