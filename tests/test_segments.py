"""Results per segment (issue 32, item 4): ``cutover.segments`` breaks the evaluation down by a metadata field,
with Holm-corrected paired intervals per value and a gate rule that fails on a hurt segment.

Holm's step-down method is checked on a textbook case; the bootstrap with one segment is the overall interval;
the gate on synthetic rows and through a real cutover (embedded store, ``hash`` embedder: a query whose text is a
chunk's text finds exactly that chunk, so query files can be made to help one language and hurt the other)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_browser import CHROMIUM, Browser
from reindex import api
from reindex.cli import main
from reindex.domain.config import CutoverConfig, PipelineConfig, load_config
from reindex.decisions.gate import gate, segment_rules
from reindex.errors import ConfigError
from reindex.decisions.evaluation import NO_SEGMENT, Query, aggregate, read_queries, segment_of, segment_results
from reindex.foundation.stats import holm_bootstrap, holm_levels, paired_bootstrap, quantile, bootstrap_means

K = 10


# --------------------------------------------------------------------------------------------
# Holm's step-down method
# --------------------------------------------------------------------------------------------


def test_holm_levels_step_down_and_stop_at_the_first_not_rejected() -> None:
    # m = 4, alpha 0.05. Ascending: d 0.005 ≤ 0.05/4 = 0.0125 (rejected), a 0.010 ≤ 0.05/3 = 0.01667 (rejected),
    # c 0.030 > 0.05/2 = 0.025: stop; c and every later one (b) keep 0.025 and are not rejected.
    levels = holm_levels({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}, 0.05)
    assert levels == {"d": pytest.approx(0.0125), "a": pytest.approx(0.05 / 3), "c": pytest.approx(0.025),
                      "b": pytest.approx(0.025)}
    # Nothing stops it: the last is tested at alpha itself (Bonferroni would test every one at alpha / m).
    assert holm_levels({"x": 0.001, "y": 0.02}, 0.05) == {"x": pytest.approx(0.025), "y": pytest.approx(0.05)}


def test_one_segment_gets_the_overall_interval() -> None:
    diffs = [0.0, 1.0, -1.0, 0.0, 1.0, 1.0, 0.0, 0.5]
    (one,) = holm_bootstrap({"all": diffs}, -0.02, seed=3).values()
    overall = paired_bootstrap(diffs, seed=3)
    assert (one["mean"], one["low"], one["high"], one["n"]) == (overall["mean"], overall["low"], overall["high"], 8)
    assert one["level"] == pytest.approx(0.025)


def test_segments_intervals_widen_with_their_number_and_clear_the_bound_only_when_holm_rejects() -> None:
    clear = [1.0] * 6 + [0.0] * 4                 # every resample ≥ 0: p = 0
    hurt = [-1.0] * 3 + [0.0] * 7                 # clearly below −0.02
    edge = [0.3, -0.2, 0.1, 0.0, -0.4, 0.25, 0.05, -0.1, 0.2, -0.05, 0.15, -0.3, 0.0, 0.1, -0.15, 0.35, -0.25,
            0.05, 0.0, -0.02]                     # around 0
    out = holm_bootstrap({"clear": clear, "hurt": hurt, "edge": edge}, -0.02, seed=0)
    assert out["clear"]["p"] == 0.0 and out["clear"]["level"] == pytest.approx(0.025 / 3)  # first of 3
    # edge comes next (its p is smaller than hurt's), at 0.025 / 2; its lower bound does not clear −0.02, so the
    # procedure stops there: hurt keeps that step's level, not the 0.025 a third step would have had.
    assert out["clear"]["p"] < out["edge"]["p"] < out["hurt"]["p"]
    assert out["edge"]["level"] == pytest.approx(0.0125) and out["hurt"]["level"] == pytest.approx(0.0125)
    for name, seg in out.items():
        means = bootstrap_means({"clear": clear, "hurt": hurt, "edge": edge}[name], seed=0)
        assert seg["low"] == quantile(means, seg["level"]) and seg["high"] == quantile(means, 1 - seg["level"])
    assert [n for n, seg in out.items() if seg["low"] >= -0.02] == ["clear"]
    # Corrected intervals are at least as wide as the uncorrected ones.
    edge_plain = paired_bootstrap(edge, seed=0)
    assert out["edge"]["low"] < edge_plain["low"] and out["edge"]["high"] > edge_plain["high"]


# --------------------------------------------------------------------------------------------
# Which segment a query is in
# --------------------------------------------------------------------------------------------


def test_a_querys_segment_is_the_files_field_else_the_labelled_documents_metadata_else_none(tmp_path) -> None:
    qf = tmp_path / "q.jsonl"
    qf.write_text("\n".join(json.dumps(d) for d in [
        {"query": "a", "doc_id": "d1", "lang": "en", "team": "search"},
        {"query": "b", "doc_id": "d2"},
        {"query": "c", "relevant": ["d4", "d3"]},
        {"query": "d", "doc_id": "d5"},
        {"query": "e", "doc_id": "d6"},
    ]) + "\n", encoding="utf-8")
    qa, qb, qc, qd, qe = read_queries(qf)
    meta = {"d1": {"lang": "de"}, "d2": {"lang": "zh", "team": 3}, "d3": {"lang": "fr"}, "d4": {"lang": "it"},
            "d5": {"lang": ""}, "d6": {}}
    asked: list[str] = []

    def metadata(doc: str) -> dict:
        asked.append(doc)
        return meta[doc]

    assert segment_of(qa, ["lang", "team"], metadata) == {"lang": "en", "team": "search"}  # the file's own fields
    assert asked == []
    assert segment_of(qb, ["lang", "team"], metadata) == {"lang": "zh", "team": "3"}
    assert segment_of(qc, ["lang"], metadata) == {"lang": "fr"}  # several labelled documents: the first by id
    assert segment_of(qd, ["lang"], metadata) == {"lang": NO_SEGMENT}
    assert segment_of(qe, ["lang"], metadata) == {"lang": NO_SEGMENT}
    assert qa.value_of("source") is None and Query("p", "t").value_of("lang") is None


# --------------------------------------------------------------------------------------------
# The gate on synthetic rows
# --------------------------------------------------------------------------------------------


def _row(i: int, lang: str, old: float, new: float) -> dict:
    r = {"query_id": f"{lang}{i}", "query": "q", "overlap_at_10": 1.0, "rbo": 1.0, "latency_old_ms": 1.0,
         "latency_new_ms": 1.0, "segments": {"lang": lang}, "rank_old": 1 if old else None,
         "rank_new": 1 if new else None}
    for side, v in (("old", old), ("new", new)):
        r[f"recall_at_10_{side}"] = r[f"ndcg_at_10_{side}"] = r[f"mrr_{side}"] = v
    return r


def _evaluation(rows: list[dict], bound: float) -> dict:
    return {"k": K, "rows": rows, "aggregate": aggregate(rows, K), "segment_bound": bound,
            "segments": segment_results(rows, ["lang"], K, bound=bound)}


def _gate(evaluation: dict, policy: CutoverConfig) -> dict:
    return {r.name: r for r in gate(policy, evaluation, shadow_points=1, planned_chunks=1, failures=0, k=K)}


def test_the_gate_fails_on_a_hurt_segment_while_the_overall_interval_passes() -> None:
    policy = CutoverConfig(segments=["lang"])
    # en: 36 queries, 12 gained their document; zh: 12 queries, 4 lost theirs. Overall +8/48.
    rows = ([_row(i, "en", 0.0, 1.0) for i in range(12)] + [_row(i, "en", 1.0, 1.0) for i in range(12, 36)]
            + [_row(i, "zh", 1.0, 0.0) for i in range(4)] + [_row(i, "zh", 1.0, 1.0) for i in range(4, 12)])
    ev = _evaluation(rows, policy.min_recall_delta)
    rules = _gate(ev, policy)
    assert rules["recall@10"].passed, rules["recall@10"].detail
    seg = rules["nDCG@10 per lang"]  # segments are judged on the primary metric (cutover.metric), as the whole is
    assert not seg.passed and seg.outcome == "fail"
    assert "worse or below -0.020 in lang=zh (intervals corrected by Holm for 2 segments)" in seg.detail
    assert "lang=en" not in seg.detail  # only the segments that fall short are named
    zh, en = ev["segments"]["lang"]["zh"], ev["segments"]["lang"]["en"]
    assert zh["recall_at_10"]["diff"] == pytest.approx(-4 / 12) and zh["verdict"] == "worse"
    assert en["recall_at_10"]["verdict"] == "better" and en["queries"] == 36
    assert zh["ranks"] == {"better": 0, "worse": 4, "same": 8}
    # en has the smaller p of "below the bound": it is tested first, at alpha / 2; zh at alpha.
    assert en["recall_at_10"]["level"] == pytest.approx(0.0125) and zh["recall_at_10"]["level"] == pytest.approx(0.025)


def test_the_gate_passes_when_no_segment_is_hurt_and_has_no_segment_rule_without_segments() -> None:
    policy = CutoverConfig(segments=["lang"])
    rows = ([_row(i, "en", 0.0, 1.0) for i in range(12)] + [_row(i, "en", 1.0, 1.0) for i in range(12, 36)]
            + [_row(i, "zh", 1.0, 1.0) for i in range(12)])
    rules = _gate(_evaluation(rows, policy.min_recall_delta), policy)
    assert rules["nDCG@10 per lang"].passed
    assert rules["nDCG@10 per lang"].detail.startswith("every lower bound ≥ -0.020")
    plain = {"k": K, "rows": rows, "aggregate": aggregate(rows, K)}
    assert "nDCG@10 per lang" not in _gate(plain, CutoverConfig())


def test_a_segment_without_labelled_queries_is_not_checked() -> None:
    assert segment_rules({"lang": {"en": {"queries": 3, "verdict": "cannot tell"}}}, CutoverConfig(), K) == []


def test_segments_must_be_metadata_fields() -> None:
    with pytest.raises(ValueError, match=r"cutover.segments: 'lang' not in source.metadata_fields \(none\); add it"):
        PipelineConfig.model_validate({"index": "x", "source": "a.jsonl", "cutover": {"segments": ["lang"]}})


def test_a_config_naming_an_unknown_segment_field_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text("index: docs\nsource: {uri: ./c.jsonl, metadata_fields: [team]}\ncutover: {segments: [lang]}\n",
                   encoding="utf-8")
    with pytest.raises(ConfigError, match="cutover.segments: 'lang' not in source.metadata_fields \\(team\\)"):
        load_config(cfg)


# --------------------------------------------------------------------------------------------
# Through a real cutover (embedded store, hash embedder)
# --------------------------------------------------------------------------------------------

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega").split()
HANZI = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以会可里后自之过"


def _corpus(path: Path, n: int = 40) -> None:
    """English documents of words and Chinese ones of characters, paragraphs apart: their chunks differ between
    the two chunk sizes, except the second half of the Chinese documents, one short paragraph each (one chunk)."""
    lines = []
    for lang in ("en", "zh"):
        for d in range(n):
            paras = []
            for p in range(6 if lang == "en" or d < n // 2 else 1):
                if lang == "en":
                    paras.append(" ".join(WORDS[(d * 7 + p * 3 + w) % len(WORDS)] + str(d) for w in range(60)) + ".")
                else:
                    paras.append("".join(HANZI[(d * 5 + p * 11 + c) % len(HANZI)] for c in range(120)) + f"{d}。")
            lines.append(json.dumps({"id": f"{lang}-{d:02d}", "text": "\n\n".join(paras), "lang": lang},
                                    ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _config(root: Path, size: int) -> Path:
    cfg = root / "reindex.yaml"
    cfg.write_text(f"""index: docs
