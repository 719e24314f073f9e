"""`reindex plan --forecast N`: what a pipeline-scoped change buys, measured on a sample of both sides before paying
for it, evaluated as the cutover will; the verdicts it can give (better, worse, cannot tell) on real data; the
policy bounds that make it enforceable; and the gate's `cannot tell` that no longer passes by construction.

Real data: the bundled 24-PEP sample with the ``hash`` embedder, whose vectors match only for identical inputs. A
query that is a chunk's exact text finds that chunk at score 1 on a side that holds it and ranks at random on one
that does not, so queries drawn from the chunks only the old chunking makes must come out `worse`, from chunks
only the new one makes `better`, and from chunks both make `cannot tell` (every query at the ceiling on both)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env

from reindex.api import Index
from reindex.errors import ApprovalError
from reindex.decisions.evaluation import metric_verdict, verdict
from reindex.domain.identity import identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source

LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"


def _chunk_texts(ws: Workspace, size: int) -> set[tuple[str, str]]:
    """(doc id, chunk text) of every chunk the sample corpus gives with the recursive chunker at ``size``."""
    ws.write_config(size, extra=LENIENT)
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    return {(r.doc_id, r.text) for d in open_source(cfg.source).scan() for r in pipe.chunk_document(d)
            if len(r.text) > 80}


def _queries(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"query_id": f"q{i}", "query": t, "doc_id": d, "evidence": t}) + "\n"
                            for i, (d, t) in enumerate(pairs)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A live population at chunk size 150 and the config moved to 120 (not planned); query files whose answer
    only the old side holds, only the new side, or both."""
    root = tmp_path_factory.mktemp("forecast")
    ws = Workspace(root / "ws", extra=LENIENT)
    new = _chunk_texts(ws, 120)
    old = _chunk_texts(ws, 150)
    live = ws.build_live()
    ws.write_config(120, extra=LENIENT)
    rng = random.Random(1)
    return {"ws": ws, "live": live, "root": root,
            "old_only": _queries(root / "old_only.jsonl", rng.sample(sorted(old - new), 12)),
            "new_only": _queries(root / "new_only.jsonl", rng.sample(sorted(new - old), 12)),
            "both": _queries(root / "both.jsonl", rng.sample(sorted(old & new), 12))}


def _forecast(ws: Workspace, n: int, queries: Path | None = None) -> dict:
    args = [str(REINDEX_BIN), "plan", "-c", str(ws.config), "--out", str(ws.plans), "--forecast", str(n), "--json"]
    r = subprocess.run(args + (["--queries", str(queries)] if queries else []), capture_output=True, text=True,
                       env=subprocess_env(), cwd=ws.root, timeout=600)
    assert r.returncode == 2, r.stderr
    return json.loads(r.stdout)


def test_the_forecast_builds_both_sides_beside_the_live_alias_and_says_what_it_cost(changed: dict, tmp_path) -> None:
    ws = changed["ws"]
    with ws.store() as s:
        before = (sorted(s.list_collections()), s.get_alias("docs"))
    out = _forecast(ws, 6, changed["both"])
    f = out["forecast"]
    assert out["kind"] == "pipeline-scoped/text"
    assert set(f) >= {"sample_documents", "metrics", "verdict", "cost", "sample", "queries"}
    assert f["verdict"] in ("better", "worse", "no measurable difference", "cannot tell")
    for m in f["metrics"].values():
        assert set(m) >= {"old", "new", "diff", "low", "high"} and m["low"] <= m["diff"] <= m["high"]
    # the sample: drawn by length (at least 2 per stratum, so 6 asked gives the 8 strata's minimum), plus every
    # document a query points at that the draw missed; every query kept
    assert f["sample"]["stratified"] >= 6 and f["sample"]["query_documents"] >= 1
    assert f["sample_documents"] == f["sample"]["stratified"] + f["sample"]["query_documents"]
    assert f["queries"]["count"] == 12
    # its own cost: a chunker change reuses every vector of identical text from the live population, as apply does
    assert 0 < f["cost"]["tokens"] < out["tokens_to_embed"] and f["cost"]["embedded_chunks"] < f["cost"]["chunks"]
    with ws.store() as s:
        assert (sorted(s.list_collections()), s.get_alias("docs")) == before  # the live store was only read


