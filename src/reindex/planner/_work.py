"""The work of a change: per-document reuse, running totals and distributions, pricing of the
totals (dollars, hours, footprint) and the what-if table of other chunker sizes."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Container
from dataclasses import dataclass, field, replace

from reindex import cost as costmod
from reindex.domain.config import PipelineConfig
from reindex.domain.kinds import ChangeKind
from reindex.books.manifests import DOC_BATCH, build_rate_key, shard_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.stores.opening import backend_for, footprint_model
from reindex.planner._baseline import Baseline, DocState
from reindex.planner._live_docs import DocsSummary, docs_summary

TRUNCATED_NAMED = 20  # chunks over the model's input limit a plan names (the longest first)
__all__ = [
    "DEFAULT_TOKENS_PER_MINUTE",
    "LENGTH_EDGES",
    "length_histogram",
    "ApplyBatches",
    "BuildRate",
    "DocWork",
    "Rates",
    "RechunkTally",
    "Totals",
    "bucket",
    "bucket_order",
    "build_rate_name",
    "doc_hist",
    "doc_work",
    "payload_old",
    "price_index_build",
    "price_work",
    "what_if",
    "whole_doc_tokens",
]

#: Embedding throughput assumed when neither config nor calibration gives one: all-MiniLM-L6-v2 on
#: two CPU cores measured ~2,000–2,800 tokens/s (ENVIRONMENT.md); 150,000 tokens/min is that middle.
DEFAULT_TOKENS_PER_MINUTE = 150_000.0

def backend_of(cfg: PipelineConfig) -> str:
    """The backend the config writes to (its registry name: its entry declares the cost model that prices it)."""
    return backend_for(cfg.store).name


def index_build_of(cfg: PipelineConfig) -> str:
    """Where the store the config writes to builds its index (its backend's declared ``index_build``)."""
    return backend_for(cfg.store).capabilities.index_build

#: Document lengths (tokens) bucket edges for the report's histogram charts.
LENGTH_EDGES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


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
    missing: tuple[tuple[str, int], ...] = ()  # (fingerprint, tokens) of each distinct text to embed
    reused: frozenset[str] = frozenset()  # fingerprints whose vectors this document reuses
    model_tokens: tuple[int, ...] | None = None  # each chunk in the embedding model's own tokens (None: chunk_tokens are)


def doc_work(
    doc_id: str, status: str, old: DocState | None, fps: list[str], toks: list[int], text_bytes: list[int],
    doc_tokens: int, old_fps_global: Container[str] | None, retained: frozenset[str] = frozenset(),
) -> DocWork:
    """Same-document reuse by fingerprint: a new chunk reuses a vector iff its fingerprint is among
    the old population's fingerprints of the same document; each distinct missing text is embedded once."""
    old_set = (set(old.fingerprints) if old else set()) | retained
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
        missing=tuple(missing.items()),
        reused=frozenset(fp for fp in fps if fp in old_set),
    )


def whole_doc_tokens(pipe: TextPipeline, text: str, chunk_tokens: list[int]) -> int:
    """Tokens of the whole document without tokenising it again: the sum of chunk tokens for
    partitioning chunkers; window arithmetic for sliding windows (window k starts at k·stride)."""
    c = pipe.text.chunker
    overlap = getattr(c, "overlap", 0) or 0
    if not overlap or not chunk_tokens:
        return sum(chunk_tokens)
    if c.kind == "sliding":
        from reindex.adapters.chunkers.sliding import sliding_stride

        return sliding_stride(c.size, c.overlap) * (len(chunk_tokens) - 1) + chunk_tokens[-1]
    return pipe.tokenizer.count(text)


