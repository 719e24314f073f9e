"""CLI hygiene (issue 15): usage errors exit 64 on every command, `--json` on every command prints one JSON
document, approvals live outside the `plans/*.json` glob (old records still read), and `validate` finds a
missing or unreadable source and a dimension the model does not produce."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from helpers_index import SAMPLE, Workspace

from reindex import api
from reindex.planner.approvals import approval_path, rejection_path
from reindex.cli import EXIT_USAGE, main
from reindex.errors import ApprovalError

CASES = Path(__file__).parent / "cases"


@pytest.fixture
def no_prefect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Prefect API and no profile: commands that talk to Prefect can only record or report none."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))


def _commands() -> list[str]:
    return sorted(main.commands)


# exit codes --------------------------------------------------------------------------------------------


def test_every_usage_error_exits_64_not_the_changes_planned_code() -> None:
    runner = CliRunner()
    assert EXIT_USAGE == 64
    for name in _commands():
        r = runner.invoke(main, [name, "--no-such-option"])
        assert r.exit_code == EXIT_USAGE, (name, r.exit_code, r.output)
        assert "No such option" in r.stderr, name
    for args in (["--no-such-option"], ["no-such-command"], ["plan", "--sample", "many"], ["show"]):
        r = runner.invoke(main, args)
        assert r.exit_code == EXIT_USAGE, (args, r.exit_code, r.output)


def test_help_documents_every_exit_code() -> None:
    text = " ".join(CliRunner().invoke(main, ["--help"]).output.split())
    for code in ("0 success", "1 error", "2 plan: changes planned", "3 cutover: gate failed", "64 usage error"):
        assert code in text, code
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    for row in ("| 64 |", "| 2 |", "| 3 |"):
        assert row in readme, row


# --json on every command ---------------------------------------------------------------------------------


def _one_json(r, name: str) -> object:
    assert r.exception is None or isinstance(r.exception, SystemExit), (name, r.exception)
    out = r.stdout.strip()
    assert out, (name, r.exit_code, r.stderr)
    return json.loads(out)  # exactly one document: json.loads refuses trailing data


def test_every_command_takes_json_and_prints_one_document(tmp_path: Path, no_prefect: None) -> None:
    runner = CliRunner()
    ws = Workspace(tmp_path / "ws")
    cfg = str(ws.config)
    pairs = tmp_path / "pairs.jsonl"
    edited = min(p.name for p in (SAMPLE / "edits").glob("*.rst"))
    old, new = (SAMPLE / "corpus" / edited).read_text(), (SAMPLE / "edits" / edited).read_text()
    pairs.write_text(json.dumps({"pair_id": "p1", "lang": "en", "doc_path": "a.rst", "old_text": old,
                                 "new_text": new}) + "\n")
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    for f in sorted((SAMPLE / "corpus").glob("*.rst"))[:3]:
        shutil.copy(f, fixture / f.name)
    head = tmp_path / "head.yaml"
    plan_dir = ws.plans
    seen: dict[str, object] = {}

    def run(name: str, *args: str, code: int = 0) -> object:
        r = runner.invoke(main, [name, *args, "--json"])
        assert r.exit_code == code, (name, r.exit_code, r.output)
        seen[name] = _one_json(r, name)
        return seen[name]

    run("init", "-c", str(tmp_path / "new.yaml"))
    run("validate", "-c", cfg)
    run("chunk", str(next((SAMPLE / "corpus").glob("*.rst"))), "-c", cfg)
    planned = run("plan", "-c", cfg, "--out", str(plan_dir), code=2)
    path = planned["plan_file"]
    run("show", path)
    assert run("approve", path, "--by", "alice")["approved"] is True
    run("apply", path, "-c", cfg, "--no-progress")
    run("cutover", path, "-c", cfg)
    # A second population, so that there is something to roll back to.
    ws.write_config(100, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n")
    second = run("plan", "-c", cfg, "--out", str(plan_dir), code=2)["plan_file"]
    run("approve", second, "--by", "alice")
    run("apply", second, "-c", cfg, "--no-progress")
    run("cutover", second, "-c", cfg)
    run("rollback", "-c", cfg)
    # After a rollback the config still asks for the second population, whose plan was carried out: a cron
    # tick must not undo the rollback (exit 2: a person decides).
    assert "moved back since" in run("sync", "-c", cfg, "--plans", str(plan_dir), "--no-gc", code=2)["message"]
    run("gc", "-c", cfg, "--dry-run")
    run("status", "-c", cfg)
    assert run("doctor", "-c", cfg, "--plans", str(plan_dir))["healthy"] is True
    run("serving", "-c", cfg)
    run("query", "PEP", "-c", cfg, "--k", "2")
    run("runs")
    run("estimate", "--histogram", str(CASES / "seed001_buckets.csv"), "--from", "sliding:size=512,overlap=0.1",
        "--to", "sliding:size=256,overlap=0.2")
    head.write_text(ws.config.read_text().replace("size: 100", "size: 60"))
    run("classify", "--fixture", str(fixture), "--base", cfg, "--head", str(head), code=3)
    run("calibrate", "-c", cfg, "--chunks", "4")
    run("measure", "--pairs", str(pairs), "--chunker", "fixed:size=64", "-c", cfg)
    # deploy, deploy-shards and serve need a Prefect API: the failure is one line on stderr and nothing on stdout.
    for name, args in (("deploy", ["-c", str(tmp_path / "missing.yaml")]), ("serve", ["-c", str(tmp_path / "missing.yaml")]),
                       ("deploy-shards", ["--pool", "gpu"])):
        r = runner.invoke(main, [name, *args, "--json"])
        assert r.exit_code == 1, (name, r.output)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (name, r.stderr)
        seen[name] = None
    assert sorted(seen) == _commands(), set(_commands()) ^ set(seen)


# approvals --------------------------------------------------------------------------------------------


def test_approvals_live_outside_the_plans_glob_and_old_records_are_still_read(tmp_path: Path, no_prefect: None) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    r = CliRunner().invoke(main, ["approve", str(path), "--by", "alice", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["record"] == str(approval_path(path))
    assert approval_path(path) == ws.plans / "approvals" / path.name
    assert approval_path(path).is_file()
    # `plans/*.json` now finds plan files only (their reports are .md/.html).
    assert sorted(p.name for p in ws.plans.glob("*.json")) == [path.name]
    assert api.approval_status(path).by == "alice"

    # A record written beside the plan by an earlier version is still honoured ...
    legacy = path.with_name(path.stem + ".approval.json")
    approval_path(path).rename(legacy)
    assert api.approval_status(path).by == "alice"
    legacy.unlink()
    assert api.approval_status(path) is None  # (an initial build needs no approval: the record is just gone)

    # ... and so is an old rejection: it revokes an approval and refuses a new one.
    api.approve_plan(path, "carol")
    api.reject_and_resume(path, "bob", "too big")
    rejection_path(path).rename(path.with_name(path.stem + ".rejection.json"))
    with pytest.raises(ApprovalError, match="was revoked: the plan was rejected by bob"):
        api.approval_status(path)
    assert plan.plan_hash


# validate --------------------------------------------------------------------------------------------


def _validate(cfg: Path) -> click.testing.Result:
    return CliRunner().invoke(main, ["validate", "-c", str(cfg)])


def _config(tmp_path: Path, source: str, vector: str = "{provider: hash}", extra: str = "") -> Path:
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text(f"index: docs\nsource: {source}\nvector: {vector}\n{extra}")
    return cfg


def test_validate_accepts_a_readable_source(tmp_path: Path) -> None:
    shutil.copytree(SAMPLE / "corpus", tmp_path / "corpus")
    r = _validate(_config(tmp_path, "./corpus"))
    assert r.exit_code == 0, r.output
    assert r.stderr == "" and ": valid" in r.stdout


def test_validate_refuses_a_missing_or_empty_folder(tmp_path: Path) -> None:
    r = _validate(_config(tmp_path, "./missing"))
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(f"error: source '{tmp_path}/missing' does not exist")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    (tmp_path / "missing").mkdir()
    (tmp_path / "missing" / "notes.pdf").write_bytes(b"%PDF")
    r = _validate(_config(tmp_path, "./missing"))
    assert r.exit_code == 1, r.output
    assert r.stderr == (f"error: source {tmp_path}/missing: no documents match source.include "
                        "(*.txt, *.md, *.rst, *.html, *.htm)\n")


def test_validate_refuses_unreadable_jsonl_and_parquet(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    r = _validate(_config(tmp_path, "./bad.jsonl"))
    assert r.exit_code == 1 and "bad.jsonl: no readable document (line:1: malformed JSON" in r.stderr, r.output
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    r = _validate(_config(tmp_path, "./bad.parquet"))
    assert r.exit_code == 1 and "cannot read Parquet source" in r.stderr, r.output
    (tmp_path / "empty.jsonl").write_text("")
    r = _validate(_config(tmp_path, "./empty.jsonl"))
    assert r.exit_code == 1 and "empty.jsonl: no documents in it" in r.stderr, r.output
    (tmp_path / "ok.jsonl").write_text(json.dumps({"id": "a", "text": "hello"}) + "\n")
    assert _validate(_config(tmp_path, "./ok.jsonl")).exit_code == 0


def test_validate_checks_an_s3_prefix(tmp_path: Path, s3_server: str, s3_bucket: str) -> None:
    import boto3

    src = f"{{uri: 's3://{s3_bucket}/docs', endpoint_url: '{s3_server}'}}"
    r = _validate(_config(tmp_path, src))
    assert r.exit_code == 1, r.output
    assert f"source s3://{s3_bucket}/docs: no objects under this prefix match source.include" in r.stderr
    boto3.client("s3", endpoint_url=s3_server).put_object(Bucket=s3_bucket, Key="docs/a.md", Body=b"# hello\n")
    r = _validate(_config(tmp_path, src))
    assert r.exit_code == 0, r.output
    r = _validate(_config(tmp_path, f"{{uri: 's3://no-such-bucket-15/docs', endpoint_url: '{s3_server}'}}"))
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1, r.output
    assert "no-such-bucket-15" in r.stderr


def test_validate_refuses_a_dimension_the_model_does_not_produce(tmp_path: Path) -> None:
    shutil.copytree(SAMPLE / "corpus", tmp_path / "corpus")
    r = _validate(_config(tmp_path, "./corpus", "{model: all-MiniLM-L6-v2, dimension: 256}"))
    assert r.exit_code == 1, r.output
    assert r.stderr == ("error: vector.dimension is 256 but model all-MiniLM-L6-v2 produces 384-dimensional vectors; "
                        "set vector.dimension: 384\n")
    assert _validate(_config(tmp_path, "./corpus", "{model: all-MiniLM-L6-v2, dimension: 384}")).exit_code == 0
    r = _validate(_config(tmp_path, "./corpus",
                          "{provider: openai, model: text-embedding-3-small, revision: '1', dimension: 384}"))
    assert r.exit_code == 1 and "the API model text-embedding-3-small returns 1536-dimensional vectors" in r.stderr
    assert _validate(_config(tmp_path, "./corpus", "{provider: openai, model: text-embedding-3-large, revision: '1', "
                                                   "dimension: 3072}")).exit_code == 0
    # The hash provider makes vectors of any size; an API model nobody published a size for is not judged.
    assert _validate(_config(tmp_path, "./corpus", "{provider: hash, dimension: 7}")).exit_code == 0
    assert _validate(_config(tmp_path, "./corpus", "{provider: openai, model: my-own, revision: '1', "
                                                   "dimension: 5}")).exit_code == 0
    # --json: the problems in the document, one line each on stderr, exit 1.
    r = CliRunner().invoke(main, ["validate", "-c", str(_config(tmp_path, "./nowhere", "{dimension: 256}")), "--json"])
    d = json.loads(r.stdout)
    assert r.exit_code == 1 and d["valid"] is False and len(d["problems"]) == 2
    assert len(r.stderr.strip().splitlines()) == 2


def test_model_dimension_read_from_configs_is_what_the_loaded_model_says() -> None:
    from reindex.domain.config import VectorHalf
    from reindex.adapters.embedders import make_embedder
    from reindex.domain.models import model_dimension, resolve_model_path

    path = resolve_model_path("all-MiniLM-L6-v2")
    assert model_dimension(path) == 384
    vectors = make_embedder(VectorHalf(model=str(path), revision="test")).embed(["one short text"]).vectors
    assert vectors.shape == (1, model_dimension(path))
