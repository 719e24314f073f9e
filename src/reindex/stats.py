"""Quantiles and bootstrap intervals: the one home of the project's statistics.

Three bootstraps, one per kind of sample: :func:`paired_bootstrap` (per-query differences, cutover),
:func:`bootstrap_mean` (values grouped by document, resampled by whole groups: measure), and the stratified
projection in :func:`reindex.cost.bootstrap_interval` (sampled plans) which draws through :func:`quantile`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["Interval", "bootstrap_mean", "paired_bootstrap", "percentile", "quantile"]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of already sorted values: linear interpolation between order statistics
    (numpy's default, "type 7")."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of unsorted ``values`` (0.0 for none)."""
    if not values:
        return 0.0
    return quantile(sorted(values), q)


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with a bootstrap interval."""

    estimate: float
    low: float
    high: float
    confidence: float
    resamples: int
    seed: int

    def covers(self, value: float) -> bool:
        """Whether ``value`` lies in ``[low, high]``."""
        return self.low <= value <= self.high


def paired_bootstrap(diffs: Sequence[float], *, seed: int = 0, resamples: int = 2000, confidence: float = 0.95) -> dict:
    """Mean of per-query differences with a percentile bootstrap interval over queries."""
    if not diffs:
        return {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 0}
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    a = (1 - confidence) / 2
    return {"mean": sum(diffs) / n, "low": percentile(means, a), "high": percentile(means, 1 - a), "n": n}


def bootstrap_mean(values: Sequence[float], groups: Sequence[str], *, reps: int = 2000, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``values`` and a percentile interval from resampling whole groups (documents) with
    replacement: every resample draws as many groups as there are, keeping each group's pairs."""
    vals = np.asarray(values, dtype=np.float64)
    if vals.shape[0] == 0:
        return math.nan, math.nan, math.nan
    keys, inv = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    sums = np.bincount(inv, weights=vals, minlength=keys.shape[0])
    counts = np.bincount(inv, minlength=keys.shape[0]).astype(np.float64)
    rng = np.random.default_rng(seed)
    g = keys.shape[0]
    draws = rng.integers(0, g, size=(reps, g))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    alpha = (1 - level) / 2
    return float(vals.mean()), float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))
