"""Statistics over pair results: R_c per language × band and paired differences with bootstrap
intervals over documents."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from reindex.measure._pairs import ALL, BAND_NAMES
from reindex.measure._rc import PairResult
from reindex.foundation.stats import bootstrap_mean

__all__ = ["BOOTSTRAP", "BandStat", "band_stats", "paired_differences", "rounded"]

BOOTSTRAP = 2000



@dataclass(frozen=True, slots=True)
class BandStat:
    """R_c summary of one chunker on one language × band."""

    lang: str
    band: str
    pairs: int
    rc_mean: float | None
    rc_median: float | None
    rc_pooled: float | None  # missed tokens / new tokens over all pairs of the band

    def as_dict(self) -> dict:
        return {"lang": self.lang, "band": self.band, "pairs": self.pairs, "rc_mean": rounded(self.rc_mean),
                "rc_median": rounded(self.rc_median), "rc_pooled": rounded(self.rc_pooled)}


def rounded(x: float | None, nd: int = 6) -> float | None:
    """``x`` rounded to ``nd`` places, or None for None/NaN (JSON has no NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def band_stats(results: Sequence[PairResult], langs: Sequence[str]) -> list[BandStat]:
    """Mean, median and pooled R_c per language (and ``all`` languages when there are several) × band."""
    ok = [r for r in results if r.error is None]
    out = []
    for lang in [*langs, *([ALL] if len(langs) > 1 else [])]:
        for band in BAND_NAMES:
            sel = [r for r in ok if (lang == ALL or r.lang == lang) and (band == ALL or r.band == band)]
            rcs = [r.rc for r in sel]
            tot = sum(r.new_tokens for r in sel)
            out.append(BandStat(
                lang, band, len(sel),
                statistics.fmean(rcs) if rcs else None,
                statistics.median(rcs) if rcs else None,
                sum(r.missed_tokens for r in sel) / tot if tot else None,
            ))
    return out


def paired_differences(
    specs: Sequence[str], results: Sequence[Sequence[PairResult]], langs: Sequence[str], *, seed: int = 0,
    reps: int = BOOTSTRAP, all_pairs: bool = True,
) -> list[dict]:
    """Mean per-pair R_c difference (b − a, in points) per language × band for every pair of
    chunkers (or each against the first), over pairs both measured, with 95 % intervals from a
    bootstrap over documents."""
    out = []
    combos = [(i, j) for i in range(len(specs)) for j in range(i + 1, len(specs))] if all_pairs else [
        (0, j) for j in range(1, len(specs))]
    for i, j in combos:
        a = {r.pair_id: r for r in results[i] if r.error is None}
        b = {r.pair_id: r for r in results[j] if r.error is None}
        both = [pid for pid in a if pid in b]
        for lang in [*langs, *([ALL] if len(langs) > 1 else [])]:
            for band in BAND_NAMES:
                sel = [pid for pid in both if (lang == ALL or a[pid].lang == lang) and (band == ALL or a[pid].band == band)]
                if not sel:
                    continue
                diffs = [100.0 * (b[p].rc - a[p].rc) for p in sel]
                mean, low, high = bootstrap_mean(diffs, [a[p].doc_key for p in sel], reps=reps, seed=seed)
                out.append({"a": specs[i], "b": specs[j], "lang": lang, "band": band, "pairs": len(sel),
                            "documents": len({a[p].doc_key for p in sel}), "diff_points": rounded(mean, 3),
                            "low": rounded(low, 3), "high": rounded(high, 3)})
    return out
