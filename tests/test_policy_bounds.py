"""Exact boundaries of the approval policy, the change classification and the cutover gate.

Written for mutants mutmut left alive (bench/RESULTS.md, "Mutation testing with mutmut"): the end-to-end
tests use corpora far from every threshold, so ``>`` and ``>=`` (or a dropped reason) agreed there.
Each test sits on a threshold and one step past it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from reindex.domain.config import PipelineConfig
from reindex.decisions.gate import gate
from reindex.domain.identity import identity_of
from reindex.planner import (
    Baseline,
    approval_needed,
    approval_of_plan,
    classify,
    explain_changes,
)


def _cfg(**approval: object) -> PipelineConfig:
    return PipelineConfig(index="docs", source="./corpus", approval={"pipeline_scoped": False, **approval})


def test_removing_exactly_the_allowed_share_needs_no_approval_one_more_does() -> None:
    cfg = _cfg(max_removed_share=0.1)
    assert approval_needed("document-scoped", cfg, 0, 0.0, live_documents=100, removed=10, readable=90) == (False, [])
    needed, reasons = approval_needed("document-scoped", cfg, 0, 0.0, live_documents=100, removed=11, readable=89)
    assert needed and reasons == ["removes 11 of 100 live documents (11% > approval.max_removed_share 10%)"]


def test_reading_exactly_the_minimum_share_needs_no_approval_one_less_does() -> None:
    cfg = _cfg(min_readable_share=0.5, max_removed_share=1.0)
    assert approval_needed("document-scoped", cfg, 0, 0.0, live_documents=100, readable=50) == (False, [])
    needed, reasons = approval_needed("document-scoped", cfg, 0, 0.0, live_documents=100, readable=49)
    assert needed and reasons == ["only 49 documents could be read against 100 live (49% < approval.min_readable_share 50%)"]


def test_an_empty_scan_always_needs_approval_even_of_an_empty_index() -> None:
    for live in (0, 10):
        needed, reasons = approval_needed("document-scoped", _cfg(), 0, 0.0, live_documents=live, readable=0)
        assert needed and reasons == ["the source yielded no readable document (empty, unmounted or unreadable?)"]
    # Unknown readable count (no scan numbers): no share rule applies.
    assert approval_needed("document-scoped", _cfg(), 0, 0.0, live_documents=10, readable=None) == (False, [])


@pytest.mark.parametrize("kind", ["document-scoped", "initial"])
def test_token_and_dollar_limits_are_inclusive(kind: str) -> None:
    cfg = _cfg(max_tokens=1000, max_usd=2.0)
    assert approval_needed(kind, cfg, 1000, 2.0) == (False, [])
    assert approval_needed(kind, cfg, 1001, 2.0) == (True, ["1,001 tokens to embed exceed approval.max_tokens (1,000)"])
    assert approval_needed(kind, cfg, 1000, 2.01) == (True, ["$2.01 exceeds approval.max_usd ($2.00)"])
    assert approval_needed(kind, _cfg(max_tokens=None, max_usd=None), 10**12, 1e9) == (False, [])


def test_pipeline_scoped_plans_need_approval_by_policy_and_for_unreadable_live_documents() -> None:
    for kind in ("pipeline-scoped/text", "pipeline-scoped/vector"):
        assert approval_needed(kind, _cfg(pipeline_scoped=True), 0, 0.0) == (True, [f"{kind} plans need approval (approval.pipeline_scoped)"])
        # Token limits are a document-scoped rule: a pipeline-scoped plan is judged by the pipeline_scoped flag.
        assert approval_needed(kind, _cfg(max_tokens=1), 10, 0.0) == (False, [])
        assert approval_needed(kind, _cfg(), 0, 0.0, unreadable=2) == (
            True, ["2 live documents could not be read and would be missing from the new population"])
    # In place, an unreadable document keeps its live points: no approval for that.
    assert approval_needed("document-scoped", _cfg(), 0, 0.0, unreadable=2) == (False, [])


def test_approval_of_a_plan_counts_readable_documents_from_its_work_section() -> None:
    cfg = _cfg(min_readable_share=0.5, max_removed_share=1.0)
    cfg = cfg.model_copy(update={"cost": cfg.cost.model_copy(update={"usd_per_mtok": 1.0})})
    body = {"work": {"tokens_to_embed": 10, "removed_documents": ["x"], "unreadable_documents": [],
                     "documents": {"live": 100, "added": 20, "edited": 20, "unchanged": 10}}}
    assert approval_of_plan(body, cfg, "document-scoped") == (False, [])  # 20 + 20 + 10 = 50 of 100
    body["work"]["documents"]["unchanged"] = 9
    assert approval_of_plan(body, cfg, "document-scoped")[0]
    body["work"]["documents"]["unchanged"] = 10
    body["work"]["tokens_to_embed"] = 2_000_000  # $2 at $1 per million tokens
    assert approval_of_plan(body, cfg, "document-scoped") == (True, [
        "2,000,000 tokens to embed exceed approval.max_tokens (1,000,000)", "$2.00 exceeds approval.max_usd ($1.00)"])


def test_classify_names_the_half_that_changed() -> None:
    old = PipelineConfig(index="docs", source="./corpus")
    text = old.model_copy(update={"text": old.text.model_copy(update={"tokenizer": "whitespace"})})
    vector = old.model_copy(update={"vector": old.vector.model_copy(update={"revision": "other"})})
    both = text.model_copy(update={"vector": vector.vector})
    base = Baseline("live", old)
    assert classify(Baseline("none", None), identity_of(old), True) == "initial"
    assert classify(base, identity_of(old), False) == "none"
    assert classify(base, identity_of(old), True) == "document-scoped"
    assert classify(base, identity_of(text), False) == "pipeline-scoped/text"
    assert classify(base, identity_of(vector), False) == "pipeline-scoped/vector"
    assert classify(base, identity_of(both), True) == "pipeline-scoped/vector"
    [t] = explain_changes(old, text)
    assert (t["field"], t["half"], t["new"]) == ("text.tokenizer", "text", "whitespace")
    assert t["line"].endswith("(text half: every document is recut)")
    [v] = explain_changes(old, vector)
    assert (v["field"], v["half"]) == ("vector.revision", "vector")
    [o] = explain_changes(old, old.model_copy(update={"apply": old.apply.model_copy(update={"shards": 3})}))
    assert (o["field"], o["old"], o["new"], o["half"]) == ("apply.shards", "16", "3", "operational")
    assert explain_changes(old, old) == []


def _policy(**kw: object) -> SimpleNamespace:
    return SimpleNamespace(**{"require_exact_count": True, "min_recall_delta": -0.02, "min_overlap": 0.5, **kw})


def _rules(policy: SimpleNamespace, evaluation: dict | None, points: int = 5, chunks: int = 5, failures: int = 0) -> dict:
    return {r.name: r.passed for r in gate(policy, evaluation, shadow_points=points, planned_chunks=chunks,
                                           failures=failures, k=10)}


def test_the_gate_passes_on_its_bounds_and_fails_one_step_past_them() -> None:
    labelled = lambda low: {"aggregate": {"recall_at_10_diff": {"low": low, "mean": 0.5, "high": 0.9}}}
    assert _rules(_policy(), labelled(-0.02)) == {"point-count": True, "no-failed-shards": True, "recall@10": True}
    assert _rules(_policy(), labelled(-0.021))["recall@10"] is False
    unlabelled = lambda ov: {"aggregate": {"overlap_at_10": ov}}
    assert _rules(_policy(), unlabelled(0.5))["overlap@10"] is True
    assert _rules(_policy(), unlabelled(0.49))["overlap@10"] is False
    assert _rules(_policy(), {"aggregate": {}})["overlap@10"] is False  # no overlap measured: fail, not pass
    assert _rules(_policy(), None, points=4) == {"point-count": False, "no-failed-shards": True}
    assert _rules(_policy(), None, points=6)["point-count"] is False
    assert _rules(_policy(require_exact_count=False), None, points=4) == {"no-failed-shards": True}
    assert _rules(_policy(), None, failures=1)["no-failed-shards"] is False
