"""Cutover reports: JSON → Markdown and a self-contained HTML page (real tables, inline SVG, no network). Pure.

Both documents say the same things from the same table values (:func:`cutover_tables`): the overall verdict,
the gate rules, every metric with its interval and verdict, one table per segment field (Holm-corrected
intervals), and the per-query rows (which queries changed their top-k, the labelled document's and the
passage's rank old vs new). The HTML page adds one chart per segment value: the distribution of the labelled
document's rank change, new vs old."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape as _e
from pathlib import Path
from typing import Sequence

from reindex.foundation.atomic import atomic_write_text
from reindex.decisions.evaluation import MAX_CANDIDATES, gate_metrics
from reindex.decisions.gate import verdict_words
from reindex.reports._charts import (
    CHART_H,
    CHART_W,
    PAD_B,
    PAD_L,
    PAD_R,
    PAD_T,
    figure_html,
    nice_max,
    svg_doc,
    y_axis,
)
from reindex.reports._style import CSS

__all__ = ["cutover_html", "cutover_markdown", "cutover_tables", "rank_change_bins", "write_cutover_reports"]

# Colours of the rank-change chart and the verdict banner.
BETTER, WORSE, SAME = "#16a34a", "#dc2626", "#94a3b8"
VERDICT_CLASS = {"better": "ok", "worse": "bad", "no measurable difference": "flat", "cannot tell": "unsure"}
# Rank-change bins: |log2(rank new / rank old)| rounded up, capped (a rank 2× worse is +1, 16× or more +5).
RANK_BIN_CAP = 5


@dataclass(frozen=True, slots=True)
class Table:
    """One table of a cutover report: a heading, column names, rows of cell texts; ``classes`` tag rows (ok, bad)."""

    title: str
    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    classes: tuple[str, ...] = ()
    note: str = ""


def _iv(d: dict) -> str:
    return f"[{d['low']:+.3f}, {d['high']:+.3f}]"


def _rank(r: int | None) -> str:
    return str(r) if r is not None else f">{MAX_CANDIDATES}"


def _metric_name(m: str) -> str:
    return m.replace("_at_", "@").replace("_", " ")


def _rules_table(report: dict) -> Table:
    rows = tuple((r["rule"], "pass" if r["passed"] else "FAIL", r["detail"]) for r in report["rules"])
    return Table("Gate", ("rule", "result", "detail"), rows, tuple("ok" if r["passed"] else "bad" for r in report["rules"]))


def _metrics_table(agg: dict, k: int) -> Table:
    rows, classes = [], []
    for m in gate_metrics(k):
        if f"{m}_diff" not in agg:
            continue
        d, v = agg[f"{m}_diff"], agg.get("metrics", {}).get(m, "")
        rows.append((_metric_name(m), f"{agg[f'{m}_old']:.3f}", f"{agg[f'{m}_new']:.3f}", f"{d['mean']:+.3f}", _iv(d), v))
        classes.append(VERDICT_CLASS.get(v, ""))
    for what, label in (("rank", "labelled document's median rank"), ("passage_rank", "passage's median rank")):
        if f"{what}_old_median" in agg:
            rows.append((label, f"{agg[f'{what}_old_median']:g}", f"{agg[f'{what}_new_median']:g}", "", "",
                         f"{agg[f'{what}_changed']} of {agg['queries']} queries changed"))
            classes.append("")
    rows.append((f"overlap@{k} (old vs new)", "", "", f"{agg.get(f'overlap_at_{k}', 0):.3f}", "", ""))
    rows.append(("rank-biased overlap", "", "", f"{agg.get('rbo', 0):.3f}", "", ""))
    rows.append(("latency p50 / p95 (ms)", f"{agg.get('latency_old_p50_ms', 0):.1f} / {agg.get('latency_old_p95_ms', 0):.1f}",
                 f"{agg.get('latency_new_p50_ms', 0):.1f} / {agg.get('latency_new_p95_ms', 0):.1f}", "", "", ""))
    classes += ["", "", ""]
    return Table(f"Metrics (k = {k})", ("metric", "old", "new", "new − old", "95 % interval", "verdict"),
                 tuple(rows), tuple(classes))


def _segment_table(name: str, values: dict, k: int, bound: float | None, primary: str | None = None) -> Table:
    """One segment field's table: the primary metric (what the gate judges each segment on) first, then recall@k,
    MRR and passage MRR, with the Holm level of the primary metric."""
    recall = primary or f"recall_at_{k}"
    shown = [m for m in dict.fromkeys((recall, f"recall_at_{k}", "mrr", "passage_mrr"))
             if any(m in seg for seg in values.values())]
    head = (name, "queries") + tuple(f"{_metric_name(m)} old → new, new − old [corrected]" for m in shown) + (
        f"Holm level ({_metric_name(recall)})", "rank better / worse / same", "verdict")
    rows, classes = [], []
    for value, seg in values.items():
        cells = [value, str(seg["queries"])]
        for m in shown:
            d = seg.get(m)
            cells.append(f"{d['old']:.3f} → {d['new']:.3f}, {d['diff']:+.3f} {_iv(d)}" if d else "—")
        lvl = seg.get(recall, {}).get("level")
        cells.append(f"{lvl:.4f}" if lvl is not None else "—")
        ranks = seg.get("ranks") or {}
        cells.append(f"{ranks.get('better', 0)} / {ranks.get('worse', 0)} / {ranks.get('same', 0)}")
        cells.append(seg["verdict"])
        rows.append(tuple(cells))
        short = bound is not None and recall in seg and seg[recall]["low"] < bound
        classes.append("bad" if short else VERDICT_CLASS.get(seg["verdict"], ""))
    note = ("Intervals are corrected for the number of segments by Holm's step-down method (each segment's one-sided "
            "level in the Holm column; the uncorrected lower end is at 0.025)"
            + (f"; the gate judges every segment on {_metric_name(recall)} as the whole: worse fails, a corrected "
               f"lower bound ≥ {bound:+.3f} passes, wider is cannot tell." if bound is not None else "."))
    return Table(f"Per {name}", head, tuple(rows), tuple(classes), note)


def _queries_table(rows: Sequence[dict], k: int, fields: Sequence[str]) -> Table:
    recall = f"recall_at_{k}"
    head = ("query", "text") + tuple(fields) + (f"overlap@{k}", f"top-{k} changed", "rank old → new",
                                                "passage rank old → new", f"recall@{k} old → new")
    out, classes = [], []
    for r in rows:
        text = r["query"] if len(r["query"]) <= 90 else r["query"][:89] + "…"
        seg = r.get("segments", {})
        ov = r[f"overlap_at_{k}"]
        cells = [r["query_id"], text, *(seg.get(f, "") for f in fields), f"{ov:.2f}", "yes" if ov < 1 else "no",
                 f"{_rank(r['rank_old'])} → {_rank(r['rank_new'])}" if "rank_old" in r else "—",
                 f"{_rank(r['passage_rank_old'])} → {_rank(r['passage_rank_new'])}" if "passage_rank_old" in r else "—",
                 f"{r[f'{recall}_old']:.2f} → {r[f'{recall}_new']:.2f}" if f"{recall}_old" in r else "—"]
        out.append(tuple(cells))
        change = _log_rank_change(r)
        classes.append("" if change is None or change == 0 else ("ok" if change < 0 else "bad"))
    changed = sum(1 for r in rows if r[f"overlap_at_{k}"] < 1)
    return Table("Queries", head, tuple(out), tuple(classes),
                 f"{changed} of {len(rows)} queries changed their top-{k} documents (overlap@{k} < 1).")


def _health_table(report: dict) -> Table | None:
    """Index health: each side's index state, its ANN recall@10 against exact search and its query latency."""
    h = report.get("index_health")
    if not h:
        return None
    sides = [(label, h[side]) for side, label in (("old", "old (live)"), ("new", "new (shadow)")) if h.get(side)]

    def cell(d: dict, key: str, fmt: str) -> str:
        return format(d[key], fmt) if d.get(key) is not None else "—"

    rows = [(label, d["collection"], f"{d['indexed_vectors']:,} of {d['points']:,}", d["searched"],
             cell(d, "recall_at_10_vs_exact", ".3f"), str(d.get("sampled", 0)),
             f"{cell(d, 'latency_ms_p50', '.2f')} / {cell(d, 'latency_ms_p95', '.2f')}")
            for label, d in sides]
    share = h.get("share_of_cutover")
    cost = (f"The check took {h['seconds']:.2f} s" + (f", {share:.0%} of the cutover's {report['seconds']:.2f} s"
                                                        if share is not None and report.get("seconds") else "")
            + "; recall is measured with up to 200 stored vectors as queries (ANN top-10 vs exact top-10); latency on "
              "the gate's queries, each the fastest of five interleaved searches.")
    notes = "; ".join(f"{label}: {d['detail']}" for label, d in sides)
    return Table("Index health", ("side", "collection", "indexed vectors", "searched", "recall@10 vs exact",
                                  "sampled", "latency p50 / p95 (ms)"), tuple(rows), (), f"{cost} {notes}.")


