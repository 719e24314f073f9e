"""Approval records: a named person's approval bound to one plan's hash.

Stored beside the plan (``<plan>.approval.json``) so that ``plans/`` is the approval trail; a
changed plan has another hash, which invalidates the record."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass
from pathlib import Path

from reindex.atomic import atomic_write_text
from reindex.errors import ApprovalError
from reindex.planner import Plan, PlanError

APPROVAL_SCHEMA = "reindex/approval/v1"




@dataclass(frozen=True, slots=True)
class Approval:
    plan_hash: str
    index: str
    kind: str
    by: str
    note: str
    at: str

    def as_dict(self) -> dict:
        return {"schema": APPROVAL_SCHEMA, "plan_hash": self.plan_hash, "index": self.index, "kind": self.kind,
                "by": self.by, "note": self.note, "at": self.at}


def approval_path(plan_path: str | Path) -> Path:
    p = Path(plan_path)
    return p.with_name(p.name.removesuffix(".json") + ".approval.json")


def approve(plan: Plan, plan_path: str | Path, by: str, note: str = "") -> tuple[Approval, Path]:
    """Record ``by``'s approval of ``plan`` beside its file."""
    if not by.strip():
        raise PlanError("--by: an approval needs the approver's name")
    rec = Approval(plan.plan_hash, plan.index, plan.kind, by.strip(), note,
                   _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    path = approval_path(plan_path)
    atomic_write_text(path, json.dumps(rec.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return rec, path


def read_approval(plan_path: str | Path) -> Approval | None:
    path = approval_path(plan_path)
    if not path.is_file():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
        return Approval(d["plan_hash"], d["index"], d["kind"], d["by"], d.get("note", ""), d["at"])
    except (ValueError, KeyError) as err:
        raise PlanError(f"{path}: not a valid approval record ({err})") from None


def check_approval(plan: Plan, approval: Approval | None,
                   required: tuple[bool, list[str]] | None = None) -> Approval | None:
    """Raise ApprovalError unless the plan needs no approval or ``approval`` is bound to it. ``required``
    is the policy re-derived from the config in force (apply passes it; the plan's own ``approval``
    field is only a report and is used when nothing else is given)."""
    needs, why = required if required is not None else (plan.body["approval"]["required"],
                                                           plan.body["approval"]["reasons"])
    if not needs:
        return approval
    reasons = "; ".join(why)
    if approval is None:
        raise ApprovalError(
            f"plan {plan.plan_hash[:12]} ({plan.kind}) needs approval ({reasons}); run `reindex approve PLAN --by NAME`"
        )
    if approval.plan_hash != plan.plan_hash:
        raise ApprovalError(
            f"the approval by {approval.by} is for plan {approval.plan_hash[:12]}, not {plan.plan_hash[:12]}: "
            "the plan changed after it was approved; approve the new plan"
        )
    return approval
