"""The rates an apply measures and records for the next plan: the embedding throughput of its vector half, and the
index build (HNSW) of its backend, dimension, precision and graph parameters."""

from __future__ import annotations

import time

from reindex.domain.config import PipelineConfig
from reindex.books.manifests import write_build_rate, write_measured_rate
from reindex.planner import Plan, build_rate_name
from reindex.foundation.throughput import host_load, rate_record
from reindex.context import backends

__all__ = ["MIN_POINTS_TO_MEASURE_BUILD", "MIN_TOKENS_TO_MEASURE", "record_build_rate", "record_rate"]


# An apply that embedded fewer tokens than this (in the plan's tokenizer) is too short to measure throughput:
# a few batches are dominated by first-call overhead. `reindex calibrate` embeds 256 chunks (~30k tokens).
MIN_TOKENS_TO_MEASURE = 20_000


def record_rate(state, cfg: PipelineConfig, vector_id: str, plan: Plan, report: dict, runner: str) -> dict | None:
    """Record this run's embedding throughput for the vector half, so that the next plan prices with it: per
    CPU-second of the embedding calls, and per worker wall-second, with the workers that embedded at once,
    the threads of each model call, the load and the CPU count (:func:`reindex.foundation.throughput.rate_record`).
    None when the run embedded too little to measure."""
    import os
    import platform

    t = report["throughput"]
    if t["tokens_embedded"] < MIN_TOKENS_TO_MEASURE or t["embed_seconds"] <= 0:
        return None
    embedder = report.get("embedder") or {}
    rec = {
        "source": "apply",
        "vector_id": vector_id,
        "model": cfg.vector.model,
        "index": cfg.index,
        "plan_hash": plan.plan_hash,
        **rate_record(t["tokens_embedded"], t.get("embed_cpu_seconds", 0.0), t["embed_seconds"],
                      workers=t.get("workers") or 1, threads=embedder.get("threads")),
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cpus)",
        "runner": runner,
        "device": embedder.get("device"),
        "at": time.time(),
    }
    write_measured_rate(state, vector_id, rec)
    return rec


#: A build of fewer points than this is not recorded as the index build's rate: the engine indexes a segment only
#: past its indexing threshold (~1,300 points of 384 dims) and a small build is mostly fixed cost.
MIN_POINTS_TO_MEASURE_BUILD = 10_000


def record_build_rate(state, cfg: PipelineConfig, plan: Plan, build: dict, points: int) -> dict | None:
    """Record the index build this apply timed (``build``: wall and CPU seconds of ``finish_bulk`` over ``points``)
    under its backend, dimension, precision and graph parameters, so that the next plan with the same ones prices
    its build from it (:func:`reindex.cost.price_build`). Only where the build runs in this process (the embedded
    edge store: a server builds after ``finish_bulk`` returns); None when it was too small to measure."""
    if backends.store_backend(cfg).capabilities.index_build != "apply" or points < MIN_POINTS_TO_MEASURE_BUILD \
            or build["cpu_seconds"] <= 0:
        return None
    import os
    import platform

    name = build_rate_name(cfg)
    rec = {
        "source": "apply",
        "key": name,
        "index": cfg.index,
        "plan_hash": plan.plan_hash,
        "points": points,
        "cpu_seconds": build["cpu_seconds"],
        "seconds": build["seconds"],
        "cpu_seconds_per_point": round(build["cpu_seconds"] / points, 7),
        "m": cfg.store.hnsw.m,
        "ef_construct": cfg.store.hnsw.ef_construct,
        "dimension": cfg.vector.dimension,
        **host_load(),
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cpus)",
        "at": time.time(),
    }
    write_build_rate(state, name, rec)
    return rec
