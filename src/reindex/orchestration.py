"""Prefect flows and tasks; the only module that imports prefect.

Tasks are thin: one library call each, retried only on TransientError. Heavy objects (stores,
embedders) never pass through Prefect: tasks get a run key and look the context up in-process, so
nothing is pickled, hashed for caching or persisted as a result."""

from __future__ import annotations

import os
import threading
from typing import Any

os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402

from reindex import execution  # noqa: E402
from reindex.errors import TransientError  # noqa: E402

_RUNS: dict[str, execution.ApplyContext] = {}
_LOCK = threading.Lock()


def register(key: str, ctx: execution.ApplyContext) -> None:
    with _LOCK:
        _RUNS[key] = ctx


def unregister(key: str) -> None:
    with _LOCK:
        _RUNS.pop(key, None)


def _transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only when it failed with a TransientError."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:  # noqa: BLE001 - anything else is terminal for this shard
        return False
    return False


@task(name="run-shard", retries=3, retry_delay_seconds=[1, 2, 4], retry_jitter_factor=0.5,
      retry_condition_fn=_transient_only, cache_policy=NO_CACHE, persist_result=False,
      task_run_name="shard-{shard}")
def run_shard_task(run_key: str, shard: int, only: list[str] | None, removed: list[str]) -> dict:
    """Build or sync one shard."""
    return execution.run_shard(_RUNS[run_key], shard, only=set(only) if only is not None else None,
                               removed=set(removed)).as_dict()


@task(name="catch-up", retries=3, retry_delay_seconds=[1, 2, 4], retry_condition_fn=_transient_only,
      cache_policy=NO_CACHE, persist_result=False)
def catch_up_task(run_key: str) -> dict:
    """Replay documents that changed during the build."""
    return execution.catch_up(_RUNS[run_key])


def _runner() -> ThreadPoolTaskRunner:
    return ThreadPoolTaskRunner(max_workers=int(os.environ.get("REINDEX_SHARD_WORKERS", "4")))


@flow(name="reindex-apply", persist_result=False, log_prints=False, task_runner=_runner())
def apply_flow(run_key: str, shards: list[int], only: list[str] | None = None, removed: list[str] | None = None,
               catch_up: bool = True) -> dict:
    """Build the shadow population (or sync documents in place) shard by shard, then catch up."""
    logger = get_run_logger()
    progress_id = create_progress_artifact(progress=0.0, description=f"reindex apply: {len(shards)} shards")
    futures = [run_shard_task.submit(run_key, k, only, removed or []) for k in shards]
    results, failures = [], []
    for n, (k, fut) in enumerate(zip(shards, futures), 1):
        try:
            results.append(fut.result())
        except Exception as err:  # noqa: BLE001 - a failed shard is reported; the others go on
            failures.append({"shard": k, "reason": f"{type(err).__name__}: {err}".splitlines()[0]})
            logger.error("shard %s failed: %s", k, failures[-1]["reason"])
        update_progress_artifact(progress_id, progress=100.0 * n / max(len(shards), 1))
    caught = {"rounds": [], "documents": 0}
    if catch_up and not failures and not any(r["failures"] for r in results):
        caught = catch_up_task(run_key)
    summary = {"shards": results, "failed_shards": failures, "catch_up": caught}
    create_markdown_artifact(
        key="reindex-apply-report",
        markdown=_markdown(summary),
        description="reindex apply: per-shard counts",
    )
    return summary


def _markdown(summary: dict) -> str:
    rows = ["| shard | docs | chunks | reused (old) | reused (target) | embedded | skipped |", "|---|---|---|---|---|---|---|"]
    for r in summary["shards"]:
        rows.append(f"| {r['shard']} | {r['documents']} | {r['chunks']} | {r['reused_old']} | {r['reused_target']} | "
                    f"{r['embedded']} | {'yes' if r['skipped'] else ''} |")
    fails = "".join(f"\n- shard {f['shard']}: {f['reason']}" for f in summary["failed_shards"])
    return "# reindex apply\n\n" + "\n".join(rows) + (f"\n\n## Failed shards{fails}" if fails else "") + \
        f"\n\nCatch-up: {summary['catch_up']['documents']} documents replayed.\n"


def run_apply(ctx: execution.ApplyContext, shards: list[int], *, only: list[str] | None = None,
              removed: list[str] | None = None) -> dict:
    """Run the ``reindex-apply`` flow in this process (ephemeral API unless PREFECT_API_URL is set)."""
    key = f"{ctx.run}-{os.getpid()}-{threading.get_ident()}"
    register(key, ctx)
    try:
        return apply_flow(key, shards, only, removed)
    finally:
        unregister(key)
