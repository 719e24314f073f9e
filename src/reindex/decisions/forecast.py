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
from reindex.books.manifests import Population, read_chunk_manifest_columns
from reindex.books.pairs import PairSet, pairs_from_points, sample_points
from reindex.adapters.pipeline import TextPipeline
from reindex.planner import draw_stratified
from reindex.decisions.serving import ModeInputs, evaluate_modes, recommend
from reindex.adapters.sources.base import Document
from reindex.adapters.stores.vectors import Point

__all__ = ["FORECAST_OLD", "FORECAST_NEW", "AGREEMENT_CHUNKS", "SampleDraw", "agreement", "build_new_side",
           "build_old_side", "draw_forecast_sample", "forecast_section", "forecast_serving", "share_space"]

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


def draw_forecast_sample(sizes: dict[str, int], n: int, seed: int, queries: Sequence[Query]) -> SampleDraw:
    """``n`` documents drawn by length (``sizes``: doc id → bytes) plus the documents the queries point at."""
    drawn = draw_stratified(sizes, min(n, len(sizes)), seed).chosen if sizes else set()
    wanted = {d for q in queries for d in q.relevant if d in sizes}
    return SampleDraw(frozenset(drawn | wanted), len(drawn), len(wanted - drawn), len(sizes), seed)


def build_old_side(scratch: Any, reader: Any, state: Any, live: Population, documents: Iterable[str]) -> dict[str, Any]:
    """The live population restricted to ``documents``, copied point for point (vectors and payloads) into the
    scratch collection :data:`FORECAST_OLD`; returns ``fingerprint → vector`` for the new side's reuse."""
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
    scratch.create_payload_index(FORECAST_OLD, "doc_id", "keyword")
    scratch.finish_bulk(FORECAST_OLD)
    return by_fp


def build_new_side(scratch: Any, cfg: PipelineConfig, docs: Iterable[Document], embed: Embed,
                   reusable: dict[str, Any], *, batch: int = 64) -> dict[str, Any]:
    """The sampled documents chunked and embedded with ``cfg`` into :data:`FORECAST_NEW`; a chunk whose
    fingerprint the old side holds (same text, same vector half) takes that vector. Returns what it cost:
    chunks, chunks and tokens embedded, process CPU-seconds and wall seconds of the embedding calls, and the
    texts embedded (for the agreement check)."""
    ident = identity_of(cfg)
    pipe = TextPipeline(cfg.text, ident.vector_id)
    scratch.create_collection(FORECAST_NEW, dimension=cfg.vector.dimension, distance=cfg.vector.distance)
    chunks = embedded = tokens = 0
    cpu = wall = 0.0
    texts_embedded: list[str] = []
    vectors_of: dict[str, Any] = {}  # chunk text → the vector the new model gave it
    for doc in docs:
        records = pipe.chunk_document(doc)
        missing = list(dict.fromkeys(r.text for r in records if r.fingerprint not in reusable
                                     and r.text not in vectors_of))
        for start in range(0, len(missing), batch):
            part = missing[start:start + batch]
            c0, w0 = time.process_time(), time.perf_counter()
            vecs = embed(part)
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            for text, vec in zip(part, vecs):
                vectors_of[text] = vec
            texts_embedded += part
        meta = doc.meta()
        points = []
        for r in records:
            vec = reusable.get(r.fingerprint)
            if vec is None:
                vec = vectors_of[r.text]
            points.append(Point(r.point_id, vec, point_payload(cfg, ident.pipeline_id, r, meta)))
        chunks += len(records)
        embedded += sum(1 for r in records if r.fingerprint not in reusable)
        tokens += sum(r.tokens for r in records if r.fingerprint not in reusable)
        if points:
            scratch.upsert(FORECAST_NEW, points)
    scratch.create_payload_index(FORECAST_NEW, "doc_id", "keyword")
    scratch.finish_bulk(FORECAST_NEW)
    return {"chunks": chunks, "embedded_chunks": embedded, "tokens": tokens, "cpu_seconds": cpu,
            "wall_seconds": wall, "texts": texts_embedded}


def share_space(old: PipelineConfig, new: PipelineConfig) -> bool:
    """Whether the two vector halves put texts in one space (the same model files run another way: a backend,
    a precision, a prefix), so that their vectors of one text can be compared by cosine."""
    a, b = old.vector, new.vector
    return (a.provider, a.model, a.dimension, a.distance) == (b.provider, b.model, b.dimension, b.distance)


def agreement(texts: Sequence[str], embed_old: Embed, embed_new: Embed, same_space: bool, token_count: Callable[
        [list[str]], list[int]]) -> dict[str, Any]:
    """Both models on the same sampled chunk texts: each one's speed in tokens per CPU-second (process CPU time
    of the call, so a busy machine does not halve it), and their mean cosine when they share a space."""
    texts = list(texts)[:AGREEMENT_CHUNKS]
    if not texts:
        return {}
    n_tokens = sum(token_count(texts))
    out: dict[str, Any] = {"chunks": len(texts), "tokens": n_tokens}
    vecs = {}
    for side, embed in (("old", embed_old), ("new", embed_new)):
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
                 "seconds": round(cost["seconds"], 3), "cpu_seconds": round(cost["cpu_seconds"], 3)},
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
                     embed_old: Embed, embed_new: Embed, embed_passages: Embed, full: dict) -> dict[str, Any]:
    """A model change's serving modes on the forecast's two sides: a bridge fitted from the sample's free pairs
    (both sides hold each sampled chunk text: its two vectors, up to ``serving.pairs`` of them) and the cascade,
    each gated against the old side exactly as during the build (:func:`reindex.decisions.serving.evaluate_modes`), and
    what the evidence supports (:func:`reindex.decisions.serving.recommend`: reindex now, bridge, cascade or stay)."""
    s = new_cfg.serving
    points = list(scratch.scroll(FORECAST_NEW, with_vectors=True))
    picked, occ = sample_points(points, s.pairs or len(points))
    old_vid, new_vid = identity_of(old_cfg).vector_id, identity_of(new_cfg).vector_id
    old_ids, new_ids, old_vecs, new_vecs = pairs_from_points(scratch, FORECAST_OLD, picked, occ, old_vid,
                                                             new_cfg.payload)
    pairs = PairSet(old_vecs, new_vecs, tuple(old_ids), tuple(new_ids), (), old_vid, new_vid) if old_ids else None
    modes, _ = evaluate_modes(ModeInputs(
        store=scratch, live=FORECAST_OLD, shadow=FORECAST_NEW, live_cfg=old_cfg, new_cfg=new_cfg, queries=queries,
        embed_old=embed_old, embed_new=embed_new, embed_passages=embed_passages, serving=s, cutover=new_cfg.cutover,
        pairs=pairs, k=new_cfg.cutover.k, seed=new_cfg.cutover.seed))
    out = recommend(full, modes, s, new_cfg.cutover.k)
    out["pairs"] = pairs.n if pairs is not None else 0
    out["modes"] = {m: {"passed": e.get("passed", False), "gate": e.get("gate", {}), "rules": e.get("rules", []),
                        **({"cost": e["cost"]} if "cost" in e else {}),
                        **({"bridge": e["bridge"]} if "bridge" in e else {})} for m, e in modes.items()}
    return out
