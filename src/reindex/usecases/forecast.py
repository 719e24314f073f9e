"""``reindex plan --forecast N``: what a pipeline-scoped change buys, measured on a sample before paying for it
(:mod:`reindex.decisions.forecast`). Reads the live population through a reader and builds both sides in a scratch store in
a temporary folder, so it never touches the live alias and runs beside an apply."""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from reindex.domain.config import PipelineConfig
from reindex.errors import PlanError
from reindex.decisions.evaluation import evaluate
from reindex.decisions.forecast import (
    FORECAST_NEW,
    FORECAST_OLD,
    agreement,
    build_new_side,
    build_old_side,
    draw_forecast_sample,
    forecast_section,
    forecast_serving,
    share_space,
)
from reindex.domain.identity import identity_of
from reindex.books.manifests import read_live
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport
from reindex.adapters.sources.extract import normalise
from reindex.adapters.stores.opening import open_vector_store
from reindex.usecases.context import Context
from reindex.usecases.queries import comparison_queries

__all__ = ["DEFAULT_FORECAST_DOCUMENTS", "forecast_change"]

DEFAULT_FORECAST_DOCUMENTS = 100


def forecast_change(ctx: Context, n: int = DEFAULT_FORECAST_DOCUMENTS, *, queries: str | Path | None = None,
                    seed: int | None = None) -> dict[str, Any] | None:
    """The forecast of changing the live population to the context's config, the next population (its plan's
    ``forecast`` section), or None when there is nothing to compare (no live population yet, or the config names
    the live pipeline). The old side embeds with the live population's side, the new with the next one's."""
    if n < 2:
        raise PlanError(f"--forecast: need at least 2 documents, got {n}")
    cfg, state = ctx.config, ctx.state
    live = read_live(state, cfg.index)
    if live is None or identity_of(live.config).pipeline_id == identity_of(cfg).pipeline_id:
        return None
    t0 = time.perf_counter()
    seed = cfg.cutover.seed if seed is None else seed
    source = open_source(cfg.source)
    sizes = {d.doc_id: d.size for d in source.scan(ScanReport())}
    qs, query_source = comparison_queries(cfg, queries)
    sample = draw_forecast_sample(sizes, n, seed, qs)
    qs = [q for q in qs if not q.relevant or q.relevant & sample.documents]
    old, new = ctx.side(live), ctx.next_side()
    old_cfg = old.config
    new_emb = new.passage_embedder(batch_size=cfg.apply.embed_batch_size)
    with tempfile.TemporaryDirectory(prefix="reindex-forecast-") as tmp:
        scratch = open_vector_store(None, tmp)
        try:
            with ctx.read_only_store() as reader:
                if reader is None:
                    raise PlanError(f"the live population {live.collection} cannot be read for the forecast: its "
                                    "store is missing")
                reusable = build_old_side(scratch, reader, state, live, sample.documents)
            docs = source.scan(ScanReport(), keep=sample.documents.__contains__)
            cost = build_new_side(scratch, cfg, docs, lambda t: new_emb.embed(t).vectors, reusable,
                                  batch=cfg.apply.embed_batch_size)
            k = cfg.cutover.k
            evaluation = evaluate(scratch, FORECAST_OLD, FORECAST_NEW, qs, old.embed_queries,
                                  new.embed_queries, k=k, seed=seed, payload_old=old_cfg.payload,
                                  payload_new=cfg.payload, segments=cfg.cutover.segments,
                                  bound=cfg.cutover.min_recall_delta,
                                  text_old=partial(normalise, cfg=old_cfg.text.normaliser),
                                  text_new=partial(normalise, cfg=cfg.text.normaliser))
            outlook = None
            if identity_of(old_cfg).vector_id != identity_of(cfg).vector_id and cfg.serving.mode != "old":
                # A model change: what readers could be served while it builds, on the same two sides and queries.
                outlook = forecast_serving(scratch, old_cfg, cfg, qs, old.embed_queries, new.embed_queries,
                                           lambda t: new_emb.embed(t).vectors, evaluation["aggregate"])
        finally:
            scratch.close()
    agree = None
    if identity_of(old_cfg).vector_id != identity_of(cfg).vector_id:
        old_emb = old.passage_embedder(batch_size=cfg.apply.embed_batch_size)
        texts = cost["texts"] or []
        tok = TextPipeline(cfg.text, identity_of(cfg).vector_id).tokenizer
        agree = agreement(texts, lambda t: old_emb.embed(t).vectors, lambda t: new_emb.embed(t).vectors,
                          share_space(old_cfg, cfg), tok.count_batch)
    cost["seconds"] = time.perf_counter() - t0
    section = forecast_section(evaluation, k, sample, query_source, cost, agree, cfg.cutover)
    if outlook is not None:
        section["serving"] = outlook
    return section
