"""Quantiles and bootstrap intervals: the one home of the project's statistics.

Three bootstraps, one per kind of sample: :func:`paired_bootstrap` (per-query differences, cutover; and
:func:`holm_bootstrap`, the same draws per segment with Holm's step-down correction),
:func:`bootstrap_mean` (values grouped by document, resampled by whole groups: measure), and the stratified
projection in :func:`reindex.cost.bootstrap_interval` (sampled plans) which draws through :func:`quantile`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["BETTING_GRID", "Interval", "betting_lower_bound", "bootstrap_mean", "bootstrap_means", "holm_bootstrap",
           "holm_levels", "paired_bootstrap", "percentile", "quantile", "spent_alpha"]


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


def bootstrap_means(diffs: Sequence[float], *, seed: int = 0, resamples: int = 2000) -> list[float]:
    """The sorted means of ``resamples`` resamples of ``diffs`` (with replacement, as many as there are): the
    draws a percentile interval is read from."""
    rng = random.Random(seed)
    n = len(diffs)
    return sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))


def paired_bootstrap(diffs: Sequence[float], *, seed: int = 0, resamples: int = 2000, confidence: float = 0.95) -> dict:
    """Mean of per-query differences with a percentile bootstrap interval over queries."""
    if not diffs:
        return {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 0}
    means = bootstrap_means(diffs, seed=seed, resamples=resamples)
    a = (1 - confidence) / 2
    return {"mean": sum(diffs) / len(diffs), "low": quantile(means, a), "high": quantile(means, 1 - a), "n": len(diffs)}


def holm_levels(pvalues: Mapping[Hashable, float], alpha: float,
                rejects: Callable[[Hashable, float], bool] | None = None) -> dict[Hashable, float]:
    """Holm's step-down levels: the hypotheses in ascending order of p-value (ties by name), the i-th of m
    (1-based) tested at ``alpha / (m − i + 1)``; at the first one not rejected the procedure stops, and it and
    every later one keep that step's level (so none of them is rejected). ``rejects(name, level)`` is the test
    at a level (default: p ≤ level)."""
    test = rejects or (lambda name, level: pvalues[name] <= level)
    m = len(pvalues)
    out: dict[Hashable, float] = {}
    stopped: float | None = None
    for i, name in enumerate(sorted(pvalues, key=lambda n: (pvalues[n], str(n))), 1):
        level = stopped if stopped is not None else alpha / (m - i + 1)
        if stopped is None and not test(name, level):
            stopped = level
        out[name] = level
    return out


def holm_bootstrap(groups: Mapping[Hashable, Sequence[float]], bound: float, *, seed: int = 0, resamples: int = 2000,
                   confidence: float = 0.95) -> dict[Hashable, dict]:
    """Per group (segment) the mean of its per-query differences and a percentile bootstrap interval corrected
    for the number of groups by Holm's step-down method, for the claim "the mean difference is at least
    ``bound``" in every group.

    Each group's p-value is the share of its resampled means below ``bound`` (the bootstrap's one-sided p for
    "the difference is below the bound"); the groups are taken in ascending order of it and the i-th of m gets
    the one-sided level ``alpha / (m − i + 1)``, ``alpha = (1 − confidence) / 2`` (the level of the uncorrected
    interval's lower end). A group passes its step when the ``level`` quantile of its resampled means is at
    least ``bound``; at the first group that does not, the procedure stops and every later group keeps that
    step's level. A group's interval is ``[quantile(level), quantile(1 − level)]`` of its resampled means, so
    its lower bound clears ``bound`` exactly when Holm rejects "below the bound" for it; one group gives
    :func:`paired_bootstrap`'s interval. Each entry: mean, low, high, n, level (one-sided), p."""
    alpha = (1 - confidence) / 2
    draws = {g: bootstrap_means(d, seed=seed, resamples=resamples) for g, d in groups.items() if d}
    pvalues = {g: sum(1 for x in means if x < bound) / len(means) for g, means in draws.items()}
    levels = holm_levels(pvalues, alpha, lambda g, level: quantile(draws[g], level) >= bound)
    return {g: {"mean": sum(groups[g]) / len(groups[g]), "low": quantile(means, levels[g]),
                "high": quantile(means, 1 - levels[g]), "n": len(groups[g]), "level": levels[g], "p": pvalues[g]}
            for g, means in draws.items()}


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


# --------------------------------------------------------------------------------------------
# Anytime-valid lower bounds: a decision checked again and again (the serving gate during a build)
# --------------------------------------------------------------------------------------------


def spent_alpha(alpha: float, look: int) -> float:
    """The level of the ``look``-th check (1-based) of a decision that may be checked any number of times:
    ``alpha · 6 / (π² · look²)``. These sum to ``alpha`` over every look, so by the union bound the chance that
    *any* look passes a false claim is at most ``alpha``, however the looks depend on each other (the same
    queries every time, a bridge refitted on more pairs). The first look gets 0.61 α, the tenth 0.0061 α."""
    if look < 1:
        raise ValueError(f"look {look}: counted from 1")
    return alpha * 6.0 / (math.pi ** 2 * look * look)


BETTING_GRID = 2001  # candidate means tried on [low, high]: the bound is exact to (high − low) / 2000 (rounded down)


def betting_lower_bound(values: Sequence[float], alpha: float, *, low: float = -1.0, high: float = 1.0,
                        seed: int = 0, truncation: float = 0.75) -> float:
    """A lower ``1 − alpha`` confidence bound for the mean of independent values that lie in ``[low, high]``
    (per-query differences of a metric in [0, 1]: ``[-1, 1]``), valid for any sample size, with no normal or
    bootstrap approximation: the one-sided betting bound of Waudby-Smith & Ramdas, "Estimating means of bounded
    random variables by betting", JRSS B 86(1), 2024 (arXiv:2010.09686).

    For each candidate mean ``m`` a gambler bets on "the mean is above ``m``": scaled to ``y ∈ [0, 1]``, its capital
    is ``K_t(m) = Π_{i≤t} (1 + λ_i(m)·(y_i − m))``, a nonnegative supermartingale when the mean is at most ``m``, so
    by Ville's inequality it ever reaches ``1/alpha`` with probability at most ``alpha``; every ``m`` whose capital
    does is excluded, and the bound is the smallest ``m`` left (on a grid of :data:`BETTING_GRID` points, rounded
    down: conservative). Bets are predictable plug-ins (the paper's PrPl rule, fixed-sample form):
    ``λ_i = sqrt(2·log(1/alpha) / (n·σ̂²_{i−1}))`` from the running variance of the values before ``i``, capped at
    ``truncation / m``. The values are taken in a seeded random order (the bound holds for any order fixed apart
    from the data). No values: ``low``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha {alpha}: must be in (0, 1)")
    x = np.asarray(values, dtype=np.float64)
    n = x.shape[0]
    if n == 0:
        return low
    span = high - low
    y = np.clip((x - low) / span, 0.0, 1.0)[np.random.default_rng(seed).permutation(n)]
    t = np.arange(1, n + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(y)) / (t + 1)  # μ̂_t, from y_1..y_t
    var = (0.25 + np.cumsum((y - mu) ** 2)) / (t + 1)  # σ̂²_t
    prev = np.concatenate(([0.25], var[:-1]))  # σ̂²_{t−1}: only what came before y_t (predictable)
    lam = np.sqrt(2.0 * math.log(1.0 / alpha) / (n * prev))
    m = np.linspace(0.0, 1.0, BETTING_GRID)[1:, None]  # m = 0 is never excluded (y ≥ 0)
    bets = np.minimum(lam[None, :], truncation / m)
    log_capital = np.cumsum(np.log1p(bets * (y[None, :] - m)), axis=1)
    excluded = log_capital.max(axis=1) >= math.log(1.0 / alpha)
    kept = np.flatnonzero(~excluded)
    if kept.size == 0:  # every candidate excluded: every value at the top
        return high
    return low + span * (float(m[kept[0] - 1, 0]) if kept[0] > 0 else 0.0)
