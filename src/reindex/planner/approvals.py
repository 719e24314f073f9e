"""Approval and rejection records: a named person's decision bound to one plan's hash.

Stored under the plans folder (``plans/approvals/<plan>.json``, ``plans/rejections/<plan>.json``, named by
the plan file's stem) so that ``plans/`` is the approval trail while a ``plans/*.json`` glob finds plans
only; records written beside the plan by earlier versions (``<plan>.approval.json``,
``<plan>.rejection.json``) are still read. A changed plan has another hash, which invalidates both. A rejection is final for its
plan: it revokes an earlier approval (``check_approval`` refuses the plan) and a later ``approve`` is
refused. The CLI (`reindex approve`, `reindex approve --reject`) and the Prefect approval form write the
same records, so a decision taken in one place holds in the other.

A record is a plain file: whoever can write ``plans/`` can approve. With ``approval.hmac_key_env`` set, an
approval carries an HMAC-SHA256 signature over its fields (plan hash, decision, by, at, …) made with the key in
that environment variable, and apply and ``cutover --force`` refuse an approval that is unsigned or whose
signature does not match (:func:`read_approval` with ``key``). Rejections are not signed: a rejection can
only stop a plan, never let one through."""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from reindex.foundation.atomic import atomic_write_text
from reindex.errors import ApprovalError
from reindex.planner import Plan, PlanError

__all__ = [
    "APPROVAL_SCHEMA", "REJECTION_SCHEMA", "Approval", "Rejection", "approval_path", "approve", "carry_over", "check_approval",
    "check_not_rejected", "read_approval", "read_rejection", "reject", "rejection_path", "same_change", "signing_key",
]

APPROVAL_SCHEMA = "reindex/approval/v1"
REJECTION_SCHEMA = "reindex/rejection/v1"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A named person's rejection of one plan (final for that plan hash)."""

    plan_hash: str
    index: str
    kind: str
    by: str
    reason: str
    at: str

    def as_dict(self) -> dict:
        return {"schema": REJECTION_SCHEMA, "plan_hash": self.plan_hash, "index": self.index, "kind": self.kind,
                "by": self.by, "reason": self.reason, "at": self.at}

    def sentence(self) -> str:
        return f"rejected by {self.by} at {self.at} ({self.reason or 'no reason given'})"


@dataclass(frozen=True, slots=True)
class Approval:
    plan_hash: str
    index: str
    kind: str
    by: str
    note: str
    at: str
    # The rejection recorded beside the same plan file, if any: it revokes this approval.
    rejection: Rejection | None = None
    # "hmac-sha256:<hex>" over :meth:`signed_fields` when approval.hmac_key_env is set, else None.
    signature: str | None = None

    def signed_fields(self) -> dict:
        """What the signature covers: every field of the record and the decision."""
        return {"schema": APPROVAL_SCHEMA, "decision": "approve", "plan_hash": self.plan_hash, "index": self.index,
                "kind": self.kind, "by": self.by, "note": self.note, "at": self.at}

    def as_dict(self) -> dict:
        d = {"schema": APPROVAL_SCHEMA, "plan_hash": self.plan_hash, "index": self.index, "kind": self.kind,
             "by": self.by, "note": self.note, "at": self.at}
        return d if self.signature is None else {**d, "signature": self.signature}


def signing_key(env_name: str | None) -> bytes | None:
    """The approval signing key from the environment variable ``approval.hmac_key_env`` names (None when
    signing is not configured)."""
    if env_name is None:
        return None
    value = os.environ.get(env_name, "")
    if not value:
        raise ApprovalError(f"approval.hmac_key_env: environment variable {env_name} is not set (approvals are "
                            "signed and verified with the key it holds)")
    return value.encode("utf-8")


def _sign(fields: dict, key: bytes) -> str:
    message = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return "hmac-sha256:" + hmac.new(key, message, hashlib.sha256).hexdigest()


def _verify(rec: Approval, key: bytes, path: Path) -> None:
    if not rec.signature:
        raise ApprovalError(f"{path}: the approval by {rec.by} is not signed, but approval.hmac_key_env is set: "
                            "record it with `reindex approve PLAN --by NAME -c CONFIG` where the key is set")
    if not hmac.compare_digest(rec.signature, _sign(rec.signed_fields(), key)):
        raise ApprovalError(f"{path}: the approval's signature does not match its content (changed after signing, "
                            "or signed with another key); approve the plan again with `reindex approve`")


