"""Run one shard idempotently, sync documents in place, and catch up; no orchestration here.

A shard is the documents whose ``blake2b(doc id) mod N`` is ``k``. Running a shard:

1. chunk and fingerprint its documents (the plan's text half): the plan's own chunks where it carried them
   (:mod:`reindex.books.carried`) and the document's bytes are those it planned, else cut here;
2. take vectors that already exist: first the target collection itself (a resumed shard wrote them
   before it died), then the old population's points of the *same document* with the same
   fingerprint, found by point id from the old chunk manifest (``retrieve``, never a filtered scan);
3. embed only the misses, each distinct text once, length-sorted;
4. upsert with deterministic point ids, then (in place) delete the document's stale points; in place, a
   document whose chunks are exactly the points it has (only its metadata or the payload layout changed)
   gets its payloads overwritten instead: no vector read, embedded or written;
5. write the shard's chunk-manifest part, then the shard manifest, last (a vector-half change first keeps a
   few of the shard's (old vector, new vector) pairs, read back by id: :mod:`reindex.books.pairs`).

Every step can be repeated, so a shard killed anywhere is redone from the start without embedding
any text twice and ends with exactly the points an uninterrupted run writes.

Lines: catch-up (a full compare or from the source's cursor) replays through ``run_shard`` itself; the
argument that every step can be repeated is read in one file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from reindex.foundation import settings
from reindex.books.carried import CarriedRef, ShardCarry, read_shard_carry
from reindex.domain.config import PipelineConfig
from reindex.adapters.embedders import Embedder
from reindex.errors import ApprovalError, ReindexError, TransientError
from reindex.domain.identity import Identity
from reindex.books.manifests import (
    DOC_BATCH,
    ManifestRow,
    read_chunk_manifest,
    read_chunk_manifest_part,
    read_chunk_texts,
    read_chunk_texts_part,
    read_document_hashes,
    read_population,
    read_shard_manifest,
    rewrite_chunk_manifest_part,
    shard_name,
    shard_of,
    write_chunk_manifest_part,
    write_chunk_texts_part,
    write_shard_manifest,
)
from reindex.books.units import write_unit_part
from reindex.books.cursors import Tracking
from reindex.engine.compose import UnitComposer
from reindex.books.pairs import per_shard, record_shard_pairs
from reindex.adapters.pipeline import ChunkRecord, TextPipeline
from reindex.planner import LiveDocs
from reindex.foundation.retry import call_with_retries
from reindex.adapters.sources import Cursor, open_source
from reindex.adapters.sources.base import Document, ScanReport
from reindex.adapters.stores.objects import ObjectStore
from reindex.adapters.stores.payload import build_payload
from reindex.adapters.stores.vectors import Point, VectorStore
from reindex.foundation.throughput import CpuClock

__all__ = [
    "ApplyContext", "Found", "RETRY_ATTEMPTS", "ShardResult", "catch_up", "changed_since_manifest", "crashpoint",
    "delete_unlisted_points", "find_changes", "over_budget", "point_payload", "retry_transient", "run_shard",
    "worker_name", "write_shard_outputs",
]

RETRY_ATTEMPTS = 5


def retry_transient(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; on TransientError retry with exponential backoff and jitter, at most
    RETRY_ATTEMPTS times. Safe for our store calls: upserts by deterministic id and deletes by id
    can be repeated."""
    return call_with_retries(lambda: fn(*args, **kwargs), attempts=RETRY_ATTEMPTS,
                             retry_if=lambda e: isinstance(e, TransientError), initial_s=0.05, max_s=2.0)


def crashpoint(name: str) -> None:
    """Test hook: ``REINDEX_CRASH_AT=name[:n]`` kills this process with SIGKILL the n-th time (default 1st)
    execution reaches ``name`` (with ``REINDEX_CRASH_ONCE=path``, only in the one process that creates
    ``path``). Crash tests use it to stop a real apply, or one of its workers, at exact points.
    ``REINDEX_PAUSE_AT=name[:n]`` stops it there (SIGSTOP) instead: a test looks at a running apply."""
    for spec, sig in ((settings.crash_at(), signal.SIGKILL), (settings.pause_at(), signal.SIGSTOP)):
        if not spec:
            continue
        target, _, nth = spec.partition(":")
        if target != name:
            continue
        with _CRASH_LOCK:
            _CRASH_COUNTS[(sig, name)] += 1
            if _CRASH_COUNTS[(sig, name)] != int(nth or 1):
                continue
            once = settings.crash_once() if sig == signal.SIGKILL else None
            if once:  # REINDEX_CRASH_ONCE=path: only the process that creates path dies
                try:
                    os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    continue
            # To this thread: a signal sent to the process is taken by whichever thread the kernel picks (the
            # main one, waiting on the shards), and this thread ran on for a few more lines before the stop
            # reached it (seen: a pause "before-manifest" that had already read the lock).
            signal.pthread_kill(threading.get_ident(), sig)


_CRASH_LOCK = threading.Lock()
_CRASH_COUNTS: dict[tuple[int, str], int] = defaultdict(int)


