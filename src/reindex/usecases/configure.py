"""Configure: write, load and validate a pipeline config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reindex.foundation.atomic import atomic_write_text
from reindex.domain.config import (
    PipelineConfig,
    TextHalf,
    VectorHalf,
    chunker_spec,
    config_from_yaml,
    default_config_yaml,
    load_config,
)
from reindex.errors import ConfigError, ReindexError
from reindex.domain.identity import Identity, identity_of, resolve_config
from reindex.domain.models import (
    API_MODEL_DIMENSIONS,
    model_dimension,
    model_max_tokens,
    resolve_model_path,
    static_dimension,
    static_max_length,
)
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport
from reindex.context import backends
from reindex.context.backends import DEFAULT_CONFIG

__all__ = ["Validation", "chunk_cap", "chunker_problems", "config_warnings", "device_problems",
           "dimension_problems", "init_config", "load_resolved", "model_input_limit", "resolve",
           "source_problems", "validate_config"]


def init_config(path: str | Path, *, index: str = "docs", source: str = "./corpus", force: bool = False) -> Path:
    """Write a commented default ``reindex.yaml``; refuses to overwrite unless ``force``."""
    p = Path(path)
    if p.exists() and not force:
        raise ConfigError(f"{p}: already exists; pass --force to overwrite it")
    text = default_config_yaml(index=index, source=source)
    # Validate what we write, so `init` can never produce a config `validate` rejects.
    config_from_yaml(text, str(p))
    return atomic_write_text(p, text)


@dataclass(frozen=True, slots=True)
class Validation:
    """A loaded, resolved config with its identity and advisory warnings."""

    path: str
    config: PipelineConfig
    identity: Identity
    chunker: str
    warnings: tuple[str, ...]
    # What makes the config unusable although it parses: a missing or unreadable source, a dimension
    # the model does not produce. `reindex validate` prints one line each and exits 1.
    problems: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        return {
            "config": self.path,
            "valid": self.valid,
            "problems": list(self.problems),
            **self.identity.as_dict(),
            "chunker": self.chunker,
            "tokenizer": self.config.text.tokenizer,
            "tokenizer_revision": self.config.text.tokenizer_revision,
            "model": self.config.vector.model,
            "model_revision": self.config.vector.revision,
            "warnings": list(self.warnings),
        }


def load_resolved(path: str | Path | PipelineConfig) -> PipelineConfig:
    """Load a config and resolve its ``auto`` revisions (a config object is returned as it is)."""
    if isinstance(path, PipelineConfig):
        return path
    return resolve(load_config(path))


def resolve(cfg: PipelineConfig) -> PipelineConfig:
    """:func:`reindex.domain.identity.resolve_config` with the model files of :mod:`reindex.context.backends` (an ONNX
    backend's revision is the digest of its local export)."""
    return resolve_config(cfg, backends.model_files)


def validate_config(path: str | Path = DEFAULT_CONFIG) -> Validation:
    """Validate ``path``, resolve revisions and compute the ids; check that the source can be read and that
    ``vector.dimension`` is what the model produces (``Validation.problems``)."""
    cfg = load_resolved(path)
    problems = (*source_problems(cfg), *chunker_problems(cfg), *dimension_problems(cfg.vector), *device_problems(cfg),
                *store_problems(cfg))
    return Validation(str(path), cfg, identity_of(cfg), chunker_spec(cfg.text.chunker), tuple(config_warnings(cfg)),
                      problems)


def source_problems(cfg: PipelineConfig) -> list[str]:
    """Empty when the source exists and its first document can be read (a folder or file present, a
    JSONL/Parquet file that opens, an S3 prefix that answers with at least one object). Reads one
    document, not the corpus."""
    uri = cfg.source.uri
    report = ScanReport()
    try:
        docs = open_source(cfg.source).scan(report)
        try:
            first = next(iter(docs), None)
        finally:
            close = getattr(docs, "close", None)
            if close is not None:
                close()
    except ReindexError as err:
        return [str(err)]
    except OSError as err:
        return [f"source {uri}: cannot be read ({err.strerror or err}); check the path and its permissions"]
    if first is not None:
        return []
    if report.bad:
        bad = report.bad[0]
        return [f"source {uri}: no readable document ({bad.doc_id}: {bad.reason})"]
    where = "objects under this prefix" if uri.startswith("s3://") else "documents"
    return [f"source {uri}: no {where} match source.include ({', '.join(cfg.source.include)})"
            if not uri.endswith((".jsonl", ".ndjson", ".gz", ".parquet")) else f"source {uri}: no documents in it"]


def store_problems(cfg: PipelineConfig) -> list[str]:
    """Empty unless the embedded store's folder exists and is not a folder (a file named by store.path)."""
    from reindex.adapters.stores.opening import store_folder_problem

    b = backends.store_backend(cfg)
    problem = store_folder_problem(b.folder if b.capabilities.local_disk else None)
    return [problem] if problem else []


def chunker_problems(cfg: PipelineConfig) -> list[str]:
    """Empty when the chunker can be built. Only a splitter named by import path (``kind: langchain`` or
    ``callable``) can fail here: it is imported and built, as ``plan`` would, without chunking anything."""
    from reindex.domain.config import CallableChunkerConfig, LangchainChunkerConfig

    if not isinstance(cfg.text.chunker, (LangchainChunkerConfig, CallableChunkerConfig)):
        return []
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.tokenizers import load_tokenizer

    try:
        make_chunker(cfg.text.chunker, load_tokenizer(cfg.text.tokenizer))
    except ReindexError as err:
        return [str(err)]
    return []


def device_problems(cfg: PipelineConfig) -> list[str]:
    """Empty unless ``embed.device`` names a device (cuda, cuda:N, mps) this machine lacks, for a local model.
    ``cpu`` and ``auto`` always run, so only a named device is looked up (that imports torch)."""
    if cfg.vector.provider != "sentence-transformers" or cfg.embed.device in ("cpu", "auto"):
        return []
    try:
        backends.resolve_device(cfg.embed.device)
    except ReindexError as err:
        return [str(err)]
    return []


def dimension_problems(vector: VectorHalf) -> list[str]:
    """Empty when ``vector.dimension`` is what the model produces: sentence-transformers models by their
    module configs (nothing encoded), API models by their published sizes; the hash provider takes any."""
    produced, why = None, ""
    if vector.provider == "sentence-transformers":
        try:
            produced = model_dimension(resolve_model_path(vector.model))
        except ReindexError as err:
            return [f"vector.model: {err}"]
        why = f"model {vector.model} produces"
    elif vector.provider == "model2vec":
        try:
            produced = static_dimension(resolve_model_path(vector.model))
        except ReindexError as err:
            return [f"vector.model: {err}"]
        why = f"the static model of {vector.model} makes"
    elif vector.provider == "openai":
        produced = API_MODEL_DIMENSIONS.get(vector.model)
        why = f"the API model {vector.model} returns"
    if produced is None or produced == vector.dimension:
        return []
    return [(f"vector.dimension is {vector.dimension} but {why} {produced}-dimensional vectors; "
             f"set vector.dimension: {produced}")]


def model_input_limit(vector: VectorHalf) -> int | None:
    """Tokens the embedding model sees per input (excluding [CLS]/[SEP]), if known."""
    if vector.max_tokens:
        return vector.max_tokens
    if vector.provider == "model2vec":
        return static_max_length(resolve_model_path(vector.model))
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
    if cfg.serving.min_delta < 0:
        out.append(
            f"serving.min_delta is {cfg.serving.min_delta:+g}: a mode whose lower bound is below old's serves readers, "
            "so one up to that much worse than the live population may go live (a mode measurably worse is refused "
            "whatever this says); 0 or above serves only a mode measurably better"
        )
    return out
