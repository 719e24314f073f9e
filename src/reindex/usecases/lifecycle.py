"""Cutover, rollback, gc and status of an index."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable, TypedDict
from dataclasses import dataclass
from pathlib import Path

from reindex import reports
from reindex.domain.config import (
    PipelineConfig,
    chunker_spec,
)
from reindex.errors import ConfigError, ReindexError, VectorStoreError
from reindex.domain.identity import identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources.extract import normalise

from reindex.decisions import cutover as co
from reindex.domain.kinds import PopulationState
from reindex.decisions import evaluation as ev
from reindex.decisions.index_health import index_state
from reindex.books.carried import prune_carried
from reindex.books.cursors import commit_cursor, resume_tracking
from reindex.books.manifests import read_live, read_population
from reindex.planner.approvals import check_not_rejected, read_approval, signing_key
from reindex.planner import PlanError, check_plan_index, read_plan



from reindex.context import disk
from reindex.context import Context, Side
from reindex.books.layout import Books
from reindex.books.locks import read_lock
from reindex.context.locking import holding_index_lock
from reindex.context.queries import comparison_queries, side_query_embedder
from reindex.usecases.serve import serving_view

__all__ = [
    "CutoverReport", "GcAction", "IndexStatus", "PopulationStatus", "build_progress", "cutover", "gc", "parse_age",
    "rollback", "status",
]


# The dict results of rollback, gc and status, typed for callers (the CLI prints them as they are with --json).
RollbackRecord = TypedDict("RollbackRecord", {"index": str, "from": str | None, "to": str, "at": float})


class GcAction(TypedDict):
    """One population gc considered: ``protected`` says why it was kept (None if it was not)."""

    collection: str
    state: str
    age_days: float | None
    protected: str | None
    action: str  # deleted | would delete | kept | not confirmed


class PopulationStatus(TypedDict):
    collection: str
    state: str
    points: int | None
    age_days: float
    chunker: str
    model: dict[str, Any]  # provider, model, backend, precision, dimension: what answers its queries
    exists: bool
    progress: dict[str, Any] | None  # a population being built: shards_done, shards_total, run, tokens_done,
    # tokens_planned, tokens_per_second, eta_seconds, updated_at (the last four null until the apply measured a rate)
    tokens_done: int | None  # a population being built: tokens embedded so far (null otherwise)
    eta_seconds: float | None  # a population being built: seconds left to the end of its shards (null: unknown)
    index: dict[str, Any] | None  # its search index: points, indexed_vectors, status, ready, searched, detail


class IndexStatus(TypedDict):
    index: str
    aliases: dict[str, str]
    populations: list[PopulationStatus]
    lock: dict[str, Any] | None
    pending: dict[str, Any] | None
    serving: dict[str, Any]  # mode (old | bridge | cascade), since, evidence, shadow, stale, reason


@dataclass(frozen=True, slots=True)
class CutoverReport:
    report: dict
    report_path: Path | None

    @property
    def passed(self) -> bool:
        return self.report["passed"]

    def as_dict(self) -> dict:
        return {**self.report, "report_path": str(self.report_path) if self.report_path else None}


def _latest_plan_for(cfg: PipelineConfig, plans_dir: str | Path = "plans") -> Path:
    coll = identity_of(cfg).collection
    for p in reversed(Books.plan_files(plans_dir, cfg.index)):
        try:
            plan = read_plan(p)
        except ReindexError:
            continue
        if plan.new_collection == coll and plan.kind.needs_cutover:
            return p
    raise PlanError(f"no plan in {plans_dir}/ builds {coll}; give the plan file")


def _evaluate(ctx: Context, store, old: Side, new: Side, shadow: str, qs: list, k: int):
    """Old vs new on identical queries, each side embedding them with its own recorded vector half and query
    prefix (:meth:`Context.side`: never the config file's, which may have been edited since the build)."""
    cfg = ctx.config  # the policy: how to evaluate and gate, never which model embeds a side
    # query_prefix is not in the vector id but decides query vectors: a change of it alone is compared too.
    same_vectors = old.vector_id == new.vector_id
    embed_new = side_query_embedder(ctx, new)  # each side's own embedder, its query vectors recorded once
    if old.same_queries(new):
        embed_old, note = embed_new, "identical on both sides (same vector half)"
    else:
        embed_old = side_query_embedder(ctx, old)
        note = ("each side embeds queries with its own model (the vector half changed)" if not same_vectors
                else "each side embeds queries with its own vector.query_prefix")
    evaluation = ev.evaluate(store, cfg.index, shadow, qs, embed_old, embed_new, k=k, seed=cfg.cutover.seed,
                             payload_old=old.payload, payload_new=new.payload, segments=cfg.cutover.segments,
                             bound=cfg.cutover.min_recall_delta,
                             text_old=partial(normalise, cfg=old.config.text.normaliser),
                             text_new=partial(normalise, cfg=new.config.text.normaliser))
    if not same_vectors:
        evaluation["agreement"] = _model_agreement(store, shadow, old, new)
    evaluation["sides"] = {"old": {"collection": old.collection, **old.model},
                           "new": {"collection": new.collection, **new.model}}
    return evaluation, note


def _model_agreement(store, shadow: str, old: Side, new: Side) -> dict:
    """A vector-half change: both models on chunk texts of the shadow (their speed per CPU-second; the mean cosine
    of their vectors where they share a space, else the top-k overlap in the evaluation says how they agree)."""
    from itertools import islice

    from reindex.decisions.forecast import AGREEMENT_CHUNKS, agreement, share_space
    from reindex.adapters.stores.payload import payload_text

    texts = [payload_text(p.payload, new.payload) for p in islice(store.scroll(shadow, batch=AGREEMENT_CHUNKS),
                                                                   AGREEMENT_CHUNKS)]
    tok = TextPipeline(new.config.text, new.vector_id).tokenizer
    return agreement(texts, old.embed_passages, new.embed_passages, share_space(old.config, new.config),
                     tok.count_batch)


def _check_cutover_plan(cfg: PipelineConfig, path: Path, plan, force: bool, state) -> str:
    """The shadow the plan built; refuses in-place plans, unbuilt shadows and unapproved --force."""
    check_plan_index(plan, cfg, path)
    if not plan.kind.needs_cutover:
        raise co.CutoverError(f"{path}: a {plan.kind} plan is applied in place; there is nothing to cut over")
    if force:
        check_not_rejected(plan, path)
        approval = read_approval(path, signing_key(cfg.approval.hmac_key_env))
        if approval is None or approval.plan_hash != plan.plan_hash:
            raise co.CutoverError(f"--force needs an approval record for plan {plan.plan_hash[:12]}: "
                                  f"run `reindex approve {path} --by NAME` first")
    shadow = plan.new_collection
    rec = read_population(state, cfg.index, shadow)
    if rec is not None and rec.state is PopulationState.BUILDING:
        _refuse_while_applying(state, cfg.index, shadow)
    if rec is None or not rec.state.servable:
        raise co.CutoverError(f"population {shadow} is not built ({rec.state if rec else 'absent'}); run `reindex apply {path}`")
    return shadow


def _catch_up_shadow(ctx: Context, store, shadow: str, run: str, lock) -> dict | None:
    """Replay into the shadow the documents that changed since it was built and caught up (edited,
    added or taken down since its apply, whether or not the live population was synced in place
    meanwhile), so that a cutover never serves text the corpus no longer holds. Under the index lock,
    before the gate; with the config the shadow was built with. None when the shadow is current."""
    from reindex.engine import execution
    cfg, state = ctx.config, ctx.state
    rec = read_population(state, cfg.index, shadow)
    built = cfg if identity_of(cfg).collection == shadow or rec is None else rec.config
    ident = identity_of(built)
    actx = execution.ApplyContext(
        index=cfg.index, cfg=built, identity=ident, target=shadow, old=None, old_shards=None, run=run,
        shards=built.apply.shards, state=state, store=store, embedder=None,  # type: ignore[arg-type]
        pipeline=TextPipeline(built.text, ident.vector_id), in_place=False, fence=lock.check,
        confirm=lambda: lock.check(confirm=True),
        tracking=resume_tracking(state, cfg.index, shadow, built.source),  # only what moved past its cursor is read
    )
    if not any(execution.changed_since_manifest(actx)):
        return None
    actx.embedder = ctx.embedder(built.vector, batch_size=built.apply.embed_batch_size, options=built.embed)
    result = execution.catch_up(actx)
    failed = [f for r in result["rounds"] for f in r["failures"]]
    if not failed and actx.tracking is not None:
        lock.check()
        commit_cursor(state, cfg.index, shadow, actx.tracking, run=run)
    if failed:
        raise co.CutoverError(
            f"{shadow} could not be caught up with the corpus ({len({f.get('doc_id') for f in failed})} "
            f"documents failed, first "
            f"{failed[0].get('doc_id')}: {failed[0].get('reason')}); the alias was not moved: fix the source "
            "and run `reindex cutover` again")
    logging.getLogger("reindex").info("caught %s up with %d documents changed since it was built", shadow,
                                      result["documents"])
    return result


def _refuse_while_applying(state, index: str, shadow: str) -> None:
    """Refuse a cutover to a population an apply is building right now, naming that apply's process."""
    import time


    lock = read_lock(state, index)
    if lock.held and not lock.expired() and (lock.purpose or "").startswith("apply"):
        st = lock.as_status() or {}
        since = time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(st["since"])) if st.get("since") else ""
        raise co.CutoverError(f"population {shadow} is still being built: an apply is running (pid {st.get('pid')} on "
                              f"{st.get('host')}{since}); wait for it to finish, then run `reindex cutover` again")


