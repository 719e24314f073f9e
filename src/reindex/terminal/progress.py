"""The terminal side of a long apply: the one-line runner announcement and a rich progress bar fed by
apply's progress events (documents, reused and embedded chunks, tokens/s, ETA). The only importer of rich.

The counting is :class:`reindex.engine.eta.ProgressCounts` (re-exported here), a plain object fed the same events
(tested on recorded event sequences), shared with ``reindex status`` and the Prefect artifact; the bar only
renders it."""

from __future__ import annotations

import time
from typing import Any, Self

from reindex.engine.eta import ProgressCounts, format_eta

__all__ = ["RUNNER_LINES", "ApplyProgress", "ProgressCounts", "format_eta"]

RUNNER_LINES = {
    "in-process": "running in-process; set PREFECT_API_URL to track runs in Prefect",
    "prefect": "running as the Prefect flow reindex-apply",
}


class ApplyProgress:
    """A rich progress bar fed by apply's progress events (documents, reused/embedded, tokens/s, ETA). The apply
    counts each event once and hands the bar its counts (:meth:`attach`); a bar used without an apply counts the
    events itself."""

    def __init__(self, enabled: bool, announce: bool = True) -> None:
        self.enabled, self.announce = enabled, announce
        self.progress = None
        self.task = None
        self.counts = ProgressCounts()
        self._own = True  # counting the events itself until an apply attaches its counts

    def attach(self, counts: ProgressCounts) -> None:
        """Render ``counts`` (the apply's, fed every event once) instead of counting again."""
        self.counts, self._own = counts, False

    def __enter__(self) -> Self:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
            )
            from rich.text import Text

            bar = self  # the counts it renders may be attached later, by the apply

            class EtaColumn(ProgressColumn):
                def render(self, task: Any) -> Text:  # re-rendered on every refresh: the ETA counts down
                    return Text(f"ETA {format_eta(bar.counts.eta(time.perf_counter()))}")

            console = Console(stderr=True)
            if not console.is_terminal:
                console.width = max(console.width, 120)  # piped (make demo, CI logs): don't truncate the line
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("docs"),
                TextColumn("{task.fields[detail]}"), EtaColumn(),
                console=console, transient=False,
            )
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def __call__(self, event: dict) -> None:
        kind = event["kind"]
        if kind == "start" and self.announce:
            print(RUNNER_LINES.get(event.get("runner", ""), f"running with {event.get('runner')}"), flush=True)
        now = time.perf_counter()
        if self._own:
            self.counts.feed(event, now)
        if self.progress is None:
            return
        if kind == "start":
            self.task = self.progress.add_task("apply", total=self.counts.documents_total, detail="")
            return
        if self.task is None:
            return
        self.progress.update(self.task, completed=self.counts.completed, detail=self.counts.detail(now),
                             description=self.counts.phase)
