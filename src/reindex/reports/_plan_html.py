"""A plan as one self-contained HTML page: headline cards, four inline SVG charts, the tables."""

from __future__ import annotations

import functools
import html
from typing import Any, Sequence

from reindex.planner import Plan, key_numbers
from reindex.reports._charts import (
    chart_chunks_per_bucket,
    chart_doc_length,
    chart_population,
    chart_token_sources,
)
from reindex.reports._format import (
    capped,
    duration,
    human_bytes,
    human_number,
    num,
    pct,
    ratio,
    usd,
)
from reindex.reports._plan_facts import (
    baseline_line,
    change_lines,
    footprint_rows,
    forecast_facts,
    forecast_rows,
    key_rows,
    over_limit_line,
    plan_title,
    projection_rows,
    tail_line,
    what_if_rows,
)
from reindex.reports._style import CSS

__all__ = ["plan_html"]

_e = html.escape


@functools.lru_cache(maxsize=1)
def _markdown() -> Any:
    from markdown_it import MarkdownIt  # markdown-it-py (rich's own Markdown parser); imported when a page is made

    return MarkdownIt("commonmark", {"html": False})  # raw HTML in a line is escaped, never passed through


def _md(text: str) -> str:
    """One line of the plan's prose (``code``, **bold**) as inline HTML; any HTML in it is escaped."""
    return _markdown().renderInline(text)


def _card(label: str, value: str, sub: str, accent: bool = False) -> str:
    return (f'<div class="card{" accent" if accent else ""}"><div class="label">{_e(label)}</div>'
            f'<div class="value">{_e(value)}</div><div class="sub">{_e(sub)}</div></div>')


def _cards(plan: Plan) -> str:
    w, c = plan.body["work"], plan.body["cost"]
    fp = c["footprint"]["peak"]
    return '<div class="cards">' + "".join([
        _card("API spend", usd(c["usd"]), f"${c['usd_per_mtok']:g} per million tokens"),
        _card("Wall clock", duration(c["hours"]).split(" (")[0],
              f"{human_number(c['tokens_per_minute'])} tokens/min · {c['rate_source']}"
              + (f" ({c['rate_measured']['at'][:10]})" if (c.get("rate_measured") or {}).get("at") else "")
              + key_numbers(plan).hours_assume),
        _card("Vectors", f"{human_number(c['vectors_old'])} → {human_number(c['vectors_new'])}",
              f"{ratio(c['vectors_old'], c['vectors_new'])} · {num(c['vectors_new'])} after", accent=True),
        _card("Peak vectors", human_number(c["peak_vectors"]),
              f"{human_bytes(fp['ram_bytes'])} RAM · {human_bytes(fp['disk_bytes'])} disk"),
        _card("Tokens to embed", human_number(w["tokens_to_embed"]),
              f"{num(w['chunks_to_embed'])} chunks · {pct(w['chunks_reused'], w['chunks_new'])} reused"),
    ]) + "</div>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], nums: Sequence[int] = (),
           row_class: Sequence[str] | None = None, markdown: bool = False) -> str:
    def cell(tag: str, i: int, v: str) -> str:
        attr = ' class="num"' if i in nums else ""
        return f"<{tag}{attr}>{_md(str(v)) if markdown else _e(str(v))}</{tag}>"

    th = "".join(cell("th", i, h) for i, h in enumerate(head))
    cls = [f' class="{c}"' if c else "" for c in (row_class or [""] * len(rows))]
    trs = "".join(f"<tr{cls[k]}>"
                  + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for k, r in enumerate(rows))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _section(title: str, inner: str) -> str:
    return f"<section><h2>{_e(title)}</h2>{inner}</section>"