source: {{uri: ./corpus.jsonl, metadata_fields: [lang]}}
text: {{chunker: {{kind: recursive, size: {size}}}, tokenizer: char}}
vector: {{provider: hash}}
apply: {{shards: 2}}
cutover: {{segments: [lang]}}
""", encoding="utf-8")
    return cfg


def _chunks(cfg: Path, collection: str) -> dict[str, set[str]]:
    store = api.vector_store_for(api.load_resolved(cfg))
    try:
        out: dict[str, set[str]] = {}
        for p in store.scroll(collection):
            out.setdefault(p.payload["doc_id"], set()).add(p.payload["page_content"])
        return out
    finally:
        store.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A live population (recursive 400 characters) and a shadow (300) of English and Chinese documents."""
    root = tmp_path_factory.mktemp("segments")
    _corpus(root / "corpus.jsonl")
    cfg = _config(root, 400)
    _, first = api.make_plan(cfg, out=root / "plans")
    live = api.apply_plan(first, cfg, use_prefect=False).collection
    assert api.cutover(first, cfg).report["swap"]
    cfg = _config(root, 300)
    _, path = api.make_plan(cfg, out=root / "plans")
    api.approve_plan(path, "tester", "test")
    shadow = api.apply_plan(path, cfg, use_prefect=False).collection
    return {"root": root, "cfg": cfg, "path": path, "old": _chunks(cfg, live), "new": _chunks(cfg, shadow)}


