"""Prefect driver: the scheduled flows ``reindex-sync``, ``reindex-reindex``, ``reindex-gc``, their
deployments and ``serve``. Like the CLI, these flows sit at the edge and call ``reindex.api``; the shard
runner they apply with (the ``reindex-apply`` flow, a child flow run here) lives in
:mod:`reindex.runners.prefect`. Prefect is imported only by these two modules.

How runs of one index are kept apart (issue 13). A run that pauses for approval must not hold a
*deployment* concurrency slot: Prefect releases that slot (and revokes its lease) when the run goes
Running → Paused, but the flow engine keeps renewing the lease it got at start (a fixed 300 s lease
renewed every 225 s, ``prefect/flow_engine.py``); the first renewal after the pause gets ``410 Gone`` and
the engine cancels the run ("Terminating execution to prevent over-allocation") — ~225 s after it
started, whatever it is doing. So ``reindex-reindex`` and ``reindex-sync`` have no deployment
concurrency limit. They serialise on the index's global concurrency limit ``reindex-index-<index>``
(one slot), taken by the flow process itself with a lease it renews every ¾ of
``REINDEX_INDEX_LEASE_S`` for as long as the process lives: across the pause, the apply and the
cutover. Prefect never releases it on a state change, so a paused run keeps its index; if the process
dies, the server frees the slot when the lease runs out. ``reindex-gc`` never pauses and keeps its
deployment limit as well as the index slot.

Lines: one Prefect boundary (with runners/prefect.py, per the layer test's owner rule), so the flows, the
approval protocol around the pause, the deployments and the approval notification stay together."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from reindex import reports
from reindex.domain.kinds import ChangeKind
from reindex.foundation.settings import apply_offline_defaults

apply_offline_defaults()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_markdown_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402

from reindex import api  # noqa: E402
from reindex.foundation import settings  # noqa: E402
from reindex.errors import ConfigError, ReindexError  # noqa: E402
from reindex.runners.prefect import PrefectRunner, shard_deployment_name, shard_flow, using_task_runner  # noqa: E402

# ============================================================================================
# Scheduled flows (issue 7): reindex-sync, reindex-reindex, reindex-gc, their deployments, and
# the task-runner option for apply. Tasks stay thin: one api call each. Heavy work runs through
# api.apply_plan, whose ``reindex-apply`` flow becomes a child flow run of these flows (same API,
# never a nested ephemeral server).
# ============================================================================================

import contextlib  # noqa: E402
import datetime as _dt  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

from prefect import pause_flow_run, resume_flow_run  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402
from prefect.exceptions import FlowPauseTimeout  # noqa: E402
from prefect.input import RunInput  # noqa: E402
from reindex.domain.config import PersonName  # noqa: E402

from reindex.runners.prefect import APPROVAL_REQUEST_KEY  # noqa: E402

__all__ = [
    "APPROVAL_AUTOMATION", "APPROVAL_BODY", "APPROVAL_EVENT", "APPROVAL_SUBJECT", "ApprovalInput",
    "DEFAULT_APPROVAL_TIMEOUT_S", "DeployResult", "GATES", "GC_CRON", "INDEX_LIMIT_PREFIX", "REINDEX_CRON",
    "SYNC_CRON", "approval_description", "approval_form", "deploy", "deploy_flows", "deploy_shards",
    "deployment_specs", "ensure_index_limit", "gc_flow", "gc_task", "index_limit_name", "index_slot",
    "notify_on_approval_requests", "plan_numbers", "plan_task", "publish_task", "record_approval_task",
    "record_rejection_task", "reindex_flow", "serve", "serve_flows", "serve_plan", "shard_deployment_spec",
    "sync_flow", "watch_flow",
]

INDEX_LIMIT_PREFIX = "reindex-index-"
APPROVAL_EVENT = "reindex.approval.requested"
GATES = ("enforce", "force")
DEFAULT_APPROVAL_TIMEOUT_S = 7 * 86400
# Prefect fails a run whose pause outlives its timeout; our own deadline rejects it first.
_PAUSE_MARGIN_S = 300


class ApprovalInput(RunInput):
    """The form a paused ``reindex-reindex`` (or ``reindex-sync``) run shows in the Prefect UI: ``approver`` is
    required and may not be blank (an approval names a person)."""

    approve: bool
    approver: PersonName
    reason: str = ""


def approval_form(plan: Any, plan_path: str, deadline: _dt.datetime | None = None) -> type[ApprovalInput]:
    """The form with its description and ``approve`` preset to false; ``approver`` stays required."""
    return ApprovalInput.with_initial_data(description=approval_description(plan, plan_path, deadline), approve=False)


# --------------------------------------------------------------------------------------------
# One run per index: a global concurrency limit named after the index
# --------------------------------------------------------------------------------------------


def index_limit_name(index: str) -> str:
    """The global concurrency limit that serialises runs of one index (``reindex-index-<index>``)."""
    return INDEX_LIMIT_PREFIX + index


def ensure_index_limit(index: str) -> str:
    """Create the index's global concurrency limit (1 slot) if it does not exist."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    name = index_limit_name(index)
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
    return name


