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
from reindex.books.layout import Books
from reindex.books.manifests import read_live
from reindex.domain.config import PipelineConfig
from reindex.domain.identity import canonical_json, config_digest
from reindex.planner._numbers import KeyNumbers, key_numbers

__all__ = ["PLAN_SCHEMA", "Plan", "PlanBaseline", "PlanCorpus", "PlanRepair", "check_plan_index", "config_in_force",
           "hash_body", "plan_filename", "prune_plans", "read_plan", "seal", "write_plan"]

PLAN_SCHEMA = "reindex/plan/v1"


@dataclass(frozen=True, slots=True)
class PlanBaseline:
    """What a plan was made against (``inputs.baseline``): ``kind`` ``live`` | ``none`` (an initial build) |
    ``explicit`` (a what-if), the live collection and the digest of its chunk manifest and committed cursor."""

    kind: str | None
    collection: str | None
    manifest_digest: str | None
    cursor: str | None
    raw: Mapping[str, Any]  # the whole record: two baselines are the same when every field is (hashed with the plan)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlanBaseline) and dict(self.raw) == dict(other.raw)

    def __hash__(self) -> int:
        return hash(json.dumps(dict(self.raw), sort_keys=True, default=str))


@dataclass(frozen=True, slots=True)
class PlanCorpus:
    """The corpus a plan read (``inputs.corpus``): its digest, how it was read (whole or from a cursor: ``read``,
    a dict the reports render) and, for an in-place plan, the digest of its scope — the documents it changes, as it
    priced them (``touched``, :func:`reindex.domain.identity.touched_digest`; None: every document, as a build, and
    plans made before scopes)."""

    digest: str
    read: Mapping[str, Any]
    touched: str | None


@dataclass(frozen=True, slots=True)
class PlanRepair:
    """A repair plan's own work (``reindex doctor --repair``): documents written again, points deleted."""

    documents: tuple[str, ...]
    delete_points: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """An immutable plan: ``body`` is the JSON document; ``plan_hash`` covers all of it. Code outside the planner
    reads it through the typed properties below and :attr:`numbers`, never by subscripting ``body``."""

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

    # -- typed views of the body ----------------------------------------------------------------------

    @property
    def new_collection(self) -> str:
        """The collection the plan writes: a new population's, or the live one an in-place plan changes."""
        return self.body["identity"]["new"]["collection"]

    @property
    def baseline(self) -> PlanBaseline:
        b = self.body["inputs"]["baseline"]
        return PlanBaseline(b.get("kind"), b.get("collection"), b.get("manifest_digest"), b.get("cursor"), b)

    @property
    def corpus(self) -> PlanCorpus:
        c = self.body["inputs"]["corpus"]
        touched = c.get("touched")
        return PlanCorpus(c["digest"], c.get("read") or {"mode": "full"},
                          str(touched["digest"]) if isinstance(touched, dict) and "digest" in touched else None)

    @property
    def config_digest(self) -> str:
        """The digest of the config the plan was made from (``apply`` refuses another)."""
        return self.body["inputs"]["config"]["digest"]

    @property
    def documents_changed(self) -> bool:
        return bool(self.body["documents_changed"])

    @property
    def repair(self) -> PlanRepair | None:
        r = self.body.get("repair")
        return PlanRepair(tuple(r.get("documents", ())), tuple(r.get("delete_points", ()))) if r else None

    @property
    def carried_id(self) -> str | None:
        """The id of the chunks this plan carries to its apply (:mod:`reindex.books.carried`), None when none."""
        return (self.body.get("carried") or {}).get("id")

    @property
    def tokens_by_shard(self) -> tuple[int, ...]:
        """Tokens apply embeds in each shard of the layout it writes (empty for plans made before, or sampled)."""
        return tuple(self.body["work"].get("tokens_to_embed_by_shard") or ())

    @property
    def footprint(self) -> Mapping[str, Any] | None:
        """The priced footprint (``old``, ``new``, ``peak``: RAM and disk bytes; ``backend``, ``mode``)."""
        return (self.body.get("cost") or {}).get("footprint")

    @property
    def index_build(self) -> Mapping[str, Any]:
        """The priced index build (``cpu_seconds``, …; empty for plans made before it was priced)."""
        return (self.body.get("cost") or {}).get("index_build") or {}

    @property
    def rate_per_cpu_second(self) -> float:
        """Tokens one CPU embeds per second, as the plan priced them (a measured rate's, else the plan's tokens per
        minute spread over the machine's CPUs)."""
        cost = self.body["cost"]
        per_cpu = (cost.get("rate_assumes") or {}).get("tokens_per_cpu_second")
        return float(per_cpu) if per_cpu else float(cost.get("tokens_per_minute") or 0) / 60


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
    files deleted. A live mode writes a plan and its reports per change: without this, its folder only grew."""
    if keep is None or not Path(plans_dir).is_dir():
        return []
    plans = []
    for p in Books.plan_files(plans_dir, index):
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
        beside = [q for q in p.parent.glob(f"{glob_escape(stem)}.*") if q != p]  # reports, run report, legacy records
        for other in [*beside, Books.approval_path(p), Books.rejection_path(p)]:
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

