"""Sampled projection: a length-stratified sample of the documents that need chunking, projected to
corpus totals with bootstrap intervals (``reindex plan --sample``)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from reindex import cost as costmod
from reindex.domain.identity import CorpusDigest, identity_of
from reindex.planner._baseline import Baseline
from reindex.planner._request import PlanRequest
from reindex.planner._work import DocWork, Totals, bucket, payload_old
from reindex.adapters.sources.base import Document, ScanReport

__all__ = ["SAMPLED_FIELDS", "SAMPLE_STRATA", "StratifiedDraw", "draw_stratified", "sampled_projection"]

SAMPLE_STRATA = 8
SAMPLED_FIELDS = ("chunks_new", "chunks_reused", "chunks_to_embed", "tokens_new", "tokens_to_embed", "payload_bytes", "chunks_old")

WorkFor = Callable[[Document], DocWork]


@dataclass(frozen=True, slots=True)
class StratifiedDraw:
    """The strata and the documents drawn from them."""

    edges: list[int]
    stratum_sizes: dict[int, int]
    stratum_bytes: dict[int, int]
    alloc: dict[int, int]
    chosen: set[str]


def _strata_edges(sizes: list[int], k: int) -> list[int]:
    s = sorted(sizes)
    return sorted({s[min(len(s) - 1, (i * len(s)) // k)] for i in range(1, k)})


def sampled_projection(
    req: PlanRequest, source, report: ScanReport, work_for: WorkFor, t: Totals, digest: CorpusDigest, seen: set[str]
) -> dict:
    """Length-stratified sample: documents whose work is known without chunking (same pipeline,
    same bytes) count exactly; the others are stratified by byte size and sampled; totals are
    projected with a per-document ratio to bytes (``Σ_h X_h · mean(y/x)``) and 95 % bootstrap intervals."""
    baseline = req.baseline
    sizes = _count_exact(req, source, work_for, t, digest, seen)
    draw = draw_stratified(sizes, req.sample or 0, req.seed)
    removed = {d for d in baseline.docs if d not in seen}
    if not baseline.complete and baseline.materialize is not None:
        baseline.materialize(draw.chosen | removed)
    values = _sample_values(req, source, report, work_for, t, draw)
    intervals = _intervals(values, draw.stratum_sizes, req.seed)
    _add_projection(t, intervals, baseline, removed)
    return {
        "sample": len(draw.chosen),
        "population": len(sizes),
        "seed": req.seed,
        "strata": [{"stratum": h, "documents": draw.stratum_sizes[h], "sampled": draw.alloc[h],
                    "bytes": draw.stratum_bytes[h]}
                   for h in sorted(draw.stratum_sizes)],
        "method": "length-stratified sample (byte-size strata), per-document ratio to bytes, 1,000 bootstrap resamples within strata",
        "intervals": intervals,
    }


def _count_exact(req: PlanRequest, source, work_for: WorkFor, t: Totals, digest: CorpusDigest, seen: set[str]) -> dict[str, int]:
    """First pass: count what is exact without chunking; return the byte sizes of the rest."""
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
    return sizes


def draw_stratified(sizes: dict[str, int], sample: int, seed: int) -> StratifiedDraw:
    """Stratify the documents by byte size (8 quantile strata), allocate the sample (at least 2 per stratum, the
    rest proportional) and draw it, seeded: what ``plan --sample`` and ``plan --forecast`` draw."""
    edges = _strata_edges(list(sizes.values()), SAMPLE_STRATA) if sizes else []
    strata: dict[int, list[str]] = {}
    for doc_id in sorted(sizes):
        strata.setdefault(costmod.stratum_of(sizes[doc_id], edges), []).append(doc_id)
    stratum_sizes = {h: len(ids) for h, ids in strata.items()}
    stratum_bytes = {h: sum(sizes[d] for d in ids) for h, ids in strata.items()}
    alloc = costmod.allocate_sample(stratum_sizes, sample)
    rng = random.Random(seed)
    chosen: set[str] = set()
    for h in sorted(strata):
        chosen.update(rng.sample(strata[h], alloc[h]))
    return StratifiedDraw(edges, stratum_sizes, stratum_bytes, alloc, chosen)


def _sample_values(
    req: PlanRequest, source, report: ScanReport, work_for: WorkFor, t: Totals, draw: StratifiedDraw
) -> dict[str, dict[int, list[float]]]:
    """Second pass: chunk the drawn documents; per field and stratum, their size-scaled values."""
    values: dict[str, dict[int, list[float]]] = {f: {} for f in SAMPLED_FIELDS}
    n = 0
    for doc in source.scan(report):
        if doc.doc_id not in draw.chosen:
            continue
        n += 1
        w = work_for(doc)
        h = costmod.stratum_of(doc.size, draw.edges)
        mean_x = draw.stratum_bytes[h] / draw.stratum_sizes[h]
        per = {
            "chunks_new": w.chunks_new, "chunks_reused": w.chunks_reused, "chunks_to_embed": w.chunks_to_embed,
            "tokens_new": w.tokens_new, "tokens_to_embed": w.tokens_to_embed, "payload_bytes": w.payload_bytes,
            "chunks_old": w.chunks_old,
        }
        for f, y in per.items():
            # Ratio to bytes, scaled to the stratum's mean size: y/x · X_h/N_h, so that
            # project_total gives Σ_h X_h · mean(y/x) (chunks and tokens are nearly proportional to bytes).
            values[f].setdefault(h, []).append(y / max(doc.size, 1) * mean_x)
        scale = draw.stratum_sizes[h] / draw.alloc[h]
        for tok in w.chunk_tokens:
            t.chunk_len_new[bucket(tok)] += scale
            t.lengths_new[tok] += scale
        t.doc_tokens[w.doc_tokens] += 1
        if req.progress and n % 20 == 0:
            req.progress("sampling", n, len(draw.chosen))
    return values


def _intervals(values: dict[str, dict[int, list[float]]], stratum_sizes: dict[int, int], seed: int) -> dict[str, dict]:
    """The projected total of each sampled field with its 95 % bootstrap interval."""
    intervals = {}
    for f in SAMPLED_FIELDS:
        if not stratum_sizes:
            intervals[f] = {"estimate": 0.0, "low": 0.0, "high": 0.0}
            continue
        iv = costmod.bootstrap_interval(values[f], stratum_sizes, seed=seed, resamples=1000)
        intervals[f] = {"estimate": round(iv.estimate, 1), "low": round(iv.low, 1), "high": round(iv.high, 1)}
    return intervals


def _add_projection(t: Totals, intervals: dict[str, dict], baseline: Baseline, removed: set[str]) -> None:
    """Add the projected totals to the exact ones; make the intervals cover corpus totals."""
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
            t.chunk_len_old[bucket(tok)] += 1
            t.lengths_old[tok] += 1
    t.chunk_len_new = Counter({k: round(v) for k, v in t.chunk_len_new.items()})
    t.payload_old = payload_old(baseline)
