"""The forecast: the cutover's evaluation run on a sample of both sides before a plan is approved — "what it
buys" beside "what it costs" (DESIGN.md invariant 15).

Both sides are built in a scratch store that never holds an alias of the index: the old side from the live
population's own points for the sampled documents (their stored vectors and payloads, read through a reader:
nothing embedded), the new side by chunking the sampled documents with the new config and embedding what the
old side cannot lend (a chunker change reuses every vector whose text and model are unchanged, as apply does).
Then :func:`reindex.decisions.evaluation.evaluate` compares them on the same queries the cutover will use, and
:func:`reindex.decisions.evaluation.verdict` says better / worse / no measurable difference / cannot tell. The sample is
the length-stratified draw of ``plan --sample`` plus every document a labelled query points at (or that the
cutover's probes come from), so each query's answer is in the haystack of both sides."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reindex.domain.config import PipelineConfig
from reindex.decisions.evaluation import Query, gate_metrics
from reindex.decisions.gate import gate_outlook
from reindex.engine.execution import point_payload
from reindex.domain.identity import identity_of
from reindex.books.layout import Books
from reindex.books.manifests import Population, read_chunk_manifest_columns, read_population
from reindex.errors import ReindexError
from reindex.domain.kinds import PopulationState
from reindex.books.pairs import PairSet, pairs_from_points, sample_points
from reindex.adapters.pipeline import TextPipeline
from reindex.planner import draw_stratified
from reindex.decisions.serving import (EvaluationMemo, ModeInputs, ModeQuery, cost_sample, evaluate_modes,
                                       measure_reader, recommend)
from reindex.adapters.sources.base import Document
from reindex.adapters.stores.payload import payload_text
from reindex.adapters.stores.vectors import Point

__all__ = ["FORECAST_OLD", "FORECAST_NEW", "AGREEMENT_CHUNKS", "FORECAST_MIN_DOCUMENTS", "FORECAST_SHARE", "ChunkedSample",
           "SampleDraw", "agreement", "build_new_side", "build_old_side", "chunk_sample", "default_forecast_documents",
           "draw_forecast_sample", "forecast_section", "forecast_serving", "retained_vectors", "share_space"]

FORECAST_OLD = "forecast-old"
FORECAST_NEW = "forecast-new"
#: Chunks of the sample embedded with both models to compare their vectors and speeds (a vector-half change).
AGREEMENT_CHUNKS = 32

Embed = Callable[[list[str]], Any]


@dataclass(frozen=True, slots=True)
class SampleDraw:
    """The documents both sides are built from, and how they were drawn (for the plan)."""

    documents: frozenset[str]
    stratified: int
    labelled: int
    corpus_documents: int
    seed: int

    def describe(self) -> dict[str, Any]:
        return {"method": "length-stratified (8 byte-size strata, at least 2 each, the rest proportional; seeded) "
                          "plus every document a query points at",
                "stratified": self.stratified, "query_documents": self.labelled, "documents": len(self.documents),
                "corpus_documents": self.corpus_documents, "seed": self.seed}


#: ``plan --forecast`` without a number samples this share of the corpus's documents ...
FORECAST_SHARE = 0.10
#: ... and at least this many (the query documents count towards it).
FORECAST_MIN_DOCUMENTS = 30
#: A length-stratified draw takes at least two of each of its 8 strata.
_STRATA_MINIMUM = 16


def default_forecast_documents(corpus_documents: int) -> int:
    """The sample ``plan --forecast`` takes without a number: :data:`FORECAST_SHARE` of the corpus, at least
    :data:`FORECAST_MIN_DOCUMENTS` (all of a smaller corpus)."""
    return min(corpus_documents, max(FORECAST_MIN_DOCUMENTS, math.ceil(FORECAST_SHARE * corpus_documents)))


def draw_forecast_sample(sizes: dict[str, int], n: int, seed: int, queries: Sequence[Query], *,
                         total: bool = False) -> SampleDraw:
    """``n`` documents drawn by length (``sizes``: doc id → bytes) plus the documents the queries point at;
    ``total``: ``n`` caps the whole sample, the query documents included (the draw by length takes the rest, at
    least two of each stratum)."""
    wanted = {d for q in queries for d in q.relevant if d in sizes}
    if total:
        n = max(_STRATA_MINIMUM, n - len(wanted))
    drawn = draw_stratified(sizes, min(n, len(sizes)), seed).chosen if sizes else set()
    return SampleDraw(frozenset(drawn | wanted), len(drawn), len(wanted - drawn), len(sizes), seed)


def build_old_side(scratch: Any, reader: Any, state: Any, live: Population, documents: Iterable[str],
                   texts: dict[str, Any] | None = None) -> dict[str, Any]:
    """The live population restricted to ``documents``, copied point for point (vectors and payloads) into the
    scratch collection :data:`FORECAST_OLD` (nothing embedded); returns ``fingerprint → vector`` for the new side's
    reuse, and fills ``texts`` (chunk text → the old model's vector) when given."""
    wanted = set(documents)
    ids = [p for cols in read_chunk_manifest_columns(state, live.index, live.collection, ["doc_id", "point_id"])
           for d, p in zip(cols["doc_id"], cols["point_id"]) if d in wanted]
    cfg = live.config
    scratch.create_collection(FORECAST_OLD, dimension=cfg.vector.dimension, distance=cfg.vector.distance)
    by_fp: dict[str, Any] = {}
    for start in range(0, len(ids), 512):
        points = reader.retrieve(live.collection, ids[start:start + 512], with_vectors=True)
        scratch.upsert(FORECAST_OLD, [Point(p.id, p.vector, p.payload) for p in points])
        for p in points:
            fp = p.payload.get("fingerprint")
            if fp:
                by_fp[fp] = p.vector
            if texts is not None:
                texts[payload_text(p.payload, cfg.payload)] = p.vector
    scratch.create_payload_index(FORECAST_OLD, "doc_id", "keyword")
    return by_fp


@dataclass(frozen=True, slots=True)
class ChunkedSample:
    """The new side's chunks of the sampled documents (cut before anything is embedded, so that the forecast can say
    what it will cost first): per document its records and metadata, and the distinct texts no old vector covers."""

    docs: tuple[tuple[Any, tuple[Any, ...]], ...]  # (document metadata, its chunk records)
    missing: tuple[tuple[str, int], ...]  # (text, tokens) of each distinct text to embed, in order
    chunks: int
    reused: int


def chunk_sample(cfg: PipelineConfig, docs: Iterable[Document], reusable: dict[str, Any]) -> ChunkedSample:
    """Cut the sampled documents with ``cfg``; every chunk whose fingerprint ``reusable`` holds (the live population's
    vectors of the same text and model, or a retained population's) needs no embedding."""
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    out, missing, chunks, reused = [], {}, 0, 0
    for doc in docs:
        records = tuple(pipe.chunk_document(doc))
        out.append((doc.meta(), records))
        chunks += len(records)
        for r in records:
            if r.fingerprint in reusable:
                reused += 1
            else:
                missing.setdefault(r.text, r.tokens)
    return ChunkedSample(tuple(out), tuple(missing.items()), chunks, reused)


def build_new_side(scratch: Any, cfg: PipelineConfig, sample: ChunkedSample, embed: Embed,
                   reusable: dict[str, Any], *, batch: int = 64) -> dict[str, Any]:
    """The sampled documents' chunks (:func:`chunk_sample`) into :data:`FORECAST_NEW`, each with the vector ``reusable``
    holds for its fingerprint, or the new model's (each distinct missing text embedded once). No index is built:
    the sample is small enough to be searched exactly (its answers are the exact ones; the index that will serve
    the full population is checked by the cutover's index health). Returns what it cost: chunks, chunks and tokens
    embedded, CPU-seconds and wall seconds of the embedding calls, and the texts embedded (for the agreement)."""
    ident = identity_of(cfg)
    scratch.create_collection(FORECAST_NEW, dimension=cfg.vector.dimension, distance=cfg.vector.distance)
    cpu = wall = 0.0
    vectors_of: dict[str, Any] = {}  # chunk text → the vector the new model gave it
    texts = [t for t, _ in sample.missing]
    for start in range(0, len(texts), batch):
        part = texts[start:start + batch]
        c0, w0 = time.process_time(), time.perf_counter()
        vecs = embed(part)
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        vectors_of.update(zip(part, vecs))
    points: list[Point] = []
    for meta, records in sample.docs:
        points += [Point(r.point_id, reusable[r.fingerprint] if r.fingerprint in reusable else vectors_of[r.text],
                         point_payload(cfg, ident.pipeline_id, r, meta)) for r in records]
        if len(points) >= 512:  # one durable write per 512 points, not per document (each write flushes)
            scratch.upsert(FORECAST_NEW, points)
            points = []
    if points:
        scratch.upsert(FORECAST_NEW, points)
    scratch.create_payload_index(FORECAST_NEW, "doc_id", "keyword")
    return {"chunks": sample.chunks, "embedded_chunks": sample.chunks - sample.reused,
            "tokens": sum(n for _, n in sample.missing), "embed_cpu_seconds": cpu, "wall_seconds": wall,
            "texts": texts}


def retained_vectors(reader: Any, state: Any, index: str, vector_id: str, documents: Iterable[str],
                     skip: Iterable[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """``fingerprint → vector`` of the sampled ``documents``' chunks that a retained population (built, not live:
    ready or retired) of the same vector half holds — the vectors the plan reuses from it, which the forecast need
    not embed again — and the populations read. Populations in ``skip`` (the live one: the old side lends its own)
    and ones readers cannot open (never published) are passed over."""
    wanted, skipped = set(documents), set(skip)
    found: dict[str, Any] = {}
    used = []
    for collection in sorted(Books(state, index).collections()):
        rec = read_population(state, index, collection)
        if rec is None or rec.collection in skipped or rec.state not in (PopulationState.READY, PopulationState.RETIRED) \
                or rec.vector_id != vector_id:
            continue
        rows = [(p, f) for cols in read_chunk_manifest_columns(state, index, rec.collection,
                                                               ["doc_id", "point_id", "fingerprint"])
                for d, p, f in zip(cols["doc_id"], cols["point_id"], cols["fingerprint"])
                if d in wanted and f not in found]
        try:
            for start in range(0, len(rows), 512):
                for p in reader.retrieve(rec.collection, [r[0] for r in rows[start:start + 512]], with_vectors=True):
                    fp = p.payload.get("fingerprint")
                    if fp and p.vector is not None:
                        found.setdefault(fp, p.vector)
        except ReindexError:
            continue  # not readable beside a writer (a shadow never published): embedded instead
        used.append(rec.collection)
    return found, used


def share_space(old: PipelineConfig, new: PipelineConfig) -> bool:
    """Whether the two vector halves put texts in one space (the same model files run another way: a backend,
    a precision, a prefix), so that their vectors of one text can be compared by cosine."""
    a, b = old.vector, new.vector
    return (a.provider, a.model, a.dimension, a.distance) == (b.provider, b.model, b.dimension, b.distance)


def agreement(texts: Sequence[str], embed_old: Embed, embed_new: Embed, same_space: bool, token_count: Callable[
        [list[str]], list[int]], *, old_known: dict[str, Any] | None = None,
        old_rate: float | None = None) -> dict[str, Any]:
    """Both models on the same sampled chunk texts: each one's speed in tokens per CPU-second (process CPU time
    of the call, so a busy machine does not halve it), and their mean cosine when they share a space. ``old_known``
    (text → the old model's stored vector, from the live population) and ``old_rate`` (its measured tokens per
    CPU-second) spare loading the old model when they cover the texts."""
    texts = list(texts)[:AGREEMENT_CHUNKS]
    if not texts:
        return {}
    n_tokens = sum(token_count(texts))
    out: dict[str, Any] = {"chunks": len(texts), "tokens": n_tokens}
    vecs = {}
    if old_known is not None and old_rate and all(t in old_known for t in texts):
        vecs["old"] = np.asarray([old_known[t] for t in texts], dtype=np.float32)
        out["old_tokens_per_cpu_second"] = round(float(old_rate), 1)
        out["old_rate"] = "measured by its last apply (its vectors read from the live population)"
    for side, embed in (("old", embed_old), ("new", embed_new)):
        if side in vecs:
            continue
        c0 = time.process_time()
        vecs[side] = np.asarray(embed(texts), dtype=np.float32)
        cpu = max(time.process_time() - c0, 1e-9)
        out[f"{side}_tokens_per_cpu_second"] = round(n_tokens / cpu, 1)
    out["speed_ratio"] = round(out["new_tokens_per_cpu_second"] / out["old_tokens_per_cpu_second"], 3)
    if same_space and vecs["old"].shape == vecs["new"].shape:
        a, b = vecs["old"], vecs["new"]
        cos = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
        out["mean_cosine"] = round(float(cos.mean()), 4)
    return out


def forecast_section(evaluation: dict, k: int, sample: SampleDraw, query_source: str, cost: dict,
                     agree: dict | None, policy: Any = None) -> dict[str, Any]:
    """The plan's ``forecast`` section from an evaluation of the two scratch sides; with ``policy`` (the config's
    ``cutover``), its ``power``: what the cutover's gate can tell from the same queries, per gated metric
    (:func:`reindex.decisions.evaluation.gate_outlook`), and ``gate_outlook``, the line approvers read when a rule
    cannot decide."""
    agg = evaluation["aggregate"]
    metrics = {}
    for m in gate_metrics(k):
        if f"{m}_diff" in agg:
            d = agg[f"{m}_diff"]
            metrics[m] = {"old": round(agg[f"{m}_old"], 6), "new": round(agg[f"{m}_new"], 6),
                          "diff": round(d["mean"], 6), "low": round(d["low"], 6), "high": round(d["high"], 6),
                          "verdict": agg.get("metrics", {}).get(m)}
    out: dict[str, Any] = {
        "sample_documents": len(sample.documents), "sample": sample.describe(),
        "queries": {"source": query_source, "count": agg.get("queries", 0)},
        "k": k, "metrics": metrics, "verdict": agg.get("verdict", "cannot tell"),
        f"overlap_at_{k}": round(agg.get(f"overlap_at_{k}", 0.0), 6), "rbo": round(agg.get("rbo", 0.0), 6),
        "cost": {"tokens": cost["tokens"], "embedded_chunks": cost["embedded_chunks"], "chunks": cost["chunks"],
                 "seconds": round(cost["seconds"], 3), "cpu_seconds": round(cost["cpu_seconds"], 3),
                 **{key: (round(cost[key], 3) if isinstance(cost[key], float) else cost[key])
                    for key in ("embed_cpu_seconds", "projected_cpu_seconds", "retained_populations") if key in cost}},
    }
    if policy is not None:
        outlook = gate_outlook(agg, policy, k)
        out["power"] = outlook["metrics"]
        out["gate_outlook"] = outlook["line"]
    if evaluation.get("segments"):
        out["segments"] = evaluation["segments"]  # per segment, as the cutover's gate will see them
    if agree:
        out["agreement"] = agree
    return out


def forecast_serving(scratch: Any, old_cfg: PipelineConfig, new_cfg: PipelineConfig, queries: list[Query],
                     embed_old: Embed, embed_new: Embed, embed_passages: Embed, full: dict,
                     embed_candidates: Embed | None = None) -> dict[str, Any]:
    """A model change's serving modes on the forecast's two sides: a bridge fitted from the sample's free pairs
    (both sides hold each sampled chunk text: its two vectors, up to ``serving.pairs`` of them) and the cascade,
    each gated against the old side exactly as during the build (:func:`reindex.decisions.serving.evaluate_modes`), and
    what the evidence supports (:func:`reindex.decisions.serving.recommend`: reindex now, bridge, cascade or stay).
    With what readers will pay per query (``readers``): the bridge's, and the cascade's at the start of the build
    (every candidate embedded by the reader: ``embed_candidates``, a reader's embedder) and once it is built (every
    candidate read from the shadow), measured on the sample's two sides in this process."""
    s = new_cfg.serving
    points = list(scratch.scroll(FORECAST_NEW, with_vectors=True))
    picked, occ = sample_points(points, s.pairs or len(points))
    old_vid, new_vid = identity_of(old_cfg).vector_id, identity_of(new_cfg).vector_id
    old_ids, new_ids, old_vecs, new_vecs = pairs_from_points(scratch, FORECAST_OLD, picked, occ, old_vid,
                                                             new_cfg.payload)
    pairs = PairSet(old_vecs, new_vecs, tuple(old_ids), tuple(new_ids), (), old_vid, new_vid) if old_ids else None
    memo = EvaluationMemo()
    k, seed = new_cfg.cutover.k, new_cfg.cutover.seed
    candidates = embed_candidates or embed_passages
    modes, _, native = evaluate_modes(ModeInputs(
        store=scratch, live=FORECAST_OLD, shadow=FORECAST_NEW, live_cfg=old_cfg, new_cfg=new_cfg, queries=queries,
        embed_old=embed_old, embed_new=embed_new, embed_passages=embed_passages, serving=s, cutover=new_cfg.cutover,
        pairs=pairs, k=k, seed=seed, reader=scratch, embed_candidates=candidates, memo=memo))
    readers: dict[str, Any] = {}
    if native:
        readers["old"] = native["old"]
    if (modes.get("bridge") or {}).get("cost"):
        readers["bridge"] = modes["bridge"]["cost"]
    if (modes.get("cascade") or {}).get("cost"):
        start = measure_reader(ModeQuery(scratch, FORECAST_OLD, "cascade", None, None, embed_old, embed_new,
                                         candidates, s.candidates, new_vid, old_cfg.payload, new_cfg.vector.distance),
                               cost_sample(queries, seed), memo, k=k, limit_ms=None)
        readers["cascade"] = {"at_start": start, "built": modes["cascade"]["cost"]}
    out = recommend(full, modes, s, k)
    out["pairs"] = pairs.n if pairs is not None else 0
    out["modes"] = {m: {"passed": e.get("passed", False), "gate": e.get("gate", {}), "rules": e.get("rules", []),
                        **({"cost": e["cost"]} if "cost" in e else {}),
                        **({"bridge": e["bridge"]} if "bridge" in e else {})} for m, e in modes.items()}
    out["readers"] = readers
    return out
