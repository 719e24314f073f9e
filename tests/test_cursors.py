"""Syncs that read what changed: each source kind's cursor (a folder's (size, mtime_ns), S3's listing, a
Parquet or PostgreSQL cursor column, a change log's offset), from plan through apply's drift check and
catch-up to the cursor committed with the population; ``--verify`` and ``sync.verify_every`` for metadata
that lies. Each kind: an edit of one document is planned and applied in place reading that document only
(counted through a seam around the source's reader), a removal is found, and a cursor moved between plan
and apply is refused."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers_index import SAMPLE
from reindex import api
from reindex.cli import main
from reindex.errors import PlanError, SourceError

DOCS = sorted(SAMPLE.joinpath("corpus").glob("*.rst"))[:6]


class Ix:
    """An index over one source: ``reindex.yaml`` (hash embedder, 2 shards, removing a document of six needs no
    approval), plans and state in ``root``."""

    def __init__(self, root: Path, source: dict[str, Any], extra: str = "") -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.config = root / "reindex.yaml"
        self.plans = root / "plans"
        self.config.write_text(f"index: docs\nsource: {json.dumps(source)}\n"
                               "text: {chunker: {kind: recursive, size: 150}}\nvector: {provider: hash}\n"
                               "apply: {shards: 2}\napproval: {max_removed_share: 0.5}\n" + extra, encoding="utf-8")

    def plan(self, **kw: Any):
        return api.make_plan(self.config, out=self.plans, **kw)

    def apply(self, path: Path):
        return api.apply_plan(path, self.config, use_prefect=False)

    def build(self) -> str:
        plan, path = self.plan()
        api.approve_plan(path, "tester")
        r = self.apply(path)
        assert r.status == "done", r.report
        assert api.cutover(path, self.config).report["swap"]
        return r.collection

    def sync(self, *args: str) -> dict:
        r = CliRunner().invoke(main, ["sync", "-c", str(self.config), "--plans", str(self.plans), "--json", *args])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    def state(self):
        return api.state_store(api.load_resolved(self.config))

    def hashes(self, collection: str) -> dict[str, str]:
        from reindex.books.manifests import read_document_hashes

        return read_document_hashes(self.state(), "docs", collection)

    def points(self, collection: str) -> dict[str, int]:
        from collections import Counter

        store = api.vector_store_for(api.load_resolved(self.config))
        try:
            return dict(Counter(p.payload["doc_id"] for p in store.scroll(collection)))
        finally:
            store.close()

    def cursor(self, collection: str) -> dict:
        return json.loads(self.state().get(f"indexes/docs/populations/{collection}/cursor.json"))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _edited(text: str) -> str:
    return text + "\nA sentence added by the test, so that this document changes.\n"


def _content_hash(text: str) -> str:
    from reindex.domain.identity import document_hash

    return document_hash(text.encode())


# -- a folder: (size, mtime_ns) -------------------------------------------------------------------------


def _count_file_reads(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[str]:
    """Each file under ``folder`` whose bytes are read (the folder source's one reader)."""
    from reindex.adapters.sources.directory import DirectorySource

    opened: list[str] = []
    real = DirectorySource._read

    def read(self: Any, path: Path) -> bytes:
        if path.is_relative_to(folder):
            opened.append(path.relative_to(folder).as_posix())
        return real(self, path)

    monkeypatch.setattr(DirectorySource, "_read", read)
    return opened


def _folder(tmp_path: Path, extra: str = "") -> tuple[Ix, Path, str]:
    corpus = tmp_path / "corpus"
    corpus.mkdir(parents=True)
    for f in DOCS:
        shutil.copy(f, corpus / f.name)
    ix = Ix(tmp_path / "ix", {"uri": str(corpus)}, extra)
    return ix, corpus, ix.build()


def test_a_folder_sync_reads_only_the_edited_file_and_commits_its_cursor(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ix, corpus, live = _folder(tmp_path)
    built = ix.cursor(live)
    assert built["kind"] == "listing" and built["verified_at"] > 0
    target = corpus / DOCS[2].name
    target.write_text(_edited(_text(target)), encoding="utf-8")
    opened = _count_file_reads(monkeypatch, corpus)
    plan, path = ix.plan()
    assert plan.kind == "document-scoped" and plan.body["work"]["affected_documents"] == [target.name]
    read = plan.body["inputs"]["corpus"]["read"]
    assert (read["mode"], read["cursor"], read["documents_read"]) == ("cursor", "listing", 1)
    assert read["bytes_read"] == target.stat().st_size
    assert plan.body["work"]["documents"]["unchanged"] == len(DOCS) - 1
    r = ix.apply(path)
    assert r.status == "done" and r.collection == live
    assert opened == [target.name, target.name]  # the plan, then the drift check; the catch-up opens nothing
    assert ix.hashes(live)[target.name] == _content_hash(_text(target))
    after = ix.cursor(live)
    assert after["run"] == plan.plan_hash and after["previous"] == built["digest"]
    assert after["verified_at"] == built["verified_at"]  # read from the cursor: not a verification
    opened.clear()
    again, _ = ix.plan()
    assert again.kind == "none" and opened == []


def test_a_folder_removal_and_an_addition_are_found_from_the_listing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ix, corpus, live = _folder(tmp_path)
    gone = DOCS[0].name
    (corpus / gone).unlink()
    (corpus / "new.md").write_text("# New\n\nA document added after the build.\n", encoding="utf-8")
    opened = _count_file_reads(monkeypatch, corpus)
    plan, path = ix.plan()
    assert plan.body["work"]["removed_documents"] == [gone] and plan.body["work"]["documents"]["added"] == 1
    assert opened == ["new.md"]
    assert ix.apply(path).status == "done"
    points = ix.points(live)
    assert gone not in points and points["new.md"] >= 1


def test_a_folder_file_that_moved_between_plan_and_apply_is_refused(tmp_path: Path) -> None:
    ix, corpus, live = _folder(tmp_path)
    a, b = corpus / DOCS[1].name, corpus / DOCS[3].name
    a.write_text(_edited(_text(a)), encoding="utf-8")
    plan, path = ix.plan()
    os.utime(b, ns=(b.stat().st_atime_ns, b.stat().st_mtime_ns + 10**9))  # metadata moves: the cursor moves
    with pytest.raises(PlanError, match=r"the source moved since the plan \(read from its cursor: .*\)\. Run "
                                        r"`reindex plan` again, or pass --replan"):
        ix.apply(path)
    replanned = api.apply_plan(path, ix.config, use_prefect=False, replan=True)
    assert replanned.status == "done" and ix.hashes(live)[a.name] == _content_hash(_text(a))


def test_metadata_that_lies_is_missed_by_the_cursor_and_found_by_verify(tmp_path: Path) -> None:
    ix, corpus, live = _folder(tmp_path)
    target = corpus / DOCS[4].name
    st = target.stat()
    old = target.read_bytes()
    new = old.replace(b"the", b"THE", 1)
    assert new != old and len(new) == len(old)
    target.write_bytes(new)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: new bytes
    trusted, _ = ix.plan()
    assert trusted.kind == "none" and trusted.body["inputs"]["corpus"]["read"]["documents_read"] == 0
    assert ix.sync()["outcome"] == "nothing-to-do"
    assert ix.hashes(live)[target.name] != _content_hash(new.decode())

    before = ix.cursor(live)
    out = ix.sync("--verify")
    assert out["outcome"] == "applied-in-place" and out["kind"] == "document-scoped"
    body = json.loads(Path(out["plan_file"]).read_text())
    assert body["inputs"]["corpus"]["read"]["mode"] == "full" and "--verify" in body["inputs"]["corpus"]["read"]["why"]
    assert body["work"]["affected_documents"] == [target.name]
    assert ix.hashes(live)[target.name] == _content_hash(new.decode())
    repaired = ix.cursor(live)
    assert repaired["verified_at"] > before["verified_at"] and repaired["run"] == body["plan_hash"]
    plan, _ = ix.plan()
    assert plan.kind == "none" and plan.body["inputs"]["corpus"]["read"]["mode"] == "cursor"


def test_sync_verify_every_reads_everything_when_the_last_full_read_is_older(tmp_path: Path) -> None:
    ix, corpus, live = _folder(tmp_path, extra="sync: {verify_every: 1h}\n")
    fresh, _ = ix.plan()
    assert fresh.body["inputs"]["corpus"]["read"]["mode"] == "cursor"  # verified at the build, under an hour ago
    state = ix.state()
    key = f"indexes/docs/populations/{live}/cursor.json"
    rec = json.loads(state.get(key))
    state.put(key, json.dumps({**rec, "verified_at": time.time() - 3601}).encode())  # the build was an hour ago
    due, _ = ix.plan()
    read = due.body["inputs"]["corpus"]["read"]
    assert read["mode"] == "full" and "sync.verify_every 1h" in read["why"] and read["documents_read"] == len(DOCS)
    assert ix.sync()["outcome"] == "nothing-to-do"
    assert ix.cursor(live)["verified_at"] > time.time() - 600  # the full read was recorded: not due again
    assert ix.plan()[0].body["inputs"]["corpus"]["read"]["mode"] == "cursor"


def test_a_touched_file_is_read_once_then_its_new_metadata_is_recorded(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ix, corpus, live = _folder(tmp_path)
    target = corpus / DOCS[5].name
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 5 * 10**9))
    opened = _count_file_reads(monkeypatch, corpus)
    assert ix.sync()["outcome"] == "nothing-to-do"
    assert opened.count(target.name) >= 1
    opened.clear()
    plan, _ = ix.plan()
    assert plan.kind == "none" and opened == []  # the sync recorded the moved mtime


def test_a_jsonl_source_says_it_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f.name, "text": _text(f)}) + "\n" for f in DOCS), encoding="utf-8")
    ix = Ix(tmp_path / "ix", {"uri": str(corpus)})
    ix.build()
    plan, path = ix.plan()
    read = plan.body["inputs"]["corpus"]["read"]
    assert read["mode"] == "full" and read["bytes_read"] > 0
    assert "a JSON Lines file has no cursor: every sync reads all of corpus.jsonl" in read["why"]
    from reindex.reports import plan_text

    assert "source read whole (6 documents" in plan_text(plan, path)
    from reindex.adapters.sources.jsonl import JsonlSource

    scans: list[int] = []
    real = JsonlSource.scan
    monkeypatch.setattr(JsonlSource, "scan", lambda self, *a, **kw: (scans.append(1), real(self, *a, **kw))[1])
    assert ix.sync()["outcome"] == "nothing-to-do" and len(scans) == 1  # no cursor to record: read once


