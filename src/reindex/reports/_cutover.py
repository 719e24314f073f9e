"""Cutover reports: JSON → Markdown and self-contained HTML with a chart of per-query differences. Pure."""

from __future__ import annotations

from html import escape as _e
from pathlib import Path
from typing import Any

from reindex.atomic import atomic_write_text
from reindex.reports._charts import (
    CHART_H,
    CHART_W,
    PAD_B,
    PAD_L,
    PAD_R,
    PAD_T,
    figure_html,
    svg_doc,
)
from reindex.reports._style import CSS

__all__ = ["cutover_html", "cutover_markdown", "write_cutover_reports"]


def _fmt(v: Any) -> str:
    if isinstance(v, dict) and "mean" in v:
        return f"{v['mean']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def cutover_markdown(report: dict) -> str:
    k = report["k"]
    verdict = "PASS" if report["passed"] else "FAIL"
    lines = [f"# Cutover {verdict}: {report['index']} → {report['shadow']}", ""]
    lines.append(f"Live population: `{report['live'] or 'none'}` · queries: {report['queries_source']} "
                 f"({report['evaluation']['aggregate'].get('queries', 0) if report['evaluation'] else 0})")
    if report.get("query_vectors"):
        lines.append(f"Query vectors: {report['query_vectors']}")
    lines += ["", "| rule | result | detail |", "|---|---|---|"]
    for r in report["rules"]:
        lines.append(f"| {r['rule']} | {'pass' if r['passed'] else '**FAIL**'} | {r['detail']} |")
    if report["evaluation"]:
        agg = report["evaluation"]["aggregate"]
        lines += ["", f"## Metrics (k = {k})", "", "| metric | old | new | new − old [95 % CI] |", "|---|---|---|---|"]
        for m in (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", "evidence_recall"):
            if f"{m}_old" in agg:
                lines.append(f"| {m} | {agg[f'{m}_old']:.3f} | {agg[f'{m}_new']:.3f} | {_fmt(agg[f'{m}_diff'])} |")
        lines.append(f"| overlap@{k} (old vs new) | | | {agg.get(f'overlap_at_{k}', 0):.3f} |")
        lines.append(f"| rank-biased overlap | | | {agg.get('rbo', 0):.3f} |")
        lines.append(f"| latency p50 / p95 (ms) | {agg.get('latency_old_p50_ms', 0):.1f} / {agg.get('latency_old_p95_ms', 0):.1f} "
                     f"| {agg.get('latency_new_p50_ms', 0):.1f} / {agg.get('latency_new_p95_ms', 0):.1f} | |")
    if report.get("first_build"):
        agg = report["first_build"]["aggregate"]
        lines += ["", f"## The new population's own figures (k = {k}; a first build, nothing to compare with)", "",
                  "| metric | value | labelled queries |", "|---|---|---|"]
        for m in (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", "evidence_recall"):
            if m in agg:
                lines.append(f"| {m} | {agg[m]:.3f} | {agg[f'{m}_queries']} |")
        lines.append(f"| latency p50 / p95 (ms) | {agg.get('latency_p50_ms', 0):.1f} / "
                     f"{agg.get('latency_p95_ms', 0):.1f} | |")
    if report.get("swap"):
        s = report["swap"]
        lines += ["", f"Alias `{report['index']}` moved from `{s['from'] or 'nothing'}` to `{s['to']}`"
                  + (" (forced; approved by " + report["forced_by"] + ")" if report.get("forced_by") else "") + "."]
    elif not report["passed"]:
        lines += ["", "The alias was not moved."]
    return "\n".join(lines) + "\n"


def _diff_chart(report: dict) -> str:
    ev = report["evaluation"]
    if not ev or not ev["rows"]:
        return figure_html("per-query", "Per-query difference, new − old", 0, "no queries")
    k = report["k"]
    rows = ev["rows"]
    metric = next((m for m in (f"recall_at_{k}", "evidence_recall", f"ndcg_at_{k}") if f"{m}_old" in rows[0]), None)
    if metric:
        values = [r[f"{metric}_new"] - r[f"{metric}_old"] for r in rows]
        label, lo, hi = f"{metric} new − old per query", -1.0, 1.0
    else:
        values = [r[f"overlap_at_{k}"] for r in rows]
        label, lo, hi = f"overlap@{k} old vs new per query", 0.0, 1.0
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    y_of = lambda v: PAD_T + plot_h * (hi - v) / (hi - lo)  # noqa: E731
    slot = plot_w / len(values)
    out = [f'<line class="axis" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{y_of(0):.1f}" y2="{y_of(0):.1f}"/>']
    for t in (lo, (lo + hi) / 2, hi):
        out.append(f'<text class="tick" x="{PAD_L - 6}" y="{y_of(t) + 4:.1f}" text-anchor="end">{t:+.1f}</text>')
    for i, v in enumerate(values):
        y0, y1 = sorted((y_of(0), y_of(v)))
        color = "#16a34a" if v > 0 else ("#dc2626" if v < 0 else "#94a3b8")
        out.append(f'<rect class="mark" x="{PAD_L + i * slot:.1f}" y="{y0:.1f}" width="{max(slot - 1, 1):.1f}" '
                   f'height="{max(y1 - y0, 1):.1f}" fill="{color}"><title>{_e(rows[i]["query_id"])}: {v:+.3f}</title></rect>')
    return figure_html("per-query", label, len(values), svg_doc(out, label))


def cutover_html(report: dict) -> str:
    verdict = "PASS" if report["passed"] else "FAIL"
    rules = "".join(f"<tr><td>{_e(r['rule'])}</td><td class={'ok' if r['passed'] else 'bad'}>"
                    f"{'pass' if r['passed'] else 'FAIL'}</td><td>{_e(r['detail'])}</td></tr>" for r in report["rules"])
    md = cutover_markdown(report)
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>Cutover {verdict}: {_e(report['index'])}</title>"
            f"<style>{CSS} td.ok{{color:#15803d}} td.bad{{color:#b91c1c;font-weight:700}}</style></head><body><main>"
            f"<h1>Cutover {verdict}: {_e(report['index'])} → {_e(report['shadow'])}</h1>"
            f"<section class=card><h2>Gate</h2><table><tr><th>rule</th><th>result</th><th>detail</th></tr>{rules}</table></section>"
            f"<section class=card>{_diff_chart(report)}</section>"
            f"<section class=card><h2>Report</h2><pre>{_e(md)}</pre></section></main></body></html>")


def write_cutover_reports(report: dict, plan_path: str | Path) -> Path:
    import json

    p = Path(plan_path)
    stem = p.name.removesuffix(".json")
    base = p.with_name(stem + ".cutover")
    for suffix, text in ((".json", json.dumps(report, indent=2, ensure_ascii=False) + "\n"),
                         (".md", cutover_markdown(report)), (".html", cutover_html(report))):
        atomic_write_text(base.with_name(base.name + suffix), text)
    return base.with_name(base.name + ".json")
