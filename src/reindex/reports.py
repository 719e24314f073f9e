"""Plans → a Markdown review document and a self-contained HTML page with inline SVG charts.

Rendering is pure (stdlib only); :func:`write_reports` is the one function that touches the disk.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from reindex.atomic import atomic_write_text
from reindex.planner import Plan

LIST_CAP = 50  # ids shown per list before "… and N more"

_FIELD_LABELS = {
    "chunks_old": "chunks (old population)",
    "chunks_new": "chunks (new population)",
    "chunks_reused": "chunks reused",
    "chunks_to_embed": "chunks to embed",
    "tokens_new": "tokens (new population)",
    "tokens_to_embed": "tokens to embed",
    "payload_bytes": "payload bytes (new)",
}
_RATE_SOURCES = {
    "config": "from the config (cost.tokens_per_minute)",
    "calibration": "measured by `reindex calibrate`",
    "default": "a default assumption; run `reindex calibrate` to measure it",
}


# --------------------------------------------------------------------------------------------
# Numbers people read
# --------------------------------------------------------------------------------------------


def _n(value: float | int) -> str:
    """A count with thousands separators."""
    return f"{round(value):,}"


def human_number(value: float) -> str:
    """Compact axis/card numbers: 950, 1.2 k, 3.4 M, 5.6 B."""
    v = abs(value)
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            s = f"{value / div:.1f}".rstrip("0").rstrip(".")
            return f"{s} {unit}"
    return f"{value:g}" if value != int(value) else str(int(value))


def human_bytes(n: float) -> str:
    """Human bytes: 512 B, 1.5 KiB, 3.2 MiB, 1.1 GiB."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} B" if unit == "B" else f"{v:,.1f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _usd(x: float) -> str:
    if x == 0:
        return "$0.00"
    return f"${x:.4f}" if abs(x) < 0.01 else f"${x:,.2f}"


def _hours(h: float) -> str:
    """Wall clock for a manager: seconds, minutes, hours, and days when it runs that long."""
    if h <= 0:
        return "0 s"
    if h < 1 / 60:
        return f"{max(1, round(h * 3600))} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    out = f"{h:,.1f} h"
    return out + f" ({h / 24:.1f} days)" if h >= 48 else out


def _ratio(old: float, new: float) -> str:
    if not old:
        return "new" if new else "—"
    return f"×{new / old:.2f}"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "—"


def _capped(items: Sequence[str], cap: int = LIST_CAP) -> tuple[list[str], int]:
    return list(items[:cap]), max(0, len(items) - cap)


# --------------------------------------------------------------------------------------------
# What both documents say
# --------------------------------------------------------------------------------------------


def _changes(plan: Plan) -> list[str]:
    """The "What changes" lines."""
    b = plan.body
    d = b["work"]["documents"]
    lines = list(b.get("explanation") or [])
    moved = f"{_n(d['added'])} documents added, {_n(d['edited'])} edited, {_n(d['removed'])} removed"
    if plan.kind == "initial":
        lines.insert(0, f"Initial build: {_n(d['total'])} documents, no live population yet")
    elif plan.kind == "none":
        lines.insert(0, "Nothing changes: the config and every document match the baseline")
    elif plan.kind == "document-scoped" or b.get("documents_changed"):
        lines.append(moved)
    return lines


def _key_rows(plan: Plan) -> list[tuple[str, str]]:
    w, c = plan.body["work"], plan.body["cost"]
    d = w["documents"]
    return [
        ("Documents", " · ".join(f"{k} {_n(d[k])}" for k in ("added", "edited", "removed", "unchanged", "bad"))),
        ("Chunks", f"{_n(w['chunks_old'])} → {_n(w['chunks_new'])} ({_ratio(w['chunks_old'], w['chunks_new'])})"),
        ("Chunks reused", f"{_n(w['chunks_reused'])} ({_pct(w['chunks_reused'], w['chunks_new'])} of new)"),
        ("Chunks to embed", _n(w["chunks_to_embed"])),
        ("Tokens to embed", f"{_n(w['tokens_to_embed'])} of {_n(w['tokens_new'])}"),
        ("API spend", f"{_usd(c['usd'])} at ${c['usd_per_mtok']:g} per million tokens"),
        ("Wall clock", f"{_hours(c['hours'])} at {_n(c['tokens_per_minute'])} tokens/min "
                       f"(rate source: {_RATE_SOURCES.get(c['rate_source'], c['rate_source'])})"),
        ("Vectors", f"{_n(c['vectors_old'])} → {_n(c['vectors_new'])} ({_ratio(c['vectors_old'], c['vectors_new'])})"),
        ("Peak vectors", f"{_n(c['peak_vectors'])} ({_peak_note(plan)})"),
    ]


