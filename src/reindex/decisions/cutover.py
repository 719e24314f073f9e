"""Gate, atomic alias swap, verify, rollback, retention and gc.

Invariant: the alias moves only in one ``update_collection_aliases`` call (``swap_alias``), only
after the gate passed (or a forced cutover of an approved plan), and the population an alias points
at is never deleted."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from reindex.domain.kinds import PopulationState
from reindex.errors import CutoverError, StateError
from reindex.engine.execution import crashpoint
from reindex.books.manifests import (
    Population,
    count_chunk_manifest_rows,
    read_apply_record,
    read_chunk_manifest_columns,
    read_json,
    read_live,
    read_live_record,
    read_population,
    reset_serving,
    write_live,
    write_population,
)
from reindex.adapters.stores.objects import ObjectStore
from reindex.books.layout import Books
from reindex.decisions import evaluation as ev
from reindex.decisions.gate import (
    Rule,
    add_latency,
    compare_forecast,
    gate,
    gate_bounds,
    identical_populations,
    measure_health,
    primary_metric,
    verdict_words,
)

__all__ = [
    "CutoverInputs", "SERVABLE", "VERIFY_SAMPLE", "check_names", "delete_population", "gc_candidates", "last_move_to",
    "pending_intent", "populations", "populations_checked", "reconcile", "require_verified", "restore_live", "rollback", "run_cutover", "swap",
    "verify_population",
]




@dataclass(frozen=True)
class CutoverInputs:
    """What one cutover needs besides the stores, gathered by the use case: the plan's shadow and the live
    population it was made against, the policy, and the steps that need the config (each called only when
    the cutover gets that far: catch the shadow up, read or sample the queries, evaluate old vs new, embed a
    query for the post-swap probe)."""

    index: str
    plan_hash: str
    shadow: str
    expected_live: str | None  # the alias target the plan was made against (None: an initial build)
    k: int
    policy: Any  # config.cutover
    force: bool
    forced_by: Callable[[], str | None]
    catch_up: Callable[[], dict | None]
    queries: Callable[[], tuple[list, str]]
    evaluate: Callable[[str, list], tuple[dict, str]]
    embed: Callable[[list[str]], Any]
    fence: Callable[[], None]
    # A first build (no live population): the queries on the new population alone, for its own figures.
    evaluate_alone: Callable[[list], dict] | None = None
    # The plan's forecast (None: none was made): shown beside what the cutover measures.
    forecast: dict | None = None


def run_cutover(store: Any, state: ObjectStore, inputs: CutoverInputs) -> dict:
    """One cutover, in order: complete or undo an alias move a killed process left (reconcile); check the
    alias still points where the plan expects; catch the shadow up; evaluate old vs new on identical queries;
    gate; swap atomically when the gate passed (or ``force``). Returns the cutover report (``swap`` is None
    when the alias did not move; ``already`` when it served the shadow before this call)."""
    i = inputs
    t0 = time.perf_counter()
    recovered = reconcile(store, state, i.index)
    current = store.get_alias(i.index)
    base = {"index": i.index, "plan_hash": i.plan_hash, "shadow": i.shadow, "live": current, "k": i.k,
            "swap": None, "forced_by": None, "recovered": recovered}
    if current == i.shadow:
        return {**base, "passed": True, "already": True, "rules": [], "evaluation": None, "queries_source": None,
                "query_vectors": None}
    if current != i.expected_live:
        raise CutoverError(
            f"alias {i.index!r} points to {current or 'nothing'} but the plan was made against "
            f"{i.expected_live or 'no alias'}: someone else moved it; run `reindex plan` again")
    if current is None:
        check_names(store, i.index)
    caught_up = i.catch_up()
    if caught_up:
        # The catch-up wrote into the shadow after its index was built: build what it added (the embedded store indexes
        # only in finish_bulk; past its indexing threshold, those points would be scanned by every search).
        store.finish_bulk(i.shadow)
    # What readers will get: both indexes, fully built (a server waited for) and their recall against exact search.
    health = measure_health(store, current, i.shadow, i.policy)
    qs, query_source = i.queries()
    evaluation, vectors_note = i.evaluate(current, qs) if current is not None else (None, None)
    # A first build has nothing to compare with: its queries still run, on the new population alone, so that it
    # has figures later cutovers can be held against; the gate keeps only the rules that apply to it.
    alone = i.evaluate_alone(qs) if current is None and qs and i.evaluate_alone is not None else None
    add_latency(health, evaluation, alone)
    if evaluation is not None and evaluation.get("segments") is not None:
        # Every segment's intervals corrected for the bound the gate holds each metric to (the primary metric's
        # min_delta, recall's floor), so that the report shows the intervals the gate judged.
        bounds = gate_bounds(i.policy, i.k)
        evaluation["segments"] = ev.segment_results(evaluation["rows"], list(evaluation["segments"]), i.k,
                                                    bound=bounds, seed=getattr(i.policy, "seed", 0))
        evaluation["segment_bound"] = bounds
    identical = identical_populations(state, i.index, current, i.shadow) if current is not None else None
    rules = _gate_rules(store, state, i, evaluation, health, identical)
    passed = all(r.passed for r in rules)
    primary = primary_metric(getattr(i.policy, "metric", "ndcg"), i.k)
    report = {**base, "queries_source": query_source if qs or current is not None else "none (initial build)",
              "query_vectors": vectors_note, "rules": [r.as_dict() for r in rules], "passed": passed,
              "evaluation": evaluation, "first_build": alone, "already": False, "caught_up": caught_up,
              "verdict": evaluation["aggregate"].get("verdict") if evaluation else None,
              "verdict_words": verdict_words(evaluation["aggregate"]) if evaluation else None,
              "identical": identical, "metric": primary,
              "power": _gate_power(rules, primary, i.k, i.forecast), "index_health": health,
              "forecast": compare_forecast(i.forecast, evaluation["aggregate"], primary) if evaluation else None,
              "segments": (evaluation or {}).get("segments", {})}
    if passed or i.force:
        if not passed:
            report["forced_by"] = i.forced_by()
            logging.getLogger("reindex").warning("forced cutover of %s by %s despite failed rules", i.shadow,
                                                 report["forced_by"])
        probe = i.embed([qs[0].text])[0] if qs else None
        report["swap"] = swap(store, state, i.index, i.shadow, current, probe, fence=i.fence,
                              forced_by=report["forced_by"])
    report["seconds"] = round(time.perf_counter() - t0, 3)
    # What the index-health check cost, as a share of the whole cutover (its target: at most a fifth).
    health["share_of_cutover"] = round(health["seconds"] / report["seconds"], 4) if report["seconds"] else None
    return report


def _gate_power(rules: list[Rule], primary: str, k: int, forecast: dict | None) -> dict:
    """Per gated metric (the primary one, recall's floor): the interval's half-width on the gate's queries and the
    queries the rule would need (:func:`reindex.decisions.evaluation.power`), beside the forecast's own figures."""
    names = {"evidence": primary, f"recall@{k}": f"recall_at_{k}"}
    out = {}
    for r in rules:
        if r.power is not None and r.name in names:
            metric = names[r.name]
            out[metric] = {**r.power, "outcome": r.outcome}
            planned = ((forecast or {}).get("power") or {}).get(metric)
            if planned:
                out[metric]["forecast"] = planned
    return out


def _gate_rules(store: Any, state: ObjectStore, i: CutoverInputs, evaluation: dict | None, health: dict | None = None,
                identical: str | None = None) -> list[Rule]:
    """The gate against the shadow's chunk manifest (the plan's chunks plus catch-up changes) and the apply's
    own record of its run in the state store (the run report beside the plan is a copy for people: a plan
    folder moved or cleaned must not change what the gate sees)."""
    run = read_apply_record(state, i.index, i.plan_hash) or {}
    expected_points = count_chunk_manifest_rows(state, i.index, i.shadow)
    return gate(i.policy, evaluation, shadow_points=store.count(i.shadow), planned_chunks=expected_points,
                failures=len(run.get("failures", [])), k=i.k, health=health, identical=identical)


def check_names(store: Any, index: str) -> None:
    """Refuse when a collection is named like the alias (an alias and a collection would share a name)."""
    if store.collection_exists(index):
        raise CutoverError(
            f"a collection named {index!r} exists, so the alias {index!r} cannot be created; "
            "rename or delete that collection (readers should query the alias, not a collection)"
        )


# --------------------------------------------------------------------------------------------
# Verified populations: only a complete population may go live
# --------------------------------------------------------------------------------------------

SERVABLE = tuple(s for s in PopulationState if s.servable)
VERIFY_SAMPLE = 32


def verify_population(store: Any, state: ObjectStore, index: str, collection: str, *,
                      sample: int = VERIFY_SAMPLE) -> list[str]:
    """Why ``collection`` must not go live (empty when it may): its state record says it was built
    completely, the collection exists, its point count equals its chunk manifest's rows, and a sample of
    manifest rows is stored with a vector and the same fingerprint."""
    rec = read_population(state, index, collection)
    if rec is None:
        return [f"{collection} has no population record: it was never built by reindex"]
    if not rec.state.servable:
        return [f"{collection} is {rec.state}, not a complete population"]
    if not store.collection_exists(collection):
        return [f"collection {collection} no longer exists (deleted by gc?)"]
    # Three columns, not row objects: at a million chunks a row list cost ~3 CPU-s and ~400 MB.
    rows: list[tuple[str, str, str]] = []  # (point id, doc id, fingerprint)
    for cols in read_chunk_manifest_columns(state, index, collection, ["point_id", "doc_id", "fingerprint"]):
        rows.extend(zip(cols["point_id"], cols["doc_id"], cols["fingerprint"]))
    problems = []
    points = store.count(collection)
    if points != len(rows):
        problems.append(f"{collection} holds {points:,} points but its chunk manifest has {len(rows):,} chunks")
    if rows and not problems:
        step = max(1, len(rows) // sample)
        picked = rows[::step][:sample]
        found = {p.id: p for p in store.retrieve(collection, [r[0] for r in picked], with_vectors=True)}
        dim = rec.config.vector.dimension
        for point_id, doc_id, fingerprint in picked:
            p = found.get(point_id)
            if p is None or p.vector is None:
                problems.append(f"point {point_id} of {doc_id} is missing from {collection}")
            elif p.payload.get("fingerprint") != fingerprint:
                problems.append(f"point {point_id} of {doc_id} holds another text than its manifest row")
            elif dim and len(p.vector) != dim:
                problems.append(f"point {point_id} has {len(p.vector)} dimensions, not {dim}")
            if len(problems) >= 3:
                break
    return problems


def require_verified(store: Any, state: ObjectStore, index: str, collection: str, action: str) -> None:
    """Raise CutoverError naming what is wrong unless ``collection`` verifies."""
    problems = verify_population(store, state, index, collection)
    if problems:
        raise CutoverError(f"refusing to {action} {collection}: " + "; ".join(problems)
                           + "; rebuild it with `reindex plan` and `reindex apply`")


# --------------------------------------------------------------------------------------------
# Intents: every alias move is recorded before it happens and completed or undone after a kill
# --------------------------------------------------------------------------------------------


def _intent_key(index: str) -> str:
    return Books(None, index).intent_key


def _finish_move(state: ObjectStore, index: str, op: str, new: str, previous: str | None, at: float,
                 extra: dict | None = None) -> dict:
    """The bookkeeping after the alias moved: live record, population states, serving back to native (the alias
    serves the new population now: readers stopped following the serving mode the moment it moved), history,
    intent cleared."""
    write_live(state, index, new, previous if op == "cutover" else None)
    reset_serving(state, index, f"{op} to {new}: native serving", at=at)
    _set_state(state, index, new, PopulationState.LIVE, at)
    if previous and previous != new:
        _set_state(state, index, previous, PopulationState.RETIRED, at)
    record = {"index": index, "from": previous, "to": new, "at": at, **(extra or {})}
    state.put(Books(state, index).history_key(int(at * 1000), op), json.dumps(record).encode())
    state.delete(_intent_key(index))
    return record


def last_move_to(state: ObjectStore, index: str, collection: str) -> dict | None:
    """The newest recorded alias move to ``collection`` (a cutover or a rollback), or None."""
    for key in sorted(state.list(Books(state, index).history_prefix), reverse=True):
        moved = read_json(state, key) or {}
        if moved.get("to") == collection:
            return moved
    return None


def pending_intent(state: ObjectStore, index: str) -> dict | None:
    """An alias move that was started and not finished (a killed cutover or rollback), if any."""
    return read_json(state, _intent_key(index))


def restore_live(store: Any, state: ObjectStore, index: str) -> dict | None:
    """Rebuild a missing ``live.json`` from what the alias serves and the population records (the alias is
    the truth readers see; the live record is its bookkeeping). Returns what was restored, or None when
    there is a live record already, or no alias, or the alias names a collection without a record."""
    if read_live_record(state, index):
        return None
    target = store.get_alias(index)
    rec = read_population(state, index, target) if target else None
    if rec is None:
        return None
    previous = None
    for key in sorted(state.list(Books(state, index).history_prefix), reverse=True):
        moved = read_json(state, key) or {}
        if moved.get("to") == target:
            previous = moved.get("from")
            break
    write_live(state, index, target, previous)
    if rec.state is not PopulationState.LIVE:
        _set_state(state, index, target, PopulationState.LIVE, time.time())
    return {"index": index, "collection": target, "previous": previous}


def reconcile(store: Any, state: ObjectStore, index: str) -> dict | None:
    """Complete or undo an alias move a killed process left behind. Returns what was done, or None.

    The intent names the move; the alias says how far it got: at the new population → finish the
    bookkeeping; still at the old one → drop the intent (nothing happened)."""
    intent = read_json(state, _intent_key(index))
    if not intent:
        return None
    current = store.get_alias(index)
    if current == intent["to"]:
        rec = _finish_move(state, index, intent["op"], intent["to"], intent.get("from"), time.time(),
                           {"recovered": True})
        return {"recovered": intent["op"], "outcome": "completed", **rec}
    state.delete(_intent_key(index))
    return {"recovered": intent["op"], "outcome": "undone", "index": index, "from": intent.get("from"),
            "to": intent["to"], "alias": current}


def _move_alias(store: Any, state: ObjectStore, index: str, op: str, new: str, current: str | None,
                fence: Callable[[], None] | None) -> None:
    """Confirm this writer still holds the index lock, record the intent, then move the alias in one atomic call."""
    if fence is not None:
        fence()
    state.put(_intent_key(index), json.dumps({"op": op, "from": current, "to": new, "at": time.time()}).encode())
    crashpoint(f"{op}-before-swap")
    store.swap_alias(index, new, current)
    crashpoint(f"{op}-after-swap")


def swap(store: Any, state: ObjectStore, index: str, new: str, expected_current: str | None,
         probe_vector: Any = None, fence: Callable[[], None] | None = None, forced_by: str | None = None) -> dict:
    """Move the alias ``index`` to ``new`` in one atomic call, verify, and record the previous target (and who forced
    it past a failed gate, ``forced_by``)."""
    current = store.get_alias(index)
    if current is None:
        check_names(store, index)
    if current != expected_current:
        raise CutoverError(
            f"alias {index!r} points to {current or 'nothing'} but the plan expected {expected_current or 'nothing'}: "
            "someone else moved it; plan again"
        )
    require_verified(store, state, index, new, "make live")
    _move_alias(store, state, index, "cutover", new, current, fence)
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
            state.delete(_intent_key(index))
            raise CutoverError(f"a query through {index!r} did not answer from {new}; the alias was moved back")
    return _finish_move(state, index, "cutover", new, current, time.time(),
                        {"verified_query": verified, **({"forced_by": forced_by} if forced_by else {})})


def _set_state(state: ObjectStore, index: str, collection: str, value: PopulationState, at: float) -> None:
    rec = read_population(state, index, collection)
    if rec is None:
        return
    write_population(state, rec.with_state(value, at=at))


def rollback(store: Any, state: ObjectStore, index: str, to: str | None = None,
             fence: Callable[[], None] | None = None) -> dict:
    """Swap the alias back to the previous population (or ``to``) in one atomic call, after verifying it."""
    live = read_live_record(state, index)
    current = store.get_alias(index)
    target = to or (live or {}).get("previous")
    if not target:
        raise CutoverError(f"index {index!r} has no previous population to roll back to (already rolled back, or never cut over)")
    if not store.collection_exists(target):
        raise CutoverError(f"cannot roll back to {target}: the collection no longer exists (deleted by gc?)")
    if target == current:
        raise CutoverError(f"alias {index!r} already points to {target}")
    require_verified(store, state, index, target, "roll back to")
    _move_alias(store, state, index, "rollback", target, current, fence)
    return _finish_move(state, index, "rollback", target, current, time.time())


def populations(state: ObjectStore, index: str) -> list[Population]:
    """Every population record of ``index``, oldest first; a damaged one raises, naming it."""
    found, damaged = populations_checked(state, index)
    if damaged:
        raise StateError(damaged[0][1])
    return found


def populations_checked(state: ObjectStore, index: str) -> tuple[list[Population], list[tuple[str, str]]]:
    """Every readable population record of ``index`` (oldest first), and (collection, what is wrong) for each
    damaged one: ``reindex doctor`` names them instead of stopping at the first."""
    books = Books(state, index)
    keys = [k for k in state.list(books.populations_prefix) if books.collection_of_record(k) is not None]
    out, damaged = [], []
    for k in keys:
        try:
            d = read_json(state, k)
            if d:
                out.append(Population.from_dict(d, f"{state.describe()}/{k}"))
        except StateError as err:
            damaged.append((books.collection_of_record(k), str(err)))
    return sorted(out, key=lambda r: r.created_at), damaged


def gc_candidates(store: Any, state: ObjectStore, index: str, *, older_than_s: float, retention_s: float,
                  force: bool, names: list[str] | None = None) -> list[dict]:
    """What gc would delete: retired populations past ``older_than_s`` (or the named ones), never one an
    alias points at, never one that was live within ``retention_s`` unless ``force``; plus populations a
    killed gc left half-deleted. Each entry: collection, state, age_days, protected (reason or None)."""
    protected = set(store.list_aliases().values())
    live = read_live(state, index)
    if live:
        protected.add(live.collection)
    now = time.time()
    recs = {r.collection: r for r in populations(state, index)}
    if names:
        for n in names:
            if n in protected:
                raise CutoverError(f"{n} is served by an alias (live); gc never deletes a live population")
            if n not in recs and not store.collection_exists(n):
                raise CutoverError(f"{n}: no such population of index {index!r}")
        chosen = list(names)
    else:
        chosen = [c for c, r in recs.items() if c not in protected and (
            r.state is PopulationState.DELETING
            or (r.state is PopulationState.RETIRED and now - r.updated_at >= older_than_s))]
    out = []
    for c in chosen:
        rec = recs.get(c)
        age = (now - rec.updated_at) / 86400 if rec else None
        why = None
        if rec and rec.state is PopulationState.RETIRED and now - rec.updated_at < retention_s and not force:
            why = (f"live until {age:.2f} days ago, within the {retention_s / 86400:g}-day rollback window; "
                   "pass --force to delete it anyway")
        out.append({"collection": c, "state": rec.state if rec else "unknown",
                    "age_days": round(age, 2) if age is not None else None, "protected": why})
    return out


def delete_population(store: Any, state: ObjectStore, index: str, collection: str) -> None:
    """Delete a population in two recoverable steps: mark it ``deleting`` (it can never go live again),
    delete the collection, then its state. A kill between the steps leaves a ``deleting`` record that the
    next gc finishes; it never leaves a half-deleted collection that looks valid."""
    if collection in set(store.list_aliases().values()):
        raise CutoverError(f"{collection} is served by an alias (live); gc never deletes a live population")
    _set_state(state, index, collection, PopulationState.DELETING, time.time())
    reset_serving(state, index, f"{collection} was deleted", shadow=collection)
    crashpoint("gc-marked")
    if store.collection_exists(collection):
        store.delete_collection(collection)
    crashpoint("gc-collection-deleted")
    books = Books(state, index)
    keys = state.list(books.population_prefix(collection) + "/")
    record = books.population_key(collection)
    for key in sorted(k for k in keys if k != record):
        state.delete(key)
    state.delete(record)  # last: until it is gone the population stays marked deleting
