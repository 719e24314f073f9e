"""A plan as a concise Markdown review document."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from reindex.reports._format import capped, num
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

if TYPE_CHECKING:
    from reindex.planner import Plan

__all__ = ["plan_markdown"]


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
    shown, more = capped(ids)
    out = [f"## {title} ({num(len(ids))})", ""] + [f"- {_md_code(i)}" for i in shown]
    return out + ([f"- … and {num(more)} more"] if more else []) + [""]


def plan_markdown(plan: Plan) -> str:
    """A concise review document of the plan."""
    b, w = plan.body, plan.body["work"]
    out = [f"# {plan_title(plan)}", "",
           f"Created {b['created_at']} · measured against {baseline_line(plan)} · "
           f"corpus {_md_code(b['inputs']['corpus']['uri'])} · plan hash {_md_code(plan.plan_hash)}", "",
           "## What changes", ""]
    out += [f"- {line}" for line in change_lines(plan)] + [""]
    if (over := over_limit_line(plan)) is not None:
        out += [f"> **Warning:** {_md_cell(over)}", ""]
    out += ["## Key numbers", ""] + _md_table(("", "value"), key_rows(plan))
    if (facts := forecast_facts(plan)):
        out += ["## What it buys (forecast)", ""] + [f"- {x}" for x in facts] + [""]
        out += _md_table(("metric", "old", "new", "new − old [95 % CI]", "verdict"), forecast_rows(plan))
    out += ["## Footprint", ""] + _md_table(("", "old", "new", "peak"), footprint_rows(plan))
    if plan.body["cost"].get("formula"):
        out += [f"_{_md_cell(plan.body['cost']['formula'])}_", ""]
    proj = b.get("projection")
    if proj is not None:
        out += ["## Projection (sampled)", "",
                f"Sample of {num(proj['sample'])} of {num(proj['population'])} documents that needed chunking, "
                f"seed {proj['seed']}; {proj.get('method', '')}. Intervals are 95 %.", ""]
        out += _md_table(("field", "estimate", "low", "high"), projection_rows(proj))
    out += ["## Sensitivity", "", f"- Tail: {tail_line(plan)}.", ""]
    if b["sensitivity"].get("what_if"):
        out += ["What if the chunker were different (full re-embed of this corpus):", ""]
        out += _md_table(("chunker", "chunks", "tokens", "$", "hours", "method"), what_if_rows(plan))
    ap = b["approval"]
    out += ["## Approval", "", "**Required.**" if ap["required"] else "Not required.", ""]
    out += [f"- {r}" for r in ap["reasons"]] + ([""] if ap["reasons"] else [])
    if plan.kind.in_place:
        out += _md_ids("Affected documents", w.get("affected_documents", []))
    if w.get("removed_documents"):
        out += _md_ids("Removed documents", w["removed_documents"])
    if w.get("bad_documents"):
        shown, more = capped(w["bad_documents"])
        out += [f"## Bad documents ({num(len(w['bad_documents']))})", ""]
        out += [f"- {_md_code(x['doc_id'])}: {x['reason']}" for x in shown]
        out += ([f"- … and {num(more)} more"] if more else []) + [""]
    return "\n".join(out).rstrip() + "\n"
