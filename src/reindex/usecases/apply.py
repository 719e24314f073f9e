"""Apply a plan: refuse drifted or unapproved plans, take the index lock, run the shards.

Lines: one use case, from the check of a plan's inputs (the same cursor, digest and live population the plan
recorded) through the run to its report and recorded rates; the checks are also what ``record_cursor`` and the
mutation bench (bench/mutations.py) address here."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from reindex.foundation.atomic import atomic_write_text
from reindex.domain.config import PipelineConfig
from reindex.errors import ApprovalError, DriftError
from reindex.domain.identity import (TOUCHED_REMOVED, TOUCHED_UNMOVED, TOUCHED_UNREADABLE, CorpusDigest, identity_of,
                                     payload_id, touched_digest)
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source, tracker_of
from reindex.adapters.sources.base import Document, ScanReport

from reindex.planner.approvals import check_approval, check_not_rejected, read_approval, signing_key
from reindex.domain.kinds import ChangeKind, PopulationState
from reindex.planner import (READING_CAP_BYTES, Baseline, Plan, PlanError, PlanReading, approval_of_plan,
                             check_plan_index, classify, config_in_force, forecast_refusal, queries_changed, read_plan,
                             truncation_refusal)



from reindex.engine import execution



from reindex.foundation import settings
from reindex.books.carried import CarriedRef, delete_carried
from reindex.adapters.embedders import describe_embedder
from reindex.books.cursors import Committed, Tracking, commit_cursor, read_committed, read_cursor, source_key
from reindex.books.manifests import (
    Population,
    read_apply_record,
    read_document_hashes,
    read_live,
    read_population,
    write_apply_record,
    write_population,
)
from reindex.errors import RunnerError
from reindex.books.layout import Books
from reindex.books.locks import Fence
from reindex.runners import ShardJob, ShardRunner, describe
from reindex.engine.workers import SharedTokenCounter, budget_key
from reindex.adapters.stores.payload import INDEXED_FIELDS, filter_key
from reindex.foundation.throughput import CpuClock
from reindex.context.progress import ProgressRecord
from reindex.context import Context
from reindex.context.disk import check_free_disk, cutover_room_warning
from reindex.context.locking import holding_index_lock
from reindex.usecases.plan import make_plan, plan_in_place_part
from reindex.context.rates import MIN_POINTS_TO_MEASURE_BUILD, MIN_TOKENS_TO_MEASURE, record_build_rate, record_rate

__all__ = [
    "ApplyReport", "BUILD_LEASE_FACTOR", "MIN_POINTS_TO_MEASURE_BUILD", "MIN_TOKENS_TO_MEASURE", "READ_CAP_BYTES",
    "SHARD_FIELDS", "apply_plan", "build_lease", "check_drift", "check_inputs", "corpus_digest_of", "job_of",
    "kind_in_force", "record_cursor",
]


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What an apply did, planned vs actual."""

    plan_hash: str
    kind: str
    collection: str | None
    status: str  # done | already-applied | nothing-to-do | failed
    report: dict
    report_path: Path | None

    def as_dict(self) -> dict:
        return {"plan_hash": self.plan_hash, "kind": self.kind, "collection": self.collection, "status": self.status,
                "report_path": str(self.report_path) if self.report_path else None, **self.report}


# At most this many bytes of documents are kept by a drift check for the shards (``read``): an in-place
# sync of more is read again by its shards, as a new population always is.
READ_CAP_BYTES = READING_CAP_BYTES


def corpus_digest_of(cfg: PipelineConfig, *, read: dict[str, Document] | None = None,
                     wanted: Collection[str] = ()) -> str:
    """The corpus digest of the config's source now (:func:`reindex.domain.identity.corpus_digest`). With ``read``,
    the documents whose ids are in ``wanted`` are kept there too, in source order (none when they pass
    ``READ_CAP_BYTES`` in all)."""
    return _scan_corpus(cfg, read, wanted, ())[0]


def _scan_corpus(cfg: PipelineConfig, read: dict[str, Document] | None, wanted: Collection[str],
                 scope: Collection[str]) -> tuple[str, dict[str, str]]:
    """:func:`corpus_digest_of`, and the content hash of each document of ``scope`` as the scan found it (an
    unreadable one: :data:`TOUCHED_UNREADABLE`; one the scan did not find is absent)."""
    digest, size, found = CorpusDigest(), 0, {}
    report = ScanReport()
    for d in open_source(cfg.source).scan(report):
        digest.add(d.doc_id, d.content_hash)
        if d.doc_id in scope:
            found[d.doc_id] = d.content_hash
        if read is not None and d.doc_id in wanted and size <= READ_CAP_BYTES:
            size += d.size
            read[d.doc_id] = d
            if size > READ_CAP_BYTES:
                read.clear()
    found.update((b.doc_id, TOUCHED_UNREADABLE) for b in report.bad if b.doc_id in scope)
    return digest.hexdigest(), found


