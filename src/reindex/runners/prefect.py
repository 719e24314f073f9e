"""The Prefect shard runner: apply's shards as task runs of the ``reindex-apply`` flow.

Tasks are thin: one library call each. A shard task gets its shard as plain data (a
:class:`reindex.engine.workers.ShardSpec` as a dict) and runs it with :func:`reindex.engine.workers.run_shard_spec`, in
whatever process the task runner puts it: a thread of this process (``threads``: the spec resolves to the
coordinator's own context), or a Dask worker process through prefect-dask (``dask-processes:N``,
``dask:tcp://HOST:PORT``: the worker rebuilds the context from the spec; with the embedded store it stages
its writes and the flow, in the coordinator's process, commits them). The flow body and the catch-up
task run in the coordinator's process and use its context (:func:`reindex.engine.workers.hosted_context`).
Nothing is hashed for caching or persisted as a result. Shard tasks are not retried by Prefect: the call
layer inside a shard already retries transient failures (``execution.retry_transient``, the S3 client),
and a second layer here multiplied attempts (3 × 5 × 5) without helping. A failed shard is reported;
re-running the apply resumes.

Work-pool fan-out (``prefect-pool:POOL[:N]``). The flow body, in the coordinator's process, deals the
shards into groups (one per shard, or N) and starts each group as a flow run of the ``reindex-shard/POOL``
deployment (:data:`shard_flow`, created by ``reindex deploy-shards --pool POOL``) with ``run_deployment``:
child flow runs that any worker of the pool picks up, each in a process of its own, here or on another
machine. A shard flow run runs its specs one after another (one embedder per flow-run process) and
publishes each shard's result in the state store (:func:`reindex.engine.workers.publish_result`); the
coordinator collects them, commits staged writes (the embedded store) and reports progress as they come.
A flow run that fails or crashes (its process killed, its machine gone) before publishing all its shards
is started once more for the shards it left; if that fails too, they are failed shards and the next apply
resumes them. A run no worker picks up within ``REINDEX_POOL_START_TIMEOUT_S`` is cancelled.

With no API configured, Prefect starts a temporary local server; its start-up timeout is raised to
:data:`reindex.foundation.settings.EPHEMERAL_STARTUP_TIMEOUT_S` (Prefect's 20 s default is exceeded on a loaded 2-core
machine) when this module is imported before Prefect, and any failure to reach an API becomes one
:class:`~reindex.errors.RunnerError` line naming the limit Prefect applied and the two ways out."""

from __future__ import annotations

import contextlib
import contextvars
import time
import uuid
from typing import Any

from reindex.foundation.settings import apply_offline_defaults

apply_offline_defaults()  # also the temporary server's start-up limit, before Prefect reads its settings

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

from reindex.engine import execution, workers  # noqa: E402

from reindex.foundation import settings
from reindex.errors import ConfigError, LockLost, ReindexError, RunnerError  # noqa: E402
from reindex.engine.eta import progress_line  # noqa: E402
from reindex.foundation.orphans import mark_owner  # noqa: E402
from reindex.runners import ShardJob, TaskRunnerSpec, deal_units, failure_of, parse_task_runner, summarize  # noqa: E402

__all__ = [
    "APPROVAL_REQUEST_KEY",
    "PAUSING_FLOWS",
    "PrefectRunner",
    "SHARD_FLOW",
    "shard_deployment_name",
    "shard_flow",
    "api_failure_line",
    "apply_flow",
    "catch_up_task",
    "check_api",
    "check_shard_deployment",
    "make_task_runner",
    "resume_waiting_run",
    "run_shard_task",
    "selected_apply_flow",
    "using_task_runner",
    "waiting_runs",
]

_TASK_RUNNER: contextvars.ContextVar[str | None] = contextvars.ContextVar("reindex_task_runner", default=None)
WAYS_OUT = ("run it in-process with `reindex apply --no-prefect PLAN`, or start a Prefect server "
            "(`prefect server start`) and set PREFECT_API_URL to it")


