"""Classify a change and compute its exact work (or a sampled projection); pure over its inputs.

Inputs: the proposed (resolved) config, the corpus, and a baseline — the live population (its
recorded config and chunk manifest), an explicit old config + old corpus, or nothing (initial build).
Output: a :class:`Plan`, an immutable JSON document with a hash over its contents.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from reindex import cost as costmod
from reindex.atomic import atomic_write_text
from reindex.config import PipelineConfig, chunker_spec, config_from_dict
from reindex.errors import PlanError
from reindex.identity import CorpusDigest, Identity, canonical_json, identity_of
from reindex.manifests import digest_json, manifest_digest, read_chunk_manifest, read_live
from reindex.pipeline import TextPipeline
from reindex.sources import open_source
from reindex.sources.base import Document, ScanReport
from reindex.stores.objects import ObjectStore

PLAN_SCHEMA = "reindex/plan/v1"
KINDS = ("none", "initial", "document-scoped", "pipeline-scoped/text", "pipeline-scoped/vector")

#: Embedding throughput assumed when neither config nor calibration gives one: all-MiniLM-L6-v2 on
#: two CPU cores measured ~2,000–2,800 tokens/s (ENVIRONMENT.md); 150,000 tokens/min is that middle.
DEFAULT_TOKENS_PER_MINUTE = 150_000.0

#: Document lengths (tokens) bucket edges for the report's histogram charts.
LENGTH_EDGES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)




# --------------------------------------------------------------------------------------------
# Baselines
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DocState:
    """One document as chunked by the baseline."""

    content_hash: str
    fingerprints: tuple[str, ...]
    tokens: tuple[int, ...]


@dataclass
class Baseline:
    """What the change is measured against."""

    kind: str  # none | live | explicit
    config: PipelineConfig | None
    docs: dict[str, DocState] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    complete: bool = True  # False when only some documents were chunked (sampled explicit baseline)
    materialize: Callable[[set[str]], None] | None = None  # chunk these ids of an incomplete baseline

    @property
    def identity(self) -> Identity | None:
        return identity_of(self.config) if self.config is not None else None


def no_baseline() -> Baseline:
    """An initial build: nothing exists yet."""
    return Baseline("none", None, inputs={"kind": "none"})


def live_baseline(store: ObjectStore, index: str) -> Baseline:
    """The live population recorded in the state store, or ``no_baseline()`` before any cutover."""
    rec = read_live(store, index)
    if rec is None:
        return no_baseline()
    cfg = config_from_dict(rec.config, f"{store.describe()} population {rec.collection}")
    docs: dict[str, list] = {}
    for row in read_chunk_manifest(store, index, rec.collection):
        entry = docs.setdefault(row.doc_id, [row.content_hash, [], []])
        entry[1].append((row.ordinal, row.fingerprint, row.tokens))
    states = {}
    for doc_id, (chash, _, _) in docs.items():
        rows = sorted(docs[doc_id][1])
        states[doc_id] = DocState(chash, tuple(r[1] for r in rows), tuple(r[2] for r in rows))
    inputs = {
        "kind": "live",
        "collection": rec.collection,
        "pipeline_id": rec.identity["pipeline_id"],
        "config_digest": digest_json(rec.config),
        "manifest_digest": manifest_digest(store, index, rec.collection),
    }
    return Baseline("live", cfg, states, inputs)


def explicit_baseline(
    cfg: PipelineConfig, corpus_uri: str, *, only: set[str] | None = None, progress: Callable[[int], None] | None = None
) -> Baseline:
    """Recompute the old chunking: ``cfg`` over the corpus at ``corpus_uri`` (all documents, or
    just the ids in ``only`` — then the baseline is incomplete and ``materialize`` chunks more)."""
    source = open_source(cfg.source.model_copy(update={"uri": corpus_uri}))
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    report = ScanReport()
    docs: dict[str, DocState] = {}
    digest = CorpusDigest()
    for n, doc in enumerate(source.scan(report), 1):
        digest.add(doc.doc_id, doc.content_hash)
        if only is None or doc.doc_id in only:
            recs = pipe.chunk_document(doc)
            docs[doc.doc_id] = DocState(doc.content_hash, tuple(r.fingerprint for r in recs), tuple(r.tokens for r in recs))
        else:
            docs[doc.doc_id] = DocState(doc.content_hash, (), ())
        if progress:
            progress(n)
    inputs = {
        "kind": "explicit",
        "corpus": source.describe(),
        "corpus_digest": digest.hexdigest(),
        "config_digest": digest_json(cfg.model_dump(mode="json")),
        "pipeline_id": identity_of(cfg).pipeline_id,
        "documents": report.documents,
        "bad_documents": len(report.bad),
    }
    base = Baseline("explicit", cfg, docs, inputs, complete=only is None)

    def materialize(ids: set[str]) -> None:
        for doc in source.scan(ScanReport()):
            if doc.doc_id in ids:
                recs = pipe.chunk_document(doc)
                base.docs[doc.doc_id] = DocState(
                    doc.content_hash, tuple(r.fingerprint for r in recs), tuple(r.tokens for r in recs)
                )

    base.materialize = materialize
    return base


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}" if prefix else k, v))
        return out
    return {prefix: value}


def _show(v: Any) -> str:
    if isinstance(v, str):
        return v if len(v) <= 40 else v[:20] + "…" + v[-8:]
    return json.dumps(v)


def explain_changes(old: PipelineConfig, new: PipelineConfig) -> list[dict[str, str]]:
    """One entry per changed field: path, old → new, and what it means for the index."""
    a = _flatten("", old.model_dump(mode="json"))
    b = _flatten("", new.model_dump(mode="json"))
    out = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) == b.get(path):
            continue
        if path.startswith("text."):
            half, effect = "text", "text half: every document is recut"
        elif path.startswith("vector."):
            half, effect = "vector", "vector half: every vector is recomputed, nothing is reused"
        else:
            half, effect = "operational", "operational: no re-embedding"
        out.append(
            {
                "field": path,
                "old": _show(a.get(path)),
                "new": _show(b.get(path)),
                "half": half,
                "line": f"{path}: {_show(a.get(path))} → {_show(b.get(path))} ({effect})",
            }
        )
    return out


def classify(baseline: Baseline, new_identity: Identity, documents_changed: bool) -> str:
    """The change kind (see DESIGN.md)."""
    if baseline.config is None:
        return "initial"
    old = baseline.identity
    assert old is not None
    if old.vector_id != new_identity.vector_id:
        return "pipeline-scoped/vector"
    if old.text_id != new_identity.text_id:
        return "pipeline-scoped/text"
    return "document-scoped" if documents_changed else "none"


# --------------------------------------------------------------------------------------------
# Work
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DocWork:
    """The work for one document of the new corpus."""

    doc_id: str
    status: str  # added | edited | unchanged
    chunks_old: int
    chunks_new: int
    chunks_reused: int
    chunks_to_embed: int  # distinct new texts of this document that miss
    tokens_new: int  # tokens of all new chunks
    tokens_to_embed: int
    cross_doc_chunks: int  # misses whose text exists in another document's old population
    cross_doc_tokens: int
    doc_tokens: int
    payload_bytes: int
    chunk_tokens: tuple[int, ...]


def doc_work(
    doc_id: str, status: str, old: DocState | None, fps: list[str], toks: list[int], text_bytes: list[int],
    doc_tokens: int, old_fps_global: set[str] | None,
) -> DocWork:
    """Same-document reuse by fingerprint: a new chunk reuses a vector iff its fingerprint is among
    the old population's fingerprints of the same document; each distinct missing text is embedded once."""
    old_set = set(old.fingerprints) if old else set()
    reused = sum(1 for fp in fps if fp in old_set)
    missing: dict[str, int] = {}
    for fp, t in zip(fps, toks):
        if fp not in old_set:
            missing.setdefault(fp, t)
    cross = [fp for fp in missing if old_fps_global is not None and fp in old_fps_global]
    return DocWork(
        doc_id=doc_id,
        status=status,
        chunks_old=len(old.fingerprints) if old else 0,
        chunks_new=len(fps),
        chunks_reused=reused,
        chunks_to_embed=len(missing),
        tokens_new=sum(toks),
        tokens_to_embed=sum(missing.values()),
        cross_doc_chunks=len(cross),
        cross_doc_tokens=sum(missing[fp] for fp in cross),
        doc_tokens=doc_tokens,
        payload_bytes=sum(text_bytes) + len(fps) * costmod.PAYLOAD_FIELD_BYTES,
        chunk_tokens=tuple(toks),
    )