def check_drift(plan: Plan, cfg: PipelineConfig, state, *, read: dict[str, Document] | None = None,
                reading: PlanReading | None = None) -> list[str]:
    """Inputs of the plan that no longer match: config, live population, corpus. With ``read`` (an in-place
    plan), the documents the plan changes are kept there as the corpus scan reads them (see
    :func:`corpus_digest_of`), for the shards of this process. ``reading``: see :func:`check_inputs`."""
    return check_inputs(plan, cfg, state, read=read, reading=reading)[0]


def check_inputs(plan: Plan, cfg: PipelineConfig, state, *, read: dict[str, Document] | None = None,
                 reading: PlanReading | None = None) -> tuple[list[str], Tracking | None]:
    """:func:`check_drift`, and the source's cursor as this check found it (None: a source without one): a
    plan that read from a cursor is checked from the same cursor (only what moved past it is read again);
    a plan that read the whole source is checked by reading it whole, its cursor taken just before.

    The corpus is checked within the plan's scope (docs/design-notes.md, "What a plan's corpus digest means"): an
    in-place plan drifts when a document it changes no longer reads as it priced it (its ``touched`` digest); a
    document outside it that moved is not the plan's — the apply's catch-up finds it from the cursor the plan read
    from (or by a full compare), else the next sync. A build's scope is every document. ``reading``: what the plan
    read in this process (:class:`~reindex.planner.PlanReading`): when it vouches for this in-place plan, the
    source is not read again — the shards write the documents as the plan read them, and the catch-up starts at
    the cursor where the plan's read ended."""
    problems, live, committed = _check_books(plan, cfg, state)
    wanted = set(plan.numbers.affected_documents) if read is not None and plan.kind.in_place else set()
    if reading is not None and plan.kind.in_place and live is not None and reading.vouches_for(plan.body):
        if problems:
            return problems, None
        if wanted:
            read.update((d, doc) for d, doc in reading.documents.items() if d in wanted)
        return problems, reading.tracking
    how = plan.corpus.read
    scope = _scope(plan)
    if how["mode"] == "cursor":  # read from the live population's cursor: checked from the same cursor
        if problems or live is None:
            return problems, None
        return _check_from_cursor(plan, cfg, state, live.collection, how["from"], read if wanted else None, wanted,
                                  committed, scope)
    source = tracker_of(open_source(cfg.source))
    position = source.position() if source is not None else None  # before the read: what it sees is at or past it
    now, found = _scan_corpus(cfg, read if wanted else None, wanted, scope or ())
    tracking = Tracking(source, position, source_key(cfg.source), time.time(), full=True) if source else None
    if now != plan.corpus.digest:
        if scope is None or not _within_scope(plan, {d: found.get(d, TOUCHED_REMOVED) for d in scope}):
            problems.append(f"the corpus was {plan.corpus.digest[:12]} at planning but is now {now[:12]}"
                            + _scope_words(plan, scope))
        # Only outside the plan's documents: the cursor taken before this read would vouch for documents the plan
        # does not apply. None: the catch-up compares the whole source with what the apply wrote.
        tracking = None
    return problems, tracking


def _check_books(plan: Plan, cfg: PipelineConfig, state) -> tuple[list[str], Population | None, Committed | None]:
    """The inputs of a plan besides the corpus that no longer match (the config, the live population, its cursor),
    with the live population and its committed cursor as read (the cursor only when the plan read from one)."""
    from reindex.domain.identity import config_digest, legacy_config_digest
    from reindex.books.manifests import check_chunk_manifest
    from reindex.books.parts import manifest_digest, run_rewrites

    problems = []
    if plan.config_digest not in (config_digest(cfg), legacy_config_digest(cfg)):
        problems.append(f"the config changed since the plan (digest {plan.config_digest[:12]})")
    base = plan.baseline
    live = read_live(state, cfg.index)
    committed = None
    if base.kind == "explicit":
        problems.append("the plan was made against an explicit baseline (--baseline-config/--baseline-corpus), "
                        "not the live index")
    elif base.kind == "none" and live is not None:
        problems.append(f"the plan is an initial build but index {cfg.index!r} now serves {live.collection}")
    elif base.kind == "live":
        if live is None or live.collection != base.collection:
            problems.append(f"the live population was {base.collection} at planning but is now "
                            f"{live.collection if live else 'none'}")
        # A run of this plan killed in place rewrote some parts: those writes (and only those) are its own.
        elif manifest_digest(state, cfg.index, live.collection,
                             rewritten=run_rewrites(state, cfg.index, live.collection, plan.plan_hash)) \
                != base.manifest_digest:
            check_chunk_manifest(state, cfg.index, live.collection)  # a corrupt file is no change: say which
            problems.append(f"the live population {live.collection} changed since the plan")
        else:
            committed = read_committed(state, cfg.index, live.collection) if base.cursor is not None else None
            if committed is not None and committed.cursor.digest != base.cursor and committed.run != plan.plan_hash:
                problems.append(f"the live population {live.collection} recorded another cursor since the plan "
                                "(another sync read the source)")
    return problems, live, committed


