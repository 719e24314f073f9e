"""``reindex plan --forecast [N]``: what a pipeline-scoped change buys, measured on a sample before paying for it
(:mod:`reindex.decisions.forecast`). Reads the live population through a reader and builds both sides in a scratch
store in a temporary folder, so it never touches the live alias and runs beside an apply.

It costs a fraction of what it forecasts: the old side is the live population's own points; the new side takes every
vector the live population or a retained one (built with the same vector half: a rollback left it) already holds,
and embeds only the rest; query vectors each side gave before are read back (:func:`reindex.context.queries.
side_query_embedder`); nothing is indexed (the sample is searched exactly). Its ``cost`` is this process's CPU,
projected before it embeds (``say``) and measured after."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from reindex.books.manifests import read_live, read_measured_rate
from reindex.decisions.evaluation import evaluate
from reindex.decisions.serving import reader_passages
from reindex.decisions.forecast import (
    FORECAST_NEW,
    FORECAST_OLD,
    agreement,
    build_new_side,
    build_old_side,
    chunk_sample,
    default_forecast_documents,
    draw_forecast_sample,
    forecast_section,
    forecast_serving,
    retained_vectors,
    share_space,
)
from reindex.domain.identity import identity_of
from reindex.errors import PlanError
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport
from reindex.adapters.sources.extract import normalise
from reindex.adapters.stores.opening import open_vector_store
from reindex.context import Context
from reindex.context.queries import comparison_queries, side_query_embedder

__all__ = ["DEFAULT_FORECAST_DOCUMENTS", "FORECAST_AUTO", "forecast_change"]

DEFAULT_FORECAST_DOCUMENTS = 100
#: ``plan --forecast`` without a number: a share of the corpus, with a minimum
#: (:func:`reindex.decisions.forecast.default_forecast_documents`), the query documents included.
FORECAST_AUTO = 0


def forecast_change(ctx: Context, n: int = DEFAULT_FORECAST_DOCUMENTS, *, queries: str | Path | None = None,
                    seed: int | None = None, say: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """The forecast of changing the live population to the context's config, the next population (its plan's
    ``forecast`` section), or None when there is nothing to compare (no live population yet, or the config names
    the live pipeline). The old side embeds with the live population's side, the new with the next one's. ``n``:
    documents drawn by length besides those the queries point at (:data:`FORECAST_AUTO`: the whole sample capped at
    a share of the corpus). ``say``: where the sample and its projected cost are told before it runs, and what it
    used after."""
    if n != FORECAST_AUTO and n < 2:
        raise PlanError(f"--forecast: need at least 2 documents, got {n}")
    cfg, state = ctx.config, ctx.state
    live = read_live(state, cfg.index)
    if live is None or identity_of(live.config).pipeline_id == identity_of(cfg).pipeline_id:
        return None
    t0, c0 = time.perf_counter(), time.process_time()
    seed = cfg.cutover.seed if seed is None else seed
    source = open_source(cfg.source)
    sizes = {d.doc_id: d.size for d in source.scan(ScanReport())}
    qs, query_source = comparison_queries(cfg, queries)
    auto = n == FORECAST_AUTO
    sample = draw_forecast_sample(sizes, default_forecast_documents(len(sizes)) if auto else n, seed, qs, total=auto)
    qs = [q for q in qs if not q.relevant or q.relevant & sample.documents]
    old, new = ctx.side(live), ctx.next_side()
    old_cfg = old.config
    embedded: dict[str, Any] = {}  # what the new model gave (the first batch is embedded early to time it)

    def embed_new(texts: list[str]) -> Any:  # the model is loaded only if a text is missing (made once per context)
        todo = [t for t in dict.fromkeys(texts) if t not in embedded]
        if todo:
            embedded.update(zip(todo, new.passage_embedder(batch_size=cfg.apply.embed_batch_size).embed(todo).vectors))
        return [embedded[t] for t in texts]

    embed_old_q, embed_new_q = side_query_embedder(ctx, old), side_query_embedder(ctx, new)
    vector_change = identity_of(old_cfg).vector_id != identity_of(cfg).vector_id
    old_texts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="reindex-forecast-") as tmp:
        scratch = open_vector_store(None, tmp)
        try:
            with ctx.read_only_store() as reader:
                if reader is None:
                    raise PlanError(f"the live population {live.collection} cannot be read for the forecast: its "
                                    "store is missing")
                reusable = build_old_side(scratch, reader, state, live, sample.documents, old_texts)
                kept, retained = retained_vectors(reader, state, cfg.index, identity_of(cfg).vector_id,
                                                  sample.documents, skip=(live.collection,))
                reusable = {**kept, **reusable}
            chunked = chunk_sample(cfg, source.scan(ScanReport(), keep=sample.documents.__contains__), reusable)
            projected = _projected(ctx, cfg, chunked, c0, embed_new)
            if say is not None:
                say(f"forecast: {len(sample.documents):,} of {len(sizes):,} documents sampled ({sample.stratified:,} "
                    f"by length, {sample.labelled:,} more the {len(qs):,} queries point at); {chunked.reused:,} of "
                    f"{chunked.chunks:,} chunks reuse stored vectors"
                    + (f" (also from {', '.join(retained)})" if retained else "")
                    + f", {len(chunked.missing):,} to embed; projected ~{projected['cpu_seconds']:.1f} CPU-s "
                    f"({projected['basis']})")
            cost = build_new_side(scratch, cfg, chunked, embed_new, reusable,
                                  batch=cfg.apply.embed_batch_size)
            k = cfg.cutover.k
            evaluation = evaluate(scratch, FORECAST_OLD, FORECAST_NEW, qs, embed_old_q,
                                  embed_new_q, k=k, seed=seed, payload_old=old_cfg.payload,
                                  payload_new=cfg.payload, segments=cfg.cutover.segments,
                                  bound=cfg.cutover.min_recall_delta,
                                  text_old=partial(normalise, cfg=old_cfg.text.normaliser),
                                  text_new=partial(normalise, cfg=cfg.text.normaliser),
                                  latency_repeats=0)  # the scratch store's latency is not the population's
            outlook = None
            if vector_change and cfg.serving.mode != "old":
                # A model change: what readers could be served while it builds, on the same two sides and queries.
                outlook = forecast_serving(scratch, old_cfg, cfg, qs, embed_old_q, embed_new_q,
                                           embed_new, evaluation["aggregate"], reader_passages(new))
        finally:
            scratch.close()
    agree = None
    if vector_change:
        texts = cost["texts"] or []
        tok = TextPipeline(cfg.text, identity_of(cfg).vector_id).tokenizer
        rate = (read_measured_rate(state, old.vector_id) or {}).get("tokens_per_cpu_second")
        agree = agreement(texts, lambda t: old.passage_embedder(batch_size=cfg.apply.embed_batch_size).embed(t).vectors,
                          embed_new, share_space(old_cfg, cfg), tok.count_batch,
                          old_known=old_texts, old_rate=rate)
    cost["seconds"] = time.perf_counter() - t0
    cost["cpu_seconds"] = time.process_time() - c0  # the whole forecast's, not only its embedding calls
    cost["projected_cpu_seconds"] = projected["cpu_seconds"]
    cost["retained_populations"] = retained
    if say is not None:
        say(f"forecast: used {cost['cpu_seconds']:.1f} CPU-s ({cost['embed_cpu_seconds']:.1f} of them embedding "
            f"{cost['embedded_chunks']:,} chunks) in {cost['seconds']:.1f} s")
    section = forecast_section(evaluation, k, sample, query_source, cost, agree, cfg.cutover)
    if outlook is not None:
        section["serving"] = outlook
    return section


def _projected(ctx: Context, cfg: Any, chunked: Any, c0: float, embed: Callable[[list[str]], Any]) -> dict[str, Any]:
    """What the forecast will cost, told before it embeds the sample: the CPU spent so far (reading and cutting the
    sample, copying the old side) and its tokens to embed at the new model's rate — measured by its last apply or
    `reindex calibrate`, else timed here on the first batch of the sample's texts (embedded now, kept: its model
    loaded with it) — plus what evaluating both sides costs, about as much again as reading them did."""
    from reindex.books.manifests import read_calibration

    vid = identity_of(cfg).vector_id
    rec = read_measured_rate(ctx.state, vid) or read_calibration(ctx.state, vid) or {}
    rate = rec.get("tokens_per_cpu_second")
    basis = f"{rate:,.0f} tokens per CPU-second measured for this model" if rate else ""
    tokens = sum(t for _, t in chunked.missing)
    first_cpu = 0.0
    if not rate and chunked.missing:
        first = chunked.missing[:cfg.apply.embed_batch_size]
        t = time.process_time()
        embed([text for text, _ in first])
        first_cpu = max(time.process_time() - t, 1e-6)
        rate = sum(n for _, n in first) / first_cpu
        basis = f"{rate:,.0f} tokens per CPU-second timed on its first {len(first)} chunks (model load included)"
    spent = time.process_time() - c0 - first_cpu
    left = tokens - (sum(n for _, n in chunked.missing[:cfg.apply.embed_batch_size]) if first_cpu else 0)
    cpu = 2 * spent + first_cpu + (left / rate if rate else 0.0)
    return {"cpu_seconds": round(cpu, 3),
            "basis": f"{tokens:,} tokens to embed at {basis or 'no rate needed'}; {spent:.1f} CPU-s spent reading "
                     "the sample, about as much again to evaluate it"}