def _run_shard(spec: dict) -> dict:
    """Build or sync one shard."""
    return workers.run_shard_spec(spec)


# Not written as a decorator: Dask pickles the task's function by reference, which fails when the
# module attribute of the same name is the Task rather than the function.
run_shard_task = task(name="run-shard", retries=0, cache_policy=NO_CACHE, persist_result=False,
                      task_run_name="shard-{spec[shard]}")(_run_shard)


@task(name="catch-up", retries=0, cache_policy=NO_CACHE, persist_result=False)
def catch_up_task(run_key: str) -> dict:
    """Replay documents that changed during the build."""
    return execution.catch_up(workers.hosted_context(run_key))


def _apply(run_key: str, specs: list[dict], pool: str | None = None) -> dict:
    """Build the shadow population (or sync documents in place) shard by shard, then catch up; with
    ``pool`` (a ``prefect-pool:POOL[:N]`` spec) the shards run as flow runs on that work pool."""
    logger = get_run_logger()
    ctx = workers.hosted_context(run_key)  # the flow runs in the coordinator's process
    shards = [s["shard"] for s in specs]
    progress_id = create_progress_artifact(progress=0.0, description=f"reindex apply: {len(shards)} shards")

    def progress(n: int) -> None:
        """The artifact after ``n`` shards: tokens done / planned (shards without tokens), rate, ETA."""
        pct, line = 100.0 * n / max(len(shards), 1), f"reindex apply: shards {n}/{len(shards)}"
        if ctx.meter is not None:
            snap = ctx.meter.snapshot(time.perf_counter())
            if snap["tokens_planned"]:
                pct = 100.0 * snap["tokens_done"] / snap["tokens_planned"]
            line = f"reindex apply: {progress_line({**snap, 'shards_done': n, 'shards_total': len(shards)})}"
        update_progress_artifact(progress_id, progress=min(100.0, pct), description=line)
    if pool:
        results, failed = _fan_out(ctx, specs, parse_task_runner(pool), progress)
        for f in failed:
            logger.error("shard %s failed: %s", f["shard"], f["reason"])
    else:
        futures = [run_shard_task.submit(s) for s in specs]
        results, failed = [], []
        for n, (k, fut) in enumerate(zip(shards, futures), 1):
            try:
                r = fut.result()
                if r.get("staged"):  # a worker process staged its writes: this process is the store's writer
                    r["commit_seconds"] = round(workers.commit_staged(ctx, r["staged"]), 3)
                workers.report_remote(ctx, r)
                results.append(r)
            except Exception as err:  # noqa: BLE001 - a failed shard is reported; the others go on
                failed.append(failure_of(k, err))
                logger.error("shard %s failed: %s", k, failed[-1]["reason"])
            progress(n)
    summary = summarize(results, failed, lambda: catch_up_task(run_key))
    create_markdown_artifact(key="reindex-apply-report", markdown=_markdown(summary),
                             description="reindex apply: per-shard counts")
    return summary


# Not written as a decorator, for the same reason as run_shard_task: a Dask task runner pickles the
# flow context, and a function whose module attribute is the Flow would be pickled by value.
apply_flow = flow(name="reindex-apply", persist_result=False, log_prints=False,
                  task_runner=ThreadPoolTaskRunner(max_workers=settings.shard_workers()))(_apply)


# --------------------------------------------------------------------------------------------
# Work-pool fan-out: shard groups as flow runs of the reindex-shard deployment
# --------------------------------------------------------------------------------------------

SHARD_FLOW = "reindex-shard"
POOL_POLL_S = 1.0
POOL_ATTEMPTS = 2  # a flow run that fails or crashes is started once more for the shards it left


def shard_deployment_name(pool: str) -> str:
    """The deployment a ``prefect-pool:POOL`` spec starts flow runs of: ``reindex-shard/POOL``."""
    return f"{SHARD_FLOW}/{pool}"


