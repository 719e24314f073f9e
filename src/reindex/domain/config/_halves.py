"""The two hashed halves of a pipeline config: the text half (extractor, normaliser, chunker, tokenizer) and
the vector half (provider, model, revision, dimension, prefix, backend, precision, distance)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from reindex.domain.config._base import TEXT, VECTOR, ConfigModel
from reindex.domain.config._chunkers import ChunkerConfig, RecursiveChunkerConfig
from reindex.domain.config._secrets import check_params
from reindex.domain.models import is_static_folder, resolve_model_path

__all__ = [
    "NormaliserConfig", "RechunkConfig", "STICKY_KINDS", "TextHalf", "VectorHalf",
]


# --------------------------------------------------------------------------------------------
# Text half
# --------------------------------------------------------------------------------------------


class NormaliserConfig(ConfigModel):
    """How extracted text is normalised before chunking."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)
    unicode: Literal["NFC", "NFKC", "none"] = Field("NFC", description="Unicode normal form applied to the text.")
    newlines: Literal["lf", "keep"] = Field("lf", description="lf: CRLF and CR become LF; keep: leave as is.")
    strip_trailing_whitespace: bool = Field(False, description="Remove spaces and tabs at the end of every line.")


# Chunker kinds sticky re-chunking supports: their chunks partition the text within token bounds.
STICKY_KINDS = ("fixed", "sentence", "paragraph", "recursive", "markdown", "cdc", "anchored")


class RechunkConfig(ConfigModel):
    """How an edited document is re-chunked. ``stateless``: the chunker sees only the new text.
    ``sticky``: every chunk of the previous version whose text still occurs in the new one is kept
    and only the gaps between kept chunks are cut (see :mod:`reindex.adapters.chunkers.sticky`); a document
    whose chunk lengths drift too far from a fresh cut is cut freshly. A plain string is accepted as
    ``mode`` (``rechunk: sticky``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)
    mode: Literal["stateless", "sticky"] = Field("stateless", description="stateless or sticky (edit-aware) re-chunking.")
    min_share: float = Field(
        0.2, gt=0.0, le=1.0,
        description="sticky: the lower size bound is min_share × the chunker's target size; a gap piece below it is merged into a neighbour.",
    )
    max_drift: float = Field(
        0.25, ge=0.0,
        description="sticky: re-cut a document freshly when the Wasserstein-1 distance between its sticky and fresh chunk lengths, divided by the fresh median, exceeds this.",
    )
    max_out_of_bounds: float = Field(
        0.15, ge=0.0, le=1.0,
        description="sticky: re-cut a document freshly when its share of chunks outside the size bounds exceeds the fresh cut's share by more than this.",
    )
    isolate_edits: bool = Field(
        False,
        description="sticky: cut an edited gap at the line or sentence ends around its changed span, so the unchanged rest of a touched chunk becomes its own chunk and the next edit there re-embeds less.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value


class TextHalf(ConfigModel):
    """Everything that decides which text is embedded. Hashed into the text id."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)
    extractor: Literal["auto", "plain", "html"] = Field(
        "auto", description="How bytes become text. auto: HTML files (.html/.htm) are stripped to text, the rest is read as UTF-8."
    )
    normaliser: NormaliserConfig = Field(default_factory=NormaliserConfig, description="Text normalisation.")
    chunker: ChunkerConfig = Field(default_factory=RecursiveChunkerConfig, description="Chunker kind and parameters.")
    tokenizer: str = Field(
        "all-MiniLM-L6-v2",
        description="Tokenizer chunk sizes are counted in: a packaged model name, a path to a model folder or tokenizer.json, 'whitespace' or 'char'.",
    )
    tokenizer_revision: str = Field(
        "auto", description="Revision of the tokenizer; 'auto' = a digest of its files, computed when the config is resolved."
    )
    rechunk: RechunkConfig = Field(
        default_factory=RechunkConfig, description="How edited documents are re-chunked: stateless (default) or sticky."
    )

    @model_validator(mode="after")
    def _sticky_needs_token_bounds(self) -> "TextHalf":
        kind = self.chunker.kind
        if self.rechunk.mode == "sticky" and (kind not in STICKY_KINDS or getattr(self.chunker, "overlap", 0)):
            raise ValueError(
                f"rechunk: sticky needs a non-overlapping token-limited chunker ({', '.join(STICKY_KINDS)}); "
                f"{kind} {'with overlap ' if getattr(self.chunker, 'overlap', 0) else ''}has no token size bounds to keep"
            )
        return self


# --------------------------------------------------------------------------------------------
# Vector half
# --------------------------------------------------------------------------------------------


