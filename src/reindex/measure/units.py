"""Reuse below whole chunks (issue 45): R_c when every chunk's vector is composed from its units' vectors,
beside today's chunk-level R_c, and the retrieval quality of composed vectors against whole-chunk vectors.

Units are the sentences (or small sentence groups) inside each chunk, partitioning it exactly
(:mod:`reindex.adapters.chunkers.units`). With units as the embedding inputs, R_c is defined exactly as
seed 000 defines it for chunks::

    rc_unit = tokens(distinct new-version units not byte-identical to a unit of the old version of the
                     same document) / tokens(all distinct new-version units)

where a version's units are the units of each of its chunks (the same chunker, the same unit rule), tokens
are counted by the configured tokenizer on each distinct unit text, a new version with no units has
rc_unit = 0, and the no-edit control (the old version chunked by a second chunker instance and cut into
units again) must give 0. ``rc_chunk`` is today's R_c of the same pairs (:func:`reindex.measure.measure_pair`'s
arithmetic, unchanged). With ``--unit chunk`` every chunk is its own unit and rc_unit equals rc_chunk.

Quality (``--queries``): every pool document chunked; each chunk's vector embedded whole (what a
``vector.compose: none`` population holds) and composed from its units; every chunk ranked by exact dot
product per query on each side; the two sides scored per query and compared by the cutover's own paired
gate (:func:`reindex.decisions.evaluation.score_query` / :func:`~reindex.decisions.evaluation.aggregate`:
recall@k, nDCG@k, MRR, passage hit@k and MRR, evidence recall in 2,048 tokens, each new − old with a
paired bootstrap interval, and the verdict). Per model:

* a static model (model2vec) composes **exactly**: a unit keeps the float64 sum of its token rows and their
  count, a chunk's vector is ``Σ sums / Σ counts`` normalised, bit-identical to the chunk embedded whole by
  the same exact arithmetic (checked for every chunk: ``max_abs_diff``); the whole side is model2vec's own
  ``encode`` (today's vectors, float16-rounded means), so the gate prices the switch itself;
* a transformer composes approximately: the token-weighted mean of its units' (normalised) vectors,
  normalised again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from reindex.decisions.evaluation import MAX_CANDIDATES, Candidate, Query, SideResult, aggregate, dedupe, score_query
from reindex.errors import ChunkerError, MeasureError, ReindexError
from reindex.foundation.stats import bootstrap_mean
from reindex.measure._pairs import ALL, BAND_NAMES, RevisionPair
from reindex.measure._rc import Candidate as ChunkerCandidate
from reindex.measure._rc import AnyChunker, Counter, PairResult, chunk_texts, failed_pair, pair_result, recompute
from reindex.measure._retrieval import EmbeddingCache, chunk_spans, embed_cached
from reindex.measure._stats import BOOTSTRAP, rounded

__all__ = ["GATE_K", "QUALITY_METRICS", "ComposeModel", "StaticCompose", "TransformerCompose", "UnitPairResult",
           "composition_quality", "measure_unit_pair", "run_units", "unit_band_stats", "units_markdown"]

GATE_K = 10
QUALITY_METRICS = (f"ndcg_at_{GATE_K}", "mrr", f"recall_at_{GATE_K}", "evidence_recall", "passage_mrr",
                   f"passage_hit_at_{GATE_K}")
Split = Callable[[str], list[str]]

DEFINITION = ("rc_unit = tokens of distinct new-version units not byte-identical to a unit of the old version of the "
              "same document / tokens of all distinct new-version units (units: the sentences inside each chunk, "
              "partitioning it; 0 when the new version has none); rc_chunk: today's R_c of the same pairs")


# --------------------------------------------------------------------------------------------
# R_c at chunk and unit level
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnitPairResult:
    """One pair under one chunker: today's chunk-level result and the unit-level R_c beside it."""

    chunk: PairResult
    rc_unit: float
    missed_unit_tokens: int
    new_unit_tokens: int
    no_edit_unit_missed: int
    units: int  # distinct units of the new version
    unit_tokens: tuple[int, ...] = field(default=())  # tokens of each distinct new unit

    @property
    def error(self) -> str | None:
        return self.chunk.error


def _units(chunks: Sequence[str], split: Split) -> list[str]:
    out: list[str] = []
    cut: dict[str, list[str]] = {}
    for c in chunks:
        if c not in cut:
            cut[c] = split(c)
        out.extend(cut[c])
    return out