def _scope(plan: Plan) -> set[str] | None:
    """The documents an in-place plan changes (its drift check's scope), None for a plan whose scope is every
    document (a build, a payload rewrite, a plan made before scopes were recorded)."""
    if not plan.kind.in_place or plan.corpus.touched is None:
        return None
    n = plan.numbers
    return set(n.affected_documents) | set(n.removed_documents)


def _within_scope(plan: Plan, now: dict[str, str]) -> bool:
    """Whether the documents the plan changes are now as it priced them (``now``: doc id → its state now)."""
    return touched_digest(now) == plan.corpus.touched


def _scope_words(plan: Plan, scope: set[str] | None) -> str:
    if scope is None:
        return ""
    return f", and the {len(scope):,} document(s) it changes no longer read as it priced them"


def _check_from_cursor(plan: Plan, cfg: PipelineConfig, state, collection: str, since_digest: str,
                       read: dict[str, Document] | None, wanted: set[str],
                       committed: Committed | None = None,
                       scope: set[str] | None = None) -> tuple[list[str], Tracking | None]:
    """The corpus check of a plan that read from the live population's cursor: the same cursor, the same
    changes (keeping the documents the plan changes in ``read``), or — for an in-place plan whose ``scope`` is
    known — the same documents it changes: then the catch-up starts from the cursor the plan read from, and
    replays what moved outside the plan. ``committed``: the population's, if read."""
    committed = committed or read_committed(state, cfg.index, collection)
    since = committed.cursor if committed is not None and committed.cursor.digest == since_digest else \
        read_cursor(state, cfg.index, collection, since_digest)
    source = tracker_of(open_source(cfg.source))
    if since is None or committed is None or source is None:
        return [f"the cursor the plan read from ({since_digest[:12]}) is no longer recorded for {collection}"], None
    report = ScanReport()
    changes = source.changes(since, report)
    planned = plan.corpus.digest
    tracking = Tracking(source, changes.cursor, committed.source_key, committed.verified_at, started_from=since.digest)
    if changes.digest != planned:
        if scope is None:
            return [f"the source moved since the plan (read from its cursor: {planned[:12]} at planning, now "
                    f"{changes.digest[:12]})"], None
        read_now = {d.doc_id: d.content_hash for d in changes.documents if d.doc_id in scope}
        read_now.update((b.doc_id, TOUCHED_UNREADABLE) for b in report.bad if b.doc_id in scope)
        gone = changes.removed(scope - read_now.keys())
        now = {d: read_now.get(d, TOUCHED_REMOVED if d in gone else TOUCHED_UNMOVED) for d in scope}
        if not _within_scope(plan, now):
            return [f"the source moved since the plan in the documents it changes (read from its cursor: "
                    f"{planned[:12]} at planning, now {changes.digest[:12]}; {len(scope):,} document(s) in its scope)"], None
        # Moved outside the plan only: the catch-up reads from where the plan started and replays those documents.
        tracking = Tracking(source, since, committed.source_key, committed.verified_at, started_from=since.digest)
    if read is not None:
        kept = [d for d in changes.documents if d.doc_id in wanted]
        if sum(d.size for d in kept) <= READ_CAP_BYTES:
            read.update((d.doc_id, d) for d in kept)
    return [], tracking


def _refuse_or_replan(ctx: Context, plan: Plan, plan_path: str | Path, cfg: PipelineConfig,
                      replan: bool, read: dict[str, Document] | None = None, *,
                      governed: bool = False, reading: PlanReading | None = None) -> tuple[Plan, str | Path, Tracking | None]:
    """The plan to apply: this one if its inputs still hold, a fresh one with ``--replan``, else refuse
    (:class:`~reindex.errors.DriftError`). ``read``: see :func:`check_drift` (emptied for a fresh plan).
    ``governed``: the plan is the in-place part of a pipeline change, carried out under the live population's own
    config (``cfg``). ``reading``: see :func:`check_inputs`. Also returns the source's cursor as the check found it."""
    state = ctx.state
    problems, tracking = check_inputs(plan, cfg, state, read=read, reading=reading)
    if problems:
        if read is not None:
            read.clear()
        if not replan:
            raise DriftError(
                f"{plan_path}: " + "; ".join(problems) + ". Run `reindex plan` again, or pass --replan",
                problems=problems)
        if governed:  # the in-place part of a pipeline change: re-plan that part
            fresh = plan_in_place_part(ctx, out=Path(plan_path).parent)
            if fresh is None:
                raise PlanError(f"{plan_path}: " + "; ".join(problems) + "; the live index now matches the corpus "
                                "under its own config: nothing is left to apply in place")
            plan, plan_path = fresh
        else:
            plan, plan_path = make_plan(ctx, out=Path(plan_path).parent)
        problems, tracking = check_inputs(plan, cfg, state, read=read)
        if problems:
            raise DriftError(f"{plan_path}: " + "; ".join(problems) + " (the source is changing while it is planned); "
                             "run `reindex apply --replan` again", problems=problems)
    kind = kind_in_force(plan, cfg, state)
    check_not_rejected(plan, plan_path)  # final, with or without an approval on record (the UI's form writes it)
    check_approval(plan, read_approval(plan_path, signing_key(cfg.approval.hmac_key_env)),
                   approval_of_plan(plan.body, cfg, kind))
    refused = forecast_refusal(plan.body, cfg, kind) or truncation_refusal(plan.body, cfg)
    if refused is not None:
        raise ApprovalError(f"{plan_path}: not applied: {refused}")
    return plan, plan_path, tracking