def cutover(
    ctx: Context,
    plan_path: str | Path | None = None,
    *,
    queries: str | Path | None = None,
    k: int | None = None,
    force: bool = False,
    by: str | None = None,
) -> CutoverReport:
    """Catch the shadow up with the corpus, evaluate old vs new on identical queries, gate, and swap the
    alias atomically on pass. Re-running a finished cutover is a no-op; a cutover killed after the swap is
    completed first."""
    cfg, state = ctx.config, ctx.state
    path = Path(plan_path) if plan_path else _latest_plan_for(cfg)
    plan = read_plan(path)
    shadow = _check_cutover_plan(cfg, path, plan, force, state)
    disk.require_free_for_cutover(cfg, shadow, plan.baseline.collection)
    kk = k or cfg.cutover.k
    # Each side as it was built (its population record), whatever reindex.yaml says now (invariant 18).
    new = ctx.side(read_population(state, cfg.index, shadow))
    with holding_index_lock(ctx, f"cutover to {shadow}") as lock:
        store = ctx.store()
        try:
            def old_side(current: str) -> Side:
                live = read_live(state, cfg.index)
                return ctx.side(live if live is not None and live.collection == current else
                                read_population(state, cfg.index, current), collection=current)

            def forced_by() -> str | None:
                approval = read_approval(path)
                return approval.by if approval else by

            inputs = co.CutoverInputs(
                index=cfg.index, plan_hash=plan.plan_hash, shadow=shadow,
                expected_live=plan.baseline.collection, k=kk, policy=cfg.cutover,
                force=force, forced_by=forced_by,
                catch_up=lambda: _catch_up_shadow(ctx, store, shadow, plan.plan_hash, lock),
                queries=lambda: comparison_queries(cfg, queries, text=new.config.text),
                evaluate=lambda current, qs: _evaluate(ctx, store, old_side(current), new, shadow, qs, kk),
                embed=side_query_embedder(ctx, new), fence=lambda: lock.check(confirm=True),
                evaluate_alone=lambda qs: ev.evaluate_alone(store, shadow, qs, side_query_embedder(ctx, new), k=kk,
                                                            payload=new.payload),
                forecast=plan.numbers.forecast,
            )
            report = co.run_cutover(store, state, inputs)
            if report["already"]:
                return CutoverReport(report, None)
            return CutoverReport(report, reports.write_cutover_reports(report, path))
        finally:
            store.close()


