"""The index build's price: the CPU-seconds of building the HNSW graph of ``n`` points with given parameters,
from a rate a previous apply measured with the same parameters when there is one, else from the bench's
figures; and the wall seconds on the threads the build may use.

The build grows faster than linearly in the points of one graph (a point's insertion searches a graph that
grows; bench/RESULTS.md: ~1 → 2 ms of CPU per point from 19 k to 1 M in the whole apply), so one formula,
a power law fitted on the bench (bench/build_params.py, "The index build at the engine's floor")::

    cpu(n) = c × N × (n / N) ** BUILD_EXPONENT

with ``N`` the points of the measurement it starts from and ``c`` its CPU-seconds per point there. From a
measured record (``source: apply``): ``N`` and ``c × N`` are the record's points and CPU-seconds (same ``m``,
``ef_construct``, precision and dimension). From the defaults (``source: default``): ``N`` =
``REFERENCE_POINTS``, ``c`` = ``REFERENCE_CPU_PER_POINT`` of the precision (float32, or int8 scalar
quantisation) at Qdrant's default graph, 384 dimensions, times the parameter factor
``(ef_construct / 100) ** EF_EXPONENT × (m / 16) ** M_EXPONENT`` (fitted on the same bench) and
``dimension / 384`` (assumed: a distance costs linearly in the dimension; not measured).

Wall seconds: ``cpu(n) / threads``, the threads being the indexing threads the engine uses on an idle
machine: the CPUs, at most ``MAX_INDEXING_THREADS`` (Qdrant's automatic choice, ``max_indexing_threads: 0``).
Pure: nothing beyond the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUILD_EXPONENT", "BUILD_FORMULA", "BuildPrice", "EF_EXPONENT", "MAX_INDEXING_THREADS", "M_EXPONENT",
    "REFERENCE_CPU_PER_POINT", "REFERENCE_DIMENSION", "REFERENCE_POINTS", "build_threads", "default_build_cpu",
    "measured_build_cpu", "price_build",
]

#: cpu(n) ∝ n ** BUILD_EXPONENT for one graph of n points (fitted on bench/build_params.py at 25 k, 100 k and
#: 400 k embedding-like points, Qdrant's default graph; bench/RESULTS.md).
BUILD_EXPONENT = 1.2
#: The measurement the default figures start from: points, dimension, and CPU-seconds per point by precision.
REFERENCE_POINTS = 100_000
REFERENCE_DIMENSION = 384
REFERENCE_CPU_PER_POINT: dict[str, float] = {"float32": 0.0006, "float16": 0.0006, "int8": 0.0002}
#: The build's CPU grows as ef_construct ** EF_EXPONENT and m ** M_EXPONENT (fitted on the same bench).
EF_EXPONENT = 0.9
M_EXPONENT = 0.3
#: Qdrant's automatic indexing threads: the CPUs, at most 8.
MAX_INDEXING_THREADS = 8
#: Qdrant's default graph, which the default figures were measured with.
_DEFAULT_M, _DEFAULT_EF = 16, 100

BUILD_FORMULA = (f"cpu(n) = c × N × (n / N)^{BUILD_EXPONENT}: from the last apply's build with the same parameters "
                 f"(N its points, c × N its CPU-seconds), else from bench/build_params.py (N = {REFERENCE_POINTS:,}, "
                 "c per precision at m 16, ef_construct 100, 384 dims, × (ef_construct / 100)^"
                 f"{EF_EXPONENT} × (m / 16)^{M_EXPONENT} × dimension / 384); wall = cpu / min(CPUs, "
                 f"{MAX_INDEXING_THREADS}) indexing threads")


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


def default_build_cpu(points: int, *, m: int, ef_construct: int, dimension: int, precision: str = "float32") -> float:
    """CPU-seconds of building one graph of ``points`` from the bench's figures (see the module's docstring)."""
    _check(points, m, ef_construct, dimension)
    if precision not in REFERENCE_CPU_PER_POINT:
        raise ValueError(f"precision must be one of {', '.join(REFERENCE_CPU_PER_POINT)}, got {precision!r}")
    if not points:
        return 0.0
    factor = (ef_construct / _DEFAULT_EF) ** EF_EXPONENT * (m / _DEFAULT_M) ** M_EXPONENT * dimension / REFERENCE_DIMENSION
    return (REFERENCE_CPU_PER_POINT[precision] * REFERENCE_POINTS * (points / REFERENCE_POINTS) ** BUILD_EXPONENT
            * factor)


def measured_build_cpu(points: int, record: Mapping[str, Any]) -> float:
    """CPU-seconds of building one graph of ``points`` from a measured build (``record``: its ``points`` and
    ``cpu_seconds``), grown by the power law from the record's size to ``points``."""
    measured, cpu = int(record["points"]), float(record["cpu_seconds"])
    if measured <= 0 or cpu <= 0:
        raise ValueError(f"a measured build needs points and CPU-seconds > 0, got {measured} and {cpu}")
    return cpu * (points / measured) ** BUILD_EXPONENT if points else 0.0


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