@dataclass
class ShardResult:
    """What a shard did (counts are of chunks unless they say tokens)."""

    shard: int
    documents: int = 0
    chunks: int = 0
    reused_old: int = 0  # vectors taken from the old population
    reused_target: int = 0  # vectors already in the target (resumed work, unchanged points)
    embedded: int = 0  # distinct texts embedded
    tokens_embedded: int = 0
    truncated: int = 0
    deleted: int = 0
    payload_updated: int = 0  # points whose payload was overwritten in place (vectors untouched)
    carried: int = 0  # documents whose chunks were the plan's (reindex.books.carried): not tokenized here
    chunked: int = 0  # documents chunked here (not carried, edited since the plan, or the carry unusable)
    carry_problems: list[str] = field(default_factory=list)  # why carried chunks could not be used
    removed_documents: int = 0
    bad: list[dict] = field(default_factory=list)
    failures: list[dict] = field(default_factory=list)
    skipped: bool = False
    seconds: float = 0.0
    embed_seconds: float = 0.0  # wall seconds inside successful embedding calls
    embed_cpu_seconds: float = 0.0  # CPU seconds of those calls (reindex.foundation.throughput.CpuClock: the rate apply records)
    embed_concurrency: int = 0  # most embedding calls this shard's process had in flight at once
    units_embedded: int = 0  # vector.compose: units — units embedded (counted in ``embedded`` too)
    units_reused: int = 0  # units of composed chunks taken from the unit part
    worker: str = ""  # "host:pid" of the process that ran the shard
    staged: str | None = None  # key of the staged writes the coordinator must commit (reindex.engine.workers)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class ApplyContext:
    """Everything a shard needs; shared by the threads of one apply."""

    index: str
    cfg: PipelineConfig  # the plan's (resolved) config
    identity: Identity
    target: str  # collection written
    old: str | None  # collection reused from (the live population), None for an initial build
    old_shards: int | None  # shard count the old population's manifest parts were written with
    run: str  # run id: the plan hash
    shards: int
    state: ObjectStore
    store: VectorStore
    embedder: Embedder
    pipeline: TextPipeline
    in_place: bool
    progress: Callable[[dict], None] | None = None
    fence: Callable[[], None] = lambda: None  # raises when this writer lost the index lock (lock.check)
    # Before a commit point (a manifest record): confirms the lock against the state store (one read;
    # lock.check(confirm=True)), so a holder whose lock was taken over behind its back records nothing
    # more. None: ``fence`` (a shard worker's fence already reads the lock on every call).
    confirm: Callable[[], None] | None = None
    token_budget: int | None = None  # tokens this run may embed without an approval (None: unbounded)
    tokens_spent: int = 0
    embed_lock: threading.Lock = field(default_factory=threading.Lock)
    # Shared by every process of one apply (reindex.engine.workers.SharedTokenCounter): spends ``n`` tokens of
    # ``token_budget`` or raises ApprovalError. None: this context's own count (``tokens_spent``) decides.
    budget_counter: Callable[[int], None] | None = None
    # What a shard worker in another process needs besides the context's values (reindex.engine.workers):
    lease: Any = None  # the coordinator's reindex.books.locks.Fence
    store_path: str | None = None  # the embedded store's folder, resolved by the coordinator
    staging: Any = None  # reindex.engine.workers.StagedWrites: this worker stages writes for the coordinator
    # In place: the documents the plan changes, as the drift check read them (the corpus the plan priced),
    # in source order; a shard of this process takes its documents from here instead of scanning the source
    # again (a JSONL file is parsed whole to find one line). Later edits are the catch-up's. None: scan.
    documents: Mapping[str, Document] | None = None
    # The source's cursor (reindex.books.cursors.Tracking): catch-up finds changes from it and advances it, apply
    # commits it at the end. None: a source without one (changes found by a full compare).
    tracking: Tracking | None = None
    # In place: documents written afresh (a repair, ``reindex doctor --repair``): every chunk embedded again, no
    # vector taken from the target and no payload-only shortcut (the target's points of them are not trusted).
    fresh: frozenset[str] = frozenset()
    # The coordinator's reindex.engine.eta.ProgressCounts of this apply, fed its events (what the Prefect progress
    # artifact shows); None: nobody counts.
    meter: Any = None
    # The plan's carried chunks (reindex.books.carried): a shard reads its documents' chunks from there instead of
    # tokenizing them again. None: every document is chunked (nothing carried, or catch-up).
    carried: CarriedRef | None = None
    # The CPU clock of embedding calls (shard threads register, so that one's call does not count another's
    # chunking), and how many calls this process had in flight at once (the workers a rate is per).
    cpu_clock: CpuClock = field(default_factory=CpuClock)
    embedding_now: int = 0
    embedding_most: int = 0
    _count_lock: threading.Lock = field(default_factory=threading.Lock)
    _old_vid: list = field(default_factory=list)  # [the old population's vector id], read once (free pairs)

    def pairs_source(self) -> str | None:
        """The vector id of the old population when this build is a vector-half change that keeps free pairs
        (``serving.pairs``; :mod:`reindex.books.pairs`), else None. One state read per context."""
        if self.in_place or self.old is None or not self.cfg.serving.pairs:
            return None
        if not self._old_vid:
            rec = read_population(self.state, self.index, self.old)
            self._old_vid.append(rec.vector_id if rec is not None else None)
        vid = self._old_vid[0]
        return vid if vid is not None and vid != self.identity.vector_id else None

    def confirm_lock(self) -> None:
        """Raise LockLost unless this writer still holds the index lock, as the state store says now."""
        (self.confirm or self.fence)()

    def emit(self, **event: Any) -> None:
        if self.progress:
            self.progress(event)

    def spend_tokens(self, tokens: int) -> None:
        """Count ``tokens`` against the unapproved budget; ApprovalError before a batch would exceed it."""
        if self.token_budget is None:
            return
        if self.budget_counter is not None:
            self.budget_counter(tokens)
        elif self.tokens_spent + tokens > self.token_budget:
            raise over_budget(self.token_budget)
        self.tokens_spent += tokens


def over_budget(budget: int) -> ApprovalError:
    """The error of an unapproved apply that would embed more than ``approval.max_tokens``."""
    return ApprovalError(
        f"this apply would embed more than approval.max_tokens ({budget:,}) tokens without "
        "an approval (the plan's numbers understate its work); run `reindex plan` again and approve it")


def point_payload(cfg: PipelineConfig, pipeline_id: str, rec: ChunkRecord, metadata: dict[str, Any]) -> dict:
    """A point's payload under the payload contract (:mod:`reindex.adapters.stores.payload`)."""
    own = {
        "doc_id": rec.doc_id,
        "ordinal": rec.ordinal,
        "fingerprint": rec.fingerprint,
        "tokens": rec.tokens,
        "start": rec.start,
        "end": rec.end,
        "pipeline_id": pipeline_id,
    }
    return build_payload(cfg.payload, own, rec.text, metadata)


def _shard_docs(ctx: ApplyContext, shard: int, only: set[str] | None, result: ShardResult) -> Iterable[Document]:
    if only is not None and ctx.documents is not None:
        mine = {d for d in only if shard_of(d, ctx.shards) == shard}
        if mine <= ctx.documents.keys():  # all read by the drift check (else scan: a bad one is reported)
            yield from (doc for doc_id, doc in ctx.documents.items() if doc_id in mine)
            return
    report = ScanReport()
    keep = lambda d: shard_of(d, ctx.shards) == shard and (only is None or d in only)  # noqa: E731
    yield from open_source(ctx.cfg.source).scan(report, keep=keep)  # other shards' documents stay unread
    for bad in report.bad:
        if shard_of(bad.doc_id, ctx.shards) == shard:
            result.bad.append({"doc_id": bad.doc_id, "reason": bad.reason})


def _old_rows(ctx: ApplyContext, collection: str, shard: int, shards: int | None) -> dict[str, list[ManifestRow]]:
    """Manifest rows of the documents of ``shard`` in ``collection``: one part when the population
    was written with the same shard count, else a streaming filter over all parts."""
    rows: dict[str, list[ManifestRow]] = defaultdict(list)
    if shards == ctx.shards:
        source: Iterable[ManifestRow] = read_chunk_manifest_part(ctx.state, ctx.index, collection, shard_name(shard))
    else:
        source = (r for r in read_chunk_manifest(ctx.state, ctx.index, collection) if shard_of(r.doc_id, ctx.shards) == shard)
    for r in source:
        rows[r.doc_id].append(r)
    return rows


def _timed(ctx: ApplyContext, embed: Callable[[list[str]], Any], result: ShardResult) -> Callable[[list[str]], Any]:
    """``embed`` adding the wall and CPU seconds of each successful call to ``result`` (failed attempts and
    retry back-off are not embedding throughput), and counting the calls in flight in this process."""

    def call(batch: list[str]) -> Any:
        with ctx._count_lock:
            ctx.embedding_now += 1
            ctx.embedding_most = max(ctx.embedding_most, ctx.embedding_now)
        try:
            out, wall, cpu = ctx.cpu_clock.call(embed, batch)
        finally:
            with ctx._count_lock:
                ctx.embedding_now -= 1
        result.embed_seconds += wall
        result.embed_cpu_seconds += cpu
        result.embed_concurrency = max(result.embed_concurrency, ctx.embedding_most)
        return out

    return call


def _embed(ctx: ApplyContext, texts: dict[str, int], result: ShardResult,
           on_batch: Callable[[list[str], np.ndarray], None] | None = None) -> dict[str, np.ndarray]:
    """Embed distinct texts (text → tokens in the plan's tokenizer), longest first in batches (less
    padding), under one lock (one model) unless the embedder is ``concurrent``. Tokens are counted in the plan's unit so that planned and
    actual compare; truncation is counted by the embedder in the model's own tokens."""
    order = sorted(texts, key=len, reverse=True)
    out: dict[str, np.ndarray] = {}
    bs = ctx.cfg.apply.embed_batch_size
    for i in range(0, len(order), bs):
        batch = order[i : i + bs]
        with ctx.embed_lock:
            ctx.spend_tokens(sum(texts[t] for t in batch))
        # One model, one call at a time; an embedder that paces its own requests (an API client) is shared by
        # the shards concurrently.
        with contextlib.nullcontext() if getattr(ctx.embedder, "concurrent", False) else ctx.embed_lock:
            res = retry_transient(_timed(ctx, ctx.embedder.embed, result), batch)
        result.embedded += len(batch)
        result.tokens_embedded += sum(texts[t] for t in batch)
        result.truncated += res.truncated
        for t, v in zip(batch, res.vectors):
            out[t] = v
        if on_batch is not None:
            on_batch(batch, res.vectors)  # outside the model lock: other shards embed meanwhile
        ctx.emit(kind="embedded", chunks=len(batch), tokens=sum(texts[t] for t in batch))
    return out


def _compose(ctx: ApplyContext, composer: UnitComposer, texts: dict[str, int], result: ShardResult,
             on_batch: Callable[[list[str], np.ndarray], None]) -> dict[str, np.ndarray]:
    """``vector.compose: units``: the vectors of chunk texts composed from their units' (reindex.engine.compose),
    embedding only the units not known yet, batch by batch as :func:`_embed` does; a finished batch's units are
    stored before its points are written. ``embedded`` and ``tokens_embedded`` count units and their tokens."""
    order = sorted(texts, key=len, reverse=True)
    out: dict[str, np.ndarray] = {}
    bs = ctx.cfg.apply.embed_batch_size
    raw = ctx.embedder.token_sums if composer.exact else ctx.embedder.embed
    call = _timed(ctx, raw, result)
    shared = contextlib.nullcontext if getattr(ctx.embedder, "concurrent", False) else (lambda: ctx.embed_lock)
    for i in range(0, len(order), bs):
        batch = order[i : i + bs]
        units = composer.missing(batch)
        for j in range(0, len(units), bs):
            ub = units[j : j + bs]
            tokens = sum(ctx.pipeline.tokenizer.count_batch(ub))
            with ctx.embed_lock:
                ctx.spend_tokens(tokens)
            with shared():
                vecs, counts = composer.embed_units(ub, lambda x: retry_transient(call, x))
            crashpoint("before-unit-batch")
            composer.remember(ub, vecs, counts)
            result.embedded += len(ub)
            result.tokens_embedded += tokens
            ctx.emit(kind="embedded", chunks=len(ub), tokens=tokens)
        vectors, over = composer.compose(batch)
        if over:  # past the model's limit a whole chunk's vector is of its first tokens: embedded whole
            whole = [batch[k] for k in over]
            tokens = sum(texts[t] for t in whole)
            with ctx.embed_lock:
                ctx.spend_tokens(tokens)
            with shared():
                res = retry_transient(_timed(ctx, ctx.embedder.embed, result), whole)
            vectors[over] = res.vectors
            result.embedded += len(whole)
            result.tokens_embedded += tokens
            result.truncated += res.truncated
        for t, v in zip(batch, vectors):
            out[t] = v
        on_batch(batch, vectors)
    result.units_embedded, result.units_reused = composer.units_embedded, composer.units_reused
    return out


def _embed_missing(ctx: ApplyContext, records: dict[str, list[ChunkRecord]], vectors: dict[str, Any],
                   result: ShardResult, metas: dict[str, dict[str, Any]],
                   composer: UnitComposer | None = None) -> set[str]:
    """Embed the texts that have no vector yet and write their points batch by batch, so that a finished
    embedding batch is durable in the target before the next one starts: a resumed shard finds those points
    by id and embeds only what was lost, at most one batch per worker. Returns the point ids written."""
    waiting: dict[str, list[ChunkRecord]] = defaultdict(list)
    for recs in records.values():
        for r in recs:
            if r.fingerprint not in vectors:
                waiting[r.text].append(r)
    written: set[str] = set()
    if not waiting:
        return written

    def flush(batch: list[str], batch_vectors: np.ndarray) -> None:
        points = [Point(r.point_id, v, point_payload(ctx.cfg, ctx.identity.pipeline_id, r, metas[r.doc_id]))
                  for t, v in zip(batch, batch_vectors) for r in waiting[t]]
        crashpoint("before-upsert")
        ctx.fence()
        retry_transient(ctx.store.upsert, ctx.target, points)
        written.update(p.id for p in points)
        crashpoint("after-batch-upsert")

    texts = {t: recs[0].tokens for t, recs in waiting.items()}
    by_text = _embed(ctx, texts, result, on_batch=flush) if composer is None else \
        _compose(ctx, composer, texts, result, on_batch=flush)
    for t, recs in waiting.items():
        vectors[recs[0].fingerprint] = by_text[t]
    return written


def _previous_chunks(rows: Iterable[ManifestRow], texts: dict[str, str]) -> list[str]:
    """A document's previous chunk texts in ordinal order; empty (cut statelessly) when any is not stored,
    exactly as the planner decides (:class:`reindex.planner.PreviousTexts`)."""
    out = [texts.get(r.fingerprint) for r in sorted(rows, key=lambda r: r.ordinal)]
    return [] if any(t is None for t in out) else out  # type: ignore[misc]


def _sticky_texts(ctx: ApplyContext, shard: int, part_rows: dict[str, list[ManifestRow]]) -> dict[str, str]:
    """Fingerprint → text of the chunks in the target's manifest part ``shard`` (in place, sticky): the
    part's own chunk-text part, then every part for what it lacks (a part written with another shard count)."""
    wanted = {r.fingerprint for rows in part_rows.values() for r in rows}
    texts = {f: t for f, t in read_chunk_texts_part(ctx.state, ctx.index, ctx.target, shard_name(shard)).items() if f in wanted}
    if len(texts) < len(wanted):
        texts.update(read_chunk_texts(ctx.state, ctx.index, ctx.target, wanted - set(texts)))
    return texts


def _chunks(ctx: ApplyContext, doc: Document, old_rows: dict[str, list[ManifestRow]], result: ShardResult,
            previous_texts: dict[str, str] | None, carry: ShardCarry | None) -> list[ChunkRecord]:
    """The chunk records of ``doc``: the plan's (carried, for these very bytes), else cut here — against its
    previous chunks with ``previous_texts`` (in place, sticky), as the plan did."""
    text = None
    if carry is not None:
        text = ctx.pipeline.document_text(doc)
        recs = carry.records(ctx.pipeline, doc, text)
        if recs is not None:
            result.carried += 1
            return recs
    result.chunked += 1
    if previous_texts is None:
        return ctx.pipeline.chunk_document(doc) if text is None else ctx.pipeline.chunk_text(doc.doc_id, text)
    prev = _previous_chunks(old_rows.get(doc.doc_id, ()), previous_texts)
    return ctx.pipeline.rechunk_text(doc.doc_id, ctx.pipeline.document_text(doc) if text is None else text, prev)


def _sync_batch(
    ctx: ApplyContext, docs: list[Document], old_rows: dict[str, list[ManifestRow]], result: ShardResult,
    previous_texts: dict[str, str] | None = None, new_texts: dict[str, str] | None = None,
    carry: ShardCarry | None = None, composer: UnitComposer | None = None,
) -> list[ManifestRow]:
    """Write the points of ``docs`` into the target (reuse → embed → upsert → delete stale). With
    ``previous_texts`` (in place, sticky) each document is re-chunked against its previous chunks;
    ``new_texts`` collects fingerprint → text of every chunk written (for the chunk-text part); ``carry``:
    the plan's chunks of this shard's documents."""
    records: dict[str, list[ChunkRecord]] = {}
    hashes: dict[str, str] = {}
    for doc in docs:
        try:
            records[doc.doc_id] = _chunks(ctx, doc, old_rows, result, previous_texts, carry)
            hashes[doc.doc_id] = doc.content_hash
        except ReindexError:
            raise
        except Exception as err:  # noqa: BLE001 - a chunker bug on one document must not stop the shard
            result.failures.append({"doc_id": doc.doc_id, "reason": f"chunking failed: {type(err).__name__}: {err}"})
    metas = {doc.doc_id: doc.meta() for doc in docs}
    if new_texts is not None:
        new_texts.update((r.fingerprint, r.text) for recs in records.values() for r in recs)
    fresh = ctx.fresh.intersection(records)
    rewritten = _rewrite_payloads(ctx, records, old_rows, metas, result, fresh) if ctx.in_place else {}
    new_ids = [r.point_id for recs in records.values() for r in recs]
    vectors: dict[str, Any] = {}  # fingerprint → vector
    if ctx.in_place and records:  # it writes the target below: open it once, to write (see prepare_writes)
        ctx.store.prepare_writes(ctx.target)
    if new_ids and not fresh:  # a batch with a document written afresh takes no vector from the target
        for p in retry_transient(ctx.store.retrieve, ctx.target, new_ids, with_vectors=True):
            vectors[p.payload["fingerprint"]] = p.vector
    result.reused_target += sum(1 for recs in records.values() for r in recs if r.fingerprint in vectors)
    # Same-document reuse from the old population, by point id (never a filtered scan).
    if ctx.old is not None:
        wanted = []
        for doc_id, recs in records.items():
            need = {r.fingerprint for r in recs if r.fingerprint not in vectors}
            wanted += [row.point_id for row in old_rows.get(doc_id, ()) if row.fingerprint in need]
        if wanted:
            found = retry_transient(ctx.store.retrieve, ctx.old, sorted(set(wanted)), with_vectors=True)
            before = set(vectors)
            for p in found:
                vectors.setdefault(p.payload["fingerprint"], p.vector)
            gained = set(vectors) - before
            result.reused_old += sum(1 for recs in records.values() for r in recs if r.fingerprint in gained)
    written = _embed_missing(ctx, records, vectors, result, metas, composer)
    points = [
        Point(r.point_id, vectors[r.fingerprint], point_payload(ctx.cfg, ctx.identity.pipeline_id, r, metas[r.doc_id]))
        for recs in records.values()
        for r in recs
        if r.point_id not in written
    ]
    crashpoint("before-upsert")
    if points:
        ctx.fence()
        retry_transient(ctx.store.upsert, ctx.target, points)
    crashpoint("after-upsert")
    result.chunks += len(points) + len(written)
    result.documents += len(records)
    # Stale points of these documents (in place, or a resumed shadow whose documents changed).
    keep = set(new_ids)
    stale = [row.point_id for doc_id in records for row in old_rows.get(doc_id, ()) if row.point_id not in keep]
    if ctx.in_place and stale:
        ctx.fence()
        retry_transient(ctx.store.delete_points, ctx.target, stale)
        result.deleted += len(stale)
    # Reused and embedded chunks of this batch ride with its documents: a progress display that subtracted
    # embedding events (which arrive first, from every shard's thread) from documented chunks went negative.
    # Documents whose payloads were only rewritten count as reused (no vector was computed).
    rewritten_chunks = sum(len(r) for r in rewritten.values())
    ctx.emit(kind="documents", documents=len(records) + len(rewritten),
             chunks=len(points) + len(written) + rewritten_chunks, reused=len(points) + rewritten_chunks,
             embedded=len(written))
    return [
        ManifestRow(r.doc_id, hashes[r.doc_id], r.ordinal, r.fingerprint, r.tokens, r.point_id)
        for recs in (records | rewritten).values()
        for r in recs
    ]


def _rewrite_payloads(ctx: ApplyContext, records: dict[str, list[ChunkRecord]], old_rows: dict[str, list[ManifestRow]],
                      metas: dict[str, dict[str, Any]], result: ShardResult,
                      fresh: set[str] | frozenset[str] = frozenset()) -> dict[str, list[ChunkRecord]]:
    """In place, a document whose chunks are the ones its points already hold (same point ids, in order:
    only its metadata, or the payload layout, changed) gets its payloads overwritten, vectors untouched.
    Such documents are taken out of ``records`` (nothing to embed, upsert or delete) and returned; never one
    written ``fresh`` (a repair)."""
    done: dict[str, list[ChunkRecord]] = {}
    for doc_id, recs in list(records.items()):
        old = sorted(old_rows.get(doc_id, ()), key=lambda r: r.ordinal)
        if doc_id not in fresh and recs and [r.point_id for r in recs] == [r.point_id for r in old]:
            done[doc_id] = records.pop(doc_id)
    if not done:
        return done
    payloads = {r.point_id: point_payload(ctx.cfg, ctx.identity.pipeline_id, r, metas[r.doc_id]) for recs in done.values() for r in recs}
    crashpoint("before-payload")
    ctx.fence()
    retry_transient(ctx.store.overwrite_payload, ctx.target, payloads)
    crashpoint("after-payload")
    result.payload_updated += len(payloads)
    result.chunks += len(payloads)
    result.documents += len(done)
    return done


