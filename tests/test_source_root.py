"""Invariant 16: nothing outside the source's root is read into the index, symlinks included (issue 33: `ln -s
/etc/passwd docs/passwd.txt` published the host's password file to every reader). Real symlinks in tmp folders,
the real CLI, the embedded store."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import SAMPLE, Workspace

from reindex.cli import main
from reindex.domain.config import SourceConfig
from reindex.adapters.sources import ScanReport, open_source

MARKER = "zebracorn-outside-the-source-folder"
PASSWD = "outside the source: symlink to a file outside the source folder (/etc/passwd); not read (set " \
         "source.follow_symlinks: true to read it)"


def _reason(target: Path | str, what: str = "file") -> str:
    return (f"outside the source: symlink to a {what} outside the source folder ({target}); not read (set "
            "source.follow_symlinks: true to read it)")


def _scan(root: Path, **cfg: object) -> tuple[dict[str, bytes], dict[str, str]]:
    report = ScanReport()
    docs = {d.doc_id: d.data for d in open_source(SourceConfig(uri=str(root), **cfg)).scan(report)}
    return docs, {b.doc_id: b.reason for b in report.bad}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the source, with a file only a link can reach."""
    d = tmp_path / "outside"
    (d / "deep").mkdir(parents=True)
    (d / "notes.txt").write_text(f"{MARKER} private notes\n", encoding="utf-8")
    (d / "deep" / "more.txt").write_text(f"{MARKER} more\n", encoding="utf-8")
    return d