def _doc_tokens(pipe: TextPipeline, text: str, chunk_tokens: list[int]) -> int:
    """Tokens of the whole document without tokenising it again: the sum of chunk tokens for
    partitioning chunkers; window arithmetic for sliding windows (window k starts at k·stride)."""
    c = pipe.text.chunker
    overlap = getattr(c, "overlap", 0) or 0
    if not overlap or not chunk_tokens:
        return sum(chunk_tokens)
    if c.kind == "sliding":
        from reindex.chunkers.sliding import sliding_stride

        return sliding_stride(c.size, c.overlap) * (len(chunk_tokens) - 1) + chunk_tokens[-1]
    return pipe.tokenizer.count(text)


@dataclass
class _Totals:
    docs: Counter = field(default_factory=Counter)
    chunks_old: int = 0
    chunks_new: int = 0
    chunks_reused: int = 0
    chunks_to_embed: int = 0
    tokens_new: int = 0
    tokens_to_embed: int = 0
    cross_doc_chunks: int = 0
    cross_doc_tokens: int = 0
    payload_old: int = 0
    payload_new: int = 0
    affected: list = field(default_factory=list)
    removed: list = field(default_factory=list)
    # distributions for the report and sensitivity tables
    doc_tokens: list = field(default_factory=list)
    chunk_len_old: Counter = field(default_factory=Counter)
    chunk_len_new: Counter = field(default_factory=Counter)
    embed_by_status: Counter = field(default_factory=Counter)
    tail_chunks: int = 0
    tail_docs: int = 0

    def add(self, w: DocWork, tail_tokens: int) -> None:
        self.docs[w.status] += 1
        self.chunks_old += w.chunks_old
        self.chunks_new += w.chunks_new
        self.chunks_reused += w.chunks_reused
        self.chunks_to_embed += w.chunks_to_embed
        self.tokens_new += w.tokens_new
        self.tokens_to_embed += w.tokens_to_embed
        self.cross_doc_chunks += w.cross_doc_chunks
        self.cross_doc_tokens += w.cross_doc_tokens
        self.payload_new += w.payload_bytes
        self.doc_tokens.append(w.doc_tokens)
        for t in w.chunk_tokens:
            self.chunk_len_new[_bucket(t)] += 1
        self.embed_by_status[w.status] += w.tokens_to_embed
        if w.doc_tokens > tail_tokens:
            self.tail_docs += 1
            self.tail_chunks += w.chunks_new


