"""Serving across a model change (issue 36): free pairs, bridges, the cascade, a gate per mode that refuses a mode
that loses, readers that follow the mode from the index's state without a restart, and native serving again at
cutover and rollback.

Two latent test models (``helpers_serving``): a noisy one and a clean one, two vector spaces joined by a linear
map. Noisy live → clean building: the bridge and the cascade beat the live model and go live. Clean live → noisy
building: both lose and refuse themselves; readers stay on ``old``; the plan's forecast says ``stay``. The
queries are 4 sentences of each of the 24 sample documents, labelled with their document (96 queries: the
cutover's probes would give one per document)."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env
from helpers_serving import CLEAN, NOISY, LatentEmbeddings, vector_line

from reindex import api

from reindex.engine import execution
from reindex.api import Index
from reindex.decisions.evaluation import sentences
from reindex.books.manifests import read_serving, write_serving
from reindex.books.pairs import PairSet, read_pairs, runs_with_pairs
from reindex.decisions.serving import fit_procrustes, fit_ridge

TESTS = Path(__file__).resolve().parent
LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"


def _extra(serving: str = "") -> str:
    return f"{LENIENT}\nserving: {{min_pairs: 100, pairs: 400, queries: queries.jsonl{serving}}}\n"


def _workspace(root: Path, live_model: tuple, serving: str = "") -> Workspace:
    ws = Workspace(root, extra=_extra(serving))
    rows = []
    for f in sorted(ws.corpus.iterdir()):
        found = sentences(f.read_text(encoding="utf-8"))
        random.Random(f.name).shuffle(found)
        rows += [json.dumps({"query": s, "doc_id": f.name}) for s in found[:4]]
    (root / "queries.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    _model(ws, live_model)
    return ws


def _model(ws: Workspace, model: tuple) -> None:
    text = ws.config.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("vector:"))
    ws.config.write_text(text.replace(line, vector_line(*model)), encoding="utf-8")


def _build_change(ws: Workspace, new_model: tuple):
    """Plan and approve the model change (not applied)."""
    _model(ws, new_model)
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/vector"
    ws.approve(path)
    return plan, path


def _env() -> dict[str, str]:
    """The CLI's environment, with this folder importable (the test models are imported by path)."""
    return subprocess_env(PYTHONPATH=os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), str(TESTS)))))


def _cli(ws: Workspace, *args: str) -> dict:
    r = subprocess.run([str(REINDEX_BIN), *args, "-c", str(ws.config), "--json"], capture_output=True, text=True,
                       env=_env(), cwd=ws.root, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# --------------------------------------------------------------------------------------------
# Bridges
# --------------------------------------------------------------------------------------------


def test_a_bridge_fitted_on_a_known_linear_map_recovers_it_and_not_one_that_is_not_there() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 64)).astype(np.float32)
    rotation, _ = np.linalg.qr(rng.standard_normal((64, 64)))
    b = fit_procrustes(PairSet(x @ rotation, x, (), (), (), "old", "new"), normalize=False)
    assert np.abs(b.matrix - rotation).max() < 1e-5 and b.scale == pytest.approx(1.0, abs=1e-5)
    assert np.abs(b.map(x) - x @ rotation).max() < 1e-4
    assert (b.from_vector_id, b.to_vector_id, b.pairs) == ("new", "old", 600)

    # Another dimension (64 → 48): a semi-orthogonal map; each mapped vector's nearest old vector is its pair.
    semi, _ = np.linalg.qr(rng.standard_normal((64, 48)))
    y = x @ semi
    b = fit_procrustes(PairSet(y, x, (), (), (), "old", "new"))
    assert b.matrix.shape == (64, 48) and np.allclose(b.matrix.T @ b.matrix, np.eye(48), atol=1e-4)
    nearest = np.argmax(b.map(x) @ (y / np.linalg.norm(y, axis=1, keepdims=True)).T, axis=1)
    assert (nearest == np.arange(600)).mean() > 0.99

    # Ridge recovers any linear map with an offset, across dimensions.
    a = rng.standard_normal((64, 40)).astype(np.float32)
    y = x @ a + 0.5
    r = fit_ridge(PairSet(y, x, (), (), (), "old", "new"), normalize=False)
    assert np.abs(r.map(x) - y).max() < 0.05 and r.params["lambda_factor"] == 0.001

    # Pairs with no map behind them (unrelated vectors): nothing is recovered.
    unrelated = rng.standard_normal((600, 48)).astype(np.float32)
    r = fit_ridge(PairSet(unrelated, x, (), (), (), "old", "new"), normalize=False)
    assert np.abs(r.map(x) - unrelated).mean() > 0.5
    nearest = np.argmax(fit_procrustes(PairSet(unrelated, x, (), (), (), "o", "n")).map(x) @ unrelated.T, axis=1)
    assert (nearest == np.arange(600)).mean() < 0.2


