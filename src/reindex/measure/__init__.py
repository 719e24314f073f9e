"""Recompute fraction R_c and chunker comparisons over revision pairs (seed 000).

An embedding input is reused only if it is byte-identical to an input produced for the old version
of the *same* document. For one pair and one chunker::

    R_c = tokens(distinct new inputs not among the old inputs) / tokens(all distinct new inputs)

with tokens counted by the configured tokenizer on each distinct text (``count_batch``). A new
version with no inputs (empty or whitespace-only) has R_c = 0: nothing has to be embedded.

This package holds, in private modules by role: the pairs (Parquet/JSONL or built from git
history; ``_pairs``), R_c per pair and the no-edit control (``_rc``), bands and paired differences
with bootstrap intervals over documents (``_stats``), length calibration and chunker scaling
(``_calibrate``), retrieval quality on the same chunkings (``_retrieval``), the report model and
the whole run (``_report``), and the Markdown / HTML rendering (``_render``).
"""

from reindex.errors import ChunkerError, MeasureError
from reindex.measure._calibrate import (
    DEFAULT_CHUNKERS,
    DEFAULT_TARGET_MEDIAN,
    calibrate_size,
    calibration_split,
    median_chunk_tokens,
    scale_chunker,
    size_of,
)
from reindex.measure._pairs import (
    ALL,
    BAND_NAMES,
    BANDS,
    RevisionPair,
    band_of,
    edit_fraction,
    load_pairs,
    pairs_from_git,
    select_pairs,
)
from reindex.measure._rc import (
    AnyChunker,
    Candidate,
    Counter,
    PairResult,
    chunk_texts,
    measure_pair,
    recompute,
    recompute_fraction,
)
from reindex.measure._render import (
    BAND_HEAD,
    measure_html,
    measure_markdown,
    rc_chart_svg,
    write_measure_reports,
)
from reindex.measure._report import (
    LENGTH_TOLERANCE,
    ChunkerReport,
    MeasureReport,
    length_warnings,
    measure_chunker,
    run_measure,
    with_retrieval,
)
from reindex.measure._retrieval import (
    PACK_BUDGET,
    PACK_CANDIDATES,
    EmbeddingCache,
    Query,
    RetrievalResult,
    chunk_spans,
    embed_cached,
    evaluate_retrieval,
    load_corpus,
    load_queries,
    retrieval_pool,
)
from reindex.measure._stats import BOOTSTRAP, BandStat, band_stats, paired_differences
from reindex.foundation.stats import bootstrap_mean

__all__ = [
    "ALL",
    "BANDS",
    "BAND_HEAD",
    "BAND_NAMES",
    "BOOTSTRAP",
    "DEFAULT_CHUNKERS",
    "DEFAULT_TARGET_MEDIAN",
    "LENGTH_TOLERANCE",
    "PACK_BUDGET",
    "PACK_CANDIDATES",
    "AnyChunker",
    "BandStat",
    "Candidate",
    "ChunkerError",
    "ChunkerReport",
    "Counter",
    "EmbeddingCache",
    "MeasureError",
    "MeasureReport",
    "PairResult",
    "Query",
    "RetrievalResult",
    "RevisionPair",
    "band_of",
    "band_stats",
    "bootstrap_mean",
    "calibrate_size",
    "calibration_split",
    "chunk_spans",
    "chunk_texts",
    "edit_fraction",
    "embed_cached",
    "evaluate_retrieval",
    "length_warnings",
    "load_corpus",
    "load_pairs",
    "load_queries",
    "measure_chunker",
    "measure_html",
    "measure_markdown",
    "measure_pair",
    "median_chunk_tokens",
    "paired_differences",
    "pairs_from_git",
    "rc_chart_svg",
    "recompute",
    "recompute_fraction",
    "retrieval_pool",
    "run_measure",
    "scale_chunker",
    "select_pairs",
    "size_of",
    "with_retrieval",
    "write_measure_reports",
]
