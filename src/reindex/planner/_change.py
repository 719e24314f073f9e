"""``plan_change``: classification, exact work (or a sampled projection), cost and footprint,
assembled into a sealed :class:`Plan`."""

from __future__ import annotations

import datetime as _dt
import time
from collections import Counter
from collections.abc import Container
from dataclasses import replace
from typing import Any, Callable

from reindex.books.carried import CarryWriter
from reindex.domain.config import RechunkConfig, chunker_spec
from reindex.domain.kinds import ChangeKind
from reindex.errors import PlanError
from reindex.domain.identity import (LEGACY_PAYLOAD_ID, CorpusDigest, Identity, config_digest, identity_of, payload_id,
                                     touched_digest)
from reindex.adapters.pipeline import TextPipeline
from reindex.books.cursors import Committed, Tracking, source_key, verification_due
from reindex.planner._baseline import Baseline, DocState
from reindex.planner._live_docs import LiveDocs, docs_summary
from reindex.planner._classify import approval_counts, approval_needed, classify, explain_changes, queries_changed
from reindex.planner._plan import PLAN_SCHEMA, Plan, seal
from reindex.planner._reading import touched_states
from reindex.planner._repair import repair_kind, repair_section
from reindex.planner._request import PlanRequest
from reindex.planner._sampled import sampled_projection
from reindex.planner._units import UnitTally
from reindex.planner._work import (
    ApplyBatches,
    DocWork,
    RechunkTally,
    Totals,
    bucket,
    bucket_order,
    doc_hist,
    doc_work,
    length_histogram,
    price_work,
    what_if,
    whole_doc_tokens,
)
from reindex.adapters.sources import Changes, full_read_reason, open_source, tracker_of
from reindex.adapters.sources.base import Document, ScanReport

__all__ = ["plan_change"]