class VectorHalf(ConfigModel):
    """Everything that decides which vector a given text gets. Hashed into the vector id."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=VECTOR)
    provider: Literal["sentence-transformers", "model2vec", "openai", "hash", "langchain", "llamaindex"] = Field(
        "sentence-transformers",
        description="sentence-transformers (local, offline), model2vec (static embeddings: a model2vec folder, or one "
        "distilled offline from a local sentence-transformers folder), an OpenAI-compatible HTTP API, hash "
        "(deterministic test vectors, no model), or your own embeddings class: langchain (an Embeddings) or "
        "llamaindex (a BaseEmbedding).",
    )
    model: str = Field(
        "all-MiniLM-L6-v2", description="Model id: a packaged model name, a local sentence-transformers folder, the API's "
        "model name, or (langchain, llamaindex) the import path of the embeddings class, e.g. langchain_openai.OpenAIEmbeddings."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="langchain, llamaindex: keyword arguments the embeddings class is built with (its model name among "
        "them); secrets come from the environment, as the class reads them.",
    )
    revision: str = Field(
        "auto", description="Model revision; 'auto' = a digest of the local model files, or the version of the library "
        "providing a langchain/llamaindex class (required explicitly for API models)."
    )
    dimension: int = Field(384, gt=0, description="Vector dimension.")
    prefix: str = Field("", description="Text prepended to every stored input (the passage side, e.g. 'passage: ').")
    query_prefix: str | None = Field(
        None,
        description="Text prepended to queries (cutover's evaluation, `reindex query`), e.g. 'query: '; None = the same as "
        "prefix. Not in the vector id: stored vectors do not depend on it.",
    )
    normalize: bool = Field(True, description="L2-normalise vectors.")
    distance: Literal["cosine", "dot", "euclid"] = Field("cosine", description="Similarity used by the collection.")
    backend: Literal["torch", "onnx", "api"] = Field(
        "torch",
        description="Inference backend: torch, or onnx (sentence-transformers models exported locally to ONNX and run "
        "with onnxruntime; the export is cached and its files' digest is the revision); api for HTTP providers.",
    )
    precision: Literal["float32", "float16", "int8"] = Field(
        "float32", description="Inference precision; int8 (dynamic quantisation) needs backend: onnx, float16 backend: torch."
    )
    max_tokens: int | None = Field(
        None, gt=0, description="Input length limit in model tokens; None = the model's own limit. Longer inputs are truncated and counted."
    )
    compose: Literal["none", "units"] = Field(
        "none",
        description="units: a chunk's vector is composed from the vectors of its units (the sentences inside it), so an "
        "edit embeds only the units it changed. Exact for model2vec (token sums and counts in float64); for other models "
        "an approximation (token-weighted mean of unit vectors) that the cutover's gate must accept. In the vector id: "
        "switching it is a pipeline-scoped change, built beside and gated like a model change.",
    )
    compose_unit: str = Field(
        "sentence:min=8",
        description="With compose: units, how chunks are cut into units: sentence:min=N (sentence ends and line breaks, "
        "pieces under N tokens grouped with the next) or chunk.",
    )

    @field_validator("params")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return check_params(value, info)

    @field_validator("compose_unit")
    @classmethod
    def _unit_spec(cls, value: str) -> str:
        if not re.fullmatch(r"sentence(:min=\d+)?|chunk", value.strip()):
            raise ValueError(f"compose_unit {value!r}: expected sentence, sentence:min=N (tokens) or chunk")
        return value.strip()

    @model_validator(mode="after")
    def _backend_runs(self) -> "VectorHalf":
        if self.provider == "model2vec" and (self.backend, self.precision) != ("torch", "float32"):
            raise ValueError("a model2vec static model is a table lookup with its own stored precision; leave "
                             "vector.backend and vector.precision unset")
        if self.provider != "sentence-transformers":
            return self
        if self.backend == "api":
            raise ValueError("backend api is for HTTP providers; a sentence-transformers model runs on torch or onnx")
        if self.precision == "int8" and self.backend != "onnx":
            raise ValueError("precision int8 needs backend: onnx (dynamic quantisation of a local ONNX export)")
        if self.precision == "float16" and self.backend == "onnx":
            raise ValueError("precision float16 is not available with backend: onnx (use float32 or int8, or backend: torch)")
        return self

    @property
    def label(self) -> str:
        """The words users read for this model, made here only: ``all-MiniLM-L6-v2 384d``, ``all-MiniLM-L6-v2 (onnx
        int8) 384d``, ``model2vec (static, distilled from all-MiniLM-L6-v2) 256d``, ``openai text-embedding-3-small
        1536d``."""
        name = self.model.rstrip("/").rsplit("/", 1)[-1] if self.provider in ("sentence-transformers", "model2vec") \
            else self.model
        if self.provider == "model2vec":
            try:
                static = is_static_folder(resolve_model_path(self.model))
            except Exception:  # noqa: BLE001 - a label never fails: a model not found here is named as given
                static = False
            return f"model2vec (static, {name if static else f'distilled from {name}'}) {self.dimension}d"
        if self.provider == "sentence-transformers":
            runs = "" if (self.backend, self.precision) == ("torch", "float32") else f" ({self.backend} {self.precision})"
            return f"{name}{runs} {self.dimension}d"
        if self.provider == "hash":
            return f"hash {self.dimension}d"  # no model: deterministic test vectors
        return f"{self.provider} {name} {self.dimension}d"

    def for_queries(self) -> VectorHalf:
        """This half as queries are embedded: ``query_prefix`` (when set) in place of ``prefix``."""
        return self if self.query_prefix is None else self.model_copy(update={"prefix": self.query_prefix})
