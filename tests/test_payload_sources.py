"""Metadata from every source kind: JSONL keys, Parquet columns, file attributes of a folder, S3 object
attributes and user metadata; a metadata change alone changes the document hash, its bytes' hash stays."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.domain.identity import content_hash
from reindex.adapters.sources import ScanReport, open_source
from reindex.adapters.sources.base import title_of


def _scan(cfg: SourceConfig) -> dict:
    return {d.doc_id: d for d in open_source(cfg).scan(ScanReport())}


def test_jsonl_fields_become_metadata_and_a_value_edit_changes_only_the_document_hash(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "x", "text": "hello", "lang": "en", "tags": ["a", "b"]}) + "\n")
    docs = _scan(SourceConfig(uri=str(path), metadata_fields=["lang", "tags", "missing"]))
    assert docs["x"].meta() == {"lang": "en", "tags": ("a", "b"), "missing": None}
    plain = _scan(SourceConfig(uri=str(path)))["x"]
    assert plain.metadata == () and plain.content_hash == content_hash(b"hello")  # no metadata: hashes as before
    first = docs["x"].content_hash
    path.write_text(json.dumps({"id": "x", "text": "hello", "lang": "de", "tags": ["a", "b"]}) + "\n")
    again = _scan(SourceConfig(uri=str(path), metadata_fields=["lang", "tags", "missing"]))["x"]
    assert again.content_hash != first and again.data == docs["x"].data


def test_parquet_columns_become_metadata(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    pq.write_table(pa.table({"id": ["p"], "text": ["body"], "year": [2024], "at": [when]}), path)
    doc = _scan(SourceConfig(uri=str(path), metadata_fields=["year", "at"]))["p"]
    assert doc.meta()["year"] == 2024 and doc.meta()["at"] == when


def test_directory_files_carry_path_title_and_modified_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "guide.md").write_text("intro line\n# The Guide\n\ntext\n")
    (root / "page.html").write_text("<html><head><title> Web\n Page </title></head><body>x</body></html>")
    (root / "notes.rst").write_text("=====\nNotes\n=====\n\nbody\n")
    (root / "plain.txt").write_text("# not a heading rule for .txt\n")
    os.utime(root / "plain.txt", (1_700_000_000, 1_700_000_000))
    docs = _scan(SourceConfig(uri=str(root), metadata_fields=["path", "title", "modified"]))
    assert docs["sub/guide.md"].meta()["title"] == "The Guide"
    assert docs["sub/guide.md"].meta()["path"] == "sub/guide.md"
    assert docs["page.html"].meta()["title"] == "Web Page"
    assert docs["notes.rst"].meta()["title"] == "Notes"
    assert docs["plain.txt"].meta() == {"path": "plain.txt", "title": "plain", "modified": "2023-11-14T22:13:20Z"}
    assert _scan(SourceConfig(uri=str(root)))["plain.txt"].metadata == ()  # opt-in: nothing unless named
    before = docs["plain.txt"].content_hash
    os.utime(root / "plain.txt", (1_700_000_100, 1_700_000_100))  # touched: same bytes, new modified time
    assert _scan(SourceConfig(uri=str(root), metadata_fields=["modified"]))["plain.txt"].content_hash != before
    with pytest.raises(SourceError, match="a directory source offers path, title, modified"):
        open_source(SourceConfig(uri=str(root), metadata_fields=["author"]))


def test_title_rule() -> None:
    assert title_of("a/b.md", b"# Top #\n## Sub") == "Top"
    assert title_of("a/b.md", b"## Only sub") == "b"
    assert title_of("x.rst", b"Title\n-----\n") == "Title"
    pep = b"PEP: 263\nTitle: Defining Python Source Code Encodings\nStatus: Final\n\nAbstract\n========\n"
    assert title_of("pep-0263.rst", pep) == "Defining Python Source Code Encodings"
    assert title_of("x.rst", b":Author: me\n:Title: From docinfo\n\nBody\n====\n") == "From docinfo"
    assert title_of("x.rst", b"Intro\n=====\n\nTitle: not a header, below the first blank line\n") == "Intro"
    assert title_of("x.rst", b"Long title\n---\n") == "x"  # an underline shorter than the text is no title
    assert title_of("x.htm", b"<TITLE>Caps</TITLE>") == "Caps"
    assert title_of("x.txt", b"# hash") == "x"


def test_s3_objects_carry_key_last_modified_and_user_metadata(s3_server: str, s3_bucket: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server)
    client.put_object(Bucket=s3_bucket, Key="docs/a.txt", Body=b"alpha", Metadata={"Author": "ann", "lang": "en"})
    client.put_object(Bucket=s3_bucket, Key="docs/b.txt", Body=b"bravo")
    cfg = SourceConfig(uri=f"s3://{s3_bucket}/docs", endpoint_url=s3_server,
                       metadata_fields=["key", "last_modified", "author", "lang"])
    docs = _scan(cfg)
    a, b = docs["a.txt"].meta(), docs["b.txt"].meta()
    assert (a["key"], a["author"], a["lang"]) == ("a.txt", "ann", "en")
    assert (b["author"], b["lang"]) == (None, None)
    stamp = dt.datetime.fromisoformat(a["last_modified"])
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 3600
    client.put_object(Bucket=s3_bucket, Key="docs/a.txt", Body=b"alpha", Metadata={"Author": "amy", "lang": "en"})
    cfg2 = cfg.model_copy(update={"metadata_fields": ["author"]})
    first = _scan(cfg2)["a.txt"]
    assert first.meta() == {"author": "amy"} and first.data == b"alpha"
    # S3 stores user-metadata names in lower case: a field named in any case finds its value.
    assert _scan(cfg.model_copy(update={"metadata_fields": ["Author"]}))["a.txt"].meta() == {"Author": "amy"}
    assert _scan(SourceConfig(uri=f"s3://{s3_bucket}/docs", endpoint_url=s3_server))["a.txt"].metadata == ()
