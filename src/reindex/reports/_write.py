"""Writing a plan's Markdown and HTML reports beside the plan file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pathlib import Path

from reindex.foundation.atomic import atomic_write_text
from reindex.reports._plan_html import plan_html
from reindex.reports._plan_md import plan_markdown

if TYPE_CHECKING:
    from reindex.planner import Plan

__all__ = ["write_reports"]


def write_reports(plan: Plan, plan_path: str | Path) -> tuple[Path, Path]:
    """Write ``<plan stem>.md`` and ``<plan stem>.html`` beside the plan file; returns their paths."""
    p = Path(plan_path)
    out = []
    for suffix, text in ((".md", plan_markdown(plan)), (".html", plan_html(plan))):
        target = p.with_suffix(suffix)
        out.append(atomic_write_text(target, text))
    return out[0], out[1]