def plan_change(req: PlanRequest) -> Plan:
    """Compute the plan: classification, exact work (or a sampled projection), cost, footprint."""
    cfg = req.config
    ident = identity_of(cfg)
    baseline = req.baseline
    source = open_source(cfg.source if req.corpus_uri is None else cfg.source.model_copy(update={"uri": req.corpus_uri}))
    same_chunks: set[str] = set()  # edited documents whose chunks did not change (a metadata edit)
    t = Totals(model_limit=req.model_limit, limit_in_model_tokens=req.model_limit is not None
               and req.model_tokens is not None)
    carry = _carry_writer(req, ident)
    pipe = TextPipeline(cfg.text, ident.vector_id)
    units = _unit_tally(req, ident, pipe) if cfg.vector.compose == "units" and req.sample is None else None
    cross = _CrossLookup(baseline) if req.cross_document and baseline.config is not None else None
    work_for = _work_for(baseline, pipe, ident, req.cross_document, same_chunks, t.rechunk, carry,
                         units.texts if units is not None else None, cross,
                         model_tokens=req.model_tokens if req.model_limit else None)

    report = ScanReport()
    digest = CorpusDigest()
    seen: set[str] = set()
    started = time.perf_counter()
    projection = None
    since, why = _read_mode(req, source, ident)
    read: dict[str, Any] = {"mode": "full", "cursor": getattr(source, "cursor_kind", None), "from": None, "why": why}
    hashes: dict[str, str] = {}  # the documents the plan changes → their content hash as read
    reading = req.reading

    def changed(doc: Document) -> None:
        hashes[doc.doc_id] = doc.content_hash
        if reading is not None:
            reading.keep(doc)

    if since is not None:
        changes = _scan_changes(req, source, since, report, work_for, t, seen,
                                _apply_batches(baseline, cfg, ident, same_chunks, units), changed, cross)
        read.update(mode="cursor", cursor=since.cursor.kind, **{"from": since.cursor.digest}, why=None,
                    how=changes.how, documents_read=len(changes.documents), bytes_read=changes.bytes_read)
        corpus_digest = changes.digest
        if reading is not None:  # the read ended here: what the apply's catch-up finds changes from
            reading.tracking = Tracking(source, changes.cursor, since.source_key, since.verified_at,
                                        started_from=since.cursor.digest)
    elif req.sample is None:
        tracked = tracker_of(source) if reading is not None and req.corpus_uri is None else None
        if tracked is not None and baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id:
            # In place, read whole: the cursor taken before the read (what it sees is at or past it), as apply's
            # drift check takes it; kept only for the documents the population then holds.
            reading.tracking = Tracking(tracked, tracked.position(), source_key(cfg.source), time.time(), full=True)
        _scan_exact(req, source, report, work_for, t, digest, seen,
                    _apply_batches(baseline, cfg, ident, same_chunks, units), changed)
        corpus_digest = digest.hexdigest()
    else:
        projection = sampled_projection(req, source, report, work_for, t, digest, seen)
        corpus_digest = digest.hexdigest()
    if since is None:
        read.update(documents_read=report.documents + len(report.bad), bytes_read=report.bytes)

    if since is None:  # a cursor plan counted its removals from the feed (_scan_changes)
        _count_removed(baseline, seen, {b.doc_id for b in report.bad}, t)
    if req.sample is None:
        _count_old(baseline, t)
    documents_changed = bool(t.docs["added"] or t.docs["edited"] or t.docs["removed"])
    payload_changed = baseline.payload_id is not None and baseline.payload_id != payload_id(cfg)
    text_changed = bool(t.docs["added"] or t.docs["removed"] or t.docs["edited"] > len(same_chunks))
    kind = classify(baseline, ident, documents_changed, text_changed=text_changed,
                    payload_changed=payload_changed or queries_changed(baseline.config, cfg))
    if kind is ChangeKind.NONE:
        t.affected = []
    elif payload_changed and kind.in_place:
        t.affected = sorted(seen)  # every point's payload is rewritten
    if req.repair is not None:
        if req.sample is not None:
            raise PlanError("a repair plan is exact; it cannot be sampled")
        kind = repair_kind(req.repair, baseline, ident, kind, t)
    carried = carry.finish() if carry is not None and kind.does_work else None
    if units is not None:  # apply embeds units: the plan's tokens to embed are theirs (planner._units)
        by_shard = units.tally.tokens_by_shard()
        t.tokens_to_embed = sum(by_shard.values())
        t.embed_by_shard = Counter(by_shard)
    elapsed = time.perf_counter() - started
    touched = None
    if kind.in_place and req.repair is None and req.sample is None and not payload_changed:
        # The plan's scope: the documents it changes, as it found them. Apply refuses the plan when one of them moved
        # since; a document outside it that moved is the catch-up's, or the next cycle's.
        states = touched_states(t.affected, t.removed, hashes)
        touched = {"digest": touched_digest(states), "documents": len(states)}
    if reading is not None:
        reading.corpus_digest = corpus_digest
    body = _plan_body(req, kind, documents_changed, t, projection, elapsed, source, report, corpus_digest, read,
                      touched)
    if cross is not None and cross.skipped:
        body["work"]["cross_document"].update(
            counted=False, why=f"not counted: looking the changed chunks up among the population's "
            f"{len(baseline.docs):,} documents' fingerprints would read more than the change (a what-if; apply reuses "
            "within a document only)")
    if units is not None:
        body["work"]["units"] = u = units.tally.as_dict()
        body["cost"]["footprint"]["unit_parts"] = {
            "disk_bytes_added": u["unit_part_bytes_added"],
            "where": "the state store, a unit part beside each chunk-manifest part: per unit a vector "
                     "(float64 token sums for model2vec, else float32) and a count"}
    if req.repair is not None:
        body["repair"], lines = repair_section(req.repair, sorted(t.affected))
        body["explanation"] = lines + body["explanation"]
    return seal({**body, "carried": carried} if carried else body)


