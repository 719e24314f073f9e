"""Use cases shared by the CLI and the flows. Each function takes plain values, returns a frozen
result and raises ReindexError subclasses for expected failures."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from reindex.config import (
    PipelineConfig,
    SourceConfig,
    TextHalf,
    VectorHalf,
    chunker_spec,
    default_config_yaml,
    load_config,
    parse_chunker_spec,
    with_chunker,
)
from reindex.errors import ConfigError, ReindexError, SourceError
from reindex.identity import Identity, identity_of, resolve_config, vector_id
from reindex.models import model_max_tokens, resolve_model_path
from reindex.pipeline import ChunkRecord, TextPipeline
from reindex.sources import open_source
from reindex.sources.base import Document, ScanReport

DEFAULT_CONFIG = "reindex.yaml"


# --------------------------------------------------------------------------------------------
# init / validate
# --------------------------------------------------------------------------------------------


def init_config(path: str | Path, *, index: str = "docs", source: str = "./corpus", force: bool = False) -> Path:
    """Write a commented default ``reindex.yaml``; refuses to overwrite unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise ConfigError(f"{p}: already exists; pass --force to overwrite it")
    text = default_config_yaml(index=index, source=source)
    # Validate what we write, so `init` can never produce a config `validate` rejects.
    from reindex.config import config_from_dict
    import yaml

    config_from_dict(yaml.safe_load(text), str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


@dataclass(frozen=True, slots=True)
class Validation:
    """A loaded, resolved config with its identity and advisory warnings."""

    path: str
    config: PipelineConfig
    identity: Identity
    chunker: str
    warnings: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "config": self.path,
            **self.identity.as_dict(),
            "chunker": self.chunker,
            "tokenizer": self.config.text.tokenizer,
            "tokenizer_revision": self.config.text.tokenizer_revision,
            "model": self.config.vector.model,
            "model_revision": self.config.vector.revision,
            "warnings": list(self.warnings),
        }


def load_resolved(path: str | Path) -> PipelineConfig:
    """Load a config and resolve its ``auto`` revisions."""
    return resolve_config(load_config(path))


def validate_config(path: str | Path = DEFAULT_CONFIG) -> Validation:
    """Validate ``path``, resolve revisions and compute the ids."""
    cfg = load_resolved(path)
    return Validation(str(path), cfg, identity_of(cfg), chunker_spec(cfg.text.chunker), tuple(config_warnings(cfg)))


def model_input_limit(vector: VectorHalf) -> int | None:
    """Tokens the embedding model sees per input (excluding [CLS]/[SEP]), if known."""
    if vector.max_tokens:
        return vector.max_tokens
    if vector.provider != "sentence-transformers":
        return None
    limit = model_max_tokens(resolve_model_path(vector.model))
    return limit - 2 if limit else None


def chunk_cap(text: TextHalf) -> int | None:
    """The largest chunk, in tokens, the configured chunker may produce (None for character windows)."""
    c = text.chunker
    if c.kind == "fixed_chars":
        return None
    return getattr(c, "cap", None) or getattr(c, "size", None)


def config_warnings(cfg: PipelineConfig) -> list[str]:
    """Advisories that do not make a config invalid."""
    out = []
    limit = model_input_limit(cfg.vector)
    cap = chunk_cap(cfg.text)
    if limit and cap and cap > limit:
        out.append(
            f"text.chunker allows chunks of up to {cap} tokens but the model reads only {limit}: "
            "longer chunks lose their tail in the vector (apply counts and reports them)"
        )
    if limit and cfg.text.tokenizer != cfg.vector.model:
        out.append(
            f"text.tokenizer ({cfg.text.tokenizer}) is not the embedding model ({cfg.vector.model}): "
            "chunk sizes are not counted in the model's tokens"
        )
    return out


# --------------------------------------------------------------------------------------------
# chunk
# --------------------------------------------------------------------------------------------

_SINGLE_FILE_SUFFIXES = {".txt", ".md", ".rst", ".html", ".htm", ".markdown", ".text"}


@dataclass(frozen=True, slots=True)
class ChunkSummary:
    """Chunk-length summary of one chunker over a set of documents."""

    chunker: str
    documents: int
    chunks: int
    tokens: int
    median_tokens: float
    p10_tokens: float
    p90_tokens: float
    max_tokens: int
    over_model_limit: int
    bad_documents: int
    bad_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "chunker": self.chunker,
            "documents": self.documents,
            "chunks": self.chunks,
            "tokens": self.tokens,
            "median_tokens": self.median_tokens,
            "p10_tokens": self.p10_tokens,
            "p90_tokens": self.p90_tokens,
            "max_tokens": self.max_tokens,
            "over_model_limit": self.over_model_limit,
            "bad_documents": self.bad_documents,
            "bad_reasons": dict(self.bad_reasons),
        }


