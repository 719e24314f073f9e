"""Use cases shared by the CLI and the flows. Each function takes plain values, returns a frozen
result and raises ReindexError subclasses for expected failures."""

from __future__ import annotations

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
from reindex.errors import ConfigError, SourceError
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
        from reindex.sources import single_file_document

        yield single_file_document(p)
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
        bad_reasons=dict(report.counts_by_reason()) if hasattr(report, "counts_by_reason") else {},
    )