def _bucket(tokens: int) -> str:
    lo = 0
    for edge in LENGTH_EDGES:
        if tokens < edge:
            return f"{lo}-{edge - 1}"
        lo = edge
    return f"{lo}+"


def _bucket_order() -> list[str]:
    out, lo = [], 0
    for edge in LENGTH_EDGES:
        out.append(f"{lo}-{edge - 1}")
        lo = edge
    return out + [f"{lo}+"]


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """An immutable plan: ``body`` is the JSON document; ``plan_hash`` covers all of it."""

    body: Mapping[str, Any]

    @property
    def plan_hash(self) -> str:
        return self.body["plan_hash"]

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def index(self) -> str:
        return self.body["index"]

    def summary(self) -> dict[str, Any]:
        """The key numbers scripts read (``reindex plan --json``)."""
        w, c = self.body["work"], self.body["cost"]
        return {
            "kind": self.kind,
            "index": self.index,
            "plan_hash": self.plan_hash,
            "documents_changed": self.body["documents_changed"],
            "documents": w["documents"],
            "chunks_old": w["chunks_old"],
            "chunks_new": w["chunks_new"],
            "chunks_reused": w["chunks_reused"],
            "chunks_to_embed": w["chunks_to_embed"],
            "tokens_to_embed": w["tokens_to_embed"],
            "usd": c["usd"],
            "hours": c["hours"],
            "vectors_old": c["vectors_old"],
            "vectors_new": c["vectors_new"],
            "peak_vectors": c["peak_vectors"],
            "peak_bytes": c["footprint"]["peak"]["ram_bytes"] + c["footprint"]["peak"]["disk_bytes"],
            "approval_required": self.body["approval"]["required"],
            "sampled": self.body["projection"] is not None,
        }


def hash_body(body: Mapping[str, Any]) -> str:
    """The plan's own hash: canonical JSON of every field but ``plan_hash``."""
    data = {k: v for k, v in body.items() if k != "plan_hash"}
    return hashlib.blake2b(canonical_json(data).encode(), digest_size=16).hexdigest()