def approval_path(plan_path: str | Path) -> Path:
    """Where the approval of a plan is written: ``<plans>/approvals/<plan stem>.json``."""
    p = Path(plan_path)
    return p.parent / "approvals" / (p.name.removesuffix(".json") + ".json")


def rejection_path(plan_path: str | Path) -> Path:
    """Where the rejection of a plan is written: ``<plans>/rejections/<plan stem>.json``."""
    p = Path(plan_path)
    return p.parent / "rejections" / (p.name.removesuffix(".json") + ".json")


def _legacy_path(plan_path: str | Path, what: str) -> Path:
    # Before issue 15 records lay beside the plan, where `plans/*.json` also matched them.
    p = Path(plan_path)
    return p.with_name(p.name.removesuffix(".json") + f".{what}.json")


def _existing(path: Path, plan_path: str | Path, what: str) -> Path | None:
    """The record file to read: the current location, else the legacy one beside the plan."""
    if path.is_file():
        return path
    legacy = _legacy_path(plan_path, what)
    return legacy if legacy.is_file() else None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def check_not_rejected(plan: Plan, plan_path: str | Path) -> None:
    """Raise ApprovalError if ``plan`` was rejected (a rejection is final for its hash)."""
    rej = read_rejection(plan_path)
    if rej is not None and rej.plan_hash == plan.plan_hash:
        raise ApprovalError(f"plan {plan.plan_hash[:12]} was {rej.sentence()}: a rejected plan cannot be approved "
                            "or applied; run `reindex plan` again for a new plan")


