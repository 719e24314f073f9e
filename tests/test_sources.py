"""Sources: every kind reads documents in a stable order, reports bad input with id and reason,
and keeps going; memory does not grow with the corpus."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reindex.domain.config import NormaliserConfig, SourceConfig
from reindex.errors import SourceError, StateError
from reindex.domain.identity import content_hash
from reindex.adapters.sources import (
    DirectorySource,
    Document,
    JsonlSource,
    ParquetSource,
    S3Source,
    ScanReport,
    extract_text,
    normalise,
    open_source,
)
from reindex.adapters.stores.objects import S3ObjectStore, open_object_store


def scan_all(uri: str | SourceConfig) -> tuple[list[Document], ScanReport]:
    report = ScanReport()
    docs = list(open_source(uri).scan(report))
    return docs, report


def bad_map(report: ScanReport) -> dict[str, str]:
    return {b.doc_id: b.reason for b in report.bad}


# --------------------------------------------------------------------------------------------
# Directory
# --------------------------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "guide" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "b.txt").write_bytes(b"plain text\n")
    (root / "a.md").write_bytes(b"# Title\n\nbody\n")
    (root / "guide" / "intro.rst").write_bytes(b"Intro\n=====\n\ntext\n")
    (root / "guide" / "page.html").write_bytes(b"<html><body><p>Hello <b>web</b></p><script>x()</script></body></html>")
    (root / "guide" / "deep" / "z.TXT").write_bytes("Ünïcode ✓".encode())
    (root / "logo.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")  # binary with a text name
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))  # not UTF-8 at byte 3
    (root / "empty.md").write_bytes(b"")
    (root / "blank.txt").write_bytes(b"  \n\t\n")
    (root / "image.png").write_bytes(b"\x89PNG")  # not included by the patterns
    (root / ".git" / "config.txt").write_bytes(b"hidden")
    return root


def test_directory_reads_included_files_in_sorted_order(folder: Path) -> None:
    docs, report = scan_all(str(folder))
    assert [d.doc_id for d in docs] == ["a.md", "b.txt", "guide/deep/z.TXT", "guide/intro.rst", "guide/page.html"]
    by_id = {d.doc_id: d for d in docs}
    assert by_id["a.md"].media_type == "text/markdown"
    assert by_id["b.txt"].media_type == "text/plain"
    assert by_id["guide/intro.rst"].media_type == "text/x-rst"
    assert by_id["guide/page.html"].media_type == "text/html"
    assert by_id["b.txt"].data == b"plain text\n"
    assert by_id["b.txt"].content_hash == content_hash(b"plain text\n")
    assert by_id["guide/deep/z.TXT"].size == len("Ünïcode ✓".encode())
    assert report.documents == 5
    assert report.bytes == sum(d.size for d in docs)
    assert report.skipped == 1  # image.png


def test_directory_reports_bad_files_and_continues(folder: Path) -> None:
    _, report = scan_all(str(folder))
    assert bad_map(report) == {
        "blank.txt": "empty (whitespace only)",
        "empty.md": "empty",
        "latin1.txt": "not valid UTF-8 at byte 3",
        "logo.txt": "binary (NUL bytes, first at byte 8)",
    }
    assert dict(report.by_reason) == {"empty": 2, "not-utf8": 1, "binary": 1}
    assert "5 documents" in report.summary() and "4 bad" in report.summary()


def test_directory_scan_is_deterministic(folder: Path) -> None:
    first = [(d.doc_id, d.content_hash) for d in open_source(str(folder)).scan()]
    second = [(d.doc_id, d.content_hash) for d in open_source(str(folder)).scan()]
    assert first == second


def test_directory_include_patterns(folder: Path) -> None:
    docs, report = scan_all(SourceConfig(uri=str(folder), include=["*.md"]))
    assert [d.doc_id for d in docs] == ["a.md"]
    assert bad_map(report) == {"empty.md": "empty"}


def test_directory_unreadable_file_is_bad(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fault injection wraps the real read: one file raises (as with a permission error)."""
    real_open = Path.open

    def open_file(self: Path, *args, **kwargs):
        if self.name == "b.txt":
            raise PermissionError(13, "Permission denied")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_file)
    docs, report = scan_all(str(folder))
    assert bad_map(report)["b.txt"] == "unreadable: Permission denied"
    assert "a.md" in [d.doc_id for d in docs] and "guide/page.html" in [d.doc_id for d in docs]


