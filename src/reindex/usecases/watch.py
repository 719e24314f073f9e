"""The live mode: ``reindex sync --watch`` (``Index.watch``, the ``reindex-watch`` flow). One long-lived process holds
the index lock, the vector store's writer and the source's cursor, and runs the library's cycle each time the
source may have moved: each batch of document changes is planned from the cursor (what changed, not the corpus),
applied in place under the same lock and fencing, and published — readers in other processes see it at their
next query. Everything the cycle stops for still stops it: a pipeline-scoped change or a mass removal waits
for approval (its document changes are applied in place meanwhile, as ``reindex sync`` does), a failed gate
leaves the alias. The watch goes on until it is told to stop (SIGTERM, SIGINT, ``stop``), then releases the
lock.

A watch survives the world moving (DESIGN.md invariant 20): a plan whose inputs moved before its apply is made
again by the cycle itself (``replanned``); a transient error — a plan that kept drifting, a state store or
vector store that does not answer, an I/O error — ends that cycle only: it is reported (outcome ``retrying``,
with the error and when the next try comes) and tried again after a backoff that doubles up to
:data:`MAX_BACKOFF_S` and resets after a cycle that succeeds. Only a fatal error ends the watch: a lost lock,
a source or state that retrying cannot fix. A config file that no longer loads is said once and the last good
config kept until it loads again. A change that waits for approval
is said once; the watch then plans nothing until the source, the config or an approval or rejection in the
plans folder moves.

Cost per tick with nothing changed: one look at the source through its cursor (a folder's listing, a change
log's tail) and the cycle's fixed work; the writer is opened once, not per batch. A change of the config
file is picked up at the next tick (the context is made again from it; the writer stays)."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reindex.books.layout import Books
from reindex.context import Context
from reindex.context.locking import holding_index_lock
from reindex.errors import ConfigError, DriftError, ReindexError, TransientError

__all__ = ["DEFAULT_INTERVAL_S", "MAX_BACKOFF_S", "RETRYABLE", "WatchSummary", "check_interval", "watch"]

DEFAULT_INTERVAL_S = 2.0
#: The longest wait between two tries after transient errors (the wait doubles from the interval up to this).
MAX_BACKOFF_S = 60.0
#: Errors that end one cycle of a watch, not the watch: a plan that kept drifting while it was made again, a
#: store or state store that did not answer, an I/O error of the moment. Anything else is fatal.
RETRYABLE = (TransientError, DriftError, OSError)
_log = logging.getLogger("reindex")


@dataclass
class WatchSummary:
    """What a watch did: ticks, what each cycle that did something answered, and why it ended."""

    ticks: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    applied: int = 0  # cycles that changed the index (in place or cut over)
    stopped_by: str = ""
    replanned: int = 0  # plans made again because their inputs moved before their apply
    retries: int = 0  # cycles ended by a transient error and tried again

    def as_dict(self) -> dict[str, Any]:
        return {"ticks": self.ticks, "outcomes": dict(self.outcomes), "applied": self.applied,
                "stopped_by": self.stopped_by, "replanned": self.replanned, "retries": self.retries}


def check_interval(interval: float) -> float:
    """``interval`` if it is a finite number of seconds above 0; a ConfigError saying so otherwise (``nan`` never
    elapses, ``inf`` never looks again)."""
    if not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval <= 0:
        raise ConfigError(f"--interval {interval}: must be a finite number of seconds above 0, e.g. 2")
    return float(interval)


def watch(ctx: Context, policy: Any, *, interval: float = DEFAULT_INTERVAL_S, stop: threading.Event | None = None,
          ticks: int | None = None, on_cycle: Callable[[Any], None] | None = None,
          max_backoff: float = MAX_BACKOFF_S) -> WatchSummary:
    """Run cycles of the context's index under one lock and one writer until ``stop`` is set (or ``ticks`` cycles
    ran): right after a cycle that changed something, else every ``interval`` seconds; after a transient error,
    after a backoff (see the module). ``on_cycle`` sees every cycle's result but a repeated wait for the same
    approval (the CLI prints those that did something, waited, were planned again or are retried)."""
    from reindex.usecases.cycle import CycleOutcome, CycleResult, run_cycle

    interval = check_interval(interval)
    stop = stop or threading.Event()
    summary = WatchSummary()
    config_path = ctx.config_path
    source = _config_bytes(config_path)
    plans_dir = Path(policy.plans_dir) if policy.plans_dir else Path("plans")
    with holding_index_lock(ctx, "sync --watch"):
        writer = ctx.store()  # loaded once for every batch of the watch
        cycles = ctx.with_store(writer)
        failures = 0
        waiting: tuple[str | None, tuple] | None = None  # (plan hash said, what it waits on) while a plan waits
        try:
            while not stop.is_set():
                now = _config_bytes(config_path)
                if now != source:  # the config file changed: the next cycle plans against it
                    from reindex.usecases.configure import load_resolved

                    source = now
                    try:
                        cycles = cycles.with_config(load_resolved(config_path))
                    except ConfigError as err:  # an edit half made: said once, the last good config kept
                        _log.warning("reindex sync --watch: %s no longer loads (%s); syncing with the config it had",
                                     config_path, err)
                    else:
                        _log.info("reindex sync --watch: %s changed; planning against it from now on", config_path)
                if waiting is not None and waiting[1] == _waits_on(cycles.config, now, plans_dir):
                    stop.wait(interval)  # the same plan waits for the same approval: nothing to plan again
                    continue
                try:
                    result = run_cycle(cycles, policy)
                except RETRYABLE as err:
                    failures += 1
                    delay = min(max_backoff, interval * 2 ** (failures - 1))
                    why = " ".join(str(err).split()) or type(err).__name__
                    _log.warning("reindex sync --watch: this cycle failed (%s); trying again in %g s", why, delay)
                    result = CycleResult(CycleOutcome.RETRYING, cycles.index, f"this cycle failed ({why}); trying again "
                                         f"in {delay:g} s ({failures} in a row)", error=why, retry_in=delay)
                    summary.retries += 1
                    _count(summary, result)
                    if on_cycle is not None:
                        on_cycle(result)
                    if ticks is not None and summary.ticks >= ticks:
                        summary.stopped_by = f"{ticks} ticks"
                        break
                    stop.wait(delay)
                    continue
                if failures:
                    _log.info("reindex sync --watch: a cycle succeeded after %d failed one(s)", failures)
                failures = 0
                _count(summary, result)
                summary.replanned += result.replanned
                changed = result.outcome in (CycleOutcome.APPLIED_IN_PLACE, CycleOutcome.CUT_OVER) or bool(
                    result.in_place)
                summary.applied += changed
                said = None
                if result.outcome is CycleOutcome.AWAITING_APPROVAL:
                    said = waiting[0] if waiting is not None else None
                    waiting = (result.plan_hash, _waits_on(cycles.config, now, plans_dir))
                    result = _waiting_words(result)
                else:
                    waiting = None
                if on_cycle is not None and (said != result.plan_hash or changed or result.replanned):
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


def _count(summary: WatchSummary, result: Any) -> None:
    summary.ticks += 1
    summary.outcomes[result.outcome.value] = summary.outcomes.get(result.outcome.value, 0) + 1


def _waiting_words(result: Any) -> Any:
    """A cycle's answer that a plan waits for approval, as the watch says it: it carries the plan out itself."""
    message = result.message.replace(", then `reindex sync` again",
                                     "; this watch carries it out once it is approved, and plans nothing until the "
                                     "source, the config or an approval moves")
    return dataclasses.replace(result, message=message)


def _waits_on(cfg: Any, config: bytes | None, plans_dir: Path) -> tuple:
    """What a waiting plan waits on: the config file's bytes, the approvals and rejections in the plans folder,
    and where the source stands (its cursor's position; a file's size and time; None when it cannot be told
    cheaply, then it is planned again every tick as before)."""
    marks = []
    for p in Books.decision_records(plans_dir):
        try:
            marks.append((str(p), p.stat().st_mtime_ns))
        except OSError:
            continue
    return config, tuple(marks), _source_mark(cfg)


def _source_mark(cfg: Any) -> Any:
    from reindex.adapters.sources import open_source, tracker_of

    try:
        tracked = tracker_of(open_source(cfg.source))
        if tracked is not None:
            return tracked.position().digest
        st = os.stat(cfg.source.uri)  # a file read whole (JSON Lines): its size and time
        return (st.st_size, st.st_mtime_ns, st.st_ino)
    except (ReindexError, OSError, ValueError):
        return object()  # cannot tell: never equal, so the cycle runs


def _config_bytes(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.is_file() else None
