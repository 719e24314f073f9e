"""Cutover, rollback, gc and status of an index."""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, TypedDict
from dataclasses import dataclass
from pathlib import Path

from reindex.config import (
    PipelineConfig,
    chunker_spec,
    config_from_dict,
)
from reindex.errors import ConfigError, ReindexError
from reindex.identity import identity_of
from reindex.pipeline import TextPipeline
from reindex.sources import open_source
from reindex.sources.base import ScanReport

from reindex.approvals import check_not_rejected, read_approval
from reindex.planner import (
    IN_PLACE_KINDS,
    PlanError,
    read_plan,
)



from reindex.usecases import backends
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved
from reindex.locks import read_lock
from reindex.usecases.locking import holding_index_lock
from reindex.usecases.plan import check_plan_index


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
    exists: bool


class IndexStatus(TypedDict):
    index: str
    aliases: dict[str, str]
    populations: list[PopulationStatus]
    lock: dict[str, Any] | None
    pending: dict[str, Any] | None


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
    from reindex.identity import identity_of as _ident

    coll = _ident(cfg).collection
    cands = sorted(p for p in Path(plans_dir).glob(f"*-{cfg.index}-*.json")
                   if p.name.count(".") == 1)
    for p in reversed(cands):
        try:
            plan = read_plan(p)
        except ReindexError:
            continue
        if plan.body["identity"]["new"]["collection"] == coll and plan.kind not in IN_PLACE_KINDS:
            return p
    raise PlanError(f"no plan in {plans_dir}/ builds {coll}; give the plan file")


def _queries_for(cfg: PipelineConfig, queries: str | Path | None) -> tuple[list, str]:
    """The cutover's queries: a file's, or known-item probes sampled from the corpus."""
    from reindex import evaluation as ev

    if queries:
        return ev.read_queries(queries), str(queries)
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    docs = ((d.doc_id, pipe.document_text(d)) for d in open_source(cfg.source).scan(ScanReport()))
    qs = ev.probe_queries(docs, cfg.cutover.probes, cfg.cutover.seed)
    return qs, f"{len(qs)} known-item probes sampled from the corpus (seed {cfg.cutover.seed})"


def _evaluate(store, state, cfg: PipelineConfig, current: str, shadow: str, qs: list, embed_new, k: int):
    """Old vs new on identical queries; each side embeds queries with its own model if the vector half changed."""
    from reindex import evaluation as ev
    from reindex.manifests import read_live

    live = read_live(state, cfg.index)
    old_cfg = config_from_dict(live.config) if live else cfg
    # query_prefix is not in the vector id but decides query vectors: a change of it alone is compared too.
    same_vectors = identity_of(old_cfg).vector_id == identity_of(cfg).vector_id
    if same_vectors and old_cfg.vector.for_queries().prefix == cfg.vector.for_queries().prefix:
        embed_old, note = embed_new, "identical on both sides (same vector half)"
    else:
        old_emb = backends.make_embedder(old_cfg.vector.for_queries(), options=old_cfg.embed)
        embed_old = lambda texts: old_emb.embed(texts).vectors  # noqa: E731
        note = ("each side embeds queries with its own model (the vector half changed)" if not same_vectors
                else "each side embeds queries with its own vector.query_prefix")
    return ev.evaluate(store, cfg.index, shadow, qs, embed_old, embed_new, k=k, seed=cfg.cutover.seed,
                       payload_old=old_cfg.payload, payload_new=cfg.payload), note


def _gate(store, state, cfg: PipelineConfig, path: Path, shadow: str, evaluation, k: int) -> list:
    """The gate's rules against the shadow's chunk manifest and the apply's run report."""
    from reindex import cutover as co
    from reindex.manifests import read_chunk_manifest

    run_path = path.with_name(path.name.removesuffix(".json") + ".run.json")
    run = json.loads(run_path.read_text()) if run_path.is_file() else {}
    # The chunk manifest is what the shadow should hold: the plan's chunks plus any catch-up changes.
    expected_points = sum(1 for _ in read_chunk_manifest(state, cfg.index, shadow))
    return co.gate(cfg.cutover, evaluation, shadow_points=store.count(shadow), planned_chunks=expected_points,
                   failures=len(run.get("failures", [])), k=k)


