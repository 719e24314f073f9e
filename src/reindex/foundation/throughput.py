"""Embedding throughput: the CPU clock of embedding calls, the rate record that apply and calibrate write,
and the one formula that turns a record into the tokens per minute a plan's hours assume.

Why CPU time, and which CPU time. A wall-clock rate measures the machine's load as much as the model: at
load 27 on two cores ``reindex calibrate`` recorded ~5× below the model's rate, and two workers sharing two
cores each recorded half their single-worker rate. The CPU seconds a model spends per token do not depend
on how many others wait for the cores, so the rate is recorded per CPU-second and converted to wall time
for the CPUs a plan assumes.

The clock is the process's CPU time, not the calling thread's (``time.thread_time``, ``RUSAGE_THREAD``):
torch and onnxruntime run a model on their own intra-op thread pools and the calling thread mostly waits,
so thread time misses the work of the pool (measured on all-MiniLM-L6-v2 with two torch threads, 48 chunks
of ~200 tokens: 1.3 CPU-s on the calling thread, 2.6 CPU-s in the process, twice). Process time over-counts what the
process's *other* threads do meanwhile: the other shards of an in-process apply chunk, read and write while
one embeds. :class:`CpuClock` subtracts those: each shard thread registers itself, and a call's CPU time is
the process's minus what the other registered threads used during the call (their per-thread CPU clocks,
``time.pthread_getcpuclockid``). What remains is the embedding call's own thread and the threads it drives."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

__all__ = ["CpuClock", "host_load", "plan_rate", "rate_record"]

T = TypeVar("T")


@dataclass
class CpuClock:
    """CPU seconds of calls made by registered threads, less the CPU of the other registered threads."""

    _threads: dict[int, int] = field(default_factory=dict)  # thread ident → its CPU clock id
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self) -> None:
        """Count the calling thread as a sibling whose own work is not any other thread's call."""
        getter = getattr(time, "pthread_getcpuclockid", None)
        if getter is None:  # not a POSIX system: process time only
            return
        ident = threading.get_ident()
        with self._lock:
            if ident not in self._threads:
                self._threads[ident] = getter(ident)

    def _others(self) -> list[int]:
        me = threading.get_ident()
        with self._lock:
            return [c for t, c in self._threads.items() if t != me]

    @staticmethod
    def _read(clock: int) -> float | None:
        try:
            return time.clock_gettime(clock)
        except OSError:  # the thread ended
            return None

    def call(self, fn: Callable[..., T], *args: Any) -> tuple[T, float, float]:
        """``fn(*args)``, its wall seconds and its CPU seconds (see the module's docstring)."""
        others = self._others()
        before = [self._read(c) for c in others]
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn(*args)
        c1, w1 = time.process_time(), time.perf_counter()
        siblings = 0.0
        for clock, start in zip(others, before):
            end = self._read(clock)
            if start is not None and end is not None:
                siblings += end - start
        return out, w1 - w0, max(0.0, (c1 - c0) - siblings)


def host_load() -> dict:
    """The 1-minute load average and the CPU count, recorded beside every measured rate."""
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not available on this platform
        load = None
    return {"load": load, "cpus": os.cpu_count() or 1}


def rate_record(tokens: int, cpu_seconds: float, wall_seconds: float, *, workers: int, threads: int | None) -> dict:
    """The rate fields of a calibration or apply record: tokens per CPU-second, tokens per worker
    wall-second (``tokens_per_second`` / ``tokens_per_minute``, as records always had), the workers that
    embedded concurrently, the threads each model call used, and the load and CPU count while measured."""
    wall_tps = tokens / wall_seconds if wall_seconds > 0 else 0.0
    return {
        "tokens": tokens,
        "cpu_seconds": round(cpu_seconds, 3),
        "seconds": round(wall_seconds, 3),  # wall seconds inside embedding calls, summed over workers
        "tokens_per_cpu_second": round(tokens / cpu_seconds, 1) if cpu_seconds > 0 else None,
        "tokens_per_second": round(wall_tps, 1),  # per worker wall-second
        "tokens_per_minute": round(wall_tps * 60, 1),
        "workers": workers,
        "threads": threads,
        **host_load(),
    }


def plan_rate(rec: dict, *, local: bool, cpus: int | None = None, workers: int | None = None) -> tuple[float, dict]:
    """The tokens per minute a plan assumes from a measured record, and what it assumes.

    * A local model with a CPU measurement: ``tokens_per_cpu_second × 60 × CPUs``, the CPUs being
      ``workers × threads per worker`` capped by this machine's ``cpus``: an idle machine running as many
      embedding workers as the measurement did (``workers``, default the record's), each with the threads
      its model used.
    * Otherwise (an API model, or a record from before CPU time was measured): the per-worker wall rate
      times the workers, as measured."""
    n = max(1, int(workers if workers is not None else rec.get("workers") or 1))
    per_cpu = rec.get("tokens_per_cpu_second")
    if local and per_cpu:
        threads = max(1, int(rec.get("threads") or 1))
        machine = cpus or os.cpu_count() or 1
        used = min(n * threads, machine)
        return float(per_cpu) * 60.0 * used, {"basis": "per CPU-second", "workers": n, "cpus": used,
                                              "tokens_per_cpu_second": float(per_cpu)}
    return float(rec["tokens_per_minute"]) * n, {"basis": "per worker wall-second", "workers": n}