@contextlib.contextmanager
def index_slot(index: str, timeout_s: float | None = None):
    """Hold the index's single slot (waiting at most ``timeout_s``; None = as long as it takes) with a
    lease of ``REINDEX_INDEX_LEASE_S`` that this process renews until the block ends — a pause for
    approval included (Prefect releases only deployment slots on a pause, never this one). If a renewal
    fails (the server lost the lease), Prefect stops the run rather than let two runs share the index."""
    from prefect.concurrency.sync import concurrency

    name = ensure_index_limit(index)
    opts = dict(occupy=1, strict=True, lease_duration=settings.index_lease_seconds(), holder=_holder())
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(concurrency(name, timeout_seconds=1 if timeout_s is None else timeout_s, **opts))
        except TimeoutError:
            if timeout_s is not None:
                raise
            # Say that we wait, and for what, before waiting as long as it takes.
            get_run_logger().info("index %r is held by another run (concurrency limit %s); waiting for it", index, name)
            held.enter_context(concurrency(name, timeout_seconds=None, **opts))
        yield


@dataclass(frozen=True)
class _LeaseHolder:
    """This flow run as the holder of a concurrency lease. Prefect's client sends ``holder.model_dump(mode="json")``
    and reads ``holder.type``; its own model for it lives in a private module (``prefect.types._concurrency``),
    so this is the same two fields in the shape the API takes."""

    type: str
    id: str

    def model_dump(self, mode: str = "json") -> dict[str, str]:
        return {"type": self.type, "id": self.id}


def _holder() -> Any:
    """This flow run as the holder of the index slot (shown on the lease), or None outside a run."""
    run_id = _flow_run_id()
    return _LeaseHolder("flow_run", str(run_id)) if run_id else None


# --------------------------------------------------------------------------------------------
# Thin tasks
# --------------------------------------------------------------------------------------------

_TASK_OPTS: dict[str, Any] = dict(cache_policy=NO_CACHE, persist_result=False)


@task(name="plan", **_TASK_OPTS)
def plan_task(config: str, plans_dir: str, forecast: int | None = None) -> str:
    """Plan the config against the live population (with a forecast on ``forecast`` sampled documents, or when
    approval.require_forecast asks for one); returns the plan file."""
    _, path = api.make_plan(config, out=plans_dir, forecast=forecast)
    return str(path)


@task(name="publish-plan", **_TASK_OPTS)
def publish_task(plan_path: str) -> str:
    """Publish the plan as a Markdown artifact (the whole review document: what changes, key numbers, footprint)
    and a table artifact, both shown by the Prefect UI; returns the approval description. No link to the HTML
    report: it is a file on the worker's disk, which a browser on another machine cannot open."""
    plan = api.show_plan(plan_path)
    key = _artifact_key("reindex-plan", plan.index)
    html = Path(plan_path).with_suffix(".html")
    where = (f"\n_The HTML report with its charts is `{html.name}` in the plans folder of the worker that planned "
             "it._\n") if html.is_file() else ""
    create_markdown_artifact(key=key, markdown=reports.plan_markdown(plan) + where,
                             description=f"reindex plan {plan.plan_hash[:12]}")
    create_table_artifact(key=key + "-numbers", table=plan_numbers(plan), description="reindex plan: key numbers")
    return approval_description(plan, plan_path)


@task(name="record-approval", **_TASK_OPTS)
def record_approval_task(plan_path: str, config: str, approver: str, note: str) -> str:
    """Write the same approval record `reindex approve` writes; returns its path."""
    _, path = api.approve_plan(plan_path, approver, note, config_path=config)
    return str(path)


@task(name="record-rejection", **_TASK_OPTS)
def record_rejection_task(plan_path: str, rejecter: str, reason: str) -> str:
    """Write the same rejection record `reindex approve --reject` writes; returns its path."""
    from reindex.usecases.runs import record_rejection

    _, path = record_rejection(plan_path, rejecter, reason)
    return str(path)


@task(name="gc", **_TASK_OPTS)
def gc_task(config: str, older_than: str | None, dry_run: bool) -> list[dict]:
    """Delete retired populations past retention."""
    return api.gc(config, older_than=older_than, dry_run=dry_run)


# --------------------------------------------------------------------------------------------
# Helpers (pure)
# --------------------------------------------------------------------------------------------


def _artifact_key(prefix: str, index: str) -> str:
    return f"{prefix}-{re.sub(r'[^a-z0-9-]+', '-', index.lower())}".strip("-")


def plan_numbers(plan: Any) -> list[dict]:
    """The key numbers of a plan as table rows (quantity, value)."""
    return [{"quantity": k, "value": v} for k, v in plan.numbers.rows()]