def measure_unit_pair(chunker: AnyChunker, control: AnyChunker, pair: RevisionPair, count: Counter,
                      split: Split) -> UnitPairResult:
    """Chunk-level and unit-level R_c of one pair, each with its no-edit control."""
    try:
        old = chunk_texts(chunker, pair.old_text)
        new = chunk_texts(chunker, pair.new_text)
        again = chunk_texts(control, pair.old_text)
        old_u, new_u, again_u = _units(old, split), _units(new, split), _units(again, split)
    except Exception as err:  # noqa: BLE001 - a chunker failing on a document is a result
        return UnitPairResult(failed_pair(pair, err), float("nan"), 0, 0, 0, 0)
    chunk = pair_result(pair, old, new, again, count)
    distinct = list(dict.fromkeys(new_u))
    counts = count(distinct) if distinct else []
    old_set = set(old_u)
    missed = sum(c for t, c in zip(distinct, counts) if t not in old_set)
    total = sum(counts)
    ctrl_missed, _ = recompute(old_u, again_u, count)
    return UnitPairResult(chunk, missed / total if total else 0.0, missed, total, ctrl_missed, len(distinct),
                          tuple(counts))


def _stat(results: Sequence[UnitPairResult], value: Callable[[UnitPairResult], float], missed: Callable, total: Callable,
          seed: int, reps: int) -> dict:
    vals = [value(r) for r in results]
    mean, low, high = bootstrap_mean(vals, [r.chunk.doc_key for r in results], reps=reps, seed=seed)
    tot = sum(total(r) for r in results)
    return {"pairs": len(results), "documents": len({r.chunk.doc_key for r in results}), "mean": rounded(mean),
            "low": rounded(low), "high": rounded(high), "median": rounded(statistics.median(vals)),
            "pooled": rounded(sum(missed(r) for r in results) / tot) if tot else None}


def unit_band_stats(results: Sequence[UnitPairResult], langs: Sequence[str], *, seed: int = 0,
                    reps: int = BOOTSTRAP) -> dict:
    """``{"rc_chunk": {lang: {band: stat}}, "rc_unit": …, "unit_minus_chunk": {lang: {band: {points, low, high}}},
    "unit_over_chunk": {lang: {band: ratio of means}}}`` over the pairs the chunker did not fail on; a stat is
    the mean per-pair R_c with a 95 % bootstrap interval over documents, the median and the pooled value."""
    ok = [r for r in results if r.error is None]
    out: dict[str, dict] = {"rc_chunk": {}, "rc_unit": {}, "unit_minus_chunk": {}, "unit_over_chunk": {}}
    for lang in [*langs, *([ALL] if len(langs) > 1 else [])]:
        for key in out:
            out[key][lang] = {}
        for band in BAND_NAMES:
            sel = [r for r in ok if (lang == ALL or r.chunk.lang == lang) and (band == ALL or r.chunk.band == band)]
            if not sel:
                continue
            ch = _stat(sel, lambda r: r.chunk.rc, lambda r: r.chunk.missed_tokens, lambda r: r.chunk.new_tokens, seed, reps)
            un = _stat(sel, lambda r: r.rc_unit, lambda r: r.missed_unit_tokens, lambda r: r.new_unit_tokens, seed, reps)
            diff, low, high = bootstrap_mean([100.0 * (r.rc_unit - r.chunk.rc) for r in sel],
                                             [r.chunk.doc_key for r in sel], reps=reps, seed=seed)
            out["rc_chunk"][lang][band] = ch
            out["rc_unit"][lang][band] = un
            out["unit_minus_chunk"][lang][band] = {"points": rounded(diff, 3), "low": rounded(low, 3),
                                                   "high": rounded(high, 3)}
            out["unit_over_chunk"][lang][band] = rounded(un["mean"] / ch["mean"], 4) if ch["mean"] else None
    return out


