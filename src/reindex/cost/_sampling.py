"""Sampling projection: a stratified estimator of a corpus total from a length-stratified sample, with a
seeded percentile bootstrap interval (``reindex plan --sample N``)."""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from reindex.foundation.stats import Interval, quantile

__all__ = ["STRATUM_EDGES", "allocate_sample", "bootstrap_interval", "project_total", "stratum_of"]

K = TypeVar("K", bound=Hashable)

#: Default stratum edges (document length, in bytes or tokens): [0, 512), [512, 2048), …
STRATUM_EDGES: tuple[int, ...] = (512, 2048, 8192, 32768)


def stratum_of(length: int, edges: Sequence[int] = STRATUM_EDGES) -> int:
    """The index of the length stratum ``length`` falls in (``edges`` ascending; 0 … len(edges))."""
    return bisect.bisect_right(edges, length)


def allocate_sample(stratum_sizes: Mapping[K, int], n: int, *, minimum: int = 2) -> dict[K, int]:
    """Split a sample of ``n`` documents over strata: at least ``minimum`` each (a stratum needs two
    to show any spread), the rest proportional to size by largest remainder; never more than a
    stratum holds. The result may exceed ``n`` only when the minimums alone do."""
    if n < 0 or minimum < 0:
        raise ValueError(f"need n >= 0 and minimum >= 0, got {n}, {minimum}")
    keys = _ordered(stratum_sizes)
    alloc = {k: min(minimum, stratum_sizes[k]) for k in keys}
    left = n - sum(alloc.values())
    while left > 0:
        room = {k: stratum_sizes[k] - alloc[k] for k in keys if stratum_sizes[k] > alloc[k]}
        if not room:
            break
        total = sum(stratum_sizes[k] for k in room)
        shares = {k: left * stratum_sizes[k] / total for k in room}
        given = {k: min(room[k], math.floor(shares[k])) for k in room}
        if sum(given.values()) == 0:
            # Hand out the remainder one by one, largest fractional share first.
            for k in sorted(room, key=lambda k: shares[k] - math.floor(shares[k]), reverse=True)[:left]:
                given[k] = 1
        for k, g in given.items():
            alloc[k] += g
        left -= sum(given.values())
    return alloc


def _ordered(keys: Iterable[K]) -> list[K]:
    # A fixed order whatever order the caller built its mappings in, so a seed means one result.
    return sorted(keys, key=repr)


def _check_strata(samples: Mapping[K, Sequence[float]], stratum_sizes: Mapping[K, int]) -> list[K]:
    for k in samples:
        if k not in stratum_sizes:
            raise ValueError(f"stratum {k!r} has samples but no size")
    keys = _ordered(stratum_sizes)
    for k in keys:
        size, got = stratum_sizes[k], len(samples.get(k, ()))
        if size < 0:
            raise ValueError(f"stratum {k!r} has a negative size {size}")
        if size > 0 and got == 0:
            raise ValueError(f"stratum {k!r} holds {size} documents but none was sampled")
        if got > size:
            raise ValueError(f"stratum {k!r} has {got} samples but only {size} documents")
    return keys


def project_total(samples: Mapping[K, Sequence[float]], stratum_sizes: Mapping[K, int]) -> float:
    """Stratified estimate of a corpus total: ``Σ_h N_h × mean(sample_h)`` over strata ``h`` of
    ``N_h`` documents (unbiased under simple random sampling within each stratum)."""
    keys = _check_strata(samples, stratum_sizes)
    return math.fsum(stratum_sizes[k] * math.fsum(samples[k]) / len(samples[k]) for k in keys if stratum_sizes[k] > 0)


def bootstrap_interval(
    samples: Mapping[K, Sequence[float]],
    stratum_sizes: Mapping[K, int],
    *,
    seed: int,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval of ``project_total``: resample with replacement within each
    stratum (``random.Random(seed)``), re-project, take the ``(1 ± confidence) / 2`` quantiles.

    A stratum sampled completely is known exactly and is not resampled. The draws depend only on
    the seed and the sample sizes, so two quantities measured on the same documents (chunks and
    tokens, say) get paired resamples when given the same seed.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    keys = _check_strata(samples, stratum_sizes)
    estimate = project_total(samples, stratum_sizes)
    rng = random.Random(seed)
    exact = math.fsum(math.fsum(samples[k]) for k in keys if 0 < stratum_sizes[k] == len(samples[k]))
    varying = [(stratum_sizes[k], list(samples[k])) for k in keys if 0 < len(samples[k]) < stratum_sizes[k]]
    totals = []
    for _ in range(resamples):
        total = exact
        for size, values in varying:
            total += size * math.fsum(rng.choices(values, k=len(values))) / len(values)
        totals.append(total)
    totals.sort()
    alpha = (1.0 - confidence) / 2.0
    return Interval(
        estimate=estimate,
        low=quantile(totals, alpha),
        high=quantile(totals, 1.0 - alpha),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )
