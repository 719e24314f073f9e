"""Use cases shared by the CLI and the flows. Each function takes plain values, returns a frozen
result and raises ReindexError subclasses for expected failures."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from reindex.atomic import atomic_write_text
from reindex.config import (
    PipelineConfig,
    SourceConfig,
    TextHalf,
    VectorHalf,
    chunker_spec,
    config_from_dict,
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
    return atomic_write_text(p, text)


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
    if limit and cfg.vector.provider == "sentence-transformers" and cfg.text.tokenizer != cfg.vector.model:
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
    Plan,
    PlanError,
    PlanRequest,
    Rates,
    explicit_baseline,
    live_baseline,
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
    emb = make_embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size, options=cfg.embed)
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


# --------------------------------------------------------------------------------------------
# apply
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApplyReport:
    """What an apply did, planned vs actual."""

    plan_hash: str
    kind: str
    collection: str | None
    status: str  # done | already-applied | nothing-to-do | failed
    report: dict
    report_path: Path | None

    def as_dict(self) -> dict:
        return {"plan_hash": self.plan_hash, "kind": self.kind, "collection": self.collection, "status": self.status,
                "report_path": str(self.report_path) if self.report_path else None, **self.report}


def vector_store_for(cfg: PipelineConfig):
    """The Qdrant store of a config: a server by URL, or embedded under the state folder."""
    from reindex.stores.qdrant import open_vector_store

    path = cfg.store.path
    if cfg.store.url is None and path is None:
        base = cfg.state.uri if "://" not in cfg.state.uri else str(Path(".reindex").resolve())
        path = str(Path(base) / "qdrant")
    return open_vector_store(cfg.store.url, path, cfg.store.api_key_env)


def corpus_digest(cfg: PipelineConfig) -> str:
    """The digest the planner records for a corpus: ids and content hashes in scan order."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for doc in open_source(cfg.source).scan(ScanReport()):
        h.update(f"{doc.doc_id}\0{doc.content_hash}\n".encode())
    return h.hexdigest()


def check_drift(plan: Plan, cfg: PipelineConfig, state) -> list[str]:
    """Inputs of the plan that no longer match: config, live population, corpus."""
    from reindex.manifests import digest_json, manifest_digest, read_live

    problems = []
    inputs = plan.body["inputs"]
    if digest_json(cfg.model_dump(mode="json")) != inputs["config"]["digest"]:
        problems.append(f"the config changed since the plan (digest {inputs['config']['digest'][:12]})")
    base = inputs["baseline"]
    live = read_live(state, cfg.index)
    if base["kind"] == "explicit":
        problems.append("the plan was made against an explicit baseline (--baseline-config/--baseline-corpus), "
                        "not the live index")
    elif base["kind"] == "none" and live is not None:
        problems.append(f"the plan is an initial build but index {cfg.index!r} now serves {live.collection}")
    elif base["kind"] == "live":
        if live is None or live.collection != base["collection"]:
            problems.append(f"the live population was {base['collection']} at planning but is now "
                            f"{live.collection if live else 'none'}")
        elif manifest_digest(state, cfg.index, live.collection) != base["manifest_digest"]:
            problems.append(f"the live population {live.collection} changed since the plan")
    now = corpus_digest(cfg)
    if now != inputs["corpus"]["digest"]:
        problems.append(f"the corpus was {inputs['corpus']['digest'][:12]} at planning but is now {now[:12]}")
    return problems


