"""The plan document: an immutable, hashed JSON body; sealing, reading, verifying and naming plan files."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from glob import escape as glob_escape
from pathlib import Path
from typing import Any, Mapping

from reindex.foundation.atomic import atomic_write_text, make_folders
from reindex.domain.kinds import ChangeKind
from reindex.errors import PlanError
from reindex.domain.identity import canonical_json
from reindex.planner._numbers import KeyNumbers, key_numbers

__all__ = ["PLAN_SCHEMA", "Plan", "hash_body", "plan_filename", "prune_plans", "read_plan", "seal", "write_plan"]

PLAN_SCHEMA = "reindex/plan/v1"


@dataclass(frozen=True)
class Plan:
    """An immutable plan: ``body`` is the JSON document; ``plan_hash`` covers all of it."""

    body: Mapping[str, Any]

    @property
    def plan_hash(self) -> str:
        return self.body["plan_hash"]

    @property
    def kind(self) -> ChangeKind:
        return ChangeKind.of(self.body["kind"])

    @property
    def index(self) -> str:
        return self.body["index"]

    @property
    def numbers(self) -> KeyNumbers:
        """The plan's key numbers, typed (:func:`reindex.planner.key_numbers`)."""
        return key_numbers(self)

    def summary(self) -> dict[str, Any]:
        """The key numbers scripts read (``reindex plan --json``)."""
        return key_numbers(self).summary()


def hash_body(body: Mapping[str, Any]) -> str:
    """The plan's own hash: canonical JSON of every field but ``plan_hash``."""
    data = {k: v for k, v in body.items() if k != "plan_hash"}
    return hashlib.blake2b(canonical_json(data).encode(), digest_size=16).hexdigest()


def seal(body: dict[str, Any]) -> Plan:
    body = json.loads(canonical_json(body))  # plain JSON types only, so the hash is reproducible
    body["plan_hash"] = hash_body(body)
    return Plan(body)


def plan_filename(plan: Plan) -> str:
    date = plan.body["created_at"][:10]
    return f"{date}-{plan.index}-{plan.kind.value.replace('/', '-')}-{plan.plan_hash[:8]}.json"


def write_plan(plan: Plan, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    make_folders(out)  # durable, as the plan file in it
    path = out / plan_filename(plan)
    return atomic_write_text(path, json.dumps(plan.body, indent=2, ensure_ascii=False) + "\n")


def prune_plans(plans_dir: str | Path, index: str, keep: int | None,
                carried_out: Callable[[str], bool]) -> list[str]:
    """Delete the files of ``index``'s plans in ``plans_dir`` past the newest ``keep`` (``plans.keep``; None: none)
    that were carried out in place (``carried_out(plan hash)``, their run recorded in the state): the plan, its
    reports, run and cutover reports, approval and rejection. A plan that builds a population (its kind is in its
    name) or was not carried out is never deleted: a cutover, a rollback or an approval may need it. Returns the plan
    files deleted. A live mode writes a plan and three reports per change: without this, its folder only grew."""
    folder = Path(plans_dir)
    if keep is None or not folder.is_dir():
        return []
    plans = []
    for p in folder.glob(f"*-{index}-*.json"):
        if p.name.count(".") != 1:
            continue
        try:
            plans.append((p.stat().st_mtime_ns, p))
        except OSError:
            continue
    plans.sort(reverse=True)
    in_place = tuple(f"-{index}-{k.value.replace('/', '-')}-" for k in ChangeKind if k.in_place)
    gone = []
    for _, p in plans[keep:]:
        if not any(m in p.name for m in in_place):
            continue
        try:
            plan = read_plan(p)
        except PlanError:
            continue
        if plan.index != index or not plan.kind.in_place or not carried_out(plan.plan_hash):
            continue
        stem = p.name.removesuffix(".json")
        for other in [*folder.glob(f"{glob_escape(stem)}.*"), folder / "approvals" / p.name, folder / "rejections" / p.name]:
            if other != p:
                other.unlink(missing_ok=True)
        p.unlink(missing_ok=True)  # last: a plan file whose reports are gone is still one that can be read again
        gone.append(str(p))
    return gone


def read_plan(path: str | Path) -> Plan:
    """Load a plan file and verify its hash (a tampered plan is refused)."""
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"{p}: plan file not found")
    try:
        body = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as err:
        raise PlanError(f"{p}: not a plan file (invalid JSON: {err})") from None
    except RecursionError:
        raise PlanError(f"{p}: not a plan file (its JSON is nested too deeply to read)") from None
    if not isinstance(body, dict) or body.get("schema") != PLAN_SCHEMA:
        raise PlanError(f"{p}: not a plan file (schema is not {PLAN_SCHEMA})")
    expected = hash_body(body)
    if body.get("plan_hash") != expected:
        raise PlanError(
            f"{p}: plan hash mismatch (file says {str(body.get('plan_hash'))[:12]}…, contents hash to {expected[:12]}…): "
            "the plan was edited after it was made; run `reindex plan` again"
        )
    return Plan(body)
