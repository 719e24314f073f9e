"""The whole measurement: every candidate on the same pairs, its report model (``ChunkerReport``,
``MeasureReport``), length warnings, and retrieval attached afterwards."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reindex.errors import ChunkerError, MeasureError, ReindexError
from reindex.measure._pairs import RevisionPair
from reindex.measure._rc import Candidate, Counter, PairResult, measure_pair
from reindex.measure._retrieval import RetrievalResult
from reindex.measure._stats import BandStat, band_stats, paired_differences, rounded

__all__ = ["LENGTH_TOLERANCE", "ChunkerReport", "MeasureReport", "length_warnings", "measure_chunker", "run_measure",
           "with_retrieval"]

LENGTH_TOLERANCE = 0.15



@dataclass(frozen=True, slots=True)
class ChunkerReport:
    """Everything measured for one chunker."""

    spec: str
    results: tuple[PairResult, ...]
    no_edit_rc: float
    median_chunk_tokens: float
    median_by_lang: dict[str, float]
    failures: int
    bands: tuple[BandStat, ...]
    seconds: float
    calibrated: dict | None = None
    retrieval: tuple[RetrievalResult, ...] = ()

    def as_dict(self) -> dict:
        fails = [{"pair_id": r.pair_id, "error": r.error} for r in self.results if r.error]
        d = {
            "spec": self.spec,
            "no_edit_rc": self.no_edit_rc,
            "median_chunk_tokens": self.median_chunk_tokens,
            "median_chunk_tokens_by_lang": self.median_by_lang,
            "failures": self.failures,
            "failed_pairs": fails[:20],
            "pairs": len(self.results),
            "seconds": round(self.seconds, 2),
            "calibration": self.calibrated,
            "bands": [b.as_dict() for b in self.bands],
        }
        if self.retrieval:
            d["retrieval"] = [r.as_dict() for r in self.retrieval]
            d["evidence_recall"] = {r.lang: rounded(r.evidence_recall) for r in self.retrieval}
            d["ndcg_at_5"] = {r.lang: rounded(r.ndcg_at_5) for r in self.retrieval}
        return d


@dataclass(frozen=True, slots=True)
class MeasureReport:
    """R_c of several chunkers on the same pairs, their paired differences, and (optionally)
    retrieval quality on the same chunkings."""

    source: str
    tokenizer: str
    pairs: int
    langs: tuple[str, ...]
    chunkers: tuple[ChunkerReport, ...]
    paired: tuple[dict, ...]
    warnings: tuple[str, ...]
    target_median: float | None
    calibration: dict | None
    retrieval: dict | None
    seed: int
    seconds: float

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "pairs": self.pairs,
            "languages": list(self.langs),
            "definition": "R_c = tokens of distinct new-version inputs not byte-identical to an old-version input of "
                          "the same document / tokens of all distinct new-version inputs (0 when the new version has none)",
            "target_median": self.target_median,
            "calibration": self.calibration,
            "chunkers": [c.as_dict() for c in self.chunkers],
            "paired_differences": list(self.paired),
            "retrieval": self.retrieval,
            "warnings": list(self.warnings),
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
        }


def measure_chunker(candidate: Candidate, pairs: Sequence[RevisionPair], count: Counter, langs: Sequence[str]) -> ChunkerReport:
    """R_c of every pair, the no-edit control and the length summary for one chunker."""
    t0 = time.perf_counter()
    try:
        chunker, control = candidate.build(), candidate.build()
    except ReindexError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ChunkerError(f"cannot build chunker {candidate.spec}: {err}".splitlines()[0]) from None
    results = tuple(measure_pair(chunker, control, p, count) for p in pairs)
    ok = [r for r in results if r.error is None]
    ctrl_missed = sum(r.no_edit_missed for r in ok)
    lengths = [n for r in ok for n in r.chunk_tokens]
    by_lang = {}
    for lang in langs:
        ls = [n for r in ok if r.lang == lang for n in r.chunk_tokens]
        by_lang[lang] = float(statistics.median(ls)) if ls else 0.0
    # The control's denominator is the old versions' tokens; any miss at all makes it non-zero.
    ctrl_total = sum(r.new_tokens for r in ok) or 1
    return ChunkerReport(
        candidate.spec, results, ctrl_missed / ctrl_total if ctrl_missed else 0.0,
        float(statistics.median(lengths)) if lengths else 0.0, by_lang, sum(1 for r in results if r.error),
        tuple(band_stats(results, langs)), time.perf_counter() - t0,
    )


def length_warnings(reports: Sequence[ChunkerReport], tolerance: float = LENGTH_TOLERANCE) -> list[str]:
    """A warning when the chunkers' median chunk lengths differ by more than ``tolerance``."""
    meds = [(c.spec, c.median_chunk_tokens) for c in reports if c.median_chunk_tokens > 0]
    if len(meds) < 2:
        return []
    lo, hi = min(meds, key=lambda x: x[1]), max(meds, key=lambda x: x[1])
    if hi[1] > lo[1] * (1 + tolerance):
        return [f"chunk lengths are not matched: median {hi[1]:.0f} tokens ({hi[0]}) vs {lo[1]:.0f} ({lo[0]}), "
                f"more than {tolerance:.0%} apart; R_c depends on chunk length, so compare with --calibrate"]
    return []


def run_measure(
    candidates: Sequence[Candidate], pairs: Sequence[RevisionPair], count: Counter, *, tokenizer: str, source: str,
    seed: int = 0, target_median: float | None = None, calibration: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> MeasureReport:
    """Measure every candidate on the same pairs; paired differences between all of them."""
    if not pairs:
        raise MeasureError(f"{source}: no revision pairs to measure (check --lang, --band and --limit)")
    t0 = time.perf_counter()
    langs = tuple(sorted({p.lang for p in pairs}))
    reports = []
    for cand in candidates:
        rep = measure_chunker(cand, pairs, count, langs)
        if calibration and cand.spec in calibration.get("chunkers", {}):
            rep = _replace(rep, calibrated=calibration["chunkers"][cand.spec])
        reports.append(rep)
        if progress:
            progress(f"{cand.spec}: {len(pairs)} pairs in {rep.seconds:.1f} s")
    paired = paired_differences([c.spec for c in reports], [c.results for c in reports], langs, seed=seed)
    warnings = length_warnings(reports)
    for c in reports:
        if c.no_edit_rc != 0:
            warnings.append(f"{c.spec}: the no-edit control gave R_c = {c.no_edit_rc:.4g}, not 0: the chunker is not deterministic")
        if c.failures:
            warnings.append(f"{c.spec}: failed on {c.failures} of {len(pairs)} pairs (excluded from its statistics)")
    return MeasureReport(source, tokenizer, len(pairs), langs, tuple(reports), tuple(paired), tuple(warnings),
                         target_median, calibration, None, seed, time.perf_counter() - t0)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def with_retrieval(report: MeasureReport, per_chunker: Sequence[Sequence[RetrievalResult]], info: dict) -> MeasureReport:
    """The report with retrieval results attached to each chunker."""
    chunkers = tuple(_replace(c, retrieval=tuple(r)) for c, r in zip(report.chunkers, per_chunker))
    return _replace(report, chunkers=chunkers, retrieval=info)