def apply_plan(
    plan_path: str | Path,
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    replan: bool = False,
    progress=None,
    use_prefect: bool = True,
) -> ApplyReport:
    """Carry out a plan: refuse drifted or unapproved plans, take the index lock, run the flow."""
    import json as _json
    import socket
    import threading
    import time
    import uuid

    from reindex import execution
    from reindex.approvals import ApprovalError
    from reindex.manifests import (
        PopulationRecord,
        acquire_lock,
        read_live,
        read_population,
        write_population,
    )
    from reindex.embedders import make_embedder

    plan = read_plan(plan_path)
    cfg = load_resolved(config_path)
    check_plan_index(plan, cfg, plan_path)
    state = state_store(cfg)
    done_key = f"indexes/{cfg.index}/runs/{plan.plan_hash}/done.json"
    if state.exists(done_key):
        prev = _json.loads(state.get(done_key) or b"{}")
        return ApplyReport(plan.plan_hash, plan.kind, prev.get("collection"), "already-applied", prev, None)
    problems = check_drift(plan, cfg, state)
    if problems:
        if not replan:
            raise PlanError(
                f"{plan_path}: " + "; ".join(problems) + ". Run `reindex plan` again, or pass --replan"
            )
        new_plan, new_path = make_plan(config_path, out=Path(plan_path).parent)
        plan, plan_path = new_plan, new_path
    try:
        check_approval(plan, read_approval(plan_path))
    except ApprovalError:
        raise
    if plan.kind == "none":
        return ApplyReport(plan.plan_hash, plan.kind, None, "nothing-to-do", {}, None)

    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    lock = acquire_lock(state, cfg.index, owner, purpose=f"apply {plan.plan_hash[:12]} ({plan.kind})")
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lock.ttl / 3):
            try:
                lock.heartbeat()
            except ReindexError:
                return

    beater = threading.Thread(target=beat, daemon=True, name="reindex-lock-heartbeat")
    beater.start()
    store = None
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        ident = identity_of(cfg)
        live = read_live(state, cfg.index)
        in_place = plan.kind == "document-scoped"
        target = live.collection if in_place and live else ident.collection
        old = live.collection if live else None
        old_cfg = config_from_dict(live.config) if live else None
        store = vector_store_for(cfg)
        t = time.perf_counter()
        if not store.collection_exists(target):
            store.create_collection(target, dimension=cfg.vector.dimension, distance=cfg.vector.distance, bulk=True,
                                    shard_number=cfg.store.shard_number, replication_factor=cfg.store.replication_factor)
            for fld in ("doc_id", "fingerprint"):
                store.create_payload_index(target, fld, "keyword")
        if not in_place:
            rec = read_population(state, cfg.index, target)
            now = time.time()
            write_population(state, PopulationRecord(cfg.index, target, cfg.model_dump(mode="json"), ident.as_dict(),
                                                     "building", rec.created_at if rec else now, now))
        embedder = make_embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size, options=cfg.embed)
        phases["setup"] = time.perf_counter() - t
        ctx = execution.ApplyContext(
            index=cfg.index, cfg=cfg, identity=ident, target=target, old=None if in_place else old,
            old_shards=old_cfg.apply.shards if old_cfg else None, run=plan.plan_hash, shards=cfg.apply.shards,
            state=state, store=store, embedder=embedder, pipeline=TextPipeline(cfg.text, ident.vector_id),
            in_place=in_place, progress=progress,
        )
        w = plan.body["work"]
        if in_place:
            affected = sorted(set(w["affected_documents"]) | set(w["removed_documents"]))
            shards = sorted({execution.shard_of(d, cfg.apply.shards) for d in affected})
            only, removed = w["affected_documents"], w["removed_documents"]
        else:
            shards, only, removed = list(range(cfg.apply.shards)), None, []
        if progress:
            progress({"kind": "start", "shards": len(shards), "chunks_planned": w["chunks_new"] if not in_place else None,
                      "tokens_planned": w["tokens_to_embed"], "documents_planned": w["documents"]["total"] if not in_place else len(only or [])})
        t = time.perf_counter()
        if use_prefect:
            from reindex.orchestration import run_apply

            summary = run_apply(ctx, shards, only=only, removed=removed)
        else:
            # The same shards on a plain thread pool (as Prefect's runner does), so scans and chunking
            # of one shard overlap with another's embedding.
            from concurrent.futures import ThreadPoolExecutor

            sel = set(only) if only is not None else None
            workers = int(os.environ.get("REINDEX_SHARD_WORKERS", "4"))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reindex-shard") as pool:
                results = list(pool.map(
                    lambda k: execution.run_shard(ctx, k, only=sel, removed=set(removed)).as_dict(), shards))
            summary = {"shards": results, "failed_shards": [], "catch_up": execution.catch_up(ctx)}
        phases["shards+catch-up"] = time.perf_counter() - t
        failures = summary["failed_shards"] + [
            {"shard": r["shard"], **f} for r in summary["shards"] for f in r["failures"]
        ]
        t = time.perf_counter()
        if not failures and not in_place:
            store.finish_bulk(target)
            rec = read_population(state, cfg.index, target)
            write_population(state, PopulationRecord(cfg.index, target, cfg.model_dump(mode="json"), ident.as_dict(),
                                                     "ready", rec.created_at if rec else time.time(), time.time()))
        phases["finish"] = time.perf_counter() - t
        report = _run_report(plan, summary, failures, phases, time.perf_counter() - t0, target, store)
        report_path = Path(plan_path).with_name(Path(plan_path).name.removesuffix(".json") + ".run.json")
        atomic_write_text(report_path, _json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        status = "failed" if failures else "done"
        if not failures:
            state.put(done_key, _json.dumps({**report, "collection": target}, sort_keys=True).encode())
        return ApplyReport(plan.plan_hash, plan.kind, target, status, report, report_path)
    finally:
        stop.set()
        if store is not None:
            store.close()
        lock.release()


def _run_report(plan: Plan, summary: dict, failures: list, phases: dict, seconds: float, target: str, store) -> dict:
    shards = summary["shards"]
    w = plan.body["work"]
    total = lambda k: sum(r[k] for r in shards)  # noqa: E731
    catch = summary["catch_up"]
    actual_points = store.count(target)
    return {
        "collection": target,
        "seconds": round(seconds, 3),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "planned": {
            "chunks_new": w["chunks_new"],
            "chunks_reused": w["chunks_reused"],
            "chunks_to_embed": w["chunks_to_embed"],
            "tokens_to_embed": w["tokens_to_embed"],
        },
        "actual": {
            "documents": total("documents"),
            "chunks_written": total("chunks"),
            "reused_from_old": total("reused_old"),
            "reused_from_target": total("reused_target"),
            "embedded": total("embedded"),
            "tokens_embedded": total("tokens_embedded"),
            "truncated": total("truncated"),
            "deleted": total("deleted"),
            "points_in_collection": actual_points,
            "shards_run": sum(1 for r in shards if not r["skipped"]),
            "shards_skipped": sum(1 for r in shards if r["skipped"]),
        },
        "catch_up": catch,
        "bad_documents": [b for r in shards for b in r["bad"]],
        "failures": failures,
    }


# --------------------------------------------------------------------------------------------
# cutover / rollback / gc / status
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CutoverReport:
    report: dict
    report_path: Path | None

    @property
    def passed(self) -> bool:
        return self.report["passed"]

    def as_dict(self) -> dict:
        return {**self.report, "report_path": str(self.report_path) if self.report_path else None}


def _latest_plan_for(cfg: PipelineConfig, plans_dir: str | Path = "plans") -> Path:
    from reindex.identity import identity_of as _ident

    coll = _ident(cfg).collection
    cands = sorted(p for p in Path(plans_dir).glob(f"*-{cfg.index}-*.json")
                   if p.name.count(".") == 1)
    for p in reversed(cands):
        try:
            plan = read_plan(p)
        except ReindexError:
            continue
        if plan.body["identity"]["new"]["collection"] == coll and plan.kind != "document-scoped":
            return p
    raise PlanError(f"no plan in {plans_dir}/ builds {coll}; give the plan file")


def cutover(
    plan_path: str | Path | None = None,
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    queries: str | Path | None = None,
    k: int | None = None,
    force: bool = False,
    by: str | None = None,
) -> CutoverReport:
    """Evaluate old vs new on identical queries, gate, and swap the alias atomically on pass."""
    import json as _json
    import logging
    import socket
    import uuid

    from reindex import cutover as co
    from reindex import evaluation as ev
    from reindex.embedders import make_embedder
    from reindex.manifests import acquire_lock, read_live, read_population
    from reindex.reports_cutover import write_cutover_reports

    cfg = load_resolved(config_path)
    path = Path(plan_path) if plan_path else _latest_plan_for(cfg)
    plan = read_plan(path)
    check_plan_index(plan, cfg, path)
    if plan.kind in ("document-scoped", "none"):
        raise co.CutoverError(f"{path}: a {plan.kind} plan is applied in place; there is nothing to cut over")
    if force:
        approval = read_approval(path)
        if approval is None or approval.plan_hash != plan.plan_hash:
            raise co.CutoverError(f"--force needs an approval record for plan {plan.plan_hash[:12]}: "
                                  f"run `reindex approve {path} --by NAME` first")
    state = state_store(cfg)
    shadow = plan.body["identity"]["new"]["collection"]
    rec = read_population(state, cfg.index, shadow)
    if rec is None or rec.state not in ("ready", "live", "retired"):
        raise co.CutoverError(f"population {shadow} is not built ({rec.state if rec else 'absent'}); run `reindex apply {path}`")
    expected = plan.body["inputs"]["baseline"].get("collection")
    lock = acquire_lock(state, cfg.index, f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
                        purpose=f"cutover to {shadow}")
    store = vector_store_for(cfg)
    try:
        current = store.get_alias(cfg.index)
        if current != expected:
            raise co.CutoverError(
                f"alias {cfg.index!r} points to {current or 'nothing'} but the plan was made against "
                f"{expected or 'no alias'}: someone else moved it; run `reindex plan` again"
            )
        if current is None:
            co.check_names(store, cfg.index)
        kk = k or cfg.cutover.k
        new_emb = make_embedder(cfg.vector, options=cfg.embed)
        embed_new = lambda texts: new_emb.embed(texts).vectors  # noqa: E731
        evaluation = None
        query_source = "none (initial build: no old population to compare)"
        vectors_note = None
        if queries:
            qs = ev.read_queries(queries)
            query_source = str(queries)
        else:
            pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
            docs = ((d.doc_id, pipe.document_text(d)) for d in open_source(cfg.source).scan(ScanReport()))
            qs = ev.probe_queries(docs, cfg.cutover.probes, cfg.cutover.seed)
            query_source = f"{len(qs)} known-item probes sampled from the corpus (seed {cfg.cutover.seed})"
        if current is not None:
            live = read_live(state, cfg.index)
            old_cfg = config_from_dict(live.config) if live else cfg
            if identity_of(old_cfg).vector_id == identity_of(cfg).vector_id:
                embed_old = embed_new
                vectors_note = "identical on both sides (same vector half)"
            else:
                old_emb = make_embedder(old_cfg.vector, options=old_cfg.embed)
                embed_old = lambda texts: old_emb.embed(texts).vectors  # noqa: E731
                vectors_note = "each side embeds queries with its own model (the vector half changed)"
            evaluation = ev.evaluate(store, cfg.index, shadow, qs, embed_old, embed_new, k=kk, seed=cfg.cutover.seed)
        run = {}
        run_path = path.with_name(path.name.removesuffix(".json") + ".run.json")
        if run_path.is_file():
            run = _json.loads(run_path.read_text())
        # The chunk manifest is what the shadow should hold: the plan's chunks plus any catch-up changes.
        from reindex.manifests import read_chunk_manifest

        expected_points = sum(1 for _ in read_chunk_manifest(state, cfg.index, shadow))
        rules = co.gate(cfg.cutover, evaluation, shadow_points=store.count(shadow),
                        planned_chunks=expected_points, failures=len(run.get("failures", [])), k=kk)
        passed = all(r.passed for r in rules)
        report = {
            "index": cfg.index, "plan_hash": plan.plan_hash, "shadow": shadow, "live": current, "k": kk,
            "queries_source": query_source, "query_vectors": vectors_note,
            "rules": [r.as_dict() for r in rules], "passed": passed, "evaluation": evaluation,
            "swap": None, "forced_by": None,
        }
        if passed or force:
            if not passed:
                approval = read_approval(path)
                report["forced_by"] = approval.by if approval else by
                logging.getLogger("reindex").warning("forced cutover of %s by %s despite failed rules", shadow,
                                                     report["forced_by"])
            probe = embed_new([qs[0].text])[0] if qs else None
            report["swap"] = co.swap(store, state, cfg.index, shadow, current, probe)
        report_path = write_cutover_reports(report, path)
        return CutoverReport(report, report_path)
    finally:
        store.close()
        lock.release()


def rollback(config_path: str | Path = DEFAULT_CONFIG, *, to: str | None = None) -> dict:
    """Swap the alias back to the previous population."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    store = vector_store_for(cfg)
    try:
        return co.rollback(store, state_store(cfg), cfg.index, to)
    finally:
        store.close()


def parse_age(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``45s`` → seconds."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([dhms]?)\s*", text)
    if not m:
        raise ConfigError(f"--older-than {text!r}: expected a number with d, h, m or s (e.g. 7d)")
    return float(m[1]) * {"d": 86400, "h": 3600, "m": 60, "s": 1, "": 86400}[m[2]]


def gc(config_path: str | Path = DEFAULT_CONFIG, *, older_than: str | None = None, dry_run: bool = False,
       names: list[str] | None = None) -> list[dict]:
    """Delete retired populations past retention; never one an alias points at."""
    from reindex import cutover as co

    cfg = load_resolved(config_path)
    age = parse_age(older_than) if older_than else cfg.cutover.retention_days * 86400
    store = vector_store_for(cfg)
    try:
        return co.gc(store, state_store(cfg), cfg.index, older_than_s=age, dry_run=dry_run, names=names)
    finally:
        store.close()


def status(config_path: str | Path = DEFAULT_CONFIG) -> dict:
    """Aliases, populations (live, shadow, retired with age), locks."""
    import json as _json
    import time

    from reindex import cutover as co

    cfg = load_resolved(config_path)
    state = state_store(cfg)
    store = vector_store_for(cfg)
    try:
        aliases = store.list_aliases()
        pops = []
        for r in co.populations(state, cfg.index):
            exists = store.collection_exists(r.collection)
            pops.append({"collection": r.collection, "state": r.state,
                         "points": store.count(r.collection) if exists else None,
                         "age_days": round((time.time() - r.updated_at) / 86400, 2),
                         "chunker": chunker_spec(config_from_dict(r.config).text.chunker), "exists": exists})
        lock = state.get(f"indexes/{cfg.index}/lock.json")
        return {"index": cfg.index, "aliases": aliases, "populations": pops,
                "lock": _json.loads(lock) if lock else None}
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# measure
# --------------------------------------------------------------------------------------------


def measure(
    *,
    pairs: str | Path | None = None,
    chunkers: tuple[str, ...] | list[str] = (),
    config_path: str | Path | None = None,
    from_git: str | Path | None = None,
    paths: str | None = None,
    lang: str | None = None,
    bands: tuple[str, ...] | list[str] = (),
    limit: int | None = None,
    calibrate: bool = False,
    target_median: float = 250,
    queries: str | Path | None = None,
    corpus: tuple[str, ...] | list[str] = (),
    cache: str | Path | None = ".reindex/embed-cache",
    pool: int | None = None,
    seed: int = 0,
    report_dir: str | Path | None = None,
    progress=None,
):
    """Measure R_c of chunkers over revision pairs (a file, or built from git history), with the
    no-edit control, bands, paired differences, optional length calibration and optional retrieval
    quality on the same chunkings. Returns (MeasureReport, report paths or None)."""
    from reindex import measure as m
    from reindex.chunkers import make_chunker
    from reindex.tokenizers import load_tokenizer

    if (pairs is None) == (from_git is None):
        raise ConfigError("give exactly one of --pairs FILE or --from-git REPO")
    if from_git is not None and not paths:
        raise ConfigError("--from-git needs --paths GLOB (e.g. --paths 'docs/**/*.md')")
    if paths and from_git is None:
        raise ConfigError("--paths only applies with --from-git")
    if (queries is None) != (not corpus):
        raise ConfigError("--queries and --corpus go together: give the queries file and the snapshot they refer to")
    if target_median <= 0:
        raise ConfigError("--target-median must be positive")
    cfg = load_config(config_path) if config_path is not None else PipelineConfig(index="measure", source=SourceConfig(uri="."))
    specs = [parse_chunker_spec(s) for s in (chunkers or m.DEFAULT_CHUNKERS)]
    if calibrate:
        for s in specs:
            m.scale_chunker(s, m.size_of(s) if s.kind != "sentence" else 1)  # fails before any work
    tok = load_tokenizer(cfg.text.tokenizer)
    count = tok.count_batch
    if pairs is not None:
        all_pairs = m.load_pairs(pairs)
        source = str(pairs)
    else:
        all_pairs = m.pairs_from_git(from_git, paths or "", lang=lang or "en")
        source = f"git {from_git} -- {paths}"
    selected = m.select_pairs(all_pairs, lang=lang, bands=bands, limit=None)
    calibration = None
    if calibrate:
        held, selected = m.calibration_split(selected)
        texts = list(dict.fromkeys(p.old_text for p in held))
        if not texts:
            raise ConfigError("--calibrate: the held-out 10 % of documents is empty; give more pairs")
        info = {}
        tuned = []
        for s in specs:
            size, med = m.calibrate_size(lambda v, s=s: make_chunker(m.scale_chunker(s, v), tok), texts, count,
                                         target=target_median)
            new = m.scale_chunker(s, size)
            info[chunker_spec(new)] = {"from": chunker_spec(s), "value": size, "median": med,
                                       "within_tolerance": abs(med - target_median) <= m.LENGTH_TOLERANCE * target_median}
            tuned.append(new)
        specs = tuned
        calibration = {"target": target_median, "pairs": len(held), "documents": len({p.doc_key for p in held}),
                       "chunkers": info}
    if limit is not None:
        selected = selected[:limit]
    cands = [m.Candidate(chunker_spec(s), lambda s=s: make_chunker(s, tok)) for s in specs]
    report = m.run_measure(cands, selected, count, tokenizer=cfg.text.tokenizer, source=source, seed=seed,
                           target_median=target_median if calibrate else None, calibration=calibration, progress=progress)
    if queries is not None:
        report = _measure_retrieval(report, specs, cfg, tok, queries, corpus, cache, pool, seed, lang, progress)
    paths_out = m.write_measure_reports(report, report_dir) if report_dir is not None else None
    return report, paths_out


def _measure_retrieval(report, specs, cfg, tok, queries, corpus, cache, pool, seed, lang, progress):
    from reindex import measure as m
    from reindex.chunkers import make_chunker
    from reindex.embedders import make_embedder
    from reindex.identity import fingerprint

    qs = m.load_queries(queries)
    if lang is not None:
        qs = [q for q in qs if q.lang == lang]
    resolved = resolve_config(cfg)
    vid = vector_id(resolved.vector)
    embedder = make_embedder(resolved.vector, batch_size=cfg.apply.embed_batch_size)
    store = m.EmbeddingCache(cache, vid) if cache is not None else None
    english_only = resolved.vector.model == "all-MiniLM-L6-v2"
    per_chunker: list[list] = [[] for _ in specs]
    groups = []
    for path in corpus:
        docs = m.load_corpus(path)
        mine = [q for q in qs if q.doc_path in docs]
        if not mine:
            continue
        q_lang = statistics.mode(q.lang for q in mine)
        pool_paths = m.retrieval_pool(docs, mine, pool, seed)
        note = "English-only model: Chinese retrieval is indicative only" if english_only and q_lang != "en" else ""
        groups.append({"corpus": str(path), "lang": q_lang, "queries": len(mine), "pool_docs": len(pool_paths),
                       "corpus_docs": len(docs)})
        for i, s in enumerate(specs):
            res = m.evaluate_retrieval(
                make_chunker(s, tok), docs, pool_paths, mine, embed=lambda t: embedder.embed(t).vectors,
                dim=embedder.dimension, fingerprint=lambda t: fingerprint(vid, t), count=tok.count_batch, cache=store,
                lang=q_lang, note=note,
            )
            per_chunker[i].append(res)
            if progress:
                progress(f"retrieval {q_lang} {chunker_spec(s)}: recall {res.evidence_recall:.3f}, embedded {res.embedded}")
    if not groups:
        raise ConfigError(f"{queries}: no query refers to a document of the given --corpus file(s)")
    info = {
        "model": resolved.vector.model,
        "budget_tokens": m.PACK_BUDGET,
        "candidates": m.PACK_CANDIDATES,
        "corpora": groups,
        "description": (
            f"Every pool document chunked by each chunker, embedded with {resolved.vector.model} (cached by fingerprint), "
            f"all chunks ranked by exact dot product; whole chunks packed first-fit into {m.PACK_BUDGET} tokens from the "
            f"top {m.PACK_CANDIDATES}; evidence recall = the evidence string lies inside the packed text of its document. "
            "Hit@5, MRR, nDCG@5 at document level (binary relevance). Pools: "
            + "; ".join(f"{g['lang']}: {g['pool_docs']} of {g['corpus_docs']} documents ({g['queries']} queries)" for g in groups)
        ),
    }
    return m.with_retrieval(report, per_chunker, info)


# --------------------------------------------------------------------------------------------
# deploy / serve (Prefect deployments of the sync, reindex and gc flows)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeployResult:
    """What `reindex deploy` created and the commands that come next."""

    index: str
    config: str
    pool: str | None
    deployments: tuple[str, ...]
    concurrency_limit: str
    next_commands: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"index": self.index, "config": self.config, "pool": self.pool, "deployments": list(self.deployments),
                "concurrency_limit": self.concurrency_limit, "next_commands": list(self.next_commands)}


def _deploy_inputs(config_path: str | Path, plans_dir: str | Path | None) -> tuple[str, str, str]:
    p = Path(config_path).resolve()
    cfg = load_resolved(p)
    return str(p), cfg.index, str(Path(plans_dir).resolve() if plans_dir else p.parent / "plans")


def deploy(config_path: str | Path = DEFAULT_CONFIG, *, pool: str = "reindex", plans_dir: str | Path | None = None,
           timezone: str = "UTC", task_runner: str = "threads", schedules: bool = True) -> DeployResult:
    """Create (or update) the reindex-sync, reindex-reindex and reindex-gc deployments of one index
    on a process work pool of the Prefect API in PREFECT_API_URL."""
    from reindex import orchestration as orch

    config, index, plans = _deploy_inputs(config_path, plans_dir)
    crons = {} if schedules else {"sync_cron": None, "reindex_cron": None, "gc_cron": None}
    names = orch.deploy_flows(config, index, plans, pool, timezone=timezone, task_runner=task_runner, **crons)
    nxt = (
        f"prefect worker start --pool {pool}",
        f"prefect deployment run 'reindex-reindex/{index}'",
        f"prefect deployment run 'reindex-sync/{index}'",
        "prefect server start   # if no server runs yet; the UI shows paused runs under Flow Runs",
    )
    return DeployResult(index, config, pool, tuple(names), orch.index_limit_name(index), nxt)


def serve_plan(config_path: str | Path = DEFAULT_CONFIG, *, plans_dir: str | Path | None = None,
               timezone: str = "UTC", task_runner: str = "threads") -> DeployResult:
    """What `reindex serve` will serve (no side effects)."""
    from reindex import orchestration as orch

    config, index, _ = _deploy_inputs(config_path, plans_dir)
    names = tuple(f"{f}/{index}" for f in ("reindex-sync", "reindex-reindex", "reindex-gc"))
    nxt = (f"prefect deployment run 'reindex-reindex/{index}'   # in another shell",
           f"prefect deployment run 'reindex-sync/{index}'")
    return DeployResult(index, config, None, names, orch.index_limit_name(index), nxt)


def serve(config_path: str | Path = DEFAULT_CONFIG, *, plans_dir: str | Path | None = None, timezone: str = "UTC",
          task_runner: str = "threads") -> None:
    """Serve the three deployments of one index from this process until interrupted."""
    from reindex import orchestration as orch

    config, index, plans = _deploy_inputs(config_path, plans_dir)
    orch.serve_flows(config, index, plans, timezone=timezone, task_runner=task_runner)