def seal(body: dict[str, Any]) -> Plan:
    body = json.loads(canonical_json(body))  # plain JSON types only, so the hash is reproducible
    body["plan_hash"] = hash_body(body)
    return Plan(body)


def approval_needed(kind: str, cfg: PipelineConfig, tokens: int, usd: float) -> tuple[bool, list[str]]:
    """Policy: which plans need a recorded approval before apply."""
    pol = cfg.approval
    reasons = []
    if kind.startswith("pipeline-scoped") and pol.pipeline_scoped:
        reasons.append(f"{kind} plans need approval (approval.pipeline_scoped)")
    if kind in ("document-scoped", "initial"):
        if pol.max_tokens is not None and tokens > pol.max_tokens:
            reasons.append(f"{tokens:,} tokens to embed exceed approval.max_tokens ({pol.max_tokens:,})")
        if pol.max_usd is not None and usd > pol.max_usd:
            reasons.append(f"${usd:,.2f} exceeds approval.max_usd (${pol.max_usd:,.2f})")
    return bool(reasons), reasons


@dataclass(frozen=True, slots=True)
class Rates:
    usd_per_mtok: float
    tokens_per_minute: float
    source: str  # config | calibration | default


def _price(kind: str, t: _Totals, cfg: PipelineConfig, baseline: Baseline, rates: Rates) -> dict:
    dim_old = baseline.config.vector.dimension if baseline.config else cfg.vector.dimension
    prec_old = baseline.config.vector.precision if baseline.config else cfg.vector.precision
    work = costmod.Work(
        chunks_old=t.chunks_old,
        chunks_new=t.chunks_new,
        chunks_reused=t.chunks_reused,
        tokens_to_embed=t.tokens_to_embed,
        payload_bytes_old=t.payload_old,
        payload_bytes_new=t.payload_new,
        dimension=cfg.vector.dimension,
        precision=cfg.vector.precision,
        dimension_old=dim_old,
        precision_old=prec_old,
    )
    c = costmod.price(work, usd_per_mtok=rates.usd_per_mtok, tokens_per_minute=rates.tokens_per_minute)
    fp = c.footprint
    peak_vectors, peak = c.vectors_peak, fp.peak
    if kind in ("document-scoped", "none"):
        # In place: new points of the affected documents are written before their stale points are
        # deleted, so the peak is the old population plus the points that are new (not overwritten).
        added_points = t.chunks_to_embed
        peak_vectors = t.chunks_old + added_points
        extra = costmod.population_usage(added_points, cfg.vector.dimension, 0, cfg.vector.precision)
        peak = costmod.Usage(fp.old.ram_bytes + extra.ram_bytes, fp.old.disk_bytes + extra.disk_bytes)
        peak = costmod.Usage(max(peak.ram_bytes, fp.new.ram_bytes), max(peak.disk_bytes, fp.new.disk_bytes))
        peak_vectors = max(peak_vectors, t.chunks_new)
    elif kind == "initial":
        peak_vectors, peak = t.chunks_new, fp.new

    def usage(u: costmod.Usage) -> dict:
        return {"ram_bytes": u.ram_bytes, "disk_bytes": u.disk_bytes}

    return {
        "usd": round(c.usd, 6),
        "hours": round(c.hours, 6),
        "usd_per_mtok": rates.usd_per_mtok,
        "tokens_per_minute": rates.tokens_per_minute,
        "rate_source": rates.source,
        "vectors_old": c.vectors_old,
        "vectors_new": c.vectors_new,
        "vectors_embedded": t.chunks_to_embed,
        "peak_vectors": peak_vectors,
        "footprint": {"old": usage(fp.old), "new": usage(fp.new), "peak": usage(peak)},
        "formula": (
            "ram = ceil(1.5 × vectors × dimension × bytes/component); disk = ceil(1.5 × vectors × dimension × stored bytes) "
            "+ quantised copy + payload (Qdrant capacity-planning rule: vectors × dimension × 4 B × 1.5)"
        ),
    }


