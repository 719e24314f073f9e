"""The cost model: work → tokens, dollars, hours, vectors, bytes, peak footprint, sensitivity tables.

Pure: no I/O and nothing beyond the standard library, so a plan can be recomputed anywhere and the
arithmetic can be checked by hand. Four parts, one private module each:

* **Window arithmetic** (seed 001, ``_window``): how many chunks a document of ``L`` tokens makes
  under a fixed or sliding window, and how many tokens are billed for embedding them.
* **Histogram estimates** (``_histogram``): the same arithmetic over a length histogram (documents
  per length) for a chunker change, with reuse of single-chunk documents, prices, the peak
  footprint and sensitivity tables (overlap, the long-document tail, what-if sizes and overlaps).
* **Pricing** of exact work computed by the planner (``_money``): dollars, hours, vectors and bytes.
* **The index build** (``_build``): CPU-seconds and wall seconds of building the HNSW graph of n points
  with given parameters, from a measured rate or the bench's figures, growing along the bench's per-size curve.
* **Sampling projection** (``_sampling``): a stratified estimator of a corpus total from a
  length-stratified sample, with a seeded percentile bootstrap interval (``reindex plan --sample N``).
"""

from reindex.cost._build import (
    BUILD_CURVE,
    BUILD_FORMULA,
    EF_EXPONENT,
    INT8_FACTOR,
    M_EXPONENT,
    MAX_INDEXING_THREADS,
    REFERENCE_GRAPH,
    BuildPrice,
    build_threads,
    curve_cpu,
    default_build_cpu,
    growth_exponent,
    measured_build_cpu,
    price_build,
)
from reindex.cost._histogram import (
    BYTES_PER_TOKEN,
    TAIL_TOKENS,
    WHAT_IF_OVERLAPS,
    WHAT_IF_SIZES,
    Bucket,
    Estimate,
    Sensitivity,
    WhatIf,
    estimate_histogram,
    histogram_of,
)
from reindex.cost._money import (
    Backend,
    build_usage,
    footprint,
    BYTES_PER_COMPONENT,
    INDEX_OVERHEAD,
    PAYLOAD_FIELD_BYTES,
    Cost,
    Footprint,
    Precision,
    Usage,
    Work,
    hours,
    payload_bytes,
    population_usage,
    price,
    usd,
    vector_bytes,
)
from reindex.cost._sampling import (
    STRATUM_EDGES,
    allocate_sample,
    bootstrap_interval,
    project_total,
    stratum_of,
)
from reindex.cost._window import Window, billed_tokens, chunk_count, window_of

__all__ = [
    "BUILD_CURVE",
    "BUILD_FORMULA",
    "Backend",
    "BuildPrice",
    "EF_EXPONENT",
    "INT8_FACTOR",
    "M_EXPONENT",
    "MAX_INDEXING_THREADS",
    "REFERENCE_GRAPH",
    "build_threads",
    "curve_cpu",
    "default_build_cpu",
    "growth_exponent",
    "measured_build_cpu",
    "price_build",
    "build_usage",
    "footprint",
    "BYTES_PER_COMPONENT",
    "BYTES_PER_TOKEN",
    "INDEX_OVERHEAD",
    "PAYLOAD_FIELD_BYTES",
    "STRATUM_EDGES",
    "TAIL_TOKENS",
    "WHAT_IF_OVERLAPS",
    "WHAT_IF_SIZES",
    "Bucket",
    "Cost",
    "Estimate",
    "Footprint",
    "Precision",
    "Sensitivity",
    "Usage",
    "WhatIf",
    "Window",
    "Work",
    "allocate_sample",
    "billed_tokens",
    "bootstrap_interval",
    "chunk_count",
    "estimate_histogram",
    "histogram_of",
    "hours",
    "payload_bytes",
    "population_usage",
    "price",
    "project_total",
    "stratum_of",
    "usd",
    "vector_bytes",
    "window_of",
]
