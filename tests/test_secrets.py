"""Invariant 9: secrets (API keys, S3 credentials) never appear in plans, reports, run reports,
state objects, logs or Prefect artifacts.

A whole session through the CLI (plan → approve → apply through the Prefect flow → cutover → status)
with a Qdrant API key and AWS credentials in the environment and the state on the loopback S3
server; then every byte written anywhere is searched for the secret values."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from helpers_index import SAMPLE, prefect_api_url

QDRANT_KEY = "sk-test-SECRET123-qdrant"
AWS_SECRET = "aws-SECRET456-xyzzy-do-not-leak"
AWS_KEY_ID = "AKIASECRET789TESTKEY"
OPENAI_KEY = "sk-test-SECRET000-openai"
# The access key id is an identifier, not a secret (botocore's own DEBUG log prints it in every
# request's Authorization header), so it is set but not searched for.
SECRETS = (QDRANT_KEY, AWS_SECRET, OPENAI_KEY)


# A URL carrying user info (scheme://user:password@host): a credential, whatever its value.
URL_WITH_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s@\"']+:[^/\s@\"']*@")


def _leaks(where: str, data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    found = [f"{where}: contains {s[:12]}…" for s in SECRETS if s in text]
    found += [f"{where}: contains a URL with user info ({m.group(0).split('://')[0]}://…@)"
              for m in URL_WITH_USERINFO.finditer(text)]
    return found


def test_the_scan_finds_urls_with_user_info() -> None:
    assert _leaks("x", b'{"base_url": "http://user:hunter2@api.example/v1"}') == \
        ["x: contains a URL with user info (http://…@)"]
    assert _leaks("x", "see https://api.example/v1 and mailto:a@b, s3://bucket/key") == []


BASE_URL_PASSWORD = "pw-SECRET-in-url-42"


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["plan", "--json"]])
def test_a_password_in_embed_base_url_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture, command: list[str],
) -> None:
    """Issue 22: credentials in ``embed.base_url`` were copied into plan files, run reports, population
    records and error lines. The config is refused at load with one line that says where the key goes."""
    from reindex.cli import main

    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    (ws / "reindex.yaml").write_text(
        "index: docs\nsource: ./corpus\nvector: {provider: hash}\napply: {shards: 2}\n"
        f"embed: {{base_url: 'http://svc-user:{BASE_URL_PASSWORD}@embed.internal:8080/v1'}}\n", encoding="utf-8")
    monkeypatch.chdir(ws)
    r = CliRunner().invoke(main, command)
    captured = capfd.readouterr()
    assert r.exit_code == 1, r.output
    assert r.output.strip().endswith(
        "reindex.yaml: embed.base_url: Value error, the URL holds credentials (user:password@…); remove them and "
        "put the key in the environment variable that embed.api_key_env names"), r.output
    assert len(r.output.strip().splitlines()) == 1
    leaks = []
    for p in ws.rglob("*"):
        if p.is_file() and p.name != "reindex.yaml":
            leaks += [f"{p.relative_to(ws)}: password"] if BASE_URL_PASSWORD.encode() in p.read_bytes() else []
    assert not leaks and not (ws / "plans").exists() and not (ws / ".reindex").exists()
    assert BASE_URL_PASSWORD not in r.output + captured.out + captured.err


def test_no_secret_reaches_any_file_object_log_or_artifact(
    tmp_path: Path, s3_server: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture,
) -> None:
    from reindex.cli import main

    prefect_api_url(request.config)
    monkeypatch.setenv("QDRANT_API_KEY", QDRANT_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    (ws / "reindex.yaml").write_text(
        "index: docs\nsource: ./corpus\ntext: {chunker: {kind: recursive, size: 150}}\nvector: {provider: hash}\n"
        "apply: {shards: 4}\ncutover: {min_recall_delta: -1.0, min_overlap: 0.0}\n"
        f"store: {{path: ./qdrant}}\nstate: {{uri: s3://{s3_bucket}/reindex, endpoint_url: {s3_server}}}\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(ws)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="reindex")
    caplog.set_level(logging.DEBUG, logger="prefect")
    runner = CliRunner()
    outputs = []

    def cli(args: list[str], code: int = 0) -> None:
        r = runner.invoke(main, args)
        assert r.exit_code == code, (args, r.output)
        outputs.append(r.output)

    cli(["plan", "--json"], code=2)  # 2 = changes planned
    plan = next(p for p in (ws / "plans").glob("*.json") if p.name.count(".") == 1)
    cli(["approve", str(plan), "--by", "tester"])
    cli(["apply", str(plan), "--no-progress"])  # through the reindex-apply flow (artifacts, logs)
    cli(["cutover", str(plan)])
    cli(["status", "--json"])
    assert '"docs": "docs__' in outputs[-1], outputs[-1]

    leaks: list[str] = []
    files = [p for p in ws.rglob("*") if p.is_file() and "corpus" not in p.parts]
    assert any(p.name.endswith(".run.json") for p in files) and any(p.suffix == ".html" for p in files)
    for p in files:
        leaks += _leaks(str(p.relative_to(ws)), p.read_bytes())
    s3 = boto3.client("s3", endpoint_url=s3_server)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=s3_bucket)
            for o in page.get("Contents", [])]
    assert any("/populations/" in k or "population" in k for k in keys), keys[:20]
    for k in keys:
        leaks += _leaks(f"s3://{s3_bucket}/{k}", s3.get_object(Bucket=s3_bucket, Key=k)["Body"].read())
    for n, out in enumerate(outputs):
        leaks += _leaks(f"CLI output {n}", out)
    leaks += _leaks("captured log records", "\n".join(r.getMessage() for r in caplog.records))
    captured = capfd.readouterr()
    leaks += _leaks("captured stdout/stderr", captured.out + captured.err)

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
        logs = []
        offset = 0
        while True:
            page = client.read_logs(offset=offset, limit=200)
            logs += page
            offset += len(page)
            if len(page) < 200:
                break
    assert artifacts and logs, "the apply flow left no artifacts or logs to check"
    for a in artifacts:
        leaks += _leaks(f"artifact {a.key}", f"{a.data} {a.description}")
    leaks += _leaks("Prefect logs", "\n".join(log.message for log in logs))
    assert not leaks, "\n".join(leaks)
