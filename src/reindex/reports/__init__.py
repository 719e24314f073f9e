"""Plans → a Markdown review document and a self-contained HTML page with inline SVG charts; cutover
reports likewise; the number formatting both share.

Rendering is pure (stdlib, and markdown-it-py for the HTML pages' prose); :func:`write_reports` and :func:`write_cutover_reports` are the
functions that touch the disk. Private modules by role: ``_format`` (numbers people read),
``_plan_facts`` (what both plan documents say), ``_plan_md``, ``_charts`` (inline SVG), ``_style``
(CSS), ``_plan_html``, ``_write``, ``_cutover``, ``_text`` (the CLI's terminal text).
"""

from reindex.reports._cutover import (
    cutover_html,
    cutover_markdown,
    write_cutover_reports,
)
from reindex.reports._format import LIST_CAP, human_bytes, human_number
from reindex.reports._plan_facts import over_limit_line
from reindex.reports._plan_html import plan_html
from reindex.reports._plan_md import plan_markdown
from reindex.reports._text import (
    decision_text,
    waiting_runs_text,
    recovered_text,
    apply_text,
    chunk_summary_text,
    classification_text,
    cutover_text,
    estimate_json,
    estimate_text,
    chains_text,
    measure_text,
    plan_text,
    sync_text,
    status_text,
    validation_text,
)
from reindex.reports._write import write_reports

__all__ = [
    "decision_text",
    "waiting_runs_text",
    "recovered_text",
    "LIST_CAP",
    "apply_text",
    "chunk_summary_text",
    "classification_text",
    "cutover_html",
    "cutover_markdown",
    "cutover_text",
    "estimate_json",
    "estimate_text",
    "human_bytes",
    "human_number",
    "chains_text",
    "measure_text",
    "over_limit_line",
    "plan_html",
    "plan_markdown",
    "plan_text",
    "sync_text",
    "status_text",
    "validation_text",
    "write_cutover_reports",
    "write_reports",
]
