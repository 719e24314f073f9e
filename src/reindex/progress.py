"""The terminal side of a long apply: the one-line runner announcement and a rich progress bar fed by
apply's progress events (documents, reused and embedded chunks, tokens/s, ETA). The only importer of rich.

The counting is :class:`ProgressCounts`, a plain object fed the same events (tested on recorded event
sequences); the bar only renders it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = ["RUNNER_LINES", "ApplyProgress", "ProgressCounts", "format_eta"]

RUNNER_LINES = {
    "in-process": "running in-process; set PREFECT_API_URL to track runs in Prefect",
    "prefect": "running as the Prefect flow reindex-apply",
}


@dataclass
class ProgressCounts:
    """What the bar shows, from apply's events. Every count is a sum of non-negative event fields (never a
    difference across events): reused and embedded chunks arrive with their documents, finished shards of
    a resumed run count as done documents, catch-up is counted apart, and the bar is capped at its total.

    ETA: none before the first finished shard; then elapsed time × documents still to do / documents this
    run did (shards instead of documents when the total is unknown)."""

    documents_total: int | None = None
    shards_total: int = 0
    documents: int = 0  # done, resumed shards included
    resumed_documents: int = 0  # of shards finished by an earlier run (skipped now)
    chunks: int = 0
    reused: int = 0
    embedded: int = 0
    tokens: int = 0  # embedded tokens, as embedding batches finish (for tokens/s)
    shards_done: int = 0
    shards_skipped: int = 0
    catch_up_documents: int = 0
    phase: str = "apply"
    started: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def feed(self, event: dict, now: float) -> None:
        """Apply one event (from any shard's thread)."""
        kind = event.get("kind")
        with self._lock:
            if kind == "start":
                self.started = now
                self.documents_total = event.get("documents_planned") or None
                self.shards_total = int(event.get("shards") or 0)
            elif kind == "embedded":
                self.tokens += max(0, int(event.get("tokens", 0)))
            elif kind == "documents":
                n = max(0, int(event.get("documents", 0)))
                if self.phase == "catch-up":
                    self.catch_up_documents += n
                    return
                self.documents += n
                self.chunks += max(0, int(event.get("chunks", 0)))
                self.reused += max(0, int(event.get("reused", 0)))
                self.embedded += max(0, int(event.get("embedded", 0)))
            elif kind == "shard-skipped":
                n = max(0, int(event.get("documents", 0)))
                self.shards_skipped += 1
                self.documents += n
                self.resumed_documents += n
            elif kind == "shard-done" and self.phase != "catch-up":
                self.shards_done += 1
            elif kind == "catch-up":
                self.phase = "catch-up"

    @property
    def completed(self) -> int:
        """Documents done, never above the total."""
        return min(self.documents, self.documents_total) if self.documents_total else self.documents

    def eta(self, now: float) -> float | None:
        """Seconds left, from the first finished shard on (None before, and during catch-up)."""
        with self._lock:
            if self.started is None or self.shards_done == 0 or self.phase != "apply":
                return None
            elapsed = max(0.0, now - self.started)
            done_here = self.documents - self.resumed_documents
            if self.documents_total and done_here > 0:
                return elapsed * max(0, self.documents_total - self.documents) / done_here
            to_run = max(0, self.shards_total - self.shards_skipped)
            return elapsed * max(0, to_run - self.shards_done) / self.shards_done

    def rate(self, now: float) -> float:
        """Embedded tokens per second since the start."""
        if self.started is None:
            return 0.0
        return self.tokens / max(now - self.started, 1e-9)

    def detail(self, now: float) -> str:
        extra = f" · catch-up {self.catch_up_documents:,} docs" if self.phase == "catch-up" else ""
        resumed = f" · {self.resumed_documents:,} resumed" if self.resumed_documents else ""
        return (f"· {self.chunks:,} chunks · {self.reused:,} reused · {self.embedded:,} embedded · "
                f"{self.rate(now):,.0f} tok/s{resumed}{extra}")


def format_eta(seconds: float | None) -> str:
    """``h:mm:ss``, or ``-:--:--`` while unknown."""
    if seconds is None:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ApplyProgress:
    """A rich progress bar fed by apply's progress events (documents, reused/embedded, tokens/s, ETA)."""

    def __init__(self, enabled: bool, announce: bool = True) -> None:
        self.enabled, self.announce = enabled, announce
        self.progress = None
        self.task = None
        self.counts = ProgressCounts()

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

            counts = self.counts

            class EtaColumn(ProgressColumn):
                def render(self, task: Any) -> Text:  # re-rendered on every refresh: the ETA counts down
                    return Text(f"ETA {format_eta(counts.eta(time.perf_counter()))}")

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