@flow(name=SHARD_FLOW, persist_result=False, log_prints=False)
def shard_flow(specs: list[dict]) -> list[int]:
    """Run shards of an apply from plain data, one after another, and publish each one's result."""
    done = []
    for spec in specs:
        try:
            result = run_shard_task(spec)
        except LockLost:
            raise  # the coordinator lost its lock: nothing more is written, the flow run fails
        except Exception as err:  # noqa: BLE001 - a failed shard is reported; the group's other shards go on
            result = {"error": failure_of(spec["shard"], err)["reason"]}
        workers.publish_result(workers.ShardSpec.from_dict(spec), result)
        done.append(spec["shard"])
    return done


def check_shard_deployment(pool: str) -> None:
    """RunnerError, with the commands that fix it, unless the deployment ``reindex-shard/POOL`` exists."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    name = shard_deployment_name(pool)
    try:
        with get_client(sync_client=True) as client:
            client.read_deployment_by_name(name)
    except ObjectNotFound:
        raise RunnerError(f"the Prefect API at {settings.prefect_api_url()} has no deployment {name}: create it with "
                          f"`reindex deploy-shards --pool {pool}` and start workers with `prefect worker start --pool "
                          f"{pool}`") from None


def _groups(specs: list[dict], n: int | None) -> list[list[dict]]:
    """Shards dealt round-robin into ``n`` groups; without ``n``, into contiguous units of about
    ``apply.unit_seconds`` of planned work each (:func:`reindex.runners.deal_units`): a flow run costs seconds to
    start, so a unit of a few milliseconds of work would be all overhead."""
    if n is None:
        return deal_units(specs, [s.get("planned_seconds", 0.0) for s in specs], specs[0].get("unit_seconds", 0.0)) \
            if specs else []
    n = min(n, len(specs))
    return [specs[i::n] for i in range(n)]


def _fan_out(ctx: execution.ApplyContext, specs: list[dict], spec: TaskRunnerSpec,
             progress: Any) -> tuple[list[dict], list[dict]]:
    """Run ``specs`` as flow runs on the work pool of ``spec`` (see the module doc); (results, failed)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment

    if not specs:
        return [], []
    assert spec.pool is not None
    name = shard_deployment_name(spec.pool)
    by_shard = {s["shard"]: s for s in specs}
    tag = uuid.uuid4().hex[:8]
    runs: dict[Any, dict] = {}  # flow run id -> {"shards", "attempt", "submitted", "name"}
    outstanding = set(by_shard)
    results: dict[int, dict] = {}
    failed: dict[int, dict] = {}
    start_timeout = settings.pool_start_timeout_s()
    reported = 0

    def submit(shards: list[int], attempt: int) -> None:
        run_name = f"shards-{'-'.join(map(str, shards))}-{ctx.run[:8]}-{tag}" + (f"-again{attempt - 1}" if attempt > 1 else "")
        fr = run_deployment(name, parameters={"specs": [by_shard[k] for k in shards]}, timeout=0,
                            flow_run_name=run_name, tags=["reindex", f"index:{ctx.index}"])
        runs[fr.id] = {"shards": set(shards), "attempt": attempt, "submitted": time.monotonic(), "name": run_name}

    def fail(shards: set[int], reason: str) -> None:
        for k in sorted(shards & outstanding):
            failed[k] = {"shard": k, "reason": reason}
        outstanding.difference_update(shards)

    with get_client(sync_client=True) as client:
        for group in _groups(specs, spec.workers):
            submit([s["shard"] for s in group], 1)
        while outstanding:
            active = [rid for rid, r in runs.items() if r["shards"] & outstanding]
            # States first, then results: a run seen finished has published everything it ever will.
            states = {fr.id: fr for fr in client.read_flow_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=active)))} if active else {}
            try:
                for k, r in sorted(workers.collect_results(ctx, outstanding).items()):
                    outstanding.discard(k)
                    if "error" in r:
                        failed[k] = {"shard": k, "reason": r["error"]}
                        continue
                    try:
                        if r.get("staged"):  # a worker staged its writes: this process is the store's writer
                            r["commit_seconds"] = round(workers.commit_staged(ctx, r["staged"]), 3)
                        workers.report_remote(ctx, r)
                        results[k] = r
                    except LockLost:
                        outstanding.add(k)
                        raise
                    except Exception as err:  # noqa: BLE001 - a failed shard is reported; the others go on
                        failed[k] = failure_of(k, err)
                for rid in active:
                    fr, run = states.get(rid), runs[rid]
                    left = run["shards"] & outstanding
                    if fr is None or fr.state is None or not left:
                        continue
                    if fr.state.is_final():
                        why = f"flow run {run['name']} of {name} ended {fr.state.type.value}" + (
                            f": {fr.state.message}".splitlines()[0] if fr.state.message else "")
                        if run["attempt"] < POOL_ATTEMPTS:
                            if ctx.lease is not None:
                                ctx.lease.check(ctx.state)  # never start more work after losing the lock
                            run["shards"] -= left
                            submit(sorted(left), run["attempt"] + 1)
                        else:
                            fail(left, why)
                    elif fr.state.type == StateType.SCHEDULED and time.monotonic() - run["submitted"] > start_timeout:
                        _cancel(client, [fr], "no worker picked it up")
                        fail(left, f"no worker of work pool {spec.pool!r} picked up flow run {run['name']} within "
                                   f"{start_timeout:.0f} s (REINDEX_POOL_START_TIMEOUT_S); start one with "
                                   f"`prefect worker start --pool {spec.pool}` and run the apply again")
            except LockLost as err:  # stop the runs still out: their workers would stop at their next write anyway
                out = [rid for rid, r in runs.items() if r["shards"] & outstanding]
                _cancel(client, client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=out))), str(err))
                fail(set(outstanding), failure_of(-1, err)["reason"])
                break
            if len(results) + len(failed) != reported:
                reported = len(results) + len(failed)
                progress(reported)
            if outstanding:
                time.sleep(POOL_POLL_S)
    order = [s["shard"] for s in specs]
    return [results[k] for k in order if k in results], [failed[k] for k in order if k in failed]