def _what_if(cfg: PipelineConfig, doc_tokens: list[int], t: _Totals, rates: Rates) -> list[dict]:
    """Other sizes/overlaps of the same chunker family. Window kinds (fixed, sliding): exact seed-001
    arithmetic over the documents' token lengths. Other kinds: scaled by size (stated as such)."""
    c = cfg.text.chunker
    rows = []
    if c.kind in ("fixed", "sliding"):
        overlaps = costmod.WHAT_IF_OVERLAPS if c.kind == "sliding" else (0.0,)
        for size in sorted(set(costmod.WHAT_IF_SIZES) | {c.size}):
            for ov in sorted(set(overlaps) | {getattr(c, "overlap", 0.0)}):
                chunks = sum(costmod.chunk_count(n, size, ov) for n in doc_tokens if n > 0)
                tokens = sum(costmod.billed_tokens(n, size, ov) for n in doc_tokens if n > 0)
                rows.append({
                    "chunker": f"{c.kind}:size={size}" + (f",overlap={ov:g}" if c.kind == "sliding" else ""),
                    "chunks": chunks,
                    "tokens_full_reembed": tokens,
                    "usd": round(costmod.usd(tokens, rates.usd_per_mtok), 6),
                    "hours": round(costmod.hours(tokens, rates.tokens_per_minute), 6),
                    "method": "exact window arithmetic",
                    "current": size == c.size and math.isclose(ov, getattr(c, "overlap", 0.0)),
                })
    else:
        size = getattr(c, "size", None) or getattr(c, "max", None)
        if size:
            for factor in (0.5, 0.75, 1.0, 1.5, 2.0):
                s = max(1, int(size * factor))
                # Documents shorter than the target stay one chunk; longer ones scale with 1/size.
                chunks = sum(1 if n <= s else math.ceil(n / s) for n in doc_tokens if n > 0)
                rows.append({
                    "chunker": f"{c.kind}:size≈{s}",
                    "chunks": chunks,
                    "tokens_full_reembed": t.tokens_new,
                    "usd": round(costmod.usd(t.tokens_new, rates.usd_per_mtok), 6),
                    "hours": round(costmod.hours(t.tokens_new, rates.tokens_per_minute), 6),
                    "method": "approximate (ceil(doc tokens / size)); measure with `reindex chunk --summary`",
                    "current": factor == 1.0,
                })
    return rows


@dataclass
class PlanRequest:
    """Everything a plan is computed from."""

    config: PipelineConfig  # resolved
    config_path: str
    baseline: Baseline
    rates: Rates
    sample: int | None = None
    seed: int = 0
    cross_document: bool = True
    tail_tokens: int = costmod.TAIL_TOKENS
    corpus_uri: str | None = None  # default: config.source.uri
    progress: Callable[[str, int, int | None], None] | None = None


