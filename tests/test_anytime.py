"""The serving gate's quality rule over a build's repeated evaluations (issue 42, item 4): a finite-sample betting
lower bound (:func:`reindex.foundation.stats.betting_lower_bound`) at a level spent per look
(:func:`reindex.foundation.stats.spent_alpha`), so that checking again and again does not cry wolf. Tested by
simulation: its coverage on bounded values with a known mean, and A/A streams (no mode better than old) in which a
mode must switch on in at most 5 % of the streams, where the fixed-sample rule checked at every look switches on in
far more."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reindex.decisions.serving import SERVING_ALPHA, beats_old, digest_of, look_of
from reindex.foundation.stats import betting_lower_bound, spent_alpha

STREAMS = 300
LOOKS = 12
QUERIES = 84


def test_the_spent_levels_add_up_to_alpha_and_shrink_with_each_look() -> None:
    assert spent_alpha(0.05, 1) == pytest.approx(0.05 * 6 / math.pi ** 2)
    assert sum(spent_alpha(0.05, t) for t in range(1, 200_000)) == pytest.approx(0.05, rel=1e-4)
    assert spent_alpha(0.05, 2) < spent_alpha(0.05, 1)
    with pytest.raises(ValueError):
        spent_alpha(0.05, 0)


def test_the_betting_bound_covers_the_mean_of_bounded_values() -> None:
    rng = np.random.default_rng(7)
    alpha, trials, missed = 0.1, 300, 0
    for _ in range(trials):
        # Per-query differences of a metric in [0, 1]: a skewed, bounded mixture with mean 0.05.
        base = rng.beta(2, 5, QUERIES)
        x = np.clip(base + 0.05 + rng.normal(0, 0.2, QUERIES), 0, 1) - np.clip(base + rng.normal(0, 0.2, QUERIES), 0, 1)
        true = 0.05  # before clipping; clipping moves the mean by well under the bounds' width here
        missed += betting_lower_bound(x, alpha) > true + 0.01
    assert missed / trials <= alpha


def test_the_betting_bound_is_sane_at_the_edges() -> None:
    assert betting_lower_bound([], 0.05) == -1.0
    assert betting_lower_bound([1.0] * 200, 0.05) > 0.9  # every value at the top
    assert betting_lower_bound([-1.0] * 200, 0.05) == -1.0
    assert betting_lower_bound([0.3] * 300, 0.05) > 0.2  # no variance: tight
    low = betting_lower_bound([0.3] * 300, 0.05)
    assert betting_lower_bound([0.3] * 300, 0.001) < low  # a smaller level, a lower bound
    assert betting_lower_bound([0.1, -0.1] * 50, 0.05) < 0  # a mean of 0 is never excluded


def _aa_stream(rng: np.random.Generator):
    """One build's evaluations where no mode is better than old: per query a difficulty shared by both sides
    (the same queries every look) and noise drawn afresh at every look (a bridge refitted on more pairs)."""
    base = rng.beta(2, 2, QUERIES)
    for _ in range(LOOKS):
        old = np.clip(base + rng.normal(0, 0.15, QUERIES), 0, 1)
        mode = np.clip(base + rng.normal(0, 0.15, QUERIES), 0, 1)
        yield list(mode - old)


def test_a_mode_no_better_than_old_switches_on_in_at_most_5_percent_of_builds_however_often_it_is_checked() -> None:
    rng = np.random.default_rng(2024)
    gate = naive = 0
    for _ in range(STREAMS):
        seen: list[str] = []
        gate_on = naive_on = False
        for diffs in _aa_stream(rng):
            look = look_of(diffs, seen)
            seen.append(digest_of(diffs))
            gate_on = gate_on or beats_old(diffs, 0.0, look)[0]
            # The rule before: a fixed-sample 95 % interval's lower bound above 0, at every look.
            d = np.asarray(diffs)
            naive_on = naive_on or d.mean() - 1.96 * d.std(ddof=1) / math.sqrt(d.size) > 0
        gate += gate_on
        naive += naive_on
    assert gate / STREAMS <= SERVING_ALPHA, f"the gate switched on in {gate} of {STREAMS} A/A builds"
    # The same streams under the fixed-sample rule: checked 12 times, it cries wolf far more than 5 %.
    assert naive / STREAMS > 0.15, naive


def test_the_same_evidence_again_is_the_same_look() -> None:
    d = [0.1, -0.05, 0.2]
    seen = [digest_of([0.0]), digest_of(d)]
    assert look_of(d, seen) == 2 and look_of([0.3], seen) == 3
    assert look_of([x + 1e-9 for x in d], seen) == 2  # float noise is not new evidence