def approval_description(plan: Any, plan_path: str, deadline: _dt.datetime | None = None) -> str:
    """The Markdown shown above the approval form: what is asked, peak footprint, tokens, $, hours."""
    n = plan.numbers
    reasons = "; ".join(n.approval_reasons) or "policy"
    lines = [
        f"### Approve `{n.kind}` reindex of `{n.index}` (plan `{n.plan_hash[:12]}`)",
        "",
        f"- **Peak footprint:** {n.peak_vectors:,} vectors"
        + (f" ({reports.human_number(n.peak_vectors)})" if n.peak_vectors >= 1000 else "") + ", "
        f"{reports.human_bytes(n.peak_disk_bytes)} disk / {reports.human_bytes(n.peak_ram_bytes)} RAM while both populations exist",
        f"- **Tokens to embed:** {n.tokens_to_embed:,} ({n.chunks_to_embed:,} of {n.chunks_new:,} chunks; "
        f"{n.chunks_reused:,} reused)",
        f"- **Cost:** ${n.usd:,.4f}",
        f"- **Time:** {n.hours:,.3f} hours of embedding",
        f"- **Why approval:** {reasons}",
        *([f"- **Warning:** {over}"] if (over := reports.over_limit_line(plan)) is not None else []),
        f"- **Plan:** `{plan_path}` (report: `{Path(plan_path).with_suffix('.html')}`)",
    ]
    if deadline is not None:  # a list item, not a trailing sentence the dialog may clip
        lines.append(f"- **Deadline:** {deadline:%Y-%m-%d %H:%M} UTC; without a decision the plan is rejected")
    lines += ["", "Set **approve** to true and your name in **approver** to build, cut over and schedule gc.",
              "", "Leave **approve** false to reject the plan: nothing changes."]
    return "\n".join(lines)


def _flow_run_id() -> str | None:
    from prefect.runtime import flow_run

    return flow_run.id


def _deployment_id() -> str | None:
    from prefect.runtime import deployment

    return deployment.id


def _cutover_options(config: str, queries: str | None, k: int | None, gate: str) -> dict:
    """The cutover parameters, checked before anything runs: a queries file relative to the config's
    folder (the worker's working directory may differ), the comparison depth and the gate mode."""

    if gate not in GATES:
        raise ConfigError(f"parameter gate={gate!r}: expected one of {', '.join(GATES)}")
    if k is not None and k < 1:
        raise ConfigError(f"parameter k={k!r}: expected a depth ≥ 1")
    q = None
    if queries:
        qp = Path(queries)
        qp = qp if qp.is_absolute() else Path(config).parent / qp
        if not qp.is_file():
            raise ConfigError(f"parameter queries={queries!r}: {qp} is not a file (JSONL, one query per line)")
        q = str(qp.resolve())
    return {"queries": q, "k": k, "gate": gate}


def _resolve(config: str, index: str | None, plans_dir: str | None) -> tuple[str, str, str]:
    """Absolute config path, the index (checked against the config) and the plans folder."""

    cfg_path = Path(config).resolve()
    cfg = api.load_resolved(cfg_path)
    if index is not None and index != cfg.index:
        raise ConfigError(f"parameter index={index!r} but {cfg_path} is for index {cfg.index!r}")
    plans = Path(plans_dir).resolve() if plans_dir else cfg_path.parent / "plans"
    return str(cfg_path), cfg.index, str(plans)


def _auto_reject(flow_run_id: str, at: float, done: threading.Event, timeout_s: int) -> None:
    """At the approval deadline, resume the paused run with a rejection (unless it was decided)."""
    if done.wait(max(0.0, at - __import__("time").time())):
        return
    with contextlib.suppress(Exception):  # already resumed, or the run went away: nothing to do
        resume_flow_run(flow_run_id, run_input={
            "approve": False, "approver": "reindex (deadline)",
            "reason": f"no decision within {timeout_s} s"})


def _announce(plan: Any, plan_path: str, deadline: _dt.datetime) -> dict:
    """Publish the approval request: a flow run input that `reindex runs` / `reindex approve` find, a
    ``reindex.approval.requested`` event that automations can notify on, and a log line."""
    from prefect.events import emit_event
    from prefect.input import create_flow_run_input
    from prefect.runtime import flow_run

    from reindex.usecases.runs import approval_request

    request = approval_request(plan, plan_path, deadline)
    run_id, run_name = _flow_run_id(), flow_run.name
    if run_id:
        create_flow_run_input(key=APPROVAL_REQUEST_KEY, value=request, flow_run_id=run_id)
        emit_event(
            APPROVAL_EVENT,
            resource={"prefect.resource.id": f"reindex.plan.{plan.plan_hash}",
                      "prefect.resource.name": Path(plan_path).name, "reindex.index": plan.index},
            related=[{"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run",
                      "prefect.resource.name": str(run_name)}],
            payload={**request, "flow_run_id": str(run_id), "flow_run_name": str(run_name),
                     "peak": reports.human_bytes(request["peak_disk_bytes"]),
                     "approve_command": f"reindex approve {request['plan']} --by NAME"},
        )
    get_run_logger().warning(
        "waiting for approval of plan %s (%s, peak %s vectors) until %s: run `reindex approve %s --by NAME` "
        "(or --reject), or fill in the form of this run in the Prefect UI",
        plan.plan_hash[:12], plan.kind, f"{request['peak_vectors']:,}", request["deadline"], request["plan"])
    return request