class ApplyBatches:
    """Apply's batching, replayed over the scan so that the plan counts what apply embeds.

    Apply takes each shard's documents in scan order, :data:`reindex.books.manifests.DOC_BATCH` at a time;
    within a batch it first gathers every vector it can reuse (each document's own), then embeds each
    still-missing *text* once. So a text that two documents of one batch miss is embedded once, and not
    at all when another document of the batch reuses it (a licence footer, a repeated notice). The plan
    adds every document's own misses (:func:`doc_work`) to the totals and, when a batch closes, takes
    those duplicates back out. Which documents apply takes, and which of those go through reuse and
    embedding, is given by ``takes`` and ``embeds`` (see :meth:`add`)."""

    def __init__(self, shards: int, takes: Callable[[DocWork], bool], embeds: Callable[[DocWork], bool],
                 embedded: Callable[[str, list[str]], None] | None = None) -> None:
        self._shards, self._takes, self._embeds = shards, takes, embeds
        self._open: dict[int, list[DocWork]] = {}
        self._embedded = embedded  # (doc id, fingerprints apply embeds for it) as each batch closes

    @property
    def shards(self) -> int:
        return self._shards

    def add(self, w: DocWork, t: Totals) -> None:
        """Count ``w`` (already added to ``t``) in its shard's open batch; close the batch when full.
        ``takes(w)``: apply reads the document in this run (it fills a place in a batch); ``embeds(w)``: its
        chunks go through reuse and embedding (not a payload rewrite of unchanged chunks)."""
        t.shard_layout = self._shards
        if not self._takes(w):
            return
        shard = shard_of(w.doc_id, self._shards)
        t.embed_by_shard[shard] += w.tokens_to_embed
        batch = self._open.setdefault(shard, [])
        batch.append(w if self._embeds(w) else replace(w, missing=(), reused=frozenset()))
        if len(batch) >= DOC_BATCH:
            self._close(self._open.pop(shard), t)

    def finish(self, t: Totals) -> None:
        """Close every partly filled batch (the last of each shard)."""
        for shard in sorted(self._open):
            self._close(self._open[shard], t)
        self._open.clear()

    def _close(self, batch: list[DocWork], t: Totals) -> None:
        reused = set().union(*(w.reused for w in batch))
        seen: set[str] = set()
        shard = shard_of(batch[0].doc_id, self._shards) if batch else 0
        for w in batch:
            kept = []
            for fp, tokens in w.missing:
                if fp in reused or fp in seen:  # another document of the batch brings or embeds this text
                    t.chunks_to_embed -= 1
                    t.tokens_to_embed -= tokens
                    t.embed_by_status[w.status] -= tokens
                    t.embed_by_shard[shard] -= tokens
                else:
                    kept.append(fp)
                seen.add(fp)
            if self._embedded is not None and kept:
                self._embedded(w.doc_id, kept)


@dataclass
class RechunkTally:
    """What sticky re-chunking did over a plan's edited documents (``text.rechunk: sticky``)."""

    documents: int = 0  # edited documents re-chunked against their previous chunks
    without_previous: int = 0  # edited documents whose previous chunk texts are not stored: cut statelessly
    previous_chunks: int = 0
    kept: int = 0  # previous chunks kept unchanged
    recut: int = 0  # documents drift control cut freshly
    distances: list = field(default_factory=list)  # drift (W1 / fresh median) of each checked document
    out_of_bounds: list = field(default_factory=list)  # share of chunks outside the size bounds, per checked document

    def add(self, previous: list[str] | None, how) -> None:
        """One edited document: its previous texts (None: not stored) and ``rechunk_detail``'s ``how``."""
        if not previous:
            self.without_previous += 1
            return
        self.documents += 1
        self.previous_chunks += len(previous)
        if how is None:
            return
        self.kept += how.kept
        self.recut += int(how.recut)
        if how.drift is not None:
            self.distances.append(how.drift.distance)
            self.out_of_bounds.append(how.drift.out_of_bounds)

    def as_dict(self, rechunk) -> dict:
        """The plan's ``work.rechunk`` section for the text half's ``rechunk`` config."""
        if rechunk.mode != "sticky":
            return {"mode": rechunk.mode}
        d, o = self.distances, self.out_of_bounds
        return {
            "mode": "sticky",
            "documents": self.documents,
            "without_previous_texts": self.without_previous,
            "previous_chunks": self.previous_chunks,
            "kept_chunks": self.kept,
            "recut_documents": self.recut,
            "drift": {
                "checked_documents": len(d),
                "distance_mean": round(sum(d) / len(d), 6) if d else None,
                "distance_max": round(max(d), 6) if d else None,
                "out_of_bounds_mean": round(sum(o) / len(o), 6) if o else None,
                "out_of_bounds_max": round(max(o), 6) if o else None,
                "max_drift": rechunk.max_drift,
                "max_out_of_bounds": rechunk.max_out_of_bounds,
            },
        }


