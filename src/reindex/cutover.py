"""Gate, atomic alias swap, verify, rollback, retention and gc.

Invariant: the alias moves only in one ``update_collection_aliases`` call (``swap_alias``), only
after the gate passed (or a forced cutover of an approved plan), and the population an alias points
at is never deleted."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from reindex.errors import CutoverError
from reindex.manifests import (
    PopulationRecord,
    read_json,
    index_prefix,
    population_prefix,
    read_live,
    read_population,
    write_live,
    write_population,
)
from reindex.stores.objects import ObjectStore




@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict:
        return {"rule": self.name, "passed": self.passed, "detail": self.detail}


def gate(policy: Any, evaluation: dict | None, *, shadow_points: int, planned_chunks: int, failures: int,
         k: int) -> list[Rule]:
    """Pass/fail per rule of the cutover policy (config ``cutover``)."""
    rules = []
    if policy.require_exact_count:
        rules.append(Rule("point-count", shadow_points == planned_chunks,
                          f"shadow holds {shadow_points:,} points, its chunk manifest has {planned_chunks:,} chunks"))
    rules.append(Rule("no-failed-shards", failures == 0, f"{failures} failed shards or documents"))
    if evaluation is not None:
        agg = evaluation["aggregate"]
        diff = agg.get(f"recall_at_{k}_diff")
        if diff is not None:
            rules.append(Rule(f"recall@{k}", diff["low"] >= policy.min_recall_delta,
                              f"recall@{k} new − old = {diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]; "
                              f"lower bound must be ≥ {policy.min_recall_delta:+.3f}"))
        else:
            ov = agg.get(f"overlap_at_{k}", 0.0)
            rules.append(Rule(f"overlap@{k}", ov >= policy.min_overlap,
                              f"mean document overlap@{k} = {ov:.3f}; must be ≥ {policy.min_overlap:.3f} (no labels)"))
    return rules


def check_names(store: Any, index: str) -> None:
    """Refuse when a collection is named like the alias (an alias and a collection would share a name)."""
    if store.collection_exists(index):
        raise CutoverError(
            f"a collection named {index!r} exists, so the alias {index!r} cannot be created; "
            "rename or delete that collection (readers should query the alias, not a collection)"
        )


def swap(store: Any, state: ObjectStore, index: str, new: str, expected_current: str | None,
         probe_vector: Any = None) -> dict:
    """Move the alias ``index`` to ``new`` in one atomic call, verify, and record the previous target."""
    current = store.get_alias(index)
    if current is None:
        check_names(store, index)
    if current != expected_current:
        raise CutoverError(
            f"alias {index!r} points to {current or 'nothing'} but the plan expected {expected_current or 'nothing'}: "
            "someone else moved it; plan again"
        )
    if not store.collection_exists(new):
        raise CutoverError(f"collection {new} does not exist; run `reindex apply` first")
    store.swap_alias(index, new, current)
    resolved = store.get_alias(index)
    if resolved != new:
        raise CutoverError(f"alias {index!r} resolves to {resolved} after the swap, not {new}")
    verified = None
    if probe_vector is not None:
        hits = store.query(index, probe_vector, limit=1)
        new_rec = read_population(state, index, new)
        want = new_rec.identity["pipeline_id"] if new_rec else None
        verified = bool(hits) and hits[0].payload.get("pipeline_id") == want
        if not verified:
            store.swap_alias(index, current, new) if current else store.delete_alias(index)
            raise CutoverError(f"a query through {index!r} did not answer from {new}; the alias was moved back")
    now = time.time()
    write_live(state, index, new, current)
    _set_state(state, index, new, "live", now)
    if current:
        _set_state(state, index, current, "retired", now)
    record = {"index": index, "from": current, "to": new, "at": now, "verified_query": verified}
    state.put(f"{index_prefix(index)}/history/{int(now * 1000)}-cutover.json", json.dumps(record).encode())
    return record


def _set_state(state: ObjectStore, index: str, collection: str, value: str, at: float) -> None:
    rec = read_population(state, index, collection)
    if rec is None:
        return
    write_population(state, PopulationRecord(rec.index, rec.collection, rec.config, rec.identity, value,
                                             rec.created_at, at))


def rollback(store: Any, state: ObjectStore, index: str, to: str | None = None) -> dict:
    """Swap the alias back to the previous population (or ``to``) in one atomic call."""
    live = read_json(state, f"{index_prefix(index)}/live.json")
    current = store.get_alias(index)
    target = to or (live or {}).get("previous")
    if not target:
        raise CutoverError(f"index {index!r} has no previous population to roll back to (already rolled back, or never cut over)")
    if not store.collection_exists(target):
        raise CutoverError(f"cannot roll back to {target}: the collection no longer exists (deleted by gc?)")
    if target == current:
        raise CutoverError(f"alias {index!r} already points to {target}")
    store.swap_alias(index, target, current)
    now = time.time()
    write_live(state, index, target, None)
    _set_state(state, index, target, "live", now)
    if current:
        _set_state(state, index, current, "retired", now)
    record = {"index": index, "from": current, "to": target, "at": now}
    state.put(f"{index_prefix(index)}/history/{int(now * 1000)}-rollback.json", json.dumps(record).encode())
    return record


def populations(state: ObjectStore, index: str) -> list[PopulationRecord]:
    keys = [k for k in state.list(f"{index_prefix(index)}/populations/") if k.endswith("/population.json")]
    out = []
    for k in keys:
        d = read_json(state, k)
        if d:
            out.append(PopulationRecord.from_dict(d))
    return sorted(out, key=lambda r: r.created_at)


def gc(store: Any, state: ObjectStore, index: str, *, older_than_s: float, dry_run: bool,
       names: list[str] | None = None) -> list[dict]:
    """Delete retired populations past retention (or the named ones) and their state; never an alias target."""
    targets = set(store.list_aliases().values())
    live = read_live(state, index)
    protected = targets | ({live.collection} if live else set())
    now = time.time()
    actions = []
    recs = {r.collection: r for r in populations(state, index)}
    if names:
        for n in names:
            if n in protected:
                raise CutoverError(f"{n} is served by an alias (live); gc never deletes a live population")
            if n not in recs and not store.collection_exists(n):
                raise CutoverError(f"{n}: no such population of index {index!r}")
        chosen = names
    else:
        chosen = [c for c, r in recs.items()
                  if r.state == "retired" and now - r.updated_at >= older_than_s and c not in protected]
    for c in chosen:
        rec = recs.get(c)
        age = (now - rec.updated_at) / 86400 if rec else None
        actions.append({"collection": c, "state": rec.state if rec else "unknown",
                        "age_days": round(age, 2) if age is not None else None,
                        "action": "would delete" if dry_run else "deleted"})
        if dry_run:
            continue
        if store.collection_exists(c):
            store.delete_collection(c)
        for key in state.list(population_prefix(index, c) + "/"):
            state.delete(key)
    return actions
