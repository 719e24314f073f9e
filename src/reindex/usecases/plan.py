"""Plan, show, approve, estimate and calibrate."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from reindex import reports

from reindex.foundation import settings
from reindex.domain.config import (
    PipelineConfig,
    load_config,
    parse_chunker_spec,
)
from reindex.errors import ConfigError, ReindexError, SourceError
from reindex.domain.identity import identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport

from reindex import cost as costmod
from reindex.planner.approvals import Approval, approve as _approve, check_approval, read_approval, signing_key
from reindex.books.manifests import read_build_rate, read_calibration, read_measured_rate, write_calibration
from reindex.planner import (
    DEFAULT_TOKENS_PER_MINUTE,
    BuildRate,
    Plan,
    PlanError,
    PlanReading,
    PlanRequest,
    Rates,
    Repair,
    explicit_baseline,
    attach_retained,
    build_rate_name,
    live_baseline,
    plan_change,
    check_plan_index,
    config_in_force,
    read_plan,
    write_plan,
)



from reindex.foundation.throughput import CpuClock, plan_rate, rate_record
from reindex.context.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved, resolve
from reindex.context import Context

__all__ = [
    "LOCAL_PROVIDERS", "SAMPLED_CHUNKS", "approval_status", "approve_plan", "calibrate", "estimate", "make_plan",
    "plan_in_place_part", "rates_for", "sampled_rate", "show_plan",
]


#: Chunks a plan encodes to measure a local model it has no rate for (a new vector id): drawn (seeded) from
#: the first ``8 ×`` as many chunks of the source, like `reindex calibrate`'s 256.
SAMPLED_CHUNKS = 32
#: Providers whose model runs here: their rate is measured in CPU-seconds (an API's is its wall rate).
LOCAL_PROVIDERS = ("sentence-transformers", "model2vec")


def rates_for(ctx: Context, cfg: PipelineConfig | None = None, *, measure: bool = False) -> Rates:
    """Price and throughput, and the index build's rate (:func:`build_rate`). Embedding throughput's precedence:
    an explicit ``cost.tokens_per_minute`` in the config, then the rate
    the last apply of this vector half measured (the real workload on the machine that ran it), then
    `reindex calibrate`'s sample (or a plan's own, below), then a default (150k tokens/min). With
    ``measure`` and a local model (sentence-transformers, model2vec) that has no rate yet, the model is
    timed here on :data:`SAMPLED_CHUNKS` chunks of the corpus instead of taking the default
    (:func:`sampled_rate`). Measured rates carry when and where, and what the hours assume
    (:func:`reindex.foundation.throughput.plan_rate`: per CPU-second × the CPUs of the workers measured).
    ``cfg``: the config priced (default: the context's)."""
    cfg = cfg or ctx.config
    return dataclasses.replace(_embedding_rates(ctx, cfg, measure), build=build_rate(ctx, cfg))


def build_rate(ctx: Context, cfg: PipelineConfig) -> BuildRate:
    """What the plan prices the index build with: where the config's backend builds (its ``index_build``
    capability), this machine's CPUs when the build runs in apply (a server's are unknown), and the build the last
    apply with the same backend, dimension, precision and graph parameters measured (none: the bench's figures)."""
    runs = ctx.backend(cfg).capabilities.index_build
    rec = None
    if runs == "apply":
        try:
            rec = read_build_rate(ctx.state, build_rate_name(cfg))
        except ReindexError:
            rec = None
        if not (rec and int(rec.get("points") or 0) > 0 and float(rec.get("cpu_seconds") or 0) > 0):
            rec = None
        elif rec.get("at"):
            rec = {**rec, "at": _iso(rec["at"])}
    return BuildRate(runs=runs, cpus=(os.cpu_count() or 1) if runs == "apply" else None, measured=rec)


def _embedding_rates(ctx: Context, cfg: PipelineConfig, measure: bool) -> Rates:
    if cfg.cost.tokens_per_minute:
        return Rates(cfg.cost.usd_per_mtok, cfg.cost.tokens_per_minute, "config")
    vector_id = identity_of(cfg).vector_id
    local = cfg.vector.provider in LOCAL_PROVIDERS
    for source, read in (("apply", read_measured_rate), ("calibration", read_calibration)):
        try:
            rec = read(ctx.state, vector_id)
        except ReindexError:
            rec = None
        if rec and float(rec.get("tokens_per_minute") or 0) > 0:
            source = "sampled" if rec.get("by") == "reindex plan" else source
            per_minute, assumes = plan_rate(rec, local=local, workers=None if source == "apply" else 1)
            return Rates(cfg.cost.usd_per_mtok, per_minute, source, _measured(source, rec), assumes)
    if measure and local:
        return sampled_rate(ctx, cfg)
    return Rates(cfg.cost.usd_per_mtok, DEFAULT_TOKENS_PER_MINUTE, "default")


def sampled_rate(ctx: Context, cfg: PipelineConfig) -> Rates:
    """Time the configured local model on :data:`SAMPLED_CHUNKS` chunks of the corpus (CPU-seconds), record it
    as this vector half's calibration (by ``reindex plan``, so later plans reuse it) and price with it. Costs
    loading the model (a distilled or exported one is made by resolving the config, before this), a warm-up
    of 8 chunks and the encode: measured ~13 CPU-s for all-MiniLM-L6-v2 in a fresh process (mostly importing
    torch and sentence-transformers), ~0.9 CPU-s for a static model (docs/design-notes.md)."""
    texts = _corpus_chunks(cfg, SAMPLED_CHUNKS, seed=0)
    rec, _ = _time_backend(ctx, cfg, texts, [])
    rec["by"] = "reindex plan"
    try:
        write_calibration(ctx.state, rec["vector_id"], rec)
    except ReindexError:
        pass  # a state nobody may write to: this plan still prices with the measurement
    per_minute, assumes = plan_rate(rec, local=True, workers=1)
    return Rates(cfg.cost.usd_per_mtok, per_minute, "sampled", _measured("sampled", rec), assumes)


def _iso(at: float | str) -> str:
    """A record's ``at`` (seconds since the epoch) as ISO UTC."""
    import datetime as _dt

    return _dt.datetime.fromtimestamp(float(at), _dt.UTC).isoformat(timespec="seconds")


def _measured(source: str, rec: dict) -> dict:
    """When, where and on how much a rate was measured (shown in every plan report)."""
    at = rec.get("at")
    when = _iso(at) if at else None
    by = {"apply": "reindex apply", "sampled": "reindex plan"}.get(source, "reindex calibrate")
    keys = ("tokens", "seconds", "cpu_seconds", "tokens_per_cpu_second", "workers", "threads", "load", "cpus", "chunks")
    return {"by": by, "at": when, "machine": rec.get("machine"), "plan_hash": rec.get("plan_hash"),
            **{k: rec.get(k) for k in keys if k in rec or k in ("tokens", "seconds")}}


def make_plan(
    ctx: Context,
    *,
    baseline_config: str | Path | None = None,
    baseline_corpus: str | None = None,
    out: str | Path | None = "plans",
    sample: int | None = None,
    seed: int = 0,
    progress=None,
    forecast: int | None = None,
    queries: str | Path | None = None,
    verify: bool = False,
    reading: PlanReading | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[Plan, Path | None]:
    """Plan a change of the context's config against the live population or an explicit baseline. ``forecast``: build
    both sides on a sample of that many documents (plus the documents ``queries`` — the cutover's labelled
    queries file — point at, or the cutover's probes; 0: a share of the corpus, those included) and put what the
    change buys into the plan (:mod:`reindex.decisions.forecast`); asked for automatically when
    ``approval.require_forecast`` is set; ``say`` hears the forecast's sample and projected cost before it runs.
    ``verify``: read the whole source and compare content hashes even where its cursor would find the changes."""
    cfg = ctx.config
    part = None
    if forecast is not None and (baseline_config is not None or baseline_corpus is not None):
        raise PlanError("--forecast compares the change with the live population; it cannot be combined with "
                        "--baseline-config / --baseline-corpus")
    if sample is not None and sample < 2:
        raise PlanError(f"--sample: need at least 2 documents, got {sample}")
    if baseline_config is not None or baseline_corpus is not None:
        old_cfg = load_resolved(baseline_config) if baseline_config is not None else cfg
        corpus = baseline_corpus or old_cfg.source.uri
        if "://" not in corpus and not Path(corpus).exists():
            raise SourceError(f"--baseline-corpus {corpus}: no such file or directory")
        baseline = explicit_baseline(old_cfg, corpus, only=set() if sample else None)
    else:
        _restore_live(ctx)
        baseline = live_baseline(ctx.state, cfg.index)
        new_pipeline = identity_of(cfg).pipeline_id
        if baseline.identity is not None and baseline.identity.pipeline_id != new_pipeline:
            if sample is None:
                part = _in_place_part(ctx, baseline, out, progress)
            attach_retained(baseline, ctx.state, cfg.index, new_pipeline)
    new_vectors = baseline.identity is None or baseline.identity.vector_id != identity_of(cfg).vector_id
    outlook = None
    n = forecast if forecast is not None else (cfg.approval.forecast_documents if cfg.approval.require_forecast
                                               else None)
    if n is not None and baseline.kind == "live" and baseline_config is None and baseline_corpus is None:
        from reindex.usecases.forecast import forecast_change

        outlook = forecast_change(ctx, n, queries=queries, say=say)
    explicit = baseline_config is not None or baseline_corpus is not None  # a what-if: apply refuses it
    req = PlanRequest(cfg, str(ctx.config_arg), baseline, rates_for(ctx, measure=new_vectors), sample=sample,
                      seed=seed, progress=progress, **_limit_kwargs(cfg), in_place_part=part,
                      forecast=outlook, verify=verify, carry_to=None if explicit else _carry_to(ctx),
                      reading=None if explicit else reading)
    plan = plan_change(req)
    if not explicit:
        from reindex.context.disk import cutover_room_warning

        room = cutover_room_warning(plan, cfg)
        if room is not None:
            import logging

            logging.getLogger("reindex").warning("warning: %s", room)
    return plan, _written(plan, out)


def _carry_to(ctx: Context):
    """The state store a plan's chunks are carried to apply in (:mod:`reindex.books.carried`), or None when carrying is
    switched off (``REINDEX_CARRY_CHUNKS=0``)."""
    return ctx.state if settings.carry_chunks() else None


def _written(plan: Plan, out: str | Path | None) -> Path | None:
    """Write ``plan`` and its reports into ``out`` (None: nowhere); the plan file's path."""
    path = write_plan(plan, out) if out is not None else None
    if path is not None:
        reports.write_reports(plan, path)
    return path


def plan_in_place_part(ctx: Context, *, out: str | Path | None = "plans",
                       progress=None, reading: PlanReading | None = None) -> tuple[Plan, Path | None] | None:
    """The document changes of a pipeline-scoped change as a plan of their own: the live population's own
    config (:meth:`~reindex.books.manifests.Population.governs`) against the live population, applied in place now
    while the pipeline change waits for approval and its build. None when the config names the live pipeline
    (then :func:`make_plan` is the whole change) or the part has nothing to apply in place."""
    from reindex.books.manifests import read_live

    cfg = ctx.config
    live = read_live(ctx.state, cfg.index)
    if live is None or identity_of(live.config).pipeline_id == identity_of(cfg).pipeline_id:
        return None
    part = _plan_part(ctx, live, live_baseline(ctx.state, cfg.index), progress, reading)
    return (part, _written(part, out)) if part is not None else None


def plan_repair(ctx: Context, repair: Repair, *, out: str | Path | None = "plans") -> tuple[Plan, Path | None]:
    """The plan that repairs what ``reindex doctor`` found in the live population (:class:`~reindex.planner.Repair`):
    document-scoped, in place, under the live population's own config (governed by the config file, as the
    in-place part of a pipeline change is), approved and applied like any plan. PlanError when there is no live
    population or the source changed as well (a sync comes first)."""
    from reindex.books.manifests import read_live

    cfg = ctx.config
    live = read_live(ctx.state, cfg.index)
    if live is None:
        raise PlanError(f"index {cfg.index!r} has no live population to repair; build one with `reindex plan` and "
                        "`reindex apply`")
    own = cfg if identity_of(live.config).pipeline_id == identity_of(cfg).pipeline_id else live.governs(cfg)
    plan = plan_change(PlanRequest(own, str(ctx.config_arg), live_baseline(ctx.state, cfg.index), rates_for(ctx, own),
                                   **_limit_kwargs(own), repair=repair))
    return plan, _written(plan, out)


def _plan_part(ctx: Context, live, baseline, progress, reading: PlanReading | None = None) -> Plan | None:
    """The plan of the document changes under ``live``'s own config, if they are anything to apply in place."""
    part_cfg = live.governs(ctx.config)
    part = plan_change(PlanRequest(part_cfg, str(ctx.config_arg), baseline, rates_for(ctx, part_cfg), progress=progress,
                                   **_limit_kwargs(part_cfg), carry_to=_carry_to(ctx), reading=reading))
    return part if part.kind.in_place else None


def _in_place_part(ctx: Context, baseline, out, progress) -> dict | None:
    """Plan (and write) the in-place part of a pipeline change; its summary for the main plan."""
    from reindex.books.manifests import read_live
    from reindex.planner import plan_filename

    live = read_live(ctx.state, ctx.index)
    part = _plan_part(ctx, live, baseline, progress) if live is not None else None
    if part is None:
        return None
    _written(part, out)
    n = part.numbers
    return {"plan_hash": part.plan_hash, "kind": part.kind.value, "file": plan_filename(part),
            "documents": {"added": n.documents.added, "edited": n.documents.edited, "removed": n.documents.removed},
            "chunks_to_embed": n.chunks_to_embed, "tokens_to_embed": n.tokens_to_embed,
            "approval_required": n.approval_required}


def _restore_live(ctx: Context) -> None:
    """A missing live record while the alias serves a population (deleted as corrupt, say) is rebuilt from the
    alias and the population records before planning: otherwise the plan would be an initial build of every
    document while readers are served the old population."""
    if ctx.books.exists(ctx.books.live_key):
        return
    from reindex.decisions.cutover import restore_live  # only now: it imports the engine (~0.05 CPU-s a plan need not pay)

    with ctx.read_only_store() as store:
        restored = restore_live(store, ctx.state, ctx.index) if store is not None else None
    if restored is not None:
        import logging

        logging.getLogger("reindex").warning(
            "%s was missing; rebuilt it from the alias, which serves %s", ctx.books.describe(ctx.books.live_key),
            restored["collection"])


def _limit_kwargs(cfg: PipelineConfig) -> dict:
    """The model limit a plan checks chunks against, and, when the chunker counts in other units than the model
    (whitespace words, characters, another tokenizer), the model's own counter that checks them."""
    from reindex.adapters.embedders import counting_tokenizer

    limit = _model_limit(cfg)
    name = counting_tokenizer(cfg.vector)
    if limit is None or name is None or name == cfg.text.tokenizer:
        return {"model_limit": limit}
    from reindex.adapters.tokenizers import load_tokenizer

    try:
        counter = load_tokenizer(name)
    except ReindexError:
        return {"model_limit": limit}  # the model's tokenizer cannot be read here: counted in the chunker's units
    return {"model_limit": limit, "model_tokens": counter.count_batch, "model_tokenizer": name}


def _model_limit(cfg: PipelineConfig) -> int | None:
    """The model's input limit in tokens, or None when it cannot be told (then nothing is counted)."""
    from reindex.usecases.configure import model_input_limit

    try:
        return model_input_limit(cfg.vector)
    except ReindexError:
        return None


def show_plan(path: str | Path) -> Plan:
    """Read and verify a plan file."""
    return read_plan(path)


def approve_plan(path: str | Path, by: str, note: str = "",
                 config_path: str | Path | PipelineConfig | None = None) -> tuple[Approval, Path]:
    """Record an approval bound to the plan's hash, signed when the config sets ``approval.hmac_key_env``
    (the config given, else ``reindex.yaml`` here if there is one)."""
    plan = read_plan(path)
    cfg = None
    if config_path is not None:
        cfg = config_path if isinstance(config_path, PipelineConfig) else load_config(config_path)
        check_plan_index(plan, cfg, path)
    elif Path(DEFAULT_CONFIG).is_file():
        try:
            cfg = load_config(DEFAULT_CONFIG)
        except ReindexError:
            cfg = None  # not this plan's concern: an unsigned approval is refused later where signing is required
    return _approve(plan, path, by, note, signing_key(cfg.approval.hmac_key_env) if cfg is not None else None)


def approval_status(path: str | Path) -> Approval | None:
    """The approval of a plan if it has a valid one; raises ApprovalError if it needs one."""
    plan = read_plan(path)
    return check_approval(plan, read_approval(path))


def estimate(
    histogram: str | Path, old: str, new: str, *, usd_per_mtok: float = 0.02, tokens_per_minute: float = 3.5e6,
    dimension: int = 384, precision: str = "float32",
) -> costmod.Estimate:
    """Histogram arithmetic for a corpus nobody has chunked yet."""
    from reindex.cost.histogram_csv import read_histogram

    buckets = read_histogram(histogram)
    return costmod.estimate_histogram(
        buckets, parse_chunker_spec(old), parse_chunker_spec(new), usd_per_mtok=usd_per_mtok,
        tokens_per_minute=tokens_per_minute, dimension=dimension, precision=precision,
    )


def calibrate(ctx: Context, *, chunks: int = 256, seed: int = 0,
              backends_to_measure: Sequence[str] = (), probes: int = 50) -> dict:
    """Time the configured embedder on real chunks of the corpus and record tokens/s in the state; with
    ``backends_to_measure`` (``BACKEND[:PRECISION]``, e.g. ``onnx:int8``) time those backends of the same
    model as well, each recorded under its own vector id. Every local backend is compared with float32 torch
    on the same chunks: mean cosine of the vectors, and the overlap of the top-10 chunks of ``probes`` probe
    queries (the first words of sampled chunks)."""
    import random

    cfg = ctx.config
    ident = identity_of(cfg)
    picked = _corpus_chunks(cfg, chunks, seed)
    rng = random.Random(seed)
    variants = [cfg] + [_backend_variant(cfg, spec) for spec in backends_to_measure]
    local = cfg.vector.provider == "sentence-transformers"
    reference = _backend_variant(cfg, "torch:float32") if local else None
    queries = [" ".join(t.split()[:12]) for t in rng.sample(picked, min(probes, len(picked)))] if local else []
    measured: dict[str, dict] = {}
    vectors: dict[str, tuple] = {}
    for variant in ([*variants, reference] if reference is not None else variants):
        vid = identity_of(variant).vector_id
        if vid in measured:
            continue
        measured[vid], vectors[vid] = _time_backend(ctx, variant, picked, queries)
        write_calibration(ctx.state, vid, measured[vid])
    if reference is not None:
        ref = vectors[identity_of(reference).vector_id]
        for vid, rec in measured.items():
            rec.update(_agreement(ref, vectors[vid]))
    configured = measured[ident.vector_id]
    wanted = list(dict.fromkeys(identity_of(v).vector_id for v in variants))
    return {**configured, "backends": [measured[v] for v in wanted],
            "reference": "torch/float32" if reference is not None else None, "probes": len(queries)}


def _corpus_chunks(cfg: PipelineConfig, n: int, seed: int) -> list[str]:
    """``n`` chunk texts drawn (seeded) from the first ``8 n`` chunks of the source, as the config cuts them."""
    import random

    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    texts: list[str] = []
    for doc in open_source(cfg.source).scan(ScanReport()):
        texts.extend(r.text for r in pipe.chunk_document(doc))
        if len(texts) >= n * 8:
            break
    if not texts:
        raise SourceError(f"{cfg.source.uri}: no chunks to calibrate on")
    return random.Random(seed).sample(texts, min(n, len(texts)))


def _backend_variant(cfg: PipelineConfig, spec: str) -> PipelineConfig:
    """``cfg`` with ``vector.backend`` and ``vector.precision`` from ``BACKEND[:PRECISION]``, resolved."""
    from reindex.domain.config import config_from_dict

    if cfg.vector.provider != "sentence-transformers":
        raise ConfigError(f"--backend {spec}: backends are compared for local sentence-transformers models; "
                          f"vector.provider is {cfg.vector.provider}")
    backend, _, precision = spec.partition(":")
    data = cfg.model_dump(mode="json")
    data["vector"].update(backend=backend, precision=precision or "float32", revision="auto")
    return resolve(config_from_dict(data, f"--backend {spec}"))


def _time_backend(ctx: Context, cfg: PipelineConfig, texts: list[str], queries: list[str]) -> tuple[dict, tuple]:
    """Embed ``texts`` once after a warm-up, timed in CPU-seconds of the process (what the model costs,
    whatever the load) and in wall seconds (what it took here), with the load and CPU count beside them."""
    import platform
    import time

    from reindex.adapters.embedders import describe_embedder

    emb = ctx.embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size, options=cfg.embed)
    emb.embed(texts[: min(8, len(texts))])  # warm-up: first-call allocation is not throughput
    res, seconds, cpu = CpuClock().call(emb.embed, texts)
    raw = getattr(emb, "raw", None)  # the bare library call under the embedder, on the same texts
    raw_cpu = CpuClock().call(raw, texts)[2] if callable(raw) else None
    qv = ctx.with_config(cfg).next_side().embed_queries(queries) if queries else None
    described = describe_embedder(emb)
    rec = {
        "vector_id": identity_of(cfg).vector_id,
        "model": cfg.vector.model,
        **{k: v for k, v in described.items() if k not in ("provider", "threads")},
        "chunks": len(texts),
        **rate_record(res.tokens, cpu, seconds, workers=1, threads=described.get("threads")),
        "truncated": res.truncated,
        # CPU of reindex's embed ÷ the library's own call (None: no library call to compare, e.g. an API or hash)
        "embed_vs_raw": round(cpu / raw_cpu, 3) if raw_cpu else None,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "at": time.time(),
    }
    return rec, (res.vectors, qv)


def _agreement(reference: tuple, other: tuple, k: int = 10) -> dict:
    """Mean (and least) cosine of ``other``'s chunk vectors to the reference's, and the mean overlap of the
    top-``k`` chunks each side retrieves for the probe queries (each side with its own query vectors)."""
    import numpy as np

    def unit(v):
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    (rc, rq), (oc, oq) = reference, other
    cos = np.sum(unit(rc) * unit(oc), axis=1)
    out = {"cosine_to_float32": round(float(cos.mean()), 5), "min_cosine_to_float32": round(float(cos.min()), 5)}
    if rq is not None and len(rq):
        k = min(k, len(rc))
        top = lambda q, c: np.argsort(-(unit(q) @ unit(c).T), axis=1, kind="stable")[:, :k]  # noqa: E731
        a, b = top(rq, rc), top(oq, oc)
        out["recall_at_10_overlap"] = round(float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)])), 4)
    return out