def plan_change(req: PlanRequest) -> Plan:
    """Compute the plan: classification, exact work (or a sampled projection), cost, footprint."""
    cfg = req.config
    ident = identity_of(cfg)
    baseline = req.baseline
    source = open_source(cfg.source if req.corpus_uri is None else cfg.source.model_copy(update={"uri": req.corpus_uri}))
    pipe = TextPipeline(cfg.text, ident.vector_id)
    same_pipeline = baseline.identity is not None and baseline.identity.pipeline_id == ident.pipeline_id
    old_fps_global: set[str] | None = None
    if req.cross_document and baseline.config is not None:
        old_fps_global = {fp for d in baseline.docs.values() for fp in d.fingerprints}

    report = ScanReport()
    t = _Totals()
    digest = CorpusDigest()
    seen: set[str] = set()
    started = time.perf_counter()
    projection = None

    def work_for(doc: Document) -> DocWork:
        old = baseline.docs.get(doc.doc_id)
        status = "added" if old is None else ("unchanged" if old.content_hash == doc.content_hash else "edited")
        if same_pipeline and status == "unchanged":
            # Same pipeline, same bytes: the same chunks. No need to cut the document again.
            return DocWork(doc.doc_id, status, len(old.fingerprints), len(old.fingerprints), len(old.fingerprints), 0,
                           sum(old.tokens), 0, 0, 0, sum(old.tokens), 0, old.tokens)
        text = pipe.document_text(doc)
        recs = pipe.chunk_text(doc.doc_id, text)
        toks = [r.tokens for r in recs]
        return doc_work(doc.doc_id, status, old, [r.fingerprint for r in recs], toks,
                        [len(r.text.encode()) for r in recs], _doc_tokens(pipe, text, toks), old_fps_global)

    if req.sample is None:
        n = 0
        for doc in source.scan(report):
            n += 1
            digest.add(doc.doc_id, doc.content_hash)
            seen.add(doc.doc_id)
            w = work_for(doc)
            t.add(w, req.tail_tokens)
            if w.status != "unchanged":
                t.affected.append(doc.doc_id)
            if req.progress and n % 50 == 0:
                req.progress("chunking", n, None)
    else:
        projection = _sampled(req, source, report, pipe, work_for, t, digest, seen)

    # Removed documents and the old population's totals.
    for doc_id, old in baseline.docs.items():
        if doc_id not in seen:
            t.removed.append(doc_id)
            t.docs["removed"] += 1
    if req.sample is None:
        if not baseline.complete:
            raise PlanError("an incomplete (sampled) baseline needs --sample")
        t.chunks_old = sum(len(d.fingerprints) for d in baseline.docs.values())
        for d in baseline.docs.values():
            for tok in d.tokens:
                t.chunk_len_old[_bucket(tok)] += 1
        t.payload_old = _payload_old(baseline)
    documents_changed = bool(t.docs["added"] or t.docs["edited"] or t.docs["removed"])
    kind = classify(baseline, ident, documents_changed)
    if kind == "none":
        t.affected = []
    elapsed = time.perf_counter() - started

    c = _price(kind, t, cfg, baseline, req.rates)
    needs, reasons = approval_needed(kind, cfg, t.tokens_to_embed, c["usd"])
    explanation = explain_changes(baseline.config, cfg) if baseline.config is not None else []
    docs_total = sum(t.docs[s] for s in ("added", "edited", "unchanged"))
    tail_share = t.tail_chunks / t.chunks_new if t.chunks_new else 0.0

    body: dict[str, Any] = {
        "schema": PLAN_SCHEMA,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "index": cfg.index,
        "kind": kind,
        "documents_changed": documents_changed,
        "explanation": [e["line"] for e in explanation],
        "changes": explanation,
        "identity": {"new": ident.as_dict(), "old": baseline.identity.as_dict() if baseline.identity else None},
        "chunker": {"new": chunker_spec(cfg.text.chunker),
                    "old": chunker_spec(baseline.config.text.chunker) if baseline.config else None},
        "inputs": {
            "config": {"path": req.config_path, "digest": digest_json(cfg.model_dump(mode="json"))},
            "baseline": baseline.inputs,
            "corpus": {"uri": source.describe(), "digest": digest.hexdigest(), "documents": report.documents,
                       "bytes": report.bytes},
        },
        "config": cfg.model_dump(mode="json"),
        "work": {
            "documents": {
                "total": docs_total,
                "added": t.docs["added"],
                "edited": t.docs["edited"],
                "removed": t.docs["removed"],
                "unchanged": t.docs["unchanged"],
                "bad": len(report.bad),
            },
            "bad_documents": [{"doc_id": b.doc_id, "reason": b.reason} for b in report.bad],
            "chunks_old": t.chunks_old,
            "chunks_new": t.chunks_new,
            "chunks_reused": t.chunks_reused,
            "chunks_to_embed": t.chunks_to_embed,
            "tokens_new": t.tokens_new,
            "tokens_to_embed": t.tokens_to_embed,
            "cross_document": {"chunks": t.cross_doc_chunks, "tokens": t.cross_doc_tokens},
            "affected_documents": sorted(t.affected) if kind == "document-scoped" else [],
            "removed_documents": sorted(t.removed),
        },
        "projection": projection,
        "cost": c,
        "sensitivity": {
            "tail_tokens": req.tail_tokens,
            "tail_documents": t.tail_docs,
            "tail_chunks": t.tail_chunks,
            "tail_chunk_share": round(tail_share, 6),
            "what_if": _what_if(cfg, t.doc_tokens, t, req.rates),
        },
        "charts": {
            "length_buckets": _bucket_order(),
            "doc_length_histogram": _doc_hist(t.doc_tokens),
            "chunks_per_bucket": {"old": [t.chunk_len_old.get(b, 0) for b in _bucket_order()],
                                  "new": [t.chunk_len_new.get(b, 0) for b in _bucket_order()]},
            "tokens_to_embed_by_status": {k: t.embed_by_status.get(k, 0) for k in ("added", "edited", "unchanged")},
        },
        "approval": {"required": needs, "reasons": reasons},
        "timing": {"planning_seconds": round(elapsed, 3), "documents_per_second": round(docs_total / elapsed, 1) if elapsed else None},
    }
    return seal(body)