# --------------------------------------------------------------------------------------------
# JSONL
# --------------------------------------------------------------------------------------------


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_reads_rows_and_reports_bad_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [
            json.dumps({"id": "a", "text": "alpha", "lang": "en"}),
            json.dumps({"doc_id": "b.html", "content": "<p>beta</p>"}),
            "{not json",
            json.dumps({"id": "a", "text": "alpha again"}),
            json.dumps({"id": "c"}),
            "",
            json.dumps({"_id": 7, "body": "seven"}),
            json.dumps(["a", "list"]),
            json.dumps({"text": "no id"}),
            json.dumps({"id": "nul", "text": "a\u0000b"}),
            json.dumps({"id": "blank", "text": "   "}),
        ],
    )
    docs, report = scan_all(SourceConfig(uri=str(path), metadata_fields=["lang"]))
    assert [d.doc_id for d in docs] == ["a", "b.html", "7"]
    assert docs[0].data == b"alpha"
    assert docs[0].metadata == (("lang", "en"),)
    assert docs[1].media_type == "text/html"
    bad = bad_map(report)
    assert bad["line:3"].startswith("malformed JSON: ")
    assert bad["a"] == "duplicate id (first seen at line 1, again at line 4)"
    assert bad["c"] == "missing text field (looked for text, content, body)"
    assert bad["line:8"] == "malformed: expected a JSON object, got list"
    assert bad["line:9"] == "missing id field (looked for id, doc_id, _id)"
    assert bad["nul"].startswith("binary")
    assert bad["blank"] == "empty (whitespace only)"
    assert len(report.bad) == 7
    assert report.by_reason["duplicate-id"] == 1 and report.by_reason["malformed"] == 2


def test_jsonl_configured_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "docs.jsonl",
        [json.dumps({"key": "k1", "id": "ignored", "txt": "one", "text": "ignored"}), json.dumps({"key": "k2", "text": "x"})],
    )
    docs, report = scan_all(SourceConfig(uri=str(path), id_field="key", text_field="txt"))
    assert [(d.doc_id, d.data) for d in docs] == [("k1", b"one")]
    assert bad_map(report) == {"k2": "missing text field (looked for txt)"}


def test_jsonl_gzip(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"id": "a", "text": "alpha"}) + "\n")
    docs, _ = scan_all(str(path))
    assert [d.doc_id for d in docs] == ["a"]


# --------------------------------------------------------------------------------------------
# Parquet
# --------------------------------------------------------------------------------------------


def test_parquet_custom_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table(
        {
            "path": ["x.md", "y.md", "x.md", None, "z.md"],
            "markdown": ["# x", None, "# x again", "orphan", "zed"],
            "author": ["ann", "bob", "ann", "cat", "dan"],
        }
    )
    pq.write_table(table, path, row_group_size=2)
    cfg = SourceConfig(uri=str(path), id_field="path", text_field="markdown", metadata_fields=["author"], batch_rows=2)
    docs, report = scan_all(cfg)
    assert [(d.doc_id, d.data, d.meta()) for d in docs] == [
        ("x.md", b"# x", {"author": "ann"}),
        ("z.md", b"zed", {"author": "dan"}),
    ]
    assert docs[0].media_type == "text/markdown"
    assert bad_map(report) == {
        "y.md": "missing text (null 'markdown')",
        "x.md": "duplicate id (first seen at row 1, again at row 3)",
        "row:4": "missing id (null 'path')",
    }


