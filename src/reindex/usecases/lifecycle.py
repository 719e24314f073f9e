"""Cutover, rollback, gc and status of an index."""

from __future__ import annotations

import os
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

from reindex.approvals import read_approval
from reindex.planner import (
    PlanError,
    read_plan,
)



from reindex.usecases import backends
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved
from reindex.usecases.plan import check_plan_index


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
        if plan.body["identity"]["new"]["collection"] == coll and plan.kind != "document-scoped":
            return p
    raise PlanError(f"no plan in {plans_dir}/ builds {coll}; give the plan file")


def cutover(
    plan_path: str | Path | None = None,
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    queries: str | Path | None = None,
    k: int | None = None,
    force: bool = False,
    by: str | None = None,
) -> CutoverReport:
    """Evaluate old vs new on identical queries, gate, and swap the alias atomically on pass."""
    import json as _json
    import logging
    import socket
    import uuid

    from reindex import cutover as co
    from reindex import evaluation as ev
    from reindex.manifests import acquire_lock, read_live, read_population
    from reindex.reports_cutover import write_cutover_reports

    cfg = load_resolved(config_path)
    path = Path(plan_path) if plan_path else _latest_plan_for(cfg)
    plan = read_plan(path)
    check_plan_index(plan, cfg, path)
    if plan.kind in ("document-scoped", "none"):
        raise co.CutoverError(f"{path}: a {plan.kind} plan is applied in place; there is nothing to cut over")
    if force:
        approval = read_approval(path)
        if approval is None or approval.plan_hash != plan.plan_hash:
            raise co.CutoverError(f"--force needs an approval record for plan {plan.plan_hash[:12]}: "
                                  f"run `reindex approve {path} --by NAME` first")
    state = backends.state_store(cfg)
    shadow = plan.body["identity"]["new"]["collection"]
    rec = read_population(state, cfg.index, shadow)
    if rec is None or rec.state not in ("ready", "live", "retired"):
        raise co.CutoverError(f"population {shadow} is not built ({rec.state if rec else 'absent'}); run `reindex apply {path}`")
    expected = plan.body["inputs"]["baseline"].get("collection")
    lock = acquire_lock(state, cfg.index, f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
                        purpose=f"cutover to {shadow}")
    store = backends.vector_store_for(cfg)
    try:
        current = store.get_alias(cfg.index)
        if current != expected:
            raise co.CutoverError(
                f"alias {cfg.index!r} points to {current or 'nothing'} but the plan was made against "
                f"{expected or 'no alias'}: someone else moved it; run `reindex plan` again"
            )
        if current is None:
            co.check_names(store, cfg.index)
        kk = k or cfg.cutover.k
        new_emb = backends.make_embedder(cfg.vector, options=cfg.embed)
        embed_new = lambda texts: new_emb.embed(texts).vectors  # noqa: E731
        evaluation = None
        query_source = "none (initial build: no old population to compare)"
        vectors_note = None
        if queries:
            qs = ev.read_queries(queries)
            query_source = str(queries)
        else:
            pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
            docs = ((d.doc_id, pipe.document_text(d)) for d in open_source(cfg.source).scan(ScanReport()))
            qs = ev.probe_queries(docs, cfg.cutover.probes, cfg.cutover.seed)
            query_source = f"{len(qs)} known-item probes sampled from the corpus (seed {cfg.cutover.seed})"
        if current is not None:
            live = read_live(state, cfg.index)
            old_cfg = config_from_dict(live.config) if live else cfg
            if identity_of(old_cfg).vector_id == identity_of(cfg).vector_id:
                embed_old = embed_new
                vectors_note = "identical on both sides (same vector half)"
            else:
                old_emb = backends.make_embedder(old_cfg.vector, options=old_cfg.embed)
                embed_old = lambda texts: old_emb.embed(texts).vectors  # noqa: E731
                vectors_note = "each side embeds queries with its own model (the vector half changed)"
            evaluation = ev.evaluate(store, cfg.index, shadow, qs, embed_old, embed_new, k=kk, seed=cfg.cutover.seed)
        run = {}
        run_path = path.with_name(path.name.removesuffix(".json") + ".run.json")
        if run_path.is_file():
            run = _json.loads(run_path.read_text())
        # The chunk manifest is what the shadow should hold: the plan's chunks plus any catch-up changes.
        from reindex.manifests import read_chunk_manifest

        expected_points = sum(1 for _ in read_chunk_manifest(state, cfg.index, shadow))
        rules = co.gate(cfg.cutover, evaluation, shadow_points=store.count(shadow),
                        planned_chunks=expected_points, failures=len(run.get("failures", [])), k=kk)
        passed = all(r.passed for r in rules)
        report = {
            "index": cfg.index, "plan_hash": plan.plan_hash, "shadow": shadow, "live": current, "k": kk,
            "queries_source": query_source, "query_vectors": vectors_note,
            "rules": [r.as_dict() for r in rules], "passed": passed, "evaluation": evaluation,
            "swap": None, "forced_by": None,
        }
        if passed or force:
            if not passed:
                approval = read_approval(path)
                report["forced_by"] = approval.by if approval else by
                logging.getLogger("reindex").warning("forced cutover of %s by %s despite failed rules", shadow,
                                                     report["forced_by"])
            probe = embed_new([qs[0].text])[0] if qs else None
            report["swap"] = co.swap(store, state, cfg.index, shadow, current, probe)
        report_path = write_cutover_reports(report, path)
        return CutoverReport(report, report_path)
    finally:
        store.close()
        lock.release()


def rollback(config_path: str | Path = DEFAULT_CONFIG, *, to: str | None = None) -> dict:
    """Swap the alias back to the previous population."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    store = backends.vector_store_for(cfg)
    try:
        return co.rollback(store, backends.state_store(cfg), cfg.index, to)
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
       names: list[str] | None = None) -> list[dict]:
    """Delete retired populations past retention; never one an alias points at."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    age = parse_age(older_than) if older_than else cfg.cutover.retention_days * 86400
    store = backends.vector_store_for(cfg)
    try:
        return co.gc(store, backends.state_store(cfg), cfg.index, older_than_s=age, dry_run=dry_run, names=names)
    finally:
        store.close()


def status(config_path: str | Path = DEFAULT_CONFIG) -> dict:
    """Aliases, populations (live, shadow, retired with age), locks."""
    import json as _json
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
        lock = state.get(f"indexes/{cfg.index}/lock.json")
        return {"index": cfg.index, "aliases": aliases, "populations": pops,
                "lock": _json.loads(lock) if lock else None}
    finally:
        store.close()
