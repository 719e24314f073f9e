"""How far a running apply is and when it ends: :class:`ProgressCounts`, fed apply's progress events.

One home for the arithmetic that apply's progress bar (:mod:`reindex.terminal.progress`), the progress record ``reindex
status`` reads (written by the apply, see ``usecases.apply``) and the Prefect progress artifact
(:mod:`reindex.runners.prefect`) show: documents and tokens done against the plan, the measured embedding rate, and
the seconds left.

ETA. With tokens to embed in the plan: the tokens still to embed (planned, less those of shards a resumed run
skips, less those embedded by this run) at the rate this run measured from the end of its first embedding batch
(the first batch carries the model's load and warm-up), i.e. from its second batch on. Without tokens (full reuse,
payload-only): from the first finished shard on, elapsed time × documents still to do / documents this run did
(shards instead of documents when the total is unknown). None during catch-up. It is the time to the end of the
shards; what follows them (a new population's index build, catch-up) is not in it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProgressCounts", "format_eta", "progress_line"]


@dataclass
class ProgressCounts:
    """What a running apply has done, from its events. Every count is a sum of non-negative event fields (never
    a difference across events): reused and embedded chunks arrive with their documents, finished shards of a
    resumed run count as done documents (and their tokens as done tokens), catch-up is counted apart, and the
    document count is capped at its total. ETA: see the module docstring."""

    documents_total: int | None = None
    shards_total: int = 0
    tokens_planned: int = 0  # the plan's tokens to embed (0: nothing, or not told)
    documents: int = 0  # done, resumed shards included
    resumed_documents: int = 0  # of shards finished by an earlier run (skipped now)
    resumed_tokens: int = 0  # tokens those shards embedded then
    chunks: int = 0
    reused: int = 0
    embedded: int = 0
    tokens: int = 0  # embedded tokens, as embedding batches finish (for tokens/s)
    shards_done: int = 0
    shards_skipped: int = 0
    catch_up_documents: int = 0
    phase: str = "apply"
    started: float | None = None
    first_batch: tuple[float, int] | None = None  # (when, tokens) of this run's first embedding batch
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def feed(self, event: dict, now: float) -> None:
        """Apply one event (from any shard's thread)."""
        kind = event.get("kind")
        with self._lock:
            if kind == "start":
                self.started = now
                self.documents_total = event.get("documents_planned") or None
                self.shards_total = int(event.get("shards") or 0)
                self.tokens_planned = max(0, int(event.get("tokens_planned") or 0))
            elif kind == "embedded":
                n = max(0, int(event.get("tokens", 0)))
                self.tokens += n
                if self.first_batch is None and self.phase == "apply":
                    self.first_batch = (now, self.tokens)
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
                self.resumed_tokens += max(0, int(event.get("tokens", 0)))
            elif kind == "shard-done" and self.phase != "catch-up":
                self.shards_done += 1
            elif kind == "catch-up":
                self.phase = "catch-up"

    @property
    def completed(self) -> int:
        """Documents done, never above the total."""
        return min(self.documents, self.documents_total) if self.documents_total else self.documents

    @property
    def tokens_done(self) -> int:
        """Tokens embedded, by this run and by the shards a resumed run skips, never above the plan's."""
        done = self.tokens + self.resumed_tokens
        return min(done, self.tokens_planned) if self.tokens_planned else done

    def rate(self, now: float) -> float:
        """Embedded tokens per second since the start."""
        if self.started is None:
            return 0.0
        return self.tokens / max(now - self.started, 1e-9)

    def measured_rate(self, now: float) -> float | None:
        """Tokens per second since the end of this run's first embedding batch (None before its second)."""
        if self.first_batch is None:
            return None
        at, tokens = self.first_batch
        if self.tokens <= tokens or now <= at:
            return None
        return (self.tokens - tokens) / (now - at)

    def eta(self, now: float) -> float | None:
        """Seconds left to the end of the shards (see the module docstring); None while it cannot be told."""
        with self._lock:
            if self.started is None or self.phase != "apply":
                return None
            if self.tokens_planned:
                rate = self.measured_rate(now)
                if rate:
                    return max(0, self.tokens_planned - self.resumed_tokens - self.tokens) / rate
            if self.shards_done == 0:
                return None
            elapsed = max(0.0, now - self.started)
            done_here = self.documents - self.resumed_documents
            if self.documents_total and done_here > 0:
                return elapsed * max(0, self.documents_total - self.documents) / done_here
            to_run = max(0, self.shards_total - self.shards_skipped)
            return elapsed * max(0, to_run - self.shards_done) / self.shards_done

    def snapshot(self, now: float) -> dict[str, Any]:
        """The figures as plain data (the progress record ``reindex status`` reads, the Prefect artifact)."""
        eta = self.eta(now)
        rate = self.measured_rate(now)
        return {"phase": self.phase, "documents_done": self.completed, "documents_planned": self.documents_total,
                "shards_done": self.shards_done + self.shards_skipped, "shards_total": self.shards_total,
                "tokens_done": self.tokens_done, "tokens_planned": self.tokens_planned,
                "tokens_per_second": round(rate if rate is not None else self.rate(now), 1),
                "elapsed_seconds": round(now - self.started, 3) if self.started is not None else 0.0,
                "eta_seconds": round(eta, 1) if eta is not None else None}

    def detail(self, now: float) -> str:
        extra = f" · catch-up {self.catch_up_documents:,} docs" if self.phase == "catch-up" else ""
        resumed = f" · {self.resumed_documents:,} resumed" if self.resumed_documents else ""
        tokens = f"{self.tokens_done:,}/{self.tokens_planned:,} tokens · " if self.tokens_planned else ""
        return (f"· {self.chunks:,} chunks · {self.reused:,} reused · {self.embedded:,} embedded · "
                f"{tokens}{self.rate(now):,.0f} tok/s{resumed}{extra}")


def format_eta(seconds: float | None) -> str:
    """``h:mm:ss``, or ``-:--:--`` while unknown."""
    if seconds is None:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def progress_line(snap: dict[str, Any]) -> str:
    """One line of a snapshot: ``12,345 / 50,000 tokens · 2,100 tok/s · ETA 0:00:18 · shards 3/4``."""
    tokens = (f"{snap['tokens_done']:,} / {snap['tokens_planned']:,} tokens · " if snap.get("tokens_planned")
              else f"{snap.get('tokens_done', 0):,} tokens · ")
    return (f"{tokens}{snap.get('tokens_per_second', 0):,.0f} tok/s · ETA {format_eta(snap.get('eta_seconds'))} · "
            f"shards {snap.get('shards_done', 0)}/{snap.get('shards_total', 0)}")