def test_parquet_autodetects_columns(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"doc_id": ["a", "b"], "content": ["one", "two"], "other": [1, 2]}), path)
    source = open_source(str(path))
    assert isinstance(source, ParquetSource)
    assert (source.id_column, source.text_column) == ("doc_id", "content")
    assert [d.data for d in source.scan()] == [b"one", b"two"]
    assert "doc_id" in source.describe()


def test_parquet_missing_columns_fail_at_open(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"name": ["a"], "words": ["one"]}), path)
    with pytest.raises(SourceError, match=r"no id column \(looked for id, doc_id, _id\); columns are name, words"):
        open_source(str(path))
    with pytest.raises(SourceError, match="text column 'txt' not found"):
        open_source(SourceConfig(uri=str(path), id_field="name", text_field="txt"))


def test_shared_corpus_snapshot_reads_with_no_options(shared_corpus: Path) -> None:
    docs, report = scan_all(str(shared_corpus / "snapshot_old.parquet"))
    assert len(docs) == 693
    assert report.bad == []
    assert docs[0].doc_id == "peps/pep-0001.rst" and docs[0].media_type == "text/x-rst"
    assert len({d.doc_id for d in docs}) == 693


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------


@pytest.fixture
def s3_corpus(s3_server: str, s3_bucket: str) -> str:
    store = open_object_store(f"s3://{s3_bucket}", endpoint_url=s3_server)
    store.put("docs/b.txt", b"bee")
    store.put("docs/a/one.md", b"# one")
    store.put("docs/a/two.html", b"<p>two</p>")
    store.put("docs/bin.txt", b"\x00\x01\x02")
    store.put("docs/skip.png", b"png")
    store.put("other/c.txt", b"outside the prefix")
    return f"s3://{s3_bucket}/docs"


def test_s3_source_reads_prefix_in_key_order(s3_server: str, s3_corpus: str) -> None:
    docs, report = scan_all(SourceConfig(uri=s3_corpus, endpoint_url=s3_server))
    assert [(d.doc_id, d.data) for d in docs] == [("a/one.md", b"# one"), ("a/two.html", b"<p>two</p>"), ("b.txt", b"bee")]
    assert docs[1].media_type == "text/html"
    assert bad_map(report) == {"bin.txt": "binary (NUL bytes, first at byte 0)"}
    assert report.skipped == 1


def test_s3_unreadable_object_is_bad_and_scan_continues(s3_server: str, s3_bucket: str, s3_corpus: str) -> None:
    """Fault injection wraps the real store: one object fails to read."""

    class FailingStore(S3ObjectStore):
        def get(self, key: str) -> bytes | None:
            if key == "a/one.md":
                raise StateError("get 'a/one.md' failed: AccessDenied")
            return super().get(key)

    cfg = SourceConfig(uri=s3_corpus, endpoint_url=s3_server)
    source = S3Source(cfg, store=FailingStore(s3_bucket, "docs", endpoint_url=s3_server))
    report = ScanReport()
    docs = list(source.scan(report))
    assert [d.doc_id for d in docs] == ["a/two.html", "b.txt"]
    assert bad_map(report) == {
        "a/one.md": "unreadable: get 'a/one.md' failed: AccessDenied",
        "bin.txt": "binary (NUL bytes, first at byte 0)",
    }
    assert report.by_reason["unreadable"] == 1


def test_s3_missing_bucket_is_a_source_error(s3_server: str) -> None:
    source = open_source(SourceConfig(uri="s3://no-such-bucket-anywhere/x", endpoint_url=s3_server))
    with pytest.raises(SourceError, match="no-such-bucket-anywhere"):
        list(source.scan())


# --------------------------------------------------------------------------------------------
# open_source
# --------------------------------------------------------------------------------------------