def rollback(ctx: Context, *, to: str | None = None) -> RollbackRecord:
    """Swap the alias back to the previous population (verified first), under the index lock."""
    cfg, state = ctx.config, ctx.state
    disk.require_free_for_rollback(cfg, state, to)
    with holding_index_lock(ctx, "rollback") as lock:
        store = ctx.store()
        try:
            co.reconcile(store, state, cfg.index)
            return co.rollback(store, state, cfg.index, to, fence=lambda: lock.check(confirm=True))
        finally:
            store.close()


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``45s`` → seconds."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", text)
    if not m:
        raise ConfigError(f"--older-than {text!r}: expected a number with d, h, m or s (e.g. 7d)")
    return float(m[1]) * {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 86400}[m[2]]


def gc(ctx: Context, *, older_than: str | None = None, dry_run: bool = False,
       names: list[str] | None = None, force: bool = False,
       confirm: Callable[[list[dict]], bool] | None = None) -> list[GcAction]:
    """Delete retired populations past retention (or the named ones), under the index lock. Never one an
    alias points at; never one live within ``cutover.retention_days`` unless ``force``. ``confirm`` sees the
    deletions first and may refuse them all (the CLI asks on a terminal; unattended callers pass None).
    ``dry_run`` only reads (no lock, the store opened read-only), so it works while an apply runs."""
    cfg, state = ctx.config, ctx.state
    retention = cfg.cutover.retention_days * 86400
    age = parse_age(older_than) if older_than else retention
    if dry_run:
        with ctx.read_only_store() as reader:
            found = [] if reader is None else co.gc_candidates(
                reader, state, cfg.index, older_than_s=age, retention_s=retention, force=force, names=names)
        return [{**c, "action": "kept" if c["protected"] else "would delete"} for c in found]
    disk.require_free_for_gc(cfg)
    with holding_index_lock(ctx, "gc") as lock:
        store = ctx.store()
        try:
            co.reconcile(store, state, cfg.index)
            found = co.gc_candidates(store, state, cfg.index, older_than_s=age, retention_s=retention, force=force,
                                     names=names)
            doomed = [c for c in found if not c["protected"]]
            go = bool(doomed) and (confirm is None or confirm(doomed))
            actions = []
            for c in found:
                if c["protected"]:
                    action = "kept"
                elif go:
                    lock.check(confirm=True)
                    co.delete_population(store, state, cfg.index, c["collection"])
                    action = "deleted"
                else:
                    action = "not confirmed"
                actions.append({**c, "action": action})
            lock.check(confirm=True)
            pruned = prune_carried(state, cfg.index, older_than_s=retention)  # plans' chunks no apply took
            if pruned:
                logging.getLogger("reindex").info("deleted %d objects of chunks carried by plans older than %s days "
                                                  "that no apply used", pruned, cfg.cutover.retention_days)
            return actions
        finally:
            store.close()