def test_the_gate_needs_the_lower_bound_above_the_margin_and_never_passes_by_ceiling() -> None:
    from types import SimpleNamespace

    from reindex.decisions.evaluation import aggregate
    from reindex.decisions.serving import choose_mode, mode_rules

    serving = SimpleNamespace(metric="ndcg", min_delta=0.0, min_pairs=100)
    cutover = SimpleNamespace(min_recall_delta=-0.02)

    def rows(diffs: list[float], base: float = 0.5) -> dict:
        got = [{"query_id": f"q{i}", "overlap_at_10": 1.0, "rbo": 1.0, "latency_old_ms": 1.0, "latency_new_ms": 1.0,
                "ndcg_at_10_old": base, "ndcg_at_10_new": base + d} for i, d in enumerate(diffs)]
        return {"aggregate": aggregate(got, 10), "rows": got}

    def passed(evaluation: dict, **kw) -> bool:
        return all(r.passed for r in mode_rules(evaluation, SimpleNamespace(**{**vars(serving), **kw}), cutover, 10))

    clear = rows([0.1, 0.2, 0.15, 0.1, 0.2, 0.12, 0.18, 0.1] * 12)  # 96 queries: a finite-sample bound needs some
    assert passed(clear)
    assert not passed(clear, min_delta=0.5)  # the margin is the gate's, not a suggestion
    wobbly = rows([0.3, -0.2, 0.25, -0.15, 0.3, -0.25, 0.2, -0.1] * 4)  # a positive mean whose interval spans 0
    assert wobbly["aggregate"]["ndcg_at_10_diff"]["mean"] > 0 and not passed(wobbly)
    assert not passed(rows([-0.1] * 8 + [-0.2] * 8))
    # A relaxed margin never lets a measurably worse mode serve: its own verdict says no.
    worse = rows([-0.3, -0.2, -0.25, -0.3] * 8)
    assert not passed(worse, min_delta=-1.0)
    rule = next(r for r in mode_rules(worse, SimpleNamespace(**{**vars(serving), "min_delta": -1.0}), cutover, 10)
                if r.name == "ndcg_at_10 not worse")
    assert not rule.passed and "measurably worse" in rule.detail
    # The bound is anytime-valid: the same evidence at a later look of the build needs more to pass.
    modest = rows([0.15, 0.05, 0.1, -0.05, 0.2, 0.0, 0.1, 0.05] * 12)
    assert passed(modest) and not all(r.passed for r in mode_rules(modest, serving, cutover, 10, look=40))
    ceiling = rows([0.0] * 16, base=1.0)  # every query at the maximum on both sides: cannot tell, never a pass
    rules = mode_rules(ceiling, serving, cutover, 10)
    assert not all(r.passed for r in rules) and any("cannot tell" in r.detail for r in rules)
    assert not all(r.passed for r in mode_rules(None, serving, cutover, 10, pairs=99))  # too few pairs
    assert choose_mode({"bridge": {"passed": True, "gate": {"low": 0.1}}, "cascade": {"passed": True, "gate": {"low": 0.2}}},
                       "auto") == "cascade"
    assert choose_mode({"bridge": {"passed": True, "gate": {"low": 0.1}}, "cascade": {"passed": True, "gate": {"low": 0.2}}},
                       "bridge") == "bridge"
    assert choose_mode({"bridge": {"passed": False}, "cascade": {"passed": False}}, "auto") == "old"
    assert choose_mode({"bridge": {"passed": True, "gate": {"low": 0.1}}}, "old") == "old"