def approve(plan: Plan, plan_path: str | Path, by: str, note: str = "",
            key: bytes | None = None) -> tuple[Approval, Path]:
    """Record ``by``'s approval of ``plan`` beside its file (refused once the plan was rejected), signed
    with ``key`` when given."""
    if not by.strip():
        raise PlanError("--by: an approval needs the approver's name")
    check_not_rejected(plan, plan_path)
    rec = Approval(plan.plan_hash, plan.index, plan.kind, by.strip(), note, _now())
    if key is not None:
        rec = replace(rec, signature=_sign(rec.signed_fields(), key))
    path = approval_path(plan_path)
    atomic_write_text(path, json.dumps(rec.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return rec, path


def same_change(a: Plan, b: Plan) -> bool:
    """Two plans of one pipeline change: same index, kind and config, against the same live population (their
    corpus and the live population's documents may differ: edits synced in place meanwhile)."""
    x, y = a.body["inputs"], b.body["inputs"]
    return (a.index == b.index and a.kind == b.kind and a.kind.pipeline_scoped
            and x["config"]["digest"] == y["config"]["digest"]
            and x["baseline"].get("collection") == y["baseline"].get("collection")
            and x["baseline"].get("pipeline_id") == y["baseline"].get("pipeline_id"))


def carry_over(fresh: Plan, fresh_path: str | Path, approved: Plan, approval: Approval, share: float,
               key: bytes | None = None) -> Approval | None:
    """Record ``approval`` of ``approved`` as the approval of ``fresh`` (a re-plan of the same change, see
    :func:`same_change`) when its tokens to embed and new vectors are each within ``share`` of the approved
    plan's; None (nothing written) otherwise, or when either plan was rejected."""
    if share <= 0 or not same_change(fresh, approved) or approval.plan_hash != approved.plan_hash:
        return None
    if approval.rejection is not None and approval.rejection.plan_hash == approved.plan_hash:
        return None
    rej = read_rejection(fresh_path)
    if rej is not None and rej.plan_hash == fresh.plan_hash:
        return None
    a, f = approved.numbers, fresh.numbers
    moves = {"tokens to embed": (a.tokens_to_embed, f.tokens_to_embed), "new vectors": (a.vectors_new, f.vectors_new)}
    for old, new in moves.values():
        if abs(new - old) > share * max(old, 1):
            return None
    said = ", ".join(f"{what} {old:,} → {new:,}" for what, (old, new) in moves.items())
    note = (f"carried over from plan {approved.plan_hash[:12]} approved by {approval.by} at {approval.at} "
            f"(same change; {said}; within approval.carry_over {share:.0%})"
            + (f": {approval.note}" if approval.note else ""))
    rec = Approval(fresh.plan_hash, fresh.index, fresh.kind, approval.by, note, _now())
    if key is not None:
        rec = replace(rec, signature=_sign(rec.signed_fields(), key))
    atomic_write_text(approval_path(fresh_path), json.dumps(rec.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return rec


def reject(plan: Plan, plan_path: str | Path, by: str, reason: str = "") -> tuple[Rejection, Path]:
    """Record ``by``'s rejection of ``plan`` beside its file; it revokes any approval of the same plan."""
    if not by.strip():
        raise PlanError("--by: a rejection needs the name of who rejects")
    existing = read_rejection(plan_path)
    if existing is not None and existing.plan_hash == plan.plan_hash:
        return existing, _existing(rejection_path(plan_path), plan_path, "rejection") or rejection_path(plan_path)  # the first rejection stays the record
    rec = Rejection(plan.plan_hash, plan.index, plan.kind, by.strip(), reason, _now())
    path = rejection_path(plan_path)
    atomic_write_text(path, json.dumps(rec.as_dict(), indent=2, ensure_ascii=False) + "\n")
    return rec, path


def read_rejection(plan_path: str | Path) -> Rejection | None:
    """The rejection of a plan file (current or legacy location), or None."""
    path = _existing(rejection_path(plan_path), plan_path, "rejection")
    if path is None:
        return None
    d = _record(path, "rejection", ("plan_hash", "index", "kind", "by", "at"), ("reason",))
    return Rejection(d["plan_hash"], d["index"], d["kind"], d["by"], d.get("reason", ""), d["at"])


def _record(path: Path, what: str, required: tuple[str, ...], optional: tuple[str, ...]) -> dict:
    """A record file's fields, each checked to be text; PlanError naming the file and the field otherwise."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise PlanError(f"{path}: not a valid {what} record (not JSON: {why})") from None
    if not isinstance(d, dict):
        raise PlanError(f"{path}: not a valid {what} record (a JSON {type(d).__name__}, not an object)")
    again = "reindex approve PLAN --by NAME" + (" --reject" if what == "rejection" else "")
    for name in required + optional:
        if name in optional and d.get(name) is None:
            d.pop(name, None)
            continue
        if name not in d:
            raise PlanError(f"{path}: not a valid {what} record (no {name!r}); delete it and record the {what} "
                            f"again with `{again}`")
        if not isinstance(d[name], str):
            raise PlanError(f"{path}: not a valid {what} record ({name} is {json.dumps(d[name])[:40]}, not text); "
                            f"delete it and record the {what} again with `{again}`")
    return d


def read_approval(plan_path: str | Path, key: bytes | None = None) -> Approval | None:
    """The approval recorded beside a plan file, carrying the plan's rejection (if any). With ``key`` (signing
    configured), an unsigned or badly signed record raises ApprovalError."""
    path = _existing(approval_path(plan_path), plan_path, "approval")
    if path is None:
        return None
    d = _record(path, "approval", ("plan_hash", "index", "kind", "by", "at"), ("note", "signature"))
    rec = Approval(d["plan_hash"], d["index"], d["kind"], d["by"], d.get("note", ""), d["at"],
                   read_rejection(plan_path), d.get("signature"))
    if key is not None:
        _verify(rec, key, path)
    return rec


def check_approval(plan: Plan, approval: Approval | None,
                   required: tuple[bool, list[str]] | None = None) -> Approval | None:
    """Raise ApprovalError unless the plan needs no approval or ``approval`` is bound to it and was not
    revoked by a rejection of the same plan. ``required`` is the policy re-derived from the config in force
    (apply passes it; the plan's own ``approval`` field is only a report, used when nothing else is given)."""
    rej = approval.rejection if approval is not None else None
    if rej is not None and rej.plan_hash == plan.plan_hash:
        raise ApprovalError(f"the approval by {approval.by} of plan {plan.plan_hash[:12]} was revoked: the plan was "
                            f"{rej.sentence()}; run `reindex plan` again for a new plan")
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
