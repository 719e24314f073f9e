"""Corpus sources: a folder, a JSONL file, a Parquet file or an S3 prefix → documents
(doc id, bytes, content hash), then text via :mod:`reindex.adapters.sources.extract`."""

from __future__ import annotations

import os
from pathlib import Path

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.adapters.sources.base import BadDocument, Document, ScanReport, Source, media_type_for, special_file_kind
from reindex.adapters.sources.cursors import Changes, Cursor, Tracked, full_read_reason, tracker_of
from reindex.adapters.sources.directory import DirectorySource
from reindex.adapters.sources.extract import extract_text, normalise
from reindex.adapters.sources.jsonl import JsonlSource
from reindex.adapters.sources.parquet import ParquetSource
from reindex.adapters.sources.s3 import S3Source

__all__ = [
    "BadDocument",
    "Changes",
    "Cursor",
    "Tracked",
    "full_read_reason",
    "tracker_of",
    "DirectorySource",
    "Document",
    "JsonlSource",
    "ParquetSource",
    "S3Source",
    "ScanReport",
    "Source",
    "extract_text",
    "media_type_for",
    "normalise",
    "open_source",
]

_ACCEPTED = ("a directory, a .jsonl/.ndjson(.gz) or .parquet file, s3://bucket/prefix, or "
             "postgresql://host/db?table=NAME")
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def open_source(cfg: SourceConfig | str) -> Source:
    """The source a config names. Raises SourceError if it does not exist or is of no known kind."""
    if isinstance(cfg, str):
        cfg = SourceConfig(uri=cfg)
    uri = cfg.uri
    if cfg.kind == "changelog":
        return _changelog(cfg)
    if uri.startswith("s3://"):
        return S3Source(cfg)
    if uri.split("://", 1)[0].lower() in ("postgresql", "postgres") and "://" in uri:
        from reindex.adapters.sources.postgres import PostgresSource  # psycopg is imported only by a PostgreSQL source

        return PostgresSource(cfg)
    if "://" in uri:
        raise SourceError(f"source {uri!r}: unsupported scheme; expected {_ACCEPTED}")
    path = Path(os.path.expanduser(uri))
    if path.is_dir():
        return DirectorySource(cfg, path)
    if not path.exists():
        raise SourceError(f"source {uri!r} does not exist; expected {_ACCEPTED}")
    special = special_file_kind(path.stat().st_mode)
    if special is not None:  # refused before it is opened: reading a FIFO waits for a writer forever
        raise SourceError(f"source {uri!r} is {special}, not a regular file; expected {_ACCEPTED}")
    name = path.name.lower()
    if name.endswith(_JSONL_SUFFIXES):
        return JsonlSource(cfg, path)
    if name.endswith(_PARQUET_SUFFIXES):
        return ParquetSource(cfg, path)
    raise SourceError(f"source {uri!r} is not a supported file type; expected {_ACCEPTED}")


def _changelog(cfg: SourceConfig) -> Source:
    from reindex.adapters.sources.changelog import ChangelogSource

    path = Path(os.path.expanduser(cfg.uri))
    if "://" in cfg.uri or not path.is_file():
        raise SourceError(f"source {cfg.uri!r} (kind changelog): expected a JSON Lines file of upserts and deletes "
                          "on this machine")
    return ChangelogSource(cfg, path)