@dataclass
class Totals:
    """Running totals and distributions of a plan's work (mutable while the corpus is scanned)."""

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
    unreadable: list = field(default_factory=list)  # live documents the scan could not read: kept
    # distributions for the report and sensitivity tables
    doc_tokens: Counter = field(default_factory=Counter)  # a document's tokens → documents of that length
    chunk_len_old: Counter = field(default_factory=Counter)
    chunk_len_new: Counter = field(default_factory=Counter)
    lengths_old: Counter = field(default_factory=Counter)  # exact chunk lengths (tokens → chunks) for the
    lengths_new: Counter = field(default_factory=Counter)  # histogram in the two populations' own range
    embed_by_status: Counter = field(default_factory=Counter)
    tail_chunks: int = 0
    tail_docs: int = 0
    rechunk: RechunkTally = field(default_factory=RechunkTally)
    model_limit: int | None = None  # the model's input limit in tokens (None: unknown, nothing counted)
    over_limit: int = 0  # chunks longer than model_limit
    limit_checked: int = 0  # chunks compared with it
    limit_in_model_tokens: bool = False  # counted in DocWork.model_tokens: unchanged documents are not compared
    truncated: list = field(default_factory=list)  # a heap of the longest (tokens, doc id, ordinal) over the limit
    # tokens apply embeds per shard (apply's batching replayed by ApplyBatches, which sets the layout; 0: not
    # counted, e.g. a sampled plan): what a remote runner deals work units by
    embed_by_shard: Counter = field(default_factory=Counter)
    shard_layout: int = 0

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
        self.doc_tokens[w.doc_tokens] += 1
        for t in w.chunk_tokens:
            self.chunk_len_new[bucket(t)] += 1
            self.lengths_new[t] += 1
        counted = w.model_tokens if w.model_tokens is not None else w.chunk_tokens
        if self.model_limit and (w.model_tokens is not None or not self.limit_in_model_tokens):
            for ordinal, t in enumerate(counted):
                if t > self.model_limit:
                    self.over_limit += 1
                    heapq.heappush(self.truncated, (t, w.doc_id, ordinal))
                    if len(self.truncated) > TRUNCATED_NAMED:
                        heapq.heappop(self.truncated)
            self.limit_checked += len(counted)
        self.embed_by_status[w.status] += w.tokens_to_embed
        if w.doc_tokens > tail_tokens:
            self.tail_docs += 1
            self.tail_chunks += w.chunks_new


    def add_unchanged(self, s: DocsSummary, tail_tokens: int) -> None:
        """Documents the live population holds unchanged (same pipeline, same bytes), as totals: what
        ``add`` of each one's work (:func:`reindex.planner._change.unchanged_work`) adds up to."""
        self.docs["unchanged"] += s.documents
        self.chunks_old += s.chunks
        self.chunks_new += s.chunks
        self.chunks_reused += s.chunks
        self.tokens_new += s.tokens
        self.doc_tokens.update(s.doc_tokens)
        for t, n in s.lengths.items():
            self.chunk_len_new[bucket(t)] += n
            self.lengths_new[t] += n
        if self.model_limit and not self.limit_in_model_tokens:
            self.over_limit += sum(n for t, n in s.lengths.items() if t > self.model_limit)
            self.limit_checked += s.chunks
        self.tail_docs += sum(n for t, n in s.doc_tokens.items() if t > tail_tokens)
        self.tail_chunks += sum(n for t, n in s.doc_chunks.items() if t > tail_tokens)


def bucket(tokens: int) -> str:
    """The length bucket (``LENGTH_EDGES``) a token count falls in, e.g. ``"128-255"``."""
    lo = 0
    for edge in LENGTH_EDGES:
        if tokens < edge:
            return f"{lo}-{edge - 1}"
        lo = edge
    return f"{lo}+"


_ROUND_WIDTHS = sorted({m * 10**e for e in range(10) for m in (1, 2, 5)} | {25 * 10**e for e in range(9)})


