"""Planner: classification, exact work against a hand-checked corpus, plan files, approvals, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reindex import api
from reindex.planner.approvals import ApprovalError, check_approval, read_approval
from reindex.cli import main
from reindex.planner import PlanError, read_plan


def _jsonl(path: Path, docs: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()), encoding="utf-8")
    return path


def _config(path: Path, source: Path, chunker: str = "{kind: fixed, size: 3}", extra: str = "") -> Path:
    path.write_text(
        f"index: kb\nsource: {source}\n"
        f"text: {{tokenizer: whitespace, chunker: {chunker}}}\n"
        f"vector: {{revision: test-rev}}\n"
        f"state: {{uri: {path.parent / 'state'}}}\n{extra}",
        encoding="utf-8",
    )
    return path


OLD = {"a": "a b c d e f", "b": "x y z", "r": "gone soon"}
NEW = {"a": "a b c d e g", "b": "x y z", "c": "p q"}


@pytest.fixture
def small(tmp_path: Path) -> dict[str, Path]:
    old = _jsonl(tmp_path / "old.jsonl", OLD)
    new = _jsonl(tmp_path / "new.jsonl", NEW)
    return {"old": old, "new": new, "cfg": _config(tmp_path / "reindex.yaml", new), "tmp": tmp_path}


def test_document_scoped_work_is_exact_on_a_hand_checked_corpus(small: dict[str, Path]) -> None:
    # Whitespace tokens, fixed windows of 3 tokens. Old chunks: a → "a b c ", "d e f"; b → "x y z";
    # r → "gone soon" (4 chunks). New: a → "a b c " (reused), "d e g" (3 tokens to embed);
    # b unchanged (1 reused); c added → "p q" (2 tokens). r removed.
    plan, path = api.make_plan(small["cfg"], baseline_corpus=str(small["old"]), out=small["tmp"] / "plans")
    w = plan.body["work"]
    assert plan.kind == "document-scoped"
    assert w["documents"] == {"total": 3, "added": 1, "edited": 1, "removed": 1, "unchanged": 1, "bad": 0,
                              "unreadable": 0, "live": 3}
    assert (w["chunks_old"], w["chunks_new"], w["chunks_reused"], w["chunks_to_embed"]) == (4, 4, 2, 2)
    assert w["tokens_to_embed"] == 5
    assert w["affected_documents"] == ["a", "c"] and w["removed_documents"] == ["r"]
    # In place: the 2 new points are written before the stale ones are deleted.
    assert plan.body["cost"]["peak_vectors"] == 4 + 2
    assert path is not None and path.name.startswith(plan.body["created_at"][:10] + "-kb-document-scoped-")
    assert path.with_suffix(".md").is_file() and path.with_suffix(".html").is_file()


def test_no_edit_replan_is_none(small: dict[str, Path]) -> None:
    plan, _ = api.make_plan(small["cfg"], baseline_corpus=str(small["new"]), out=None)
    assert plan.kind == "none"
    assert plan.body["work"]["tokens_to_embed"] == 0 and plan.body["work"]["affected_documents"] == []


def _identical_chunk_texts(old_spec: str, new_spec: str, docs: dict[str, str]) -> int:
    """Independent count: chunks of the new chunking whose text occurs among the same document's
    old chunks (chunkers called directly, no fingerprints)."""
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.tokenizers import load_tokenizer

    tok = load_tokenizer("whitespace")
    old_c, new_c = make_chunker(old_spec, tok), make_chunker(new_spec, tok)
    total = 0
    for text in docs.values():
        old_texts = {c.text for c in old_c.chunk(text)}
        total += sum(1 for c in new_c.chunk(text) if c.text in old_texts)
    return total


def test_text_half_change_reuses_only_identical_text(small: dict[str, Path]) -> None:
    head = _config(small["tmp"] / "head.yaml", small["new"], "{kind: fixed, size: 2}")
    plan, _ = api.make_plan(head, baseline_config=small["cfg"], out=None)
    assert plan.kind == "pipeline-scoped/text" and not plan.body["documents_changed"]
    assert plan.body["explanation"] == ["text.chunker.size: 3 → 2 (text half: every document is recut)"]
    assert plan.body["work"]["chunks_reused"] == _identical_chunk_texts("fixed:size=3", "fixed:size=2", NEW)
    assert plan.body["approval"]["required"]


def test_vector_half_change_reuses_nothing(small: dict[str, Path]) -> None:
    head = small["tmp"] / "head.yaml"
    head.write_text(small["cfg"].read_text().replace("revision: test-rev", "revision: other-rev"))
    plan, _ = api.make_plan(head, baseline_config=small["cfg"], out=None)
    assert plan.kind == "pipeline-scoped/vector"
    assert plan.body["work"]["chunks_reused"] == 0
    assert plan.body["work"]["chunks_to_embed"] == plan.body["work"]["chunks_new"] == 4


def test_pipeline_change_with_document_changes_says_both(small: dict[str, Path]) -> None:
    old_cfg = _config(small["tmp"] / "old.yaml", small["old"])
    head = _config(small["tmp"] / "head.yaml", small["new"], "{kind: fixed, size: 2}")
    plan, _ = api.make_plan(head, baseline_config=old_cfg, out=None)
    assert plan.kind == "pipeline-scoped/text" and plan.body["documents_changed"]


def test_initial_plan_without_a_live_population(small: dict[str, Path]) -> None:
    plan, _ = api.make_plan(small["cfg"], out=None)
    assert plan.kind == "initial"
    assert plan.body["work"]["chunks_new"] == 4 and plan.body["cost"]["peak_vectors"] == 4


def test_tampered_plan_is_refused(small: dict[str, Path]) -> None:
    _, path = api.make_plan(small["cfg"], baseline_corpus=str(small["old"]), out=small["tmp"] / "plans")
    body = json.loads(path.read_text())
    body["work"]["tokens_to_embed"] = 1
    path.write_text(json.dumps(body))
    with pytest.raises(PlanError, match="plan hash mismatch .* the plan was edited after it was made"):
        read_plan(path)


def test_approval_is_bound_to_the_plan_hash(small: dict[str, Path]) -> None:
    head = _config(small["tmp"] / "head.yaml", small["new"], "{kind: fixed, size: 2}")
    plan, path = api.make_plan(head, baseline_config=small["cfg"], out=small["tmp"] / "plans")
    with pytest.raises(ApprovalError, match=r"needs approval .*run `reindex approve PLAN --by NAME`"):
        api.approval_status(path)
    rec, _ = api.approve_plan(path, "alice", "fine")
    assert api.approval_status(path) == rec and rec.plan_hash == plan.plan_hash
    # Another plan (a different hash) does not accept this record.
    other, _ = api.make_plan(_config(small["tmp"] / "h2.yaml", small["new"], "{kind: fixed, size: 4}"),
                             baseline_config=small["cfg"], out=None)
    with pytest.raises(ApprovalError, match="the plan changed after it was approved"):
        check_approval(other, read_approval(path))


def test_small_document_scoped_plan_needs_no_approval(small: dict[str, Path]) -> None:
    # Removing 1 of 3 documents is a mass removal under the default policy (5 %) ...
    plan, _ = api.make_plan(small["cfg"], baseline_corpus=str(small["old"]), out=None)
    assert plan.body["approval"]["reasons"] == ["removes 1 of 3 live documents (33% > approval.max_removed_share 5%)"]
    # ... and, with removals allowed, a small edit needs no approval; above max_tokens it does.
    lax = _config(small["tmp"] / "lax.yaml", small["new"], extra="approval: {max_removed_share: 0.5}\n")
    plan, path = api.make_plan(lax, baseline_corpus=str(small["old"]), out=small["tmp"] / "plans")
    assert not plan.body["approval"]["required"]
    assert api.approval_status(path) is None
    cfg = _config(small["tmp"] / "strict.yaml", small["new"], extra="approval: {max_tokens: 2, max_removed_share: 0.5}\n")
    strict, _ = api.make_plan(cfg, baseline_corpus=str(small["old"]), out=None)
    assert strict.body["approval"]["reasons"] == ["5 tokens to embed exceed approval.max_tokens (2)"]


# --------------------------------------------------------------------------------------------
# CLI: exit codes and one-line errors, nothing written on errors
# --------------------------------------------------------------------------------------------


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_cli_plan_exit_codes_and_json(small: dict[str, Path]) -> None:
    out = small["tmp"] / "plans"
    code, stdout, _ = _run("plan", "-c", str(small["cfg"]), "--baseline-corpus", str(small["new"]), "--out", str(out), "--json")
    assert code == 0 and json.loads(stdout)["kind"] == "none"
    code, stdout, _ = _run("plan", "-c", str(small["cfg"]), "--baseline-corpus", str(small["old"]), "--out", str(out), "--json")
    data = json.loads(stdout)
    assert code == 2
    for key in ("kind", "plan_file", "chunks_old", "chunks_new", "chunks_reused", "tokens_to_embed", "usd", "hours",
                "peak_vectors", "peak_bytes", "approval_required"):
        assert key in data
    assert data["approval_required"] is True  # it removes 1 of 3 live documents: above approval.max_removed_share
    code, stdout, _ = _run("show", data["plan_file"])
    assert code == 0 and "document-scoped" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline-config", "{tmp}/missing.yaml"], "error: {tmp}/missing.yaml: config file not found (create one with `reindex init`)\n"),
        (["--baseline-corpus", "{tmp}/nowhere"], "error: --baseline-corpus {tmp}/nowhere: no such file or directory\n"),
        (["--sample", "1"], "error: --sample: need at least 2 documents, got 1\n"),
    ],
)
def test_cli_plan_bad_input(small: dict[str, Path], args: list[str], message: str) -> None:
    tmp = small["tmp"]
    out = tmp / "plans-bad"
    code, _, stderr = _run("plan", "-c", str(small["cfg"]), "--out", str(out), *[a.format(tmp=tmp) for a in args])
    assert code == 1 and stderr == message.format(tmp=tmp)
    assert not out.exists()


def test_cli_bad_corpus_and_config(small: dict[str, Path]) -> None:
    tmp = small["tmp"]
    cfg = _config(tmp / "bad-source.yaml", tmp / "no-such-corpus")
    code, _, stderr = _run("plan", "-c", str(cfg), "--out", str(tmp / "p"))
    assert code == 1 and stderr.startswith(f"error: source '{tmp}/no-such-corpus' does not exist")
    (tmp / "bad.yaml").write_text("index: kb\nsource: x\ntext: {chunker: {kind: fixed, size: 0}}\n")
    code, _, stderr = _run("plan", "-c", str(tmp / "bad.yaml"))
    assert code == 1 and stderr == f"error: {tmp}/bad.yaml: text.chunker.size: Input should be greater than 0\n"


def test_cli_show_tampered_and_approve_other_index(small: dict[str, Path]) -> None:
    tmp = small["tmp"]
    _, stdout, _ = _run("plan", "-c", str(small["cfg"]), "--baseline-corpus", str(small["old"]), "--out", str(tmp / "p"), "--json")
    plan_file = json.loads(stdout)["plan_file"]
    other = tmp / "other.yaml"
    other.write_text(small["cfg"].read_text().replace("index: kb", "index: other"))
    code, _, stderr = _run("approve", plan_file, "--by", "bob", "-c", str(other))
    assert code == 1 and stderr == f"error: {plan_file}: plan is for index 'kb', but the config is for 'other'\n"
    body = json.loads(Path(plan_file).read_text())
    body["kind"] = "none"
    Path(plan_file).write_text(json.dumps(body))
    code, _, stderr = _run("show", plan_file)
    assert code == 1 and "plan hash mismatch" in stderr and stderr.count("\n") == 1


# --------------------------------------------------------------------------------------------
# CI mode
# --------------------------------------------------------------------------------------------


def test_classify_safe_text_affecting_structural(small: dict[str, Path]) -> None:
    tmp = small["tmp"]
    fixture = tmp / "fixture"
    fixture.mkdir()
    (fixture / "one.txt").write_text("a b c d e f g h")
    (fixture / "two.txt").write_text("x y z w")
    base = _config(tmp / "base.yaml", fixture, "{kind: fixed, size: 4}")
    same = _config(tmp / "same.yaml", fixture, "{kind: fixed, size: 4}", extra="cost: {usd_per_mtok: 1.0}\n")
    text = tmp / "text.yaml"
    text.write_text(base.read_text().replace("revision: test-rev", "prefix: 'passage: ', revision: test-rev"))
    structural = _config(tmp / "structural.yaml", fixture, "{kind: fixed, size: 2}")
    assert _run("classify", "--fixture", str(fixture), "--base", str(base), "--head", str(same))[0] == 0
    code, stdout, _ = _run("classify", "--fixture", str(fixture), "--base", str(base), "--head", str(text), "--format", "json")
    assert code == 2 and json.loads(stdout)["outcome"] == "text-affecting"
    code, stdout, _ = _run("classify", "--fixture", str(fixture), "--base", str(base), "--head", str(structural),
                           "--scale-to", "8000000")
    assert code == 3 and "structural" in stdout and "**Projected:** 24.00 M chunks, +100 %, 48.00 M tokens" in stdout


@pytest.mark.parametrize("change, kind, outcome, code", [
    ("", "none", "safe", 0),
    ("source: {uri: FIXTURE, metadata_fields: [lang]}", "payload-only", "payload-only", 0),
    ("text: {tokenizer: whitespace, chunker: {kind: fixed, size: 2}}", "pipeline-scoped/text", "structural", 3),
    ("vector: {revision: test-rev, prefix: 'passage: '}", "pipeline-scoped/vector", "text-affecting", 2),
])
def test_classify_and_plan_agree_on_every_kind(tmp_path: Path, change: str, kind: str, outcome: str, code: int) -> None:
    """`reindex classify` takes its kind from the planner: for every kind it says what `reindex plan` says of the
    same two configs over the fixture (a payload-only change was `safe (none)` beside its own explanation)."""
    fixture = tmp_path / "fixture.jsonl"
    fixture.write_text("".join(json.dumps({"id": k, "text": v, "lang": "en"}) + "\n" for k, v in OLD.items()))
    base = _config(tmp_path / "base.yaml", fixture)
    head = tmp_path / "head.yaml"
    text = base.read_text()
    if change:
        key = change.split(":")[0]
        old_line = next(ln for ln in text.splitlines() if ln.startswith(key + ":"))
        text = text.replace(old_line, change.replace("FIXTURE", str(fixture)))
    head.write_text(text)
    c, stdout, _ = _run("classify", "--fixture", str(fixture), "--base", str(base), "--head", str(head), "--format",
                        "json")
    got = json.loads(stdout)
    assert (c, got["kind"], got["outcome"]) == (code, kind, outcome), got
    c, stdout, _ = _run("plan", "-c", str(head), "--baseline-config", str(base), "--baseline-corpus", str(fixture),
                        "--out", str(tmp_path / "plans"), "--json")
    assert json.loads(stdout)["kind"] == kind
    md = _run("classify", "--fixture", str(fixture), "--base", str(base), "--head", str(head))[1]
    assert f" {outcome} ({kind})" in md


def test_estimate_cli_golden_seed_001() -> None:
    hist = Path(__file__).parent / "cases" / "seed001_buckets.csv"
    code, stdout, _ = _run("estimate", "--histogram", str(hist), "--from", "sliding:size=512,overlap=0.1",
                           "--to", "sliding:size=256,overlap=0.2", "--usd-per-mtok", "0.02", "--tokens-per-minute", "3500000", "--json")
    d = json.loads(stdout)
    assert code == 0
    assert round(d["chunks_old"] / 1e6, 2) == 27.84 and round(d["chunks_new"] / 1e6, 2) == 57.52
    assert round(d["tokens_full_reembed"] / 1e9, 3) == 13.862 and round(d["tokens_to_embed"] / 1e9, 3) == 13.430
    assert d["usd"] == 268.59 and d["hours"] == 63.95 and round(d["peak_vectors"] / 1e6, 2) == 85.36
    assert round(d["chunks_no_overlap"] / 1e6, 2) == 48.16 and round(d["tail_chunks"] / 1e6, 2) == 24.64


def test_calibrate_records_a_rate_that_plans_then_use(small: dict[str, Path]) -> None:
    cfg = small["tmp"] / "cal.yaml"
    cfg.write_text(small["cfg"].read_text().replace("vector: {revision: test-rev}", "vector: {provider: hash}"))
    plan, _ = api.make_plan(cfg, out=None)
    assert plan.body["cost"]["rate_source"] == "default"
    result = api.calibrate(cfg, chunks=4)
    assert result["chunks"] == 4 and result["tokens_per_minute"] > 0
    assert result["embed_vs_raw"] is None  # the hash provider has no library call under it to compare with
    plan, _ = api.make_plan(cfg, out=None)
    assert plan.body["cost"]["rate_source"] == "calibration"
    assert plan.body["cost"]["tokens_per_minute"] == result["tokens_per_minute"]
    # A configured rate wins over the calibration.
    cfg.write_text(cfg.read_text() + "cost: {tokens_per_minute: 1234}\n")
    plan, _ = api.make_plan(cfg, out=None)
    assert plan.body["cost"]["rate_source"] == "config" and plan.body["cost"]["tokens_per_minute"] == 1234


def test_footprint_describes_the_configured_backend(small: dict[str, Path]) -> None:
    # The same change priced for the embedded default (edge), local mode and a server differs, and each plan
    # says which store it describes: a shadow build on edge maps ~3 vector copies while the HNSW is built.
    plans = {}
    for name, extra in (("edge", ""), ("local", "store: {backend: local}\n"), ("server", "store: {url: 'http://127.0.0.1:6333'}\n")):
        cfg = _config(small["tmp"] / f"{name}.yaml", small["new"], extra=extra)
        plans[name], _ = api.make_plan(cfg, baseline_corpus=str(small["old"]), out=None)
    fps = {k: p.body["cost"]["footprint"] for k, p in plans.items()}
    assert {k: f["backend"] for k, f in fps.items()} == {"edge": "edge", "local": "local", "server": "server"}
    assert all(f["mode"] == "in-place" for f in fps.values())
    # 4 old points, 384 dims: edge reader = 65 MiB + 4 × (1,536 + 290); server = ceil(1.5 × 4 × 384 × 4)
    assert fps["edge"]["old"]["ram_bytes"] == 65 * 2**20 + 4 * 1_826
    assert fps["server"]["old"]["ram_bytes"] == 9_216
    assert fps["local"]["old"]["ram_bytes"] == 4 * 384 * 76
    assert "edge" in plans["edge"].body["cost"]["formula"] and "server" in plans["server"].body["cost"]["formula"]


def test_live_baseline_groups_rows_by_document_streaming_and_falls_back_for_scattered_rows() -> None:
    # The planner's live baseline is built from manifest rows one document at a time; rows of one document
    # that are not contiguous (a foreign manifest) must give the same states as contiguous ones.
    from reindex.books.manifests import ManifestRow
    from reindex.planner._live_docs import _doc_states

    from reindex.planner._live_docs import STATE_COLUMNS

    def parts(*groups: list[ManifestRow]) -> list[dict[str, list]]:
        return [{name: [getattr(r, name) for r in g] for name in STATE_COLUMNS} for g in groups]

    def refuse() -> None:
        raise AssertionError("contiguous documents need no row scan")

    rows = [ManifestRow("a", "ha", 1, "fa1", 5, "p1"), ManifestRow("a", "ha", 0, "fa0", 4, "p0"),
            ManifestRow("b", "hb", 0, "fb0", 7, "p2")]
    contiguous = _doc_states(parts(rows), refuse)
    assert contiguous["a"].fingerprints == ("fa0", "fa1") and contiguous["a"].tokens == (4, 5)
    assert contiguous["b"].content_hash == "hb" and contiguous["b"].fingerprints == ("fb0",)
    assert _doc_states(parts(rows[:2], rows[2:]), refuse) == contiguous  # one document per part
    in_order = [rows[1], rows[0], rows[2]]
    assert _doc_states(parts(in_order), refuse) == contiguous
    scattered = [rows[0], rows[2], rows[1]]
    assert _doc_states(parts(scattered), lambda: iter(scattered)) == contiguous
    assert _doc_states(parts(scattered[:2], scattered[2:]), lambda: iter(scattered)) == contiguous