def _queries(built: dict, path: Path, hurt_zh: bool) -> Path:
    """English queries each the text of a chunk only the shadow holds (new finds the document, old does not);
    Chinese ones the text of a chunk only the live population holds (hurt: a long document) or one both hold (not
    hurt: a short one). Half the
    Chinese queries carry no ``lang``: their segment comes from the labelled document's metadata in the store."""
    lines = []
    for doc, texts in sorted(built["new"].items()):
        only_new, only_old = sorted(texts - built["old"][doc]), sorted(built["old"][doc] - texts)
        both = sorted(texts & built["old"][doc])
        if doc.startswith("en"):
            lines.append({"query": only_new[0], "doc_id": doc, "lang": "en"})
        elif int(doc[3:]) in (range(8) if hurt_zh else range(20, 28)):
            q = {"query": (only_old if hurt_zh else both)[0], "doc_id": doc}
            lines.append(q if int(doc[3:]) % 2 else {**q, "lang": "zh"})
    path.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hurt(built: dict) -> dict:
    """The cutover on queries that the change helps in English and hurts in Chinese: its JSON, and a copy of its
    HTML report (a later cutover of the same plan writes over the file)."""
    queries = _queries(built, built["root"] / "hurt.jsonl", hurt_zh=True)
    r = CliRunner().invoke(main, ["cutover", str(built["path"]), "-c", str(built["cfg"]), "--queries", str(queries),
                                  "--json"])
    assert r.exit_code == 3, r.output
    out = json.loads(r.output)
    page = built["root"] / "hurt.cutover.html"
    page.write_text(Path(out["report_path"]).with_suffix(".html").read_text(encoding="utf-8"), encoding="utf-8")
    md = Path(out["report_path"]).with_suffix(".md").read_text(encoding="utf-8")
    return {"json": out, "queries": queries, "html": page, "md": md}


