"""Invariant 9: secrets (API keys, S3 credentials) never appear in plans, reports, run reports,
state objects, logs or Prefect artifacts.

A whole session through the CLI (plan → approve → apply through the Prefect flow → cutover → status)
with a Qdrant API key and AWS credentials in the environment and the state on the loopback S3
server; then every byte written anywhere is searched for the secret values."""

from __future__ import annotations

import logging
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


def _leaks(where: str, data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f"{where}: contains {s[:12]}…" for s in SECRETS if s in text]


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
