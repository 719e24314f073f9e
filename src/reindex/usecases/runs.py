"""Runs waiting for approval, and one approval channel for the CLI and Prefect.

A scheduled ``reindex-reindex`` (or ``reindex-sync``) run that needs a human pauses and publishes an
approval request (:func:`approval_request`: plan, footprint, deadline). Whichever channel decides:

* ``reindex approve PLAN`` records the approval beside the plan and resumes every run paused on that plan
  (:func:`approve_and_resume`); ``reindex approve --reject`` records a rejection and resumes them with
  a rejection (:func:`reject_and_resume`);
* the Prefect approval form resumes the run, which records the same approval or rejection file
  (:func:`record_rejection`, ``approve_plan``).

A rejection is final for its plan hash: it revokes an approval given elsewhere, and a later approval
is refused (see :mod:`reindex.planner.approvals`)."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path

from reindex.foundation import settings
from reindex.planner.approvals import Rejection, reject
from reindex.errors import ReindexError
from reindex.planner import Plan, forecast_line, read_plan
from reindex.usecases.configure import load_resolved
from reindex.usecases.plan import approve_plan, check_plan_index

__all__ = [
    "Decision",
    "WaitingRun",
    "approval_request",
    "approve_and_resume",
    "record_rejection",
    "reject_and_resume",
    "waiting_runs",
]

REQUEST_SCHEMA = "reindex/approval-request/v1"


@dataclass(frozen=True, slots=True)
class WaitingRun:
    """A flow run paused until someone approves or rejects its plan."""

    flow_run_id: str
    flow_run_name: str
    flow: str
    index: str
    plan: str
    plan_hash: str
    kind: str
    peak_vectors: int
    peak_disk_bytes: int
    peak_ram_bytes: int
    tokens_to_embed: int
    usd: float
    deadline: str
    paused_at: str | None
    forecast: str | None = None  # the plan's forecast in one line (verdict, a metric with its interval, cost)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(frozen=True, slots=True)
class Decision:
    """What `reindex approve` did: the record it wrote and the paused runs it resumed."""

    approved: bool
    plan_hash: str
    kind: str
    by: str
    record: str
    resumed: tuple[WaitingRun, ...]
    # Why no run was resumed when one might wait (no Prefect API configured, the API failed, …).
    note: str | None = None

    def as_dict(self) -> dict:
        return {"approved": self.approved, "plan_hash": self.plan_hash, "kind": self.kind, "by": self.by,
                "record": self.record, "resumed": [r.as_dict() for r in self.resumed], "note": self.note}


def approval_request(plan: Plan, plan_path: str | Path, deadline: _dt.datetime) -> dict:
    """The request a paused run publishes: which plan, its footprint and cost, and the deadline."""
    n = plan.numbers
    return {
        "schema": REQUEST_SCHEMA, "index": n.index, "plan": str(Path(plan_path).resolve()),
        "plan_hash": n.plan_hash, "kind": n.kind, "peak_vectors": int(n.peak_vectors),
        "peak_disk_bytes": int(n.peak_disk_bytes), "peak_ram_bytes": int(n.peak_ram_bytes),
        "tokens_to_embed": int(n.tokens_to_embed), "usd": float(n.usd),
        "deadline": deadline.astimezone(_dt.timezone.utc).isoformat(timespec="seconds"),
        "reasons": list(n.approval_reasons),
        **({"forecast": forecast_line(n.forecast)} if n.forecast else {}),
    }


def _waiting(raw: dict) -> WaitingRun:
    q = raw["request"]
    return WaitingRun(raw["flow_run_id"], raw["flow_run_name"], raw["flow"], q["index"], q["plan"], q["plan_hash"],
                      q["kind"], q["peak_vectors"], q["peak_disk_bytes"], q["peak_ram_bytes"], q["tokens_to_embed"],
                      q["usd"], q["deadline"], raw.get("paused_at"), q.get("forecast"))


def waiting_runs(index: str | None = None) -> list[WaitingRun]:
    """Runs paused for approval on the configured Prefect API (none without one), oldest first."""
    if not settings.prefect_api_url():
        return []
    from reindex.runners.prefect import waiting_runs as _paused

    runs = [_waiting(r) for r in _paused() if r["request"].get("schema") == REQUEST_SCHEMA]
    return [r for r in runs if index is None or r.index == index]


def _resume_all(plan: Plan, *, approve: bool, by: str, reason: str) -> tuple[tuple[WaitingRun, ...], str | None]:
    if not settings.prefect_api_url():
        return (), "no Prefect API configured (PREFECT_API_URL): no paused run to resume"
    from reindex.runners.prefect import resume_waiting_run

    resumed = []
    try:
        waiting = [r for r in waiting_runs() if r.plan_hash == plan.plan_hash]
        for run in waiting:
            resume_waiting_run(run.flow_run_id, approve=approve, approver=by, reason=reason)
            resumed.append(run)
    except ReindexError as err:
        return tuple(resumed), f"the decision is recorded, but resuming failed: {err}"
    return tuple(resumed), None if resumed else "no run is paused waiting for this plan"


def _plan(plan_path: str | Path, config_path: str | Path | None) -> Plan:
    plan = read_plan(plan_path)
    if config_path is not None:
        check_plan_index(plan, load_resolved(config_path), plan_path)
    return plan


def approve_and_resume(plan_path: str | Path, by: str, note: str = "",
                       config_path: str | Path | None = None) -> Decision:
    """Record ``by``'s approval of a plan, then resume every run paused waiting for that plan."""
    rec, path = approve_plan(plan_path, by, note, config_path)
    plan = _plan(plan_path, None)
    resumed, why = _resume_all(plan, approve=True, by=rec.by, reason=(note or "approved") + " (reindex approve)")
    return Decision(True, plan.plan_hash, plan.kind, rec.by, str(path), resumed, why)


def record_rejection(plan_path: str | Path, by: str, reason: str = "") -> tuple[Rejection, Path]:
    """Record ``by``'s rejection of a plan beside its file (revokes any approval of that plan)."""
    return reject(read_plan(plan_path), plan_path, by, reason)


def reject_and_resume(plan_path: str | Path, by: str, reason: str = "",
                      config_path: str | Path | None = None) -> Decision:
    """Record ``by``'s rejection of a plan, then resume every run paused on it with a rejection."""
    plan = _plan(plan_path, config_path)
    rec, path = reject(plan, plan_path, by, reason)
    resumed, why = _resume_all(plan, approve=False, by=rec.by, reason=reason or "rejected with reindex approve --reject")
    return Decision(False, plan.plan_hash, plan.kind, rec.by, str(path), resumed, why)