def _pipeline_config(config_path: str | Path | None, chunker: str | None) -> PipelineConfig:
    if config_path is not None:
        cfg = load_config(config_path)
    else:
        cfg = PipelineConfig(index="adhoc", source=SourceConfig(uri="."))
    if chunker:
        cfg = with_chunker(cfg, parse_chunker_spec(chunker))
    return resolve_config(cfg)


def _documents(path: str | Path, cfg: PipelineConfig, report: ScanReport) -> Iterator[Document]:
    p = Path(str(path))
    if not str(path).startswith("s3://") and p.is_file() and p.suffix.lower() in _SINGLE_FILE_SUFFIXES:
        from reindex.sources.base import BadDocument, check_data

        data = p.read_bytes()
        problem = check_data(data)
        if problem:
            report.add_bad(BadDocument(p.name, problem))
            return
        doc = Document.of(p.name, data)
        report.add(doc)
        yield doc
        return
    if not str(path).startswith("s3://") and not p.exists():
        raise SourceError(f"{path}: no such file or directory")
    src = open_source(cfg.source.model_copy(update={"uri": str(path)}))
    yield from src.scan(report)


def chunk_path(
    path: str | Path, *, config_path: str | Path | None = None, chunker: str | None = None
) -> tuple[list[ChunkRecord], ScanReport, PipelineConfig]:
    """Chunk one file, or every document of a source, with the config's (or ``chunker``'s) text half."""
    cfg = _pipeline_config(config_path, chunker)
    pipe = TextPipeline(cfg.text, vector_id(cfg.vector))
    report = ScanReport()
    records: list[ChunkRecord] = []
    for doc in _documents(path, cfg, report):
        records.extend(pipe.chunk_document(doc))
    return records, report, cfg


def summarize_chunks(
    path: str | Path, *, config_path: str | Path | None = None, chunker: str | None = None
) -> ChunkSummary:
    """Chunk a whole source and summarise chunk lengths (streaming: keeps only token counts)."""
    cfg = _pipeline_config(config_path, chunker)
    pipe = TextPipeline(cfg.text, vector_id(cfg.vector))
    report = ScanReport()
    lengths: list[int] = []
    docs = 0
    for doc in _documents(path, cfg, report):
        docs += 1
        lengths.extend(c.tokens for c in pipe.chunker.chunk(pipe.document_text(doc)))
    limit = model_input_limit(cfg.vector)
    qs = statistics.quantiles(lengths, n=10, method="inclusive") if len(lengths) >= 2 else [float(sum(lengths))] * 9
    return ChunkSummary(
        chunker=pipe.spec,
        documents=docs,
        chunks=len(lengths),
        tokens=sum(lengths),
        median_tokens=float(statistics.median(lengths)) if lengths else 0.0,
        p10_tokens=float(qs[0]),
        p90_tokens=float(qs[-1]),
        max_tokens=max(lengths, default=0),
        over_model_limit=sum(1 for n in lengths if limit and n > limit),
        bad_documents=len(report.bad),
        bad_reasons=dict(sorted(report.by_reason.items())),
    )


# --------------------------------------------------------------------------------------------
# plan / show / approve / estimate / classify / calibrate
# --------------------------------------------------------------------------------------------

from reindex import cost as costmod  # noqa: E402
from reindex.approvals import Approval, approve as _approve, check_approval, read_approval  # noqa: E402
from reindex.manifests import read_calibration, write_calibration  # noqa: E402
from reindex.planner import (  # noqa: E402
    DEFAULT_TOKENS_PER_MINUTE,
    Baseline,
    Plan,
    PlanError,
    PlanRequest,
    Rates,
    explicit_baseline,
    live_baseline,
    no_baseline,
    plan_change,
    read_plan,
    write_plan,
)
from reindex.stores.objects import open_object_store  # noqa: E402


def state_store(cfg: PipelineConfig):
    """The object store holding plans' state, manifests, locks and calibration."""
    return open_object_store(cfg.state.uri, cfg.state.endpoint_url)


