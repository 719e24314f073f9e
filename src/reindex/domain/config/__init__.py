"""The pipeline config (``reindex.yaml``): pydantic models with ``extra="forbid"``.

Every model is tagged with the half it belongs to (``half`` in its JSON schema extra):

* ``text``: decides *which text* is embedded; hashed into the text id.
* ``vector``: decides *which vector* a text gets; hashed into the vector id.
* ``operational``: neither (where things live, prices, parallelism); never hashed.

This module holds the whole config (:class:`PipelineConfig`), its loader and the commented template; its sections
live in private modules by role (``_halves``: the two hashed halves; ``_chunkers``: the chunker kinds;
``_operational``: the sections in no id; ``_secrets``: the secret rules; ``_base``: what they share), and every
public name is importable from here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from reindex.errors import ConfigError

from reindex.domain.config._base import (
    CONFIG_VERSION, TEXT, VECTOR, OPERATIONAL, ConfigModel,
)
from reindex.domain.config._secrets import (
    ENV_SUFFIX, RECORDED, is_secret_name, is_recorded, check_params, no_credentials, env_name, without_env_names,
    params_from_env, scrub, redact, no_userinfo, find_secret_value, secret_shape,
)
from reindex.domain.config._chunkers import (
    CHUNKER_KINDS, first_error, yaml_float, ChunkerModel, FixedChunkerConfig, SlidingChunkerConfig, FixedCharsChunkerConfig,
    SentenceChunkerConfig, ParagraphChunkerConfig, RecursiveChunkerConfig, CdcChunkerConfig, MarkdownChunkerConfig,
    AnchoredChunkerConfig, LangchainChunkerConfig, CallableChunkerConfig, PersonName, ChunkerConfig,
    parse_chunker_spec, chunker_spec,
)
from reindex.domain.config._halves import (
    NormaliserConfig, STICKY_KINDS, RechunkConfig, TextHalf, VectorHalf,
)
from reindex.domain.config._operational import (
    SourceConfig, RESERVED_PAYLOAD_KEYS, PayloadConfig, HnswConfig, StoreConfig, StateConfig, CostConfig, EmbedConfig,
    ApprovalConfig, ApplyConfig, CutoverConfig, ServingConfig, SyncConfig, PlansConfig, duration_seconds,
)

__all__ = [
    "AnchoredChunkerConfig", "ApplyConfig", "ApprovalConfig", "CHUNKER_KINDS", "CONFIG_VERSION",
    "CallableChunkerConfig", "CdcChunkerConfig", "ChunkerConfig", "ChunkerModel", "ConfigModel", "CostConfig",
    "CutoverConfig", "ENV_SUFFIX", "EmbedConfig", "FixedCharsChunkerConfig", "FixedChunkerConfig",
    "HnswConfig", "LangchainChunkerConfig", "MarkdownChunkerConfig", "NormaliserConfig", "OPERATIONAL", "ParagraphChunkerConfig",
    "PayloadConfig", "PersonName", "PipelineConfig", "PlansConfig", "RECORDED", "RESERVED_PAYLOAD_KEYS", "RechunkConfig",
    "RecursiveChunkerConfig", "STICKY_KINDS", "SentenceChunkerConfig", "ServingConfig", "SlidingChunkerConfig", "SourceConfig",
    "StateConfig", "StoreConfig", "SyncConfig", "TEXT", "TextHalf", "VECTOR", "VectorHalf", "absolutize",
    "check_params", "chunker_spec", "config_from_dict", "config_from_yaml", "default_config_yaml",
    "duration_seconds", "env_name", "field_half", "find_secret_value", "first_error", "is_recorded", "is_secret_name", "load_config",
    "no_credentials", "no_userinfo", "params_from_env", "parse_chunker_spec", "redact", "scrub", "secret_shape", "with_chunker",
    "without_env_names", "yaml_float",
]

_INDEX_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


class PipelineConfig(ConfigModel):
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
    plans: PlansConfig = Field(default_factory=PlansConfig, description="The plans folder's retention.")

    @model_validator(mode="after")
    def _segments_are_metadata(self, info: ValidationInfo) -> "PipelineConfig":
        unknown = [f for f in self.cutover.segments if f not in self.source.metadata_fields]
        if unknown and not is_recorded(info):
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



def config_from_dict(data: Any, origin: str = "<config>", *, recorded: bool = False) -> PipelineConfig:
    """Validate a parsed config mapping; errors name ``origin`` and the field path. ``recorded``: a config
    read back from state (a population record), accepted even if written before secrets were refused."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        cfg = PipelineConfig.model_validate(data, context=RECORDED if recorded else None)
    except ValidationError as err:
        raise ConfigError(f"{origin}: {first_error(err)}") from None
    found = None if recorded else find_secret_value(data)  # by value, in any field (by name: the fields' own rules)
    if found:
        path, what = found
        raise ConfigError(f"{origin}: {path}: its value looks like {what}, and the config is copied into plans, "
                          "reports and population records; remove it, put the secret in an environment variable and "
                          "name the variable (a <name>_env field) instead")
    return cfg


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
    """Make local source/state/store paths (and the queries files of serving and cutover) absolute against ``base``."""

    def fix(uri: str | None) -> str | None:
        if uri is None or "://" in uri or Path(uri).is_absolute():
            return uri
        return str((base / uri).resolve())

    source = cfg.source.model_copy(update={"uri": fix(cfg.source.uri)})
    state = cfg.state.model_copy(update={"uri": fix(cfg.state.uri)})
    store = cfg.store.model_copy(update={"path": fix(cfg.store.path)})
    serving = cfg.serving.model_copy(update={"queries": fix(cfg.serving.queries)})
    cutover = cfg.cutover.model_copy(update={"queries": fix(cfg.cutover.queries)})
    return cfg.model_copy(update={"source": source, "state": state, "store": store, "serving": serving,
                                  "cutover": cutover})


def with_chunker(cfg: PipelineConfig, chunker: ChunkerModel) -> PipelineConfig:
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
    for name in ("text", "vector", "payload", "store", "state", "cost", "approval", "apply", "embed", "cutover", "serving",
                 "sync", "plans"):
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