def _ask_approval(plan: Any, plan_path: str, timeout_s: int, poll_s: int) -> ApprovalInput | None:
    """Pause the run until someone fills in the approval form; None if Prefect's pause timed out."""
    import time

    deadline = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=timeout_s)
    form = approval_form(plan, plan_path, deadline)
    _announce(plan, plan_path, deadline)
    done = threading.Event()
    run_id = _flow_run_id()
    if run_id:
        threading.Thread(target=_auto_reject, args=(run_id, time.time() + timeout_s, done, timeout_s),
                         daemon=True, name="reindex-approval-deadline").start()
    try:
        return pause_flow_run(wait_for_input=form, timeout=timeout_s + _PAUSE_MARGIN_S, poll_interval=poll_s)
    except FlowPauseTimeout:
        return None
    finally:
        done.set()


def _schedule_gc(config: str, index: str, plans_dir: str, gc_deployment: str | None) -> dict:
    """Create a ``reindex-gc`` run at now + retention when deployed; else record the intended time."""
    cfg = api.load_resolved(config)
    when = _dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(days=cfg.cutover.retention_days, minutes=1)
    name = gc_deployment or f"reindex-gc/{index}"
    out = {"at": when.isoformat(timespec="seconds"), "deployment": name, "flow_run_id": None,
           "note": "no deployment context: run `reindex gc` after this time"}
    if _deployment_id() is None:
        return out
    from prefect.deployments import run_deployment

    try:
        fr = run_deployment(name, parameters={"config": config, "index": index, "plans_dir": plans_dir},
                            scheduled_time=when, timeout=0, as_subflow=False)
    except Exception as err:  # noqa: BLE001 - gc is best effort; the retired population waits
        out["note"] = f"could not schedule {name}: {type(err).__name__}: {err}".splitlines()[0]
        return out
    out.update(flow_run_id=str(fr.id), note="scheduled")
    return out


def _carry_out(plan_path: str, config: str, index: str, plans_dir: str, kind: str,
               gc_deployment: str | None, cut_opts: dict) -> dict:
    """Carry out an approved plan through the library's cycle (it finds the plan approved — or an approval
    carried over to a re-plan of the same change — applies it, and for a new population cuts over through the
    gate); then publish the cutover and schedule gc. The flow never re-sequences the steps itself."""
    logger = get_run_logger()
    with api.Index.open(config, runner=PrefectRunner()) as ix:  # shards: a child flow run of this flow
        r = ix.sync(api.SyncPolicy(plans_dir=plans_dir, queries=cut_opts["queries"], k=cut_opts["k"],
                                   force=cut_opts["gate"] == "force", gc=False))
    if r.cutover is not None:
        create_markdown_artifact(key=_artifact_key("reindex-cutover", index), markdown=reports.cutover_markdown(r.cutover),
                                 description=f"reindex cutover: {'pass' if r.cutover.get('passed') else 'fail'}")
    out: dict[str, Any] = {"plan": r.plan_file or plan_path, "kind": r.kind or kind,
                           "apply": (r.apply or {}).get("status"), "collection": (r.apply or {}).get("collection")}
    o = r.outcome.value
    if o == "gate-failed":
        failed = [x for x in r.cutover["rules"] if not x["passed"]]
        raise ReindexError(f"cutover gate failed for {r.cutover['shadow']}: "
                           + "; ".join(f"{x['rule']}: {x['detail']}" for x in failed)
                           + f"; the alias was not moved (report: {r.cutover['report_path']})")
    if o in ("awaiting-approval", "rejected", "skipped"):
        raise ReindexError(f"plan {plan_path} was approved but the cycle did not carry it out: {r.message}")
    if o == "applied-in-place":
        logger.info("synced %s in place (%s)", out["collection"], out["apply"])
        return out
    if o == "nothing-to-do":
        return {**out, "apply": "nothing-to-do"}
    out["cutover"] = {"passed": r.cutover["passed"], "swap": r.cutover["swap"], "report": r.cutover["report_path"],
                      "queries": cut_opts["queries"]}
    out["gc"] = _schedule_gc(config, index, plans_dir, gc_deployment)
    logger.info("alias %s now serves %s; gc %s at %s", index, out["collection"], out["gc"]["note"], out["gc"]["at"])
    return out


def _review(plan_path: str, config: str, index: str, plans_dir: str, timeout_s: int, poll_s: int,
            gc_deployment: str | None, cut_opts: dict) -> dict:
    """Publish the plan, pause for approval, and on approval record it and carry the plan out."""
    logger = get_run_logger()
    plan = api.show_plan(plan_path)
    publish_task(plan_path)
    decision = _ask_approval(plan, plan_path, timeout_s, poll_s)
    if decision is None or not decision.approve:
        who = decision.approver if decision else "nobody"
        why = (decision.reason if decision else f"the pause timed out after {timeout_s} s") or "no reason given"
        msg = f"plan {plan.plan_hash[:12]} rejected by {who} ({why}); nothing changed"
        logger.warning(msg)
        if decision is not None and not who.startswith("reindex (deadline)"):
            # A human rejection is final for this plan: it revokes an approval given on the CLI too.
            record_rejection_task(plan_path, who or "unnamed (Prefect form)", why)
        _result_artifact(index, msg)
        return {"plan": plan_path, "kind": plan.kind, "status": "rejected", "by": who, "reason": why, "message": msg}
    note = f"{decision.reason} (Prefect flow run {_flow_run_id()})".strip()
    record_approval_task(plan_path, config, decision.approver, note)
    logger.info("plan %s approved by %s", plan.plan_hash[:12], decision.approver)
    out = _carry_out(plan_path, config, index, plans_dir, plan.kind, gc_deployment, cut_opts)
    out.update(status="done", approved_by=decision.approver)
    return out