def _peak_note(plan: Plan) -> str:
    if plan.kind.startswith("pipeline-scoped"):
        return "at cutover, old and new populations both live"
    if plan.kind == "initial":
        return "the new population"
    if plan.kind == "none":
        return "nothing to build"
    return "in place: new points are written before stale ones are deleted"


def _footprint_rows(plan: Plan) -> list[tuple[str, str, str, str]]:
    c = plan.body["cost"]
    fp = c["footprint"]
    return [
        ("Vectors", _n(c["vectors_old"]), _n(c["vectors_new"]), _n(c["peak_vectors"])),
        ("RAM", *(human_bytes(fp[k]["ram_bytes"]) for k in ("old", "new", "peak"))),
        ("Disk", *(human_bytes(fp[k]["disk_bytes"]) for k in ("old", "new", "peak"))),
    ]


def _projection_rows(proj: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    fmt = lambda f, v: human_bytes(v) if f == "payload_bytes" else _n(v)  # noqa: E731
    return [
        (_FIELD_LABELS.get(f, f), fmt(f, iv["estimate"]), fmt(f, iv["low"]), fmt(f, iv["high"]))
        for f, iv in sorted(proj["intervals"].items(), key=lambda kv: list(_FIELD_LABELS).index(kv[0])
                            if kv[0] in _FIELD_LABELS else len(_FIELD_LABELS))
    ]


def _tail_line(plan: Plan) -> str:
    s = plan.body["sensitivity"]
    return (f"{_n(s['tail_documents'])} documents longer than {_n(s['tail_tokens'])} tokens produce "
            f"{_n(s['tail_chunks'])} chunks: {100 * s['tail_chunk_share']:.1f} % of the new population")


def _what_if_rows(plan: Plan) -> list[tuple[str, ...]]:
    return [
        (r["chunker"] + (" (current)" if r.get("current") else ""), _n(r["chunks"]), _n(r["tokens_full_reembed"]),
         _usd(r["usd"]), _hours(r["hours"]), r["method"])
        for r in plan.body["sensitivity"].get("what_if", [])
    ]


def _title(plan: Plan) -> str:
    return f"Reindex plan: {plan.index} · {plan.kind} · {plan.plan_hash[:12]}"


def _baseline_line(plan: Plan) -> str:
    base = plan.body["inputs"]["baseline"]
    kind = base.get("kind")
    if kind == "live":
        return f"live population `{base.get('collection')}`"
    if kind == "explicit":
        return f"explicit baseline over `{base.get('corpus')}`"
    return "nothing (initial build)"


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _md_code(s: str) -> str:
    s = str(s)
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
    return out + [""]


def _md_ids(title: str, ids: Sequence[str]) -> list[str]:
    shown, more = _capped(ids)
    out = [f"## {title} ({_n(len(ids))})", ""] + [f"- {_md_code(i)}" for i in shown]
    return out + ([f"- … and {_n(more)} more"] if more else []) + [""]


def plan_markdown(plan: Plan) -> str:
    """A concise review document of the plan."""
    b, w = plan.body, plan.body["work"]
    out = [f"# {_title(plan)}", "",
           f"Created {b['created_at']} · measured against {_baseline_line(plan)} · "
           f"corpus {_md_code(b['inputs']['corpus']['uri'])} · plan hash {_md_code(plan.plan_hash)}", "",
           "## What changes", ""]
    out += [f"- {line}" for line in _changes(plan)] + [""]
    out += ["## Key numbers", ""] + _md_table(("", "value"), _key_rows(plan))
    out += ["## Footprint", ""] + _md_table(("", "old", "new", "peak"), _footprint_rows(plan))
    proj = b.get("projection")
    if proj is not None:
        out += ["## Projection (sampled)", "",
                f"Sample of {_n(proj['sample'])} of {_n(proj['population'])} documents that needed chunking, "
                f"seed {proj['seed']}; {proj.get('method', '')}. Intervals are 95 %.", ""]
        out += _md_table(("field", "estimate", "low", "high"), _projection_rows(proj))
    out += ["## Sensitivity", "", f"- Tail: {_tail_line(plan)}.", ""]
    if b["sensitivity"].get("what_if"):
        out += ["What if the chunker were different (full re-embed of this corpus):", ""]
        out += _md_table(("chunker", "chunks", "tokens", "$", "hours", "method"), _what_if_rows(plan))
    ap = b["approval"]
    out += ["## Approval", "", "**Required.**" if ap["required"] else "Not required.", ""]
    out += [f"- {r}" for r in ap["reasons"]] + ([""] if ap["reasons"] else [])
    if plan.kind == "document-scoped":
        out += _md_ids("Affected documents", w.get("affected_documents", []))
    if w.get("removed_documents"):
        out += _md_ids("Removed documents", w["removed_documents"])
    if w.get("bad_documents"):
        shown, more = _capped(w["bad_documents"])
        out += [f"## Bad documents ({_n(len(w['bad_documents']))})", ""]
        out += [f"- {_md_code(x['doc_id'])}: {x['reason']}" for x in shown]
        out += ([f"- … and {_n(more)} more"] if more else []) + [""]
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------------------------
# SVG charts
# --------------------------------------------------------------------------------------------

_W, _H = 560, 280
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 56, 16, 18, 46
_COL = {"old": "#94a3b8", "new": "#4f46e5", "added": "#10b981", "edited": "#f59e0b", "unchanged": "#6366f1",
        "projected": "#c4b5fd", "reused": "#cbd5e1", "embed": "#4f46e5", "peak": "#e11d48"}
_e = html.escape


def _nice_step(v: float) -> float:
    """A round tick step (1, 2, 2.5 or 5 × 10^k, never below 1) giving about four steps up to ``v``."""
    raw = max(v / 4, 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag and (m != 2.5 or mag >= 10):
            return m * mag
    return 10 * mag  # pragma: no cover


def _nice_max(v: float) -> float:
    step = _nice_step(v)
    return step * max(1, math.ceil(v / step))


def _y_axis(top: float, y_of, label: str) -> list[str]:
    out, step, v = [], _nice_step(top), 0.0
    while v <= top + 1e-9:
        y = y_of(v)
        out.append(f'<line class="grid" x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{_PAD_L - 6}" y="{y + 3.5:.1f}" text-anchor="end">{_e(human_number(v))}</text>')
        v += step
    mid = _PAD_T + (_H - _PAD_T - _PAD_B) / 2
    out.append(f'<text class="axis-label" x="14" y="{mid:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {mid:.0f})">{_e(label)}</text>')
    return out


def _svg(inner: Sequence[str], label: str, height: int = _H) -> str:
    return f'<svg viewBox="0 0 {_W} {height}" role="img" aria-label="{_e(label)}">' + "".join(inner) + "</svg>"


def _tok(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else human_number(n).replace(" ", "")


def _bucket_label(b: str) -> str:
    """``"1024-2047"`` → ``"1k–2k"``; ``"0-127"`` → ``"<128"``; ``"16384+"`` → ``"≥16k"``."""
    m = re.fullmatch(r"(\d+)-(\d+)", b)
    if m:
        lo, hi = int(m[1]), int(m[2]) + 1
        return f"<{_tok(hi)}" if lo == 0 else f"{_tok(lo)}–{_tok(hi)}"
    m = re.fullmatch(r"(\d+)\+", b)
    return f"≥{_tok(int(m[1]))}" if m else b


def _figure(name: str, caption: str, points: int, body: str, legend: Sequence[tuple[str, str]] = ()) -> str:
    if points == 0:
        body = f'<div class="nodata">no data{": " + _e(body) if body else ""}</div>'
    leg = "".join(f'<span><i style="background:{c}"></i>{_e(t)}</span>' for t, c in legend) if points else ""
    return (f'<figure class="chart" data-chart="{name}" data-points="{points}"><figcaption>{_e(caption)}</figcaption>'
            f'{body}{f"<div class=legend>{leg}</div>" if leg else ""}</figure>')


def _bars(buckets: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]], unit: str) -> tuple[str, int]:
    """Vertical (grouped) bars, one group per bucket; zero values draw nothing."""
    top = _nice_max(max((v for _, vals, _ in series for v in vals), default=0))
    plot_w, plot_h = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B
    y_of = lambda v: _PAD_T + plot_h * (1 - v / top)  # noqa: E731
    slot = plot_w / max(1, len(buckets))
    bw = slot * 0.74 / len(series)
    out, marks = _y_axis(top, y_of, unit), 0
    for i, b in enumerate(buckets):
        x0 = _PAD_L + i * slot + slot * 0.13
        for j, (name, vals, color) in enumerate(series):
            v = vals[i] if i < len(vals) else 0
            if v > 0:
                y = y_of(v)
                out.append(f'<rect class="mark" x="{x0 + j * bw:.1f}" y="{y:.1f}" width="{bw - 1:.1f}" '
                           f'height="{_PAD_T + plot_h - y:.1f}" rx="2" fill="{color}">'
                           f'<title>{_e(f"{name} {_bucket_label(b)} tokens: {_n(v)} {unit}")}</title></rect>')
                marks += 1
        out.append(f'<text class="tick" x="{_PAD_L + (i + 0.5) * slot:.1f}" y="{_H - _PAD_B + 15}" '
                   f'text-anchor="middle">{_e(_bucket_label(b))}</text>')
    out.append(f'<line class="axis" x1="{_PAD_L}" x2="{_W - _PAD_R}" y1="{_PAD_T + plot_h}" y2="{_PAD_T + plot_h}"/>')
    out.append(f'<text class="axis-label" x="{_PAD_L + plot_w / 2:.0f}" y="{_H - 8}" text-anchor="middle">'
               f'length in tokens</text>')
    return _svg(out, unit), marks


def _chart_doc_length(plan: Plan) -> str:
    ch = plan.body["charts"]
    svg, pts = _bars(ch["length_buckets"], [("documents", ch["doc_length_histogram"], _COL["new"])], "documents")
    sampled = " (the documents chunked for this sampled plan)" if plan.body.get("projection") else ""
    return _figure("doc-length", "Document length distribution in tokens" + sampled, pts,
                   svg if pts else "no documents were chunked")


def _chart_chunks_per_bucket(plan: Plan) -> str:
    ch = plan.body["charts"]
    cpb = ch["chunks_per_bucket"]
    series = [("old", cpb.get("old", []), _COL["old"]), ("new", cpb.get("new", []), _COL["new"])]
    svg, pts = _bars(ch["length_buckets"], series, "chunks")
    w = plan.body["work"]
    legend = [(f"{k} population · {_n(w[f'chunks_{k}'])} chunks", _COL[k]) for k in ("old", "new") if w[f"chunks_{k}"]]
    return _figure("chunks-per-bucket", "Chunks per chunk length, old vs new", pts, svg if pts else "no chunks", legend)


def _chart_token_sources(plan: Plan) -> str:
    w = plan.body["work"]
    by = dict(plan.body["charts"].get("tokens_to_embed_by_status", {}))
    exact = sum(by.values())
    tok_rows = [("added documents", by.get("added", 0), _COL["added"]),
                ("edited documents", by.get("edited", 0), _COL["edited"]),
                ("unchanged documents, recut", by.get("unchanged", 0), _COL["unchanged"])]
    if w["tokens_to_embed"] > exact:  # sampled plans only break down the exactly counted documents
        tok_rows.append(("projected from the sample", w["tokens_to_embed"] - exact, _COL["projected"]))
    chunk_rows = [("chunks reused", w["chunks_reused"], _COL["reused"]),
                  ("chunks to embed", w["chunks_to_embed"], _COL["embed"])]
    out, marks, legend = [], 0, []
    x0, x1 = 150, _W - 24
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
                       f'fill="{color}"><title>{_e(f"{name}: {_n(v)} {unit} ({_pct(v, total)})")}</title></rect>')
            if width > 60:
                out.append(f'<text class="in-bar{" dark" if color in (_COL["reused"], _COL["projected"]) else ""}" x="{x + width / 2:.1f}" y="{y + 27}" text-anchor="middle">'
                           f'{_e(_pct(v, total))}</text>')
            legend.append((f"{name} · {_n(v)} {unit} ({_pct(v, total)})", color))
            x += width
            marks += 1
    return _figure("token-sources", "Where the tokens to embed come from, and how many chunks are reused", marks,
                   _svg(out, "token sources", 210) if marks else "nothing to embed, nothing reused", legend)