def length_histogram(old: Counter, new: Counter, max_buckets: int = 12) -> dict:
    """Chunks per chunk length of both populations over their own range, in equal buckets of a round width
    (1, 2, 5 × 10ⁿ or 25 × 10ⁿ tokens), at most ``max_buckets``: a 250 → 200 change lands in different bars.
    ``{"buckets": ["200-224", …], "old": [...], "new": [...]}``; empty lists when there is no chunk."""
    lengths = [n for n, c in (*old.items(), *new.items()) if c]
    if not lengths:
        return {"buckets": [], "old": [], "new": []}
    lo, hi = min(lengths), max(lengths)
    width = next(w for w in _ROUND_WIDTHS if hi // w - lo // w + 1 <= max_buckets)
    first = lo // width
    n = hi // width - first + 1
    out = {"buckets": [f"{(first + i) * width}-{(first + i + 1) * width - 1}" if width > 1 else str(first + i)
                       for i in range(n)], "old": [0] * n, "new": [0] * n}
    for side, counts in (("old", old), ("new", new)):
        for length, c in counts.items():
            out[side][length // width - first] += round(c)
    return out


def bucket_order() -> list[str]:
    """All length buckets, shortest first."""
    out, lo = [], 0
    for edge in LENGTH_EDGES:
        out.append(f"{lo}-{edge - 1}")
        lo = edge
    return out + [f"{lo}+"]


def doc_hist(doc_tokens: Counter) -> list[int]:
    """Documents per length bucket, in ``bucket_order()`` (``doc_tokens``: a document's tokens → documents)."""
    counts: Counter = Counter()
    for n, c in doc_tokens.items():
        counts[bucket(n)] += c
    return [counts.get(b, 0) for b in bucket_order()]


def payload_old(baseline: Baseline) -> int:
    """The old population's payload bytes (its chunk texts are not in the manifest: estimated from tokens)."""
    return docs_summary(baseline.docs).payload


@dataclass(frozen=True, slots=True)
class BuildRate:
    """What a plan prices the index build with (:func:`reindex.cost.price_build`): where the build runs
    (``apply``: in the apply process, the embedded edge store; ``server``: on the Qdrant server; ``none``: local
    mode, brute-force search), the CPUs its threads may use (None: unknown, Qdrant's most automatic threads are
    assumed: a server), and the build an apply measured with the same parameters (None: the bench's figures)."""

    runs: str = "apply"
    cpus: int | None = None
    measured: dict | None = None


@dataclass(frozen=True, slots=True)
class Rates:
    usd_per_mtok: float
    tokens_per_minute: float
    source: str  # config | apply | calibration | sampled | default
    measured: dict | None = None  # apply / calibration / sampled: by, at (ISO UTC), machine, plan_hash, tokens, seconds, …
    # What the hours assume from a measured rate (reindex.foundation.throughput.plan_rate): basis (per CPU-second or per
    # worker wall-second), workers, CPUs. None: the rate is the whole apply's, as configured or by default.
    assumes: dict | None = None
    # The index build's rate (None: priced from the bench's figures, where the config's backend builds, one CPU).
    build: BuildRate | None = None


def _stored_precision(cfg: PipelineConfig) -> str:
    """The precision the footprint prices: int8 when the store quantises (store.quantization), else the
    vector half's."""
    return "int8" if cfg.store.quantization == "int8" else cfg.vector.precision


def build_rate_name(cfg: PipelineConfig) -> str:
    """The name the index build of ``cfg``'s populations is measured and looked up under
    (:func:`reindex.books.manifests.build_rate_key`: backend, dimension, stored precision, m, ef_construct)."""
    hnsw = cfg.store.hnsw
    return build_rate_key(backend_of(cfg), cfg.vector.dimension, _stored_precision(cfg), hnsw.m, hnsw.ef_construct)


def price_work(kind: str, t: Totals, cfg: PipelineConfig, baseline: Baseline, rates: Rates) -> dict:
    """The plan's ``cost`` section: dollars, hours, vectors and footprint of the totals."""
    dim_old = baseline.config.vector.dimension if baseline.config else cfg.vector.dimension
    prec_old = _stored_precision(baseline.config) if baseline.config else _stored_precision(cfg)
    work = costmod.Work(
        chunks_old=t.chunks_old,
        chunks_new=t.chunks_new,
        chunks_reused=t.chunks_reused,
        tokens_to_embed=t.tokens_to_embed,
        payload_bytes_old=t.payload_old,
        payload_bytes_new=t.payload_new,
        dimension=cfg.vector.dimension,
        precision=_stored_precision(cfg),
        dimension_old=dim_old,
        precision_old=prec_old,
    )
    c = costmod.price(work, usd_per_mtok=rates.usd_per_mtok, tokens_per_minute=rates.tokens_per_minute)
    backend = backend_of(cfg)
    mode = ChangeKind.of(kind).footprint_mode
    peak_vectors, fp = costmod.footprint(work, mode, added_points=t.chunks_to_embed, backend=backend)
    peak = fp.peak

    def usage(u: costmod.Usage) -> dict:
        return {"ram_bytes": u.ram_bytes, "disk_bytes": u.disk_bytes}

    return {
        "usd": round(c.usd, 6),
        "hours": round(c.hours, 6),
        "usd_per_mtok": rates.usd_per_mtok,
        "tokens_per_minute": rates.tokens_per_minute,
        "rate_source": rates.source,
        "rate_measured": rates.measured,
        "rate_assumes": rates.assumes,
        "vectors_old": c.vectors_old,
        "vectors_new": c.vectors_new,
        "vectors_embedded": t.chunks_to_embed,
        "peak_vectors": peak_vectors,
        "footprint": {"old": usage(fp.old), "new": usage(fp.new), "peak": usage(peak), "backend": backend,
                      "mode": mode},
        "formula": footprint_model(backend).formula,
        "index_build": price_index_build(kind, t, cfg, rates),
    }


#: What the measured build a plan shows beside its price (from the record apply writes).
_BUILD_MEASURED_KEYS = ("points", "cpu_seconds", "seconds", "cpu_seconds_per_point", "load", "cpus", "machine", "at",
                        "plan_hash")


def price_index_build(kind: str, t: Totals, cfg: PipelineConfig, rates: Rates) -> dict:
    """The plan's ``cost.index_build``: the HNSW build of the points the change indexes, with the config's graph
    parameters (``store.hnsw``) and stored precision, priced by :func:`reindex.cost.price_build`. A new population
    (initial, pipeline-scoped) indexes all its points in one build; an in-place change the points it writes (as
    their small segments are sealed: the formula at that many points); payload-only and no-op changes none."""
    k = ChangeKind.of(kind)
    points = t.chunks_new if k.builds_population else (t.chunks_to_embed if k == ChangeKind.DOCUMENT else 0)
    b = rates.build or BuildRate(runs=index_build_of(cfg))
    hnsw, precision = cfg.store.hnsw, _stored_precision(cfg)
    params = {"m": hnsw.m, "ef_construct": hnsw.ef_construct, "precision": precision,
              "dimension": cfg.vector.dimension}
    if b.runs == "none":
        return {"points": points, "cpu_seconds": 0.0, "seconds": 0.0, "hours": 0.0, "cpu_seconds_per_point": 0.0,
                "threads": None, "source": "none", "runs": "none", "params": params, "measured": None,
                "formula": "none: store.backend local searches by brute force and builds no index"}
    cpus = b.cpus if b.cpus is not None else costmod.MAX_INDEXING_THREADS
    price = costmod.price_build(points, m=hnsw.m, ef_construct=hnsw.ef_construct, dimension=cfg.vector.dimension,
                                precision=precision, measured=b.measured, cpus=cpus)
    measured = {k: b.measured[k] for k in _BUILD_MEASURED_KEYS if k in b.measured} if b.measured else None
    return {
        "points": points,
        "cpu_seconds": round(price.cpu_seconds, 3),
        "seconds": round(price.seconds, 3),
        "hours": round(price.seconds / 3600, 6),
        "cpu_seconds_per_point": round(price.cpu_seconds_per_point, 7),
        "threads": price.threads,
        "source": price.source,
        "runs": b.runs,
        "params": params,
        "measured": measured,
        "formula": costmod.BUILD_FORMULA,
    }


def what_if(cfg: PipelineConfig, doc_tokens: Counter, t: Totals, rates: Rates, *, projected: bool = False) -> list[dict]:
    """Other sizes/overlaps of the same chunker family. Window kinds (fixed, sliding): seed-001 window
    arithmetic over the documents' token lengths. Other kinds: ceil(doc tokens / size), scaled by the ratio
    of this plan's chunk count to that formula at the current size (stated as such).

    The current config's row is this plan's own figure (its chunks and tokens, exact, or the projection of
    a sampled plan), never a formula: ceil(n / size) undercounts partitioning chunkers, which cut at
    separators before the size is reached (−17 % for recursive:size=150 and −44 % for sentence:size=200 on
    the sample corpus), and a sampled plan's document lengths are only those of its sample."""
    rows = _what_if_rows(cfg, doc_tokens, t, rates)
    current = next((r for r in rows if r["current"]), None)
    if current is None:
        return rows
    formula = current["chunks"]
    if cfg.text.chunker.kind not in ("fixed", "sliding") or projected:
        # Other rows: the formula, scaled so that it meets the exact figure at the current size.
        scale = t.chunks_new / formula if formula else 1.0
        for r in rows:
            if not r["current"]:
                r["chunks"] = round(r["chunks"] * scale)
                r["method"] = f"{r['method']}; scaled ×{scale:.3f} to this plan's count at the current size"
    current.update(
        chunks=t.chunks_new,
        tokens_full_reembed=t.tokens_new,
        method="this plan's projection (sampled)" if projected else "exact: this plan's chunks",
    )
    if cfg.text.chunker.kind not in ("fixed", "sliding"):
        # A row's own tokens: this plan's, plus what its extra chunks repeat (the overlap this plan measured
        # per chunk beyond one per document; 0 for a partitioning chunker, which embeds each token once).
        docs = {n: c for n, c in doc_tokens.items() if n > 0}
        extra = t.chunks_new - sum(docs.values())
        repeated = 0.0 if projected or extra <= 0 else max(0.0, (t.tokens_new - sum(n * c for n, c in docs.items())) / extra)
        for r in rows:
            if not r["current"]:
                r["tokens_full_reembed"] = max(0, t.tokens_new + round((r["chunks"] - t.chunks_new) * repeated))
    _price_rows(rows, current, cfg, rates)
    return rows


# Tokens a sentence-transformers (BERT-style) model adds to every input: [CLS] and [SEP].
_SPECIAL_TOKENS = {"sentence-transformers": 2}


def _price_rows(rows: list[dict], current: dict, cfg: PipelineConfig, rates: Rates) -> None:
    """Price each what-if row with its own token count: dollars per text token; wall clock per token the model
    reads (the chunk's tokens plus the model's special tokens per input). The measured throughput counts text
    tokens at the current chunking; it is converted to model tokens there, so smaller chunks, which each add
    their special tokens, take longer for the same text."""
    specials = _SPECIAL_TOKENS.get(cfg.vector.provider, 0)
    cur_tokens = current["tokens_full_reembed"]
    per_minute = rates.tokens_per_minute * ((cur_tokens + specials * current["chunks"]) / cur_tokens if cur_tokens else 1.0)
    for r in rows:
        r["usd"] = round(costmod.usd(r["tokens_full_reembed"], rates.usd_per_mtok), 6)
        r["hours"] = round(costmod.hours(r["tokens_full_reembed"] + specials * r["chunks"], per_minute), 6)


def _what_if_rows(cfg: PipelineConfig, doc_tokens: Counter, t: Totals, rates: Rates) -> list[dict]:
    """The formula rows of :func:`what_if` (the current row included, as a formula); ``doc_tokens``: a document's
    tokens → documents of that length."""
    c = cfg.text.chunker
    rows = []
    if c.kind in ("fixed", "sliding"):
        overlaps = costmod.WHAT_IF_OVERLAPS if c.kind == "sliding" else (0.0,)
        for size in sorted(set(costmod.WHAT_IF_SIZES) | {c.size}):
            for ov in sorted(set(overlaps) | {getattr(c, "overlap", 0.0)}):
                chunks = sum(costmod.chunk_count(n, size, ov) * c for n, c in doc_tokens.items() if n > 0)
                tokens = sum(costmod.billed_tokens(n, size, ov) * c for n, c in doc_tokens.items() if n > 0)
                rows.append({
                    "chunker": f"{c.kind}:size={size}" + (f",overlap={ov:g}" if c.kind == "sliding" else ""),
                    "chunks": chunks,
                    "tokens_full_reembed": tokens,
                    "usd": round(costmod.usd(tokens, rates.usd_per_mtok), 6),
                    "hours": round(costmod.hours(tokens, rates.tokens_per_minute), 6),
                    "method": "window arithmetic",
                    "current": size == c.size and math.isclose(ov, getattr(c, "overlap", 0.0)),
                })
    else:
        size = getattr(c, "size", None) or getattr(c, "max", None)
        if size:
            for factor in (0.5, 0.75, 1.0, 1.5, 2.0):
                s = max(1, int(size * factor))
                # Documents shorter than the target stay one chunk; longer ones scale with 1/size.
                chunks = sum((1 if n <= s else math.ceil(n / s)) * c for n, c in doc_tokens.items() if n > 0)
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