def record_cursor(ctx: Context, plan: Plan, *, reading: PlanReading | None = None) -> bool:
    """A plan with nothing to do whose read moved the source's cursor (metadata that moved without the content,
    a first or verifying full read): record that cursor for the live population, under the index lock, so
    that the next sync starts from it. Nothing when the source moved since the plan. ``reading``: what the plan
    read in this process: its cursor is recorded as the read left it, without reading the source again (what
    moved since is the next sync's). Returns whether a cursor was recorded."""
    how = plan.corpus.read
    if plan.kind.does_work or not how.get("cursor") or (how.get("mode") == "cursor" and not how.get("documents_read")):
        return False  # a source without a cursor; or nothing was read past the cursor: it stands where it was
    if reading is not None and reading.tracking is not None and reading.corpus_digest == plan.corpus.digest:
        problems, tracking = _check_books(plan, ctx.config, ctx.state)[0], reading.tracking
    else:
        problems, tracking = check_inputs(plan, ctx.config, ctx.state)
    return not problems and _record_unchanged(ctx, plan, ctx.config, tracking)


def _record_unchanged(ctx: Context, plan: Plan, cfg: PipelineConfig, tracking: Tracking | None) -> bool:
    state = ctx.state
    live = read_live(state, cfg.index)
    if tracking is None or live is None:
        return False
    committed = read_committed(state, cfg.index, live.collection)
    if committed is not None and committed.cursor.digest == tracking.cursor.digest and not tracking.full:
        return False
    with holding_index_lock(ctx, f"record the cursor of plan {plan.plan_hash[:12]}") as lock:
        holds = read_document_hashes(state, cfg.index, live.collection).keys() if tracking.full else None
        lock.check()
        commit_cursor(state, cfg.index, live.collection, tracking, run=plan.plan_hash, holds=holds)
    return True


def kind_in_force(plan: Plan, cfg: PipelineConfig, state) -> ChangeKind:
    """The plan's kind as the live index and the config in force make it, by the planner's own
    :func:`~reindex.planner.classify`; a plan file claiming another kind (an edited plan whose hash was
    recomputed) is refused. What the documents did comes from the plan (its corpus digest was checked)."""
    live = read_live(state, cfg.index)
    # The live ids are recomputed from its recorded config, as the planner does (one formula): a population
    # recorded under an older formula is re-identified, not rebuilt (docs/design-notes.md, model identity).
    old = Baseline("live", live.config) if live is not None else Baseline("none", None)
    payload_changed = live is not None and (live.payload_id != payload_id(cfg) or queries_changed(live.config, cfg))
    kind = classify(old, identity_of(cfg), plan.documents_changed or plan.kind.in_place,
                    payload_changed=payload_changed, text_changed=plan.kind is ChangeKind.DOCUMENT)
    if kind != plan.kind:
        raise PlanError(f"the plan says {plan.kind} but the live index and the config make it {kind}; "
                        "run `reindex plan` again")
    return kind


def _prepare_target(plan: Plan, cfg: PipelineConfig, state, store) -> tuple[str, str | None, PipelineConfig | None]:
    """Create the collection the plan writes (unless it exists) and record a new population as building.
    Returns (target, old collection to reuse from, the old population's config)."""
    ident = identity_of(cfg)
    live = read_live(state, cfg.index)
    in_place = plan.kind.in_place
    target = live.collection if in_place and live else ident.collection
    if not store.collection_exists(target):
        store.create_collection(target, dimension=cfg.vector.dimension, distance=cfg.vector.distance, bulk=True,
                                shard_number=cfg.store.shard_number, replication_factor=cfg.store.replication_factor)
        for fld in INDEXED_FIELDS:
            store.create_payload_index(target, fld, "keyword")
    for fld in cfg.payload.indexes:  # the configured filter keys (again in place: the list may have grown)
        store.create_payload_index(target, filter_key(cfg.payload, fld), "keyword")
    if not in_place:
        _set_population_state(state, cfg, target, PopulationState.BUILDING)
    old = live.collection if live else None
    return target, old, live.config if live else None


