"""The Dask shard runner: apply's shards on a Dask cluster through dask.distributed, without Prefect.

``dask-processes:N`` starts a local cluster of N worker processes for the apply (one shard at a time
each: one model per process) and stops it at the end; ``dask:tcp://HOST:PORT`` uses a running cluster
(``dask scheduler`` + ``dask worker`` processes started from the project's environment, here or on other
machines that see the same state and source). ``dask`` is a local cluster of threads in this process.

Each shard is submitted as a :class:`reindex.engine.workers.ShardSpec` (plain data) to
:func:`reindex.engine.workers.run_shard_spec`; no object of this process travels. As results arrive, this
process (the coordinator, holding the index lock) commits shards that staged their writes (the embedded
store: it is the store's only writer) and turns their counts into progress events. A worker that dies
mid-shard (SIGKILL, a lost machine) is noticed by the scheduler, which runs the shard again on another
worker; its staged batches are reused. A shard that raises is a failed shard; once the coordinator
loses its lock, the shards still out are cancelled and reported failed."""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any, Iterator

from distributed import Client, LocalCluster, as_completed

from reindex.adapters.embedders import import_names
from reindex.engine import execution, workers

from reindex.foundation import settings
from reindex.errors import LockLost, RunnerError
from reindex.runners import ShardJob, TaskRunnerSpec, deal_units, failure_of, parse_task_runner, summarize

__all__ = ["DaskRunner"]

CONNECT_TIMEOUT_S = 30


class DaskRunner:
    """Shards on a Dask cluster (see the module doc); ``spec`` is a task-runner spec of a dask kind."""

    name = "dask"

    def __init__(self, spec: str | TaskRunnerSpec = "dask-processes:2") -> None:
        self.spec = parse_task_runner(spec) if isinstance(spec, str) else spec
        if not self.spec.dask:
            raise RunnerError(f"DaskRunner needs a dask task-runner spec, not {self.spec.kind}")
        self.name = self.spec.name
        # Worker processes make their own embedder: the coordinator loads none unless it embeds (a catch-up).
        self.embeds_elsewhere = self.spec.elsewhere

    @contextlib.contextmanager
    def _client(self, preload: tuple[str, ...] = ()) -> Iterator[Client]:
        if self.spec.kind == "dask-cluster":
            try:
                client = Client(self.spec.address, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as err:
                raise RunnerError(f"the Dask scheduler at {self.spec.address} does not answer "
                                  f"({type(err).__name__}: {err})".splitlines()[0] + "; start one (`dask scheduler` and "
                                  "`dask worker ADDRESS`), or run in-process without --task-runner") from None
            with client:
                yield client
            return
        processes = self.spec.kind == "dask-processes"
        kw: dict[str, Any] = ({"n_workers": self.spec.workers, "threads_per_worker": 1, "processes": True}
                              if processes else
                              {"n_workers": 1, "threads_per_worker": settings.shard_workers(), "processes": False})
        with _forked_workers(preload if processes else None), \
                LocalCluster(dashboard_address=None, silence_logs=logging.ERROR, **kw) as cluster, Client(cluster) as client:
            yield client

    def run(self, ctx: execution.ApplyContext, job: ShardJob) -> dict:
        specs = workers.shard_specs(ctx, job.shards, job.only, job.removed, seconds=job.planned_seconds(),
                                    unit_seconds=job.unit_seconds)
        units = deal_units(specs, job.planned_seconds(), job.unit_seconds)
        results: dict[int, dict] = {}
        failed: dict[int, dict] = {}
        tag = uuid.uuid4().hex[:8]
        preload = ("reindex.engine.workers", *import_names(ctx.cfg.vector))
        with self._client(preload) as client, workers.hosting(ctx):
            futures = {client.submit(workers.run_shard_unit, unit, key=f"reindex-shards-{unit[0].shard}-"
                                     f"{unit[-1].shard}-{tag}", pure=False): [s.shard for s in unit] for unit in units}
            for fut in as_completed(list(futures)):
                mine = futures[fut]
                try:
                    for r in fut.result():
                        k = r["shard"]
                        if "error" in r:
                            failed[k] = {"shard": k, "reason": r["error"]}
                            continue
                        try:
                            if r.get("staged"):
                                r["commit_seconds"] = round(workers.commit_staged(ctx, r["staged"]), 3)
                            workers.report_remote(ctx, r)
                            results[k] = r
                        except LockLost:
                            raise
                        except Exception as err:  # noqa: BLE001 - a failed shard is reported; the others go on
                            failed[k] = failure_of(k, err)
                except LockLost as err:
                    for other, shards in futures.items():
                        other.cancel()
                        for s in shards:  # stopped: the coordinator no longer holds the index
                            if s not in results and s not in failed:
                                failed[s] = failure_of(s, err)
                except Exception as err:  # noqa: BLE001 - a failed unit's shards are reported; the others go on
                    for k in mine:
                        if k not in results and k not in failed:
                            failed[k] = failure_of(k, err)
        ordered = [results[k] for k in job.shards if k in results]
        return summarize(ordered, [failed[k] for k in job.shards if k in failed], lambda: execution.catch_up(ctx))

    def __repr__(self) -> str:
        return f"DaskRunner({self.name!r})"


@contextlib.contextmanager
def _forked_workers(preload: tuple[str, ...] | None) -> Iterator[None]:
    """Worker processes forked from a server that imported ``preload`` once (multiprocessing's forkserver), not
    spawned to import everything again: a spawned worker imports dask.distributed, reindex and the model library
    itself (~1 CPU-s with the hash embedder, ~6 with sentence-transformers, per worker). The forkserver starts
    from the nanny, after it set the workers' environment (``OMP_NUM_THREADS=1``…), so the libraries it imports
    read that. Nothing changes where there is no forkserver (Windows) or for a cluster of threads."""
    import multiprocessing

    if preload is None or "forkserver" not in multiprocessing.get_all_start_methods():
        yield
        return
    import dask
    from distributed.utils import get_mp_context

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        # distributed sets its own preload list on first use; ours goes after it, before the server starts.
        get_mp_context().set_forkserver_preload(["distributed", *preload])
        yield