def _ul(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{_md(i)}</li>" for i in items) + "</ul>"


def _html_ids(title: str, ids: Sequence[str]) -> str:
    shown, more = capped(ids)
    items = "".join(f"<li><code>{_e(i)}</code></li>" for i in shown)
    more_li = f"<li>… and {num(more)} more</li>" if more else ""
    return _section(f"{title} ({num(len(ids))})", f'<ul class="ids">{items}{more_li}</ul>')


def plan_html(plan: Plan) -> str:
    """A self-contained HTML page of the plan: headline cards, four inline SVG charts, the tables."""
    b, w = plan.body, plan.body["work"]
    kind_cls = "k-" + plan.kind.replace("/", "-")
    ap = b["approval"]
    banner = (f'<div class="banner warn">Approval required before apply{_ul(ap["reasons"])}</div>' if ap["required"]
              else '<div class="banner ok">No approval required by policy.</div>')
    if (over := over_limit_line(plan)) is not None:
        banner += f'<div class="banner warn">Warning: {_md(over)}</div>'
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(plan_title(plan))}</title><style>{CSS}</style></head><body><main>",
        f'<header><h1>Reindex plan: {_e(plan.index)}<span class="badge {kind_cls}">{_e(plan.kind)}</span></h1>'
        f'<div class="meta">plan <code>{_e(plan.plan_hash[:12])}</code> · created {_e(b["created_at"])} · measured '
        f'against {_md(baseline_line(plan))} · corpus <code>{_e(b["inputs"]["corpus"]["uri"])}</code></div>'
        "</header>",
        _cards(plan), banner,
        _section("What changes", _ul(change_lines(plan))),
        *([_section("What it buys (forecast)", _ul(forecast_facts(plan)) + _table(
            ("metric", "old", "new", "new − old [95 % CI]", "verdict"), forecast_rows(plan), (1, 2, 3)))]
          if plan.body.get("forecast") else []),
        '<div class="charts">', chart_population(plan), chart_token_sources(plan),
        chart_chunks_per_bucket(plan), chart_doc_length(plan), "</div>",
        '<div class="two">',
        _section("Key numbers", _table(("", "value"), key_rows(plan), markdown=True)),
        _section("Footprint", _table(("", "old", "new", "peak"), footprint_rows(plan), (1, 2, 3))
                 + f'<p class="muted">{_e(b["cost"].get("formula", ""))}</p>'),
        "</div>",
    ]
    proj = b.get("projection")
    if proj is not None:
        parts.append(_section("Projection (sampled)",
                              f'<p class="muted">Sample of {num(proj["sample"])} of {num(proj["population"])} documents '
                              f'that needed chunking, seed {_e(str(proj["seed"]))}; {_e(proj.get("method", ""))}. '
                              "Intervals are 95 %.</p>"
                              + _table(("field", "estimate", "low", "high"), projection_rows(proj), (1, 2, 3))))
    wi = b["sensitivity"].get("what_if", [])
    parts.append(_section("Sensitivity", f"<p>Tail: {_md(tail_line(plan))}.</p>" + (
        '<p class="muted">What if the chunker were different (full re-embed of this corpus):</p>'
        + _table(("chunker", "chunks", "tokens", "$", "hours", "method"), what_if_rows(plan), (1, 2, 3, 4),
                 row_class=["current" if r.get("current") else "" for r in wi], markdown=True) if wi else "")))
    if plan.kind.in_place:
        parts.append(_html_ids("Affected documents", w.get("affected_documents", [])))
    if w.get("removed_documents"):
        parts.append(_html_ids("Removed documents", w["removed_documents"]))
    if w.get("bad_documents"):
        shown, more = capped(w["bad_documents"])
        items = "".join(f"<li><code>{_e(x['doc_id'])}</code>: {_e(x['reason'])}</li>" for x in shown)
        more_li = f"<li>… and {num(more)} more</li>" if more else ""
        parts.append(_section(f"Bad documents ({num(len(w['bad_documents']))})", f"<ul>{items}{more_li}</ul>"))
    parts.append(f'<footer>plan hash <code>{_e(plan.plan_hash)}</code> · schema {_e(b.get("schema", ""))} · config '
                 f'<code>{_e(str(b["inputs"]["config"].get("path")))}</code></footer></main></body></html>')
    return "\n".join(parts) + "\n"