def _final_state(out: dict) -> Any:
    """A rejected run ends in a Completed state named ``Rejected`` (the UI shows it apart from a swap), its
    message the rejection; any other outcome is returned as it is. Calling the flow returns ``out`` either way."""
    if out.get("status") != "rejected":
        return out
    from prefect.states import Completed

    return Completed(name="Rejected", message=out["message"], data=out)


def _result_artifact(index: str, text: str) -> None:
    create_markdown_artifact(key=_artifact_key("reindex-result", index), markdown=text,
                             description="reindex: what this run did")


# --------------------------------------------------------------------------------------------
# The flows
# --------------------------------------------------------------------------------------------


@flow(name="reindex-reindex", persist_result=False, log_prints=False)
def reindex_flow(config: str = "reindex.yaml", index: str | None = None, plans_dir: str | None = None,
                 approval_timeout_s: int = DEFAULT_APPROVAL_TIMEOUT_S, poll_interval_s: int = 10,
                 task_runner: str = "threads", gc_deployment: str | None = None, queries: str | None = None,
                 k: int | None = None, gate: str = "enforce", forecast: int | None = None) -> dict:
    """Plan against the live index (``forecast``: with what the change buys, measured on that many sampled
    documents before the pause; the approval form and artifact show it), ask a human (Prefect pause with an approval form; `reindex approve
    PLAN` resumes it too), then apply, cut over and schedule gc.

    ``queries``: a JSONL queries file (relative to the config's folder) the cutover compares old and new
    on, instead of sampled known-item probes; ``k``: comparison depth (default ``cutover.k``); ``gate``:
    ``enforce`` (the alias moves only when every rule passes) or ``force`` (moves anyway, recorded with
    the approver). One run per index at a time: the run holds the index's global concurrency slot, with
    a lease this process renews, from before planning until gc is scheduled — across the pause; there
    is deliberately no deployment concurrency limit (Prefect frees it at the pause; see the module doc)."""
    config, index, plans_dir = _resolve(config, index, plans_dir)
    cut_opts = _cutover_options(config, queries, k, gate)
    with index_slot(index), using_task_runner(task_runner):
        plan_path = plan_task(config, plans_dir, forecast)

        plan = api.show_plan(plan_path)
        if plan.kind == ChangeKind.NONE:
            _result_artifact(index, f"Nothing to do: plan {plan.plan_hash[:12]} is `none`.")
            return {"plan": plan_path, "kind": "none", "status": "nothing-to-do"}
        out = _review(plan_path, config, index, plans_dir, approval_timeout_s, poll_interval_s, gc_deployment,
                      cut_opts)
        if out["status"] == "done":
            _result_artifact(index, f"Plan {plan.plan_hash[:12]} ({plan.kind}) approved by {out['approved_by']}: "
                                    f"apply {out['apply']}, collection `{out['collection']}`.")
        return _final_state(out)


@flow(name="reindex-sync", persist_result=False, log_prints=False)
def sync_flow(config: str = "reindex.yaml", index: str | None = None, plans_dir: str | None = None,
              approval_timeout_s: int = DEFAULT_APPROVAL_TIMEOUT_S, poll_interval_s: int = 10,
              busy_timeout_s: float = 60.0, task_runner: str = "threads", gc_deployment: str | None = None,
              queries: str | None = None, k: int | None = None, gate: str = "enforce") -> dict:
    """Plan against the live index: nothing → done; document-scoped within the approval policy →
    apply in place; anything else → pause for approval like reindex-reindex (``queries``, ``k`` and
    ``gate`` as there). Skips (and says so) when another run holds the index for longer than
    ``busy_timeout_s``. No deployment concurrency limit, for the same reason as reindex-reindex."""
    config, index, plans_dir = _resolve(config, index, plans_dir)
    cut_opts = _cutover_options(config, queries, k, gate)
    logger = get_run_logger()
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(index_slot(index, timeout_s=busy_timeout_s))
        except TimeoutError:
            msg = (f"skipped: another run holds index {index!r} (concurrency limit {index_limit_name(index)}) "
                   f"for more than {busy_timeout_s:g} s; the next scheduled sync catches up")
            logger.warning(msg)
            _result_artifact(index, msg)
            return {"status": "skipped", "message": msg}
        held.enter_context(using_task_runner(task_runner))
        # The cycle (lock → plan → in-place apply, or an approved plan carried out) is the library's; the
        # flow holds the slot, pauses for approval and publishes what happened.
        with api.Index.open(config, runner=PrefectRunner()) as ix:
            r = ix.sync(api.SyncPolicy(plans_dir=plans_dir, queries=cut_opts["queries"], k=cut_opts["k"],
                                       force=cut_opts["gate"] == "force", gc=False, apply_new_populations=False))
        return _after_cycle(r, config, index, plans_dir, approval_timeout_s, poll_interval_s, gc_deployment,
                            cut_opts)