# --------------------------------------------------------------------------------------------
# Free pairs
# --------------------------------------------------------------------------------------------


def test_free_pairs_are_read_back_by_id_as_shards_commit_and_nothing_is_embedded_twice(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", NOISY)
    live = ws.build_live()
    plan, path = _build_change(ws, CLEAN)
    LatentEmbeddings.reset()
    r = ws.apply(path)
    shadow = r.collection
    # Every chunk text of the shadow embedded exactly once: the pairs cost no embedding.
    assert LatentEmbeddings.texts == r.report["actual"]["embedded"] == r.report["actual"]["chunks_written"]
    state = ws.state()
    assert runs_with_pairs(state, "docs", shadow) == {plan.plan_hash: 4}  # one part per committed shard
    pairs = read_pairs(state, "docs", shadow, plan.plan_hash)
    assert pairs.new.shape[1] == CLEAN[0] and pairs.old.shape[1] == NOISY[0]
    assert 200 <= pairs.n <= 400 and len(set(pairs.new_ids)) == pairs.n  # ≤ 100 a shard, bounded
    old_points, new_points = ws.snapshot(live).points, ws.snapshot(shadow).points
    for oid, nid, o, n in zip(pairs.old_ids, pairs.new_ids, pairs.old, pairs.new):
        assert np.allclose(old_points[oid][0], o) and np.allclose(new_points[nid][0], n)
        assert old_points[oid][1]["page_content"] == new_points[nid][1]["page_content"]  # one text, two models
        assert old_points[oid][1]["doc_id"] == new_points[nid][1]["doc_id"]
    # A chunker change (the same model) keeps no pairs, and neither does serving.pairs: 0.
    ws.cutover(path)
    text = ws.config.read_text().replace("size: 150", "size: 120")
    ws.config.write_text(text)
    plan2, path2 = ws.plan()
    assert plan2.kind == "pipeline-scoped/text"
    ws.approve(path2)
    assert runs_with_pairs(state, "docs", ws.apply(path2).collection) == {}
    ws.config.write_text(text.replace("pairs: 400", "pairs: 0").replace("size: 120", "size: 150"))
    _model(ws, NOISY)
    plan3, path3 = ws.plan()
    ws.approve(path3)
    LatentEmbeddings.reset()
    r3 = ws.apply(path3)
    assert runs_with_pairs(state, "docs", r3.collection) == {}
    assert LatentEmbeddings.texts == r3.report["actual"]["embedded"]


# --------------------------------------------------------------------------------------------
# The gate: a mode that loses is refused; one that wins goes live; both fall back
# --------------------------------------------------------------------------------------------


def test_a_mode_that_loses_is_refused_readers_stay_on_old_and_the_forecast_says_stay(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", CLEAN)
    live = ws.build_live()
    _model(ws, NOISY)
    plan, path = api.make_plan(ws.config, out=ws.plans, forecast=24, queries=ws.root / "queries.jsonl")
    sv = plan.body["forecast"]["serving"]
    assert sv["recommendation"] == "stay" and "not better" in sv["reason"]
    assert sv["numbers"]["reindex"]["high"] < 0  # the new model is worse, with its interval
    assert sv["modes"]["bridge"]["passed"] is False and sv["modes"]["cascade"]["passed"] is False
    # What readers will pay per query, before the build: the cascade embeds its candidates at the start, none once built.
    readers = sv["readers"]
    assert readers["cascade"]["at_start"]["embedded_per_query"] > 40 and readers["cascade"]["built"]["embedded_per_query"] == 0
    assert readers["bridge"]["embeddings_per_query"] == 1 and readers["old"]["reader_ms_p95"] > 0
    from reindex.reports import forecast_serving_line

    line = forecast_serving_line(sv)
    assert "readers will pay per query (p95): old ~1 embeddings" in line and "at the start of the build" in line
    assert line.split("at the start of the build, ")[1].startswith("~2 embeddings")  # its two queries, once built
    ws.approve(path)
    ws.apply(path)
    with Index.open(ws.config) as ix, api.Querier(ws.config) as q:
        report = ix.serving(evaluate=True)
        assert report.mode == "old" and report.reason.startswith("no mode passed its gate")
        for name in ("bridge", "cascade"):
            e = report.evidence["modes"][name]
            assert e["passed"] is False and e["gate"]["high"] < 0
            assert next(r for r in e["rules"] if r["rule"] == "ndcg_at_10 beats old")["passed"] is False
        answer = q.query("cycle garbage collector", k=3)
        assert answer.mode == "old" and answer.population == live and answer.serving == {}
    st = _cli(ws, "status")["serving"]
    assert st["mode"] == "old" and st["evidence"]["modes"]["bridge"]["passed"] is False
    text = subprocess.run([str(REINDEX_BIN), "serving", "-c", str(ws.config)], capture_output=True, text=True,
                          env=_env(), cwd=ws.root, timeout=300)
    assert text.returncode == 0, text.stderr
    first = text.stdout.splitlines()[0]
    assert first.startswith("index docs: serving old") and "bridge ndcg_at_10 -" in first and "refused" in first
    assert "FAIL ndcg_at_10 beats old" in text.stdout and "evaluated at 4/4 shards" in first


def test_a_mode_that_wins_goes_live_for_a_reader_made_before_and_readers_go_native_at_cutover_and_rollback(
        tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", NOISY, ", mode: bridge")
    live = ws.build_live()
    querier = api.Querier(ws.config)  # made before anything changes; never recreated
    try:
        text = "How does the cyclic garbage collector find reference cycles?"
        assert querier.query(text, k=3).mode == "old"
        _model(ws, CLEAN)
        plan, path = api.make_plan(ws.config, out=ws.plans, forecast=24, queries=ws.root / "queries.jsonl")
        sv = plan.body["forecast"]["serving"]
        assert sv["recommendation"] == "bridge" and sv["numbers"]["bridge"]["low"] > 0
        assert 0 < sv["numbers"]["bridge"]["retained"]
        ws.approve(path)
        shadow = ws.apply(path).collection
        assert querier.query(text, k=3).mode == "old"  # built, never evaluated: native serving

        with Index.open(ws.config) as ix:
            report = ix.serving(evaluate=True)
        assert report.mode == "bridge" and report.changed and report.shadow == shadow
        e = report.evidence["modes"]["bridge"]
        assert e["passed"] and e["gate"]["low"] > 0 and e["bridge"]["pairs"] >= 100
        assert "cascade" not in report.evidence["modes"]  # serving.mode: bridge evaluates the bridge only
        bridged = querier.query(text, k=3)
        assert bridged.mode == "bridge" and bridged.population == live
        assert bridged.serving["bridge"] == e["bridge"]["id"] and bridged.serving["query_model"]["dimension"] == 64
        got = _cli(ws, "query", text, "--k", "3")
        assert got["mode"] == "bridge" and got["population"] == live and got["serving"]["bridge"] == e["bridge"]["id"]
        st = _cli(ws, "status")["serving"]
        assert st["mode"] == "bridge" and st["since"] and st["evidence"]["modes"]["bridge"]["passed"] is True
        # A mode is followed only for the population it was evaluated for (its shadow still a shadow here).
        record = read_serving(ws.state(), "docs")
        write_serving(ws.state(), "docs", {**record, "live": "docs__elsewhere"})
        assert querier.query(text, k=3).mode == "old" and _cli(ws, "status")["serving"]["mode"] == "old"
        write_serving(ws.state(), "docs", record)
        assert querier.query(text, k=3).mode == "bridge"

        # The margin is the gate's: the same evidence with a margin it does not clear falls back to old.
        ws.config.write_text(ws.config.read_text().replace(", mode: bridge", ", mode: bridge, min_delta: 0.9"))
        with Index.open(ws.config) as ix:
            again = ix.serving(evaluate=True)
        assert again.mode == "old" and again.changed
        assert "lower bound must be above +0.900" in next(
            r["detail"] for r in again.evidence["modes"]["bridge"]["rules"] if "beats old" in r["rule"])
        assert querier.query(text, k=3).mode == "old"
        ws.config.write_text(ws.config.read_text().replace(", min_delta: 0.9", ""))
        with Index.open(ws.config) as ix:
            assert ix.serving(evaluate=True).mode == "bridge"
        assert querier.query(text, k=3).mode == "bridge"

        bridged_record = read_serving(ws.state(), "docs")
        ws.cutover(path)  # the new population serves natively
        after = querier.query(text, k=3)
        assert after.mode == "old" and after.population == shadow and after.serving == {}
        assert read_serving(ws.state(), "docs")["mode"] == "old"
        # Even a record that still names the bridge (a crash before the bookkeeping) is not followed: the alias
        # serves another population than the one it was evaluated for, and the shadow is live, not a shadow.
        write_serving(ws.state(), "docs", bridged_record)
        assert querier.query(text, k=3).mode == "old" and _cli(ws, "status")["serving"]["mode"] == "old"
        api.rollback(ws.config)  # and the old one again, natively, although its record named a bridge before
        back = querier.query(text, k=3)
        assert back.mode == "old" and back.population == live
        assert _cli(ws, "status")["serving"]["mode"] == "old"
        write_serving(ws.state(), "docs", bridged_record)  # the alias is back on its population; its shadow retired
        assert querier.query(text, k=3).mode == "old" and _cli(ws, "status")["serving"]["mode"] == "old"
    finally:
        querier.close()


def test_a_cascade_reads_built_vectors_from_the_shadow_and_evidence_goes_stale_as_shards_are_built(
        tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws", NOISY, ", mode: cascade, candidates: 20")
    ws.build_live()
    plan, path = _build_change(ws, CLEAN)

    class TwoShardsThenKilled:
        """Runs shards 0 and 1, then dies like a killed apply (their manifests stay, the build is unfinished)."""

        name = "killed"

        def run(self, ctx, job):
            for k in job.shards[:2]:
                execution.run_shard(ctx, k)
            raise RuntimeError("killed after two shards")

    with pytest.raises(RuntimeError, match="killed"):
        ws.apply(path, runner=TwoShardsThenKilled())
    with Index.open(ws.config) as ix:
        half = ix.serving(evaluate=True)
        assert half.evidence["shards_done"] == 2 and half.evidence["shards_total"] == 4
        cost = half.evidence["modes"]["cascade"]["cost"]
        # What a reader in another process pays: the committed half of the shadow was shared with readers, so
        # about half the candidates are read from it and the rest embedded (one batch per query).
        assert cost["shadow_readable"] is True and cost["candidates_per_query"] == 20
        assert 4 <= cost["from_shadow_per_query"] <= 16 and cost["embedded_per_query"] >= 4
        assert ix.status()["serving"]["stale"] is False
        first = half.mode

    # Resumed with a re-evaluation after every 2 committed shards, in the apply's process (its writer reads the
    # shadow it builds: what is built is read, not embedded).
    ws.config.write_text(ws.config.read_text().replace("candidates: 20", "candidates: 20, every_shards: 2"))
    assert ws.apply(path).status == "done"
    rec = read_serving(ws.state(), "docs")
    assert rec["evidence"]["shards_done"] == 4
    assert [h["shards_done"] for h in rec["history"]] == [2, 4]  # by hand at 2, then the apply after its 2 shards
    cost = rec["evidence"]["modes"]["cascade"]["cost"]
    assert cost["shadow_readable"] is True and cost["from_shadow_per_query"] == 20 and cost["embedded_per_query"] == 0
    assert rec["mode"] == "cascade" and first in ("cascade", "old")
    with Index.open(ws.config) as ix:
        assert ix.status()["serving"]["stale"] is False

    # Evidence of fewer shards than are built is stale (status says so) until it is evaluated again.
    rec["evidence"]["shards_done"] = 2
    write_serving(ws.state(), "docs", rec)
    with Index.open(ws.config) as ix:
        assert ix.status()["serving"]["stale"] is True
        assert ix.serving(evaluate=True).evidence["shards_done"] == 4
        assert ix.status()["serving"]["stale"] is False
    answer = api.query("How does the cyclic garbage collector find reference cycles?", ws.config, k=5)
    assert answer.mode == "cascade" and answer.serving["candidates"] == 20 and len(answer.results) == 5
    # A reader in another process: the finished build was shared, so every candidate comes from the shadow.
    assert answer.serving["from_shadow"] == answer.serving["candidates"] == 20 and answer.serving["embedded"] == 0
    scores = [h["score"] for h in answer.results]
    assert scores == sorted(scores, reverse=True)  # ranked by the new model's similarity


# --------------------------------------------------------------------------------------------
# From the reader's seat (issue 42): the shadow shared as it builds, what a reader pays as a rule of the gate
# --------------------------------------------------------------------------------------------


class _KilledAfter:
    """Runs the first ``n`` shards, then dies like a killed apply (their manifests stay, the build is unfinished)."""

    name = "killed"

    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, ctx, job):
        for k in job.shards[:self.n]:
            execution.run_shard(ctx, k)
        raise RuntimeError(f"killed after {self.n} shards")


def _force_cascade(ws: Workspace) -> None:
    """Readers follow the cascade (as if its gate had passed): the reader path is what is tested."""
    with Index.open(ws.config) as ix:
        ix.serving(evaluate=True)
    write_serving(ws.state(), "docs", {**read_serving(ws.state(), "docs"), "mode": "cascade"})


def test_a_query_in_another_process_reads_the_candidates_the_build_has_shared_and_all_of_them_once_built(
        tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="serving: {mode: cascade, candidates: 20}\n")
    ws.build_live()
    ws.config.write_text(ws.config.read_text().replace("vector: {provider: hash}",
                                                       "vector: {provider: hash, dimension: 64}"))
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/vector"
    ws.approve(path)
    text = "How does the cyclic garbage collector find reference cycles?"

    with pytest.raises(RuntimeError, match="killed"):
        ws.apply(path, runner=_KilledAfter(2))  # half the build committed, shared with readers as it went
    _force_cascade(ws)
    half = _cli(ws, "query", text, "--k", "5")
    assert half["mode"] == "cascade" and half["serving"]["candidates"] == 20
    assert 0 < half["serving"]["from_shadow"] < 20 and half["serving"]["embedded"] == 20 - half["serving"]["from_shadow"]

    assert ws.apply(path).status == "done"  # the build finished; no cutover
    _force_cascade(ws)
    full = _cli(ws, "query", text, "--k", "5")
    assert full["mode"] == "cascade" and full["population"] == half["population"]
    assert full["serving"]["from_shadow"] == full["serving"]["candidates"] == 20 and full["serving"]["embedded"] == 0
    assert full["serving"]["embeddings"] == 2  # the query, once with each model
    st = _cli(ws, "status")["serving"]
    cost = st["modes"]["cascade"]["cost"]
    assert set(cost) >= {"reader_ms_p50", "reader_ms_p95", "embedded_per_query", "from_shadow_per_query"}
    assert cost["from_shadow_per_query"] == 20 and cost["embedded_per_query"] == 0


def test_a_mode_better_in_quality_but_too_slow_for_readers_stays_old_says_why_and_goes_live_once_built(
        tmp_path: Path) -> None:
    slow_clean = (*CLEAN, 0.02)  # the better model, 20 ms a text
    ws = _workspace(tmp_path / "ws", NOISY, ", mode: cascade, candidates: 20, every_shards: 4")
    ws.build_live()
    plan, path = _build_change(ws, slow_clean)
    with pytest.raises(RuntimeError, match="killed"):
        ws.apply(path, runner=_KilledAfter(0))  # the shadow exists, nothing of it is built
    with Index.open(ws.config) as ix:
        report = ix.serving(evaluate=True)
    e = report.evidence["modes"]["cascade"]
    rules = {r["rule"]: r for r in e["rules"]}
    assert rules["ndcg_at_10 beats old"]["passed"] and e["gate"]["anytime_low"] > 0  # the gain is real
    assert report.mode == "old" and not rules["reader latency"]["passed"]
    assert e["cost"]["embedded_per_query"] >= 19 and e["cost"]["reader_ms_p95"] > 380  # 20 candidates × 20 ms
    assert "reader latency" in report.reason
    text = subprocess.run([str(REINDEX_BIN), "serving", "-c", str(ws.config)], capture_output=True, text=True,
                          env=_env(), cwd=ws.root, timeout=300)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("index docs: serving old")
    line = next(ln for ln in text.stdout.splitlines() if "FAIL reader latency" in ln)
    assert f"p95 {e['cost']['reader_ms_p95']:,.1f} ms per query" in line and "serving.max_ms auto" in line
    assert f"readers pay ~{e['cost']['embedded_per_query']:g} embeddings, 0 of 20 candidates read from the shadow" \
        in text.stdout

    # The build goes on: shared with readers as it goes, its candidates come from the shadow, and the same mode
    # costs a reader its two query embeddings: the apply's evaluation after the last shard lets it go live.
    assert ws.apply(path).status == "done"
    rec = read_serving(ws.state(), "docs")
    cost = rec["evidence"]["modes"]["cascade"]["cost"]
    assert rec["mode"] == "cascade" and cost["from_shadow_per_query"] == 20 and cost["embedded_per_query"] == 0
    assert rec["since"] >= rec["evidence"]["evaluated_at"]  # when readers switched, not when the evaluation began
    assert rec["evaluations"]["count"] == 1 and rec["evaluations"]["build_cpu_seconds"] > 0
    st = _cli(ws, "status")["serving"]  # what the build's evaluations cost it, said in status
    assert st["evaluations"]["budget"] == 0.1 and st["evaluations"]["share"] == rec["evaluations"]["share"]
    line = subprocess.run([str(REINDEX_BIN), "status", "-c", str(ws.config)], capture_output=True, text=True,
                          env=_env(), cwd=ws.root, timeout=300).stdout
    assert "1 evaluation, " in line and "of the build's" in line and "serving cascade since" in line


def test_an_apply_records_its_progress_per_shard_while_serving_is_on(tmp_path: Path) -> None:
    from reindex.books.manifests import read_run_progress
    from reindex.decisions.cutover import populations

    ws = Workspace(tmp_path / "ws", extra="serving: {mode: cascade, every_shards: 2}\n")
    ws.build_live()
    ws.config.write_text(ws.config.read_text().replace("vector: {provider: hash}",
                                                       "vector: {provider: hash, dimension: 64}"))
    plan, path = ws.plan()
    ws.approve(path)
    state = ws.state()
    seen: list[int] = []

    def progress(event: dict) -> None:
        if event.get("kind") == "shard-done":  # the record written at the shard before this one
            shadow = next(p.collection for p in populations(state, "docs") if p.state == "building")
            seen.append((read_run_progress(state, "docs", shadow, plan.plan_hash) or {}).get("shards_done", 0))

    r = ws.apply(path, progress=progress)
    # Shards run in threads: the record read at a shard's end holds the shards recorded before it (the old wiring,
    # the watch forwarding past the record, left [0, 0, 0, 0] and a last record of 0 shards).
    assert len(seen) == 4 and max(seen) >= 2
    last = read_run_progress(state, "docs", r.collection, plan.plan_hash)
    assert last["shards_done"] == 4 and last["tokens_done"] == last["tokens_planned"] > 0
    # The modes were evaluated after 2 shards; the one due after 4 ran or waited for the CPU budget, and said so.
    account = read_serving(state, "docs")["evaluations"]
    assert account["count"] + account["deferred"] == 2 and account["build_cpu_seconds"] > 0


@pytest.mark.parametrize("damaged", ["bridge", "shadow record", "serving record"])
def test_a_damaged_optional_file_never_takes_readers_down_and_doctor_finds_it(tmp_path: Path, damaged: str,
                                                                              caplog) -> None:
    from reindex.books.layout import Books

    ws = _workspace(tmp_path / "ws", NOISY, ", mode: bridge")
    live = ws.build_live()
    plan, path = _build_change(ws, CLEAN)
    shadow = ws.apply(path).collection
    with Index.open(ws.config) as ix:
        assert ix.serving(evaluate=True).mode == "bridge"
    books = Books(ws.state(), "docs")
    rec = read_serving(ws.state(), "docs")
    key = {"bridge": books.bridge_key(rec["bridge"]["id"]), "shadow record": books.population_key(shadow),
           "serving record": books.serving_key}[damaged]
    data = ws.state().get(key)
    ws.state().put(key, data[: len(data) // 2])  # truncated, as by a full disk or a killed copy
    text = "How does the cyclic garbage collector find reference cycles?"
    with api.Querier(ws.config) as q:
        for _ in range(3):  # every query answers, natively; the reason is logged once
            answer = q.query(text, k=3)
            assert answer.mode == "old" and answer.population == live and len(answer.results) == 3
    logged = [r for r in caplog.records if "natively" in r.getMessage() and "reindex query" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]
    got = _cli(ws, "query", text, "--k", "3")
    assert got["mode"] == "old" and got["population"] == live
    doc = subprocess.run([str(REINDEX_BIN), "doctor", "-c", str(ws.config), "--json"], capture_output=True,
                         text=True, env=_env(), cwd=ws.root, timeout=300)
    found = json.loads(doc.stdout)
    kind = {"bridge": "bridge-damaged", "shadow record": "population-record-damaged",
            "serving record": "serving-record-damaged"}[damaged]
    f = next(f for f in found["findings"] if f["kind"] == kind)
    assert key in " ".join(f["examples"]) and any(f["detail"] in a for a in found["advice"])
    if damaged != "shadow record":  # (a damaged population record stops status with one line naming it)
        assert _cli(ws, "status")["serving"]["mode"] == "old"  # what readers get, not what the record says
    if damaged == "serving record":
        ws.cutover(path)  # a damaged serving record is written over, never a reason to refuse
        rec = read_serving(ws.state(), "docs")
        assert rec["mode"] == "old" and "damaged record replaced" in rec["reason"]
        ws.state().put(key, b"garbage")  # and a sync of an edit goes on beside a damaged record
        ws.edit_documents()
        r = subprocess.run([str(REINDEX_BIN), "sync", "-c", str(ws.config), "--plans", str(ws.plans)],
                           capture_output=True, text=True, env=_env(), cwd=ws.root, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr


def test_validate_warns_of_a_negative_serving_margin(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="serving: {min_delta: -0.2}\n")
    r = subprocess.run([str(REINDEX_BIN), "validate", "-c", str(ws.config), "--json"], capture_output=True,
                       text=True, env=_env(), cwd=ws.root, timeout=300)
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert any("serving.min_delta is -0.2" in w and "measurably worse is refused" in w for w in warnings), warnings
