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
from reindex.errors import LockLost, ReindexError, StateError
from reindex.books.locks import read_lock
from reindex.books.layout import Books
from reindex.books.manifests import Population, read_live, read_population, read_serving_checked, write_serving
from reindex.books.pairs import read_pairs, runs_with_pairs
from reindex.decisions.serving import (EvaluationMemo, ModeInputs, choose_mode, evaluate_modes, load_bridge,
                                       reader_passages, store_bridge)
from reindex.adapters.stores.vectors import one_line
from reindex.foundation.throughput import CpuClock
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
    # What this build's evaluations cost: count, CPU seconds, the build's CPU seconds and their share, deferred.
    evaluations: dict = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "mode": self.mode, "since": self.since, "live": self.live,
                "shadow": self.shadow, "stale": self.stale, "reason": self.reason, "changed": self.changed,
                "evidence": self.evidence, "modes": self.evidence.get("modes") or {},
                "evaluations": self.evaluations}


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
    population it was evaluated for and its shadow is still a shadow; ``old`` otherwise (a damaged record too)."""
    rec, damage = read_serving_checked(state, index)
    if damage is not None:
        return ServingReport(index, "old", None, alias_target, None, {}, False,
                             f"{damage}: readers serve the live population natively; `reindex doctor` says how to fix "
                             "it (the next `reindex serving --evaluate`, cutover, rollback or gc writes a good one)")
    if rec is None:
        return ServingReport(index, "old", None, alias_target, None, {}, False, "never evaluated: readers are served "
                             "the live population natively")
    evidence = rec.get("evidence") or {}
    shadow = rec.get("shadow")
    mode, reason = rec.get("mode", "old"), rec.get("reason")
    if mode != "old":
        try:
            pop = read_population(state, index, shadow) if shadow else None
        except (StateError, ValueError, KeyError, TypeError) as err:  # readers fall back the same way
            mode, reason = "old", f"the record of {shadow} cannot be read ({one_line(err)}): native serving"
        else:
            if rec.get("live") != alias_target:
                mode, reason = "old", (f"the alias serves {alias_target or 'nothing'}, not {rec.get('live')} that the "
                                       "mode was evaluated for (a cutover or a rollback): native serving")
            elif pop is None or pop.state not in SHADOW_STATES:
                mode, reason = "old", f"{shadow} is {pop.state if pop else 'gone'}, no longer a shadow: native serving"
            elif mode == "bridge":  # readers load it; say what they do when it does not load
                bid = (rec.get("bridge") or {}).get("id")
                try:
                    if not bid or load_bridge(state, index, bid) is None:
                        mode, reason = "old", f"bridge {bid} is not in the state store: native serving"
                except StateError as err:
                    mode, reason = "old", f"{one_line(err)}: native serving"
    stale = False
    if shadow and rec.get("run") and evidence:
        stale = _shards_done(state, index, shadow).get(rec["run"], 0) > int(evidence.get("shards_done", 0))
    return ServingReport(index, mode, rec.get("since"), rec.get("live"), shadow, evidence, stale, reason,
                         evaluations=rec.get("evaluations") or {})


def _record(state, cfg: PipelineConfig, rec: dict, fence: Callable[[], None] | None) -> None:
    if fence is not None:
        fence()
    write_serving(state, cfg.index, rec)


def _cost_reader(ctx: Context, store):
    """What a reader's cost is measured through: a reader opened as another process opens it (it sees only what the
    writer has published), else — a backend without readers beside its writer — ``store`` itself."""
    if not ctx.backend().capabilities.readers_beside_writer:
        return None
    try:
        return ctx.reader()
    except ReindexError as err:
        _log.info("serving: no reader to measure a reader's cost through (%s); measured through the evaluating "
                  "store", one_line(err))
        return None


def evaluate_serving(ctx: Context, store, *, queries: str | Path | None = None,
                     fence: Callable[[], None] | None = None, run: str | None = None,
                     query_list: tuple[list, str] | None = None, memo: EvaluationMemo | None = None,
                     clock: CpuClock | None = None,
                     account: Callable[[float, dict], dict] | None = None) -> ServingReport:
    """Evaluate the serving modes ``serving.mode`` allows on the cutover's queries (``queries``, else
    ``serving.queries``, else the probes; ``query_list``: already read) against ``old``, gate them (quality with a
    bound that stays valid over the build's repeated evaluations, and what a reader pays, measured through a reader
    opened as another process opens it), record the mode readers get and its evidence. ``store``: any store that
    reads the live population (a reader; an apply's writer also reads its shadow, so the quality evaluation
    embeds nothing that is built). ``fence``: checked before the record is written (an apply's lock). ``memo``:
    what earlier evaluations of this build left to reuse; ``clock``: the CPU clock this evaluation is timed with
    (an apply's, less its shard threads); ``account(cpu, previous)``: the record's ``evaluations`` account (the
    apply's watch: with the build's CPU), else this evaluation added to the previous one. Each side embeds with its
    own population's vector half (:meth:`Context.side`)."""
    (rec, report), _, cpu = (clock or CpuClock()).call(
        lambda: _evaluate(ctx, store, queries=queries, run=run, query_list=query_list, memo=memo))
    rec["evidence"] = {**(rec.get("evidence") or {}), **({"cpu_seconds": round(cpu, 3)} if rec.get("evidence") else {})}
    prev, was = rec.pop("_previous_account", {}), rec.pop("_from", "old")
    rec["evaluations"] = account(cpu, prev) if account is not None else {
        **prev, "count": int(prev.get("count", 0)) + 1, "cpu_seconds": round(float(prev.get("cpu_seconds", 0)) + cpu, 3)}
    if report.changed or rec.get("since") is None:
        rec["since"] = ctx.clock.time()  # when readers switched: the record they follow is written now
    _record(ctx.state, ctx.config, rec, fence)
    if report.changed:
        _log.info("serving mode of %s: %s → %s (%s)", ctx.index, was, rec["mode"], rec["reason"])
    return replace(report, since=rec["since"], evaluations=rec["evaluations"])


def _evaluate(ctx: Context, store, *, queries, run, query_list, memo) -> tuple[dict, ServingReport]:
    """One evaluation: (the serving record to write, the report), nothing written."""
    cfg, state = ctx.config, ctx.state
    index, s = cfg.index, cfg.serving
    live = read_live(state, index)
    alias = store.get_alias(index)
    prev, _damage = read_serving_checked(state, index)
    prev = prev or {}
    shadow = building_shadow(state, index, live)
    base = {"live": alias, "shadow": shadow.collection if shadow else None, "candidates": s.candidates,
            "bridge": None}
    same_build = shadow is not None and prev.get("shadow") == shadow.collection
    account = (prev.get("evaluations") or {}) if same_build else {}
    if live is None or shadow is None or alias != live.collection or s.mode == "old":
        why = ("serving.mode is old" if s.mode == "old" else
               "no vector-half change is being built beside the live population")
        changed = prev.get("mode", "old") != "old"
        rec = {**prev, **base, "mode": "old", "since": None if changed else prev.get("since"), "reason": why,
               "evidence": {}, "_previous_account": account, "_from": prev.get("mode", "old")}
        return rec, ServingReport(index, "old", None, alias, base["shadow"], {}, False, why, changed)
    run = run or _run_of(state, index, shadow)
    pairs = read_pairs(state, index, shadow.collection, run, limit=s.pairs or None) if run else None
    qs, source = query_list if query_list is not None else comparison_queries(cfg, queries or s.queries)
    done = _shards_done(state, index, shadow.collection).get(run, 0) if run else 0
    old, new = ctx.side(live), ctx.side(shadow)
    live_cfg, new_cfg = old.config, new.config
    allowed = ("bridge", "cascade") if s.mode == "auto" else (s.mode,)
    looks = {m: list(v) for m, v in (prev.get("looks") or {}).items()} if same_build else {}
    reader = _cost_reader(ctx, store)
    try:
        inputs = ModeInputs(store=store, live=live.collection, shadow=shadow.collection, live_cfg=live_cfg,
                            new_cfg=new_cfg, queries=qs, embed_old=old.embed_queries,
                            embed_new=new.embed_queries, embed_passages=new.embed_passages,
                            serving=s, cutover=cfg.cutover, pairs=pairs, k=cfg.cutover.k, seed=cfg.cutover.seed,
                            reader=reader if reader is not None else store,
                            embed_candidates=reader_passages(new), looks=looks, memo=memo)
        modes, bridge, native = evaluate_modes(inputs, allowed)
    finally:
        if reader is not None:
            reader.close()
    for m, e in modes.items():  # each new look's evidence is remembered: the next evaluation is the next look
        d = (e.get("gate") or {}).get("digest")
        if d and d not in looks.setdefault(m, []):
            looks[m].append(d)
    mode = choose_mode(modes, s.mode)
    if mode == "bridge" and bridge is not None:
        store_bridge(state, index, bridge)
    same = prev.get("mode") == mode and prev.get("shadow") == shadow.collection and prev.get("live") == alias
    evidence = {"evaluated_at": ctx.clock.time(), "run": run, "shards_done": done,
                "shards_total": new_cfg.apply.shards, "pairs": pairs.n if pairs is not None else 0,
                "queries": {"source": source, "count": len(qs)}, "metric": s.metric, "min_delta": s.min_delta,
                "allowed": s.mode, "modes": modes, "native": native,
                "cost_measured": ("through a reader opened as another process opens it (published generations only), "
                                  "in the evaluating process" if reader is not None else
                                  "through the evaluating process's own store (no reader beside its writer)")}
    failed = "; ".join(f"{m}: " + ", ".join(r["rule"] for r in e.get("rules", []) if not r["passed"])
                       for m, e in modes.items() if not e.get("passed"))
    reason = (f"{mode} passed its gate" if mode != "old" else f"no mode passed its gate ({failed})")
    # One line per evaluation of this shadow's build (the last HISTORY): after how many shards each mode passed.
    history = [h for h in prev.get("history") or [] if same_build][-(HISTORY - 1):]
    history.append({"at": evidence["evaluated_at"], "shards_done": done, "pairs": evidence["pairs"], "mode": mode,
                    "passed": {m: bool(e.get("passed")) for m, e in modes.items()},
                    "low": {m: (e.get("gate") or {}).get("anytime_low") for m, e in modes.items()},
                    "reader_ms_p95": {m: (e.get("cost") or {}).get("reader_ms_p95") for m, e in modes.items()}})
    rec = {**base, "mode": mode, "since": prev.get("since") if same else None, "run": run,
           "vector_ids": {"live": live.vector_id, "shadow": shadow.vector_id},
           "bridge": bridge.describe() if mode == "bridge" and bridge is not None else None,
           "evidence": evidence, "reason": reason, "history": history, "looks": looks,
           "_previous_account": account, "_from": prev.get("mode", "old")}
    return rec, ServingReport(index, mode, None, alias, shadow.collection, evidence, False, reason,
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


#: The shadow is shared with readers after a committed shard when it holds this many times the shards it held at
#: the last share (and after the last shard): each share costs the build's next write a copy of the shadow (the
#: embedded store), so the copies of a whole build add up to about 5× the shadow, whatever its number of shards.
SHARE_GROWTH = 1.25
#: An apply's evaluations may use at most this share of the build's CPU: a due evaluation waits while the
#: evaluations so far and the last one's cost would exceed it.
EVALUATION_CPU_SHARE = 0.10


class ServingWatch:
    """An apply's hook while a vector-half change builds and readers may be served a mode (``serving.mode`` is not
    ``old``). Every event goes on to ``forward`` first (the progress record: the ETA moves per shard whatever
    ``serving`` says). After committed shards the shadow is shared with readers in other processes
    (:meth:`VectorStore.share`: a cascade reads its candidates there; :data:`SHARE_GROWTH`), and after every
    ``serving.every_shards`` committed shards (and after the last one) the modes are evaluated again in the apply's
    own process, with its writer store (which reads the shadow it builds), under its lock and within
    :data:`EVALUATION_CPU_SHARE` of the build's CPU (a due evaluation that would exceed it waits for the next one;
    ``reindex status`` says how many waited). One evaluation at a time; a failure is logged, never the apply's (a
    LockLost is re-raised)."""

    def __init__(self, ctx: Context, store, run: str, total: int, fence: Callable[[], None],
                 forward: Callable[[dict], None] | None, *, shadow: str | None = None,
                 clock: CpuClock | None = None) -> None:
        self.ctx, self.store, self.run, self.total = ctx, store, run, total
        self.cfg = ctx.config
        self.fence, self.forward = fence, forward
        self.shadow = shadow
        self.clock = clock or CpuClock()
        self.done = 0
        self.shared_at = 0  # committed shards when the shadow was last shared
        self.evaluations: list[ServingReport] = []
        self.memo = EvaluationMemo()
        self.spent = 0.0  # CPU seconds of this apply's evaluations
        self.last = 0.0  # the last one's
        self.deferred = 0
        self._cpu0 = time.process_time()
        self._lock = threading.Lock()
        self._busy = threading.Lock()
        self._queries: tuple[list, str] | None = None
        self._refused: set[str] = set()

    def __call__(self, event: dict) -> None:
        if self.forward is not None:
            self.forward(event)
        if event.get("kind") != "shard-done":
            return
        every = self.cfg.serving.every_shards
        with self._lock:
            self.done += 1
            done = self.done
        with self._busy:  # one at a time (shard threads wait: each due step runs, in order)
            self._share(done)
            if every and (done % every == 0 or done == self.total):
                self._evaluate(done)

    def _share(self, done: int) -> None:
        if self.shadow is None or not (done >= self.total or done >= self.shared_at * SHARE_GROWTH):
            return
        share = getattr(self.store, "share", None)
        if share is None:
            return
        try:
            why = share(self.shadow)
        except LockLost:
            raise
        except Exception as err:  # noqa: BLE001 - sharing is for readers: the build goes on without it
            why = f"{type(err).__name__}: {err}"
        if why is None:
            self.shared_at = done
        elif why not in self._refused:
            self._refused.add(why)
            _log.warning("the shadow %s after %d shards: %s", self.shadow, done, why)

    def build_cpu(self) -> float:
        """CPU seconds of this process since the apply started, less its evaluations'."""
        return max(0.0, time.process_time() - self._cpu0 - self.spent)

    def _account(self, cpu: float, prev: dict) -> dict:
        self.spent += cpu
        self.last = cpu
        build = self.build_cpu()
        return {"count": len(self.evaluations) + 1, "cpu_seconds": round(self.spent, 3),
                "build_cpu_seconds": round(build, 3), "share": round(self.spent / build, 4) if build > 0 else None,
                "budget": EVALUATION_CPU_SHARE, "deferred": self.deferred, "run": self.run}

    def _evaluate(self, done: int) -> None:
        if self.evaluations and self.spent + self.last > EVALUATION_CPU_SHARE * self.build_cpu():
            self.deferred += 1
            _log.info("serving evaluation after %d shards deferred: the evaluations so far used %.1f CPU-s of the "
                      "build's %.1f (at most %.0f %%)", done, self.spent, self.build_cpu(), 100 * EVALUATION_CPU_SHARE)
            try:  # said in the record, for `reindex status`
                rec, _ = read_serving_checked(self.ctx.state, self.cfg.index)
                if rec and rec.get("shadow") == self.shadow:
                    build = self.build_cpu()
                    rec["evaluations"] = {**(rec.get("evaluations") or {}), "deferred": self.deferred,
                                          "build_cpu_seconds": round(build, 3),
                                          "share": round(self.spent / build, 4) if build > 0 else None}
                    _record(self.ctx.state, self.cfg, rec, self.fence)
            except LockLost:
                raise
            except Exception as err:  # noqa: BLE001 - a note for people; the build goes on
                _log.warning("serving: the deferral could not be recorded: %s", one_line(err))
            return
        try:
            if self._queries is None:
                self._queries = comparison_queries(self.cfg, self.cfg.serving.queries)
            self.evaluations.append(evaluate_serving(self.ctx, self.store, fence=self.fence, run=self.run,
                                                     query_list=self._queries, memo=self.memo, clock=self.clock,
                                                     account=self._account))
        except LockLost:
            raise
        except Exception as err:  # noqa: BLE001 - serving is advisory: the build goes on, readers keep their mode
            _log.warning("serving evaluation after %d shards failed: %s: %s", done, type(err).__name__, err)