def _after_cycle(r: Any, config: str, index: str, plans_dir: str, approval_timeout_s: int, poll_interval_s: int,
                 gc_deployment: str | None, cut_opts: dict) -> dict:
    """What the sync flow does with a cycle's result: publish it; pause for an approval it waits for."""

    out: dict[str, Any] = {"plan": r.plan_file, "kind": r.kind, "status": r.outcome.value, "message": r.message}
    o = r.outcome.value
    if o == "skipped":
        get_run_logger().warning(f"skipped: {r.message}")
        _result_artifact(index, f"skipped: {r.message}")
    elif o == "nothing-to-do":
        out.update(kind="none")
    elif o == "awaiting-approval":
        return _final_state(_review(r.plan_file, config, index, plans_dir, approval_timeout_s, poll_interval_s,
                                    gc_deployment, cut_opts))
    elif o == "applied-in-place":
        plan = api.show_plan(r.plan_file)
        out.update(status="done", apply=r.apply["status"], collection=r.apply["collection"])
        _result_artifact(index, f"Synced {len(plan.numbers.affected_documents)} changed and "
                                f"{len(plan.numbers.removed_documents)} removed documents in place "
                                f"(plan {plan.plan_hash[:12]}, within the approval policy).")
    elif o == "gate-failed":
        failed = [x for x in r.cutover["rules"] if not x["passed"]]
        raise ReindexError(f"cutover gate failed for {r.cutover['shadow']}: "
                           + "; ".join(f"{x['rule']}: {x['detail']}" for x in failed)
                           + f"; the alias was not moved (report: {r.cutover['report_path']})")
    elif o == "cut-over":
        out.update(status="done", apply=r.apply["status"], collection=r.apply["collection"],
                   gc=_schedule_gc(config, index, plans_dir, gc_deployment))
        _result_artifact(index, f"Plan {r.plan_hash[:12]} ({r.kind}), approved earlier: {r.message}.")
    else:  # rejected
        _result_artifact(index, r.message)
    return out


@flow(name="reindex-watch", persist_result=False, log_prints=False)
def watch_flow(config: str = "reindex.yaml", index: str | None = None, plans_dir: str | None = None,
               interval_s: float = 2.0, duration_s: float = 3600.0) -> dict:
    """The live mode as a Prefect run (``reindex sync --watch``): for ``duration_s`` seconds, apply each change
    of the source as it arrives, under one index lock and one writer (the index's concurrency slot held
    throughout); changes that need approval are planned and left for ``reindex approve``. Serve or schedule it
    back to back (e.g. hourly for an hour) for a watch that survives a worker restart."""
    import threading

    config, index, plans_dir = _resolve(config, index, plans_dir)
    stop = threading.Event()
    timer = threading.Timer(duration_s, stop.set)
    logger = get_run_logger()
    with index_slot(index):
        timer.start()
        try:
            with api.Index.open(config) as ix:
                summary = ix.watch(api.SyncPolicy(plans_dir=plans_dir, gc=False), interval=interval_s, stop=stop,
                                   on_cycle=lambda r: r.outcome.value != "nothing-to-do" and logger.info(r.message))
        finally:
            timer.cancel()
    _result_artifact(index, f"watch: {summary.ticks} cycles, {summary.applied} changed the index "
                            f"({', '.join(f'{k} {v}' for k, v in sorted(summary.outcomes.items()))})")
    return summary.as_dict()


@flow(name="reindex-gc", persist_result=False, log_prints=False)
def gc_flow(config: str = "reindex.yaml", index: str | None = None, plans_dir: str | None = None,
            older_than: str | None = None, dry_run: bool = False) -> list[dict]:
    """Delete retired populations past the retention window (never one an alias points at)."""
    config, index, _ = _resolve(config, index, plans_dir)
    with index_slot(index):
        deleted = gc_task(config, older_than, dry_run)
    _result_artifact(index, "gc: " + (", ".join(f"`{d.get('collection')}` {d.get('action', '')}" for d in deleted)
                                      or "nothing past retention"))
    return deleted


# --------------------------------------------------------------------------------------------
# Deployments: `reindex deploy` and `reindex serve`
# --------------------------------------------------------------------------------------------

SYNC_CRON = "0 * * * *"
REINDEX_CRON = "0 3 * * 6"
GC_CRON = "30 4 * * *"