def _set_population_state(state, cfg: PipelineConfig, collection: str, value: PopulationState) -> None:
    rec = read_population(state, cfg.index, collection)
    now = time.time()
    write_population(state, Population(cfg.index, collection, cfg.model_dump(mode="json"),
                                       identity_of(cfg).as_dict(), value, rec.created_at if rec else now, now))


def _record_payload(state, cfg: PipelineConfig, collection: str, confirm: Callable[[], None]) -> None:
    """After an in-place apply, record the payload settings its points now carry in the live population's
    config (``source.metadata_fields`` and ``payload``; nothing else: in place, the rest of the record
    still describes how the population was built), so that the next plan compares against them."""
    rec = read_population(state, cfg.index, collection)
    if rec is None:
        return
    config = dict(rec.config_json)
    vector = {**config.get("vector", {}), "query_prefix": cfg.vector.query_prefix}
    if config.get("payload") == cfg.payload.model_dump(mode="json") and \
            config.get("source", {}).get("metadata_fields") == list(cfg.source.metadata_fields) and \
            config.get("vector") == vector:
        return
    config["payload"] = cfg.payload.model_dump(mode="json")
    config["source"] = {**config.get("source", {}), "metadata_fields": list(cfg.source.metadata_fields)}
    config["vector"] = vector  # what readers embed queries with (the vector id does not include it)
    confirm()
    write_population(state, rec.with_config(config))


def _token_budget(plan: Plan, plan_path: Path, cfg: PipelineConfig) -> int | None:
    """Tokens an apply may embed without an approval record: ``approval.max_tokens`` for a plan the policy
    lets through unapproved, none (unbounded) for an approved one. A guard against a plan file whose work
    numbers were edited: the embedder stops before the batch that would exceed it."""
    if plan.kind.pipeline_scoped or cfg.approval.max_tokens is None:
        return None
    approval = read_approval(plan_path, signing_key(cfg.approval.hmac_key_env))
    return None if approval is not None and approval.plan_hash == plan.plan_hash else cfg.approval.max_tokens


class _BuiltOnFirstUse:
    """An embedder made at its first call (the model is loaded then, once, whichever thread asks first)."""

    def __init__(self, make) -> None:
        self._make, self._real, self._lock = make, None, threading.Lock()

    def _embedder(self):
        with self._lock:
            if self._real is None:
                self._real = self._make()
            return self._real

    def embed(self, texts: list[str]):
        return self._embedder().embed(texts)

    def describe(self) -> dict:
        """What the run report says of it: the model is not loaded unless something was embedded."""
        if self._real is None:
            return {"provider": None, "backend": None, "precision": None, "device": None,
                    "loaded": False}
        return describe_embedder(self._real)

    def __getattr__(self, name: str):  # dimension, max_tokens
        return getattr(self._embedder(), name)


def _embedder_for(ctx: Context, plan: Plan, cfg: PipelineConfig, elsewhere: bool = False):
    """The apply's embedder. A plan that embeds nothing (payload-only, removals, full reuse), or whose shards embed
    in other processes (``elsewhere``: each makes its own), gets one made only if something is embedded here after
    all (a catch-up edit), so it never loads the model for nothing."""
    def make():
        return ctx.embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size, options=cfg.embed)

    return make() if plan.numbers.tokens_to_embed and not elsewhere else _BuiltOnFirstUse(make)


#: The lease an apply holds through the index build when no lease keeper can be started (a state store that cannot
#: be named for another process): its ttl plus this many times the build's planned CPU-seconds. The edge engine's
#: build keeps the interpreter lock for its whole length, so the heartbeat cannot renew during it; on a loaded box
#: the build's wall is several times its CPU (70 s of wall for a 60 k-point build at load 5 on 2 cores, ~30 CPU-s
#: planned; 15–20× at load 35). The lease keeper (:meth:`~reindex.books.locks.IndexLock.renewed_elsewhere`) renews it
#: from another process instead, whatever the load.
BUILD_LEASE_FACTOR = 4.0


def build_lease(plan: Plan, ttl: float) -> float:
    """Seconds of lease to hold through the index build of ``plan``'s new population (:data:`BUILD_LEASE_FACTOR`)."""
    return ttl + BUILD_LEASE_FACTOR * float(plan.index_build.get("cpu_seconds") or 0.0)