def test_the_forecast_says_worse_better_and_cannot_tell_on_the_evidence(changed: dict) -> None:
    ws = changed["ws"]
    worse = _forecast(ws, 4, changed["old_only"])["forecast"]
    assert worse["verdict"] == "worse", worse["metrics"]
    assert worse["metrics"]["passage_mrr"]["high"] < 0 and worse["metrics"]["passage_mrr"]["old"] == 1.0
    better = _forecast(ws, 4, changed["new_only"])["forecast"]
    assert better["verdict"] == "better", better["metrics"]
    assert better["metrics"]["passage_mrr"]["low"] > 0 and better["metrics"]["passage_mrr"]["new"] == 1.0
    blind = _forecast(ws, 4, changed["both"])["forecast"]
    assert blind["verdict"] == "cannot tell"  # every query at the ceiling on both sides: no evidence either way
    assert set(m["verdict"] for m in blind["metrics"].values()) == {"cannot tell"}


def test_the_policy_refuses_a_plan_without_a_forecast_or_whose_forecast_falls_short(changed: dict) -> None:
    ws = changed["ws"]
    with Index.open(ws.config) as ix:
        bare, bare_path = ix.plan(out=ws.plans)
        worse, worse_path = ix.plan(out=ws.plans, forecast=4, queries=changed["old_only"])
        for p in (bare_path, worse_path):
            ix.approve(p, by="tester")
    assert "forecast" not in bare.body and worse.body["forecast"]["verdict"] == "worse"
    ws.write_config(120, extra=LENIENT + "\napproval: {require_forecast: true}")
    with Index.open(ws.config) as ix, pytest.raises(ApprovalError, match="has no forecast and approval.require_forecast"):
        ix.apply(bare_path)
    ws.write_config(120, extra=LENIENT + "\napproval: {min_forecast_delta: -0.05}")
    with Index.open(ws.config) as ix, pytest.raises(ApprovalError, match="forecast says the change is worse"):
        ix.apply(worse_path)
    with ws.store() as s:
        assert s.get_alias("docs") == changed["live"] and len(s.list_collections()) == 1  # nothing built
    ws.write_config(120, extra=LENIENT)


def test_require_forecast_makes_plan_and_sync_carry_one(changed: dict) -> None:
    ws = changed["ws"]
    ws.write_config(120, extra=LENIENT + "\napproval: {require_forecast: true, forecast_documents: 20}")
    try:
        with Index.open(ws.config) as ix:
            plan, _ = ix.plan(out=None)
        assert plan.body["forecast"]["sample"]["stratified"] == 20
    finally:
        ws.write_config(120, extra=LENIENT)


@pytest.mark.parametrize("diff, ceiling, expected", [
    ({"mean": 0.2, "low": 0.05, "high": 0.3, "n": 10}, False, "better"),
    ({"mean": -0.2, "low": -0.3, "high": -0.05, "n": 10}, False, "worse"),
    ({"mean": 0.0, "low": -0.1, "high": 0.1, "n": 10}, False, "no measurable difference"),
    ({"mean": 0.0, "low": 0.0, "high": 0.0, "n": 10}, False, "cannot tell"),  # degenerate
    ({"mean": 0.0, "low": -0.1, "high": 0.1, "n": 10}, True, "cannot tell"),  # every query at the maximum
    ({"mean": 0.0, "low": 0.0, "high": 0.0, "n": 0}, False, "cannot tell"),  # no query
    ({"mean": 0.1, "low": 0.0, "high": 0.2, "n": 10}, False, "no measurable difference"),  # touching 0 is not better
])
def test_a_metric_verdict_reads_its_interval(diff: dict, ceiling: bool, expected: str) -> None:
    assert metric_verdict(diff, ceiling) == expected


def test_the_overall_verdict_is_worse_if_any_metric_is_and_cannot_tell_only_when_none_can() -> None:
    iv = lambda lo, hi: {"mean": (lo + hi) / 2, "low": lo, "high": hi, "n": 5}  # noqa: E731
    agg = {"mrr_diff": iv(0.1, 0.2), "passage_mrr_diff": iv(-0.3, -0.1)}
    assert verdict(agg, 10)["verdict"] == "worse"
    agg = {"mrr_diff": iv(0.1, 0.2), "passage_mrr_diff": iv(-0.1, 0.1)}
    assert verdict(agg, 10)["verdict"] == "better"
    agg = {"mrr_diff": iv(0.0, 0.0), "passage_mrr_diff": iv(-0.1, 0.1)}
    assert verdict(agg, 10)["verdict"] == "no measurable difference"
    agg = {"mrr_diff": iv(0.0, 0.0), "mrr_ceiling": False, "recall_at_10_diff": iv(-0.1, 0.1), "recall_at_10_ceiling": True}
    assert verdict(agg, 10) == {"verdict": "cannot tell", "metrics": {"recall_at_10": "cannot tell", "mrr": "cannot tell"}}


