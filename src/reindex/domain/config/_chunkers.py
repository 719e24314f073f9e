"""The chunker kinds' models (the text half's ``chunker``), the union that discriminates them, the
``KIND:key=value`` spec form, and the one line a validation error of any section becomes."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from reindex.errors import ChunkerError
from reindex.domain.config._base import TEXT, ConfigModel
from reindex.domain.config._secrets import check_params

__all__ = [
    "CHUNKER_KINDS", "first_error", "yaml_float", "AnchoredChunkerConfig", "CallableChunkerConfig", "CdcChunkerConfig", "ChunkerConfig",
    "ChunkerModel", "FixedCharsChunkerConfig", "FixedChunkerConfig", "LangchainChunkerConfig",
    "MarkdownChunkerConfig", "ParagraphChunkerConfig", "PersonName", "RecursiveChunkerConfig",
    "SentenceChunkerConfig", "SlidingChunkerConfig", "chunker_spec", "parse_chunker_spec",
]


# --------------------------------------------------------------------------------------------
# Chunkers (text half). One model per kind; ``kind`` discriminates.
# --------------------------------------------------------------------------------------------


class ChunkerModel(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=TEXT)


class FixedChunkerConfig(ChunkerModel):
    """Greedy non-overlapping windows of ``size`` tokens (seed 000's 304-token baseline)."""

    kind: Literal["fixed"] = "fixed"
    size: int = Field(304, gt=0, description="Window length in tokens.")


class SlidingChunkerConfig(ChunkerModel):
    """Windows of ``size`` tokens advancing by ``int(size * (1 - overlap))`` tokens."""

    kind: Literal["sliding"] = "sliding"
    size: int = Field(256, gt=0, description="Window length in tokens.")
    overlap: float = Field(0.2, ge=0.0, lt=1.0, description="Fraction of a window repeated in the next one.")


class FixedCharsChunkerConfig(ChunkerModel):
    """Windows of ``size`` characters (a quick baseline that ignores tokens)."""

    kind: Literal["fixed_chars"] = "fixed_chars"
    size: int = Field(1200, gt=0, description="Window length in characters.")
    overlap: float = Field(0.0, ge=0.0, lt=1.0, description="Fraction of a window repeated in the next one.")


class SentenceChunkerConfig(ChunkerModel):
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


class ParagraphChunkerConfig(ChunkerModel):
    """Consecutive paragraphs grouped up to ``size`` tokens; long paragraphs split recursively."""

    kind: Literal["paragraph"] = "paragraph"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class RecursiveChunkerConfig(ChunkerModel):
    """Blank line → line break → sentence terminator → fixed window, to a ``size``-token target."""

    kind: Literal["recursive"] = "recursive"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class CdcChunkerConfig(ChunkerModel):
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


class MarkdownChunkerConfig(ChunkerModel):
    """Heading-aware sections (Markdown ``#`` and reStructuredText underlines), recursive inside."""

    kind: Literal["markdown"] = "markdown"
    size: int = Field(250, gt=0, description="Token target and hard cap per chunk.")


class AnchoredChunkerConfig(ChunkerModel):
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


class LangchainChunkerConfig(ChunkerModel):
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
        return check_params(value, info)


class CallableChunkerConfig(ChunkerModel):
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
        return check_params(value, info)


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

CHUNKER_KINDS: dict[str, type[ChunkerModel]] = {
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


def parse_chunker_spec(spec: str) -> ChunkerModel:
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
        raise ChunkerError(f"chunker spec {spec!r}: {first_error(err)}") from None


def chunker_spec(cfg: ChunkerModel) -> str:
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


# The one line a validation error becomes (here: it drops the tags of the chunker union above).
def first_error(err: ValidationError, prefix: str = "") -> str:
    """The first three errors of ``err`` as one line (``text.chunker.size: …``), the union tags dropped."""
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
            msg = f"got {yaml_float(e.get('input'))}; expected a finite number"
        parts.append(f"{prefix}{path}: {msg}")
    more = len(err.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def yaml_float(value: Any) -> str:
    """``.inf``, ``-.inf`` or ``.nan`` as YAML spells them (the input of a non-finite number)."""
    if isinstance(value, float):
        return ".nan" if value != value else (".inf" if value > 0 else "-.inf")
    return repr(value)