def test_a_link_out_of_the_folder_is_a_bad_document_and_follow_symlinks_reads_it(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha inside\n", encoding="utf-8")
    (root / "sub" / "b.txt").write_text("beta inside\n", encoding="utf-8")
    (root / "passwd.txt").symlink_to("/etc/passwd")
    (root / "notes.txt").symlink_to(outside / "notes.txt")
    (root / "ext").symlink_to(outside)  # a linked folder outside
    (root / "sub" / "alias.txt").symlink_to("../a.txt")  # inside: read under the link's name
    (root / "same").symlink_to("sub")  # a linked folder inside: its files are read once, under sub/
    (root / "gone.txt").symlink_to("missing.txt")
    (root / "passwd.bin").symlink_to("/etc/passwd")  # matches no include pattern: skipped, not reported

    docs, bad = _scan(root)
    assert sorted(docs) == ["a.txt", "sub/alias.txt", "sub/b.txt"]
    assert docs["sub/alias.txt"] == b"alpha inside\n"
    assert bad == {"passwd.txt": PASSWD, "notes.txt": _reason(outside / "notes.txt"),
                   "ext/": _reason(outside, "folder"),
                   "gone.txt": "unreadable: broken symlink (its target missing.txt does not exist)"}

    docs, bad = _scan(root, follow_symlinks=True)
    assert sorted(docs) == ["a.txt", "ext/deep/more.txt", "ext/notes.txt", "notes.txt", "passwd.txt", "sub/alias.txt",
                            "sub/b.txt"]
    assert MARKER.encode() in docs["notes.txt"] and docs["passwd.txt"] == Path("/etc/passwd").read_bytes()
    assert bad == {"gone.txt": "unreadable: broken symlink (its target missing.txt does not exist)"}


def test_the_source_folder_may_itself_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("alpha\n", encoding="utf-8")
    (real / "b.txt").symlink_to(real / "a.txt")  # absolute, through the real path
    (tmp_path / "docs").symlink_to(real)
    docs, bad = _scan(tmp_path / "docs")
    assert sorted(docs) == ["a.txt", "b.txt"] and bad == {}


def test_symlink_loops_end_the_scan_and_are_reported(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n", encoding="utf-8")
    (root / "one.txt").symlink_to("two.txt")
    (root / "two.txt").symlink_to("one.txt")
    (root / "ext").symlink_to(outside)
    (outside / "deep" / "up").symlink_to("..")  # followed: back to a folder it is inside
    (outside / "deep" / "home").symlink_to(root)  # back into the source: read there, not entered again
    results: dict[bool, tuple] = {}

    def scan_both() -> None:
        for follow in (False, True):
            results[follow] = _scan(root, follow_symlinks=follow)

    t = threading.Thread(target=scan_both, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the scan did not end: a symlink loop was followed"
    docs, bad = results[True]
    assert sorted(docs) == ["a.txt", "ext/deep/more.txt", "ext/notes.txt"]
    assert bad == {"one.txt": "unreadable: symlink loop", "two.txt": "unreadable: symlink loop",
                   "ext/deep/up/": f"unreadable: symlink loop (links back to {outside}, a folder it is inside)"}
    assert set(results[False][1]) == {"one.txt", "two.txt", "ext/"}


def test_a_file_swapped_for_an_outside_link_during_the_scan_is_not_read(tmp_path: Path, outside: Path) -> None:
    """The race the listing cannot see: the file is a regular file when listed and a link when read. The scan's
    ``keep`` callback runs between the two, so it does the swap (no patching)."""
    root = tmp_path / "docs"
    root.mkdir()
    for name in ("a.txt", "b.txt"):
        (root / name).write_text(f"{name} inside\n", encoding="utf-8")

    def swap(doc_id: str) -> bool:
        if doc_id == "b.txt":
            (root / "b.txt").unlink()
            (root / "b.txt").symlink_to(outside / "notes.txt")
        return True

    report = ScanReport()
    docs = {d.doc_id: d.data for d in open_source(SourceConfig(uri=str(root))).scan(report, keep=swap)}
    assert docs == {"a.txt": b"a.txt inside\n"}
    assert [(b.doc_id, b.reason, b.kind) for b in report.bad] == [
        ("b.txt", _reason(outside / "notes.txt"), "outside-source")]


def _cli(ws: Path, *args: str, code: int = 0) -> str:
    r = CliRunner().invoke(main, [*args, "-c", str(ws / "reindex.yaml")])
    assert r.exit_code == code, (args, r.output)
    return r.output


def _build(ws: Path, plan_code: int = 2) -> str:
    out = _cli(ws, "plan", "--out", str(ws / "plans"), code=plan_code)
    plan = next(line.split("plan: ", 1)[1] for line in out.splitlines() if line.strip().startswith("plan: "))
    if "approval required" in out:
        _cli(ws, "approve", plan, "--by", "tester")
    _cli(ws, "apply", plan, "--no-prefect", "--no-progress")
    if not out.startswith("document-scoped"):
        _cli(ws, "cutover", plan)
    return out


def _hits(ws: Path, text: str, *filters: str) -> list[dict]:
    args = [f"--filter={f}" for f in filters]
    return json.loads(_cli(ws, "query", text, "--k", "50", "--json", *args))["results"]


def test_plan_apply_and_query_never_serve_a_file_outside_the_source(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    (ws / "corpus" / "passwd.txt").symlink_to("/etc/passwd")
    (ws / "corpus" / "notes.txt").symlink_to(outside / "notes.txt")
    config = "index: docs\nsource: {{uri: ./corpus{follow}}}\nvector: {{provider: hash}}\napply: {{shards: 2}}\n"
    (ws / "reindex.yaml").write_text(config.format(follow=""), encoding="utf-8")

    out = _build(ws)
    assert "  documents: 24 added, 0 edited, 0 removed, 0 unchanged, 2 bad\n" in out, out
    assert f"    bad: notes.txt: {_reason(outside / 'notes.txt')}\n" in out
    assert f"    bad: passwd.txt: {PASSWD}\n" in out
    assert _hits(ws, "root", "doc_id=passwd.txt") == [] and _hits(ws, MARKER, "doc_id=notes.txt") == []
    hits = _hits(ws, MARKER)
    assert hits and not any(MARKER in h["page_content"] or "root:" in h["page_content"] for h in hits)

    # Opting in reads them: a document-scoped change (the corpus digest holds which documents exist).
    (ws / "reindex.yaml").write_text(config.format(follow=", follow_symlinks: true"), encoding="utf-8")
    out = _build(ws)
    assert out.startswith("document-scoped") and "  documents: 2 added, 0 edited, 0 removed, 24 unchanged, 0 bad" in out
    assert any(MARKER in h["page_content"] for h in _hits(ws, MARKER, "doc_id=notes.txt"))


def test_a_live_document_that_becomes_an_outside_link_is_unreadable_not_removed(tmp_path: Path, outside: Path) -> None:
    """Invariant 8's rule for a document that cannot be read holds for one that may not be read: its live
    points stay, the plan lists it, and nothing of the link's target is read."""
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    victim = sorted(p.name for p in ws.corpus.glob("*.rst"))[0]
    before = ws.snapshot(live).by_doc()[victim]
    (ws.corpus / victim).unlink()
    (ws.corpus / victim).symlink_to(outside / "notes.txt")
    plan, path = ws.plan()
    assert plan.kind == "none", plan.kind
    assert plan.body["work"]["unreadable_documents"] == [victim]
    assert plan.body["work"]["removed_documents"] == []
    assert plan.body["work"]["bad_documents"] == [{"doc_id": victim, "reason": _reason(outside / "notes.txt")}]
    assert ws.snapshot(live).by_doc()[victim] == before > 0
    assert os.path.islink(ws.corpus / victim)


def test_follow_symlinks_is_in_the_config_digest_only_when_on() -> None:
    """A plan made before the field existed recorded these digests (pinned from main b4bcc57): it still applies;
    a plan made with links followed does not apply once they are not (and the corpus digest would differ too)."""
    from reindex.domain.config import config_from_dict
    from reindex.domain.identity import config_digest, identity_of, legacy_config_digest

    def cfg(**source: object):
        return config_from_dict({"index": "docs", "source": {"uri": "/a/corpus", **source}, "vector": {"provider": "hash"}})

    assert (config_digest(cfg()), legacy_config_digest(cfg())) == ("820406ba658d156955746de247480cf0",
                                                                   "be3a0f8ce25431b5d2725940c33b1c2e")
    assert config_digest(cfg(follow_symlinks=True)) != config_digest(cfg())
    assert legacy_config_digest(cfg(follow_symlinks=True)) != legacy_config_digest(cfg())
    assert identity_of(cfg(follow_symlinks=True)) == identity_of(cfg())  # neither half: no text or vector id


def test_an_s3_source_reads_only_keys_under_its_prefix(s3_server: str, s3_bucket: str) -> None:
    """S3 has no links; the analogue is a key or prefix with '..' parts, which S3 keeps literally and a server
    that resolves dot segments would not: such a key is a bad document (never fetched), such a prefix refused."""
    import boto3

    from reindex.errors import SourceError

    s3 = boto3.client("s3", endpoint_url=s3_server)
    for key in ("docs/a.txt", "secret/x.txt", "docs/../secret/x.txt", "docs/sub/../../secret/x.txt"):
        s3.put_object(Bucket=s3_bucket, Key=key, Body=f"{MARKER} {key}".encode())
    report = ScanReport()
    docs = {d.doc_id: d.data for d in open_source(SourceConfig(uri=f"s3://{s3_bucket}/docs",
                                                              endpoint_url=s3_server)).scan(report)}
    assert docs == {"a.txt": f"{MARKER} docs/a.txt".encode()}
    assert {b.doc_id: b.reason.split(":")[0] for b in report.bad} == {"../secret/x.txt": "unreadable",
                                                                     "sub/../../secret/x.txt": "unreadable"}
    with pytest.raises(SourceError, match=r"^source s3://[^:]+/docs/\.\./: the prefix has a '\.' or '\.\.' part, "
                                          r"which S3 takes literally \(some servers resolve it\); name the prefix without it$"):
        open_source(SourceConfig(uri=f"s3://{s3_bucket}/docs/../", endpoint_url=s3_server))