def job_of(plan: Plan, cfg: PipelineConfig, shards: int | None = None) -> ShardJob:
    """The shards a plan touches: every shard for a new population, only the affected ones in place
    (``shards``: the layout to use, default ``apply.shards``)."""
    numbers = plan.numbers
    n = shards or cfg.apply.shards
    # Planned seconds of work per shard, as one remote worker spends them: one shard at a time on one CPU (the
    # Dask runner starts one thread per worker process). The plan's tokens per minute assume every CPU of the
    # machine; a measured rate per CPU-second says what one CPU does (sized by the machine's rate instead, a
    # MiniLM unit measured 2.5× the planned work: bench/RESULTS.md, "Work units").
    rate = plan.rate_per_cpu_second
    # The plan's tokens per shard (counted over the layout apply writes) deal units by each shard's own work: a
    # shard of a few long documents is not one equal share (bench/RESULTS.md, "Work units").
    by_shard = plan.tokens_by_shard
    sized = lambda picked: {  # noqa: E731
        "seconds_per_shard": (numbers.tokens_to_embed / len(picked) / rate) if rate and picked else 0.0,
        "unit_seconds": cfg.apply.unit_seconds,
        "seconds_by_shard": (tuple(by_shard[k] / rate for k in picked)
                             if rate and by_shard and len(by_shard) == n else ())}
    if not plan.kind.in_place:
        return ShardJob(tuple(range(n)), **sized(range(n)))
    affected = set(numbers.affected_documents) | set(numbers.removed_documents)
    shards = tuple(sorted({execution.shard_of(d, n) for d in affected}))
    return ShardJob(shards, frozenset(numbers.affected_documents), frozenset(numbers.removed_documents),
                    **sized(shards))


def check_runner_options(runner: ShardRunner | None, task_runner: str | None) -> None:
    """Refuse ``runner`` and ``task_runner`` together, before any work."""
    if runner is not None and task_runner is not None:
        raise RunnerError("pass either runner= or task_runner=, not both (a runner already knows where its shards run)")


def apply_plan(
    ctx: Context,
    plan_path: str | Path,
    *,
    replan: bool = False,
    progress=None,
    runner: ShardRunner | None = None,
    prefect: bool | None = None,
    use_prefect: bool | None = None,
    task_runner: str | None = None,
    reading: PlanReading | None = None,
) -> ApplyReport:
    """Carry out a plan: refuse drifted or unapproved plans, take the index lock, run the shards with
    ``runner`` (default: the context's, :meth:`Context.runner` — Prefect when an API is configured or ``prefect``
    is true, in-process otherwise; ``use_prefect`` is the older name of ``prefect``). ``task_runner``: where
    the shards run (``threads[:N]``, ``dask``, ``dask-processes[:N]``, ``dask:tcp://HOST:PORT`` with or
    without Prefect; ``prefect-pool:POOL[:N]``, flow runs on a Prefect work pool; see :mod:`reindex.runners`).
    ``reading``: what the plan read, when it was made in this process (see :func:`check_inputs`)."""
    check_runner_options(runner, task_runner)
    plan = read_plan(plan_path)
    cfg = ctx.config
    check_plan_index(plan, cfg, plan_path)
    state = ctx.state
    file_cfg, cfg = cfg, config_in_force(plan, cfg, state)
    prev = read_apply_record(state, cfg.index, plan.plan_hash)
    if prev is not None:
        return ApplyReport(plan.plan_hash, plan.kind, prev.get("collection"), "already-applied", prev, None)
    read: dict[str, Document] = {}  # the documents an in-place plan changes, read by the drift check
    plan, plan_path, tracking = _refuse_or_replan(ctx, plan, plan_path, cfg, replan, read,
                                                  governed=cfg is not file_cfg, reading=reading)
    if not plan.kind.does_work:
        _record_unchanged(ctx, plan, cfg, tracking)
        return ApplyReport(plan.plan_hash, plan.kind, None, "nothing-to-do", {}, None)
    check_free_disk(plan, cfg)
    room = cutover_room_warning(plan, cfg)
    if room is not None:
        logging.getLogger("reindex").warning("warning: %s", room)
    runner = runner or ctx.runner(prefect if prefect is not None else use_prefect, task_runner)
    with holding_index_lock(ctx, f"apply {plan.plan_hash[:12]} ({plan.kind})") as lock:
        return _run(ctx.with_config(cfg), plan, Path(plan_path), runner, progress, lock, read, tracking)