def run_units(candidates: Sequence[ChunkerCandidate], pairs: Sequence[RevisionPair], count: Counter, split: Split, *,
              unit: str, tokenizer: str, source: str, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> dict:
    """Chunk- and unit-level R_c of every candidate on the same pairs: the ``--unit`` report (a dict, the JSON
    that ``reindex measure --unit … --json`` prints; ``quality`` is filled by :func:`composition_quality`)."""
    if not pairs:
        raise MeasureError(f"{source}: no revision pairs to measure (check --lang, --band and --limit)")
    t0 = time.perf_counter()
    langs = tuple(sorted({p.lang for p in pairs}))
    chunkers = []
    warnings = []
    for cand in candidates:
        t1 = time.perf_counter()
        try:
            chunker, control = cand.build(), cand.build()
        except ReindexError:
            raise
        except Exception as err:  # noqa: BLE001
            raise ChunkerError(f"cannot build chunker {cand.spec}: {err}".splitlines()[0]) from None
        results = [measure_unit_pair(chunker, control, p, count, split) for p in pairs]
        ok = [r for r in results if r.error is None]
        ctrl_chunk = sum(r.chunk.no_edit_missed for r in ok)
        ctrl_unit = sum(r.no_edit_unit_missed for r in ok)
        unit_tokens = [n for r in ok for n in r.unit_tokens]
        chunk_tokens = [n for r in ok for n in r.chunk.chunk_tokens]
        entry = {
            "spec": cand.spec,
            "pairs": len(results),
            "failures": len(results) - len(ok),
            "no_edit": {"rc_chunk": ctrl_chunk / max(1, sum(r.chunk.new_tokens for r in ok)),
                        "rc_unit": ctrl_unit / max(1, sum(r.new_unit_tokens for r in ok))},
            "median_chunk_tokens": float(statistics.median(chunk_tokens)) if chunk_tokens else 0.0,
            "median_unit_tokens": float(statistics.median(unit_tokens)) if unit_tokens else 0.0,
            "units_per_chunk": rounded(sum(r.units for r in ok) / max(1, sum(len(r.chunk.chunk_tokens) for r in ok)), 3),
            **unit_band_stats(results, langs, seed=seed),
            "quality": {},
            "seconds": round(time.perf_counter() - t1, 1),
        }
        for what in ("rc_chunk", "rc_unit"):
            if entry["no_edit"][what]:
                warnings.append(f"{cand.spec}: the no-edit control gave {what} = {entry['no_edit'][what]:.4g}, not 0")
        if entry["failures"]:
            warnings.append(f"{cand.spec}: failed on {entry['failures']} of {len(pairs)} pairs (excluded)")
        chunkers.append(entry)
        if progress:
            progress(f"{cand.spec}: {len(pairs)} pairs in {entry['seconds']:.1f} s")
    return {"source": source, "tokenizer": tokenizer, "unit": unit, "pairs": len(pairs), "languages": list(langs),
            "definition": DEFINITION, "chunkers": chunkers, "warnings": warnings, "seed": seed,
            "seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------------------------
# Quality of composed vectors against whole-chunk vectors
# --------------------------------------------------------------------------------------------


class ComposeModel(Protocol):
    """A model under measurement: whole-chunk vectors (today's population) and composed ones."""

    name: str
    exact: bool

    def whole(self, texts: list[str]) -> np.ndarray: ...

    def composed(self, chunks: list[str], units: list[list[str]]) -> tuple[np.ndarray, dict]: ...

    def queries(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Query vectors for the whole side and for the composed side."""
        ...


class StaticCompose:
    """A static (model2vec) model: ``native`` is today's embedder (model2vec's ``encode``), ``exact`` the same
    model's float64 arithmetic (``vector.compose: units``): units' token sums and counts compose exactly."""

    exact = True

    def __init__(self, name: str, native: Any, exact: Any) -> None:
        self.name, self.native, self.exact_embedder = name, native, exact

    def whole(self, texts: list[str]) -> np.ndarray:
        return self.native.embed(texts).vectors

    def composed(self, chunks: list[str], units: list[list[str]]) -> tuple[np.ndarray, dict]:
        ex = self.exact_embedder
        distinct = list(dict.fromkeys(u for us in units for u in us))
        sums, counts = ex.token_sums(distinct)
        at = {u: i for i, u in enumerate(distinct)}
        prefix = ex.vector.prefix
        p_sum, p_count = ex.token_sums([prefix]) if prefix else (np.zeros((1, sums.shape[1])), np.zeros(1, np.int64))
        c_sums = np.zeros((len(chunks), sums.shape[1]), dtype=np.float64)
        c_counts = np.zeros(len(chunks), dtype=np.int64)
        for i, us in enumerate(units):
            idx = [at[u] for u in us]
            c_sums[i] = p_sum[0] + sums[idx].sum(axis=0)
            c_counts[i] = int(p_count[0]) + int(counts[idx].sum())
        limit = ex.max_tokens
        over = [i for i in range(len(chunks)) if limit and c_counts[i] > limit]
        vecs = ex.vectors_of_sums(c_sums, c_counts)
        whole_exact = ex.embed(chunks).vectors
        if over:  # past the model's limit the whole chunk is truncated: such a chunk is embedded whole
            vecs[over] = whole_exact[over]
        native = self.native.embed(chunks).vectors
        return vecs, {"composition": "exact: float64 token sums and counts of units, mean, normalised",
                      "max_abs_diff_vs_whole_exact": float(np.abs(vecs - whole_exact).max()) if len(chunks) else 0.0,
                      "bit_identical_chunks": int(np.all(vecs == whole_exact, axis=1).sum()),
                      "max_abs_diff_vs_native": float(np.abs(vecs - native).max()) if len(chunks) else 0.0,
                      "chunks_over_limit_embedded_whole": len(over), "units_embedded": len(distinct)}

    def queries(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return self.native.embed(texts).vectors, self.exact_embedder.embed(texts).vectors


class TransformerCompose:
    """A transformer: units embedded like chunks (cached by fingerprint); a chunk's composed vector is the
    token-weighted mean of its units' vectors, normalised (an approximation, gated like a model change)."""

    exact = False

    def __init__(self, name: str, embedder: Any, count: Counter, *, fingerprint: Callable[[str], str],
                 cache: EmbeddingCache | None) -> None:
        self.name, self.embedder, self.count = name, embedder, count
        self.fingerprint, self.cache = fingerprint, cache
        self.embedded = 0

    def _embed(self, texts: list[str]) -> np.ndarray:
        mat, n = embed_cached(texts, [self.fingerprint(t) for t in texts], lambda t: self.embedder.embed(t).vectors,
                              self.cache, self.embedder.dimension)
        self.embedded += n
        return mat

    def whole(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def composed(self, chunks: list[str], units: list[list[str]]) -> tuple[np.ndarray, dict]:
        distinct = list(dict.fromkeys(u for us in units for u in us))
        before = self.embedded
        uv = self._embed(distinct).astype(np.float64)
        weights = np.asarray(self.count(distinct), dtype=np.float64)
        at = {u: i for i, u in enumerate(distinct)}
        out = np.zeros((len(chunks), uv.shape[1]), dtype=np.float64)
        for i, us in enumerate(units):
            idx = [at[u] for u in us]
            out[i] = (weights[idx, None] * uv[idx]).sum(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        return out.astype(np.float32), {"composition": "token-weighted mean of unit vectors, normalised",
                                        "units_embedded": len(distinct), "units_embedded_now": self.embedded - before}

    def queries(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        q, n = embed_cached(texts, ["query\0" + self.fingerprint(t) for t in texts],
                            lambda t: self.embedder.embed(t).vectors, self.cache, self.embedder.dimension)
        self.embedded += n
        return q, q


def _side(matrix: np.ndarray, qvec: np.ndarray, cands: list[Candidate]) -> SideResult:
    scores = matrix @ qvec if matrix.shape[0] else np.zeros(0)
    order = np.argsort(-scores, kind="stable")[:MAX_CANDIDATES].tolist()
    picked = [cands[i] for i in order]
    return SideResult(dedupe(c.doc_id for c in picked), picked, 0.0)


def composition_quality(chunker: AnyChunker, corpus: dict[str, str], doc_paths: Sequence[str],
                        queries: Sequence[Query], model: ComposeModel, split: Split, count: Counter, *,
                        k: int = GATE_K, seed: int = 0) -> dict:
    """Whole-chunk vectors (old side) against composed vectors (new side) on the same chunks and queries,
    scored by the cutover's paired gate; for an exact model, how far the composed vectors are from the
    whole-chunk vectors of the same arithmetic."""
    t0 = time.perf_counter()
    cands: list[Candidate] = []
    for path in doc_paths:
        for s, e, t in chunk_spans(chunker, corpus[path]):
            cands.append(Candidate(path, s, e, 0, t))
    texts = [c.text for c in cands]
    distinct = list(dict.fromkeys(texts))
    tok = dict(zip(distinct, count(distinct))) if distinct else {}
    cands = [Candidate(c.doc_id, c.start, c.end, tok[c.text], c.text) for c in cands]
    units = {t: split(t) for t in distinct}
    whole = model.whole(distinct)
    composed, info = model.composed(distinct, [units[t] for t in distinct])
    row_of = {t: i for i, t in enumerate(distinct)}
    rows_idx = [row_of[t] for t in texts]
    old_m, new_m = whole[rows_idx], composed[rows_idx]
    qs = [q for q in queries if q.relevant & set(doc_paths)]
    q_old, q_new = model.queries([q.text for q in qs]) if qs else (np.zeros((0, 1)), np.zeros((0, 1)))
    rows = []
    identical = 0
    for i, q in enumerate(qs):
        a, b = _side(old_m, q_old[i], cands), _side(new_m, q_new[i], cands)
        identical += [(c.doc_id, c.start) for c in a.candidates] == [(c.doc_id, c.start) for c in b.candidates]
        rows.append(score_query(q, a, b, k))
    agg = aggregate(rows, k, seed=seed)
    metrics = {}
    for m in QUALITY_METRICS:
        if f"{m}_diff" in agg:
            d = agg[f"{m}_diff"]
            metrics[m] = {"whole": rounded(agg[f"{m}_old"]), "composed": rounded(agg[f"{m}_new"]),
                          "diff": rounded(d["mean"]), "low": rounded(d["low"]), "high": rounded(d["high"]),
                          "verdict": agg["metrics"].get(m)}
    n_units = sum(len(units[t]) for t in distinct)
    return {"model": model.name, "exact": model.exact, "queries": len(qs), "pool_docs": len(doc_paths),
            "chunks": len(cands), "distinct_chunks": len(distinct), "units": n_units,
            "verdict": agg.get("verdict"), "metrics": metrics,
            "identical_top100": identical, "rank_changes": agg.get("rank_changes"), **info,
            "seconds": round(time.perf_counter() - t0, 1)}


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def units_markdown(report: dict, band: str = "<=5%") -> str:
    """The ``--unit`` report as Markdown: R_c per chunker at chunk and unit level per language (mean with its
    interval, the band given and all pairs), then composed-vs-whole quality per model."""
    lines = [f"unit: {report['unit']}; {report['pairs']} pairs from {report['source']}; tokens: {report['tokenizer']}",
             "", "| chunker | lang | band | pairs | rc_chunk % [95 %] | rc_unit % [95 %] | unit/chunk | no-edit |",
             "|---|---|---|---|---|---|---|---|"]
    for c in report["chunkers"]:
        for lang, bands in c["rc_chunk"].items():
            for b in (band, ALL):
                if b not in bands:
                    continue
                ch, un = bands[b], c["rc_unit"][lang][b]
                ne = "0" if not (c["no_edit"]["rc_chunk"] or c["no_edit"]["rc_unit"]) else \
                    f"{c['no_edit']['rc_chunk']:.3g}/{c['no_edit']['rc_unit']:.3g}"
                lines.append(f"| {c['spec']} | {lang} | {b} | {ch['pairs']} | {_pct(ch['mean'])} [{_pct(ch['low'])}, "
                             f"{_pct(ch['high'])}] | {_pct(un['mean'])} [{_pct(un['low'])}, {_pct(un['high'])}] | "
                             f"{c['unit_over_chunk'][lang][b]} | {ne} |")
    quality = [(c["spec"], q) for c in report["chunkers"] for per_lang in c.get("quality", {}).values() for q in per_lang]
    if quality:
        lines += ["", "| chunker | model | lang | queries | chunks | units | metric | whole | composed | diff [95 %] | verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for spec, q in quality:
            for m, v in q["metrics"].items():
                lines.append(f"| {spec} | {q['model']} | {q.get('lang', '')} | {q['queries']} | {q['chunks']} | {q['units']} | "
                             f"{m} | {v['whole']:.3f} | {v['composed']:.3f} | {v['diff']:+.3f} [{v['low']:+.3f}, "
                             f"{v['high']:+.3f}] | {v['verdict']} |")
            lines.append(f"| {spec} | {q['model']} | {q.get('lang', '')} | | | | **gate** | | | | **{q['verdict']}** |")
    for w in report.get("warnings", []):
        lines.append(f"\nwarning: {w}")
    return "\n".join(lines)
