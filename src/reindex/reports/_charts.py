"""Inline SVG charts of a plan (document lengths, chunks per length, token sources, population over
time) and the chart geometry and figure frame shared with the cutover report."""

from __future__ import annotations

import html
import math
import re
from typing import TYPE_CHECKING, Sequence

from reindex.domain.kinds import ChangeKind
from reindex.reports._format import duration, human_number, num, pct

if TYPE_CHECKING:
    from reindex.planner import Plan

__all__ = ["CHART_H", "CHART_W", "COLORS", "PAD_B", "PAD_L", "PAD_R", "PAD_T", "bar_chart", "chart_chunks_per_bucket",
           "chart_doc_length", "chart_population", "chart_token_sources", "figure_html", "svg_doc"]

CHART_W, CHART_H = 560, 280
PAD_L, PAD_R, PAD_T, PAD_B = 56, 16, 18, 46
COLORS = {"old": "#94a3b8", "new": "#4f46e5", "added": "#10b981", "edited": "#f59e0b", "unchanged": "#6366f1",
        "projected": "#c4b5fd", "reused": "#cbd5e1", "embed": "#4f46e5", "peak": "#e11d48"}
_e = html.escape


def nice_step(v: float) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^k, never below 1) giving about four steps up to ``v``."""
    raw = max(v / 4, 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag and (m != 2.5 or mag >= 10):
            return m * mag
    return 10 * mag  # pragma: no cover


def nice_max(v: float) -> float:
    step = nice_step(v)
    return step * max(1, math.ceil(v / step))


def y_axis(top: float, y_of, label: str) -> list[str]:
    out, step, v = [], nice_step(top), 0.0
    while v <= top + 1e-9:
        y = y_of(v)
        out.append(f'<line class="grid" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{PAD_L - 6}" y="{y + 3.5:.1f}" text-anchor="end">{_e(human_number(v))}</text>')
        v += step
    mid = PAD_T + (CHART_H - PAD_T - PAD_B) / 2
    out.append(f'<text class="axis-label" x="14" y="{mid:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {mid:.0f})">{_e(label)}</text>')
    return out


def svg_doc(inner: Sequence[str], label: str, height: int = CHART_H) -> str:
    return f'<svg viewBox="0 0 {CHART_W} {height}" role="img" aria-label="{_e(label)}">' + "".join(inner) + "</svg>"


def tok_label(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else human_number(n).replace(" ", "")


def bucket_label(b: str) -> str:
    """``"1024-2047"`` → ``"1k–2k"``; ``"0-127"`` → ``"<128"``; ``"16384+"`` → ``"≥16k"``."""
    m = re.fullmatch(r"(\d+)-(\d+)", b)
    if m:
        lo, hi = int(m[1]), int(m[2]) + 1
        return f"<{tok_label(hi)}" if lo == 0 else f"{tok_label(lo)}–{tok_label(hi)}"
    m = re.fullmatch(r"(\d+)\+", b)
    return f"≥{tok_label(int(m[1]))}" if m else b


def figure_html(name: str, caption: str, points: int, body: str, legend: Sequence[tuple[str, str]] = ()) -> str:
    if points == 0:
        body = f'<div class="nodata">no data{": " + _e(body) if body else ""}</div>'
    leg = "".join(f'<span><i style="background:{c}"></i>{_e(t)}</span>' for t, c in legend) if points else ""
    return (f'<figure class="chart" data-chart="{name}" data-points="{points}"><figcaption>{_e(caption)}</figcaption>'
            f'{body}{f"<div class=legend>{leg}</div>" if leg else ""}</figure>')


def bar_chart(buckets: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]], unit: str) -> tuple[str, int]:
    """Vertical (grouped) bars, one group per bucket; zero values draw nothing."""
    top = nice_max(max((v for _, vals, _ in series for v in vals), default=0))
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    y_of = lambda v: PAD_T + plot_h * (1 - v / top)  # noqa: E731
    slot = plot_w / max(1, len(buckets))
    bw = slot * 0.74 / len(series)
    out, marks = y_axis(top, y_of, unit), 0
    for i, b in enumerate(buckets):
        x0 = PAD_L + i * slot + slot * 0.13
        for j, (name, vals, color) in enumerate(series):
            v = vals[i] if i < len(vals) else 0
            if v > 0:
                y = y_of(v)
                out.append(f'<rect class="mark" x="{x0 + j * bw:.1f}" y="{y:.1f}" width="{bw - 1:.1f}" '
                           f'height="{PAD_T + plot_h - y:.1f}" rx="2" fill="{color}">'
                           f'<title>{_e(f"{name} {bucket_label(b)} tokens: {num(v)} {unit}")}</title></rect>')
                marks += 1
        if len(buckets) <= 9 or i % 2 == 0:  # more buckets than fit a label each: every other one
            out.append(f'<text class="tick" x="{PAD_L + (i + 0.5) * slot:.1f}" y="{CHART_H - PAD_B + 15}" '
                       f'text-anchor="middle">{_e(bucket_label(b))}</text>')
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{CHART_W - PAD_R}" y1="{PAD_T + plot_h}" y2="{PAD_T + plot_h}"/>')
    out.append(f'<text class="axis-label" x="{PAD_L + plot_w / 2:.0f}" y="{CHART_H - 8}" text-anchor="middle">'
               f'length in tokens</text>')
    return svg_doc(out, unit), marks


def chart_doc_length(plan: Plan) -> str:
    ch = plan.body["charts"]
    svg, pts = bar_chart(ch["length_buckets"], [("documents", ch["doc_length_histogram"], COLORS["new"])], "documents")
    sampled = " (the documents chunked for this sampled plan)" if plan.body.get("projection") else ""
    return figure_html("doc-length", "Document length distribution in tokens" + sampled, pts,
                   svg if pts else "no documents were chunked")


def chart_chunks_per_bucket(plan: Plan) -> str:
    ch = plan.body["charts"]
    # The two populations' own range (plans since issue 26), else the fixed power-of-two buckets.
    own = ch.get("chunk_length_histogram")
    cpb, buckets = (own, own["buckets"]) if own else (ch["chunks_per_bucket"], ch["length_buckets"])
    series = [("old", cpb.get("old", []), COLORS["old"]), ("new", cpb.get("new", []), COLORS["new"])]
    svg, pts = bar_chart(buckets, series, "chunks")
    w = plan.body["work"]
    legend = [(f"{k} population · {num(w[f'chunks_{k}'])} chunks", COLORS[k]) for k in ("old", "new") if w[f"chunks_{k}"]]
    return figure_html("chunks-per-bucket", "Chunks per chunk length, old vs new", pts, svg if pts else "no chunks", legend)


def chart_token_sources(plan: Plan) -> str:
    w = plan.body["work"]
    by = dict(plan.body["charts"].get("tokens_to_embed_by_status", {}))
    exact = sum(by.values())
    tok_rows = [("added documents", by.get("added", 0), COLORS["added"]),
                ("edited documents", by.get("edited", 0), COLORS["edited"]),
                ("unchanged documents, recut", by.get("unchanged", 0), COLORS["unchanged"])]
    if w["tokens_to_embed"] > exact:  # sampled plans only break down the exactly counted documents
        tok_rows.append(("projected from the sample", w["tokens_to_embed"] - exact, COLORS["projected"]))
    chunk_rows = [("chunks reused", w["chunks_reused"], COLORS["reused"]),
                  ("chunks to embed", w["chunks_to_embed"], COLORS["embed"])]
    out, marks, legend = [], 0, []
    x0, x1 = 150, CHART_W - 24
    for row, (label, items, unit) in enumerate((("tokens to embed", tok_rows, "tokens"),
                                                ("new chunks", chunk_rows, "chunks"))):
        y = 30 + row * 100
        total = sum(v for _, v, _ in items)
        out.append(f'<text class="row-label" x="{x0 - 10}" y="{y + 22}" text-anchor="end">{_e(label)}</text>')
        out.append(f'<text class="tick" x="{x0 - 10}" y="{y + 38}" text-anchor="end">{_e(human_number(total))} {unit}</text>')
        out.append(f'<rect class="track" x="{x0}" y="{y}" width="{x1 - x0}" height="44" rx="6"/>')
        x = float(x0)
        for name, v, color in items:
            if v <= 0 or total <= 0:
                continue
            width = (x1 - x0) * v / total
            out.append(f'<rect class="mark" x="{x:.1f}" y="{y}" width="{max(width, 1.5):.1f}" height="44" '
                       f'fill="{color}"><title>{_e(f"{name}: {num(v)} {unit} ({pct(v, total)})")}</title></rect>')
            if width > 60:
                out.append(f'<text class="in-bar{" dark" if color in (COLORS["reused"], COLORS["projected"]) else ""}" x="{x + width / 2:.1f}" y="{y + 27}" text-anchor="middle">'
                           f'{_e(pct(v, total))}</text>')
            legend.append((f"{name} · {num(v)} {unit} ({pct(v, total)})", color))
            x += width
            marks += 1
    return figure_html("token-sources", "Where the tokens to embed come from, and how many chunks are reused", marks,
                   svg_doc(out, "token sources", 210) if marks else "nothing to embed, nothing reused", legend)


def chart_population(plan: Plan) -> str:
    c = plan.body["cost"]
    old, new, hrs = c["vectors_old"], c["vectors_new"], max(c["hours"], 0.0)
    peak = max(c["peak_vectors"], old, new)
    if plan.kind == ChangeKind.NONE or peak == 0:
        note = f"nothing to build; the population stays at {num(old)} vectors" if plan.kind == ChangeKind.NONE else "no vectors"
        return figure_html("population", "Vector population over time", 0, note)
    blue_green = plan.kind.pipeline_scoped
    top = nice_max(peak * 1.15)
    plot_w, plot_h = CHART_W - PAD_L - PAD_R, CHART_H - PAD_T - PAD_B
    y_of = lambda v: PAD_T + plot_h * (1 - v / top)  # noqa: E731
    x_start, x_cut = PAD_L + plot_w * 0.06, PAD_L + plot_w * 0.6
    x_ret, x_end = PAD_L + plot_w * 0.84, CHART_W - PAD_R
    x_drop = x_ret if blue_green else x_cut  # blue-green: old retired after the rollback window; in place: at once
    base = PAD_T + plot_h
    out = y_axis(top, y_of, "vectors")
    days = ((plan.body.get("config") or {}).get("cutover") or {}).get("retention_days")
    if blue_green:  # both populations stay through the rollback window; gc retires the old one after it
        out.append(f'<rect class="window" x="{x_cut:.1f}" y="{PAD_T}" width="{x_ret - x_cut:.1f}" height="{plot_h}"/>')
        out.append(f'<text class="tick" x="{(x_cut + x_ret) / 2:.1f}" y="{PAD_T + 12}" text-anchor="middle">'
                   + (f"rollback window: old kept {days:g} days" if days is not None else "rollback window")
                   + "</text>")
    yo, yp, yn = y_of(old), y_of(peak), y_of(new)
    if old > 0:
        out.append(f'<path class="area" fill="{COLORS["old"]}" d="M{PAD_L},{base} L{PAD_L},{yo:.1f} '
                   f'L{x_drop:.1f},{yo:.1f} L{x_drop:.1f},{base} Z"/>')
    if peak > old:  # the build: new points grow linearly over the planned hours, on top of the old population
        out.append(f'<path class="area" fill="{COLORS["new"]}" d="M{x_start:.1f},{yo:.1f} L{x_cut:.1f},{yp:.1f} '
                   f'L{x_drop:.1f},{yp:.1f} L{x_drop:.1f},{yo:.1f} Z"/>')
    if new > 0:
        out.append(f'<path class="area" fill="{COLORS["new"]}" d="M{x_drop:.1f},{base} L{x_drop:.1f},{yn:.1f} '
                   f'L{x_end},{yn:.1f} L{x_end},{base} Z"/>')
    out.append(f'<path class="line" d="M{PAD_L},{yo:.1f} L{x_start:.1f},{yo:.1f} L{x_cut:.1f},{yp:.1f} '
               f'L{x_drop:.1f},{yp:.1f} L{x_drop:.1f},{yn:.1f} L{x_end},{yn:.1f}"/>')
    points = [("start", x_start, old), ("peak at cutover", x_cut, peak)]
    if new != peak:
        points.append(("after " + ("the old population is retired" if blue_green else "stale points are deleted"),
                       x_end - 8, new))
    for name, x, v in points:
        cls, r = ("mark peak", 6) if name.startswith("peak") else ("mark", 4)
        out.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y_of(v):.1f}" r="{r}">'
                   f'<title>{_e(f"{name}: {num(v)} vectors")}</title></circle>')
    out.append(f'<text class="peak-label" x="{x_cut - 10:.1f}" y="{yp - 10:.1f}" text-anchor="end">'
               f'peak {_e(human_number(peak))} vectors</text>')
    ticks = [(x_start, "start")] + ([((x_start + x_cut) / 2, duration(hrs / 2))] if hrs > 0 else [])
    retired = f"old retired (gc) · +{days:g} d" if days is not None else "old retired"
    ticks += [(x_cut, f"cutover · {duration(hrs)}")] + ([(x_ret, retired)] if blue_green else [])
    for x, t in ticks:
        out.append(f'<text class="tick" x="{x:.1f}" y="{base + 15}" text-anchor="middle">{_e(t)}</text>')
    out.append(f'<line class="axis" x1="{PAD_L}" x2="{x_end}" y1="{base}" y2="{base}"/>')
    out.append(f'<text class="axis-label" x="{(x_start + x_cut) / 2:.0f}" y="{CHART_H - 8}" text-anchor="middle">'
               "build, linear over the planned hours</text>")
    legend = ([(f"old population · {num(old)}", COLORS["old"])] if old else []) + [
        (f"{'new population' if blue_green or not old else 'points after the change'} · {num(new)}", COLORS["new"]),
        (f"peak · {num(peak)}", COLORS["peak"])]
    return figure_html("population", "Vector population over time: build, cutover, retirement", len(points),
                   svg_doc(out, "vector population over time"), legend)
