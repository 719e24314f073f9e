"""Terminal text the CLI prints (``reindex.reports`` text renderers): exact lines, so moving the
renderers out of ``cli.py`` (or any later edit) cannot change what people and scripts read."""

from __future__ import annotations

from types import SimpleNamespace as NS

from reindex.reports import cutover_text, status_text


def _cutover(passed: bool, swap: dict | None, evaluation: bool) -> NS:
    agg = {"recall_at_10_old": 0.5, "recall_at_10_new": 0.6, "recall_at_10_diff": {"mean": 0.1, "low": -0.02, "high": 0.2},
           "overlap_at_10": 0.7, "rbo": 0.8, "latency_old_p50_ms": 3.0, "latency_new_p50_ms": 2.5}
    report = {"index": "kb", "live": "kb__old" if swap else None, "shadow": "kb__new", "queries_source": "probes", "k": 10,
              "rules": [{"rule": "recall", "passed": passed, "detail": "Δ −0.02 ≥ −0.05"}],
              "evaluation": {"aggregate": agg} if evaluation else None, "swap": swap}
    return NS(passed=passed, report=report, report_path="plans/p.cutover.json")


def test_cutover_text_pass_with_metrics_and_swap() -> None:
    r = _cutover(True, {"from": "kb__old", "to": "kb__new"}, evaluation=True)
    assert cutover_text(r) == (
        "PASS: kb: kb__old → kb__new (probes)\n"
        "  ok   recall: Δ −0.02 ≥ −0.05\n"
        "  overlap@10 0.700 · RBO 0.800 · latency p50 3.0 → 2.5 ms\n"
        "  recall_at_10: 0.500 → 0.600 (Δ +0.100 [-0.020, +0.200])\n"
        "  alias kb → kb__new (previous: kb__old; `reindex rollback` restores it)\n"
        "  report: plans/p.cutover.json"
    )


def test_cutover_text_fail_without_evaluation() -> None:
    assert cutover_text(_cutover(False, None, evaluation=False)) == (
        "FAIL: kb: no alias → kb__new (probes)\n"
        "  FAIL recall: Δ −0.02 ≥ −0.05\n"
        "  alias not moved\n"
        "  report: plans/p.cutover.json"
    )


def test_status_text_names_the_lock_holder_and_the_build_progress() -> None:
    import time

    st = {"index": "kb", "aliases": {"kb": "kb__a"},
          "lock": {"owner": "box:4242:ab", "purpose": "apply 1a2b (pipeline-scoped/text)", "host": "box", "pid": 4242,
                   "since": 1_700_000_000.0, "lease_s": 120.0, "expires": time.time() + 90.6},
          "populations": [{"state": "live", "collection": "kb__a", "points": 9, "chunker": "fixed:size=3",
                           "age_days": 1.5, "exists": True, "progress": None},
                          {"state": "building", "collection": "kb__c", "points": None, "chunker": "fixed:size=5",
                           "age_days": 0.0, "exists": True,
                           "progress": {"shards_done": 3, "shards_total": 8, "run": "1a2b"}}]}
    assert status_text(st) == (
        "index kb: alias → kb__a\n"
        "  live      kb__a  9 points  fixed:size=3  (1.5 days)\n"
        "  building  kb__c  shards 3/8 done  fixed:size=5  (0.0 days)\n"
        "  locked by pid 4242 on box since 2023-11-14 22:13:20 UTC (apply 1a2b (pipeline-scoped/text)); "
        "120 s lease, expires in 90 s"
    )


def test_status_text() -> None:
    st = {"index": "kb", "aliases": {"kb": "kb__a"}, "lock": {"owner": "host:1", "purpose": "apply"},
          "populations": [{"state": "live", "collection": "kb__a", "points": 1234, "chunker": "fixed:size=3", "age_days": 1.5},
                          {"state": "shadow", "collection": "kb__c", "points": 0, "chunker": "fixed:size=5", "age_days": 0.0},
                          {"state": "retired", "collection": "kb__b", "points": None, "chunker": "fixed:size=4", "age_days": 9}]}
    assert status_text(st) == (
        "index kb: alias → kb__a\n"
        "  live      kb__a  1,234 points  fixed:size=3  (1.5 days)\n"
        "  shadow    kb__c  0 points  fixed:size=5  (0.0 days)\n"
        "  retired   kb__b  deleted  fixed:size=4  (9 days)\n"
        "  locked by host:1 (apply)"
    )
