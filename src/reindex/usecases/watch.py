"""The live mode: ``reindex sync --watch`` (``Index.watch``, the ``reindex-watch`` flow). One long-lived process holds
the index lock, the vector store's writer and the source's cursor, and runs the library's cycle each time the
source may have moved: each batch of document changes is planned from the cursor (what changed, not the corpus),
applied in place under the same lock and fencing, and published — readers in other processes see it at their
next query. Everything the cycle stops for still stops it: a pipeline-scoped change or a mass removal waits
for approval (its document changes are applied in place meanwhile, as ``reindex sync`` does), a failed gate
leaves the alias. The watch goes on until it is told to stop (SIGTERM, SIGINT, ``stop``), then releases the
lock.

Cost per tick with nothing changed: one look at the source through its cursor (a folder's listing, a change
log's tail) and the cycle's fixed work; the writer is opened once, not per batch. A change of the config
file is picked up at the next tick (the handle is made again from it; the writer stays)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reindex.context import Context
from reindex.context.locking import holding_index_lock

__all__ = ["DEFAULT_INTERVAL_S", "WatchSummary", "watch"]

DEFAULT_INTERVAL_S = 2.0
_log = logging.getLogger("reindex")


@dataclass
class WatchSummary:
    """What a watch did: ticks, what each cycle that did something answered, and why it ended."""

    ticks: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    applied: int = 0  # cycles that changed the index (in place or cut over)
    stopped_by: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "outcomes": dict(self.outcomes), "applied": self.applied,
                "stopped_by": self.stopped_by}


def watch(ctx: Context, policy: Any, *, interval: float = DEFAULT_INTERVAL_S, stop: threading.Event | None = None,
          ticks: int | None = None, on_cycle: Callable[[Any], None] | None = None) -> WatchSummary:
    """Run cycles of the context's index under one lock and one writer until ``stop`` is set (or ``ticks`` cycles
    ran): right after a cycle that changed something, else every ``interval`` seconds. ``on_cycle`` sees every
    cycle's result (the CLI prints those that did something)."""
    from reindex.usecases.cycle import CycleOutcome, run_cycle

    stop = stop or threading.Event()
    summary = WatchSummary()
    config_path = ctx.config_path
    source = _config_bytes(config_path)
    with holding_index_lock(ctx, "sync --watch"):
        writer = ctx.store()  # loaded once for every batch of the watch
        cycles = ctx.with_store(writer)
        try:
            while not stop.is_set():
                now = _config_bytes(config_path)
                if now != source:  # the config file changed: the next cycle plans against it
                    from reindex.usecases.configure import load_resolved

                    cycles = cycles.with_config(load_resolved(config_path))
                    source = now
                    _log.info("reindex sync --watch: %s changed; planning against it from now on", config_path)
                result = run_cycle(cycles, policy)
                summary.ticks += 1
                summary.outcomes[result.outcome.value] = summary.outcomes.get(result.outcome.value, 0) + 1
                changed = result.outcome in (CycleOutcome.APPLIED_IN_PLACE, CycleOutcome.CUT_OVER) or bool(
                    result.in_place)
                summary.applied += changed
                if on_cycle is not None:
                    on_cycle(result)
                if ticks is not None and summary.ticks >= ticks:
                    summary.stopped_by = f"{ticks} ticks"
                    break
                if not changed:
                    stop.wait(interval)
            summary.stopped_by = summary.stopped_by or "stop"
        finally:
            writer.close()
    return summary


def _config_bytes(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.is_file() else None
