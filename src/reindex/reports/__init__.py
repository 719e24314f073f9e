"""Plans → a Markdown review document and a self-contained HTML page with inline SVG charts; cutover
reports likewise; the number formatting both share.

Rendering is pure (stdlib, and markdown-it-py for the HTML pages' prose); :func:`write_reports` and :func:`write_cutover_reports` are the
functions that touch the disk. Private modules by role: ``_format`` (numbers people read),
``_plan_facts`` (what both plan documents say), ``_plan_md``, ``_charts`` (inline SVG), ``_style``
(CSS), ``_plan_html``, ``_write``, ``_cutover``, ``_text`` (the CLI's terminal text).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME_OF = {
    "cutover_html": "reindex.reports._cutover",
    "cutover_markdown": "reindex.reports._cutover",
    "write_cutover_reports": "reindex.reports._cutover",
    "LIST_CAP": "reindex.reports._format",
    "human_bytes": "reindex.reports._format",
    "human_number": "reindex.reports._format",
    "over_limit_line": "reindex.reports._plan_facts",
    "plan_html": "reindex.reports._plan_html",
    "plan_markdown": "reindex.reports._plan_md",
    "decision_text": "reindex.reports._text",
    "waiting_runs_text": "reindex.reports._text",
    "recovered_text": "reindex.reports._text",
    "apply_text": "reindex.reports._text",
    "chunk_summary_text": "reindex.reports._text",
    "classification_text": "reindex.reports._text",
    "cutover_text": "reindex.reports._text",
    "estimate_json": "reindex.reports._text",
    "estimate_text": "reindex.reports._text",
    "chains_text": "reindex.reports._text",
    "measure_text": "reindex.reports._text",
    "units_text": "reindex.reports._text",
    "plan_text": "reindex.reports._text",
    "sync_text": "reindex.reports._text",
    "status_text": "reindex.reports._text",
    "doctor_text": "reindex.reports._text",
    "serving_text": "reindex.reports._text",
    "forecast_serving_line": "reindex.reports._plan_facts",
    "validation_text": "reindex.reports._text",
    "forecast_lines": "reindex.reports._text",
    "write_reports": "reindex.reports._write",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use: a command loads only the renderers it uses."""
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'reindex.reports' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

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
    "units_text",
    "over_limit_line",
    "plan_html",
    "plan_markdown",
    "plan_text",
    "sync_text",
    "status_text",
    "doctor_text",
    "serving_text",
    "forecast_serving_line",
    "validation_text",
    "write_cutover_reports",
    "write_reports",
]