def _cancel(client: Any, flow_runs: list[Any], why: str) -> None:
    """Cancel flow runs that have not finished (a running one is stopped by its worker)."""
    from prefect.states import Cancelled, Cancelling

    for fr in flow_runs:
        if fr.state is not None and not fr.state.is_final():
            with contextlib.suppress(Exception):  # best effort: a run that finishes meanwhile stays finished
                client.set_flow_run_state(fr.id, (Cancelling if fr.infrastructure_pid else Cancelled)(message=why),
                                          force=True)


def _markdown(summary: dict) -> str:
    rows = ["| shard | worker | docs | chunks | reused (old) | reused (target) | embedded | seconds | skipped |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["shards"]:
        rows.append(f"| {r['shard']} | {r.get('worker', '')} | {r['documents']} | {r['chunks']} | {r['reused_old']} | "
                    f"{r['reused_target']} | {r['embedded']} | {r['seconds']:.1f} | {'yes' if r['skipped'] else ''} |")
    fails = "".join(f"\n- shard {f['shard']}: {f['reason']}" for f in summary["failed_shards"])
    return "# reindex apply\n\n" + "\n".join(rows) + (f"\n\n## Failed shards{fails}" if fails else "") + \
        f"\n\nCatch-up: {summary['catch_up']['documents']} documents replayed.\n"


def make_task_runner(spec: str | None) -> Any:
    """The Prefect task runner of a task-runner spec (:func:`reindex.runners.parse_task_runner`):
    ``threads[:N]`` | ``dask`` (local cluster of threads) | ``dask-processes[:N]`` (local cluster of
    processes) | ``dask:tcp://host:8786`` (an existing cluster; shared state and source). For
    ``prefect-pool:POOL`` the shards are flow runs on the pool, and the flow's own tasks run in threads."""
    parsed = parse_task_runner(spec)
    if parsed.kind == "prefect-pool":  # shards go to the pool; the flow's own tasks (catch-up) run in threads
        return ThreadPoolTaskRunner(max_workers=settings.shard_workers())
    if parsed.kind == "threads":
        return ThreadPoolTaskRunner(max_workers=parsed.workers or settings.shard_workers())
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError(f"task runner {spec!r} needs prefect-dask: pip install prefect-dask") from None
    if parsed.kind == "dask-cluster":
        return DaskTaskRunner(address=parsed.address)
    if parsed.kind == "dask-processes":
        return DaskTaskRunner(cluster_kwargs={"n_workers": parsed.workers, "processes": True, "threads_per_worker": 1,
                                              "dashboard_address": None})
    return DaskTaskRunner(cluster_kwargs={"processes": False, "n_workers": 1,
                                          "threads_per_worker": settings.shard_workers()})


@contextlib.contextmanager
def using_task_runner(spec: str | None):
    """Run applies started in this context with the task runner ``spec`` (see make_task_runner)."""
    token = _TASK_RUNNER.set(spec)
    try:
        yield
    finally:
        _TASK_RUNNER.reset(token)


def selected_apply_flow(spec: str | None = None) -> Any:
    """``apply_flow`` with the task runner ``spec``, else the one chosen by using_task_runner /
    REINDEX_TASK_RUNNER, if any."""
    spec = spec or _TASK_RUNNER.get() or settings.task_runner_spec()
    return apply_flow if not spec else apply_flow.with_options(task_runner=make_task_runner(spec))


def check_api(timeout_s: float = 5.0) -> None:
    """Fail fast, in one line, when a configured Prefect API does not answer its health check."""
    import urllib.error
    import urllib.request

    url = settings.prefect_api_url()
    if not url:
        return  # Prefect will start a temporary local server
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s) as r:  # noqa: S310 - the user's API
            r.read()
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise RunnerError(f"the Prefect API at {url} does not answer ({type(err).__name__}: {err}); "
                          f"{WAYS_OUT}".replace("\n", " ")) from None