def rates_for(cfg: PipelineConfig) -> Rates:
    """Price and throughput: config first, then the calibrated rate in the state, then a default."""
    if cfg.cost.tokens_per_minute:
        return Rates(cfg.cost.usd_per_mtok, cfg.cost.tokens_per_minute, "config")
    try:
        cal = read_calibration(state_store(cfg), identity_of(cfg).vector_id)
    except ReindexError:
        cal = None
    if cal:
        return Rates(cfg.cost.usd_per_mtok, float(cal["tokens_per_minute"]), "calibration")
    return Rates(cfg.cost.usd_per_mtok, DEFAULT_TOKENS_PER_MINUTE, "default")


def make_plan(
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    baseline_config: str | Path | None = None,
    baseline_corpus: str | None = None,
    out: str | Path | None = "plans",
    sample: int | None = None,
    seed: int = 0,
    progress=None,
) -> tuple[Plan, Path | None]:
    """Plan a change of ``config_path`` against the live population or an explicit baseline."""
    cfg = load_resolved(config_path)
    if sample is not None and sample < 2:
        raise PlanError(f"--sample: need at least 2 documents, got {sample}")
    if baseline_config is not None or baseline_corpus is not None:
        old_cfg = load_resolved(baseline_config) if baseline_config is not None else cfg
        corpus = baseline_corpus or old_cfg.source.uri
        if "://" not in corpus and not Path(corpus).exists():
            raise SourceError(f"--baseline-corpus {corpus}: no such file or directory")
        baseline = explicit_baseline(old_cfg, corpus, only=set() if sample else None)
    else:
        baseline = live_baseline(state_store(cfg), cfg.index)
    req = PlanRequest(cfg, str(config_path), baseline, rates_for(cfg), sample=sample, seed=seed, progress=progress)
    plan = plan_change(req)
    path = write_plan(plan, out) if out is not None else None
    if path is not None:
        from reindex.reports import write_reports

        write_reports(plan, path)
    return plan, path


def show_plan(path: str | Path) -> Plan:
    """Read and verify a plan file."""
    return read_plan(path)


def check_plan_index(plan: Plan, cfg: PipelineConfig, plan_path: str | Path) -> None:
    if plan.index != cfg.index:
        raise PlanError(f"{plan_path}: plan is for index {plan.index!r}, but the config is for {cfg.index!r}")


def approve_plan(path: str | Path, by: str, note: str = "", config_path: str | Path | None = None) -> tuple[Approval, Path]:
    """Record an approval bound to the plan's hash."""
    plan = read_plan(path)
    if config_path is not None:
        check_plan_index(plan, load_config(config_path), path)
    return _approve(plan, path, by, note)


def approval_status(path: str | Path) -> Approval | None:
    """The approval of a plan if it has a valid one; raises ApprovalError if it needs one."""
    plan = read_plan(path)
    return check_approval(plan, read_approval(path))


def estimate(
    histogram: str | Path, old: str, new: str, *, usd_per_mtok: float = 0.02, tokens_per_minute: float = 3.5e6,
    dimension: int = 384, precision: str = "float32",
) -> costmod.Estimate:
    """Histogram arithmetic for a corpus nobody has chunked yet."""
    from reindex.histogram import read_histogram

    buckets = read_histogram(histogram)
    return costmod.estimate_histogram(
        buckets, parse_chunker_spec(old), parse_chunker_spec(new), usd_per_mtok=usd_per_mtok,
        tokens_per_minute=tokens_per_minute, dimension=dimension, precision=precision,
    )


def calibrate(config_path: str | Path = DEFAULT_CONFIG, *, chunks: int = 256, seed: int = 0) -> dict:
    """Time the configured embedder on real chunks of the corpus; record tokens/s in the state."""
    import platform
    import random
    import time

    from reindex.embedders import make_embedder

    cfg = load_resolved(config_path)
    ident = identity_of(cfg)
    pipe = TextPipeline(cfg.text, ident.vector_id)
    texts: list[str] = []
    for doc in open_source(cfg.source).scan(ScanReport()):
        texts.extend(r.text for r in pipe.chunk_document(doc))
        if len(texts) >= chunks * 8:
            break
    if not texts:
        raise SourceError(f"{cfg.source.uri}: no chunks to calibrate on")
    rng = random.Random(seed)
    picked = rng.sample(texts, min(chunks, len(texts)))
    emb = make_embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size)
    emb.embed(picked[: min(8, len(picked))])  # warm-up: first-call allocation is not throughput
    t0 = time.perf_counter()
    res = emb.embed(picked)
    seconds = time.perf_counter() - t0
    tps = res.tokens / seconds if seconds > 0 else 0.0
    result = {
        "vector_id": ident.vector_id,
        "model": cfg.vector.model,
        "chunks": len(picked),
        "tokens": res.tokens,
        "seconds": round(seconds, 3),
        "tokens_per_second": round(tps, 1),
        "tokens_per_minute": round(tps * 60, 1),
        "truncated": res.truncated,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "at": time.time(),
    }
    write_calibration(state_store(cfg), ident.vector_id, result)
    return result


