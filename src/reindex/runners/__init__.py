"""Shard runners: how an apply's shards and its catch-up are run.

A :class:`ShardRunner` runs the shards of one :class:`ShardJob` against an
:class:`~reindex.engine.execution.ApplyContext`, then the catch-up, and returns the summary that the run report is
built from. Two implementations give identical populations and identical summaries:

* :class:`ThreadRunner` — in this process, on a thread pool (the default: no server, no start-up cost);
* :class:`reindex.runners.prefect.PrefectRunner` — the Prefect flow ``reindex-apply`` (a flow run with one
  task run per shard, visible in the Prefect UI), used when a Prefect API is configured or asked for;
  its task runner (threads, or Dask through prefect-dask) is chosen by a task-runner spec;
* :class:`reindex.runners.distributed.DaskRunner` — shards on a Dask cluster through dask.distributed,
  without Prefect: a local cluster of processes, or an existing cluster by address;
* the same ``PrefectRunner`` with a ``prefect-pool:POOL`` spec — each group of shards a flow run of the
  ``reindex-shard/POOL`` deployment, picked up by any worker of that Prefect work pool.

A task-runner spec (:func:`parse_task_runner`) names where shards run, the same string for ``reindex apply
--task-runner``, the flows' ``task_runner`` parameter and the Python API: ``threads[:N]``, ``dask`` (a local
cluster of threads), ``dask-processes[:N]`` (N worker processes), ``dask:tcp://HOST:PORT`` (an existing
cluster) or ``prefect-pool:POOL[:N]`` (flow runs of the ``reindex-shard/POOL`` deployment on the work pool
POOL: one per shard, or the shards dealt into N flow runs). Shards in other processes travel as
:class:`reindex.engine.workers.ShardSpec` (plain data).

Both follow the same rules, written once here: a shard that raises is reported as a failed shard and the
others go on; catch-up runs only when every shard finished without failures (a failed run is resumed, and
catch-up runs then). Retries happen once, at the call layer (see ``execution.retry_transient`` and the S3
client), never again at the shard layer: a shard retry would repeat every call of the shard."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Callable, Literal, Protocol, TypeVar, runtime_checkable

from reindex.engine import execution

from reindex.foundation import settings
from reindex.errors import ConfigError

TASK_RUNNER_SPECS = "threads, threads:N, dask, dask-processes[:N], dask:tcp://HOST:PORT or prefect-pool:POOL[:N]"
MAX_LOCAL_PROCESSES = 256  # dask-processes:N starts N processes here; more is a typo, not a machine


@dataclass(frozen=True, slots=True)
class TaskRunnerSpec:
    """A parsed task-runner spec: ``kind`` threads | dask-threads | dask-processes | dask-cluster | prefect-pool."""

    kind: Literal["threads", "dask-threads", "dask-processes", "dask-cluster", "prefect-pool"]
    workers: int | None = None  # threads, processes, or prefect-pool: flow runs (None: the default)
    address: str | None = None  # dask-cluster: the scheduler's address
    pool: str | None = None  # prefect-pool: the work pool (its deployment is reindex-shard/POOL)

    @property
    def dask(self) -> bool:
        return self.kind.startswith("dask")

    @property
    def elsewhere(self) -> bool:
        """Shards run (and embed) in other processes: the coordinator needs no model of its own."""
        return self.kind in ("dask-processes", "dask-cluster", "prefect-pool")

    @property
    def name(self) -> str:
        """The spec as written canonically (run reports name the runner with it)."""
        if self.kind == "prefect-pool":
            return f"prefect-pool:{self.pool}" + (f":{self.workers}" if self.workers else "")
        return {"threads": "threads" + (f":{self.workers}" if self.workers else ""), "dask-threads": "dask",
                "dask-processes": f"dask-processes:{self.workers}", "dask-cluster": f"dask:{self.address}"}[self.kind]


def parse_task_runner(spec: str | None) -> TaskRunnerSpec:
    """Parse ``threads[:N]`` | ``dask`` | ``dask-processes[:N]`` | ``dask:ADDRESS`` | ``prefect-pool:POOL[:N]``;
    ConfigError otherwise."""
    raw = (spec or "threads").strip()

    def count(text: str, most: int | None = None) -> int:
        # ASCII digits only: str.isdigit() also accepts '²' and other digits int() refuses.
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise ConfigError(f"task runner {raw!r}: {text!r} is not a positive whole number; expected {TASK_RUNNER_SPECS}")
        if most is not None and int(text) > most:
            raise ConfigError(f"task runner {raw!r}: at most {most} worker processes on one machine (each loads the "
                              f"embedder); for more, start a Dask cluster and pass dask:tcp://HOST:PORT")
        return int(text)

    if raw == "threads":
        return TaskRunnerSpec("threads")
    if raw.startswith("threads:"):
        return TaskRunnerSpec("threads", workers=count(raw.split(":", 1)[1]))
    if raw == "dask":
        return TaskRunnerSpec("dask-threads")
    if raw == "dask-processes":
        return TaskRunnerSpec("dask-processes", workers=2)
    if raw.startswith("dask-processes:"):
        return TaskRunnerSpec("dask-processes", workers=count(raw.split(":", 1)[1], MAX_LOCAL_PROCESSES))
    if raw.startswith("dask:"):
        address = raw.split(":", 1)[1]
        if "://" not in address and ":" not in address:
            raise ConfigError(f"task runner {raw!r}: expected a scheduler address like dask:tcp://127.0.0.1:8786")
        return TaskRunnerSpec("dask-cluster", address=address)
    if raw.startswith("prefect-pool:"):
        pool, _, n = raw.split(":", 1)[1].partition(":")
        if not pool or "/" in pool:
            raise ConfigError(f"task runner {raw!r}: expected a work pool name, like prefect-pool:reindex-shards")
        return TaskRunnerSpec("prefect-pool", pool=pool, workers=count(n) if n else None)
    raise ConfigError(f"task runner {raw!r}: expected {TASK_RUNNER_SPECS}")

__all__ = ["ShardJob", "ShardRunner", "TaskRunnerSpec", "ThreadRunner", "deal_units", "failure_of", "parse_task_runner",
           "summarize"]


@dataclass(frozen=True, slots=True)
class ShardJob:
    """Which shards to run; for an in-place sync, which documents to sync and which to remove."""

    shards: tuple[int, ...]
    only: frozenset[str] | None = None
    removed: frozenset[str] = frozenset()
    seconds_per_shard: float = 0.0  # the plan's embedding work per shard at its rate (what units are sized by)
    unit_seconds: float = 0.0  # target work per unit a remote runner hands a worker (0: one shard a unit)
    # the plan's work of each shard of ``shards`` (same order), when the plan counted it per shard; () = uniform
    seconds_by_shard: tuple[float, ...] = ()

    def planned_seconds(self) -> tuple[float, ...]:
        """Planned seconds of each shard of ``shards``: counted per shard by the plan, else its mean."""
        if len(self.seconds_by_shard) == len(self.shards):
            return self.seconds_by_shard
        return (self.seconds_per_shard,) * len(self.shards)


T = TypeVar("T")


def deal_units(items: Sequence[T], seconds: float | Sequence[float], target_s: float) -> list[list[T]]:
    """``items`` (shards, in order) dealt into contiguous units of about ``target_s`` seconds of planned work
    each, so that a unit's runner overhead (a task or flow run) stays a small share of its work: as many units as
    the work fills (at least one, at most one per item). ``seconds``: each item's planned work, or one figure for
    every item. Units are balanced by that work (the largest unit as small as a contiguous split allows), so a
    shard holding a few long documents does not make one unit the whole wall while another worker idles; with
    one figure for all, by count. Contiguous, so a unit is a range of shard numbers; the shard layout itself (and
    resume, which goes by shard) does not change."""
    n = len(items)
    if n == 0:
        return []
    if isinstance(seconds, (int, float)):
        units = n if target_s <= 0 else max(1, min(n, int(seconds * n // target_s)))
        return _by_count(items, units)
    work = [max(0.0, float(x)) for x in seconds]
    if len(work) != n:
        raise ValueError(f"deal_units: {len(work)} planned figures for {n} items")
    total = sum(work)
    units = n if target_s <= 0 else max(1, min(n, int(total // target_s)))
    if units >= n:
        return [[x] for x in items]
    if total <= 0 or max(work) == min(work):
        return _by_count(items, units)
    return [[items[i] for i in r] for r in _balanced(work, units)]


def _by_count(items: Sequence[T], units: int) -> list[list[T]]:
    base, extra = divmod(len(items), units)
    out, i = [], 0
    for u in range(units):
        size = base + (1 if u < extra else 0)
        out.append(list(items[i:i + size]))
        i += size
    return out


def _balanced(work: list[float], units: int) -> list[range]:
    """``units`` contiguous ranges of ``work`` whose largest sum is the smallest a contiguous split allows (to a
    millionth of the total): bisect that largest sum, packing greedily; then split ranges of several items until
    there are ``units`` (splitting never raises the largest sum)."""

    def pack(cap: float) -> list[range]:
        out, start, acc = [], 0, 0.0
        for i, w in enumerate(work):
            if i > start and acc + w > cap:
                out.append(range(start, i))
                start, acc = i, 0.0
            acc += w
        out.append(range(start, len(work)))
        return out

    lo, hi = max(work), sum(work)
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        if len(pack(mid)) <= units:
            hi = mid
        else:
            lo = mid
    ranges = pack(hi)
    while len(ranges) < units:  # fewer ranges than units: split the one of most work that has two items or more
        k = max((i for i, r in enumerate(ranges) if len(r) > 1), key=lambda i: sum(work[j] for j in ranges[i]))
        r = ranges[k]
        half, acc, cut = sum(work[j] for j in r) / 2, 0.0, r.start + 1
        for j in r[:-1]:  # the cut nearest half the range's work, leaving an item on each side
            acc += work[j]
            cut = j + 1
            if acc >= half:
                break
        ranges[k:k + 1] = [range(r.start, cut), range(cut, r.stop)]
    return ranges


@runtime_checkable
class ShardRunner(Protocol):
    """Runs the shards of a job, then catch-up; returns ``{"shards", "failed_shards", "catch_up"}``."""

    name: str

    def run(self, ctx: execution.ApplyContext, job: ShardJob) -> dict: ...


def failure_of(shard: int, err: BaseException) -> dict:
    """A failed shard as the run report shows it: the shard and a one-line reason."""
    return {"shard": shard, "reason": f"{type(err).__name__}: {err}".splitlines()[0]}


NO_CATCH_UP = {"rounds": [], "documents": 0}


def summarize(results: list[dict], failed: list[dict], catch_up: Callable[[], dict]) -> dict:
    """The summary both runners return: catch-up only when every shard finished without failures."""
    clean = not failed and not any(r["failures"] for r in results)
    return {"shards": results, "failed_shards": failed, "catch_up": catch_up() if clean else dict(NO_CATCH_UP)}


class ThreadRunner:
    """Shards on a thread pool in this process: scans and chunking of one shard overlap another's
    embedding (the embedder serialises model calls)."""

    name = "in-process"
    embeds_elsewhere = False  # the shards embed here, with the apply's embedder

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or settings.shard_workers()

    def run(self, ctx: execution.ApplyContext, job: ShardJob) -> dict:
        def one(k: int) -> dict:
            ctx.fence()  # a lease lost in another shard stops this one before it reads or embeds anything
            return execution.run_shard(ctx, k, only=job.only, removed=job.removed).as_dict()

        results: list[dict] = []
        failed: list[dict] = []
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="reindex-shard") as pool:
            futures = [(k, pool.submit(one, k)) for k in job.shards]
            for k, fut in futures:
                try:
                    results.append(fut.result())
                except Exception as err:  # noqa: BLE001 - a failed shard is reported; the others go on
                    failed.append(failure_of(k, err))
        return summarize(results, failed, lambda: execution.catch_up(ctx))

    def __repr__(self) -> str:
        return f"ThreadRunner(workers={self.workers})"


def describe(runner: Any) -> str:
    """The runner's name for messages and reports."""
    return getattr(runner, "name", type(runner).__name__)
