"""Configure: write, load and validate a pipeline config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reindex.atomic import atomic_write_text
from reindex.config import (
    PipelineConfig,
    TextHalf,
    VectorHalf,
    chunker_spec,
    config_from_yaml,
    default_config_yaml,
    load_config,
)
from reindex.errors import ConfigError
from reindex.identity import Identity, identity_of, resolve_config
from reindex.models import model_max_tokens, resolve_model_path




from reindex.usecases.backends import DEFAULT_CONFIG


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