@dataclass(frozen=True, slots=True)
class Classification:
    """CI mode: the seed's mechanical rule on a fixture, plus projected corpus-wide numbers."""

    outcome: str  # safe | text-affecting | structural
    kind: str  # the plan kind the change would be
    fixture_documents: int
    chunks_base: int
    chunks_head: int
    tokens_base: int
    tokens_head: int
    fingerprints_changed: int  # head fingerprints not in base
    projection: dict | None
    explanation: tuple[str, ...]

    EXIT_CODES = {"safe": 0, "text-affecting": 2, "structural": 3}

    @property
    def exit_code(self) -> int:
        return self.EXIT_CODES[self.outcome]

    def as_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "kind": self.kind,
            "exit_code": self.exit_code,
            "fixture_documents": self.fixture_documents,
            "chunks_base": self.chunks_base,
            "chunks_head": self.chunks_head,
            "tokens_base": self.tokens_base,
            "tokens_head": self.tokens_head,
            "fingerprints_changed": self.fingerprints_changed,
            "projection": self.projection,
            "explanation": list(self.explanation),
        }


def classify_change(
    fixture: str, base: str | Path, head: str | Path, *, scale_to: int | None = None, histogram: str | Path | None = None,
) -> Classification:
    """Chunk a fixture with both configs: fingerprint set changed without the chunk count changing =
    text-affecting; count changed = structural; neither = safe (seed 001)."""
    from reindex.planner import explain_changes

    if scale_to is not None and histogram is not None:
        raise ConfigError("--scale-to and --histogram are alternatives; give one")
    b_cfg, h_cfg = load_resolved(base), load_resolved(head)
    sides = []
    for cfg in (b_cfg, h_cfg):
        pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
        fps: set[str] = set()
        chunks = tokens = docs = 0
        for doc in _documents(fixture, cfg, ScanReport()):
            docs += 1
            for r in pipe.chunk_document(doc):
                fps.add(r.fingerprint)
                chunks += 1
                tokens += r.tokens
        sides.append((fps, chunks, tokens, docs))
    (bf, bc, bt, bd), (hf, hc, ht, _) = sides
    outcome = "structural" if bc != hc else ("text-affecting" if bf != hf else "safe")
    b_id, h_id = identity_of(b_cfg), identity_of(h_cfg)
    if b_id.vector_id != h_id.vector_id:
        kind = "pipeline-scoped/vector"
    elif b_id.text_id != h_id.text_id:
        kind = "pipeline-scoped/text"
    else:
        kind = "none"
    projection = None
    if scale_to is not None:
        f = scale_to / bd if bd else 0.0
        projection = {
            "method": f"linear scale-up of the fixture ({bd} documents) to {scale_to:,} documents",
            "documents": scale_to,
            "chunks_base": round(bc * f),
            "chunks_head": round(hc * f),
            "change_pct": round((hc - bc) / bc * 100, 1) if bc else None,
            # Upper bound: a scale-up cannot tell which texts survive, so every head token counts.
            "tokens_to_embed_max": round((ht if outcome != "safe" else 0) * f),
        }
    elif histogram is not None:
        est = estimate(histogram, chunker_spec(b_cfg.text.chunker), chunker_spec(h_cfg.text.chunker),
                       usd_per_mtok=h_cfg.cost.usd_per_mtok or 0.02,
                       tokens_per_minute=h_cfg.cost.tokens_per_minute or 3.5e6, dimension=h_cfg.vector.dimension)
        projection = {
            "method": "window arithmetic over the histogram (seed 001)",
            "documents": est.documents,
            "chunks_base": est.chunks_old,
            "chunks_head": est.chunks_new,
            "change_pct": round((est.chunks_new - est.chunks_old) / est.chunks_old * 100, 1) if est.chunks_old else None,
            "tokens_to_embed": est.tokens_to_embed if outcome != "safe" else 0,
            "usd": round(est.usd, 2),
            "hours": round(est.hours, 2),
            "peak_vectors": est.peak_vectors,
        }
    lines = tuple(e["line"] for e in explain_changes(b_cfg, h_cfg))
    return Classification(outcome, kind, bd, bc, hc, bt, ht, len(hf - bf), projection, lines)