def build_progress(state, index: str, rec, lock: dict[str, Any] | None) -> dict[str, Any]:
    """How far the build of a population is: shards done / total (its shard manifests in the state store, each
    written once a shard's points are durable) and, from the progress record the apply keeps (every few seconds),
    tokens done / planned, the measured rate and the seconds left (the record's ETA less the time since it was
    written; null until the apply has measured a rate). For the run the lock holder names, else the latest one."""
    import time

    from reindex.books.manifests import read_run_progress

    books = Books(state, index)
    done: dict[str, int] = {}
    for key in state.list(books.population_runs_prefix(rec.collection)):
        run, kind = books.population_run_file(rec.collection, key) or ("", "other")
        if kind == "shard":
            done[run] = done.get(run, 0) + 1
        elif kind == "progress":
            done.setdefault(run, 0)
    purpose = (lock or {}).get("purpose") or ""
    run = next((r for r in done if purpose.startswith(f"apply {r[:12]}")), None) or max(done, key=done.__getitem__,
                                                                                         default=None)
    out: dict[str, Any] = {"shards_done": done.get(run, 0) if run else 0, "shards_total": rec.config.apply.shards,
                           "run": run, "tokens_done": None, "tokens_planned": None, "tokens_per_second": None,
                           "eta_seconds": None, "updated_at": None}
    record = read_run_progress(state, index, rec.collection, run) if run else None
    if record is not None:
        age = max(0.0, time.time() - float(record.get("updated_at") or time.time()))
        eta = record.get("eta_seconds")
        out.update(tokens_done=record.get("tokens_done"), tokens_planned=record.get("tokens_planned"),
                   tokens_per_second=record.get("tokens_per_second"), updated_at=record.get("updated_at"),
                   eta_seconds=round(max(0.0, float(eta) - age), 1) if eta is not None else None)
    return out