# -- S3: the listing's ETag, LastModified and size ------------------------------------------------------


def _count_object_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from reindex.adapters.stores.objects import S3ObjectStore

    got: list[str] = []
    real = S3ObjectStore._get_object

    def get(self: Any, key: str):
        got.append(key)
        return real(self, key)

    monkeypatch.setattr(S3ObjectStore, "_get_object", get)
    return got


def test_an_s3_sync_reads_only_the_edited_object(tmp_path: Path, s3_server: str, s3_bucket: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.adapters.stores.objects import open_object_store

    bucket = open_object_store(f"s3://{s3_bucket}/docs", endpoint_url=s3_server)
    for f in DOCS:
        bucket.put(f.name, f.read_bytes())
    ix = Ix(tmp_path / "ix", {"uri": f"s3://{s3_bucket}/docs", "endpoint_url": s3_server})
    live = ix.build()
    assert ix.cursor(live)["kind"] == "listing"
    edited = DOCS[1].name
    bucket.put(edited, _edited(_text(DOCS[1])).encode())
    bucket.delete(DOCS[2].name)
    reads = _count_object_reads(monkeypatch)
    plan, path = ix.plan()
    assert plan.body["work"]["affected_documents"] == [edited]
    assert plan.body["work"]["removed_documents"] == [DOCS[2].name]
    assert reads == [edited]  # one object read; the listing told the others apart
    reads.clear()
    bucket.put(DOCS[3].name, DOCS[3].read_bytes())  # the same bytes, a new LastModified: the listing moved
    with pytest.raises(PlanError, match="the source moved since the plan"):
        ix.apply(path)
    plan, path = ix.plan()
    reads.clear()
    r = ix.apply(path)
    assert r.status == "done" and len(reads) == 2  # the drift check reads the edited and the re-put object
    assert ix.hashes(live)[edited] == _content_hash(_edited(_text(DOCS[1])))
    assert DOCS[2].name not in ix.points(live)


# -- Parquet: a cursor column, row-group statistics ---------------------------------------------------


def _write_parquet(path: Path, rows: list[dict], group: int = 2) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(rows, key=lambda r: r["updated_at"])
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=group)