def test_the_forecast_says_its_size_and_projected_cpu_first_and_reuses_a_retained_populations_vectors(
        tmp_path: Path) -> None:
    """Issue 41, item 5: a model change and back (the rollback case). The way back's forecast takes every vector of
    its sample from the retained population of that model (embeds nothing), and reads its query vectors back from
    the books; each forecast says its sample and projected CPU before it runs, and the CPU it used (its process's)."""
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    ws.config.write_text(ws.config.read_text().replace("vector: {provider: hash}", "vector: {provider: hash, dimension: 64}"))
    first = ws.build_live()
    ws.config.write_text(ws.config.read_text().replace("dimension: 64", "dimension: 96"))
    args = [str(REINDEX_BIN), "plan", "-c", str(ws.config), "--out", str(ws.plans), "--forecast", "--json"]
    r = subprocess.run(args, capture_output=True, text=True, env=subprocess_env(), cwd=ws.root, timeout=600)
    assert r.returncode == 2, r.stderr
    out = json.loads(r.stdout)
    f = out["forecast"]
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("forecast: ")]
    assert said[0].startswith(f"forecast: {f['sample_documents']} of 24 documents sampled (") and "projected ~" in said[0]
    assert said[1].startswith(f"forecast: used {f['cost']['cpu_seconds']:.1f} CPU-s (")
    c = f["cost"]
    assert c["cpu_seconds"] >= c["embed_cpu_seconds"] > 0 and c["embedded_chunks"] == c["chunks"] > 0
    assert c["projected_cpu_seconds"] > 0 and c["retained_populations"] == []
    with Index.open(ws.config) as ix:
        ix.approve(out["plan_file"], by="tester")
        assert ix.apply(out["plan_file"], prefect=False).status == "done"
        assert ix.cutover(out["plan_file"]).passed
        ix.rollback()
    ws.config.write_text(ws.config.read_text().replace("dimension: 96", "dimension: 64"))
    ws.config.write_text(ws.config.read_text().replace("dimension: 64", "dimension: 96"))  # forward again
    r = subprocess.run(args, capture_output=True, text=True, env=subprocess_env(), cwd=ws.root, timeout=600)
    back = json.loads(r.stdout)["forecast"]["cost"]
    assert back["embedded_chunks"] == 0 and back["embed_cpu_seconds"] == 0.0, back
    assert len(back["retained_populations"]) == 1 and back["retained_populations"][0] != first
    assert "(also from " in r.stderr


def test_a_forecast_without_a_number_samples_a_share_of_the_corpus_with_a_minimum() -> None:
    from reindex.decisions.forecast import default_forecast_documents, draw_forecast_sample
    from reindex.decisions.evaluation import Query as Q

    assert [default_forecast_documents(n) for n in (10, 150, 300, 1000, 3000)] == [10, 30, 30, 100, 300]
    sizes = {f"d{i}": 100 + i for i in range(1000)}
    queries = [Q(f"q{i}", "t", frozenset({f"d{i * 7}"})) for i in range(50)]
    capped = draw_forecast_sample(sizes, default_forecast_documents(1000), 0, queries, total=True)
    assert len(capped.documents) <= 100 and capped.labelled + capped.stratified >= 50
    assert {f"d{i * 7}" for i in range(50)} <= capped.documents  # every query's answer is in both haystacks
    # The case: 50 probes on 150 documents sampled 116 (N 100 + the probes' documents); capped: the probes'
    # 50 and the 16 a draw by length needs at least (some of them the same).
    small = {f"d{i}": 100 + i for i in range(150)}
    q150 = [Q(f"q{i}", "t", frozenset({f"d{i * 3}"})) for i in range(50)]
    drawn = draw_forecast_sample(small, default_forecast_documents(150), 0, q150, total=True)
    assert 50 <= len(drawn.documents) <= 66 and drawn.stratified == 16
