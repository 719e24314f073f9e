"""``reindex serving [--evaluate]``: what readers are served while a vector-half change builds, and the
re-evaluation that may switch them (:mod:`reindex.decisions.serving` has the bridge, the cascade and the gate).

The mode is state, not config: ``indexes/<index>/serving.json`` names it, for the population the alias served
when it was evaluated and the shadow whose model it uses. Readers (:mod:`reindex.usecases.query`) follow it only
while the alias still serves that population and the shadow is still being built or waiting for its cutover;
a cutover or a rollback moves the alias and so puts every reader back on native serving at once (and resets the
record: :func:`reindex.books.manifests.reset_serving`). ``serving.*`` in the config says what an evaluation may
choose (``mode``), how it gates (``metric``, ``min_delta``, ``min_pairs``) and when an apply re-evaluates
(``every_shards``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from reindex.domain.config import PipelineConfig
from reindex.decisions.cutover import populations
from reindex.domain.kinds import PopulationState
from reindex.errors import LockLost
from reindex.books.locks import read_lock
from reindex.books.layout import Books
from reindex.books.manifests import Population, read_live, read_population, read_serving, write_serving
from reindex.books.pairs import read_pairs, runs_with_pairs
from reindex.decisions.serving import ModeInputs, choose_mode, evaluate_modes, store_bridge
from reindex.context import Context
from reindex.context.queries import comparison_queries

__all__ = ["SHADOW_STATES", "ServingReport", "ServingWatch", "building_shadow", "evaluate_serving", "serving",
           "serving_view"]

#: A shadow readers may be served through (a bridge to its model, a cascade over its vectors): being built, or
#: built and waiting for its cutover.
SHADOW_STATES = (PopulationState.BUILDING, PopulationState.READY)
HISTORY = 64  # evaluations of one build kept in the serving record
_log = logging.getLogger("reindex")


@dataclass(frozen=True, slots=True)
class ServingReport:
    """What readers are served (``mode``) since when, for which live population and shadow, the evidence of the
    last evaluation (``stale`` when more shards were built since), and why."""

    index: str
    mode: str
    since: float | None
    live: str | None
    shadow: str | None
    evidence: dict = field(default_factory=dict)
    stale: bool = False
    reason: str | None = None
    changed: bool = False  # this call moved readers to another mode

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "mode": self.mode, "since": self.since, "live": self.live,
                "shadow": self.shadow, "stale": self.stale, "reason": self.reason, "changed": self.changed,
                "evidence": self.evidence}


def building_shadow(state, index: str, live: Population | None) -> Population | None:
    """The newest population being built (or built, not yet cut over) with another vector half than ``live``."""
    if live is None:
        return None
    found = [p for p in populations(state, index) if p.state in SHADOW_STATES and p.collection != live.collection
             and p.vector_id != live.vector_id]
    return max(found, key=lambda p: p.created_at) if found else None


def _shards_done(state, index: str, collection: str) -> dict[str, int]:
    """Run → shard manifests written (each written once its shard is durable)."""
    books = Books(state, index)
    done: dict[str, int] = {}
    for key in state.list(books.population_runs_prefix(collection)):
        run, kind = books.population_run_file(collection, key) or ("", "other")
        if kind == "shard":
            done[run] = done.get(run, 0) + 1
    return done


def _run_of(state, index: str, shadow: Population) -> str | None:
    """The run building ``shadow``: the one the index lock's holder names, else the one with most pairs / shards."""
    purpose = (read_lock(state, index).as_status() or {}).get("purpose") or ""
    runs = {**_shards_done(state, index, shadow.collection)}
    for run, n in runs_with_pairs(state, index, shadow.collection).items():
        runs[run] = max(runs.get(run, 0), n)
    mine = next((r for r in runs if purpose.startswith(f"apply {r[:12]}")), None)
    return mine or max(runs, key=runs.__getitem__, default=None)