def deployment_specs(config: str, index: str, plans_dir: str, *, timezone: str = "UTC",
                     sync_cron: str | None = SYNC_CRON, reindex_cron: str | None = REINDEX_CRON,
                     gc_cron: str | None = GC_CRON, task_runner: str = "threads") -> list[Any]:
    """RunnerDeployments of the three flows for one index (module entrypoints: no code storage)."""
    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    params = {"config": config, "index": index, "plans_dir": plans_dir}
    limit = ConcurrencyLimitConfig(limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE)
    out = []
    # Only gc gets a deployment concurrency limit: sync and reindex may pause for approval, and a paused
    # run loses its deployment slot and then crashes on the next lease renewal (see the module doc).
    for fl, cron, extra, lim in ((sync_flow, sync_cron, {"task_runner": task_runner}, None),
                                 (reindex_flow, reindex_cron, {"task_runner": task_runner}, None),
                                 (gc_flow, gc_cron, {}, limit)):
        out.append(fl.to_deployment(
            name=index, parameters={**params, **extra}, concurrency_limit=lim, tags=["reindex", f"index:{index}"],
            schedules=[Cron(cron, timezone=timezone)] if cron else None,
            entrypoint_type=EntrypointType.MODULE_PATH,
            description=f"{fl.name} for index {index} ({config})",
        ))
    return out


def shard_deployment_spec(pool: str) -> Any:
    """The RunnerDeployment ``reindex-shard/<pool>`` (module entrypoint, no parameters: each flow run gets
    its shards as plain data from the apply that starts it)."""
    from prefect.deployments.runner import EntrypointType

    return shard_flow.to_deployment(
        name=pool, tags=["reindex", "reindex-shard"], entrypoint_type=EntrypointType.MODULE_PATH,
        description=f"Shards of any reindex apply run with --task-runner prefect-pool:{pool} (one flow run per "
                    "shard group; the apply that starts it holds the index lock and commits)",
    )


def _deploy_on_pool(pool: str, specs: list[Any], command: str) -> None:
    """Create the process work pool if missing, then the deployments ``specs`` on it."""
    import io

    from prefect import deploy
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    if not settings.prefect_api_url():  # PREFECT_API_URL or the active profile's, as every command decides
        raise ConfigError(f"{command} needs a Prefect server: start one with `prefect server start` and set "
                          "PREFECT_API_URL=http://127.0.0.1:4200/api" + (" (or use `reindex serve`)"
                                                                          if command == "reindex deploy" else ""))
    with get_client(sync_client=True) as client:
        with contextlib.suppress(ObjectAlreadyExists):
            client.create_work_pool(WorkPoolCreate(name=pool, type="process"))
    with contextlib.redirect_stdout(io.StringIO()):  # Prefect prints its own table; the CLI prints ours
        deploy(*specs, work_pool_name=pool, build=False, push=False, print_next_steps_message=False,
               ignore_warnings=True)


def deploy_flows(config: str, index: str, plans_dir: str, pool: str, **kw: Any) -> list[str]:
    """Create the process work pool if missing, the index's concurrency limit, the three deployments
    and the pool's shard deployment; returns their names (``flow/deployment``)."""
    specs = deployment_specs(config, index, plans_dir, **kw)
    _deploy_on_pool(pool, [*specs, shard_deployment_spec(pool)], "reindex deploy")
    ensure_index_limit(index)
    return [f"{fl}/{index}" for fl in ("reindex-sync", "reindex-reindex", "reindex-gc")] + [shard_deployment_name(pool)]


def deploy_shards(pool: str = "reindex") -> DeployResult:
    """Create (or update) the ``reindex-shard/<pool>`` deployment on the process work pool ``pool``
    (created if missing), so that ``--task-runner prefect-pool:<pool>`` can fan an apply's shards out to
    that pool's workers. Needs no config: each flow run gets its shards as plain data."""
    _deploy_on_pool(pool, [shard_deployment_spec(pool)], "reindex deploy-shards")
    nxt = (f"prefect worker start --pool {pool} --type process   # one or more, here or on other machines",
           f"reindex apply PLAN --task-runner prefect-pool:{pool}")
    return DeployResult("", "", pool, (shard_deployment_name(pool),), "", nxt)


APPROVAL_AUTOMATION = "reindex: run waiting for approval"
APPROVAL_SUBJECT = "reindex: {{ event.payload.index }} waits for approval ({{ event.payload.kind }})"
APPROVAL_BODY = (
    "Flow run {{ event.payload.flow_run_name }} paused: plan {{ event.payload.plan_hash[:12] }} "
    "({{ event.payload.kind }}) of index {{ event.payload.index }} needs a decision by "
    "{{ event.payload.deadline }}.\n"
    "Peak footprint: {{ event.payload.peak_vectors }} vectors, {{ event.payload.peak }} disk; "
    "{{ event.payload.tokens_to_embed }} tokens to embed, ${{ event.payload.usd }}.\n"
    "Approve: {{ event.payload.approve_command }} (or --reject), or fill in the form of the run in the Prefect UI.\n"
    "Plan: {{ event.payload.plan }}"
)