def _count_groups_read(monkeypatch: pytest.MonkeyPatch, text_column: str = "text") -> list[int]:
    """Row groups whose text column is read (the seam every Parquet group read goes through)."""
    from reindex.foundation.tables import ParquetReader

    groups: list[int] = []
    real = ParquetReader.read_group

    def read_group(self: Any, group: int, columns: Any) -> dict:
        if text_column in columns:
            groups.append(group)
        return real(self, group, columns)

    monkeypatch.setattr(ParquetReader, "read_group", read_group)
    return groups


def _rows(n: int) -> list[dict]:
    """``n`` documents (slices of the sample's PEPs), ``updated_at`` 10, 20, …"""
    texts = [_text(f) for f in DOCS]
    return [{"id": f"doc-{i:03d}", "text": texts[i % len(texts)][i * 40: i * 40 + 1500], "updated_at": 10 * (i + 1),
             "deleted": False} for i in range(n)]


@pytest.mark.parametrize("tombstones", [False, True], ids=["id-listing", "deleted-flag"])
def test_a_parquet_sync_reads_the_row_groups_past_the_cursor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tombstones: bool) -> None:
    path = tmp_path / "corpus.parquet"
    rows = _rows(40)
    _write_parquet(path, rows, group=4)  # ten row groups
    source = {"uri": str(path), "cursor": "updated_at", **({"deleted_field": "deleted"} if tombstones else {})}
    ix = Ix(tmp_path / "ix", source)
    live = ix.build()
    assert ix.cursor(live)["kind"] == "mark"
    mark = max(r["updated_at"] for r in rows)
    edited, gone = rows[5], rows[17]
    edited.update(text=_edited(edited["text"]), updated_at=1000)
    if tombstones:
        gone.update(deleted=True, updated_at=1001)
    else:
        rows.remove(gone)
    _write_parquet(path, rows, group=4)
    ordered = sorted(r["updated_at"] for r in rows)
    past = [g for g in range(0, len(ordered), 4) if ordered[g: g + 4][-1] >= mark]  # at or past the old mark
    assert len(past) == 1 and len(ordered) // 4 >= 9
    groups = _count_groups_read(monkeypatch)
    plan, plan_path = ix.plan()
    assert plan.body["work"]["affected_documents"] == [edited["id"]]
    assert plan.body["work"]["removed_documents"] == [gone["id"]]
    assert groups == [g // 4 for g in past]  # the text of one row group of ten: only its statistics reach the mark
    groups.clear()
    r = ix.apply(plan_path)
    # The drift check, then the catch-up: the rows at the new mark are read again (ties), the same group.
    assert r.status == "done" and groups == [g // 4 for g in past] * 2
    assert ix.hashes(live)[edited["id"]] == _content_hash(edited["text"])
    assert gone["id"] not in ix.points(live)
    groups.clear()
    again, _ = ix.plan()
    assert again.kind == "none" and len(groups) == 1  # the group holding the new mark (ties), nothing else


def test_a_parquet_cursor_moved_between_plan_and_apply_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    rows = _rows(8)
    _write_parquet(path, rows)
    ix = Ix(tmp_path / "ix", {"uri": str(path), "cursor": "updated_at"})
    ix.build()
    rows[0].update(text=_edited(rows[0]["text"]), updated_at=50)
    _write_parquet(path, rows)
    _, plan_path = ix.plan()
    rows[2].update(text=_edited(rows[2]["text"]), updated_at=51)
    _write_parquet(path, rows)
    with pytest.raises(PlanError, match="the source moved since the plan"):
        ix.apply(plan_path)


# -- a change log: an offset ----------------------------------------------------------------------------


def _append(log: Path, *entries: dict) -> int:
    data = "".join(json.dumps(e) + "\n" for e in entries).encode()
    with log.open("ab") as f:
        f.write(data)
    return len(data)


def test_a_change_log_is_read_from_the_committed_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.adapters.sources.changelog import ChangelogSource

    log = tmp_path / "changes.jsonl"
    _append(log, *({"op": "upsert", "doc_id": f.name, "text": _text(f)} for f in DOCS))
    _append(log, {"op": "upsert", "doc_id": "draft", "text": "a draft"}, {"op": "delete", "doc_id": "draft"})
    ix = Ix(tmp_path / "ix", {"kind": "changelog", "uri": str(log)})
    live = ix.build()
    assert sorted(ix.hashes(live)) == sorted(f.name for f in DOCS)  # the fold: the draft was deleted
    assert ix.cursor(live)["kind"] == "offset"
    start = log.stat().st_size
    appended = _append(log, {"op": "upsert", "doc_id": DOCS[0].name, "text": _edited(_text(DOCS[0]))},
                       {"op": "delete", "doc_id": DOCS[1].name})
    seen: list[int] = []
    real = ChangelogSource._lines

    def lines(self: Any, f: Any, begin: int, end: int):
        for offset, raw in real(self, f, begin, end):
            seen.append(len(raw))
            yield offset, raw

    monkeypatch.setattr(ChangelogSource, "_lines", lines)
    plan, path = ix.plan()
    assert sum(seen) == appended  # the appended entries only, not the log before the offset
    read = plan.body["inputs"]["corpus"]["read"]
    assert (read["mode"], read["cursor"], read["bytes_read"]) == ("cursor", "offset", appended)
    assert plan.body["work"]["affected_documents"] == [DOCS[0].name]
    assert plan.body["work"]["removed_documents"] == [DOCS[1].name]
    with log.open("ab") as f:
        f.write(b'{"op": "upsert", "doc_id": "half-written"')  # no newline yet: left for the next sync
    seen.clear()
    r = ix.apply(path)
    assert r.status == "done" and sum(seen) == appended
    assert DOCS[1].name not in ix.points(live)
    assert ix.hashes(live)[DOCS[0].name] == _content_hash(_edited(_text(DOCS[0])))
    assert ix.cursor(live) and json.loads(ix.state().get(
        f"indexes/docs/populations/{live}/cursors/{ix.cursor(live)['digest']}.json"))["position"]["offset"] == \
        start + appended


def test_a_change_log_appended_between_plan_and_apply_is_refused_and_a_rewritten_one_needs_verify(
        tmp_path: Path) -> None:
    log = tmp_path / "changes.jsonl"
    _append(log, *({"op": "upsert", "doc_id": f.name, "text": _text(f)} for f in DOCS))
    ix = Ix(tmp_path / "ix", {"kind": "changelog", "uri": str(log)})
    live = ix.build()
    _append(log, {"op": "upsert", "doc_id": "a", "text": "first"})
    _, path = ix.plan()
    _append(log, {"op": "upsert", "doc_id": "b", "text": "second"})
    with pytest.raises(PlanError, match="the source moved since the plan"):
        ix.apply(path)
    log.write_text(log.read_text().replace("first", "FIRST"))  # rewritten before the committed offset? not yet
    assert ix.sync()["outcome"] == "applied-in-place"
    log.write_text(log.read_text().replace("second", "SECOND"))  # rewritten under the committed offset
    with pytest.raises(SourceError, match=r"was rewritten or truncated before offset .*run `reindex sync --verify`"):
        ix.plan()
    out = ix.sync("--verify")
    assert out["outcome"] == "applied-in-place"
    assert ix.hashes(live)["b"] == _content_hash("SECOND")


# -- PostgreSQL: a cursor column, ties at the mark ------------------------------------------------------


def _pg_binaries() -> tuple[str, str] | None:
    for folder in [None, *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]:
        initdb = shutil.which("initdb", path=str(folder) if folder else None)
        pg_ctl = shutil.which("pg_ctl", path=str(folder) if folder else None)
        if initdb and pg_ctl:
            return initdb, pg_ctl
    return None


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A private PostgreSQL server on 127.0.0.1 (trust auth, user postgres) for the session; skips where the
    binaries are absent (``apt-get install postgresql``; .ci/run installs them)."""
    found = _pg_binaries()
    if found is None:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    initdb, pg_ctl = found
    folder = Path(tempfile.mkdtemp(prefix="rxpg-"))  # short: the socket's path must fit in 107 bytes
    run_as: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        user = "postgres" if _user_exists("postgres") else "nobody"
        shutil.chown(folder, user)
        run_as = ["runuser", "-u", user, "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = folder / "data"
    subprocess.run([*run_as, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"], check=True,
                   capture_output=True)
    subprocess.run([*run_as, pg_ctl, "-D", str(data), "-o", f"-k {folder} -p {port} -c listen_addresses=127.0.0.1",
                    "-w", "-l", str(folder / "log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://127.0.0.1:{port}/postgres?user=postgres"
    finally:
        subprocess.run([*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _pg(url: str, sql: str, *params: Any) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql, params or None)


def _count_pg_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows that carry a document's text, per query (the seam every PostgreSQL read goes through)."""
    from reindex.adapters.sources.postgres import PostgresSource

    counts: list[int] = []
    real = PostgresSource._rows

    def rows(self: Any, conn: Any, query: Any, params: Any = None):
        carries_text = f'"{self.text_column}"' in query.as_string(conn)
        n = 0
        for row in real(self, conn, query, params):
            n += 1
            yield row
        if carries_text:
            counts.append(n)

    monkeypatch.setattr(PostgresSource, "_rows", rows)
    return counts


def _pg_table(postgres: str, tombstones: bool) -> str:
    table = f"docs_{uuid.uuid4().hex[:8]}"
    _pg(postgres, f"CREATE TABLE {table} (id text PRIMARY KEY, body text, lang text, updated_at timestamptz NOT NULL, "
                  "deleted boolean NOT NULL DEFAULT false)")
    for i, f in enumerate(DOCS):
        _pg(postgres, f"INSERT INTO {table} VALUES (%s, %s, 'en', '2026-12-01T10:00:00Z'::timestamptz + %s * interval "
                      "'1 minute')", f.name, _text(f), i)
    return table


@pytest.mark.parametrize("tombstones", [False, True], ids=["id-scan", "tombstone"])
def test_a_postgresql_sync_reads_the_rows_past_the_mark(tmp_path: Path, postgres: str,
                                                        monkeypatch: pytest.MonkeyPatch, tombstones: bool) -> None:
    table = _pg_table(postgres, tombstones)
    source = {"uri": f"{postgres}&table={table}", "text_field": "body", "cursor": "updated_at",
              "metadata_fields": ["lang"], **({"deleted_field": "deleted"} if tombstones else {})}
    ix = Ix(tmp_path / "ix", source)
    live = ix.build()
    assert ix.cursor(live)["kind"] == "mark"
    edited, gone = DOCS[1].name, DOCS[2].name
    _pg(postgres, f"UPDATE {table} SET body = body || ' Edited.', updated_at = '2026-12-02T00:00:00Z' WHERE id = %s",
        edited)
    if tombstones:
        _pg(postgres, f"UPDATE {table} SET deleted = true, updated_at = '2026-12-02T00:00:01Z' WHERE id = %s", gone)
    else:
        _pg(postgres, f"DELETE FROM {table} WHERE id = %s", gone)
    counts = _count_pg_rows(monkeypatch)
    plan, path = ix.plan()
    assert plan.body["work"]["affected_documents"] == [edited]
    assert plan.body["work"]["removed_documents"] == [gone]
    past = 3 if tombstones else 2  # the row at the mark (a tie: told apart by its hash) and the rows past it
    assert counts == [past]  # and, without tombstones, the id column alone for removals
    counts.clear()
    r = ix.apply(path)
    assert r.status == "done" and counts == [past, 1]  # the drift check, then the catch-up: the row at the new mark
    assert r.report["catch_up"]["documents"] == 0  # which holds what the population holds: nothing replayed
    assert gone not in ix.points(live)
    assert ix.hashes(live)[edited] != ix.hashes(live).get(DOCS[0].name)


def test_a_postgresql_row_written_at_the_mark_after_the_sync_is_not_missed(tmp_path: Path, postgres: str) -> None:
    table = _pg_table(postgres, False)
    ix = Ix(tmp_path / "ix", {"uri": f"{postgres}&table={table}", "text_field": "body", "cursor": "updated_at"})
    live = ix.build()
    mark = "2026-12-01T10:05:00Z"  # the highest value at the build (the last of six rows, one minute apart)
    _pg(postgres, f"UPDATE {table} SET body = 'Rewritten with the same timestamp as the mark.', updated_at = %s "
                  "WHERE id = %s", mark, DOCS[0].name)  # a writer whose clock gave it the mark's value
    plan, path = ix.plan()
    assert plan.body["work"]["affected_documents"] == [DOCS[0].name]
    assert ix.apply(path).status == "done"
    assert ix.hashes(live)[DOCS[0].name] == _content_hash("Rewritten with the same timestamp as the mark.")


def test_a_postgresql_cursor_moved_between_plan_and_apply_is_refused(tmp_path: Path, postgres: str) -> None:
    table = _pg_table(postgres, False)
    ix = Ix(tmp_path / "ix", {"uri": f"{postgres}&table={table}", "text_field": "body", "cursor": "updated_at"})
    ix.build()
    _pg(postgres, f"UPDATE {table} SET body = 'one', updated_at = '2026-12-03T00:00:00Z' WHERE id = %s", DOCS[0].name)
    _, path = ix.plan()
    _pg(postgres, f"UPDATE {table} SET body = 'two', updated_at = '2026-12-03T00:00:01Z' WHERE id = %s", DOCS[3].name)
    with pytest.raises(PlanError, match="the source moved since the plan"):
        ix.apply(path)


def test_a_password_in_a_postgresql_url_is_refused(tmp_path: Path) -> None:
    from reindex.errors import ConfigError

    with pytest.raises(ConfigError, match=r"source.uri: .*holds a password; remove it and put it in the environment "
                                          r"\(PGPASSWORD, or the variable source.password_env names\)"):
        api.load_resolved(Ix(tmp_path, {"uri": "postgresql://db.example/docs?table=t&password=hunter2"}).config)


# -- builds, cutovers and resumes keep the cursor honest ----------------------------------------------


def test_a_shadow_is_caught_up_at_cutover_from_its_own_cursor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ix, corpus, live = _folder(tmp_path)
    ix.config.write_text(ix.config.read_text().replace("size: 150", "size: 120"), encoding="utf-8")
    plan, path = ix.plan()
    assert plan.kind == "pipeline-scoped/text" and plan.body["inputs"]["corpus"]["read"]["mode"] == "full"
    api.approve_plan(path, "tester")
    built = ix.apply(path)
    shadow = built.collection
    assert shadow != live and ix.cursor(shadow)["run"] == plan.plan_hash
    target = corpus / DOCS[0].name
    target.write_text(_edited(_text(target)), encoding="utf-8")  # edited after the shadow was built
    queries = tmp_path / "queries.jsonl"  # a queries file: the cutover samples no probes from the corpus
    queries.write_text(json.dumps({"query": "generators"}) + "\n", encoding="utf-8")
    opened = _count_file_reads(monkeypatch, corpus)
    c = api.cutover(path, ix.config, force=True, by="tester", queries=queries)
    # The cutover's look for changes, then its catch-up: the edited file only, found from the shadow's cursor.
    assert c.report["caught_up"]["documents"] == 1 and opened == [target.name] * 2
    assert ix.hashes(shadow)[target.name] == _content_hash(_text(target))
    assert ix.cursor(shadow)["previous"] is not None  # the catch-up's cursor was committed


def test_a_run_killed_after_committing_its_cursor_resumes_with_its_plan(tmp_path: Path) -> None:
    ix, corpus, live = _folder(tmp_path)
    target = corpus / DOCS[1].name
    target.write_text(_edited(_text(target)), encoding="utf-8")
    plan, path = ix.plan()
    assert ix.apply(path).status == "done"
    state = ix.state()
    state.delete(f"indexes/docs/runs/{plan.plan_hash}/done.json")  # killed between the cursor and done.json
    again = ix.apply(path)
    assert again.status == "done" and again.report["actual"]["shards_skipped"] >= 1
    rec = ix.cursor(live)
    rec.update(run="another-plan")
    state.put(f"indexes/docs/populations/{live}/cursor.json", json.dumps(rec).encode())
    state.delete(f"indexes/docs/runs/{plan.plan_hash}/done.json")
    with pytest.raises(PlanError, match=f"the live population {live} recorded another cursor since the plan"):
        ix.apply(path)


def test_a_file_edited_during_the_sync_is_caught_up_and_the_cursor_moves_past_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.context import backends

    ix, corpus, live = _folder(tmp_path)
    first, second = corpus / DOCS[0].name, corpus / DOCS[3].name
    first.write_text(_edited(_text(first)), encoding="utf-8")
    plan, path = ix.plan()
    real_make = backends.make_embedder

    class EditingEmbedder:  # edits another file while the sync embeds: the catch-up's to find
        def __init__(self, inner: Any) -> None:
            self.inner, self.dimension, self.max_tokens = inner, inner.dimension, inner.max_tokens

        def embed(self, texts: list[str]) -> Any:
            if _text(second) == _text(DOCS[3]):
                second.write_text(_edited(_text(second)), encoding="utf-8")
            return self.inner.embed(texts)

    monkeypatch.setattr(backends, "make_embedder", lambda *a, **kw: EditingEmbedder(real_make(*a, **kw)))
    during = _count_file_reads(monkeypatch, corpus)
    r = ix.apply(path)
    monkeypatch.undo()
    assert r.status == "done" and r.report["catch_up"]["documents"] == 1
    # The drift check reads the planned edit, the catch-up's first round the new one; its second round starts
    # past it and reads nothing.
    assert during == [first.name, second.name]
    assert ix.hashes(live)[second.name] == _content_hash(_text(second))
    opened = _count_file_reads(monkeypatch, corpus)
    again, _ = ix.plan()
    assert again.kind == "none" and opened == []  # the committed cursor is the catch-up's, past the second edit


def test_a_bad_file_is_read_and_reported_by_every_sync_and_a_broken_one_keeps_its_points(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in DOCS:
        shutil.copy(f, corpus / f.name)
    (corpus / "blank.md").write_text("   \n", encoding="utf-8")  # bad: empty
    ix = Ix(tmp_path / "ix", {"uri": str(corpus)})
    live = ix.build()
    opened = _count_file_reads(monkeypatch, corpus)
    plan, _ = ix.plan()
    assert plan.kind == "none" and opened == ["blank.md"]  # not held by the population: read and reported again
    assert [b["doc_id"] for b in plan.body["work"]["bad_documents"]] == ["blank.md"]
    broken, other = corpus / DOCS[2].name, corpus / DOCS[4].name
    broken.write_bytes(b"\0binary now")
    other.write_text(_edited(_text(other)), encoding="utf-8")
    assert ix.sync()["outcome"] == "applied-in-place"  # the edit is applied, and its cursor committed
    opened.clear()
    for _ in range(2):  # the broken file keeps its old signature: every sync reads it again until it is readable
        plan, path = ix.plan()
        assert plan.body["work"]["unreadable_documents"] == [broken.name] and broken.name in opened
        assert plan.kind == "none" and ix.sync()["outcome"] == "nothing-to-do"
        opened.clear()
    assert ix.points(live)[broken.name] >= 1


def test_a_document_that_became_a_fifo_keeps_its_points_through_plan_apply_and_catch_up(tmp_path: Path) -> None:
    """A file the population holds is replaced by a FIFO: the listing does not list it (it is reported bad, never
    opened), so by the listing it is gone. Plan, apply's drift check and the catch-up (which runs because another
    document was edited) each keep it as unreadable, never removed (invariant 8)."""
    ix, corpus, live = _folder(tmp_path)
    fifo, other = corpus / DOCS[3].name, corpus / DOCS[5].name
    fifo.unlink()
    os.mkfifo(fifo)
    other.write_text(_edited(_text(other)), encoding="utf-8")
    plan, _ = ix.plan()
    assert plan.body["work"]["unreadable_documents"] == [fifo.name] and plan.body["work"]["removed_documents"] == []
    assert ix.sync()["outcome"] == "applied-in-place"
    assert ix.points(live)[fifo.name] >= 1
    assert ix.hashes(live)[other.name] == _content_hash(_text(other))


def test_the_cursor_fields_are_in_the_config_digest_only_when_set() -> None:
    """A plan made before them still applies; a plan made with a cursor does not apply once it is removed.
    The variable a password is read from is in no digest (rotating it plans nothing)."""
    from reindex.domain.config import config_from_dict
    from reindex.domain.identity import config_digest, legacy_config_digest

    def cfg(**source: object):
        return config_from_dict({"index": "docs", "source": {"uri": "/a/corpus", **source}, "vector": {"provider": "hash"}})

    assert (config_digest(cfg()), legacy_config_digest(cfg())) == ("820406ba658d156955746de247480cf0",
                                                                   "be3a0f8ce25431b5d2725940c33b1c2e")
    for field in ({"cursor": "updated_at"}, {"deleted_field": "gone"}, {"kind": "changelog"}, {"table": "t"}):
        assert config_digest(cfg(**field)) != config_digest(cfg()), field
    assert config_digest(cfg(password_env="DB_PASSWORD")) == config_digest(cfg())