def _doc_hist(doc_tokens: list[int]) -> list[int]:
    counts = Counter(_bucket(n) for n in doc_tokens)
    return [counts.get(b, 0) for b in _bucket_order()]


def _payload_old(baseline: Baseline) -> int:
    # The old population's payload: its chunk texts are not in the manifest; estimate from tokens.
    return sum(
        int(sum(d.tokens) * costmod.BYTES_PER_TOKEN) + len(d.fingerprints) * costmod.PAYLOAD_FIELD_BYTES
        for d in baseline.docs.values()
    )


# --------------------------------------------------------------------------------------------
# Sampled projection
# --------------------------------------------------------------------------------------------

SAMPLE_STRATA = 8
SAMPLED_FIELDS = ("chunks_new", "chunks_reused", "chunks_to_embed", "tokens_new", "tokens_to_embed", "payload_bytes", "chunks_old")


def _strata_edges(sizes: list[int], k: int) -> list[int]:
    s = sorted(sizes)
    return sorted({s[min(len(s) - 1, (i * len(s)) // k)] for i in range(1, k)})


def _sampled(req: PlanRequest, source, report: ScanReport, pipe: TextPipeline, work_for, t: _Totals, digest, seen) -> dict:
    """Length-stratified sample: documents whose work is known without chunking (same pipeline,
    same bytes) count exactly; the others are stratified by byte size and sampled; totals are
    projected with a per-document ratio to bytes (``Σ_h X_h · mean(y/x)``) and 95 % bootstrap intervals."""
    baseline = req.baseline
    same_pipeline = baseline.identity is not None and baseline.identity.pipeline_id == identity_of(req.config).pipeline_id
    sizes: dict[str, int] = {}
    for doc in source.scan(ScanReport()):
        digest.add(doc.doc_id, doc.content_hash)
        seen.add(doc.doc_id)
        old = baseline.docs.get(doc.doc_id)
        status = "added" if old is None else ("unchanged" if old.content_hash == doc.content_hash else "edited")
        if same_pipeline and status == "unchanged" and baseline.complete:
            t.add(work_for(doc), req.tail_tokens)  # exact, and no chunking needed
            continue
        sizes[doc.doc_id] = doc.size
        t.docs[status] += 1  # statuses are exact: ids and hashes, no chunking
        if status != "unchanged":
            t.affected.append(doc.doc_id)
    edges = _strata_edges(list(sizes.values()), SAMPLE_STRATA) if sizes else []
    strata: dict[int, list[str]] = {}
    for doc_id in sorted(sizes):
        strata.setdefault(costmod.stratum_of(sizes[doc_id], edges), []).append(doc_id)
    stratum_sizes = {h: len(ids) for h, ids in strata.items()}
    stratum_bytes = {h: sum(sizes[d] for d in ids) for h, ids in strata.items()}
    alloc = costmod.allocate_sample(stratum_sizes, req.sample or 0)
    rng = random.Random(req.seed)
    chosen: set[str] = set()
    for h in sorted(strata):
        chosen.update(rng.sample(strata[h], alloc[h]))
    removed = {d for d in baseline.docs if d not in seen}
    if not baseline.complete and baseline.materialize is not None:
        baseline.materialize(chosen | removed)
    values: dict[str, dict[int, list[float]]] = {f: {} for f in SAMPLED_FIELDS}
    n = 0
    for doc in source.scan(report):
        if doc.doc_id not in chosen:
            continue
        n += 1
        w = work_for(doc)
        h = costmod.stratum_of(doc.size, edges)
        mean_x = stratum_bytes[h] / stratum_sizes[h]
        per = {
            "chunks_new": w.chunks_new, "chunks_reused": w.chunks_reused, "chunks_to_embed": w.chunks_to_embed,
            "tokens_new": w.tokens_new, "tokens_to_embed": w.tokens_to_embed, "payload_bytes": w.payload_bytes,
            "chunks_old": w.chunks_old,
        }
        for f, y in per.items():
            # Ratio to bytes, scaled to the stratum's mean size: y/x · X_h/N_h, so that
            # project_total gives Σ_h X_h · mean(y/x) (chunks and tokens are nearly proportional to bytes).
            values[f].setdefault(h, []).append(y / max(doc.size, 1) * mean_x)
        scale = stratum_sizes[h] / alloc[h]
        for tok in w.chunk_tokens:
            t.chunk_len_new[_bucket(tok)] += scale
        t.doc_tokens.append(w.doc_tokens)
        if req.progress and n % 20 == 0:
            req.progress("sampling", n, len(chosen))
    intervals = {}
    for f in SAMPLED_FIELDS:
        if not stratum_sizes:
            intervals[f] = {"estimate": 0.0, "low": 0.0, "high": 0.0}
            continue
        iv = costmod.bootstrap_interval(values[f], stratum_sizes, seed=req.seed, resamples=1000)
        intervals[f] = {"estimate": round(iv.estimate, 1), "low": round(iv.low, 1), "high": round(iv.high, 1)}
    exact_new, exact_tokens = t.chunks_new, t.tokens_new
    t.chunks_new += round(intervals["chunks_new"]["estimate"])
    t.chunks_reused += round(intervals["chunks_reused"]["estimate"])
    t.chunks_to_embed += round(intervals["chunks_to_embed"]["estimate"])
    t.tokens_new += round(intervals["tokens_new"]["estimate"])
    t.tokens_to_embed += round(intervals["tokens_to_embed"]["estimate"])
    t.payload_new += round(intervals["payload_bytes"]["estimate"])
    if baseline.complete:
        t.chunks_old = sum(len(d.fingerprints) for d in baseline.docs.values())
    else:
        removed_old = sum(len(baseline.docs[i].fingerprints) for i in removed)
        t.chunks_old = removed_old + round(intervals["chunks_old"]["estimate"])
        intervals["chunks_old"] = {k: round(v + removed_old, 1) for k, v in intervals["chunks_old"].items()}
    for f in intervals:  # intervals of corpus totals: add what was counted exactly
        add = {"chunks_new": exact_new, "tokens_new": exact_tokens}.get(f, 0)
        if f == "chunks_old" and baseline.complete:
            intervals[f] = {"estimate": float(t.chunks_old), "low": float(t.chunks_old), "high": float(t.chunks_old)}
            continue
        for k in ("estimate", "low", "high"):
            intervals[f][k] = round(intervals[f][k] + add, 1)
    for d in baseline.docs.values():
        for tok in d.tokens:
            t.chunk_len_old[_bucket(tok)] += 1
    t.chunk_len_new = Counter({k: round(v) for k, v in t.chunk_len_new.items()})
    t.payload_old = _payload_old(baseline)
    return {
        "sample": len(chosen),
        "population": len(sizes),
        "seed": req.seed,
        "strata": [{"stratum": h, "documents": stratum_sizes[h], "sampled": alloc[h], "bytes": stratum_bytes[h]}
                   for h in sorted(stratum_sizes)],
        "method": "length-stratified sample (byte-size strata), per-document ratio to bytes, 1,000 bootstrap resamples within strata",
        "intervals": intervals,
    }


# --------------------------------------------------------------------------------------------
# Reading, verifying and naming plan files
# --------------------------------------------------------------------------------------------


def plan_filename(plan: Plan) -> str:
    date = plan.body["created_at"][:10]
    return f"{date}-{plan.index}-{plan.kind.replace('/', '-')}-{plan.plan_hash[:8]}.json"


def write_plan(plan: Plan, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / plan_filename(plan)
    return atomic_write_text(path, json.dumps(plan.body, indent=2, ensure_ascii=False) + "\n")


def read_plan(path: str | Path) -> Plan:
    """Load a plan file and verify its hash (a tampered plan is refused)."""
    p = Path(path)
    if not p.is_file():
        raise PlanError(f"{p}: plan file not found")
    try:
        body = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as err:
        raise PlanError(f"{p}: not a plan file (invalid JSON: {err})") from None
    if not isinstance(body, dict) or body.get("schema") != PLAN_SCHEMA:
        raise PlanError(f"{p}: not a plan file (schema is not {PLAN_SCHEMA})")
    expected = hash_body(body)
    if body.get("plan_hash") != expected:
        raise PlanError(
            f"{p}: plan hash mismatch (file says {str(body.get('plan_hash'))[:12]}…, contents hash to {expected[:12]}…): "
            "the plan was edited after it was made; run `reindex plan` again"
        )
    return Plan(body)