def notify_on_approval_requests(webhook_url: str, *, block_name: str = "reindex-approval-webhook") -> dict:
    """Make Prefect notify ``webhook_url`` whenever a reindex run pauses for approval: a Custom Webhook
    notification block (POST ``{"text", "subject", "body"}``: Slack-compatible) and an automation on the
    ``reindex.approval.requested`` event each paused run emits. Idempotent: replaces both by name.
    Returns the block and automation ids."""
    from prefect.automations import Automation
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import EventTrigger, Posture

    block = CustomWebhookNotificationBlock(
        name=block_name, url=webhook_url, method="POST",
        json_data={"text": "{{subject}}\n{{body}}", "subject": "{{subject}}", "body": "{{body}}"})
    block_id = block.save(block_name, overwrite=True)
    with contextlib.suppress(ValueError):  # not there yet
        Automation.read(name=APPROVAL_AUTOMATION).delete()
    automation = Automation(
        name=APPROVAL_AUTOMATION,
        description="Tell someone that a reindex run is paused until its plan is approved or rejected.",
        trigger=EventTrigger(expect={APPROVAL_EVENT}, match={"prefect.resource.id": "reindex.plan.*"},
                             posture=Posture.Reactive, threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_id, subject=APPROVAL_SUBJECT, body=APPROVAL_BODY)],
    ).create()
    return {"block": block_name, "block_id": str(block_id), "automation": APPROVAL_AUTOMATION,
            "automation_id": str(automation.id)}


def serve_flows(config: str, index: str, plans_dir: str, **kw: Any) -> None:
    """Serve the three deployments from this process until interrupted (no work pool, no worker)."""
    from prefect import serve

    ensure_index_limit(index)
    serve(*deployment_specs(config, index, plans_dir, **kw), print_starting_message=False)


# --------------------------------------------------------------------------------------------
# deploy / serve (Prefect deployments of the sync, reindex and gc flows)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeployResult:
    """What `reindex deploy` created and the commands that come next."""
    index: str
    config: str
    pool: str | None
    deployments: tuple[str, ...]
    concurrency_limit: str
    next_commands: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"index": self.index, "config": self.config, "pool": self.pool, "deployments": list(self.deployments),
                "concurrency_limit": self.concurrency_limit, "next_commands": list(self.next_commands)}


def _deploy_inputs(config_path: str | Path, plans_dir: str | Path | None) -> tuple[str, str, str]:
    p = Path(config_path).resolve()

    cfg = api.load_resolved(p)
    return str(p), cfg.index, str(Path(plans_dir).resolve() if plans_dir else p.parent / "plans")


def deploy(config_path: str | Path = "reindex.yaml", *, pool: str = "reindex", plans_dir: str | Path | None = None,
           timezone: str = "UTC", task_runner: str = "threads", schedules: bool = True,
           notify_webhook: str | None = None) -> DeployResult:
    """Create (or update) the reindex-sync, reindex-reindex and reindex-gc deployments of one index
    on a process work pool of the Prefect API in PREFECT_API_URL; with ``notify_webhook``, also the
    automation that posts there when a run waits for approval (see notify_on_approval_requests)."""
    config, index, plans = _deploy_inputs(config_path, plans_dir)
    crons = {} if schedules else {"sync_cron": None, "reindex_cron": None, "gc_cron": None}
    names = deploy_flows(config, index, plans, pool, timezone=timezone, task_runner=task_runner, **crons)
    if notify_webhook:
        notify_on_approval_requests(notify_webhook)
    # The deployments were just created through the API, so a server runs: point at its UI, never at
    # `prefect server start`.
    ui = (settings.prefect_api_url() or "").removesuffix("/").removesuffix("/api") or "the Prefect UI"
    nxt = (
        f"prefect worker start --pool {pool}",
        f"prefect deployment run 'reindex-reindex/{index}'   # runs waiting for approval: {ui}, under Flow Runs",
        f"prefect deployment run 'reindex-sync/{index}'",
        f"reindex apply PLAN --task-runner prefect-pool:{pool}   # shards as flow runs on the pool's workers",
    )
    return DeployResult(index, config, pool, tuple(names), index_limit_name(index), nxt)


def serve_plan(config_path: str | Path = "reindex.yaml", *, plans_dir: str | Path | None = None,
               timezone: str = "UTC", task_runner: str = "threads") -> DeployResult:
    """What `reindex serve` will serve (no side effects)."""
    config, index, _ = _deploy_inputs(config_path, plans_dir)
    names = tuple(f"{f}/{index}" for f in ("reindex-sync", "reindex-reindex", "reindex-gc"))
    nxt = (f"prefect deployment run 'reindex-reindex/{index}'   # in another shell",
           f"prefect deployment run 'reindex-sync/{index}'")
    return DeployResult(index, config, None, names, index_limit_name(index), nxt)


def serve(config_path: str | Path = "reindex.yaml", *, plans_dir: str | Path | None = None, timezone: str = "UTC",
          task_runner: str = "threads") -> None:
    """Serve the three deployments of one index from this process until interrupted."""
    config, index, plans = _deploy_inputs(config_path, plans_dir)
    serve_flows(config, index, plans, timezone=timezone, task_runner=task_runner)