def run_shard(ctx: ApplyContext, shard: int, *, only: set[str] | None = None, removed: set[str] = frozenset(),
              force: bool = False) -> ShardResult:
    """Build (or, in place, sync) one shard. Skips a shard whose manifest exists unless ``force``."""
    t0 = time.perf_counter()
    ctx.cpu_clock.register()
    result = ShardResult(shard, worker=worker_name())
    done = None if force else read_shard_manifest(ctx.state, ctx.index, ctx.target, ctx.run, shard)
    if done is not None:
        result.skipped = True
        # A resumed run's finished shard: its documents count as done for the progress bar.
        ctx.emit(kind="shard-skipped", shard=shard, documents=done.get("documents", 0), chunks=done.get("chunks", 0),
                 tokens=done.get("tokens_embedded", 0))
        return result
    # In place (and in catch-up), the target's own manifest part is the "old" state of these documents.
    part_rows = _old_rows(ctx, ctx.target, shard, ctx.shards) if ctx.in_place else {}
    reuse_rows = part_rows if ctx.in_place else (
        _old_rows(ctx, ctx.old, shard, ctx.old_shards) if ctx.old is not None else {}
    )
    # Sticky re-chunking: in place, edited documents are re-chunked against their previous chunk texts;
    # every build keeps the texts of its chunks beside the manifest for the next one.
    sticky = ctx.pipeline.sticky
    previous_texts = _sticky_texts(ctx, shard, part_rows) if sticky and ctx.in_place else None
    new_texts: dict[str, str] | None = {} if sticky else None
    carry = _shard_carry(ctx, shard, result)
    # vector.compose: units — chunks to embed are composed from their units (reindex.engine.compose).
    composer = UnitComposer(ctx, shard) if ctx.cfg.vector.compose == "units" else None
    rows: list[ManifestRow] = []
    batch: list[Document] = []
    for doc in _shard_docs(ctx, shard, only, result):
        batch.append(doc)
        if len(batch) >= DOC_BATCH:
            rows += _sync_batch(ctx, batch, reuse_rows, result, previous_texts, new_texts, carry, composer)
            batch = []
    if batch:
        rows += _sync_batch(ctx, batch, reuse_rows, result, previous_texts, new_texts, carry, composer)
    if carry is not None:
        result.carry_problems += carry.problems
    if ctx.in_place:
        # Documents that are gone from the source: delete all their points.
        gone = [pid for d in removed if shard_of(d, ctx.shards) == shard for pid in (r.point_id for r in part_rows.get(d, ()))]
        if gone:
            ctx.fence()
            retry_transient(ctx.store.delete_points, ctx.target, gone)
            result.deleted += len(gone)
        result.removed_documents = sum(1 for d in removed if shard_of(d, ctx.shards) == shard and d in part_rows)
        touched = {r.doc_id for r in rows} | set(removed) | set(only or ())
        rows = [r for d, rs in part_rows.items() if d not in touched for r in rs] + rows
    rows.sort(key=lambda r: (r.doc_id, r.ordinal))
    if composer is not None:  # before the manifest part: whichever part is current after a crash, its units are kept
        crashpoint("before-unit-part")
        ctx.fence()
        write_unit_part(ctx.state, ctx.index, ctx.target, shard_name(shard), composer.part())
    texts: dict[str, str] | None = None
    if new_texts is not None:
        # Holding the texts of the part it replaces as well, so that whichever part is current after a
        # crash, its texts are stored.
        final = {r.fingerprint for r in rows}
        texts = {f: t for f, t in new_texts.items() if f in final} | (previous_texts or {})
    manifest = {
        "shard": shard,
        "run": ctx.run,
        "collection": ctx.target,
        "documents": result.documents,
        "chunks": result.chunks,
        "reused_old": result.reused_old,
        "reused_target": result.reused_target,
        "embedded": result.embedded,
        "tokens_embedded": result.tokens_embedded,
        "deleted": result.deleted,
        "failures": result.failures,
        "point_ids_digest": hashlib.blake2b("\n".join(sorted(r.point_id for r in rows)).encode(), digest_size=16).hexdigest(),
        "at": time.time(),
    }
    if ctx.staging is not None:
        # A worker that may not write the store: the coordinator applies its staged writes, then these.
        result.staged = ctx.staging.finish(shard, rows, texts, manifest)
    else:
        write_shard_outputs(ctx, shard, rows, texts, manifest)
    result.seconds = time.perf_counter() - t0
    ctx.emit(kind="shard-done", shard=shard, result=result.as_dict())
    return result


def _shard_carry(ctx: ApplyContext, shard: int, result: ShardResult) -> ShardCarry | None:
    """The plan's carried chunks of this shard's documents (None: nothing carried); a carry that cannot be used
    is said once in ``result`` and its documents are chunked."""
    if ctx.carried is None:
        return None
    carry = read_shard_carry(ctx.state, ctx.carried, shard, ctx.shards, ctx.identity.pipeline_id)
    if not carry.docs and carry.problems:
        result.carry_problems += carry.problems
        return None
    return carry


def worker_name() -> str:
    """``host:pid`` of this process, as run reports name the process that ran a shard."""
    return f"{socket.gethostname()}:{os.getpid()}"


def write_shard_outputs(ctx: ApplyContext, shard: int, rows: list[ManifestRow], texts: dict[str, str] | None,
                        manifest: dict) -> None:
    """After a shard's points are in the target: its chunk texts (sticky), its chunk-manifest part, then
    its shard manifest (last: presence = done; none when a document failed, so the shard runs again)."""
    if texts is not None:
        crashpoint("before-chunk-texts")
        ctx.fence()
        write_chunk_texts_part(ctx.state, ctx.index, ctx.target, shard_name(shard), texts)
    old_vid = ctx.pairs_source()
    if old_vid is not None:  # free pairs of a model change: read back by id, nothing embedded (reindex.books.pairs)
        ctx.fence()
        record_shard_pairs(ctx.state, ctx.store, index=ctx.index, target=ctx.target, old=ctx.old, run=ctx.run,
                           shard=shard, rows=rows, m=per_shard(ctx.cfg.serving.pairs, ctx.shards),
                           old_vector_id=old_vid, new_vector_id=ctx.identity.vector_id, payload=ctx.cfg.payload)
    crashpoint("before-manifest")
    ctx.confirm_lock()  # the two commit points of a shard: each confirmed against the stored lock
    if ctx.in_place:  # recorded first, so that a resumed run knows this part's change for its own
        rewrite_chunk_manifest_part(ctx.state, ctx.index, ctx.target, ctx.run, shard_name(shard), rows)
    else:
        write_chunk_manifest_part(ctx.state, ctx.index, ctx.target, shard_name(shard), rows)
    if not manifest["failures"]:
        crashpoint("before-shard-manifest")
        ctx.confirm_lock()
        write_shard_manifest(ctx.state, ctx.index, ctx.target, ctx.run, shard, manifest)


