"""The index build's price: the CPU-seconds of building the HNSW graph of ``n`` points with given parameters,
from a rate a previous apply measured with the same parameters when there is one, else from the bench's
figures; and the wall seconds on the threads the build may use.

The build grows faster than linearly in the points of one graph (a point's insertion searches a graph that
grows): bench/build_params.py measured reindex's default graph (m 24, ef_construct 48; 384-dim embedding-like
vectors, float32) at 25 k, 100 k and 400 k points in one run, 0.333, 0.681 and 0.963 ms of CPU per point
(bench/RESULTS.md, "The index build at the engine's floor"). The price follows those per-size figures::

    cpu(n) = n × c(n)

with ``c(n)`` the CPU-seconds per point of :data:`BUILD_CURVE`, interpolated between its sizes as a power of
``n`` (log-log) and extended past its ends with the power of the nearest pair: between two sizes the build's
CPU grows as ``n^b``, b = 1.52 from 25 k to 100 k and 1.25 from 100 k to 400 k (:func:`growth_exponent`).

* From a measured record (``source: apply``, the same backend, dimension, precision, ``m`` and
  ``ef_construct``): the curve's shape through the record's own point, ``cpu(n) = cpu_rec × (n × c(n)) /
  (N_rec × c(N_rec))``: the machine's speed from the record, the growth from the bench.
* From the defaults (``source: default``): the curve itself, times the parameter factor
  ``(ef_construct / 48)^EF_EXPONENT × (m / 24)^M_EXPONENT`` (fitted on 16 builds of 100 k points with m 8-32
  and ef_construct 32-100; the fit is within 0.74-1.36× of each of them), ``INT8_FACTOR`` for int8 scalar
  quantisation, and ``dimension / 384`` (assumed: a distance costs linearly in the dimension; not measured).

Wall seconds: ``cpu(n) / threads``, the threads being the indexing threads the engine uses on an idle
machine: the CPUs, at most ``MAX_INDEXING_THREADS`` (Qdrant's automatic choice, ``max_indexing_threads: 0``).
A loaded machine takes longer; the CPU-seconds do not depend on it.
Pure: nothing beyond the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUILD_CURVE", "BUILD_FORMULA", "BuildPrice", "EF_EXPONENT", "INT8_FACTOR", "MAX_INDEXING_THREADS", "M_EXPONENT",
    "REFERENCE_DIMENSION", "REFERENCE_GRAPH", "build_threads", "curve_cpu", "default_build_cpu", "growth_exponent",
    "measured_build_cpu", "price_build",
]

#: (points, CPU-seconds per point) of one build with :data:`REFERENCE_GRAPH`, float32, 384 dims, embedding-like
#: vectors (bench/build_params.py --points 25000,100000,400000 --data lowrank, one run on a 2-core box at load 5-11).
BUILD_CURVE: tuple[tuple[int, float], ...] = ((25_000, 0.000333), (100_000, 0.000681), (400_000, 0.000963))
#: The graph the curve was measured with: reindex's defaults (reindex.domain.kinds.HNSW_DEFAULTS).
REFERENCE_GRAPH = {"m": 24, "ef_construct": 48}
REFERENCE_DIMENSION = 384
#: The build's CPU grows as ef_construct ** EF_EXPONENT and m ** M_EXPONENT (fitted, see the module's docstring).
EF_EXPONENT = 1.16
M_EXPONENT = 0.50
#: int8 scalar quantisation over float32, same graph (bench/build_params.py, 100 k points, m 24, ef_construct 48:
#: 15.9 against 62.2 CPU-s in one run).
INT8_FACTOR = 0.26
#: Qdrant's automatic indexing threads: the CPUs, at most 8.
MAX_INDEXING_THREADS = 8

BUILD_FORMULA = (
    "cpu(n) = n × c(n), c(n) the bench's CPU-seconds per point at "
    + ", ".join(f"{n // 1000:,} k: {1000 * c:.3f} ms" for n, c in BUILD_CURVE)
    + " (m 24, ef_construct 48, float32, 384 dims), interpolated as a power of n; from the last apply's build with "
    "the same parameters: its CPU-seconds × cpu(n) / cpu(its points); else × (ef_construct / 48)^"
    f"{EF_EXPONENT} × (m / 24)^{M_EXPONENT} × dimension / 384 (× {INT8_FACTOR} for int8); wall = cpu / "
    f"min(CPUs, {MAX_INDEXING_THREADS}) indexing threads")


@dataclass(frozen=True, slots=True)
class BuildPrice:
    """The price of an index build: points indexed, CPU-seconds, wall seconds on ``threads``, and where the rate
    came from (``apply``: measured by an apply with the same parameters; ``default``: the bench's figures)."""

    points: int
    cpu_seconds: float
    seconds: float
    threads: int
    source: str

    @property
    def cpu_seconds_per_point(self) -> float:
        return self.cpu_seconds / self.points if self.points else 0.0


def _check(points: int, m: int, ef_construct: int, dimension: int) -> None:
    if points < 0 or m <= 0 or ef_construct <= 0 or dimension <= 0:
        raise ValueError(f"need points >= 0 and m, ef_construct, dimension > 0 (got {points}, {m}, {ef_construct}, "
                         f"{dimension})")


def _segment(points: int) -> tuple[tuple[int, float], tuple[int, float]]:
    """The two sizes of :data:`BUILD_CURVE` whose power ``points`` is priced with (the nearest pair past its ends)."""
    pairs = list(zip(BUILD_CURVE, BUILD_CURVE[1:]))
    for lo, hi in pairs:
        if points <= hi[0]:
            return lo, hi
    return pairs[-1]


def growth_exponent(points: int) -> float:
    """``b`` of the build's CPU growing as ``n^b`` around ``points`` (between the curve's two nearest sizes)."""
    (n1, c1), (n2, c2) = _segment(points)
    return 1 + math.log(c2 / c1) / math.log(n2 / n1)


def curve_cpu(points: int) -> float:
    """CPU-seconds of building one graph of ``points`` with :data:`REFERENCE_GRAPH`, float32, 384 dims."""
    if points <= 0:
        return 0.0
    (n1, c1), _ = _segment(points)
    return points * c1 * (points / n1) ** (growth_exponent(points) - 1)


def default_build_cpu(points: int, *, m: int, ef_construct: int, dimension: int, precision: str = "float32") -> float:
    """CPU-seconds of building one graph of ``points`` from the bench's figures (see the module's docstring)."""
    _check(points, m, ef_construct, dimension)
    if precision not in ("float32", "float16", "int8"):
        raise ValueError(f"precision must be float32, float16 or int8, got {precision!r}")
    factor = ((ef_construct / REFERENCE_GRAPH["ef_construct"]) ** EF_EXPONENT * (m / REFERENCE_GRAPH["m"]) ** M_EXPONENT
              * dimension / REFERENCE_DIMENSION * (INT8_FACTOR if precision == "int8" else 1.0))
    return curve_cpu(points) * factor


def measured_build_cpu(points: int, record: Mapping[str, Any]) -> float:
    """CPU-seconds of building one graph of ``points`` from a measured build (``record``: its ``points`` and
    ``cpu_seconds``), grown along the bench's curve from the record's size to ``points``."""
    measured, cpu = int(record["points"]), float(record["cpu_seconds"])
    if measured <= 0 or cpu <= 0:
        raise ValueError(f"a measured build needs points and CPU-seconds > 0, got {measured} and {cpu}")
    return cpu * curve_cpu(points) / curve_cpu(measured) if points else 0.0


def build_threads(cpus: int) -> int:
    """The indexing threads of a build on ``cpus`` CPUs (Qdrant's automatic choice)."""
    return max(1, min(int(cpus), MAX_INDEXING_THREADS))


def price_build(points: int, *, m: int, ef_construct: int, dimension: int, precision: str = "float32",
                measured: Mapping[str, Any] | None = None, cpus: int = 1) -> BuildPrice:
    """The build of ``points`` with graph ``m``/``ef_construct``: from ``measured`` (a record of the same
    parameters) when given, else from the defaults; wall seconds on :func:`build_threads` of ``cpus``."""
    _check(points, m, ef_construct, dimension)
    if measured is not None:
        cpu, source = measured_build_cpu(points, measured), "apply"
    else:
        cpu, source = default_build_cpu(points, m=m, ef_construct=ef_construct, dimension=dimension,
                                        precision=precision), "default"
    threads = build_threads(cpus)
    return BuildPrice(points=points, cpu_seconds=cpu, seconds=cpu / threads, threads=threads, source=source)