def serving_view(state, index: str, alias_target: str | None) -> ServingReport:
    """The mode readers are served now, as they resolve it: the record's mode while the alias still serves the
    population it was evaluated for and its shadow is still a shadow; ``old`` otherwise."""
    rec = read_serving(state, index)
    if rec is None:
        return ServingReport(index, "old", None, alias_target, None, {}, False, "never evaluated: readers are served "
                             "the live population natively")
    evidence = rec.get("evidence") or {}
    shadow = rec.get("shadow")
    mode, reason = rec.get("mode", "old"), rec.get("reason")
    if mode != "old":
        pop = read_population(state, index, shadow) if shadow else None
        if rec.get("live") != alias_target:
            mode, reason = "old", (f"the alias serves {alias_target or 'nothing'}, not {rec.get('live')} that the mode "
                                   "was evaluated for (a cutover or a rollback): native serving")
        elif pop is None or pop.state not in SHADOW_STATES:
            mode, reason = "old", f"{shadow} is {pop.state if pop else 'gone'}, no longer a shadow: native serving"
    stale = False
    if shadow and rec.get("run") and evidence:
        stale = _shards_done(state, index, shadow).get(rec["run"], 0) > int(evidence.get("shards_done", 0))
    return ServingReport(index, mode, rec.get("since"), rec.get("live"), shadow, evidence, stale, reason)


def _record(state, cfg: PipelineConfig, rec: dict, fence: Callable[[], None] | None) -> None:
    if fence is not None:
        fence()
    write_serving(state, cfg.index, rec)


def evaluate_serving(ctx: Context, store, *, queries: str | Path | None = None,
                     fence: Callable[[], None] | None = None, run: str | None = None,
                     query_list: tuple[list, str] | None = None) -> ServingReport:
    """Evaluate the serving modes ``serving.mode`` allows on the cutover's queries (``queries``, else
    ``serving.queries``, else the probes; ``query_list``: already read) against ``old``, gate them, record the
    mode readers get and its evidence. ``store``: any store that reads the live population (a reader; an apply's
    writer also reads its shadow, so the cascade needs no embedding for what is built). ``fence``: checked before
    the record is written (an apply's lock). Each side embeds with its own population's vector half
    (:meth:`Context.side`)."""
    cfg, state = ctx.config, ctx.state
    index, s = cfg.index, cfg.serving
    live = read_live(state, index)
    alias = store.get_alias(index)
    prev = read_serving(state, index) or {}
    now = time.time()
    shadow = building_shadow(state, index, live)
    base = {"live": alias, "shadow": shadow.collection if shadow else None, "candidates": s.candidates,
            "bridge": None}
    if live is None or shadow is None or alias != live.collection or s.mode == "old":
        why = ("serving.mode is old" if s.mode == "old" else
               "no vector-half change is being built beside the live population")
        rec = {**prev, **base, "mode": "old", "since": prev.get("since") if prev.get("mode", "old") == "old" else now,
               "reason": why, "evidence": {}}
        _record(state, cfg, rec, fence)
        return ServingReport(index, "old", rec["since"], alias, base["shadow"], {}, False, why,
                             prev.get("mode", "old") != "old")
    run = run or _run_of(state, index, shadow)
    pairs = read_pairs(state, index, shadow.collection, run, limit=s.pairs or None) if run else None
    qs, source = query_list if query_list is not None else comparison_queries(cfg, queries or s.queries)
    done = _shards_done(state, index, shadow.collection).get(run, 0) if run else 0
    old, new = ctx.side(live), ctx.side(shadow)
    live_cfg, new_cfg = old.config, new.config
    allowed = ("bridge", "cascade") if s.mode == "auto" else (s.mode,)
    inputs = ModeInputs(store=store, live=live.collection, shadow=shadow.collection, live_cfg=live_cfg,
                        new_cfg=new_cfg, queries=qs, embed_old=old.embed_queries,
                        embed_new=new.embed_queries, embed_passages=new.embed_passages,
                        serving=s, cutover=cfg.cutover, pairs=pairs, k=cfg.cutover.k, seed=cfg.cutover.seed)
    modes, bridge = evaluate_modes(inputs, allowed)
    mode = choose_mode(modes, s.mode)
    if mode == "bridge" and bridge is not None:
        store_bridge(state, index, bridge)
    same = prev.get("mode") == mode and prev.get("shadow") == shadow.collection and prev.get("live") == alias
    evidence = {"evaluated_at": now, "run": run, "shards_done": done, "shards_total": new_cfg.apply.shards,
                "pairs": pairs.n if pairs is not None else 0, "queries": {"source": source, "count": len(qs)},
                "metric": s.metric, "min_delta": s.min_delta, "allowed": s.mode, "modes": modes}
    failed = "; ".join(f"{m}: " + ", ".join(r["rule"] for r in e.get("rules", []) if not r["passed"])
                       for m, e in modes.items() if not e.get("passed"))
    reason = (f"{mode} passed its gate" if mode != "old" else f"no mode passed its gate ({failed})")
    # One line per evaluation of this shadow's build (the last HISTORY): after how many shards each mode passed.
    history = [h for h in prev.get("history") or [] if prev.get("shadow") == shadow.collection][-(HISTORY - 1):]
    history.append({"at": now, "shards_done": done, "pairs": evidence["pairs"], "mode": mode,
                    "passed": {m: bool(e.get("passed")) for m, e in modes.items()},
                    "low": {m: (e.get("gate") or {}).get("low") for m, e in modes.items()}})
    rec = {**base, "mode": mode, "since": prev.get("since", now) if same else now, "run": run,
           "vector_ids": {"live": live.vector_id, "shadow": shadow.vector_id},
           "bridge": bridge.describe() if mode == "bridge" and bridge is not None else None,
           "evidence": evidence, "reason": reason, "history": history}
    _record(state, cfg, rec, fence)
    if not same:
        _log.info("serving mode of %s: %s → %s (%s)", index, prev.get("mode", "old"), mode, reason)
    return ServingReport(index, mode, rec["since"], alias, shadow.collection, evidence, False, reason,
                         prev.get("mode", "old") != mode)