def test_open_source_dispatch(tmp_path: Path, folder: Path) -> None:
    jsonl = write_jsonl(tmp_path / "d.jsonl", [json.dumps({"id": "a", "text": "x"})])
    assert isinstance(open_source(str(folder)), DirectorySource)
    assert isinstance(open_source(str(jsonl)), JsonlSource)
    assert isinstance(open_source("s3://bucket/prefix"), S3Source)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("does/not/exist", "source 'does/not/exist' does not exist; expected a directory"),
        ("ftp://host/x", "unsupported scheme"),
    ],
)
def test_open_source_errors(uri: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        open_source(uri)


def test_open_source_unknown_file_type(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("id,text\n")
    with pytest.raises(SourceError, match=r"is not a supported file type; expected .*\.jsonl.*\.parquet.*s3://"):
        open_source(str(path))


# --------------------------------------------------------------------------------------------
# Extraction and normalisation
# --------------------------------------------------------------------------------------------


def test_extract_auto_html_and_plain() -> None:
    html = Document.of("p.html", b"<h1>T</h1><style>h1{}</style><p>one\n two</p><p>three<br>four</p>")
    assert extract_text(html, "auto") == "T\n\none two\n\nthree\nfour"
    assert extract_text(html, "plain").startswith("<h1>")
    md = Document.of("a.md", "\ufeff# Title".encode())
    assert extract_text(md, "auto") == "# Title"
    assert extract_text(md, "html") == "# Title"


def test_normalise() -> None:
    text = "e\u0301 \ufb01 \r\nline  \t\rlast  "
    assert normalise(text, NormaliserConfig()) == "\u00e9 \ufb01 \nline  \t\nlast  "
    assert normalise(text, NormaliserConfig(unicode="NFKC")) == "\u00e9 fi \nline  \t\nlast  "
    assert normalise(text, NormaliserConfig(unicode="none", newlines="keep")) == text
    assert normalise(text, NormaliserConfig(strip_trailing_whitespace=True)) == "\u00e9 \ufb01\nline\nlast"
    assert (
        normalise(text, NormaliserConfig(unicode="none", newlines="keep", strip_trailing_whitespace=True))
        == "e\u0301 \ufb01\r\nline\rlast"
    )


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def _write_parquet_corpus(path: Path, rows: int, text_bytes: int) -> int:
    """A Parquet file of ``rows`` distinct documents; returns the decoded text size in bytes."""
    writer = pq.ParquetWriter(path, pa.schema([("doc_id", pa.string()), ("text", pa.string())]))
    filler = "lorem ipsum dolor sit amet " * (text_bytes // 27 + 1)
    for start in range(0, rows, 5000):
        ids = [f"d{i:06d}" for i in range(start, min(rows, start + 5000))]
        writer.write_table(pa.table({"doc_id": ids, "text": [f"{i} {filler}"[:text_bytes] for i in ids]}))
    writer.close()
    return rows * text_bytes


def _peak_scan_memory(path: Path) -> tuple[int, int]:
    source = open_source(SourceConfig(uri=str(path), batch_rows=128))
    gc.collect()
    tracemalloc.start()
    try:
        n = sum(1 for _ in source.scan())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return n, peak


def test_scan_memory_does_not_grow_with_corpus(tmp_path: Path) -> None:
    """Peak Python memory of a 20k-row scan is a small fraction of the corpus, and a 2x corpus adds
    only the duplicate-id table (about a hundred bytes per id), none of the documents."""
    text_bytes = 2000
    small = _write_parquet_corpus(tmp_path / "small.parquet", 20_000, text_bytes)
    big = _write_parquet_corpus(tmp_path / "big.parquet", 40_000, text_bytes)
    n_small, peak_small = _peak_scan_memory(tmp_path / "small.parquet")
    n_big, peak_big = _peak_scan_memory(tmp_path / "big.parquet")
    assert (n_small, n_big) == (20_000, 40_000)
    assert peak_small < small / 8, (peak_small, small)
    assert peak_big < big / 12, (peak_big, big)
    per_extra_doc = (peak_big - peak_small) / (n_big - n_small)
    assert per_extra_doc < 250, (peak_small, peak_big)  # documents are 2,000 bytes each


def test_keep_skips_unwanted_documents_unread_but_still_reports_duplicates(tmp_path: Path) -> None:
    from reindex.adapters.sources import open_source

    p = tmp_path / "docs.jsonl"
    rows = [{"id": "a", "text": "alpha"}, {"id": "b", "text": "beta"}, {"id": "b", "text": "again"},
            {"id": "c", "text": "gamma"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = ScanReport()
    got = [d.doc_id for d in open_source(str(p)).scan(report, keep=lambda d: d != "b")]
    assert got == ["a", "c"]
    assert report.documents == 2  # b was never admitted, so never read as a document
    assert [(b.doc_id, b.kind) for b in report.bad] == [("b", "duplicate-id")]
    # Without keep the same file yields b once and reports the duplicate too.
    report = ScanReport()
    assert [d.doc_id for d in open_source(str(p)).scan(report)] == ["a", "b", "c"]
    assert [(b.doc_id, b.kind) for b in report.bad] == [("b", "duplicate-id")]


def test_a_parquet_shard_scan_converts_only_its_own_texts_and_reads_the_same_documents(tmp_path: Path) -> None:
    """A shard's scan of a Parquet file of every document: its rows are the full scan's, duplicates still reported,
    and the texts of other shards' rows never become Python strings (issue 44: 16 shards converted every text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reindex.adapters.sources import open_source
    from reindex.foundation import tables

    ids = [f"doc-{i:03d}" for i in range(40)] + ["doc-007", "   "]
    pq.write_table(pa.table({"id": ids, "text": [f"text of {d} " * 20 for d in ids], "lang": ["en"] * len(ids)}),
                   tmp_path / "docs.parquet")
    src = str(tmp_path / "docs.parquet")
    full = {d.doc_id: d for d in open_source(src).scan(ScanReport())}
    converted: list[int] = []
    real = tables.pa.array

    def counting(values, *args, **kwargs):  # the mask of wanted rows each batch converts by
        converted.append(sum(bool(v) for v in values))
        return real(values, *args, **kwargs)

    mine = {"doc-001", "doc-007", "doc-020"}
    report = ScanReport()
    tables.pa.__dict__["array"] = counting
    try:
        got = {d.doc_id: d for d in open_source(src).scan(report, keep=mine.__contains__)}
    finally:
        del tables.pa.__dict__["array"]
    assert got.keys() == mine and all(got[d].content_hash == full[d].content_hash for d in mine)
    assert converted == [4]  # one batch, four wanted rows (doc-007 twice): the other texts stayed in Arrow
    assert {(b.doc_id, b.kind) for b in report.bad} == {("doc-007", "duplicate-id"), ("row:42", "malformed")}


def test_an_empty_document_id_is_bad_input_not_a_document(tmp_path: Path) -> None:
    """Issue 22: ``{"id": ""}`` became a document with an empty id; now it is reported by line/row."""
    path = write_jsonl(tmp_path / "docs.jsonl", [json.dumps({"id": "", "text": "x"}), json.dumps({"id": "  ", "text": "y"}),
                                                   json.dumps({"id": "ok", "text": "z"})])
    docs, report = scan_all(str(path))
    assert [d.doc_id for d in docs] == ["ok"]
    assert bad_map(report) == {
        "line:1": "malformed: id field 'id' is empty (''); every document needs a non-empty id",
        "line:2": "malformed: id field 'id' is empty ('  '); every document needs a non-empty id",
    }
    pq_path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": ["", "b"], "text": ["one", "two"]}), pq_path)
    docs, report = scan_all(str(pq_path))
    assert [d.doc_id for d in docs] == ["b"]
    assert bad_map(report) == {"row:1": "malformed: id column 'id' is empty (''); every document needs a non-empty id"}
