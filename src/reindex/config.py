"""The pipeline config (``reindex.yaml``): pydantic models with ``extra="forbid"``.

Every model is tagged with the half it belongs to (``half`` in its JSON schema extra):

* ``text``: decides *which text* is embedded; hashed into the text id.
* ``vector``: decides *which vector* a text gets; hashed into the vector id.
* ``operational``: neither (where things live, prices, parallelism); never hashed.

Lines: one module is the whole schema of ``reindex.yaml`` (every section's model, the loader and the
commented template); split, a reader would chase one file's fields across several. The chunker kinds'
models belong next to the union that discriminates them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union
from urllib.parse import unquote_plus

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from reindex.errors import ChunkerError, ConfigError

CONFIG_VERSION = 1

TEXT = {"half": "text"}
VECTOR = {"half": "vector"}
OPERATIONAL = {"half": "operational"}


class _Model(BaseModel):
    # allow_inf_nan=False: every float field of every section refuses .inf and .nan (YAML spells them so);
    # subclasses' own ConfigDicts are merged with this one, so no section can forget it.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --------------------------------------------------------------------------------------------
# Secrets never enter a config: a config is copied into plans, reports, population records and
# error lines (DESIGN invariants 9 and 16). A secret is named in the config (``api_key_env:
# OPENAI_API_KEY``) and read from the environment when the class that needs it is built.
# --------------------------------------------------------------------------------------------

# A name is a secret's when one of its words (split at ``_ - .`` and camelCase) is one of these:
# api_key, accessToken, client-secret, X-Amz-Signature, sig, Authorization… but not max_tokens or tiktoken.
_SECRET_WORDS = frozenset({
    "key", "keys", "apikey", "token", "secret", "secrets", "password", "passwd", "pwd", "passphrase",
    "credential", "credentials", "auth", "authorization", "bearer", "cookie", "sig", "signature", "privatekey",
})
ENV_SUFFIX = "_env"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME_RULE = "letters, digits and '_', not starting with a digit"
# Validation context of a config read back from state (a population record): written before secrets were
# refused, it is read as it is (a plan shows its secret-named fields masked, see :func:`redact`).
RECORDED = {"recorded": True}


def is_secret_name(name: str) -> bool:
    """Whether a parameter, header or query-string name names a secret (the one rule, used wherever a
    config is checked or derived from an object)."""
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name))
    return any(w.lower() in _SECRET_WORDS for w in re.split(r"[^A-Za-z0-9]+", spaced))


def _recorded(info: ValidationInfo | None) -> bool:
    return bool(info is not None and info.context and info.context.get("recorded"))


def _check_params(params: dict[str, Any], info: ValidationInfo | None = None) -> dict[str, Any]:
    """Refuse secrets in free-form ``params`` (at any depth): a string under a secret name, a URL holding
    credentials, and a ``<name>_env`` that is not ``<secret name>_env: VARIABLE_NAME``."""
    if not _recorded(info):
        _walk_params(params, "", secret=False)
    return params


def _walk_params(value: Any, path: str, *, secret: bool) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            name, where = str(key), f"{path}.{key}" if path else str(key)
            if name.endswith(ENV_SUFFIX) and len(name) > len(ENV_SUFFIX):
                base = name[: -len(ENV_SUFFIX)]
                if not (secret or is_secret_name(base)):
                    raise ValueError(f"{where}: only secrets are read from the environment (a name with key, token, "
                                     f"secret, password, credential… in it); give {base} itself in the config")
                if not isinstance(item, str) or not _ENV_NAME.fullmatch(item):
                    raise ValueError(f"{where} must be the name of an environment variable ({_ENV_NAME_RULE}), "
                                     "never the secret itself")
                continue
            _walk_params(item, where, secret=secret or is_secret_name(name))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            _walk_params(item, f"{path}[{n}]", secret=secret)
    elif isinstance(value, str):
        if secret:
            key = path.split("[", 1)[0].rsplit(".", 1)[-1]
            raise ValueError(f"{path} holds a secret, and the config is copied into plans, reports and population "
                             f"records: put the secret in an environment variable and name the variable instead "
                             f"({key}{ENV_SUFFIX}: NAME_OF_THE_VARIABLE)")
        if "://" in value:
            try:
                _no_credentials(value, "read the secret from the environment (a <name>_env parameter)")
            except ValueError as err:
                raise ValueError(f"{path}: {err}") from None


def _no_credentials(value: str | None, fix: str, info: ValidationInfo | None = None) -> str | None:
    """Refuse a URL carrying credentials: ``user:password@host`` (with a scheme or without one) or a
    secret-named query-string or fragment parameter (``?api_key=…``, ``&token=…``, ``&sig=…``). A URL is
    written into plans, reports, population records and error lines; keys come from the environment only."""
    value = _no_userinfo(value, fix)
    if value is None or _recorded(info):
        return value
    head = value.split("?", 1)[0].split("#", 1)[0]
    if "://" not in head:
        first = head.split("/", 1)[0]
        if "@" in first and ":" in first.split("@", 1)[0]:
            raise ValueError(f"the URL holds credentials (user:password@…); remove them and {fix}")
    tail = value[len(head):]
    for part in re.split(r"[?#&;]", tail):
        name = unquote_plus(part.split("=", 1)[0])
        if name and is_secret_name(name):
            raise ValueError(f"the URL's query string holds a credential ({name}=…); remove it and {fix}")
    return value


def _env_name(value: str | None, info: ValidationInfo | None = None) -> str | None:
    """A field naming an environment variable holds its name, never its value."""
    if value is not None and not _recorded(info) and not _ENV_NAME.fullmatch(value):
        raise ValueError(f"must be the name of an environment variable ({_ENV_NAME_RULE}), never the secret itself")
    return value


def without_env_names(value: Any) -> Any:
    """``value`` (parameters) without its ``<name>_env`` entries, at any depth: the names of the variables
    secrets are read from are operational, in no id and no digest, so rotating a key (its value or the
    variable's name) changes nothing that is built."""
    if isinstance(value, dict):
        return {k: without_env_names(v) for k, v in value.items() if not str(k).endswith(ENV_SUFFIX)}
    if isinstance(value, list):
        return [without_env_names(v) for v in value]
    return value


def params_from_env(params: dict[str, Any], where: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``params`` as the class they build receives them: every ``<name>_env: VARIABLE`` becomes ``<name>: <the
    variable's value>`` (at any depth). ConfigError when a variable is not set."""
    env = os.environ if environ is None else environ

    def resolve(value: Any, path: str) -> Any:
        if isinstance(value, list):
            return [resolve(v, f"{path}[{n}]") for n, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            name, at = str(key), f"{path}.{key}"
            if name.endswith(ENV_SUFFIX) and isinstance(item, str):
                if item not in env:
                    raise ConfigError(f"{at}: environment variable {item} is not set (the secret is read from the "
                                      "environment only)")
                out[name[: -len(ENV_SUFFIX)]] = env[item]
            else:
                out[key] = resolve(item, at)
        return out

    return resolve(params, where)


def scrub(text: str, params: dict[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """``text`` (an error line from a class built with ``params``) with the value of every variable a
    ``<name>_env`` parameter names replaced by ``(secret)``: a class may quote its key in an error."""
    env = os.environ if environ is None else environ
    names: list[str] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if str(key).endswith(ENV_SUFFIX) and isinstance(item, str):
                    names.append(item)
                else:
                    collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(params)
    for secret in sorted({env[n] for n in names if env.get(n)}, key=len, reverse=True):
        text = text.replace(secret, "(secret)")
    return text


def redact(path: str, value: Any) -> Any:
    """``value`` as a plan may show it: ``(secret)`` when the last key of ``path`` names a secret or the value
    is a URL holding credentials (a population record written before secrets were refused)."""
    key = path.rsplit(".", 1)[-1]
    if not key.endswith(ENV_SUFFIX) and is_secret_name(key) and isinstance(value, (str, list, dict)):
        return "(secret)"
    if isinstance(value, str):
        try:
            _no_credentials(value, "")
        except ValueError:
            return "(secret)"
    return value


# --------------------------------------------------------------------------------------------
# Chunkers (text half). One model per kind; ``kind`` discriminates.
# --------------------------------------------------------------------------------------------


class _ChunkerModel(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)


class FixedChunkerConfig(_ChunkerModel):
    """Greedy non-overlapping windows of ``size`` tokens (seed 000's 304-token baseline)."""

    kind: Literal["fixed"] = "fixed"
    size: int = Field(304, gt=0, description="Window length in tokens.")


class SlidingChunkerConfig(_ChunkerModel):
    """Windows of ``size`` tokens advancing by ``int(size * (1 - overlap))`` tokens."""

    kind: Literal["sliding"] = "sliding"
    size: int = Field(256, gt=0, description="Window length in tokens.")
    overlap: float = Field(0.2, ge=0.0, lt=1.0, description="Fraction of a window repeated in the next one.")


class FixedCharsChunkerConfig(_ChunkerModel):
    """Windows of ``size`` characters (a quick baseline that ignores tokens)."""

    kind: Literal["fixed_chars"] = "fixed_chars"
    size: int = Field(1200, gt=0, description="Window length in characters.")
    overlap: float = Field(0.0, ge=0.0, lt=1.0, description="Fraction of a window repeated in the next one.")


class SentenceChunkerConfig(_ChunkerModel):
    """Groups of ``sentences`` sentences (terminators include 。！？; no trailing space needed)."""

    kind: Literal["sentence"] = "sentence"
    sentences: int = Field(5, gt=0, description="Sentences per chunk.")
    overlap: int = Field(0, ge=0, description="Sentences repeated from the previous chunk (< sentences).")
    size: int = Field(512, gt=0, description="Hard cap in tokens; longer groups are split.")

    @model_validator(mode="after")
    def _overlap_below_group(self) -> "SentenceChunkerConfig":
        if self.overlap >= self.sentences:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than sentences ({self.sentences})")
        return self


class ParagraphChunkerConfig(_ChunkerModel):
    """Consecutive paragraphs grouped up to ``size`` tokens; long paragraphs split recursively."""

    kind: Literal["paragraph"] = "paragraph"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class RecursiveChunkerConfig(_ChunkerModel):
    """Blank line → line break → sentence terminator → fixed window, to a ``size``-token target."""

    kind: Literal["recursive"] = "recursive"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class CdcChunkerConfig(_ChunkerModel):
    """Content-defined chunking: a word-level rolling hash picks boundaries between ``min`` and
    ``max`` tokens; ``cap`` is the hard limit (seed 000: 176/352/512)."""

    kind: Literal["cdc"] = "cdc"
    min: int = Field(176, gt=0, description="No boundary before this many tokens.")
    max: int = Field(352, gt=0, description="Boundaries become likely up to here; the expected length is about (min+max)/2.")
    cap: int = Field(512, gt=0, description="Hard limit in tokens: a boundary is forced here.")
    window: int = Field(8, gt=0, description="Words in the rolling-hash window.")

    @model_validator(mode="after")
    def _ordered(self) -> "CdcChunkerConfig":
        if not (self.min <= self.max <= self.cap):
            raise ValueError(f"need min <= max <= cap (got {self.min}/{self.max}/{self.cap})")
        return self


class MarkdownChunkerConfig(_ChunkerModel):
    """Heading-aware sections (Markdown ``#`` and reStructuredText underlines), recursive inside."""

    kind: Literal["markdown"] = "markdown"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class AnchoredChunkerConfig(_ChunkerModel):
    """Boundary-stable chunking: cuts only at structural candidates (heading, blank line, line
    break, sentence end) that win a local contest decided by the candidate's level and a hash of the
    text just before it, so an edit moves only the boundaries within one window of it."""

    kind: Literal["anchored"] = "anchored"
    size: int = Field(250, gt=0, description="Target chunk length in tokens (about the median chunk length).")
    cap: int | None = Field(
        None, gt=0, description="Hard limit in tokens; None = 2 × size. Longer stretches are split at the next structural level."
    )

    @model_validator(mode="after")
    def _cap_above_size(self) -> "AnchoredChunkerConfig":
        if self.cap is not None and self.cap < self.size:
            raise ValueError(f"cap ({self.cap}) must be at least size ({self.size})")
        return self


class LangchainChunkerConfig(_ChunkerModel):
    """A LangChain text splitter class by import path, built with ``params`` (bring your own splitter)."""

    kind: Literal["langchain"] = "langchain"
    splitter: str = Field(
        description="Import path of a LangChain TextSplitter class, e.g. langchain_text_splitters.RecursiveCharacterTextSplitter."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments the class is built with.")
    version: str = Field(
        "auto", description="Version of the library providing the splitter; 'auto' = the installed distribution's version."
    )

    @field_validator("params")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _check_params(value, info)


class CallableChunkerConfig(_ChunkerModel):
    """Any ``module:function`` returning the chunk texts of a text (chonkie, semchunk or your own code)."""

    kind: Literal["callable"] = "callable"
    callable: str = Field(description="'module:function' called as function(text, **params) → chunk texts in order.")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments passed with the text.")
    version: str = Field(
        "auto",
        description="'auto' = the version of the distribution providing the module, or a digest of the module's source file.",
    )

    @field_validator("params")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _check_params(value, info)


# A person's name on a decision (the Prefect approval form's approver): required, never blank.
PersonName = Annotated[str, Field(min_length=1, pattern=r"\S", description="Your name: recorded with the decision.")]


ChunkerConfig = Annotated[
    Union[
        FixedChunkerConfig,
        SlidingChunkerConfig,
        FixedCharsChunkerConfig,
        SentenceChunkerConfig,
        ParagraphChunkerConfig,
        RecursiveChunkerConfig,
        CdcChunkerConfig,
        MarkdownChunkerConfig,
        AnchoredChunkerConfig,
        LangchainChunkerConfig,
        CallableChunkerConfig,
    ],
    Field(discriminator="kind"),
]

CHUNKER_KINDS: dict[str, type[_ChunkerModel]] = {
    m.model_fields["kind"].default: m
    for m in (
        FixedChunkerConfig,
        SlidingChunkerConfig,
        FixedCharsChunkerConfig,
        SentenceChunkerConfig,
        ParagraphChunkerConfig,
        RecursiveChunkerConfig,
        CdcChunkerConfig,
        MarkdownChunkerConfig,
        AnchoredChunkerConfig,
        LangchainChunkerConfig,
        CallableChunkerConfig,
    )
}


def parse_chunker_spec(spec: str) -> _ChunkerModel:
    """Parse ``KIND[:key=value,…]`` (e.g. ``sliding:size=256,overlap=0.2``) into a chunker config."""
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip()
    if kind not in CHUNKER_KINDS:
        raise ChunkerError(
            f"unknown chunker kind {kind!r} in spec {spec!r}; allowed: {', '.join(sorted(CHUNKER_KINDS))}"
        )
    params: dict[str, Any] = {"kind": kind}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ChunkerError(f"chunker spec {spec!r}: expected key=value, got {item!r}")
        params[key.strip()] = value.strip()
    try:
        return CHUNKER_KINDS[kind].model_validate(params)
    except ValidationError as err:
        raise ChunkerError(f"chunker spec {spec!r}: {_first_error(err)}") from None


def chunker_spec(cfg: _ChunkerModel) -> str:
    """The canonical ``KIND:key=value,…`` string of a chunker config (all params, fixed order)."""
    data = cfg.model_dump(mode="json")
    kind = data.pop("kind")
    params = ",".join(f"{k}={_fmt(v)}" for k, v in data.items() if v is not None)
    return f"{kind}:{params}" if params else kind


def _fmt(v: Any) -> str:
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))
    if isinstance(v, float):
        return repr(v).rstrip("0").rstrip(".") if "." in repr(v) else repr(v)
    return str(v)


# --------------------------------------------------------------------------------------------
# Text half
# --------------------------------------------------------------------------------------------


class NormaliserConfig(_Model):
    """How extracted text is normalised before chunking."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)
    unicode: Literal["NFC", "NFKC", "none"] = Field("NFC", description="Unicode normal form applied to the text.")
    newlines: Literal["lf", "keep"] = Field("lf", description="lf: CRLF and CR become LF; keep: leave as is.")
    strip_trailing_whitespace: bool = Field(False, description="Remove spaces and tabs at the end of every line.")


# Chunker kinds sticky re-chunking supports: their chunks partition the text within token bounds.
STICKY_KINDS = ("fixed", "sentence", "paragraph", "recursive", "markdown", "cdc", "anchored")


class RechunkConfig(_Model):
    """How an edited document is re-chunked. ``stateless``: the chunker sees only the new text.
    ``sticky``: every chunk of the previous version whose text still occurs in the new one is kept
    and only the gaps between kept chunks are cut (see :mod:`reindex.chunkers.sticky`); a document
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


class TextHalf(_Model):
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


class VectorHalf(_Model):
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

    @field_validator("params")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return _check_params(value, info)

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

    def for_queries(self) -> VectorHalf:
        """This half as queries are embedded: ``query_prefix`` (when set) in place of ``prefix``."""
        return self if self.query_prefix is None else self.model_copy(update={"prefix": self.query_prefix})


# --------------------------------------------------------------------------------------------
# Operational parts
# --------------------------------------------------------------------------------------------


class _OpModel(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=OPERATIONAL)


def _no_userinfo(value: str | None, fix: str) -> str | None:
    """Refuse a URL carrying ``user:password@``: a URL is written into plans, reports, population records
    and error lines, so a credential in it would leak everywhere; keys come from the environment only."""
    if value is None or "://" not in value:
        return value
    netloc = value.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in netloc:
        raise ValueError(f"the URL holds credentials (user:password@…); remove them and {fix}")
    return value


_S3_FIX = "put them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class SourceConfig(_OpModel):
    """Where the corpus is. A plain string is accepted as ``uri``."""

    uri: str = Field(description="A directory, a .jsonl or .parquet file, s3://bucket/prefix, or "
                     "postgresql://host:port/db?table=NAME.")
    id_field: str | None = Field(None, description="Id column/key (default: first of id, doc_id, _id).")
    text_field: str | None = Field(None, description="Text column/key (default: first of text, content, body).")
    metadata_fields: list[str] = Field(
        default_factory=list,
        description="Metadata carried into each point's payload: JSONL keys or Parquet columns; for a directory "
        "path, title, modified; for S3 key, last_modified or a user-metadata name (x-amz-meta-<name>).")
    include: list[str] = Field(
        default_factory=lambda: ["*.txt", "*.md", "*.rst", "*.html", "*.htm"],
        description="File-name patterns read from a directory or S3 prefix.",
    )
    endpoint_url: str | None = Field(
        None, description="S3 endpoint (MinIO, a test server); credentials come from the environment only."
    )
    batch_rows: int = Field(1024, gt=0, description="Rows per batch when reading Parquet.")
    follow_symlinks: bool = Field(
        False,
        description="A folder source: read symlinks that point outside the folder (and enter linked folders "
        "there). Off: such a link is a bad document, never read. Neither half: it decides which documents "
        "exist, which the corpus digest records.")
    kind: Literal["auto", "changelog"] = Field(
        "auto", description="What the uri holds: auto (by its scheme and suffix) or changelog (an append-only JSONL "
        "log of {\"op\": \"upsert\"|\"delete\", \"doc_id\": …, \"text\": …} entries; a sync reads it from the "
        "offset the population holds).")
    cursor: str | None = Field(
        None, description="Parquet, PostgreSQL: a monotonic column (e.g. updated_at): a sync reads only the rows at "
        "or past the highest value the population holds (Parquet: whole row groups skipped by their statistics). "
        "None: every sync reads the whole table.")
    deleted_field: str | None = Field(
        None, description="Parquet, PostgreSQL: a boolean tombstone column; its true rows are removed documents. None: "
        "removals are found by reading the id column alone.")
    table: str | None = Field(None, description="PostgreSQL: the table ([schema.]name), unless the uri says ?table=.")
    password_env: str | None = Field(
        None, description="PostgreSQL: the environment variable holding the password (default: libpq's own, "
        "PGPASSWORD); never in the uri.")

    @field_validator("uri")
    @classmethod
    def _uri_given(cls, value: str, info: ValidationInfo) -> str:
        if value.split("://", 1)[0] in ("postgresql", "postgres") and "password=" in value.split("?", 1)[-1]:
            raise ValueError("the URL holds a password; remove it and put it in the environment (PGPASSWORD, or the "
                             "variable source.password_env names)")
        return _no_credentials(_not_blank(value), _S3_FIX, info)

    @field_validator("password_env")
    @classmethod
    def _password_env_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _env_name(value, info)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _no_credentials(value, _S3_FIX, info)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"uri": value} if isinstance(value, str) else value


# Payload keys reindex writes for its own bookkeeping; the chunk text and metadata keys must not shadow them.
RESERVED_PAYLOAD_KEYS = ("doc_id", "ordinal", "fingerprint", "tokens", "start", "end", "pipeline_id")


class PayloadConfig(_OpModel):
    """What each point's payload carries for readers: the chunk text and the document's metadata, under keys
    that default to LangChain's layout (``page_content``, ``metadata``). Neither half: a change here (or to
    ``source.metadata_fields``) is a payload-only change, applied in place without re-embedding."""

    content_key: str = Field("page_content", min_length=1, description="Payload key of the chunk text.")
    metadata_key: str = Field("metadata", min_length=1, description="Payload key of the document's metadata object.")
    indexes: list[str] = Field(
        default_factory=list,
        description="Metadata fields given a keyword payload index (at <metadata_key>.<field>) for `reindex query --filter`; doc_id is always indexed.",
    )

    @model_validator(mode="after")
    def _distinct_keys(self) -> PayloadConfig:
        for name in ("content_key", "metadata_key"):
            if getattr(self, name) in RESERVED_PAYLOAD_KEYS:
                raise ValueError(f"{name} {getattr(self, name)!r} is a key reindex writes itself "
                                 f"({', '.join(RESERVED_PAYLOAD_KEYS)}); choose another name")
        if self.content_key == self.metadata_key:
            raise ValueError(f"content_key and metadata_key are both {self.content_key!r}; they must differ")
        return self


class StoreConfig(_OpModel):
    """The vector store. Default: embedded Qdrant in the state folder."""

    url: str | None = Field(None, description="Qdrant server URL; None = embedded.")
    path: str | None = Field(None, description="Embedded store folder (default: <state>/qdrant).")
    backend: Literal["edge", "local"] = Field(
        "edge",
        description="Embedded engine when store.url is unset: edge (qdrant-edge: on disk, HNSW, readers in other "
        "processes) or local (qdrant-client local mode, the previous default; for folders not yet converted).",
    )
    api_key_env: str = Field("QDRANT_API_KEY", description="Environment variable holding the server's API key.")
    quantization: Literal["none", "int8"] = Field(
        "none",
        description="Scalar quantisation of the populations created from now on: int8 searches a 1-byte-per-dimension "
        "copy of the vectors kept in RAM and rescores with the float32 originals kept on disk (about a quarter of "
        "the search RAM; the plan's footprint prices it); none: float32 only. Vectors are unchanged (not in the "
        "vector id); ignored by store.backend local.",
    )
    oversampling: float | None = Field(
        None, ge=1.0,
        description="With store.quantization int8: each search takes k × oversampling candidates by the int8 copy "
        "and rescores them with the float32 originals, returning the best k (recall back to float32's at a small "
        "cost: bench/RESULTS.md, a million points on one box); None: the engine's default (k candidates). Search "
        "time only: readers pick it up, nothing is rebuilt; ignored by unquantised populations and store.backend local.",
    )
    shard_number: int = Field(1, gt=0, strict=True, description="Collection shards (server/cluster only).")
    replication_factor: int = Field(1, gt=0, strict=True, description="Replicas per shard (cluster only).")

    @field_validator("url")
    @classmethod
    def _url_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _no_credentials(value, "put the key in the environment variable that store.api_key_env names", info)

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _env_name(value, info)


class StateConfig(_OpModel):
    """Where plans, manifests and locks live: a folder or s3://bucket/prefix."""

    uri: str = Field(".reindex", description="Local folder (relative to the config file) or s3://bucket/prefix.")
    endpoint_url: str | None = Field(None, description="S3 endpoint for an s3:// state URI.")

    @field_validator("uri")
    @classmethod
    def _uri_given(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            raise ValueError("must not be empty (a folder, or s3://bucket/prefix; leave state out for .reindex)")
        return _no_credentials(value, _S3_FIX, info)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _no_credentials(value, _S3_FIX, info)


class CostConfig(_OpModel):
    """Prices and rates used by the planner."""

    usd_per_mtok: float = Field(0.0, ge=0.0, description="Price in US dollars per million embedded tokens.")
    tokens_per_minute: float | None = Field(
        None, gt=0, description="Embedding throughput; None = the rate measured by `reindex calibrate`, else a default."
    )


class EmbedConfig(_OpModel):
    """How embedding runs: the device of a local model, and how to reach an OpenAI-compatible embedding API
    (provider ``openai``; the key comes from the environment only)."""

    base_url: str = Field("https://api.openai.com/v1", description="API base URL (…/v1); any OpenAI-compatible server.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key.")
    max_tokens_per_minute: float | None = Field(
        None, gt=0, description="The API's tokens-per-minute limit: requests are paced evenly to stay under it.")
    max_requests_per_minute: float | None = Field(
        None, gt=0, description="The API's requests-per-minute limit: requests are paced evenly to stay under it.")
    concurrency: int = Field(8, gt=0, description="Requests in flight at most, shared by all shards of a process.")
    request_texts: int = Field(64, gt=0, description="Texts per request; a larger embedding batch is split into concurrent requests.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(5, ge=0, strict=True, description="Retries of a request on connection errors, timeouts, 429 and 5xx.")
    device: str = Field(
        "auto",
        description="Where a local model runs: cpu, cuda, cuda:N, mps, or auto (the first CUDA device, else mps, else "
        "the CPU). Operational: vectors agree across devices within float tolerance.",
    )

    @field_validator("base_url")
    @classmethod
    def _url_without_credentials(cls, value: str, info: ValidationInfo) -> str:
        return _no_credentials(value, "put the key in the environment variable that embed.api_key_env names", info)

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _env_name(value, info)

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not re.fullmatch(r"cpu|auto|mps|cuda(:[0-9]+)?", value):
            raise ValueError(f"got {value!r}; expected cpu, cuda, cuda:N (a device number), mps or auto")
        return value


class ApprovalConfig(_OpModel):
    """Which plans need a recorded approval before apply."""

    pipeline_scoped: bool = Field(True, description="Every pipeline-scoped plan needs approval.")
    max_tokens: int | None = Field(1_000_000, ge=0, description="Document-scoped plans above this many tokens need approval.")
    max_usd: float | None = Field(1.0, ge=0.0, description="Document-scoped plans above this many dollars need approval.")
    max_removed_share: float = Field(0.05, ge=0.0, le=1.0, description="Plans removing more than this share of the live documents need approval.")
    min_readable_share: float = Field(0.5, ge=0.0, le=1.0, description="Plans whose scan could read less than this share of the live documents need approval (an unmounted or emptied source).")
    require_forecast: bool = Field(
        False, description="Every pipeline-scoped plan carries a forecast (`reindex plan` and the flows make one on "
        "approval.forecast_documents sampled documents), and apply refuses one without it.")
    forecast_documents: int = Field(100, ge=2, strict=True, description="Sample size of the forecast that "
                                    "approval.require_forecast asks for.")
    min_forecast_delta: float | None = Field(
        None, description="Apply refuses a pipeline-scoped plan whose forecast says its lower 95 % bound of recall@k "
        "(else MRR, else passage MRR) new − old is below this, or whose forecast verdict is `worse`; None = no bound.")
    carry_over: float = Field(
        0.10, ge=0.0, le=1.0, description="An approval of a pipeline-scoped plan carries over to a re-plan of the same "
        "change (same config, same live population, same kind) whose tokens to embed and new vectors are each within "
        "this share of the approved plan's: document edits synced in place meanwhile need no second approval. "
        "0 = every re-plan needs its own approval.")
    hmac_key_env: str | None = Field(
        None, description="Environment variable holding a secret key: `reindex approve` signs each approval with it "
        "(HMAC-SHA256) and apply and `cutover --force` refuse an unsigned or badly signed one; None = approvals are "
        "plain files (whoever can write plans/ can approve).")

    @field_validator("hmac_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _env_name(value, info)


class ApplyConfig(_OpModel):
    """How apply runs."""

    shards: int = Field(16, gt=0, strict=True, description="Shards (stable hash of doc id mod shards).")
    embed_batch_size: int = Field(64, gt=0, strict=True, description="Texts per embedding call.")
    unit_seconds: float = Field(
        10.0, ge=0.0, description="Remote runners (Dask, Prefect work pools) hand a worker contiguous units of shards "
        "sized to about this much planned embedding work, so a unit's own overhead (a task or flow run, ~0.4 s "
        "measured) stays ≤ 5 % of it; 0 = one shard per unit. The shard layout, and so resume, does not change.")


class CutoverConfig(_OpModel):
    """The gate a shadow population must pass before the alias moves, and the rollback window."""

    k: int = Field(10, gt=0, strict=True, description="Depth of the old-vs-new comparison (documents).")
    probes: int = Field(50, ge=0, strict=True, description="Known-item probe queries sampled from the corpus when no queries file is given.")
    seed: int = Field(0, description="Seed for probe sampling and bootstrap intervals.")
    min_recall_delta: float = Field(
        -0.02, description="With labels: the lower 95 % bound of recall@k (new − old) must be at least this."
    )
    min_overlap: float = Field(
        0.5, ge=0.0, le=1.0, description="Without labels: mean document overlap@k between old and new must be at least this."
    )
    cannot_tell: Literal["fail", "pass"] = Field(
        "fail", description="When the queries cannot see a difference (every query at the maximum on both sides, or "
        "every interval a single point), the verdict is `cannot tell`: `fail` refuses the cutover and asks for "
        "harder evidence (a queries file, more probes); `pass` lets it through, recorded in the report.")
    require_exact_count: bool = Field(True, description="The shadow's point count must equal the plan's chunk count.")
    segments: list[str] = Field(
        default_factory=list,
        description="Fields of source.metadata_fields (e.g. lang) to break the evaluation down by: per value, every "
        "metric's interval corrected for the number of segments (Holm), and a gate rule that fails when any "
        "segment's corrected lower bound of recall@k is below min_recall_delta. A query's value is the queries "
        "file's field of that name, else its labelled document's metadata, else (none).")
    retention_days: float = Field(7.0, ge=0.0, description="Retired populations are kept this long for rollback, then gc deletes them.")


class ServingConfig(_OpModel):
    """What readers may be served while a vector-half change builds (docs/design-notes.md, "Serving across a
    model change"): the live population as it is (``old``), new-model queries mapped into its space by a bridge
    fitted on the build's free pairs (``bridge``), or old-space recall reranked by the new model (``cascade``).
    A mode goes live only when its evaluation on the cutover's queries beats ``old``."""

    mode: Literal["auto", "old", "bridge", "cascade"] = Field(
        "auto", description="auto: the best mode that passes its gate; old: never switch; bridge / cascade: only "
        "that mode, still gated.")
    metric: Literal["ndcg", "recall", "mrr"] = Field(
        "ndcg", description="The metric (at cutover.k) whose paired lower bound (mode − old) must beat min_delta.")
    min_delta: float = Field(0.0, description="A mode goes live when its lower 95 % bound of metric − old's is above "
                             "this (and no segment of cutover.segments is hurt past cutover.min_recall_delta).")
    candidates: int = Field(50, gt=0, strict=True, description="Cascade: candidates recalled from the live population "
                            "and reranked by the new model.")
    min_pairs: int = Field(500, gt=0, strict=True, description="Bridge: free pairs needed before one is fitted.")
    pairs: int = Field(4096, ge=0, strict=True, description="Free (old vector, new vector) pairs the build keeps, "
                       "spread over its shards (each keeps ceil(pairs / shards)); 0 keeps none.")
    bridge: Literal["auto", "procrustes", "procrustes-uncentred", "ridge"] = Field(
        "auto", description="The map of a bridge: orthogonal Procrustes, centred or through the origin "
        "(semi-orthogonal between dimensions), ridge regression, or auto: all fitted, the one the evaluation ranks "
        "higher kept.")
    every_shards: int = Field(0, ge=0, strict=True, description="During an apply, re-evaluate the modes after "
                              "every this many committed shards (0: only `reindex serve --evaluate`).")
    queries: str | None = Field(None, description="Labelled queries file (JSONL, as `reindex cutover --queries`) the "
                                "modes are evaluated on; None: the cutover's probes.")


class SyncConfig(_OpModel):
    """How a sync finds changes: by the source's cursor, with a full read now and then."""

    verify_every: str | None = Field(
        None, description="Read the whole source and compare content hashes (as `reindex sync --verify`) when the live "
        "population's last full read is older than this: a duration like 30m, 12h, 7d (units s, m, h, d). Listing "
        "metadata can lie (new bytes, same size and mtime). None: only when asked.")

    @field_validator("verify_every")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            duration_seconds(value)
        return value

    @property
    def verify_every_seconds(self) -> float | None:
        return None if self.verify_every is None else duration_seconds(self.verify_every)


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(text: str) -> float:
    """Seconds of a duration like ``90s``, ``30m``, ``12h``, ``7d`` (a bare number is seconds)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", str(text))
    if not m:
        raise ValueError(f"got {text!r}; expected a duration like 30m, 12h or 7d (units s, m, h, d)")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]


_INDEX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


class PipelineConfig(_Model):
    """The whole ``reindex.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=OPERATIONAL)
    version: Literal[1] = Field(CONFIG_VERSION, description="Config schema version.")
    index: str = Field(description="Alias name readers query; collections are named <index>__<short pipeline id>.")
    source: SourceConfig = Field(description="The corpus.")
    text: TextHalf = Field(default_factory=TextHalf, description="Text half.")
    vector: VectorHalf = Field(default_factory=VectorHalf, description="Vector half.")
    payload: PayloadConfig = Field(default_factory=PayloadConfig, description="Point payload layout for readers.")
    store: StoreConfig = Field(default_factory=StoreConfig, description="Vector store.")
    state: StateConfig = Field(default_factory=StateConfig, description="State store.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Prices and rates.")
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig, description="Approval policy.")
    apply: ApplyConfig = Field(default_factory=ApplyConfig, description="Apply settings.")
    embed: EmbedConfig = Field(default_factory=EmbedConfig, description="Embedding API access (provider openai).")
    cutover: CutoverConfig = Field(default_factory=CutoverConfig, description="Cutover gate and retention.")
    sync: SyncConfig = Field(default_factory=SyncConfig, description="How syncs find changes (cursors, verification).")
    serving: ServingConfig = Field(default_factory=ServingConfig,
                                   description="What readers are served while a vector-half change builds.")

    @model_validator(mode="after")
    def _segments_are_metadata(self, info: ValidationInfo) -> "PipelineConfig":
        unknown = [f for f in self.cutover.segments if f not in self.source.metadata_fields]
        if unknown and not _recorded(info):
            raise ValueError(f"cutover.segments: {', '.join(map(repr, unknown))} not in source.metadata_fields "
                             f"({', '.join(self.source.metadata_fields) or 'none'}); add it there so the labelled "
                             "documents carry it, or remove it from cutover.segments")
        return self

    @field_validator("index")
    @classmethod
    def _index_name(cls, value: str) -> str:
        if not _INDEX_RE.match(value) or "__" in value:
            raise ValueError(
                "must be 1-63 letters, digits, '_' or '-', start with a letter or digit, and not contain '__'"
            )
        return value


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _first_error(err: ValidationError, prefix: str = "") -> str:
    parts = []
    for e in err.errors()[:3]:
        loc = [str(p) for p in e["loc"]]
        # Drop the union tag pydantic inserts for discriminated unions (text.chunker.recursive.size).
        if len(loc) >= 3 and loc[-3] == "chunker" and loc[-2] in CHUNKER_KINDS:
            loc.pop(-2)
        elif len(loc) >= 2 and loc[-2] == "chunker" and loc[-1] in CHUNKER_KINDS:
            loc.pop()
        path = ".".join(loc) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "union_tag_invalid":
            given = e.get("input")
            given = given.get("kind") if isinstance(given, dict) else given
            msg = f"unknown kind {given!r}; allowed: {', '.join(sorted(CHUNKER_KINDS))}"
        elif e["type"] == "literal_error":
            msg = f"got {e.get('input')!r}; {msg[0].lower()}{msg[1:]}"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "int_type":
            msg = f"got {json.dumps(e.get('input'))}; expected a whole number"
        elif e["type"] == "finite_number":
            msg = f"got {_yaml_float(e.get('input'))}; expected a finite number"
        parts.append(f"{prefix}{path}: {msg}")
    more = len(err.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _yaml_float(value: Any) -> str:
    """``.inf``, ``-.inf`` or ``.nan`` as YAML spells them (the input of a non-finite number)."""
    if isinstance(value, float):
        return ".nan" if value != value else (".inf" if value > 0 else "-.inf")
    return repr(value)


def config_from_dict(data: Any, origin: str = "<config>", *, recorded: bool = False) -> PipelineConfig:
    """Validate a parsed config mapping; errors name ``origin`` and the field path. ``recorded``: a config
    read back from state (a population record), accepted even if written before secrets were refused."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data, context=RECORDED if recorded else None)
    except ValidationError as err:
        raise ConfigError(f"{origin}: {_first_error(err)}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: plain YAML keeps the last one,
    so ``index: docs`` … ``index: other`` would silently build a second index."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.setdefault(key, key_node.start_mark.line)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first + 1}); keep one of them",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, origin: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark else origin
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: invalid YAML: {problem}") from None


def config_from_yaml(text: str, origin: str = "<config>") -> PipelineConfig:
    """Validate a config given as YAML text (``origin`` names it in messages)."""
    return config_from_dict(_parse_yaml(text, origin), origin)


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate ``reindex.yaml``. Relative source/state paths are made absolute against
    the config file's folder, so a config means the same from any working directory."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: config file not found (create one with `reindex init`)")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read config: {err}") from None
    data = _parse_yaml(text, str(p))
    cfg = config_from_dict(data, str(p))
    return absolutize(cfg, p.resolve().parent)


def absolutize(cfg: PipelineConfig, base: Path) -> PipelineConfig:
    """Make local source/state/store paths absolute against ``base``."""

    def fix(uri: str | None) -> str | None:
        if uri is None or "://" in uri or Path(uri).is_absolute():
            return uri
        return str((base / uri).resolve())

    source = cfg.source.model_copy(update={"uri": fix(cfg.source.uri)})
    state = cfg.state.model_copy(update={"uri": fix(cfg.state.uri)})
    store = cfg.store.model_copy(update={"path": fix(cfg.store.path)})
    serving = cfg.serving.model_copy(update={"queries": fix(cfg.serving.queries)})
    return cfg.model_copy(update={"source": source, "state": state, "store": store, "serving": serving})


def with_chunker(cfg: PipelineConfig, chunker: _ChunkerModel) -> PipelineConfig:
    """A copy of ``cfg`` with another chunker (used by ``--chunker`` overrides)."""
    return cfg.model_copy(update={"text": cfg.text.model_copy(update={"chunker": chunker})})


def field_half(model: type[BaseModel]) -> str:
    """The half (text, vector, operational) a config model belongs to."""
    extra = model.model_config.get("json_schema_extra") or {}
    return extra.get("half", "operational") if isinstance(extra, dict) else "operational"


# --------------------------------------------------------------------------------------------
# `reindex init`: a commented default config generated from the models above.
# --------------------------------------------------------------------------------------------


def default_config_yaml(index: str = "docs", source: str = "./corpus") -> str:
    """A commented ``reindex.yaml`` with every field, its default, its description and its half."""
    lines = [
        "# reindex.yaml — the pipeline config of one index.",
        "# [text] fields decide which text is embedded (hashed into the text id: changing one recuts every document).",
        "# [vector] fields decide which vector a text gets (hashed into the vector id: changing one re-embeds everything).",
        "# [operational] fields change neither id.",
        f"version: {CONFIG_VERSION}",
    ]
    top = PipelineConfig.model_fields
    lines.append(f"# [operational] {top['index'].description}")
    lines.append(f"index: {index}")
    lines.append(f"# [operational] {top['source'].description}")
    lines.append("source:")
    _emit(lines, SourceConfig, {"uri": source}, 1)
    for name in ("text", "vector", "payload", "store", "state", "cost", "approval", "apply", "embed", "cutover", "sync"):
        model = top[name].annotation
        lines.append(f"# [{field_half(model)}] {top[name].description}")
        lines.append(f"{name}:")
        _emit(lines, model, {}, 1)
    return "\n".join(lines) + "\n"


def _emit(lines: list[str], model: type[BaseModel], overrides: dict[str, Any], depth: int) -> None:
    pad = "  " * depth
    half = field_half(model)
    instance_defaults = {}
    for fname, field in model.model_fields.items():
        if fname in overrides:
            value = overrides[fname]
        elif field.default_factory is not None:
            value = field.default_factory()
        else:
            value = field.default
        instance_defaults[fname] = value
    for fname, field in model.model_fields.items():
        value = instance_defaults[fname]
        desc = field.description or ""
        if isinstance(value, BaseModel):
            sub = type(value)
            doc = (sub.__doc__ or "").strip().splitlines()[0] if sub.__doc__ else desc
            lines.append(f"{pad}# [{field_half(sub)}] {desc or doc}")
            if fname == "chunker":
                lines.append(f"{pad}# kinds: {', '.join(sorted(CHUNKER_KINDS))}; see `reindex chunk --help`.")
            lines.append(f"{pad}{fname}:")
            _emit(lines, sub, {}, depth + 1)
            continue
        if fname == "kind" and not desc:
            desc = (model.__doc__ or "").strip().splitlines()[0]
        lines.append(f"{pad}# [{half}] {desc}")
        lines.append(f"{pad}{fname}: {_yaml_scalar(value)}")


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True).strip().removesuffix("\n...").removesuffix("...").strip()
