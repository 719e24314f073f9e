"""The plan counts the chunks the model would truncate (it tokenises every chunk) and warns in every form:
terminal text, ``--json``, the Markdown and HTML reports and the Prefect approval form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.cli import main


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    # Chunks of up to 150 whitespace tokens for a model that reads 120 (the hash embedder counts words too).
    ws = Workspace(tmp_path / "ws")
    ws.config.write_text("index: docs\nsource: ./corpus\n"
                         "text: {chunker: {kind: recursive, size: 150}, tokenizer: whitespace}\n"
                         "vector: {provider: hash, max_tokens: 120}\napply: {shards: 2}\n", encoding="utf-8")
    return ws


def test_chunks_over_the_model_limit_are_counted_and_warned_in_every_form(ws: Workspace) -> None:
    from reindex.orchestration import approval_description

    r = CliRunner().invoke(main, ["plan", "-c", str(ws.config), "--out", str(ws.plans)])
    assert r.exit_code == 2, r.output
    path = Path(r.output.splitlines()[-1].removeprefix("  plan: "))
    plan = api.show_plan(path)
    over = plan.body["work"]["over_model_limit"]
    assert over["limit"] == 120 and over["tokenizer"] == "whitespace" and over["of"] == plan.body["work"]["chunks_new"]
    assert 0 < over["chunks"] < over["of"]
    line = (f"{over['chunks']:,} of {over['of']:,} chunks exceed the model's input limit of 120 tokens (counted with "
            "whitespace): the model truncates them and their tails are not in the vectors; lower the chunk size to fit")
    assert f"  warning: {line}" in r.output.splitlines()
    assert f"> **Warning:** {line}" in path.with_suffix(".md").read_text().splitlines()
    assert f'<div class="banner warn">Warning: {line}</div>' in path.with_suffix(".html").read_text()
    assert f"- **Warning:** {line}" in approval_description(plan, str(path)).splitlines()
    js = CliRunner().invoke(main, ["plan", "-c", str(ws.config), "--out", str(ws.plans), "--json"])
    assert json.loads(js.stdout)["over_model_limit"] == over

    # The count is what apply then finds truncating: the same chunks, counted by the embedder.
    applied = api.apply_plan(path, ws.config, prefect=False)
    assert applied.report["actual"]["truncated"] == over["chunks"]


def test_no_warning_when_every_chunk_fits(ws: Workspace) -> None:
    ws.config.write_text(ws.config.read_text().replace("max_tokens: 120", "max_tokens: 400"))
    plan, path = api.make_plan(ws.config, out=ws.plans)
    assert plan.body["work"]["over_model_limit"]["chunks"] == 0
    assert "Warning" not in path.with_suffix(".md").read_text()
    assert "warning:" not in CliRunner().invoke(main, ["show", str(path)]).output
