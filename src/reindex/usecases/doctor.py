"""``reindex doctor``: are the books and the store one story? (DESIGN.md invariant 17)

For each population with a collection to read, the store against its chunk manifest (:func:`reindex.decisions.drift.check_population`:
counts, a sample of points, or every one with ``full``), and the index's own records (:func:`reindex.decisions.drift.check_books`:
the alias, runs left half done, populations stuck in building, orphaned collections, staged results, a stale lock).
Read-only: the store is opened as a reader, nothing is locked, so it works beside a running apply.

With ``repair``, what a plan can fix in the live population (points missing, unlisted, stale, of another pipeline or
model, with edited payloads) becomes a plan (:func:`reindex.usecases.plan.plan_repair`): written to ``plans/``,
approved per policy and carried out by ``reindex apply`` like any other. The rest gets advice lines naming the
command that fixes it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reindex.decisions import cutover as co
from reindex.domain.config import PipelineConfig
from reindex.decisions.drift import (
    PLAN_FIXES,
    StoreView,
    Finding,
    PopulationCheck,
    check_books,
    check_population,
)
from reindex.decisions.index_health import health_problem, side_health
from reindex.errors import ConfigError, ReindexError, StateError, VectorStoreError
from reindex.books.layout import Books
from reindex.books.locks import parse_lock
from reindex.books.manifests import (
    Population,
    count_chunk_manifest_rows,
    read_live_record,
)
from reindex.adapters.stores.vectors import one_line
from reindex.context import Context

__all__ = ["DoctorReport", "doctor"]


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """What ``reindex doctor`` found; ``healthy`` when nothing. ``repair``: the plan ``--repair`` wrote (path,
    hash, what it does), or why none was written."""

    index: str
    mode: str  # sample | full
    findings: tuple[Finding, ...]
    advice: tuple[str, ...]
    notes: tuple[str, ...]
    populations: tuple[dict[str, Any], ...]  # per population checked: points, listed, checked, scanned, embedded
    repair: dict[str, Any] | None
    seconds: float

    @property
    def healthy(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, Any]:
        """What ``reindex doctor --json`` prints: ``{"healthy", "findings": [{"kind", "population", "count",
        "examples", …}], …}``."""
        return {"healthy": self.healthy, "index": self.index, "mode": self.mode,
                "findings": [f.as_dict() for f in self.findings], "advice": list(self.advice),
                "notes": list(self.notes), "populations": list(self.populations), "repair": self.repair,
                "seconds": round(self.seconds, 3)}


def doctor(ctx: Context, *, full: bool = False, sample: int = 256,
           embed_sample: int = 32, repair: bool = False, out: str | Path | None = "plans",
           seed: int = 0) -> DoctorReport:
    """Check every population and the index's records (see the module docstring). ``sample``: manifest rows and
    store points looked at per population (``full``: every one); ``embed_sample``: vectors re-embedded with the
    population's model and compared (0: none); ``repair``: write the plan that fixes the live population into
    ``out``."""
    if sample < 1 or embed_sample < 0:
        raise ConfigError(f"--sample must be at least 1 and --embed-sample at least 0 (got {sample}, {embed_sample})")
    t0 = time.perf_counter()
    cfg, state = ctx.config, ctx.state
    records, damaged = co.populations_checked(state, cfg.index)
    got = state.get_versioned_aged(ctx.books.lock_key)
    lock = parse_lock(got[0] if got is not None else None)
    gone = lock.held and lock.process is not None and lock.process.gone()
    try:
        live_name = (read_live_record(state, cfg.index) or {}).get("collection")
    except StateError:  # named by the records' check (state-contradicts-alias)
        live_name = None
    findings: list[Finding] = []
    checks: dict[str, PopulationCheck] = {}
    unread: list[str] = []
    with ctx.read_only_store() as store:
        alias = store.get_alias(cfg.index) if store is not None else None
        collections = tuple(store.list_collections()) if store is not None else ()
        for rec in records:
            if not rec.state.servable:
                continue  # building (judged by the records' check) or deleting (gc finishes it)
            if rec.collection not in collections:
                listed = count_chunk_manifest_rows(state, cfg.index, rec.collection)
                findings.append(Finding("missing-points", rec.collection, listed, (),
                                        f"{rec.collection} is {rec.state} but its collection is gone ({listed:,} "
                                        "points listed)", listed))
                continue
            try:
                checks[rec.collection] = check_population(store, state, rec, full=full, sample=sample,
                                                          embed_sample=embed_sample, embed=_embedder(ctx, rec),
                                                          seed=seed)
            except VectorStoreError as err:  # a shadow before its cutover: readers of this store cannot see it
                unread.append(f"{rec.collection} ({rec.state}) was not checked: {one_line(err)}")
                continue
            findings += checks[rec.collection].findings
        health = _live_health(store, live_name, collections, cfg, findings, unread)
    books, notes = check_books(state, cfg.index, records, StoreView(alias, collections, lock, got[2] if got else 0.0, gone))
    findings += books
    from reindex.decisions.serving import check_serving  # the serving engine (numpy) only for doctor's last check

    findings += check_serving(state, cfg.index, damaged)
    notes = unread + notes
    advice = _advice(findings, ctx, live_name, full, repair, Path(out) if out is not None else Path("plans"))
    fix = None
    if repair:
        fix = _repair(ctx, checks.get(live_name or ""), out)
        if fix is not None:
            advice.insert(0, fix["line"])
    populations = tuple({"collection": c.collection, "points": c.points, "listed": c.listed, "checked": c.checked,
                         "scanned": c.scanned, "embedded": c.embedded,
                         **({"index_health": health} if health and health["collection"] == c.collection else {})}
                        for c in checks.values())
    return DoctorReport(cfg.index, "full" if full else "sample", tuple(findings), tuple(advice), tuple(notes),
                        populations, fix, time.perf_counter() - t0)


def _live_health(store: Any, live: str | None, collections: tuple[str, ...], cfg: PipelineConfig,
                 findings: list[Finding], notes: list[str]) -> dict[str, Any] | None:
    """The live population's index health (:func:`reindex.decisions.index_health.side_health`: built, its recall@10
    against exact search, its ANN latency), and an ``index-recall`` finding when it falls short."""
    if store is None or live is None or live not in collections:
        return None
    try:
        health = side_health(store, live)
    except ReindexError as err:
        notes.append(f"the index health of {live} was not measured: {one_line(err)}")
        return None
    problem = health_problem(health, cfg.cutover.min_index_recall)
    if problem:
        findings.append(Finding("index-recall", live, 1, (), problem))
    return health


def _embedder(ctx: Context, rec: Population) -> Callable[[list[str]], Any]:
    """Texts → vectors with the population's own vector half (its side; the model is loaded on the first call)."""
    side = ctx.side(rec)
    return lambda texts: side.passage_embedder(batch_size=ctx.config.apply.embed_batch_size).embed(texts).vectors


