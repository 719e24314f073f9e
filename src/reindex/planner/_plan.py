"""The plan document: an immutable, hashed JSON body; sealing, reading, verifying and naming plan files."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from reindex.foundation.atomic import atomic_write_text, make_folders
from reindex.domain.kinds import ChangeKind
from reindex.errors import PlanError
from reindex.books.manifests import read_live
from reindex.domain.config import PipelineConfig
from reindex.domain.identity import canonical_json, config_digest
from reindex.planner._numbers import KeyNumbers, key_numbers

__all__ = ["PLAN_SCHEMA", "Plan", "check_plan_index", "config_in_force", "hash_body", "plan_filename", "read_plan",
           "seal", "write_plan"]

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


def check_plan_index(plan: Plan, cfg: PipelineConfig, plan_path: str | Path) -> None:
    if plan.index != cfg.index:
        raise PlanError(f"{plan_path}: plan is for index {plan.index!r}, but the config is for {cfg.index!r}")



def config_in_force(plan: Plan, cfg: PipelineConfig, state) -> PipelineConfig:
    """The config a plan is carried out under: the config file's, or — for the in-place part of a pipeline
    change (:func:`plan_in_place_part`) — the live population's own config governed by it. Anything else
    is left to the drift check, which refuses a plan made from another config."""
    want = plan.body["inputs"]["config"]["digest"]
    if not plan.kind.in_place or want == config_digest(cfg):
        return cfg
    live = read_live(state, cfg.index)
    if live is not None:
        governed = live.governs(cfg)
        if config_digest(governed) == want:
            return governed
    return cfg