def _run(ctx: Context, plan: Plan, plan_path: Path, runner: ShardRunner, progress, lock,
         read: dict[str, Document] | None = None, tracking: Tracking | None = None) -> ApplyReport:
    """Build or sync under the lock and write the run report (``read``: see :func:`check_drift`; ``tracking``:
    the source's cursor, committed for the target when the run and its catch-up end clean)."""
    cfg, state = ctx.config, ctx.state
    phases: dict[str, float] = {}
    t0 = t = time.perf_counter()
    store = ctx.store()
    try:
        in_place = plan.kind.in_place
        lock.check(confirm=True)  # every record this apply writes is confirmed first (one read each)
        target, old, old_cfg = _prepare_target(plan, cfg, state, store)
        ident = identity_of(cfg)
        # In place, shards follow the layout the live population's manifest was written with (recorded in
        # its population record), whatever apply.shards says now: operational fields are free to change.
        shards = old_cfg.apply.shards if in_place and old_cfg else cfg.apply.shards
        actx = execution.ApplyContext(
            index=cfg.index, cfg=cfg, identity=ident, target=target, old=None if in_place else old,
            old_shards=old_cfg.apply.shards if old_cfg else None, run=plan.plan_hash, shards=shards,
            state=state, store=store,
            embedder=_embedder_for(ctx, plan, cfg, getattr(runner, "embeds_elsewhere", False)),
            pipeline=TextPipeline(cfg.text, ident.vector_id), in_place=in_place, progress=progress,
            fence=lock.check, confirm=lambda: lock.check(confirm=True), token_budget=_token_budget(plan, plan_path, cfg),
            lease=Fence.of(lock), store_path=ctx.backend().folder,
            documents=read if in_place and read else None, tracking=tracking, carried=carried_ref(plan),
            fresh=frozenset(plan.repair.documents if plan.repair else ()),
        )
        recorder = ProgressRecord(state, cfg.index, target, plan.plan_hash, progress, lock.check)
        actx.progress, actx.meter = recorder, recorder.counts
        if actx.token_budget is not None:  # one count for this process and every shard worker
            actx.budget_counter = SharedTokenCounter(state, budget_key(cfg.index, plan.plan_hash, actx.lease),
                                                    actx.token_budget, lock.check)
        phases["setup"] = time.perf_counter() - t
        job = job_of(plan, cfg, shards)
        if (not in_place and old_cfg is not None and cfg.serving.mode != "old"
                and identity_of(old_cfg).vector_id != ident.vector_id):
            # A model change: readers may be served a bridge or a cascade while it builds (the shadow shared with
            # them as it grows), re-evaluated every serving.every_shards.
            from reindex.usecases.serve import ServingWatch

            # The progress record comes first: the watch forwards every event to it (and so to the caller).
            actx.progress = ServingWatch(ctx, store, plan.plan_hash, len(job.shards),
                                         lambda: lock.check(confirm=True), recorder, shadow=target,
                                         clock=actx.cpu_clock)
        n = plan.numbers
        recorder({"kind": "start", "runner": describe(runner), "shards": len(job.shards),
                  "chunks_planned": n.chunks_new if not in_place else None,
                  "tokens_planned": n.tokens_to_embed,
                  "documents_planned": n.documents.total if not in_place else len(job.only or ())})
        t = time.perf_counter()
        # A repair (reindex doctor): points the chunk manifest does not list go first (listed at planning, and
        # the drift check saw the same manifest: none of them is listed now). Repeatable after a kill.
        repaired = execution.delete_points_by_id(actx, plan.repair.delete_points if plan.repair else ())
        summary = runner.run(actx, job)
        phases["shards+catch-up"] = time.perf_counter() - t
        failures = summary["failed_shards"] + [
            {"shard": r["shard"], **f} for r in summary["shards"] for f in r["failures"]
        ]
        t = time.perf_counter()
        build: dict | None = None
        if not failures and not in_place:
            lock.check()
            report_stale = execution.delete_unlisted_points(actx)
            _commit_tracking(actx, summary, plan)  # the content is final here; the index build below takes long
            # The index build, timed: CPU-seconds of this process while it runs (the engine's threads; the shards
            # are done), which the next plan with the same parameters prices its build with.
            # The engine's build holds the interpreter: no thread of this process runs until it returns. Another
            # process renews the lease meanwhile (extended by the build's price where none can be started).
            with lock.renewed_elsewhere(fallback_lease=build_lease(plan, lock.ttl)):
                _, build_wall, build_cpu = CpuClock().call(store.finish_bulk, target)
            build = {"seconds": round(build_wall, 3), "cpu_seconds": round(build_cpu, 3)}
            lock.check(confirm=True)
            _set_population_state(state, cfg, target, PopulationState.READY)
        if not failures and in_place:
            lock.check()
            store.publish(target)  # readers see the sync now, also when the writer stays open (the live mode)
            _record_payload(state, cfg, target, lambda: lock.check(confirm=True))
            lock.check()
            _commit_tracking(actx, summary, plan)
        phases["finish"] = time.perf_counter() - t
        report = _run_report(plan, summary, failures, phases, time.perf_counter() - t0, target, store)
        report["runner"] = describe(runner)
        report["embedder"] = describe_embedder(actx.embedder)  # the device it resolved to on this machine
        if not failures and not in_place:
            report["actual"]["deleted"] += report_stale
        report["actual"]["deleted"] += repaired
        report["throughput"]["recorded"] = record_rate(state, cfg, ident.vector_id, plan, report, describe(runner))
        if build is not None:
            report["index_build"] = {**build, "points": report["actual"]["points_in_collection"],
                                     "recorded": record_build_rate(state, cfg, plan, build,
                                                                    report["actual"]["points_in_collection"])}
        report_path = Books.run_report_path(plan_path)
        atomic_write_text(report_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        if not failures:
            lock.check(confirm=True)
            write_apply_record(state, cfg.index, plan.plan_hash, {**report, "collection": target, "at": time.time()})
            if actx.carried is not None:
                delete_carried(state, actx.carried)  # done: nothing reads it again (a resumed run reads done.json)
        return ApplyReport(plan.plan_hash, plan.kind, target, "failed" if failures else "done", report, report_path)
    finally:
        store.close()


def carried_ref(plan: Plan) -> CarriedRef | None:
    """The plan's carried chunks (:mod:`reindex.books.carried`) for its shards, None when it carries none or carrying is
    switched off (``REINDEX_CARRY_CHUNKS=0``)."""
    if plan.carried_id is None or not settings.carry_chunks():
        return None
    return CarriedRef(plan.index, plan.carried_id)


def _commit_tracking(ctx: execution.ApplyContext, summary: dict, plan: Plan) -> None:
    """Record the source's cursor the run holds for its target, when its catch-up ended clean (a cursor taken
    before a full read keeps only the documents the target holds)."""
    if ctx.tracking is None or any(r["failures"] for r in summary["catch_up"].get("rounds", [])):
        return
    holds = read_document_hashes(ctx.state, ctx.index, ctx.target).keys() if ctx.tracking.full else None
    commit_cursor(ctx.state, ctx.index, ctx.target, ctx.tracking, run=plan.plan_hash, holds=holds)


def _embedding_workers(shards: list[dict]) -> int:
    """How many embedding calls ran at once across the run: per process (``worker``, host:pid) the most it
    had in flight, summed over processes (1 for an in-process run with one model)."""
    most: dict[str, int] = {}
    for r in shards:
        if r.get("embed_concurrency"):
            most[r["worker"]] = max(most.get(r["worker"], 0), r["embed_concurrency"])
    return sum(most.values()) or 1


def _run_report(plan: Plan, summary: dict, failures: list, phases: dict, seconds: float, target: str, store) -> dict:
    shards = summary["shards"]
    n = plan.numbers
    total = lambda k: sum(r[k] for r in shards)  # noqa: E731
    catch = summary["catch_up"]
    actual_points = store.count(target)
    return {
        "collection": target,
        "seconds": round(seconds, 3),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "planned": {
            "chunks_new": n.chunks_new,
            "chunks_reused": n.chunks_reused,
            "chunks_to_embed": n.chunks_to_embed,
            "tokens_to_embed": n.tokens_to_embed,
        },
        "actual": {
            "documents": total("documents"),
            "chunks_written": total("chunks"),
            "reused_from_old": total("reused_old"),
            "reused_from_target": total("reused_target"),
            "embedded": total("embedded"),
            "tokens_embedded": total("tokens_embedded"),
            "truncated": total("truncated"),
            "deleted": total("deleted"),
            "payload_updated": sum(r.get("payload_updated", 0) for r in shards),
            "points_in_collection": actual_points,
            "shards_run": sum(1 for r in shards if not r["skipped"]),
            "shards_skipped": sum(1 for r in shards if r["skipped"]),
        },
        "catch_up": catch,
        # Documents whose chunks the plan carried (not tokenized again) and documents chunked by the shards, with
        # why a carry could not be used (reindex.books.carried).
        "carried": {"id": plan.carried_id, "documents": sum(r.get("carried", 0) for r in shards),
                    "chunked": sum(r.get("chunked", 0) for r in shards), "problems": [p for r in shards for p in r.get("carry_problems", [])]},
        # Wall and CPU seconds inside successful embedding calls, summed over workers, and the workers that
        # embedded at once (timing, like "seconds"; "recorded": see reindex.context.rates.record_rate).
        "throughput": {"tokens_embedded": total("tokens_embedded"),
                       "embed_seconds": round(sum(r.get("embed_seconds", 0.0) for r in shards), 3),
                       "embed_cpu_seconds": round(sum(r.get("embed_cpu_seconds", 0.0) for r in shards), 3),
                       "workers": _embedding_workers(shards)},
        "bad_documents": [b for r in shards for b in r["bad"]],
        "failures": failures,
        # Each shard: the process that ran it (host:pid) and its seconds and counts (timing, like "seconds").
        "shards": [{k: round(r[k], 3) if isinstance(r[k], float) else r[k] for k in SHARD_FIELDS if k in r}
                   for r in shards],
    }


SHARD_FIELDS = ("shard", "worker", "skipped", "seconds", "embed_seconds", "embed_cpu_seconds", "commit_seconds", "documents", "chunks",
                "reused_old", "reused_target", "embedded", "tokens_embedded", "deleted", "carried", "chunked")
