"""The documented Python API: ``reindex.api`` exposes every use case the CLI calls, and the guide
``docs/python-api.md`` runs as written (plan → approve → apply → cutover, queries, both retrievers, the use
cases inside a user's Prefect flow with ``PrefectRunner``, status, rollback, gc) against a temporary index."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from helpers_index import SAMPLE, prefect_api_url

from reindex import api

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "python-api.md"
README = ROOT / "README.md"
MODEL_LINE = "vector: {model: all-MiniLM-L6-v2}"
# The hash embedder has no semantics for the cutover gate to measure: the tests open the gate.
TEST_VECTOR = "vector: {provider: hash}\ncutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_api_exports_every_use_case_the_cli_calls() -> None:
    tree = ast.parse((ROOT / "src" / "reindex" / "cli.py").read_text(encoding="utf-8"))
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "api"}
    assert len(used) >= 12
    assert used <= set(api.__all__), f"called by the CLI but not in api.__all__: {sorted(used - set(api.__all__))}"
    assert [n for n in api.__all__ if not hasattr(api, n)] == []
    assert len(set(api.__all__)) == len(api.__all__)
    assert api.__all__[0] == "Index"  # one public face: the handle leads, its results and errors follow
    for name in ("Querier", "waiting_runs", "validate_config", "RollbackRecord", "GcAction", "IndexStatus",
                 "QueryResult", "ApplyReport", "CutoverReport", "CycleResult", "Population", "ReindexError"):
        assert name in api.__all__
    # the use cases behind the handle are wrappers, not a second public face; seven names nothing used are gone
    for name in ("make_plan", "apply_plan", "cutover", "rollback", "gc", "status", "query", "approve_plan"):
        assert name not in api.__all__ and callable(getattr(api, name))
    for name in ("check_plan_index", "chunk_cap", "config_warnings", "model_input_limit", "parse_age", "rates_for",
                 "shard_runner"):
        assert not hasattr(api, name)


def test_every_api_name_in_the_guide_and_readme_exists() -> None:
    for doc in (GUIDE, README):
        names = set(re.findall(r"(?<![\w/.-])api\.(?!py\b|md\b)([A-Za-z]\w*)", doc.read_text(encoding="utf-8")))
        assert names, doc
        assert names <= set(api.__all__), f"{doc.name} names {sorted(names - set(api.__all__))}, not in api.__all__"


def _workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml_text: str) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    assert MODEL_LINE in yaml_text
    (ws / "reindex.yaml").write_text(yaml_text.replace(MODEL_LINE, TEST_VECTOR), encoding="utf-8")
    monkeypatch.chdir(ws)
    return ws


def test_the_python_api_guide_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              request: pytest.FixtureRequest) -> None:
    prefect_api_url(request.config)  # the session's Prefect test server: the guide's flow runs on it
    text = GUIDE.read_text(encoding="utf-8")
    [yaml_text] = code_blocks(text, "yaml")
    _workspace(tmp_path, monkeypatch, yaml_text)
    blocks = code_blocks(text, "python")
    assert len(blocks) == 7
    ns: dict = {"__name__": "__main__"}
    for i, block in enumerate(blocks):
        exec(compile(block, str(GUIDE), "exec"), ns)  # noqa: S102 - the guide's own examples
        if i == 1:  # the Index handle's cycle right after the build: nothing left to do
            assert ns["cycle"].outcome == "nothing-to-do", ns["cycle"]

    # the flow applied and cut over the edited config (size 120): that population was live until the rollback
    assert ns["live"] == api.validate_config("reindex.yaml").identity.collection
    assert ns["back"]["to"] == ns["result"].report["swap"]["to"] != ns["live"]  # back to the first build
    assert [(a["collection"], a["action"]) for a in api.gc("reindex.yaml", older_than="0s", dry_run=True)] == [
        (ns["live"], "kept")]  # retired within the rollback window
    assert "reindex-apply" in _child_flows_of("nightly-reindex")  # PrefectRunner: a child flow of the user's flow


def _child_flows_of(parent_flow: str) -> set[str]:
    """Names of the flows run as children of any run of ``parent_flow`` on the session's Prefect server."""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
    )

    with get_client(sync_client=True) as client:
        parents = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[parent_flow])))
        assert parents
        children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[p.id for p in parents])))
        return {client.read_flow(c.flow_id).name for c in children}


def test_the_guides_flow_also_runs_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              request: pytest.FixtureRequest) -> None:
    prefect_api_url(request.config)
    text = GUIDE.read_text(encoding="utf-8")
    [yaml_text] = code_blocks(text, "yaml")
    _workspace(tmp_path, monkeypatch, yaml_text)
    build, *_, edit, flow_block, _ = code_blocks(text, "python")
    ns: dict = {"__name__": "guide"}  # define the flow without running it
    for block in (build, edit, flow_block):
        exec(compile(block, str(GUIDE), "exec"), ns)  # noqa: S102
    assert ns["nightly_reindex"](in_process=True) == "pipeline-scoped/text: done, alias swapped: True"
    assert ns["nightly_reindex"](in_process=True) == "nothing to do"
    # The guide's way to skip Prefect entirely: the flow's function, with a Prefect API that cannot answer.
    from prefect.settings import PREFECT_API_URL, temporary_settings

    dead = "http://127.0.0.1:9/api"
    monkeypatch.setenv("PREFECT_API_URL", dead)
    with temporary_settings(updates={PREFECT_API_URL: dead}):
        assert ns["nightly_reindex"].fn(in_process=True) == "nothing to do"