def _check_cutover_plan(cfg: PipelineConfig, path: Path, plan, force: bool, state) -> str:
    """The shadow the plan built; refuses in-place plans, unbuilt shadows and unapproved --force."""
    from reindex import cutover as co
    from reindex.manifests import read_population

    check_plan_index(plan, cfg, path)
    if plan.kind in (*IN_PLACE_KINDS, "none"):
        raise co.CutoverError(f"{path}: a {plan.kind} plan is applied in place; there is nothing to cut over")
    if force:
        check_not_rejected(plan, path)
        approval = read_approval(path)
        if approval is None or approval.plan_hash != plan.plan_hash:
            raise co.CutoverError(f"--force needs an approval record for plan {plan.plan_hash[:12]}: "
                                  f"run `reindex approve {path} --by NAME` first")
    shadow = plan.body["identity"]["new"]["collection"]
    rec = read_population(state, cfg.index, shadow)
    if rec is None or rec.state not in ("ready", "live", "retired"):
        raise co.CutoverError(f"population {shadow} is not built ({rec.state if rec else 'absent'}); run `reindex apply {path}`")
    return shadow


def _catch_up_shadow(cfg: PipelineConfig, state, store, shadow: str, run: str, lock) -> dict | None:
    """Replay into the shadow the documents that changed since it was built and caught up (edited,
    added or taken down since its apply, whether or not the live population was synced in place
    meanwhile), so that a cutover never serves text the corpus no longer holds. Under the index lock,
    before the gate; with the config the shadow was built with. None when the shadow is current."""
    from reindex import cutover as co
    from reindex import execution
    from reindex.manifests import read_population

    rec = read_population(state, cfg.index, shadow)
    built = cfg if identity_of(cfg).collection == shadow or rec is None else config_from_dict(rec.config)
    ident = identity_of(built)
    ctx = execution.ApplyContext(
        index=cfg.index, cfg=built, identity=ident, target=shadow, old=None, old_shards=None, run=run,
        shards=built.apply.shards, state=state, store=store, embedder=None,  # type: ignore[arg-type]
        pipeline=TextPipeline(built.text, ident.vector_id), in_place=False, fence=lock.check,
    )
    if not any(execution.changed_since_manifest(ctx)):
        return None
    ctx.embedder = backends.make_embedder(built.vector, batch_size=built.apply.embed_batch_size, options=built.embed)
    result = execution.catch_up(ctx)
    failed = [f for r in result["rounds"] for f in r["failures"]]
    if failed:
        raise co.CutoverError(
            f"{shadow} could not be caught up with the corpus ({len({f.get('doc_id') for f in failed})} "
            f"documents failed, first "
            f"{failed[0].get('doc_id')}: {failed[0].get('reason')}); the alias was not moved: fix the source "
            "and run `reindex cutover` again")
    logging.getLogger("reindex").info("caught %s up with %d documents changed since it was built", shadow,
                                      result["documents"])
    return result


def cutover(
    plan_path: str | Path | None = None,
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    queries: str | Path | None = None,
    k: int | None = None,
    force: bool = False,
    by: str | None = None,
) -> CutoverReport:
    """Catch the shadow up with the corpus, evaluate old vs new on identical queries, gate, and swap the
    alias atomically on pass. Re-running a finished cutover is a no-op; a cutover killed after the swap is
    completed first."""
    from reindex import cutover as co
    from reindex.reports_cutover import write_cutover_reports

    cfg = load_resolved(config_path)
    path = Path(plan_path) if plan_path else _latest_plan_for(cfg)
    plan = read_plan(path)
    state = backends.state_store(cfg)
    shadow = _check_cutover_plan(cfg, path, plan, force, state)
    expected = plan.body["inputs"]["baseline"].get("collection")
    with holding_index_lock(state, cfg.index, f"cutover to {shadow}") as lock:
        store = backends.vector_store_for(cfg)
        try:
            recovered = co.reconcile(store, state, cfg.index)
            current = store.get_alias(cfg.index)
            if current == shadow:
                report = {"index": cfg.index, "plan_hash": plan.plan_hash, "shadow": shadow, "live": current,
                          "passed": True, "swap": None, "already": True, "recovered": recovered, "rules": [],
                          "evaluation": None, "forced_by": None, "k": k or cfg.cutover.k,
                          "queries_source": None, "query_vectors": None}
                return CutoverReport(report, None)
            if current != expected:
                raise co.CutoverError(
                    f"alias {cfg.index!r} points to {current or 'nothing'} but the plan was made against "
                    f"{expected or 'no alias'}: someone else moved it; run `reindex plan` again"
                )
            if current is None:
                co.check_names(store, cfg.index)
            caught_up = _catch_up_shadow(cfg, state, store, shadow, plan.plan_hash, lock)
            kk = k or cfg.cutover.k
            new_emb = backends.make_embedder(cfg.vector.for_queries(), options=cfg.embed)  # queries: query_prefix
            embed_new = lambda texts: new_emb.embed(texts).vectors  # noqa: E731
            qs, query_source = _queries_for(cfg, queries)
            evaluation, vectors_note = None, None
            if current is not None:
                evaluation, vectors_note = _evaluate(store, state, cfg, current, shadow, qs, embed_new, kk)
            rules = _gate(store, state, cfg, path, shadow, evaluation, kk)
            passed = all(r.passed for r in rules)
            report = {
                "index": cfg.index, "plan_hash": plan.plan_hash, "shadow": shadow, "live": current, "k": kk,
                "queries_source": query_source if qs or current is not None else "none (initial build)",
                "query_vectors": vectors_note, "rules": [r.as_dict() for r in rules], "passed": passed,
                "evaluation": evaluation, "swap": None, "forced_by": None, "already": False, "recovered": recovered,
                "caught_up": caught_up,
            }
            if passed or force:
                if not passed:
                    approval = read_approval(path)
                    report["forced_by"] = approval.by if approval else by
                    logging.getLogger("reindex").warning("forced cutover of %s by %s despite failed rules", shadow,
                                                         report["forced_by"])
                probe = embed_new([qs[0].text])[0] if qs else None
                report["swap"] = co.swap(store, state, cfg.index, shadow, current, probe,
                                         fence=lambda: lock.check(confirm=True))
            return CutoverReport(report, write_cutover_reports(report, path))
        finally:
            store.close()