def _carry_writer(req: PlanRequest, ident: Identity) -> CarryWriter | None:
    """Where the chunks this plan cuts go for apply (:mod:`reindex.books.carried`), in the shard layout apply will
    use: the live population's in place (same pipeline), else the config's; None when nothing is carried."""
    if req.carry_to is None:
        return None
    baseline = req.baseline
    in_place = baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id
    shards = baseline.config.apply.shards if in_place else req.config.apply.shards
    return CarryWriter(req.carry_to, req.config.index, shards, ident.pipeline_id)


def _read_mode(req: PlanRequest, source, ident: Identity) -> tuple[Committed | None, str | None]:
    """How this plan reads the source: from the live population's cursor (the committed cursor, None) when
    it can, else in full (None, why). A cursor serves an in-place change of a source that has one, whose
    cursor was recorded for this source as configured, when no verification is asked for or due."""
    baseline, cfg = req.baseline, req.config
    reason = full_read_reason(source)
    if reason:
        return None, reason
    if req.sample is not None or req.corpus_uri is not None:
        return None, "a sampled or what-if plan reads the source in full"
    if baseline.kind != "live" or baseline.identity is None:
        return None, "an initial build reads every document"
    if baseline.identity.pipeline_id != ident.pipeline_id:
        return None, "the pipeline changed: every document is cut again"
    if baseline.payload_id is not None and baseline.payload_id != payload_id(cfg):
        return None, "the payload layout changed: every document's payload is rewritten"
    committed = baseline.cursor
    if committed is None:
        return None, (f"{baseline.inputs.get('collection')} has no cursor yet (built before cursors, or by a failed "
                      "run): this sync reads everything and records one")
    if committed.source_key != source_key(cfg.source):
        return None, "source settings changed since the cursor was recorded: read whole, a new cursor is recorded"
    if req.verify:
        return None, "--verify: every document is read and its content hash compared (listing metadata can lie)"
    every = cfg.sync.verify_every_seconds
    if verification_due(committed, every):
        age = (time.time() - committed.verified_at) / 3600
        return None, (f"sync.verify_every {cfg.sync.verify_every}: the last full read was {age:,.1f} h ago; every "
                      "document is read and its content hash compared")
    return committed, None


def unchanged_work(doc_id: str, old: DocState) -> DocWork:
    """The work of a document the live population holds unchanged (same pipeline, same bytes): none."""
    n, tokens = len(old.fingerprints), sum(old.tokens)
    return DocWork(doc_id, "unchanged", n, n, n, 0, tokens, 0, 0, 0, tokens, 0, old.tokens)


def _scan_changes(
    req: PlanRequest, source, since: Committed, report: ScanReport, work_for: Callable[[Document], DocWork],
    t: Totals, seen: set[str], batches: ApplyBatches, changed: Callable[[Document], None] = lambda doc: None,
    cross: _CrossLookup | None = None,
) -> Changes:
    """The work of the documents the cursor says changed (their content read), the live population's figures
    for every other document (not read: its totals less those of the documents this plan touches, so that only
    the manifest parts of those are decoded), and the documents it no longer holds: removed, or unreadable and
    kept (invariant 8). ``seen`` gets the documents read."""
    baseline = req.baseline
    changes = source.changes(since.cursor, report)
    if cross is not None:  # a sync reads what changed: the population's prefixes only when that is in proportion
        cross.budget = max(CROSS_LOOKUP_BYTES, CROSS_LOOKUP_FACTOR * changes.bytes_read)
    read_ids: set[str] = set()
    for doc in changes.documents:
        read_ids.add(doc.doc_id)
        seen.add(doc.doc_id)
        w = work_for(doc)
        t.add(w, req.tail_tokens)
        batches.add(w, t)
        if w.status != "unchanged":
            t.affected.append(doc.doc_id)
            changed(doc)
    known = baseline.docs
    bad = {b.doc_id for b in report.bad}
    # A feed names its removals (looked up one by one); a listing is compared with the ids its previous listing named
    # (the cursor's entries: every document the population holds), else with every known id.
    candidates = changes.gone_from(since.cursor) if isinstance(known, LiveDocs) else None
    removed = changes.removed(known if changes.listed is None else candidates if candidates is not None else
                              known.ids() if isinstance(known, LiveDocs) else known.keys())
    gone = sorted(d for d in (removed | bad) - read_ids if d in known)
    for doc_id in gone:
        if doc_id in bad:
            t.unreadable.append(doc_id)
        else:
            t.removed.append(doc_id)
            t.docs["removed"] += 1
    touched = [known[d] for d in read_ids | set(gone) if d in known]
    t.add_unchanged(docs_summary(known).without(touched), req.tail_tokens)
    batches.finish(t)
    return changes


