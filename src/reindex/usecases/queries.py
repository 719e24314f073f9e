"""The queries a comparison of two populations runs — the cutover's, and the forecast's, which must be the same:
a labelled queries file, or known-item probes sampled from the corpus with the cutover's seed."""

from __future__ import annotations

from pathlib import Path

from reindex.decisions import evaluation as ev
from reindex.domain.config import PipelineConfig, TextHalf
from reindex.domain.identity import identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport

__all__ = ["comparison_queries"]


def comparison_queries(cfg: PipelineConfig, queries: str | Path | None, *,
                       text: TextHalf | None = None) -> tuple[list[ev.Query], str]:
    """(queries, where they came from): the file's (``queries``, else ``cutover.queries``), or ``cutover.probes``
    known-item probes sampled from the corpus (seed ``cutover.seed``), each labelled with its document and carrying
    its sentence as evidence. ``text``: the text half the probes' sentences are read with (a population's own; default
    the config's)."""
    queries = queries or cfg.cutover.queries
    if queries:
        return ev.read_queries(queries), str(queries)
    pipe = TextPipeline(text or cfg.text, identity_of(cfg).vector_id)
    source = open_source(cfg.source)
    docs = ((d.doc_id, d) for d in source.scan(ScanReport()))
    again = lambda ids: ((d.doc_id, d) for d in source.scan(ScanReport(), keep=ids.__contains__))  # noqa: E731
    qs = ev.probe_queries(docs, cfg.cutover.probes, cfg.cutover.seed, text=pipe.document_text, again=again)
    return qs, f"{len(qs)} known-item probes sampled from the corpus (seed {cfg.cutover.seed})"
