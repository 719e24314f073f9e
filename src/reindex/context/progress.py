"""A running apply's progress, recorded for other processes: what ``reindex status`` shows of a build (tokens done /
planned, the measured rate, the ETA: :mod:`reindex.engine.eta`) while the apply holds the store and the lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from reindex.errors import ReindexError
from reindex.engine.eta import ProgressCounts
from reindex.books.manifests import write_run_progress

__all__ = ["PROGRESS_EVERY_S", "ProgressRecord"]


class ProgressRecord:
    """Apply's progress events, counted once (:class:`reindex.engine.eta.ProgressCounts`) and passed on to the
    caller's callback — a callback with an ``attach(counts)`` method is given these counts first, so it renders them
    instead of counting every event again —
    and every :data:`PROGRESS_EVERY_S` (and at the start, at each shard and at catch-up) recorded in the state store
    for ``reindex status`` in other processes: tokens done / planned, the measured rate, the ETA. A record is
    progress for people: one that cannot be written (the lock lost, the state unreachable) is skipped, never
    the apply's failure."""

    def __init__(self, state, index: str, target: str, run: str, caller: Callable[[dict], None] | None,
                 check: Callable[[], None]) -> None:
        self.counts = ProgressCounts()
        self._state, self._index, self._target, self._run = state, index, target, run
        self._caller, self._check = caller, check
        attach = getattr(caller, "attach", None)
        if callable(attach):
            attach(self.counts)
        self._last = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        now = time.perf_counter()
        self.counts.feed(event, now)
        if self._caller is not None:
            self._caller(event)
        due = event.get("kind") in ("start", "shard-done", "shard-skipped", "catch-up")
        if not due and now - self._last < PROGRESS_EVERY_S:
            return
        with self._lock:
            if not due and now - self._last < PROGRESS_EVERY_S:
                return
            self._last = now
            try:
                self._check()
                write_run_progress(self._state, self._index, self._target, self._run, self.counts.snapshot(now))
            except ReindexError:
                pass


#: How often a running apply records its progress for `reindex status` (one small state write).
PROGRESS_EVERY_S = 2.0