def serving(ctx: Context, *, evaluate: bool = False, queries: str | Path | None = None) -> ServingReport:
    """The serving mode readers follow now; with ``evaluate``, re-evaluated first on the cutover's queries
    (``queries``: a labelled file). Reads the stores through a reader, so it works while an apply builds."""
    cfg, state = ctx.config, ctx.state
    with ctx.read_only_store() as store:
        if store is None:
            return serving_view(state, cfg.index, None)
        changed = evaluate_serving(ctx, store, queries=queries).changed if evaluate else False
        return replace(serving_view(state, cfg.index, store.get_alias(cfg.index)), changed=changed)


class ServingWatch:
    """An apply's hook: after every ``serving.every_shards`` committed shards of a vector-half build (and after
    the last one), the modes are evaluated again in the apply's own process, with its writer store (which reads
    the shadow it builds) and under its lock. One evaluation at a time; a failure is logged, never the apply's (a LockLost is re-raised)."""

    def __init__(self, ctx: Context, store, run: str, total: int, fence: Callable[[], None],
                 forward: Callable[[dict], None] | None) -> None:
        self.ctx, self.store, self.run, self.total = ctx, store, run, total
        self.cfg = ctx.config
        self.fence, self.forward = fence, forward
        self.done = 0
        self.evaluations: list[ServingReport] = []
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._queries: tuple[list, str] | None = None

    def __call__(self, event: dict) -> None:
        if self.forward is not None:
            self.forward(event)
        if event.get("kind") != "shard-done":
            return
        with self._lock:
            self.done += 1
            due = self.done % self.cfg.serving.every_shards == 0 or self.done == self.total
        if not due:
            return
        with self._busy:  # one at a time (shard threads wait: each due evaluation runs, in order)
            try:
                if self._queries is None:
                    self._queries = comparison_queries(self.cfg, self.cfg.serving.queries)
                self.evaluations.append(evaluate_serving(self.ctx, self.store, fence=self.fence,
                                                         run=self.run, query_list=self._queries))
            except LockLost:
                raise
            except Exception as err:  # noqa: BLE001 - serving is advisory: the build goes on, readers keep their mode
                _log.warning("serving evaluation after %d shards failed: %s: %s", self.done, type(err).__name__, err)