def test_a_cutover_fails_on_the_hurt_language_while_the_overall_numbers_pass_then_passes(built: dict, hurt: dict) -> None:
    out = hurt["json"]
    rules = {x["rule"]: x for x in out["rules"]}
    assert rules["recall@10"]["passed"], rules["recall@10"]  # overall: 40 English gains against 8 Chinese losses
    assert not rules["nDCG@10 per lang"]["passed"]
    assert "worse or below -0.020 in lang=zh" in rules["nDCG@10 per lang"]["detail"]
    zh, en = out["segments"]["lang"]["zh"], out["segments"]["lang"]["en"]
    assert zh["queries"] == 8 and en["queries"] == 40  # the 4 without `lang` found zh in their documents' metadata
    assert zh["recall_at_10"]["diff"] < -0.5 and zh["verdict"] == "worse"
    assert en["recall_at_10"]["low"] > 0 and en["verdict"] == "better"
    assert set(zh["recall_at_10"]) >= {"diff", "low", "high", "n", "level", "verdict"}
    # Overall the change looks better: only the segment shows the loss.
    assert out["verdict"] == "better" and out["verdict"] == out["evaluation"]["aggregate"]["verdict"]
    assert rules["evidence"]["passed"] and [r["rule"] for r in out["rules"] if not r["passed"]] == ["nDCG@10 per lang"]
    assert out["swap"] is None
    text = CliRunner().invoke(main, ["cutover", str(built["path"]), "-c", str(built["cfg"]), "--queries",
                                     str(hurt["queries"])])
    assert text.exit_code == 3
    assert "  verdict: better: significantly higher " in text.output
    assert "FAIL nDCG@10 per lang: worse or below -0.020 in lang=zh" in text.output
    assert "  lang=zh (8 queries): ndcg@10 1.000 → " in text.output

    fine = _queries(built, built["root"] / "fine.jsonl", hurt_zh=False)
    r = CliRunner().invoke(main, ["cutover", str(built["path"]), "-c", str(built["cfg"]), "--queries", str(fine),
                                  "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert {x["rule"]: x["passed"] for x in out["rules"]}["nDCG@10 per lang"]
    assert out["segments"]["lang"]["zh"]["recall_at_10"]["diff"] == 0.0 and out["swap"]["to"]


def test_the_markdown_report_has_the_verdict_the_segment_table_and_the_query_rows(hurt: dict) -> None:
    md = hurt["md"]
    assert "**Verdict: better: significantly higher recall@10, nDCG@10, MRR (95 %)**" in md
    assert "| nDCG@10 per lang | **FAIL** | worse or below -0.020 in lang=zh" in md
    assert "## Per lang" in md and ("| lang | queries | ndcg@10 old → new, new − old [corrected] | recall@10 old → "
                                    "new, new − old [corrected] |") in md
    zh_row = next(line for line in md.splitlines() if line.startswith("| zh | 8 | 1.000 → "))
    assert zh_row.endswith("| 0 / 8 / 0 | worse |")
    assert "## Queries" in md and "| query | text | lang | overlap@10 | top-10 changed | rank old → new |" in md
    assert len(re.findall(r"^\| q\d+ \| ", md, re.M)) == 48  # one row per query


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_the_html_report_renders_tables_and_a_rank_change_chart_per_segment_in_chromium(hurt: dict, tmp_path) -> None:
    with Browser(tmp_path / "chromium") as b:
        b.call("Runtime.enable")
        b.call("Log.enable")
        b.open(hurt["html"].as_uri())
        b.wait_until("document.readyState === 'complete'", "the report loaded")
        assert b.js("document.querySelectorAll('pre').length") == 0
        tables = b.js("[...document.querySelectorAll('section[data-table]')].map(s => [s.dataset.table, "
                      "s.querySelectorAll('table tbody tr').length, s.querySelector('table').getBoundingClientRect().height])")
        shown = {name: (rows, height) for name, rows, height in tables}
        assert set(shown) == {"Gate", "Metrics (k = 10)", "Per lang", "Queries", "Index health", "Models", "Power"}
        assert shown["Per lang"][0] == 2 and shown["Queries"][0] == 48
        assert all(rows and height > 20 * rows for rows, height in shown.values()), shown  # laid out as table rows
        failing = b.js("[...document.querySelectorAll('section[data-table=\"Gate\"] tr.bad td:first-child')]"
                       ".map(td => td.textContent)")
        assert failing == ["nDCG@10 per lang"]  # segments are judged on the primary metric
        assert b.js("document.querySelector('.verdict').dataset.verdict") == "better"
        charts = b.js("[...document.querySelectorAll('figure[data-chart]')].map(f => [f.dataset.chart, "
                      "+f.dataset.points, f.querySelectorAll('rect.mark').length, "
                      "f.querySelector('svg') ? f.querySelector('svg').getBoundingClientRect().height : 0])")
        by = {name: (points, marks, height) for name, points, marks, height in charts}
        assert set(by) == {"rank-change", "rank-change lang=en", "rank-change lang=zh"}
        assert by["rank-change"][0] == 48 and by["rank-change lang=zh"][0] == 8 and by["rank-change lang=en"][0] == 40
        assert all(marks > 0 and height > 100 for _, marks, height in by.values()), by
        zh_bars = b.js("[...document.querySelectorAll('figure[data-chart=\"rank-change lang=zh\"] rect.mark')]"
                       ".map(r => r.getAttribute('fill'))")
        assert set(zh_bars) == {"#dc2626"}  # every Chinese query ranked its document lower: red bars only
        assert b.js("performance.getEntriesByType('resource').length") == 0  # self-contained: nothing fetched
        assert b.console_errors() == []


def test_evidence_is_looked_for_as_each_side_normalises_text() -> None:
    from functools import partial

    from reindex.domain.config import NormaliserConfig
    from reindex.decisions.evaluation import Candidate, SideResult, score_query
    from reindex.adapters.sources.extract import normalise

    quoted = "这意味着 `CLAUDE.md` 如果过于臃肿，重要规则更容易被忽略。"  # as the queries file quotes it
    nfkc = partial(normalise, cfg=NormaliserConfig(unicode="NFKC"))
    nfc = partial(normalise, cfg=NormaliserConfig())
    old = SideResult(["d"], [Candidate("d", 0, 40, 30, "前文。" + nfc(quoted))], 0.001)
    new = SideResult(["d"], [Candidate("d", 0, 40, 30, "前文。" + nfkc(quoted))], 0.001)
    q = Query("q", "臃肿的坏处", frozenset({"d"}), (quoted,))
    assert nfkc(quoted) != quoted  # the full-width comma became ","
    row = score_query(q, old, new, 10, nfc, nfkc)
    assert (row["passage_rank_old"], row["passage_rank_new"]) == (1, 1)
    assert (row["evidence_recall_old"], row["evidence_recall_new"]) == (1.0, 1.0)
    verbatim = score_query(q, old, new, 10)
    assert (verbatim["passage_rank_old"], verbatim["passage_rank_new"]) == (1, None)