def rollback(config_path: str | Path = DEFAULT_CONFIG, *, to: str | None = None) -> RollbackRecord:
    """Swap the alias back to the previous population (verified first), under the index lock."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    state = backends.state_store(cfg)
    with holding_index_lock(state, cfg.index, "rollback") as lock:
        store = backends.vector_store_for(cfg)
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


def gc(config_path: str | Path = DEFAULT_CONFIG, *, older_than: str | None = None, dry_run: bool = False,
       names: list[str] | None = None, force: bool = False,
       confirm: Callable[[list[dict]], bool] | None = None) -> list[GcAction]:
    """Delete retired populations past retention (or the named ones), under the index lock. Never one an
    alias points at; never one live within ``cutover.retention_days`` unless ``force``. ``confirm`` sees the
    deletions first and may refuse them all (the CLI asks on a terminal; unattended callers pass None)."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    retention = cfg.cutover.retention_days * 86400
    age = parse_age(older_than) if older_than else retention
    state = backends.state_store(cfg)
    with holding_index_lock(state, cfg.index, "gc") as lock:
        store = backends.vector_store_for(cfg)
        try:
            co.reconcile(store, state, cfg.index)
            found = co.gc_candidates(store, state, cfg.index, older_than_s=age, retention_s=retention, force=force,
                                     names=names)
            doomed = [c for c in found if not c["protected"]]
            go = not dry_run and bool(doomed) and (confirm is None or confirm(doomed))
            actions = []
            for c in found:
                if c["protected"]:
                    action = "kept"
                elif dry_run:
                    action = "would delete"
                elif go:
                    lock.check(confirm=True)
                    co.delete_population(store, state, cfg.index, c["collection"])
                    action = "deleted"
                else:
                    action = "not confirmed"
                actions.append({**c, "action": action})
            return actions
        finally:
            store.close()


def status(config_path: str | Path = DEFAULT_CONFIG) -> IndexStatus:
    """Aliases, populations (live, shadow, retired with age), locks."""
    import time

    from reindex import cutover as co

    cfg = load_resolved(config_path)
    state = backends.state_store(cfg)
    store = backends.vector_store_for(cfg)
    try:
        aliases = store.list_aliases()
        pops = []
        for r in co.populations(state, cfg.index):
            exists = store.collection_exists(r.collection)
            pops.append({"collection": r.collection, "state": r.state,
                         "points": store.count(r.collection) if exists else None,
                         "age_days": round((time.time() - r.updated_at) / 86400, 2),
                         "chunker": chunker_spec(config_from_dict(r.config).text.chunker), "exists": exists})
        return {"index": cfg.index, "aliases": aliases, "populations": pops,
                "lock": read_lock(state, cfg.index).as_status(), "pending": co.pending_intent(state, cfg.index)}
    finally:
        store.close()