def _repair(ctx: Context, check: PopulationCheck | None,
            out: str | Path | None) -> dict[str, Any] | None:
    """Write the plan that fixes what ``check`` (the live population's) found; its summary, or why there is none."""
    if check is None or not (check.resync or check.delete):
        return None
    kinds = tuple((f.kind, f.count) for f in check.findings if f.kind in PLAN_FIXES)
    from reindex.planner import Repair  # the planner is loaded only to repair
    from reindex.usecases.plan import plan_repair

    try:
        plan, path = plan_repair(ctx, Repair(check.resync, check.delete, kinds), out=out)
    except ReindexError as err:
        return {"plan": None, "error": str(err), "line": f"no repair plan: {err}"}
    n, fix = plan.numbers, plan.repair
    assert fix is not None  # a repair plan records its repair
    where = str(path) if path is not None else None
    approve = (f"approve it (`reindex approve {where} --by NAME`: {'; '.join(n.approval_reasons)}), then "
               if n.approval_required else "")
    return {"plan": where, "plan_hash": plan.plan_hash, "kind": plan.kind.value,
            "documents": len(fix.documents), "delete_points": len(fix.delete_points),
            "tokens_to_embed": n.tokens_to_embed, "approval_required": n.approval_required,
            "line": (f"repair plan {where}: {len(fix.documents):,} document(s) written again "
                     f"({n.tokens_to_embed:,} tokens to embed), {len(fix.delete_points):,} point(s) "
                     f"deleted; {approve}run `reindex apply {where}`")}


def _advice(findings: list[Finding], ctx: Context, live: str | None, full: bool,
            repair: bool, plans: Path) -> list[str]:
    """One line per thing to do, each naming the command (a half-done run's plan file is looked for in ``plans``)."""
    out: list[str] = []
    fixable = sorted({f.population for f in findings if f.kind in PLAN_FIXES and f.population})
    for pop in fixable:
        if pop == live and not repair:
            out.append(f"`reindex doctor{' --full' if full else ''} --repair` writes the plan that fixes {pop} in place "
                       "(its documents' points written again, unlisted points deleted)")
        elif pop != live:
            out.append(f"{pop} is not live: rebuild it (`reindex plan` and `reindex apply` with its config) or delete "
                       f"it (`reindex gc {pop} --yes`)")
    if fixable and not full:
        out.append("a sample found these: `reindex doctor --full` finds every one (`--full --repair` repairs them all)")
    for f in findings:
        if f.kind in ("half-done-apply", "stuck-building"):
            run = f.examples[0] if f.kind == "half-done-apply" else None
            found = Books.plan_files_of_run(plans, run) if run else []
            resume = f"resume it with `reindex apply {found[-1]}` (finished shards are skipped)" if found else \
                "re-plan and apply it (`reindex plan`, `reindex apply PLAN`)"
            out.append(f"{f.detail}: {resume}, or delete the population with `reindex gc {f.population} --yes`")
        elif f.kind == "index-recall":
            out.append(f"{f.detail}: raise store.hnsw.ef (searches, no rebuild) or m and ef_construct (the graph: "
                       "`reindex plan`, `reindex apply`, `reindex cutover` rebuild it), then `reindex doctor` again")
        elif f.kind == "orphaned-collection":
            out.append(f"{f.population} is in the store with no record: `reindex gc {f.population} --yes` deletes it")
        elif f.kind == "staged-results":
            out.append(f"{f.detail}: resuming that run (`reindex apply PLAN`) takes their vectors; if it finished, "
                       f"nothing reads them: delete {ctx.books.describe(ctx.books.staged_prefixes(f.examples[0]))}")
        elif f.kind == "stale-lock":
            out.append(f"{f.detail}: the next command that writes takes it over (`reindex sync`, `reindex apply PLAN`); "
                       f"or delete {ctx.books.describe(ctx.books.lock_key)} if no reindex command runs for {ctx.index}")
        elif f.kind in ("serving-record-damaged", "bridge-damaged", "bridge-missing", "population-record-damaged"):
            out.append(f.detail)
        elif f.kind == "state-contradicts-alias":
            out.append(f"{f.detail}: readers see what the alias points at; `reindex gc` completes an interrupted move, "
                       f"`reindex rollback --to {live or 'COLLECTION'}` points the alias at the live record's population "
                       "(verified first)")
    return list(dict.fromkeys(out))