#: A plan that reads from a cursor looks a changed chunk up among every fingerprint of the population (the
#: cross-document what-if, 8 bytes of prefix a chunk) only when that read costs at most this many bytes, or this
#: factor times the bytes of the changed documents it read: a one-document sync at a million chunks would read 8 MB
#: of prefixes for a what-if figure. Otherwise the figure is not counted, and the plan says so.
CROSS_LOOKUP_BYTES = 256 * 1024
CROSS_LOOKUP_FACTOR = 64


class _CrossLookup:
    """Membership among the baseline's fingerprints for the cross-document figure, looked up only within
    ``budget`` bytes of prefixes (None: always, as a full read does); ``skipped`` when it was not."""

    def __init__(self, baseline: Baseline) -> None:
        self._docs, self._found = baseline.docs, None
        self.budget: float | None = None
        self.skipped = False

    def __contains__(self, fp: object) -> bool:
        if self.skipped:
            return False
        if self._found is None:
            docs = self._docs
            if isinstance(docs, LiveDocs):
                if self.budget is not None and 8 * docs.summary.chunks > self.budget:
                    self.skipped = True
                    return False
                self._found = docs.fingerprints()
            else:
                self._found = {f for d in docs.values() for f in d.fingerprints}
        return fp in self._found


def _over_limit_section(t: Totals, tokenizer: str) -> dict[str, Any] | None:
    """The plan's ``over_model_limit``: chunks longer than the model reads (counted with ``tokenizer``), of how many
    compared, their share, and the longest of them named (document, ordinal, tokens)."""
    if not t.model_limit:
        return None
    named = [{"doc_id": d, "ordinal": o, "tokens": n} for n, d, o in sorted(t.truncated, reverse=True)]
    return {"chunks": t.over_limit, "of": t.limit_checked, "limit": t.model_limit, "tokenizer": tokenizer,
            "share": round(t.over_limit / t.limit_checked, 6) if t.limit_checked else 0.0, "longest": named}


def _work_for(baseline: Baseline, pipe: TextPipeline, ident: Identity, cross_document: bool,
              same_chunks: set[str] | None = None, rechunk: RechunkTally | None = None,
              carry: CarryWriter | None = None,
              missing_texts: Callable[[str, dict[str, str]], None] | None = None,
              cross: _CrossLookup | None = None,
              model_tokens: Callable[[list[str]], list[int]] | None = None) -> Callable[[Document], DocWork]:
    """The function that computes one document's work against ``baseline``; edited documents whose
    chunks are the baseline's (same fingerprints in order: only their metadata changed) go into
    ``same_chunks``. With ``text.rechunk: sticky`` and a live baseline of the same pipeline (the change
    is applied in place), an edited document is re-chunked against its previous chunk texts as apply
    will do it, and ``rechunk`` tallies what that kept, re-cut and how far it drifted. Every document cut
    here goes to ``carry`` (apply reads its chunks instead of cutting it again). ``model_tokens``: the embedding
    model's own counter, when the chunker counts in other units: each chunk cut here is counted with it too."""
    same_pipeline = baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id
    old_fps_global: Container[str] | None = cross
    if old_fps_global is None and cross_document and baseline.config is not None:
        old_fps_global = _CrossLookup(baseline)

    def work_for(doc: Document) -> DocWork:
        old = baseline.docs.get(doc.doc_id)
        status = "added" if old is None else ("unchanged" if old.content_hash == doc.content_hash else "edited")
        if same_pipeline and status == "unchanged":
            # Same pipeline, same bytes: the same chunks. No need to cut the document again.
            return unchanged_work(doc.doc_id, old)
        text = pipe.document_text(doc)
        if status == "edited" and same_pipeline and pipe.sticky and baseline.previous_texts is not None:
            previous = baseline.previous_texts(doc.doc_id)
            recs, how = pipe.rechunk_detail(doc.doc_id, text, previous or ())
            if rechunk is not None:
                rechunk.add(previous, how)
        else:
            recs = pipe.chunk_text(doc.doc_id, text)
        if carry is not None:
            carry.add(doc, text, recs)
        toks = [r.tokens for r in recs]
        if same_chunks is not None and status == "edited" and same_pipeline and \
                tuple(r.fingerprint for r in recs) == old.fingerprints:
            same_chunks.add(doc.doc_id)
        w = doc_work(doc.doc_id, status, old, [r.fingerprint for r in recs], toks,
                     [len(r.text.encode()) for r in recs], whole_doc_tokens(pipe, text, toks), old_fps_global,
                     baseline.retained.get(doc.doc_id, frozenset()))
        if missing_texts is not None and w.missing:
            wanted = dict(w.missing)
            missing_texts(doc.doc_id, {r.fingerprint: r.text for r in recs if r.fingerprint in wanted})
        if model_tokens is not None:
            w = replace(w, model_tokens=tuple(model_tokens([r.text for r in recs])))
        return w

    return work_for


