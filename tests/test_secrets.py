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
EMBED_KEY = "sk-test-SECRET-embed-key-one"  # one the keyed embeddings class (helpers_secrets) accepts
# The access key id is an identifier, not a secret (botocore's own DEBUG log prints it in every
# request's Authorization header), so it is set but not searched for.
SECRETS = (QDRANT_KEY, AWS_SECRET, OPENAI_KEY, EMBED_KEY)


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


# Issue 33: a secret in free-form params or in a URL's query string was accepted and copied into plans,
# reports and population records (and changing it planned a vector change). Each is refused at load.
REFUSED = [
    ("vector: {provider: langchain, model: m.E, params: {api_key: sk-live-PA55}}",
     "vector.params: Value error, api_key holds a secret, and the config is copied into plans, reports and population "
     "records: put the secret in an environment variable and name the variable instead (api_key_env: "
     "NAME_OF_THE_VARIABLE)"),
    ("vector: {provider: llamaindex, model: m.E, params: {client_kwargs: {headers: {Authorization: Bearer PA55}}}}",
     "vector.params: Value error, client_kwargs.headers.Authorization holds a secret, and the config is copied into "
     "plans, reports and population records: put the secret in an environment variable and name the variable instead "
     "(Authorization_env: NAME_OF_THE_VARIABLE)"),
    ("vector: {provider: langchain, model: m.E, params: {credentials: [svc, PA55]}}",
     "vector.params: Value error, credentials[0] holds a secret"),
    ("vector: {provider: langchain, model: m.E, params: {credentials: {client_id: svc, client_data: PA55}}}",
     "vector.params: Value error, credentials.client_id holds a secret, and the config is copied into plans, reports "
     "and population records: put the secret in an environment variable and name the variable instead "
     "(client_id_env: NAME_OF_THE_VARIABLE)"),
    ("text: {chunker: {kind: langchain, splitter: m.S, params: {hf_token: PA55}}}",
     "text.chunker.params: Value error, hf_token holds a secret"),
    ("text: {chunker: {kind: callable, callable: 'm:f', params: {accessToken: PA55}}}",
     "text.chunker.params: Value error, accessToken holds a secret"),
    ("vector: {provider: langchain, model: m.E, params: {api_key_env: sk-live-PA55}}",
     "vector.params: Value error, api_key_env must be the name of an environment variable (letters, digits and '_', "
     "not starting with a digit), never the secret itself"),
    ("vector: {provider: langchain, model: m.E, params: {api_key_env: 42}}",
     "vector.params: Value error, api_key_env must be the name of an environment variable"),
    ("vector: {provider: langchain, model: m.E, params: {model_name_env: EMBED_MODEL}}",
     "vector.params: Value error, model_name_env: only secrets are read from the environment (a name with key, token, "
     "secret, password, credential… in it); give model_name itself in the config"),
    ("vector: {provider: langchain, model: m.E, params: {base_url: 'https://api.example/v1?api_key=PA55'}}",
     "vector.params: Value error, base_url: the URL's query string holds a credential (api_key=…); remove it and read "
     "the secret from the environment (a <name>_env parameter)"),
    ("embed: {base_url: 'https://api.example/v1?api-version=2024&api_key=PA55'}",
     "embed.base_url: Value error, the URL's query string holds a credential (api_key=…); remove it and put the key in "
     "the environment variable that embed.api_key_env names"),
    ("embed: {base_url: 'svc:PA55@embed.internal:8080/v1'}",
     "embed.base_url: Value error, the URL holds credentials (user:password@…); remove them and put the key in the "
     "environment variable that embed.api_key_env names"),
    ("store: {url: 'https://qdrant.example:6333/?token=PA55'}",
     "store.url: Value error, the URL's query string holds a credential (token=…); remove it and put the key in the "
     "environment variable that store.api_key_env names"),
    ("state: {uri: 's3://b/p', endpoint_url: 'https://minio:9000/?X-Amz-Signature=PA55'}",
     "state.endpoint_url: Value error, the URL's query string holds a credential (X-Amz-Signature=…); remove it and "
     "put them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"),
    ("state: {uri: 'admin:PA55@minio:9000/bucket'}",
     "state.uri: Value error, the URL holds credentials (user:password@…)"),
    ("store: {api_key_env: sk-live-PA55}",
     "store.api_key_env: Value error, must be the name of an environment variable (letters, digits and '_', not "
     "starting with a digit), never the secret itself"),
    ("approval: {hmac_key_env: 'PA55 PA55'}", "approval.hmac_key_env: Value error, must be the name of an environment"),
]


