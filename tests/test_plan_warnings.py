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
    # the longest of them named, longest first: document, ordinal, tokens
    assert len(over["longest"]) == min(20, over["chunks"]) and over["longest"][0]["tokens"] > 120
    assert [x["tokens"] for x in over["longest"]] == sorted((x["tokens"] for x in over["longest"]), reverse=True)
    named = ", ".join(f"{x['doc_id']}#{x['ordinal']} ({x['tokens']:,})" for x in over["longest"][:5])
    line = (f"{over['chunks']:,} of {over['of']:,} chunks exceed the model's input limit of 120 tokens (counted with "
            f"whitespace): the model truncates them and their tails are not in the vectors; the longest: {named}; "
            "lower the chunk size to fit")
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


def test_a_word_chunker_is_checked_in_the_models_own_tokens_named_and_refused_above_the_approved_share(
        tmp_path: Path) -> None:
    """``whitespace`` chunks of 200 words for all-MiniLM-L6-v2 (it reads 254 word pieces): counted in words, none
    exceeds the limit; counted in the model's word pieces, as the plan does, many do — and apply truncates exactly
    those. ``approval.max_truncated_share`` refuses the plan above the share the approver set."""
    ws = Workspace(tmp_path / "ws")
    base = ("index: docs\nsource: ./corpus\ntext: {chunker: {kind: recursive, size: 200}, tokenizer: whitespace}\n"
            "vector: {model: all-MiniLM-L6-v2}\ncost: {tokens_per_minute: 100000}\napply: {shards: 2}\n")
    ws.config.write_text(base, encoding="utf-8")
    plan, path = api.make_plan(ws.config, out=ws.plans)
    over = plan.body["work"]["over_model_limit"]
    assert (over["limit"], over["tokenizer"], over["of"]) == (254, "all-MiniLM-L6-v2", plan.body["work"]["chunks_new"])
    from reindex.adapters.tokenizers import load_tokenizer

    words = load_tokenizer("whitespace")
    pieces = load_tokenizer("all-MiniLM-L6-v2")
    from reindex.adapters.pipeline import TextPipeline
    from reindex.adapters.sources import open_source
    from reindex.domain.identity import identity_of

    cfg = api.load_resolved(ws.config)
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    chunks = [(r.doc_id, r.text) for d in open_source(cfg.source).scan() for r in pipe.chunk_document(d)]
    assert max(words.count(t) for _, t in chunks) <= 200  # in the chunker's units, every chunk fits
    counted = sorted(((pieces.count(t), d) for d, t in chunks), reverse=True)
    assert over["chunks"] == sum(1 for n, _ in counted if n > 254) > 0  # in the model's, these do not
    assert over["longest"][0]["tokens"] == counted[0][0] and over["longest"][0]["doc_id"] == counted[0][1]
    r = CliRunner().invoke(main, ["show", str(path)])
    assert (f"  warning: {over['chunks']:,} of {over['of']:,} chunks exceed the model's input limit of 254 tokens "
            "(counted with all-MiniLM-L6-v2 (the model's own tokenizer))") in r.output
    share = over["chunks"] / over["of"]
    ws.config.write_text(base + f"approval: {{max_truncated_share: {share / 2:.4f}}}\n", encoding="utf-8")
    api.approve_plan(path, "tester", "test")
    from reindex.errors import ApprovalError

    with pytest.raises(ApprovalError, match=rf"not applied: {over['chunks']:,} of {over['of']:,} chunks "
                       rf"\({share:.1%}\) exceed the model's input limit of 254 tokens \(counted with "
                       r"all-MiniLM-L6-v2\), above approval.max_truncated_share"):
        api.apply_plan(path, ws.config, prefect=False)