def _in_flow() -> bool:
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None


class PrefectRunner:
    """Runs the ``reindex-apply`` flow in this process: against the configured API, as a child flow run
    inside another flow, or on a temporary local server when no API is configured. ``task_runner``: a
    task-runner spec for its shard tasks (default: the one in force, see selected_apply_flow)."""

    def __init__(self, task_runner: str | None = None) -> None:
        if task_runner is not None:
            parse_task_runner(task_runner)  # a bad spec fails before any work
        self.task_runner = task_runner

    @property
    def pool(self) -> str | None:
        """The ``prefect-pool:…`` spec in force (this runner's, else using_task_runner's / REINDEX_TASK_RUNNER's)."""
        parsed = parse_task_runner(self.task_runner or _TASK_RUNNER.get() or settings.task_runner_spec())
        return parsed.name if parsed.kind == "prefect-pool" else None

    @property
    def name(self) -> str:
        return self.pool or "prefect"

    @property
    def embeds_elsewhere(self) -> bool:
        """The shard tasks run in other processes (Dask workers, flow runs on a pool): they make their embedders."""
        return parse_task_runner(self.task_runner or _TASK_RUNNER.get() or settings.task_runner_spec()).elsewhere

    def run(self, ctx: execution.ApplyContext, job: ShardJob) -> dict:
        pool = self.pool
        if pool and not settings.prefect_api_url():
            raise RunnerError(f"task runner {pool} needs a Prefect server that the pool's workers reach too: "
                              "start one (`prefect server start`) and set PREFECT_API_URL to it")
        if not _in_flow():
            check_api()
            mark_owner()  # a temporary API server started now inherits the marker; see reindex.foundation.orphans
        if pool:
            check_shard_deployment(parse_task_runner(pool).pool or "")
        specs = [s.as_dict() for s in workers.shard_specs(ctx, job.shards, job.only, job.removed,
                                                          seconds=job.planned_seconds(), unit_seconds=job.unit_seconds)]
        try:
            with workers.hosting(ctx):
                return selected_apply_flow(self.task_runner)(workers.host_key(ctx), specs, pool=pool)
        except ReindexError:
            raise
        except Exception as err:  # noqa: BLE001 - Prefect's own failures (API, temporary server) become one line
            if _is_api_failure(err):
                raise RunnerError(api_failure_line(err)) from None
            raise

    def __repr__(self) -> str:
        return f"PrefectRunner({self.task_runner!r})" if self.task_runner else "PrefectRunner()"