def _apply_batches(baseline: Baseline, cfg, ident: Identity, same_chunks: set[str],
                   units: "_Units | None" = None) -> ApplyBatches:
    """Apply's batches for this change: in place (same pipeline) over the live population's shard layout,
    taking the affected documents (every document when the payload layout changes); else every document
    into the new population's shards. ``units``: told which chunk texts apply embeds (vector.compose: units)."""
    in_place = baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id
    embedded = units.embedded if units is not None else None
    if not in_place:
        return ApplyBatches(cfg.apply.shards, lambda w: True, lambda w: True, embedded)
    every = baseline.payload_id is not None and baseline.payload_id != payload_id(cfg)
    return ApplyBatches(baseline.config.apply.shards, lambda w: every or w.status != "unchanged",
                        lambda w: w.status != "unchanged" and w.doc_id not in same_chunks, embedded)


class _Units:
    """vector.compose: units — the chunk texts each document misses (from ``work_for``), handed to the tally for
    the fingerprints apply's batches embed."""

    def __init__(self, tally: UnitTally) -> None:
        self.tally = tally
        self._texts: dict[str, dict[str, str]] = {}

    def texts(self, doc_id: str, fp_texts: dict[str, str]) -> None:
        self._texts[doc_id] = fp_texts

    def embedded(self, doc_id: str, fps: list[str]) -> None:
        texts = self._texts.pop(doc_id, {})
        self.tally.add(doc_id, [texts[fp] for fp in fps if fp in texts])


def _unit_tally(req: PlanRequest, ident: Identity, pipe: TextPipeline) -> _Units:
    """The units tally of this plan: apply's shard layout, and the unit part apply reads (in place the live
    population's; beside, the live population's when its shard count is the new layout's)."""
    baseline, cfg = req.baseline, req.config
    in_place = baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id
    shards = baseline.config.apply.shards if in_place else cfg.apply.shards
    same_vector = baseline.identity is not None and baseline.identity.vector_id == ident.vector_id
    known = baseline.unit_keys if (in_place or baseline.live_shards == shards) and same_vector else None
    return _Units(UnitTally(cfg.vector.compose_unit, ident.vector_id, pipe.tokenizer, shards, known,
                            cfg.vector.dimension * (8 if cfg.vector.provider == "model2vec" else 4)))


