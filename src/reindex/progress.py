"""The terminal side of a long apply: the one-line runner announcement and a rich progress bar fed by
apply's progress events (documents, reused and embedded chunks, tokens/s, ETA). The only importer of rich."""

from __future__ import annotations

from typing import Any

__all__ = ["RUNNER_LINES", "ApplyProgress"]

RUNNER_LINES = {
    "in-process": "running in-process; set PREFECT_API_URL to track runs in Prefect",
    "prefect": "running as the Prefect flow reindex-apply",
}


class ApplyProgress:
    """A rich progress bar fed by apply's progress events (documents, reused/embedded, tokens/s, ETA)."""

    def __init__(self, enabled: bool, announce: bool = True) -> None:
        self.enabled, self.announce = enabled, announce
        self.progress = None
        self.task = None
        self.embedded = self.tokens = self.chunks = 0
        self.started = None

    def __enter__(self) -> "ApplyProgress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            console = Console(stderr=True)
            if not console.is_terminal:
                console.width = max(console.width, 120)  # piped (make demo, CI logs): don't truncate the line
            self.progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("docs"),
                TextColumn("{task.fields[detail]}"), TextColumn("ETA"), TimeRemainingColumn(),
                console=console, transient=False,
            )
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def __call__(self, event: dict) -> None:
        import time

        kind = event["kind"]
        if kind == "start" and self.announce:
            print(RUNNER_LINES.get(event.get("runner", ""), f"running with {event.get('runner')}"), flush=True)
        if self.progress is None:
            return
        if kind == "start":
            self.started = time.perf_counter()
            self.task = self.progress.add_task("apply", total=event.get("documents_planned") or None, detail="")
            return
        if self.task is None:
            return
        if kind == "embedded":
            self.embedded += event["chunks"]
            self.tokens += event["tokens"]
        elif kind == "documents":
            self.chunks += event["chunks"]
            self.progress.advance(self.task, event["documents"])
        rate = self.tokens / max(time.perf_counter() - (self.started or time.perf_counter()), 1e-9)
        self.progress.update(self.task, detail=f"· {self.chunks:,} chunks · {self.chunks - self.embedded:,} reused · "
                             f"{self.embedded:,} embedded · {rate:,.0f} tok/s")
