"""Cutover reports (kept import path): the implementation lives in :mod:`reindex.reports`."""

from reindex.reports import cutover_html, cutover_markdown, write_cutover_reports

__all__ = ["cutover_html", "cutover_markdown", "write_cutover_reports"]
