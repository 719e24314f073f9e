"""Rules that follow the evidence (issue 41, items 2-4), each shown saying "no" or "cannot tell" on real data:

* the change's verdict on the primary metric (``cutover.metric``, nDCG@10) decides, recall@10 is a floor: a `worse`
  shadow fails even when the recall bound is relaxed;
* a gate that knows its power: 20 probes cannot clear the rule — `cannot tell`, the queries it would need and the
  advice, in the plan (from the forecast) and in the cutover; with ``cutover.queries`` an unattended ``sync`` carries
  the cutover out on that file;
* identical populations (a byte-identical A/A: nothing embedded differently) pass as identical;
* segments are judged on the primary metric: one whose nDCG rises does not fail because one query left the top 10;
* verdict words that match the numbers, and the forecast's verdict beside the cutover's result.

Real data: the bundled 24-PEP sample (and a generated two-team corpus) with the ``hash`` embedder, whose vectors
match only for identical texts: a query that is a chunk's exact text finds that chunk at score 1 on a side that
holds it and ranks at random on one that does not."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.adapters.embedders import make_embedder
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.cli import main
from reindex.decisions.evaluation import dedupe
from reindex.decisions.gate import verdict_words
from reindex.domain.identity import identity_of


def _chunk_texts(ws: Workspace, size: int, extra: str = "") -> set[tuple[str, str]]:
    ws.write_config(size, extra=extra)
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    return {(r.doc_id, r.text) for d in open_source(cfg.source).scan() for r in pipe.chunk_document(d)
            if len(r.text) > 80}


def _queries(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"query_id": f"q{i}", "query": t, "doc_id": d, "evidence": t}) + "\n"
                            for i, (d, t) in enumerate(pairs)), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def change(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Live: chunks of 150 tokens. Config moved to 120 (planned per test). Query files whose answers only the old
    chunking holds (the change is worse for them) and only the new one holds (better)."""
    root = tmp_path_factory.mktemp("gate")
    ws = Workspace(root / "ws")
    new, old = _chunk_texts(ws, 120), _chunk_texts(ws, 150)
    live = ws.build_live()
    rng = random.Random(3)
    return {"ws": ws, "root": root, "live": live,
            "old_only": _queries(root / "old_only.jsonl", rng.sample(sorted(old - new), 16)),
            "new_only": _queries(root / "new_only.jsonl", rng.sample(sorted(new - old), 16))}


def _build(ws: Workspace, size: int, extra: str) -> Path:
    ws.write_config(size, extra=extra)
    _plan, path = ws.plan()
    ws.approve(path)
    ws.apply(path)
    return path


def _cutover(ws: Workspace, path: Path, *args: str, code: int) -> dict:
    r = CliRunner().invoke(main, ["cutover", str(path), "-c", str(ws.config), "--json", *args])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def test_a_worse_shadow_fails_even_with_the_recall_bound_relaxed(change: dict) -> None:
    """The issue's case: `min_recall_delta: -0.1` let a change whose own verdict was `worse` go live. The floor holds
    now (its lower bound clears −1), and the verdict on nDCG@10 refuses it."""
    ws: Workspace = change["ws"]
    path = _build(ws, 120, "cutover: {min_recall_delta: -1.0}")
    report = _cutover(ws, path, "--queries", str(change["old_only"]), code=3)
    rules = {r["rule"]: r for r in report["rules"]}
    assert rules["recall@10"]["passed"], rules["recall@10"]
    ev = rules["evidence"]
    assert not ev["passed"] and ev["outcome"] == "fail"
    assert ev["detail"].startswith("verdict worse on nDCG@10 (cutover.metric): nDCG@10 new − old = -")
    assert "a worse change never passes without --force" in ev["detail"]
    agg = report["evaluation"]["aggregate"]
    assert agg["ndcg_at_10_diff"]["high"] < 0 and report["verdict"] == "worse"
    assert report["verdict_words"].startswith("worse: significantly lower ")
    assert report["power"]["ndcg_at_10"]["outcome"] == "fail"
    assert ws.alias() == change["live"]
    md = Path(str(path).removesuffix(".json") + ".cutover.md").read_text(encoding="utf-8")
    assert f"**Verdict: {report['verdict_words']}**" in md