def _scan_exact(
    req: PlanRequest, source, report: ScanReport, work_for: Callable[[Document], DocWork], t: Totals,
    digest: CorpusDigest, seen: set[str], batches: ApplyBatches, changed: Callable[[Document], None] = lambda doc: None,
) -> None:
    """Every document of the new corpus, its work computed exactly (with apply's batching replayed); ``changed`` sees
    each document whose status is not unchanged."""
    n = 0
    for doc in source.scan(report):
        n += 1
        digest.add(doc.doc_id, doc.content_hash)
        seen.add(doc.doc_id)
        w = work_for(doc)
        t.add(w, req.tail_tokens)
        batches.add(w, t)
        if w.status != "unchanged":
            t.affected.append(doc.doc_id)
            changed(doc)
        if req.progress and n % 50 == 0:
            req.progress("chunking", n, None)
    batches.finish(t)


def _count_removed(baseline: Baseline, seen: set[str], bad: set[str], t: Totals) -> None:
    """Baseline documents that are no longer in the corpus. A document the scan found but could not
    read (an I/O error, now empty or binary) is not removed: its live points stay, and the plan lists it."""
    for doc_id in baseline.docs:
        if doc_id in seen:
            continue
        if doc_id in bad:
            t.unreadable.append(doc_id)
            continue
        t.removed.append(doc_id)
        t.docs["removed"] += 1


def _count_old(baseline: Baseline, t: Totals) -> None:
    """The old population's totals (exact plans only; a sampled plan projects them)."""
    if not baseline.complete:
        raise PlanError("an incomplete (sampled) baseline needs --sample")
    s = docs_summary(baseline.docs)
    t.chunks_old = s.chunks
    for tok, n in s.lengths.items():
        t.chunk_len_old[bucket(tok)] += n
        t.lengths_old[tok] += n
    t.payload_old = s.payload


