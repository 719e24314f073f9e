"""The measure report as Markdown and as one self-contained HTML page (inline SVG chart), and
writing ``measure.json`` / ``measure.md`` / ``measure.html``."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from reindex.foundation.atomic import atomic_write_text
from reindex.measure._pairs import BAND_NAMES
from reindex.measure._report import MeasureReport
from reindex.measure._stats import BOOTSTRAP

__all__ = ["BAND_HEAD", "measure_html", "measure_markdown", "rc_chart_svg", "write_measure_reports"]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _band_rows(report: MeasureReport) -> list[list[str]]:
    rows = []
    first = report.chunkers[0].spec if report.chunkers else ""
    diffs = {(d["b"], d["lang"], d["band"]): d for d in report.paired if d["a"] == first}
    for c in report.chunkers:
        for b in c.bands:
            if not b.pairs:
                continue
            d = diffs.get((c.spec, b.lang, b.band))
            diff = f"{d['diff_points']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]" if d else "–"
            rows.append([c.spec, b.lang, b.band, str(b.pairs), _pct(b.rc_median), _pct(b.rc_mean), _pct(b.rc_pooled), diff])
    return rows


def _summary_rows(report: MeasureReport) -> list[list[str]]:
    rows = []
    for c in report.chunkers:
        le05 = {b.lang: b for b in c.bands if b.band == "<=5%"}
        rec = {r.lang: r for r in c.retrieval}
        meds = " / ".join(f"{k} {v:.0f}" for k, v in c.median_by_lang.items())
        row = [c.spec, f"{c.median_chunk_tokens:.0f} ({meds})", f"{c.no_edit_rc:g}", str(c.failures)]
        row += [_pct(le05[lang].rc_mean) if lang in le05 else "–" for lang in report.langs]
        if report.retrieval:
            row += [f"{_pct(rec[lang].evidence_recall)} / {rec[lang].ndcg_at_5:.3f}" if lang in rec else "–"
                    for lang in report.langs]
        rows.append(row)
    return rows


def _summary_head(report: MeasureReport) -> list[str]:
    head = ["chunker", "median tokens (by lang)", "no-edit R_c", "failures"]
    head += [f"R_c ≤5% mean ({lang}) %" for lang in report.langs]
    if report.retrieval:
        head += [f"recall % / nDCG@5 ({lang})" for lang in report.langs]
    return head


BAND_HEAD = ["chunker", "lang", "band", "pairs", "R_c median %", "R_c mean %", "R_c pooled %", "mean diff vs first, points [95 % CI]"]


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(esc, r)) + " |" for r in rows)]


def measure_markdown(report: MeasureReport) -> str:
    """The report as Markdown."""
    lines = [f"# Recompute fraction R_c — {report.source}", "",
             f"{report.pairs} revision pairs ({', '.join(report.langs)}), tokens of `{report.tokenizer}`. "
             "R_c = tokens of distinct new-version inputs that are not byte-identical to an old-version input of the "
             "same document / tokens of all distinct new-version inputs (0 for an empty new version). "
             f"Paired differences: mean per-pair difference in points, 95 % bootstrap intervals over documents "
             f"({BOOTSTRAP} resamples, seed {report.seed}).", ""]
    if report.calibration:
        cal = report.calibration
        lines += [f"Calibrated on {cal['pairs']} held-out pairs ({cal['documents']} documents, old texts) to a median of "
                  f"{cal['target']} tokens; those pairs are excluded below.", ""]
    for w in report.warnings:
        lines.append(f"> **warning:** {w}")
    if report.warnings:
        lines.append("")
    lines += ["## Summary", "", *_md_table(_summary_head(report), _summary_rows(report)), ""]
    lines += ["## R_c by language and edit band", "", *_md_table(BAND_HEAD, _band_rows(report)), ""]
    if report.retrieval:
        r = report.retrieval
        lines += ["## Retrieval", "", f"{r.get('description', '')}", ""]
        rows = [[c.spec, x.lang, str(x.queries), str(x.pool_docs), str(x.chunks), _pct(x.evidence_recall),
                 _pct(x.hit_at_5), f"{x.mrr:.3f}", f"{x.ndcg_at_5:.3f}", x.note] for c in report.chunkers for x in c.retrieval]
        lines += _md_table(["chunker", "lang", "queries", "pool docs", "chunks", "evidence recall %", "Hit@5 %", "MRR",
                            "nDCG@5", "note"], rows)
        lines.append("")
    return "\n".join(lines)


_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"]


def rc_chart_svg(report: MeasureReport, lang: str) -> str:
    """Grouped bars: mean R_c per edit band (x) for every chunker (colour), one language."""
    W, H, left, bottom, top = 720, 300, 48, 40, 16
    groups = list(BAND_NAMES)
    series = []
    for c in report.chunkers:
        vals = {b.band: b.rc_mean for b in c.bands if b.lang == lang}
        series.append((c.spec, [vals.get(g) or 0.0 for g in groups]))
    plot_w, plot_h = W - left - 10, H - bottom - top
    gw = plot_w / len(groups)
    bw = gw * 0.8 / max(1, len(series))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H + 18 * len(series)}" role="img" '
             f'aria-label="Mean R_c by edit band, {html.escape(lang)}" style="max-width:{W}px;font:12px sans-serif">']
    for k in range(0, 11, 2):
        y = top + plot_h * (1 - k / 10)
        parts.append(f'<line x1="{left}" x2="{W - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{k * 10}%</text>')
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        for si, (_, vals) in enumerate(series):
            v = max(0.0, min(1.0, vals[gi]))
            h = plot_h * v
            parts.append(f'<rect x="{x0 + si * bw:.1f}" y="{top + plot_h - h:.1f}" width="{bw * 0.92:.1f}" height="{h:.1f}" '
                         f'fill="{_COLORS[si % len(_COLORS)]}"><title>{html.escape(series[si][0])} {g}: {100 * v:.1f}%</title></rect>')
        parts.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{html.escape(g)}</text>')
    for si, (name, _) in enumerate(series):
        y = H + 4 + 18 * si
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{_COLORS[si % len(_COLORS)]}"/>'
                     f'<text x="{left + 18}" y="{y}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def measure_html(report: MeasureReport) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts)."""
    md = measure_markdown(report).split("\n\n", 2)
    intro = html.escape(md[1]) if len(md) > 1 else ""
    parts = ["<!doctype html><html lang=en><meta charset=utf-8>",
             f"<title>R_c — {html.escape(report.source)}</title>",
             "<style>body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             "th{background:#f4f4f4}.warn{background:#fff4d6;padding:.5em 1em;border-left:4px solid #e0a800}</style>",
             f"<h1>Recompute fraction R<sub>c</sub> — {html.escape(report.source)}</h1><p>{intro}</p>"]
    for w in report.warnings:
        parts.append(f'<p class="warn">warning: {html.escape(w)}</p>')
    parts += ["<h2>Summary</h2>", _html_table(_summary_head(report), _summary_rows(report))]
    for lang in report.langs:
        parts += [f"<h2>Mean R<sub>c</sub> by edit band ({html.escape(lang)})</h2>", rc_chart_svg(report, lang)]
    parts += ["<h2>R<sub>c</sub> by language and edit band</h2>", _html_table(BAND_HEAD, _band_rows(report))]
    if report.retrieval:
        rows = [[c.spec, x.lang, x.queries, x.pool_docs, x.chunks, _pct(x.evidence_recall), _pct(x.hit_at_5),
                 f"{x.mrr:.3f}", f"{x.ndcg_at_5:.3f}", x.note] for c in report.chunkers for x in c.retrieval]
        parts += ["<h2>Retrieval</h2>", f"<p>{html.escape(report.retrieval.get('description', ''))}</p>",
                  _html_table(["chunker", "lang", "queries", "pool docs", "chunks", "evidence recall %", "Hit@5 %", "MRR",
                               "nDCG@5", "note"], rows)]
    parts.append("</html>")
    return "\n".join(parts)


def write_measure_reports(report: MeasureReport, out_dir: str | Path) -> tuple[Path, Path, Path]:
    """Write ``measure.json``, ``measure.md`` and ``measure.html`` into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = (d / "measure.json", d / "measure.md", d / "measure.html")
    atomic_write_text(paths[0], json.dumps(report.as_dict(), indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(paths[1], measure_markdown(report))
    atomic_write_text(paths[2], measure_html(report))
    return paths