def api_failure_line(err: BaseException) -> str:
    """One line for a Prefect API failure: the cause, then the two ways out (a temporary server that did not
    start in time: :func:`reindex.foundation.settings.temporary_server_failure`)."""
    limit = float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())  # what Prefect waited, not the environment
    return settings.temporary_server_failure(err, limit) or (
        f"Prefect could not run the apply: {type(err).__name__}: {err}".splitlines()[0] + f"; {WAYS_OUT}")


def _is_api_failure(err: BaseException) -> bool:
    """Whether an exception from a flow call means Prefect's API (or its temporary server) failed."""
    text = str(err)
    return (type(err).__module__.startswith("httpx") or isinstance(err, (ConnectionError, TimeoutError))
            or "ephemeral Prefect API server" in text or "Prefect API" in text)


# --------------------------------------------------------------------------------------------
# Runs waiting for approval (read and resumed by `reindex runs` / `reindex approve`)
# --------------------------------------------------------------------------------------------
# A ``reindex-reindex`` or ``reindex-sync`` run that pauses for approval first stores its request
# (plan file, plan hash, footprint, deadline) as a flow run input under APPROVAL_REQUEST_KEY; the
# functions below find paused runs by that key and resume them with the approval form's fields.

APPROVAL_REQUEST_KEY = "reindex-approval-request"
PAUSING_FLOWS = ("reindex-reindex", "reindex-sync")


def waiting_runs() -> list[dict]:
    """Paused runs of the pausing flows that published an approval request, oldest first:
    ``{"flow_run_id", "flow_run_name", "flow", "paused_at", "request"}``. Empty when no Prefect API is
    configured (a temporary local server has no paused runs to find)."""
    import json

    if not settings.prefect_api_url():
        return []
    check_api()
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound

    out = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=list(PAUSING_FLOWS))),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))),
        )
        for fr in runs:
            try:
                raw = client.read_flow_run_input(fr.id, APPROVAL_REQUEST_KEY)
            except ObjectNotFound:
                continue  # paused for another reason, or before it published its request
            flow = client.read_flow(fr.flow_id).name
            out.append({"flow_run_id": str(fr.id), "flow_run_name": fr.name, "flow": flow,
                        "paused_at": fr.state.timestamp.isoformat(timespec="seconds") if fr.state else None,
                        "request": json.loads(raw)})
    return sorted(out, key=lambda r: r["paused_at"] or "")


def resume_waiting_run(flow_run_id: str, *, approve: bool, approver: str, reason: str) -> None:
    """Resume a paused run with the approval form filled in (``approve`` false rejects); raises
    RunnerError when the run is no longer paused."""
    from prefect.exceptions import FlowPauseTimeout, NotPausedError
    from prefect.flow_runs import resume_flow_run

    try:
        resume_flow_run(flow_run_id, run_input={"approve": approve, "approver": approver, "reason": reason})
    except (NotPausedError, FlowPauseTimeout, RuntimeError) as err:
        raise RunnerError(f"flow run {flow_run_id} could not be resumed ({type(err).__name__}: {err}); "
                          "it may have been decided or timed out meanwhile") from None
