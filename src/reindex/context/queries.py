"""The queries a comparison of two populations runs — the cutover's, and the forecast's, which must be the same:
a labelled queries file, or known-item probes sampled from the corpus with the cutover's seed — and the vectors each
side gives them, recorded once per query side (:func:`side_query_embedder`): a forecast and the cutover after it,
or the next change's forecast, embed the same queries with the same model once, not each time (a forecast of
MiniLM → a static model otherwise loads MiniLM for 50 queries: ~10 CPU-s, more than the static build)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import numpy as np

from reindex.books.query_vectors import read_query_vectors, write_query_vectors
from reindex.decisions import evaluation as ev
from reindex.domain.config import PipelineConfig, TextHalf
from reindex.domain.identity import digest_json, identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport

__all__ = ["comparison_queries", "side_query_embedder"]


def side_query_embedder(ctx: Any, side: Any) -> Callable[[list[str]], Any]:
    """``side.embed_queries`` (the side's own query embedder: :meth:`reindex.context.Side.embed_queries`),
    remembering what it gave: texts this query side (its vector half with the query prefix) embedded before are
    read from the books (:func:`reindex.books.manifests.read_query_vectors`), the rest embedded, and recorded.
    The side's model is loaded only when a text is missing."""
    # The side's vector id (canonical and versioned: a field added to the config with its default changes nothing) and
    # its query prefix (not in the vector id, but in every query's input).
    key = digest_json({"vector_id": side.vector_id, "query_prefix": side.vector.query_prefix})

    def embed(texts: list[str]) -> Any:
        digests = [hashlib.blake2b(t.encode(), digest_size=16).hexdigest() for t in texts]
        known = read_query_vectors(ctx.state, key)
        missing = list(dict.fromkeys(t for t, d in zip(texts, digests) if d not in known))
        if missing:
            fresh = side.embed_queries(missing)
            by_text = dict(zip(missing, fresh))
            known.update({hashlib.blake2b(t.encode(), digest_size=16).hexdigest(): np.asarray(v, dtype=np.float32)
                          for t, v in by_text.items()})
            write_query_vectors(ctx.state, key, known)
        return np.stack([np.asarray(known[d], dtype=np.float32) for d in digests]) if texts else \
            np.zeros((0, side.vector.dimension), dtype=np.float32)

    return embed


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