def delete_unlisted_points(ctx: ApplyContext) -> int:
    """Delete points of the target that its chunk manifest does not list: left by a resumed build whose
    documents changed, or by a retained population rebuilt for reuse. Counts first; scrolls only when the
    count disagrees. Returns how many were deleted."""
    listed = {r.point_id for r in read_chunk_manifest(ctx.state, ctx.index, ctx.target)}
    if ctx.store.count(ctx.target) == len(listed):
        return 0
    extra = [p.id for p in ctx.store.scroll(ctx.target) if p.id not in listed]
    for i in range(0, len(extra), 1024):
        ctx.fence()
        retry_transient(ctx.store.delete_points, ctx.target, extra[i : i + 1024])
    return len(extra)


def delete_points_by_id(ctx: ApplyContext, ids: Iterable[str]) -> int:
    """Delete the points ``ids`` from the target (a repair's points the chunk manifest does not list), fenced,
    1,024 a call; repeatable. Returns how many ids were sent."""
    ids = sorted(ids)
    if ids:
        ctx.store.prepare_writes(ctx.target)
    for i in range(0, len(ids), 1024):
        crashpoint("before-delete")
        ctx.fence()
        retry_transient(ctx.store.delete_points, ctx.target, ids[i : i + 1024])
    return len(ids)


@dataclass(frozen=True, slots=True)
class Found:
    """What changed against the target's chunk manifest: ids edited or added (and, from a cursor, the documents
    as read), ids removed, where the source stands now (None: found by a full compare)."""

    changed: set[str]
    removed: set[str]
    documents: dict[str, Document]
    cursor: Cursor | None


def find_changes(ctx: ApplyContext) -> Found:
    """Documents whose content differs from the target's chunk manifest, and documents gone: from the cursor
    ``ctx.tracking`` holds (the manifest parts of the documents it names are read, :class:`LiveDocs`; all ids for
    a listing's removals), else by reading the whole source. Unreadable now is not removed: its points stay."""
    report = ScanReport()
    if ctx.tracking is not None:
        ch = ctx.tracking.source.changes(ctx.tracking.cursor, report)
        known = LiveDocs(ctx.state, ctx.index, ctx.target, ctx.shards)
        docs = {d.doc_id: d for d in ch.documents if getattr(known.get(d.doc_id), "content_hash", None) != d.content_hash}
        removed = ch.removed(known if ch.listed is None else known.ids()) - {b.doc_id for b in report.bad}
        return Found(set(docs), removed, docs, ch.cursor)
    recorded = read_document_hashes(ctx.state, ctx.index, ctx.target)
    changed: set[str] = set()
    seen: set[str] = set()
    for doc in open_source(ctx.cfg.source).scan(report):
        seen.add(doc.doc_id)
        if recorded.get(doc.doc_id) != doc.content_hash:
            changed.add(doc.doc_id)
    seen |= {b.doc_id for b in report.bad}  # unreadable now is not removed: its points stay
    return Found(changed, set(recorded) - seen, {}, None)


def changed_since_manifest(ctx: ApplyContext) -> tuple[set[str], set[str]]:
    """(changed or added, removed) ids of :func:`find_changes`."""
    found = find_changes(ctx)
    return found.changed, found.removed


def catch_up(ctx: ApplyContext, *, rounds: int = 3) -> dict:
    """Replay documents that changed since the plan into the target, in place, until nothing changed or
    ``rounds`` is reached; with ``ctx.tracking``, each round reads only what moved past the cursor, replays
    those documents as read, and advances the cursor when clean. Returns counts per round."""
    history = []
    in_place, carried = ctx.in_place, ctx.carried
    ctx.in_place = True  # catch-up is a document-scoped delta, whatever built the target
    ctx.documents = None  # it replays what the source holds now, never the copies the drift check read
    # Documents changed since the plan: cut here (in place, a sticky config re-chunks them against what the
    # shards just wrote, not what the plan cut).
    ctx.carried = None
    try:
        for n in range(rounds):
            crashpoint("catch-up")
            found = find_changes(ctx)
            if not found.changed and not found.removed:
                if found.cursor is not None:
                    ctx.tracking.advance(found.cursor)  # metadata that moved without content: not read again
                break
            changed, removed = found.changed, found.removed
            ctx.documents = found.documents if found.cursor is not None else None
            shards = sorted({shard_of(d, ctx.shards) for d in changed | removed})
            ctx.emit(kind="catch-up", round=n + 1, documents=len(changed) + len(removed))
            results = [run_shard(ctx, s, only=changed, removed=removed, force=True) for s in shards]
            failures = [f for r in results for f in r.failures]
            history.append({
                "round": n + 1,
                "changed": len(changed),
                "removed": len(removed),
                "embedded": sum(r.embedded for r in results),
                "failures": failures,
            })
            if found.cursor is not None and not failures:
                ctx.tracking.advance(found.cursor)
    finally:
        ctx.in_place, ctx.carried = in_place, carried
        ctx.documents = None
    return {"rounds": history, "documents": sum(h["changed"] + h["removed"] for h in history)}