def test_twenty_probes_cannot_clear_the_rule_and_say_what_they_would_need_in_the_plan_and_the_cutover(
        change: dict) -> None:
    ws: Workspace = change["ws"]
    probes = "cutover: {probes: 20, seed: 3}"  # (most seeds cannot tell; with this one neither can the forecast)
    ws.write_config(120, extra=probes)
    with api.Index.open(ws.config) as ix:
        plan, path = ix.plan(out=ws.plans, forecast=6)
    # Before the build: the forecast on the same 20 probes says the gate cannot decide, and how many queries would.
    f = plan.body["forecast"]
    power = f["power"]["ndcg_at_10"]
    assert f["queries"]["count"] == 20 and power["queries"] == 20 and power["outcome"] == "cannot tell", power
    assert power["needed_queries"] > 20 and power["half_width"] > 0.02
    assert f["gate_outlook"].startswith(f"cannot tell on nDCG@10: its 20 queries reach ±{power['half_width']:.3f}, "
                                        "wider than the rule's bound -0.020 allows; about ")
    assert f["gate_outlook"].endswith("give labelled queries (--queries, or cutover.queries in reindex.yaml for "
                                      "unattended syncs) or raise cutover.probes")
    shown = CliRunner().invoke(main, ["show", str(path)]).output
    assert f"  the cutover's gate: {f['gate_outlook']}" in shown
    assert f"**The cutover's gate cannot decide**: {f['gate_outlook']}" in path.with_suffix(".md").read_text()
    js = CliRunner().invoke(main, ["plan", "-c", str(ws.config), "--out", str(ws.plans), "--forecast", "6", "--json"])
    assert json.loads(js.stdout)["power"]["ndcg_at_10"] == power

    ws.approve(path)
    ws.apply(path)
    report = _cutover(ws, path, code=3)
    assert report["queries_source"] == "20 known-item probes sampled from the corpus (seed 3)"
    ev = {r["rule"]: r for r in report["rules"]}["evidence"]
    p = report["power"]["ndcg_at_10"]
    assert ev["outcome"] == "cannot tell" and not ev["passed"] and p["outcome"] == "cannot tell"
    assert p["needed_queries"] > 20 and p["queries"] == 20 and p["forecast"] == power
    assert ev["detail"].startswith("verdict cannot tell on nDCG@10: nDCG@10 new − old = ")
    assert (f"the interval (±{p['half_width']:.3f} on 20 queries) is wider than what the rule must detect: about "
            f"{p['needed_queries']:,} such queries would narrow it enough; give labelled queries (--queries, or "
            "cutover.queries in reindex.yaml for unattended syncs) or raise cutover.probes") in ev["detail"]
    assert ws.alias() == change["live"]