def _chart_population(plan: Plan) -> str:
    c = plan.body["cost"]
    old, new, hrs = c["vectors_old"], c["vectors_new"], max(c["hours"], 0.0)
    peak = max(c["peak_vectors"], old, new)
    if plan.kind == "none" or peak == 0:
        note = f"nothing to build; the population stays at {_n(old)} vectors" if plan.kind == "none" else "no vectors"
        return _figure("population", "Vector population over time", 0, note)
    blue_green = plan.kind.startswith("pipeline-scoped")
    top = _nice_max(peak * 1.15)
    plot_w, plot_h = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B
    y_of = lambda v: _PAD_T + plot_h * (1 - v / top)  # noqa: E731
    x_start, x_cut = _PAD_L + plot_w * 0.06, _PAD_L + plot_w * 0.6
    x_ret, x_end = _PAD_L + plot_w * 0.84, _W - _PAD_R
    x_drop = x_ret if blue_green else x_cut  # blue-green: old retired after the rollback window; in place: at once
    base = _PAD_T + plot_h
    out = _y_axis(top, y_of, "vectors")
    if blue_green:
        out.append(f'<rect class="window" x="{x_cut:.1f}" y="{_PAD_T}" width="{x_ret - x_cut:.1f}" height="{plot_h}"/>')
        out.append(f'<text class="tick" x="{(x_cut + x_ret) / 2:.1f}" y="{_PAD_T + 12}" text-anchor="middle">'
                   "rollback window</text>")
    yo, yp, yn = y_of(old), y_of(peak), y_of(new)
    if old > 0:
        out.append(f'<path class="area" fill="{_COL["old"]}" d="M{_PAD_L},{base} L{_PAD_L},{yo:.1f} '
                   f'L{x_drop:.1f},{yo:.1f} L{x_drop:.1f},{base} Z"/>')
    if peak > old:  # the build: new points grow linearly over the planned hours, on top of the old population
        out.append(f'<path class="area" fill="{_COL["new"]}" d="M{x_start:.1f},{yo:.1f} L{x_cut:.1f},{yp:.1f} '
                   f'L{x_drop:.1f},{yp:.1f} L{x_drop:.1f},{yo:.1f} Z"/>')
    if new > 0:
        out.append(f'<path class="area" fill="{_COL["new"]}" d="M{x_drop:.1f},{base} L{x_drop:.1f},{yn:.1f} '
                   f'L{x_end},{yn:.1f} L{x_end},{base} Z"/>')
    out.append(f'<path class="line" d="M{_PAD_L},{yo:.1f} L{x_start:.1f},{yo:.1f} L{x_cut:.1f},{yp:.1f} '
               f'L{x_drop:.1f},{yp:.1f} L{x_drop:.1f},{yn:.1f} L{x_end},{yn:.1f}"/>')
    points = [("start", x_start, old), ("peak at cutover", x_cut, peak)]
    if new != peak:
        points.append(("after " + ("the old population is retired" if blue_green else "stale points are deleted"),
                       x_end - 8, new))
    for name, x, v in points:
        cls, r = ("mark peak", 6) if name.startswith("peak") else ("mark", 4)
        out.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y_of(v):.1f}" r="{r}">'
                   f'<title>{_e(f"{name}: {_n(v)} vectors")}</title></circle>')
    out.append(f'<text class="peak-label" x="{x_cut - 10:.1f}" y="{yp - 10:.1f}" text-anchor="end">'
               f'peak {_e(human_number(peak))} vectors</text>')
    ticks = [(x_start, "start")] + ([((x_start + x_cut) / 2, _hours(hrs / 2))] if hrs > 0 else [])
    ticks += [(x_cut, f"cutover · {_hours(hrs)}")] + ([(x_ret, "old retired")] if blue_green else [])
    for x, t in ticks:
        out.append(f'<text class="tick" x="{x:.1f}" y="{base + 15}" text-anchor="middle">{_e(t)}</text>')
    out.append(f'<line class="axis" x1="{_PAD_L}" x2="{x_end}" y1="{base}" y2="{base}"/>')
    out.append(f'<text class="axis-label" x="{(x_start + x_cut) / 2:.0f}" y="{_H - 8}" text-anchor="middle">'
               "build, linear over the planned hours</text>")
    legend = ([(f"old population · {_n(old)}", _COL["old"])] if old else []) + [
        (f"{'new population' if blue_green or not old else 'points after the change'} · {_n(new)}", _COL["new"]),
        (f"peak · {_n(peak)}", _COL["peak"])]
    return _figure("population", "Vector population over time: build, cutover, retirement", len(points),
                   _svg(out, "vector population over time"), legend)


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}body{margin:0;background:#f1f5f9;color:#0f172a;
font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 28px 48px}
header h1{font-size:24px;margin:0 0 4px;letter-spacing:-.01em}header .meta{color:#475569;font-size:13px}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#e2e8f0;padding:1px 5px;border-radius:4px}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-size:12px;font-weight:600;vertical-align:middle;
color:#fff;margin-left:8px}.k-none{background:#64748b}.k-initial{background:#0284c7}.k-document-scoped{background:#059669}
.k-pipeline-scoped-text{background:#d97706}.k-pipeline-scoped-vector{background:#dc2626}
.cards{display:grid;grid-template-columns:repeat(5,1fr);gap:14px;margin:20px 0}
.card{background:#fff;border-radius:12px;padding:14px 16px;box-shadow:0 1px 2px #0f172a14,0 4px 12px #0f172a0d}
.card .label{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:#64748b;font-weight:600}
.card .value{font-size:26px;font-weight:700;margin:2px 0;letter-spacing:-.02em;white-space:nowrap}
.card .sub{font-size:12px;color:#475569}.card.accent{background:#312e81;color:#fff}
.card.accent .label,.card.accent .sub{color:#c7d2fe}
.banner{border-radius:10px;padding:10px 16px;margin:0 0 16px;font-weight:500}
.banner.warn{background:#fef3c7;border:1px solid #fcd34d;color:#78350f}.banner.ok{background:#dcfce7;border:1px solid #86efac;color:#14532d}
.banner ul{margin:4px 0 0;padding-left:20px;font-weight:400}
section{background:#fff;border-radius:12px;padding:16px 20px;margin:0 0 16px;box-shadow:0 1px 2px #0f172a14}
section h2{font-size:16px;margin:0 0 10px}section ul{margin:0;padding-left:20px}
.charts{display:grid;grid-template-columns:1fr 1fr;gap:16px;margin:0 0 16px}
figure.chart{margin:0;background:#fff;border-radius:12px;padding:14px 14px 10px;box-shadow:0 1px 2px #0f172a14}
figure.chart svg{width:100%;height:auto;display:block}figcaption{font-weight:600;font-size:14px;margin:0 0 6px;color:#1e293b}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#475569;margin-top:4px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.nodata{height:200px;display:flex;align-items:center;justify-content:center;color:#94a3b8;font-style:italic;
border:1px dashed #cbd5e1;border-radius:8px;text-align:center;padding:0 20px}
svg .grid{stroke:#e2e8f0}svg .axis{stroke:#94a3b8}svg .tick{font-size:10.5px;fill:#64748b}
svg .axis-label{font-size:11px;fill:#475569}svg .row-label{font-size:12.5px;font-weight:600;fill:#334155}
svg .in-bar{font-size:12px;font-weight:600;fill:#fff}svg .in-bar.dark{fill:#334155}svg .track{fill:#f1f5f9}
svg .area{opacity:.55}svg .line{fill:none;stroke:#1e1b4b;stroke-width:2}
svg circle.mark{fill:#fff;stroke:#1e1b4b;stroke-width:2}svg circle.peak{fill:#e11d48;stroke:#fff}
svg .window{fill:#fde68a;opacity:.35}svg .peak-label{font-size:13px;font-weight:700;fill:#e11d48}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e2e8f0}
th{color:#475569;font-weight:600;background:#f8fafc}td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.current td{background:#eef2ff;font-weight:600}.two{display:grid;grid-template-columns:1fr 1fr;gap:16px}
td:first-child{white-space:nowrap;color:#334155;font-weight:500}ul.ids{columns:4 180px;column-gap:24px}ul.ids li{break-inside:avoid}.muted{color:#64748b;font-size:12.5px}footer{color:#64748b;font-size:12px;margin-top:18px}
@media (max-width:900px){.cards{grid-template-columns:repeat(2,1fr)}.charts,.two{grid-template-columns:1fr}}
"""


def _card(label: str, value: str, sub: str, accent: bool = False) -> str:
    return (f'<div class="card{" accent" if accent else ""}"><div class="label">{_e(label)}</div>'
            f'<div class="value">{_e(value)}</div><div class="sub">{_e(sub)}</div></div>')


def _cards(plan: Plan) -> str:
    w, c = plan.body["work"], plan.body["cost"]
    fp = c["footprint"]["peak"]
    return '<div class="cards">' + "".join([
        _card("API spend", _usd(c["usd"]), f"${c['usd_per_mtok']:g} per million tokens"),
        _card("Wall clock", _hours(c["hours"]).split(" (")[0],
              f"{human_number(c['tokens_per_minute'])} tokens/min · {c['rate_source']}"),
        _card("Vectors", f"{human_number(c['vectors_old'])} → {human_number(c['vectors_new'])}",
              f"{_ratio(c['vectors_old'], c['vectors_new'])} · {_n(c['vectors_new'])} after", accent=True),
        _card("Peak vectors", human_number(c["peak_vectors"]),
              f"{human_bytes(fp['ram_bytes'])} RAM · {human_bytes(fp['disk_bytes'])} disk"),
        _card("Tokens to embed", human_number(w["tokens_to_embed"]),
              f"{_n(w['chunks_to_embed'])} chunks · {_pct(w['chunks_reused'], w['chunks_new'])} reused"),
    ]) + "</div>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], nums: Sequence[int] = (),
           row_class: Sequence[str] | None = None) -> str:
    def cell(tag: str, i: int, v: str) -> str:
        attr = ' class="num"' if i in nums else ""
        return f"<{tag}{attr}>{_e(str(v))}</{tag}>"

    th = "".join(cell("th", i, h) for i, h in enumerate(head))
    cls = [f' class="{c}"' if c else "" for c in (row_class or [""] * len(rows))]
    trs = "".join(f"<tr{cls[k]}>"
                  + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for k, r in enumerate(rows))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _section(title: str, inner: str) -> str:
    return f"<section><h2>{_e(title)}</h2>{inner}</section>"


def _ul(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def _html_ids(title: str, ids: Sequence[str]) -> str:
    shown, more = _capped(ids)
    items = "".join(f"<li><code>{_e(i)}</code></li>" for i in shown)
    more_li = f"<li>… and {_n(more)} more</li>" if more else ""
    return _section(f"{title} ({_n(len(ids))})", f'<ul class="ids">{items}{more_li}</ul>')


def plan_html(plan: Plan) -> str:
    """A self-contained HTML page of the plan: headline cards, four inline SVG charts, the tables."""
    b, w = plan.body, plan.body["work"]
    kind_cls = "k-" + plan.kind.replace("/", "-")
    ap = b["approval"]
    banner = (f'<div class="banner warn">Approval required before apply{_ul(ap["reasons"])}</div>' if ap["required"]
              else '<div class="banner ok">No approval required by policy.</div>')
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(_title(plan))}</title><style>{_CSS}</style></head><body><main>",
        f'<header><h1>Reindex plan: {_e(plan.index)}<span class="badge {kind_cls}">{_e(plan.kind)}</span></h1>'
        f'<div class="meta">plan <code>{_e(plan.plan_hash[:12])}</code> · created {_e(b["created_at"])} · measured '
        f'against {_e(_baseline_line(plan).replace("`", ""))} · corpus <code>{_e(b["inputs"]["corpus"]["uri"])}</code></div>'
        "</header>",
        _cards(plan), banner,
        _section("What changes", _ul(_changes(plan))),
        '<div class="charts">', _chart_population(plan), _chart_token_sources(plan),
        _chart_chunks_per_bucket(plan), _chart_doc_length(plan), "</div>",
        '<div class="two">',
        _section("Key numbers", _table(("", "value"), _key_rows(plan))),
        _section("Footprint", _table(("", "old", "new", "peak"), _footprint_rows(plan), (1, 2, 3))
                 + f'<p class="muted">{_e(b["cost"].get("formula", ""))}</p>'),
        "</div>",
    ]
    proj = b.get("projection")
    if proj is not None:
        parts.append(_section("Projection (sampled)",
                              f'<p class="muted">Sample of {_n(proj["sample"])} of {_n(proj["population"])} documents '
                              f'that needed chunking, seed {_e(str(proj["seed"]))}; {_e(proj.get("method", ""))}. '
                              "Intervals are 95 %.</p>"
                              + _table(("field", "estimate", "low", "high"), _projection_rows(proj), (1, 2, 3))))
    wi = b["sensitivity"].get("what_if", [])
    parts.append(_section("Sensitivity", f"<p>Tail: {_e(_tail_line(plan))}.</p>" + (
        '<p class="muted">What if the chunker were different (full re-embed of this corpus):</p>'
        + _table(("chunker", "chunks", "tokens", "$", "hours", "method"), _what_if_rows(plan), (1, 2, 3, 4),
                 row_class=["current" if r.get("current") else "" for r in wi]) if wi else "")))
    if plan.kind == "document-scoped":
        parts.append(_html_ids("Affected documents", w.get("affected_documents", [])))
    if w.get("removed_documents"):
        parts.append(_html_ids("Removed documents", w["removed_documents"]))
    if w.get("bad_documents"):
        shown, more = _capped(w["bad_documents"])
        items = "".join(f"<li><code>{_e(x['doc_id'])}</code>: {_e(x['reason'])}</li>" for x in shown)
        more_li = f"<li>… and {_n(more)} more</li>" if more else ""
        parts.append(_section(f"Bad documents ({_n(len(w['bad_documents']))})", f"<ul>{items}{more_li}</ul>"))
    parts.append(f'<footer>plan hash <code>{_e(plan.plan_hash)}</code> · schema {_e(b.get("schema", ""))} · config '
                 f'<code>{_e(str(b["inputs"]["config"].get("path")))}</code></footer></main></body></html>')
    return "\n".join(parts) + "\n"


def write_reports(plan: Plan, plan_path: str | Path) -> tuple[Path, Path]:
    """Write ``<plan stem>.md`` and ``<plan stem>.html`` beside the plan file; returns their paths."""
    p = Path(plan_path)
    out = []
    for suffix, text in ((".md", plan_markdown(plan)), (".html", plan_html(plan))):
        target = p.with_suffix(suffix)
        out.append(atomic_write_text(target, text))
    return out[0], out[1]