@pytest.mark.parametrize(("section", "message"), REFUSED, ids=[m.split(":")[0] + f"-{n}" for n, (_, m) in enumerate(REFUSED)])
def test_a_secret_in_params_or_a_url_is_refused_in_one_line_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, message: str,
) -> None:
    from reindex.cli import main

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "reindex.yaml").write_text(f"index: docs\nsource: ./corpus\n{section}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["validate"])
    assert r.exit_code == 1, r.output
    assert r.output.startswith(f"error: {tmp_path / 'reindex.yaml'}: {message}") or \
        r.output.startswith(f"error: reindex.yaml: {message}"), r.output
    assert len(r.output.strip().splitlines()) == 1 and "PA55" not in r.output


# Issue 43: a credential's *value* in a field whose name says nothing (a prefix, a model name, a free-form
# parameter, a pattern, a path) was copied into plans and records. Refused at load by its shape, wherever it is.
SHAPED = [
    ("vector: {provider: hash, query_prefix: 'sk-proj-PA55PA55PA55PA55PA55'}", "vector.query_prefix", "an API key (sk-…)"),
    ("vector: {provider: langchain, model: m.E, params: {note: 'AKIAPA55PA55PA55PA55'}}", "vector.params.note",
     "an AWS access key id (AKIA…)"),
    ("vector: {provider: langchain, model: 'm.E?key=PA55'}", "vector.model", "a credential in a query string (key=…)"),
    ("source: {uri: ./corpus, include: ['*.txt&token=PA55']}", "source.include[0]",
     "a credential in a query string (token=…)"),
    ("text: {chunker: {kind: langchain, splitter: m.S, params: {separator: 'ghp_PA55PA55PA55PA55PA55PA55PA55PA55PA55'}}}",
     "text.chunker.params.separator", "a GitHub token (ghp_…)"),
    ("serving: {queries: './q.jsonl?sig=PA55'}", "serving.queries", "a credential in a query string (sig=…)"),
]


@pytest.mark.parametrize(("section", "path", "what"), SHAPED, ids=[p for _, p, _ in SHAPED])
def test_a_value_shaped_like_a_secret_is_refused_whatever_field_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str, path: str, what: str,
) -> None:
    from reindex.cli import main

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("alpha\n", encoding="utf-8")
    text = f"index: docs\nsource: ./corpus\n{section}\n" if not section.startswith("source:") else \
        f"index: docs\n{section}\n"
    (tmp_path / "reindex.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for command in (["validate"], ["plan"]):
        r = CliRunner().invoke(main, command)
        assert r.exit_code == 1, r.output
        assert r.output == (f"error: reindex.yaml: {path}: its value looks like {what}, and the config is copied into "
                            "plans, reports and population records; remove it, put the secret in an environment variable "
                            "and name the variable (a <name>_env field) instead\n"), r.output
        assert "PA55" not in r.output
    assert not (tmp_path / "plans").exists() and not (tmp_path / ".reindex").exists()  # never written


def test_shapes_that_are_not_secrets_pass_and_a_recorded_one_is_masked() -> None:
    from reindex.domain.config import config_from_dict, redact, secret_shape

    for fine in ("task-specific prefix: ", "sk-short", "AKIA-is-a-prefix", "https://api.example/v1?api-version=2",
                 "risk-management-and-the-task-force", "*.md", "a?b=c", "whisk-the-eggs-until-stiff-peaks"):
        assert secret_shape(fine) is None, fine
    rec = {"index": "docs", "source": ".", "vector": {"provider": "hash", "query_prefix": "sk-live-PA55PA55PA55PA55PA55"}}
    with pytest.raises(Exception, match=r"vector.query_prefix: its value looks like an API key"):
        config_from_dict(rec)
    assert config_from_dict(rec, recorded=True).vector.query_prefix.startswith("sk-live-")  # a record still reads
    assert redact("vector.query_prefix", "sk-live-PA55PA55PA55PA55PA55") == "(secret)"
    assert redact("vector.params", {"note": "AKIAPA55PA55PA55PA55"}) == "(secret)"
    assert redact("vector.model", "all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"


def test_the_secret_rule_tells_secrets_from_sizes_and_flags() -> None:
    from reindex.domain.config import config_from_dict, is_secret_name

    assert all(map(is_secret_name, ["api_key", "openai_api_key", "apiKey", "APIKey", "X-Api-Key", "hf_token",
                                    "access_token", "client_secret", "password", "sig", "X-Amz-Credential"]))
    assert not any(map(is_secret_name, ["max_tokens", "tokens_per_chunk", "tiktoken_model_name", "keep_separator",
                                        "model_kwargs", "chunk_size", "monkey"]))
    # Flags and numbers under a secret-like name are not secrets; URLs without credentials pass.
    cfg = config_from_dict({"index": "docs", "source": ".", "vector": {
        "provider": "langchain", "model": "m.E", "params": {"use_auth_token": True, "api_key_env": "MY_KEY",
                                                            "openai_api_base": "https://api.example/v1?api-version=2"}},
        "embed": {"base_url": "https://api.example/v1?model=x#frag"}})
    assert cfg.vector.params["api_key_env"] == "MY_KEY"
    # Under a secret's name, every value is secret material and may come from the environment.
    nested = {"credentials": {"client_id_env": "CLIENT_ID", "client_data_env": "CLIENT_DATA"}}
    assert config_from_dict({"index": "docs", "source": ".", "vector": {
        "provider": "langchain", "model": "m.E", "params": nested}}).vector.params == nested


def test_a_record_written_before_the_rule_still_reads_and_its_secret_is_masked_in_the_plan() -> None:
    from reindex.domain.config import config_from_dict
    from reindex.planner import explain_changes

    key, url = "sk-live-SECRET-in-an-old-record", "https://api.example/v1?api_key=sk-live-SECRET-in-the-url"
    rec = {"index": "docs", "source": ".", "vector": {"provider": "langchain", "model": "m.E", "params": {"api_key": key}},
           "embed": {"base_url": url}}
    with pytest.raises(Exception, match="api_key holds a secret"):
        config_from_dict(rec)
    old = config_from_dict(rec, recorded=True)
    assert old.vector.params == {"api_key": key} and old.embed.base_url == url
    new = config_from_dict({"index": "docs", "source": ".", "vector": {
        "provider": "langchain", "model": "m.E", "params": {"api_key_env": "OPENAI_API_KEY"}}})
    lines = [c["line"] for c in explain_changes(old, new)]
    assert lines == [
        "embed.base_url: (secret) → https://api.openai.com/v1 (operational: no re-embedding)",
        "vector.params.api_key: (secret) → null (vector half: every vector is recomputed, nothing is reused)",
        "vector.params.api_key_env: null → OPENAI_API_KEY (operational: no re-embedding)"], lines


def test_the_names_of_secret_variables_are_in_no_id_and_no_digest() -> None:
    from reindex.domain.config import config_from_dict
    from reindex.domain.identity import config_digest, identity_of

    def cfg(vector_params: dict, chunker_params: dict):
        return config_from_dict({"index": "docs", "source": "/c", "vector": {
            "provider": "langchain", "model": "m.E", "revision": "1", "params": vector_params},
            "text": {"chunker": {"kind": "callable", "callable": "m:f", "version": "1", "params": chunker_params}}})

    plain = cfg({"size": 8}, {"n": 2})
    for named in (cfg({"size": 8, "api_key_env": "A"}, {"n": 2, "token_env": "B"}), cfg({"size": 8, "api_key_env": "C"}, {"n": 2})):
        assert identity_of(named) == identity_of(plain) and config_digest(named) == config_digest(plain)
    nested, empty = cfg({"size": 8, "client": {"api_key_env": "D"}}, {"n": 2}), cfg({"size": 8, "client": {}}, {"n": 2})
    assert identity_of(nested) == identity_of(empty) and config_digest(nested) == config_digest(empty)
    assert identity_of(cfg({"size": 9}, {"n": 2})).vector_id != identity_of(plain).vector_id
    assert identity_of(cfg({"size": 8}, {"n": 3})).text_id != identity_of(plain).text_id


KEYED = ("index: docs\nsource: ./corpus\ntext: {{chunker: {{kind: recursive, size: 150}}}}\n"
         "vector: {{provider: langchain, model: {path}, dimension: 16, params: {{size: 16, api_key_env: {var}}}}}\n"
         "apply: {{shards: 2}}\n{extra}")


def test_rotating_a_key_or_renaming_its_variable_plans_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Invariant 16: the key is read from the environment when the class is built; neither its value nor the name
    of its variable is in any id, so a rotation plans ``none`` and readers use the new key."""
    from helpers_index import Workspace
    from helpers_secrets import ACCEPTED_KEYS, PATH

    from reindex import api

    one, two = sorted(ACCEPTED_KEYS)
    ws = Workspace(tmp_path / "ws")
    ws.config.write_text(KEYED.format(path=PATH, var="REINDEX_TEST_EMBED_KEY", extra=""), encoding="utf-8")
    monkeypatch.setenv("REINDEX_TEST_EMBED_KEY", one)
    live = ws.build_live()

    monkeypatch.setenv("REINDEX_TEST_EMBED_KEY", two)
    plan, _ = ws.plan()
    assert plan.kind == "none" and plan.body["changes"] == []
    monkeypatch.delenv("REINDEX_TEST_EMBED_KEY")
    monkeypatch.setenv("REINDEX_TEST_ROTATED", two)
    ws.config.write_text(KEYED.format(path=PATH, var="REINDEX_TEST_ROTATED", extra=""), encoding="utf-8")
    plan, _ = ws.plan()
    assert plan.kind == "none", plan.body["changes"]
    assert [c["line"] for c in plan.body["changes"]] == [
        "vector.params.api_key_env: REINDEX_TEST_EMBED_KEY → REINDEX_TEST_ROTATED (operational: no re-embedding)"]
    hits = api.query("the garbage collector", ws.config, k=3).results
    assert len(hits) == 3 and ws.alias() == live

    # The variable must be set; a key the provider refuses is reported without the key.
    monkeypatch.delenv("REINDEX_TEST_ROTATED")
    with pytest.raises(api.ConfigError, match=r"^vector.params.api_key_env: environment variable REINDEX_TEST_ROTATED "
                                              r"is not set \(the secret is read from the environment only\)$"):
        api.query("x", ws.config)
    monkeypatch.setenv("REINDEX_TEST_ROTATED", "sk-revoked-SECRET-9")
    with pytest.raises(api.ReindexError) as info:
        api.query("x", ws.config)
    assert str(info.value).endswith("PermissionError: 401 Unauthorized: invalid API key (secret)"), str(info.value)


def test_no_secret_reaches_any_file_object_log_or_artifact(
    tmp_path: Path, s3_server: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture,
) -> None:
    from reindex.cli import main

    # The apply below runs as the Prefect flow on the session's test server (alone, this test used to run it
    # in-process and find no artifact: the URL must be in the environment, where every command looks for it).
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url(request.config))
    monkeypatch.setenv("QDRANT_API_KEY", QDRANT_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("REINDEX_TEST_EMBED_KEY", EMBED_KEY)
    from helpers_secrets import ACCEPTED_KEYS, PATH

    assert EMBED_KEY in ACCEPTED_KEYS
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    # The embeddings class needs its API key: it reads the variable api_key_env names (issue 33).
    (ws / "reindex.yaml").write_text(
        "index: docs\nsource: ./corpus\ntext: {chunker: {kind: recursive, size: 150}}\n"
        f"vector: {{provider: langchain, model: {PATH}, dimension: 16, "
        "params: {size: 16, api_key_env: REINDEX_TEST_EMBED_KEY}}\n"
        "apply: {shards: 4}\ncutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n"
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

    cli(["validate"])
    cli(["calibrate", "--chunks", "16"])  # calibration/<vector id>.json in the bucket
    cli(["plan", "--json"], code=2)  # 2 = changes planned
    plan = next(p for p in (ws / "plans").glob("*.json") if p.name.count(".") == 1)
    cli(["approve", str(plan), "--by", "tester"])
    cli(["apply", str(plan), "--no-progress", "--prefect"])  # through the reindex-apply flow (artifacts, logs)
    cli(["cutover", str(plan)])
    cli(["status", "--json"])
    assert '"docs": "docs__' in outputs[-1], outputs[-1]
    cli(["query", "the garbage collector", "--k", "2"])
    cli(["--debug", "plan", "--json"])  # nothing to do: exit 0

    leaks: list[str] = []
    files = [p for p in ws.rglob("*") if p.is_file() and "corpus" not in p.parts]
    assert any(p.name.endswith(".run.json") for p in files) and any(p.suffix == ".html" for p in files)
    for p in files:
        leaks += _leaks(str(p.relative_to(ws)), p.read_bytes())
    s3 = boto3.client("s3", endpoint_url=s3_server)
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=s3_bucket)
            for o in page.get("Contents", [])]
    assert any("/populations/" in k or "population" in k for k in keys), keys[:20]
    assert any(k.startswith("reindex/calibration/") for k in keys) and any("chunk" in k for k in keys), keys[:40]
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