def _plan_body(
    req: PlanRequest, kind: str, documents_changed: bool, t: Totals, projection: dict | None, elapsed: float,
    source, report: ScanReport, digest: str, read: dict[str, Any], touched: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan document, before sealing."""
    cfg, baseline = req.config, req.baseline
    c = price_work(kind, t, cfg, baseline, req.rates)
    needs, reasons = approval_needed(kind, cfg, t.tokens_to_embed, c["usd"], **approval_counts(
        len(baseline.docs) if baseline.config is not None else 0, t.docs["removed"],
        sum(t.docs[s] for s in ("added", "edited", "unchanged")), len(t.unreadable)))
    explanation = explain_changes(baseline.config, cfg) if baseline.config is not None else []
    docs_total = sum(t.docs[s] for s in ("added", "edited", "unchanged"))
    return {
        "schema": PLAN_SCHEMA,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "index": cfg.index,
        "kind": kind,
        "documents_changed": documents_changed,
        "explanation": [e["line"] for e in explanation] + _legacy_payload_line(baseline, cfg) + _incomplete_texts_lines(baseline) + (
            [f"reuses the retained population {baseline.retained_collection} (built with this pipeline before): "
             "its vectors are taken, not embedded again"] if baseline.retained_collection else []),
        "changes": explanation,
        "identity": {"new": identity_of(cfg).as_dict(),
                     "old": baseline.identity.as_dict() if baseline.identity else None},
        "chunker": {"new": chunker_spec(cfg.text.chunker),
                    "old": chunker_spec(baseline.config.text.chunker) if baseline.config else None},
        "inputs": {
            "config": {"path": req.config_path, "digest": config_digest(cfg)},
            "baseline": baseline.inputs,
            "corpus": {"uri": source.describe(), "digest": digest,
                       "documents": docs_total if read["mode"] == "cursor" else report.documents,
                       "bytes": report.bytes, "read": read, **({"touched": touched} if touched else {})},
        },
        "config": cfg.model_dump(mode="json"),
        "work": {**_work_section(t, report, kind, docs_total, len(baseline.docs) if baseline.config is not None else 0,
                                 baseline.retained_collection, cfg.text.rechunk),
                 "over_model_limit": _over_limit_section(t, req.model_tokenizer or cfg.text.tokenizer)},
        "projection": projection,
        "cost": c,
        "sensitivity": _sensitivity_section(req, t),
        "charts": _charts_section(t),
        "approval": {"required": needs, "reasons": reasons},
        "timing": {"planning_seconds": round(elapsed, 3),
                   "documents_per_second": round(docs_total / elapsed, 1) if elapsed else None},
        **({"in_place_part": req.in_place_part} if req.in_place_part else {}),
        **({"forecast": req.forecast} if req.forecast else {}),
    }


def _incomplete_texts_lines(baseline: Baseline) -> list[str]:
    """One line per chunk-text part that lacks the previous texts of edited documents (sticky re-chunking)."""
    return [f"chunk-text part {where} lacks the previous chunk texts of {n} edited document(s) (half-written or "
            "damaged): they are cut statelessly, which re-embeds more; this apply stores their new texts"
            for where, n in sorted(getattr(baseline.previous_texts, "incomplete", {}).items())]


def _legacy_payload_line(baseline: Baseline, cfg) -> list[str]:
    """The explanation of a payload-only change that no config field shows: a live population written
    before the payload contract."""
    if baseline.payload_id != LEGACY_PAYLOAD_ID:
        return []
    line = (f"the live population's payloads predate the payload contract (chunk text under `text`, no metadata): "
            f"they are rewritten in place under `{cfg.payload.content_key}` / `{cfg.payload.metadata_key}`, no re-embedding")
    return [line]


def _work_section(t: Totals, report: ScanReport, kind: str, docs_total: int, live: int,
                  retained: str | None, rechunk: RechunkConfig) -> dict[str, Any]:
    """The plan's ``work`` section."""
    return {
        "documents": {
            "total": docs_total,
            "added": t.docs["added"],
            "edited": t.docs["edited"],
            "removed": t.docs["removed"],
            "unchanged": t.docs["unchanged"],
            "bad": len(report.bad),
            "unreadable": len(t.unreadable),
            "live": live,
        },
        "bad_documents": [{"doc_id": b.doc_id, "reason": b.reason} for b in report.bad],
        "chunks_old": t.chunks_old,
        "chunks_new": t.chunks_new,
        "chunks_reused": t.chunks_reused,
        "chunks_to_embed": t.chunks_to_embed,
        "tokens_new": t.tokens_new,
        "tokens_to_embed": t.tokens_to_embed,
        # per shard of the layout apply writes (None: not counted, a sampled plan): how work units are dealt
        "tokens_to_embed_by_shard": ([t.embed_by_shard.get(k, 0) for k in range(t.shard_layout)]
                                     if t.shard_layout else None),
        "cross_document": {"chunks": t.cross_doc_chunks, "tokens": t.cross_doc_tokens},
        "affected_documents": sorted(t.affected) if ChangeKind.of(kind).in_place else [],
        "removed_documents": sorted(t.removed),
        "unreadable_documents": sorted(t.unreadable),
        "reuses_retained_population": retained,
        "rechunk": t.rechunk.as_dict(rechunk),
    }


def _sensitivity_section(req: PlanRequest, t: Totals) -> dict[str, Any]:
    """The plan's ``sensitivity`` section: the long-document tail and the what-if table."""
    tail_share = t.tail_chunks / t.chunks_new if t.chunks_new else 0.0
    return {
        "tail_tokens": req.tail_tokens,
        "tail_documents": t.tail_docs,
        "tail_chunks": t.tail_chunks,
        "tail_chunk_share": round(tail_share, 6),
        "what_if": what_if(req.config, t.doc_tokens, t, req.rates, projected=req.sample is not None),
    }


def _charts_section(t: Totals) -> dict[str, Any]:
    """The plan's ``charts`` section: length histograms and tokens by status."""
    return {
        "length_buckets": bucket_order(),
        "doc_length_histogram": doc_hist(t.doc_tokens),
        "chunks_per_bucket": {"old": [t.chunk_len_old.get(b, 0) for b in bucket_order()],
                              "new": [t.chunk_len_new.get(b, 0) for b in bucket_order()]},
        "chunk_length_histogram": length_histogram(t.lengths_old, t.lengths_new),
        "tokens_to_embed_by_status": {k: t.embed_by_status.get(k, 0) for k in ("added", "edited", "unchanged")},
    }