def test_with_cutover_queries_the_unattended_sync_carries_the_cutover_out_on_that_file(change: dict) -> None:
    ws: Workspace = change["ws"]
    ws.write_config(120, extra=f"cutover: {{probes: 20, queries: {change['new_only'].name}}}\n"
                               "approval: {pipeline_scoped: false}")
    (ws.root / change["new_only"].name).write_bytes(change["new_only"].read_bytes())  # beside reindex.yaml
    r = CliRunner().invoke(main, ["sync", "-c", str(ws.config), "--plans", str(ws.plans), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["outcome"] == "cut-over", out
    cut = out["cutover"]
    assert cut["queries_source"] == str(ws.root / change["new_only"].name)  # relative to the config's folder
    assert cut["evaluation"]["aggregate"]["queries"] == 16
    ev = {x["rule"]: x for x in cut["rules"]}["evidence"]
    assert ev["passed"] and ev["outcome"] == "pass" and cut["verdict"] == "better"
    assert ws.alias() == cut["shadow"] != change["live"]
    api.rollback(ws.config)  # back to the 150-token population for the next test


def test_the_forecast_is_shown_beside_the_cutovers_result(change: dict) -> None:
    ws: Workspace = change["ws"]
    ws.write_config(110, extra="cutover: {min_recall_delta: -1.0}")
    with api.Index.open(ws.config) as ix:
        plan, path = ix.plan(out=ws.plans, forecast=6, queries=change["old_only"])
    ws.approve(path)
    ws.apply(path)
    report = _cutover(ws, path, "--queries", str(change["old_only"]), code=3)
    f, said = plan.body["forecast"], report["forecast"]
    assert said["verdict"] == f["verdict"] and said["measured_verdict"] == report["verdict"] and said["metric"] == \
        "ndcg_at_10"
    p, m = f["metrics"]["ndcg_at_10"], report["evaluation"]["aggregate"]["ndcg_at_10_diff"]
    assert said["line"] == (f"the sample predicted nDCG@10 {p['diff']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] "
                            f"({f['verdict']} on {f['sample_documents']} documents); the full change measured "
                            f"{m['mean']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}] ({report['verdict']})")
    assert said["metrics"]["ndcg_at_10"]["held"] == (p["low"] <= m["mean"] <= p["high"])
    text = CliRunner().invoke(main, ["cutover", str(path), "-c", str(ws.config), "--queries",
                                     str(change["old_only"])]).output
    assert f"  forecast: {said['line']}" in text
    md = Path(str(path).removesuffix(".json") + ".cutover.md").read_text(encoding="utf-8")
    assert f"Forecast: {said['line']}" in md


def test_a_byte_identical_a_a_passes_as_identical(tmp_path: Path) -> None:
    """A text-half change that changes no byte of this corpus (it has no CR to keep): the plan is pipeline-scoped
    and embeds nothing, the shadow holds the same chunks with the same vectors. It used to fail on `cannot tell`
    (every probe scores the same on both sides); it passes as identical."""
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    ws.write_config(150, extra="text: {chunker: {kind: recursive, size: 150}, normaliser: {newlines: keep}}")
    ws.config.write_text(ws.config.read_text().replace("text: {chunker: {kind: recursive, size: 150}}\n", ""))
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/text" and plan.body["work"]["tokens_to_embed"] == 0
    ws.approve(path)
    shadow = ws.apply(path).collection
    report = _cutover(ws, path, code=0)
    ev = {r["rule"]: r for r in report["rules"]}["evidence"]
    assert ev["passed"] and ev["detail"].startswith(
        f"identical: {live} and {shadow} hold the same {plan.body['work']['chunks_new']:,} chunks with the same "
        "vectors (equal fingerprints) and embed queries with the same vector half: nothing is embedded differently")
    assert report["identical"] and ws.alias() == shadow
    assert report["evaluation"]["aggregate"]["ndcg_at_10_diff"]["low"] == \
        report["evaluation"]["aggregate"]["ndcg_at_10_diff"]["high"]  # what used to read `cannot tell`
    # A real change is never identical: the chunker change of the other tests differs in its chunks.
    md = Path(str(path).removesuffix(".json") + ".cutover.md").read_text(encoding="utf-8")
    assert f"**Verdict: identical ({report['identical']})**" in md


def test_a_worse_change_fails_whatever_min_delta_and_cannot_tell_allow() -> None:
    """`worse` (the interval's upper end below 0) fails the evidence rule even where `min_delta` is relaxed below the
    whole interval and `cannot tell` is let through: relaxing a bound tolerates a loss the queries cannot rule out,
    never one they measured. The same interval on a floor (not the change's verdict) passes a bound below it."""
    from types import SimpleNamespace

    from reindex.decisions.gate import evidence_rule, judge

    worse = {"mean": -0.04, "low": -0.08, "high": -0.005, "n": 60}
    relaxed = SimpleNamespace(metric="ndcg", min_delta=-0.1, cannot_tell="pass")
    agg = {"verdict": "worse", "metrics": {"ndcg_at_10": "worse"}, "ndcg_at_10_diff": worse}
    rule = evidence_rule(agg, relaxed)
    assert not rule.passed and rule.outcome == "fail", rule.detail
    assert "a worse change never passes without --force" in rule.detail
    assert judge(worse, False, -0.1, worse_fails=True)["outcome"] == "fail"
    assert judge(worse, False, -0.1, worse_fails=False)["outcome"] == "pass"  # a floor reads the bound only
    # Not worse (the upper end reaches 0) and inside the relaxed bound: it passes; a stricter bound cannot tell.
    unsure = {"mean": -0.02, "low": -0.08, "high": 0.03, "n": 60}
    agg = {"verdict": "no measurable difference", "metrics": {"ndcg_at_10": "no measurable difference"},
           "ndcg_at_10_diff": unsure}
    assert evidence_rule(agg, relaxed).passed
    strict = SimpleNamespace(metric="ndcg", min_delta=-0.02, cannot_tell="fail")
    rule = evidence_rule(agg, strict)
    assert not rule.passed and rule.outcome == "cannot tell", rule.detail


def test_the_queries_needed_follow_the_half_width_shrinking_as_one_over_root_n() -> None:
    from reindex.decisions.gate import power

    # ±0.10 on 25 queries; to show ≥ −0.02 at a measured 0 the half-width must fall to 0.02: 5× narrower, 25× the queries
    assert power({"mean": 0.0, "low": -0.1, "high": 0.1, "n": 25}, -0.02) == \
        {"half_width": 0.1, "needed_queries": 625, "queries": 25}
    # a measured gain of +0.03 leaves 0.05 to the bound: 2× narrower, 4× the queries
    assert power({"mean": 0.03, "low": -0.07, "high": 0.13, "n": 25}, -0.02)["needed_queries"] == 100
    # a measured loss counts as 0; no spread at all: no number of such queries can tell
    assert power({"mean": -0.05, "low": -0.15, "high": 0.05, "n": 25}, -0.02)["needed_queries"] == 625
    assert power({"mean": 0.0, "low": 0.0, "high": 0.0, "n": 25}, -0.02)["needed_queries"] is None


def test_verdict_words_match_the_numbers() -> None:
    iv = lambda m, lo, hi: {"mean": m, "low": lo, "high": hi, "n": 50}  # noqa: E731
    # The issue's model: worse on all six metrics, each upper bound +0.000: not "no measurable difference" bare.
    names = ("recall_at_10", "ndcg_at_10", "mrr", "passage_hit_at_10", "passage_mrr", "evidence_recall")
    agg = {f"{m}_diff": iv(-0.02 - i / 100, -0.06, 0.0) for i, m in enumerate(names)}
    agg.update(verdict="no measurable difference", metrics={m: "no measurable difference" for m in names})
    assert verdict_words(agg) == "worse on every metric (not significant at 95 %)"
    agg["mrr_diff"] = iv(0.01, -0.03, 0.05)
    assert verdict_words(agg) == "no measurable difference (1 metrics higher, 5 lower, none significant at 95 %)"
    agg["mrr_diff"] = iv(0.0, -0.03, 0.03)
    assert verdict_words(agg) == "worse on 5 of 6 metrics, none higher (not significant at 95 %)"
    better = {"ndcg_at_10_diff": iv(0.05, 0.01, 0.09), "mrr_diff": iv(-0.01, -0.04, 0.02),
              "verdict": "better", "metrics": {"ndcg_at_10": "better", "mrr": "no measurable difference"}}
    assert verdict_words(better) == "better: significantly higher nDCG@10 (95 %); lower MRR (not significant)"
    blind = {"verdict": "cannot tell", "metrics": {"ndcg_at_10": "cannot tell"}}
    assert verdict_words(blind).startswith("cannot tell: the queries cannot see a difference")


# --------------------------------------------------------------------------------------------
# Segments judged on the primary metric
# --------------------------------------------------------------------------------------------


def _team_corpus(path: Path, per_team: int = 12, paragraphs: int = 10) -> None:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(400)]
    lines = []
    for team in ("a", "b"):
        for d in range(per_team):
            paras = [" ".join(rng.choice(vocab) for _ in range(30)) + "." for _ in range(paragraphs)]
            lines.append(json.dumps({"id": f"{team}-{d:02d}", "text": "\n\n".join(paras), "team": team}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _team_config(root: Path, size: int) -> Path:
    cfg = root / "reindex.yaml"
    cfg.write_text(f"""index: docs
source: {{uri: ./corpus.jsonl, metadata_fields: [team]}}
text: {{chunker: {{kind: recursive, size: {size}}}, tokenizer: char}}
vector: {{provider: hash}}
apply: {{shards: 2}}
cutover: {{segments: [team], min_recall_delta: -0.2}}
""", encoding="utf-8")
    return cfg


def test_a_segment_whose_ndcg_rises_does_not_fail_because_one_query_left_the_top_10(tmp_path: Path) -> None:
    """Team b: twenty queries whose document the change moves up inside the top 10 (old rank 2-10, new rank 1: recall
    unchanged, nDCG up) and one whose document leaves it (old rank 1, new beyond 10). recall@10 of team b falls
    (−1/21, its Holm-corrected lower bound below −0.02: the old per-segment recall rule failed here); its
    nDCG@10 rises, and the segment rule, on nDCG@10, passes. Team a: queries both sides answer alike. (The overall
    recall floor is set to −0.2 here: one query of 33 lost is what the floor is for, not what this test is about.)"""
    _team_corpus(tmp_path / "corpus.jsonl")
    cfg = _team_config(tmp_path, 400)
    _, first = api.make_plan(cfg, out=tmp_path / "plans")
    live = api.apply_plan(first, cfg, use_prefect=False).collection
    assert api.cutover(first, cfg).report["swap"]
    cfg = _team_config(tmp_path, 300)
    _, path = api.make_plan(cfg, out=tmp_path / "plans")
    api.approve_plan(path, "tester", "test")
    shadow = api.apply_plan(path, cfg, use_prefect=False).collection

    resolved = api.load_resolved(cfg)
    embed = make_embedder(resolved.vector)
    store = api.vector_store_for(resolved)
    try:
        chunks = {c: {} for c in (live, shadow)}
        for c in chunks:
            for p in store.scroll(c):
                chunks[c].setdefault(p.payload["doc_id"], set()).add(p.payload["page_content"])

        def rank(collection: str, text: str, doc: str) -> int:
            hits = store.query(collection, embed.embed([text]).vectors[0], limit=100)
            docs = dedupe(h.payload["doc_id"] for h in hits)
            return docs.index(doc) + 1 if doc in docs else 101

        gains, loss, same = [], [], []
        for doc in sorted(chunks[shadow]):
            new, old = chunks[shadow][doc], chunks[live].get(doc, set())
            if doc.startswith("b"):
                gains += [(doc, t) for t in sorted(new - old) if 2 <= rank(live, t, doc) <= 10]
                loss += [(doc, t) for t in sorted(old - new) if rank(shadow, t, doc) > 10]
            else:
                same += [(doc, t) for t in sorted(new & old)][:1]
    finally:
        store.close()
    assert len(gains) >= 20 and loss, (len(gains), len(loss))
    rows = [{"query": t, "doc_id": d} for d, t in gains[:20] + loss[:1] + same]
    queries = tmp_path / "team.jsonl"
    queries.write_text("".join(json.dumps(q) + "\n" for q in rows), encoding="utf-8")

    r = CliRunner().invoke(main, ["cutover", str(path), "-c", str(cfg), "--queries", str(queries), "--json"])
    out = json.loads(r.stdout)
    rules = {x["rule"]: x for x in out["rules"]}
    b = out["segments"]["team"]["b"]
    assert b["queries"] == 21 and b["recall_at_10"]["diff"] == pytest.approx(-1 / 21)
    # below the default bound (−0.02), where the old per-segment recall rule failed a segment like this one
    assert b["recall_at_10"]["low"] < -0.02 and b["recall_at_10"]["high"] <= 0
    assert b["ndcg_at_10"]["diff"] > 0 and b["ndcg_at_10"]["low"] >= -0.02, b["ndcg_at_10"]
    assert rules["nDCG@10 per team"]["passed"], rules["nDCG@10 per team"]
    assert rules["nDCG@10 per team"]["detail"].startswith("every lower bound ≥ -0.020")
    assert r.exit_code == 0 and out["swap"]["to"] == shadow, out["rules"]


def test_a_recommendation_near_its_boundary_says_how_near() -> None:
    """The issue's case: both forecasts said `cascade` +0.041 [+0.005, +0.084]; on the full shadow +0.026 [−0.001,
    +0.060] was refused. Neither said how close to the boundary it stood."""
    from types import SimpleNamespace

    from reindex.decisions.serving import recommend

    serving = SimpleNamespace(metric="ndcg", min_delta=0.0, mode="auto")
    full = {"ndcg_at_10_diff": {"mean": 0.02, "low": -0.03, "high": 0.07, "n": 84}}
    chosen = {"cascade": {"passed": True, "gate": {"metric": "ndcg_at_10", "diff": 0.041, "low": 0.005, "high": 0.084}}}
    r = recommend(full, chosen, serving, 10)
    assert r["recommendation"] == "cascade" and r["numbers"]["cascade"]["margin"] == 0.005
    assert ("cascade: a near call: its lower bound clears serving.min_delta +0.000 by 0.005, against an interval "
            "0.079 wide — another sample this size could decide the other way") in r["reason"]
    refused = {"cascade": {"passed": False, "gate": {"metric": "ndcg_at_10", "diff": 0.026, "low": -0.001,
                                                      "high": 0.060}}}
    r = recommend(full, refused, serving, 10)
    assert r["recommendation"] == "stay" and "cascade: a near call: its lower bound misses" in r["reason"]
    far = {"cascade": {"passed": True, "gate": {"metric": "ndcg_at_10", "diff": 0.2, "low": 0.15, "high": 0.25}}}
    assert "near" not in recommend(full, far, serving, 10)["numbers"]["cascade"]