def status(ctx: Context) -> IndexStatus:
    """Aliases, populations (live, shadow, retired with age; one being built with its shards done / total, tokens
    done / planned, rate and ETA) and the lock holder, read without taking the store's writer slot: works while an
    apply runs."""
    import time


    cfg, state = ctx.config, ctx.state
    lock = read_lock(state, cfg.index).as_status()
    with ctx.read_only_store() as store:
        aliases = _aliases_or_repair(ctx, store) if store is not None else {}
        pops = []
        for r in co.populations(state, cfg.index):
            exists = store is not None and store.collection_exists(r.collection)
            points = index = None
            if exists:
                try:
                    points = store.count(r.collection)
                    index = index_state(store.collection_info(r.collection)).as_dict()
                except VectorStoreError:  # not published yet: a build readers cannot see
                    points = None
            progress = build_progress(state, cfg.index, r, lock) if r.state == "building" else None
            pops.append({"collection": r.collection, "state": r.state, "points": points,
                         "age_days": round((time.time() - r.updated_at) / 86400, 2),
                         "chunker": chunker_spec(r.config.text.chunker), "model": ctx.side(r).model, "exists": exists,
                         "progress": progress, "index": index,
                         "tokens_done": progress["tokens_done"] if progress else None,
                         "eta_seconds": progress["eta_seconds"] if progress else None})
        view = serving_view(state, cfg.index, aliases.get(cfg.index)).as_dict()
        serving = {key: view[key] for key in ("mode", "since", "evidence", "shadow", "stale", "reason", "modes",
                                             "evaluations")}
        return {"index": cfg.index, "aliases": aliases, "populations": pops, "lock": lock,
                "pending": co.pending_intent(state, cfg.index), "serving": serving}


def _aliases_or_repair(ctx: Context, store) -> dict[str, str]:
    """The store's aliases; a corrupt alias file of the embedded store is rewritten from the state store's
    live records (``indexes/<index>/live.json``, one per index this state holds), with a warning saying so.
    ``store`` may be a reader: the rewrite then goes through the writer (refused, naming the file, while
    another process holds it)."""
    from reindex.adapters.stores.edge import CorruptAliasesError

    state = ctx.state
    try:
        return store.list_aliases()
    except CorruptAliasesError as err:
        lives = {}
        for index in Books.indexes_with_live_record(state):
            live = read_live(state, index)
            if live is not None:
                lives[index] = live.collection
        restore = getattr(store, "restore_aliases", None)
        if restore is not None:
            written = restore(lives)
        else:
            writer = ctx.store()
            try:
                written = writer.restore_aliases(lives)
            finally:
                writer.close()
        logging.getLogger("reindex").warning(
            "%s; rewrote it from the state store's live records: %s", str(err).split("; run ")[0],
            ", ".join(f"{a} → {c}" for a, c in written.items()) or "no alias")
        return written