def _power_table(report: dict) -> Table | None:
    """What the gate's queries can tell: each gated metric's half-width and the queries the rule would need."""
    p = report.get("power")
    if not p:
        return None
    rows, classes = [], []
    for m, x in p.items():
        f = x.get("forecast") or {}
        rows.append((_metric_name(m), f"±{x['half_width']:.3f}", f"{x['queries']:,}",
                     f"{x['needed_queries']:,}" if x.get("needed_queries") is not None else "—", x.get("outcome", ""),
                     f"±{f['half_width']:.3f} on {f['queries']:,}" if f else "—"))
        classes.append({"pass": "ok", "fail": "bad", "cannot tell": "unsure"}.get(x.get("outcome", ""), ""))
    return Table("Power", ("metric", "half-width", "queries", "queries needed", "outcome", "forecast"), tuple(rows),
                 tuple(classes), "The 95 % interval's half-width on the gate's queries, and how many such queries would "
                 "narrow it enough to decide the rule (— : none needed, or none would).")


def _first_build_table(alone: dict, k: int) -> Table:
    agg = alone["aggregate"]
    rows = [(m, f"{agg[m]:.3f}", str(agg[f"{m}_queries"]))
            for m in (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", "evidence_recall") if m in agg]
    rows.append(("latency p50 / p95 (ms)", f"{agg.get('latency_p50_ms', 0):.1f} / {agg.get('latency_p95_ms', 0):.1f}", ""))
    return Table(f"The new population's own figures (k = {k}; a first build, nothing to compare with)",
                 ("metric", "value", "labelled queries"), tuple(rows))


def cutover_tables(report: dict) -> list[Table]:
    """The tables both documents show, in order: gate, metrics (or a first build's own figures), models, one per
    segment field, queries."""
    tables = [_rules_table(report)]
    for extra in (_health_table(report), _power_table(report)):
        if extra is not None:
            tables.append(extra)
    if report.get("first_build"):
        tables.append(_first_build_table(report["first_build"], report["k"]))
    ev = report.get("evaluation")
    if not ev:
        return tables
    k = report["k"]
    tables.append(_metrics_table(ev["aggregate"], k))
    a = ev.get("agreement")
    sides = ev.get("sides")
    named = (("model", sides["old"]["label"], sides["new"]["label"], "what embeds each side's queries"),) if sides else ()
    if a:  # a vector-half change: both models on the shadow's chunks
        tables.append(Table("Models", ("measure", "old", "new", "note"), named + (
            ("tokens per CPU-second", f"{a['old_tokens_per_cpu_second']:,.0f}", f"{a['new_tokens_per_cpu_second']:,.0f}",
             f"×{a['speed_ratio']:.2f} on {a['chunks']} chunks"),
            ("mean cosine of their vectors", "", f"{a['mean_cosine']:.4f}" if "mean_cosine" in a else "—",
             "one space" if "mean_cosine" in a else "different spaces: the top-k overlap above says how they agree"))))
    elif named:
        tables.append(Table("Models", ("measure", "old", "new", "note"), named))
    primary = report.get("metric")
    bound = _bound(report, primary)
    segments = report.get("segments") or ev.get("segments") or {}
    for name, values in segments.items():
        if values:
            tables.append(_segment_table(name, values, k, bound, primary))
    if ev["rows"]:
        tables.append(_queries_table(ev["rows"], k, list(segments)))
    return tables


def _bound(report: dict, metric: str | None = None) -> float | None:
    """The lower bound the gate held every segment's ``metric`` (default recall@k) to (the evaluation records it with
    the segments: one bound, or one per metric)."""
    ev = report.get("evaluation") or {}
    bound = ev.get("segment_bound")
    if isinstance(bound, dict):
        return bound.get(metric or f"recall_at_{report['k']}")
    return bound


# --------------------------------------------------------------------------------------------
# Rank changes
# --------------------------------------------------------------------------------------------


def _log_rank_change(row: dict) -> float | None:
    """log2(rank new / rank old) of the labelled document (a miss counted past the deepest candidate): negative
    when the new side ranks it higher. None for a query without a label."""
    if "rank_old" not in row:
        return None
    miss = MAX_CANDIDATES + 1
    return math.log2((row["rank_new"] or miss) / (row["rank_old"] or miss))


def rank_change_bins(rows: Sequence[dict]) -> list[int]:
    """Counts of the labelled document's rank change per bin, ``-RANK_BIN_CAP … +RANK_BIN_CAP``: 0 = same rank,
    ±n = |log2(new / old)| in (n−1, n] (−1: up to twice as high, +2: 2–4× lower), ±cap: beyond."""
    bins = [0] * (2 * RANK_BIN_CAP + 1)
    for r in rows:
        x = _log_rank_change(r)
        if x is None:
            continue
        b = 0 if x == 0 else int(math.copysign(min(RANK_BIN_CAP, max(1, math.ceil(abs(x) - 1e-9))), x))
        bins[b + RANK_BIN_CAP] += 1
    return bins


def _bin_label(b: int) -> str:
    if b == 0:
        return "same"
    arrow = "↑" if b < 0 else "↓"
    return f"{arrow}>{2 ** (RANK_BIN_CAP - 1)}×" if abs(b) == RANK_BIN_CAP else f"{arrow}{2 ** abs(b)}×"


def _rank_chart(name: str, caption: str, rows: Sequence[dict]) -> str:
    counts = rank_change_bins(rows)
    n = sum(counts)
    if n == 0:
        return figure_html(name, caption, 0, "no labelled queries: no rank to compare")
    top = nice_max(max(counts))
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    y_of = lambda v: PAD_T + plot_h * (1 - v / top)  # noqa: E731
    slot = plot_w / len(counts)
    out = y_axis(top, y_of, "queries")
    for i, c in enumerate(counts):
        b = i - RANK_BIN_CAP
        x = PAD_L + i * slot
        if c:
            color = SAME if b == 0 else (BETTER if b < 0 else WORSE)
            y = y_of(c)
            what = "same rank" if b == 0 else ("ranked higher " if b < 0 else "ranked lower ") + _bin_label(b)[1:]
            out.append(f'<rect class="mark" x="{x + slot * 0.12:.1f}" y="{y:.1f}" width="{slot * 0.76:.1f}" '
                       f'height="{PAD_T + plot_h - y:.1f}" rx="2" fill="{color}"><title>{_e(f"{c} queries: {what}")}'
                       f'</title></rect>')
        out.append(f'<text class="tick" x="{x + slot / 2:.1f}" y="{CHART_H - PAD_B + 15}" text-anchor="middle">'
                   f'{_e(_bin_label(b))}</text>')
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{PAD_T + plot_h}" y2="{PAD_T + plot_h}"/>')
    out.append(f'<text class="axis-label" x="{PAD_L + plot_w / 2:.0f}" y="{CHART_H - 8}" text-anchor="middle">'
               "labelled document's rank, new vs old: ↑ higher (better) · ↓ lower (worse)</text>")
    better, same = sum(counts[:RANK_BIN_CAP]), counts[RANK_BIN_CAP]
    legend = [(f"better · {better}", BETTER), (f"same · {same}", SAME), (f"worse · {n - better - same}", WORSE)]
    return figure_html(name, caption, n, svg_doc(out, caption), legend)


def _charts(report: dict) -> str:
    ev = report.get("evaluation")
    if not ev:
        return ""
    rows = ev["rows"]
    figures = [_rank_chart("rank-change", f"All queries: rank change of the labelled document ({len(rows)} queries)", rows)]
    for name, values in (report.get("segments") or ev.get("segments") or {}).items():
        for value in values:
            mine = [r for r in rows if r.get("segments", {}).get(name) == value]
            figures.append(_rank_chart(f"rank-change {name}={value}",
                                       f"{name} = {value}: rank change of the labelled document ({len(mine)} queries)", mine))
    return f'<div class="charts">{"".join(figures)}</div>'


# --------------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> list[str]:
    lines = ["", f"## {t.title}", ""]
    if t.note:
        lines += [t.note, ""]
    lines.append("| " + " | ".join(t.head) + " |")
    lines.append("|" + "---|" * len(t.head))
    for i, row in enumerate(t.rows):
        cells = [_md_cell(c) for c in row]
        if t.classes and t.classes[i] == "bad" and t.title == "Gate":
            cells[1] = f"**{cells[1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _title(report: dict) -> str:
    return f"Cutover {'PASS' if report['passed'] else 'FAIL'}: {report['index']} → {report['shadow']}"


def _verdict_line(report: dict) -> str | None:
    """The verdict in words that match the numbers (:func:`reindex.decisions.evaluation.verdict_words`)."""
    ev = report.get("evaluation")
    if not ev:
        return None
    if report.get("identical"):
        return f"identical ({report['identical']})"
    return report.get("verdict_words") or verdict_words(ev["aggregate"])


def _context_lines(report: dict) -> list[str]:
    n = report["evaluation"]["aggregate"].get("queries", 0) if report.get("evaluation") else 0
    lines = [f"Live population: {report['live'] or 'none'} · queries: {report['queries_source']} ({n})"]
    if report.get("query_vectors"):
        lines.append(f"Query vectors: {report['query_vectors']}")
    if report.get("forecast"):
        lines.append(f"Forecast: {report['forecast']['line']}")
    return lines


def _alias_line(report: dict) -> str | None:
    if report.get("swap"):
        s = report["swap"]
        return (f"Alias {report['index']} moved from {s['from'] or 'nothing'} to {s['to']}"
                + (f" (forced; approved by {report['forced_by']})" if report.get("forced_by") else "") + ".")
    return None if report["passed"] else "The alias was not moved."


def cutover_markdown(report: dict) -> str:
    lines = [f"# {_title(report)}", ""]
    verdict = _verdict_line(report)
    if verdict:
        lines += [f"**Verdict: {verdict}**", ""]
    lines += [line + "  " for line in _context_lines(report)]
    for t in cutover_tables(report):
        lines += _md_table(t)
    alias = _alias_line(report)
    if alias:
        lines += ["", alias]
    return "\n".join(lines) + "\n"


def _html_table(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.head)
    body = "".join(
        f'<tr{f" class={t.classes[i]}" if t.classes and t.classes[i] else ""}>'
        + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for i, row in enumerate(t.rows))
    note = f'<p class="muted">{_e(t.note)}</p>' if t.note else ""
    return (f'<section class="card" data-table="{_e(t.title)}"><h2>{_e(t.title)}</h2>{note}'
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")


_PAGE_CSS = ("tr.ok td{background:#f0fdf4}tr.bad td{background:#fef2f2}tr.unsure td{background:#fffbeb}"
             "section[data-table=Gate] tr.bad td:nth-child(2){color:#b91c1c;font-weight:700}"
             ".verdict{border-radius:12px;padding:14px 20px;margin:0 0 16px;font-size:20px;font-weight:700}"
             ".verdict small{display:block;font-size:13px;font-weight:400;margin-top:2px}"
             ".verdict.ok{background:#dcfce7;color:#14532d}.verdict.bad{background:#fee2e2;color:#7f1d1d}"
             ".verdict.flat{background:#e2e8f0;color:#1e293b}.verdict.unsure{background:#fef3c7;color:#78350f}"
             "header .meta{margin:0 0 12px}")


def cutover_html(report: dict) -> str:
    title = _title(report)
    ev = report.get("evaluation")
    agg = ev["aggregate"] if ev else {}
    verdict = _verdict_line(report)
    banner = ""
    if verdict:
        v = "no measurable difference" if report.get("identical") else agg.get("verdict", "cannot tell")
        failed = [r["rule"] for r in report["rules"] if not r["passed"]]
        gate_said = f"gate failed: {', '.join(failed)}" if failed else "gate passed"
        per = ", ".join(f"{_metric_name(m)} {x}" for m, x in agg.get("metrics", {}).items())
        banner = (f'<div class="verdict {VERDICT_CLASS.get(v, "unsure")}" data-verdict="{_e(v)}">Verdict: '
                  f"{_e(verdict)}<small>{_e(per)} · {_e(gate_said)}</small></div>")
    meta = "".join(f"<div class=meta>{_e(line)}</div>" for line in _context_lines(report))
    alias = _alias_line(report)
    tables = "".join(_html_table(t) for t in cutover_tables(report))
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<style>{CSS}{_PAGE_CSS}</style></head><body><main>"
            f"<header><h1>{_e(title)}</h1>{meta}</header>{banner}"
            + (f'<p class="muted">{_e(alias)}</p>' if alias else "")
            + f"{_charts(report)}{tables}</main></body></html>")


def write_cutover_reports(report: dict, plan_path: str | Path) -> Path:
    import json

    p = Path(plan_path)
    stem = p.name.removesuffix(".json")
    base = p.with_name(stem + ".cutover")
    for suffix, text in ((".json", json.dumps(report, indent=2, ensure_ascii=False) + "\n"),
                         (".md", cutover_markdown(report)), (".html", cutover_html(report))):
        atomic_write_text(base.with_name(base.name + suffix), text)
    return base.with_name(base.name + ".json")
