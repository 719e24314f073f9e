"""The operational sections (in no id): source, payload, store, state, cost, embed, approval, apply, cutover,
sync, plans."""

from __future__ import annotations

import re
import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from reindex.domain.config._base import OPERATIONAL, ConfigModel
from reindex.domain.kinds import HNSW_DEFAULTS, hnsw_problem
from reindex.domain.config._secrets import env_name, is_recorded, no_credentials

__all__ = [
    "ApplyConfig", "ApprovalConfig", "CostConfig", "CutoverConfig", "EmbedConfig", "HnswConfig", "PayloadConfig",
    "PlansConfig", "RESERVED_PAYLOAD_KEYS", "ServingConfig", "SourceConfig", "StateConfig", "StoreConfig", "SyncConfig",
    "duration_seconds",
]


# --------------------------------------------------------------------------------------------
# Operational parts
# --------------------------------------------------------------------------------------------


class _OpModel(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=OPERATIONAL)


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
        return no_credentials(_not_blank(value), _S3_FIX, info)

    @field_validator("password_env")
    @classmethod
    def _password_env_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        return env_name(value, info)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return no_credentials(value, _S3_FIX, info)

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


class HnswConfig(_OpModel):
    """The HNSW index of the populations created from now on, and of every search (edge store and server)."""

    m: int = Field(HNSW_DEFAULTS["m"], strict=True, description="Links per point in the graph (4-128; Qdrant's "
                   "default 16). More: a larger graph, more CPU per search, higher recall. Changes recall and "
                   "cost, not the vectors: in no id; a live population keeps the graph it was built with.")
    ef_construct: int = Field(
        HNSW_DEFAULTS["ef_construct"], strict=True, description="Candidates considered per point while the graph is "
        "built (4-4096; Qdrant's default 100). Lower: a cheaper build (the plan prices it), lower recall. Changes "
        "recall and cost, not the vectors: in no id; a live population keeps the graph it was built with.")
    ef: int | None = Field(
        HNSW_DEFAULTS["ef"], strict=True, description="Candidates each search considers (4-4096; hnsw_ef): readers, "
        "`reindex query` and the cutover's evaluation search with it, whatever graph a population has. Higher: "
        "higher recall, more CPU per search. null: the engine's default, the graph's own ef_construct. Search time "
        "only: nothing is rebuilt.")

    @field_validator("m", "ef_construct", "ef")
    @classmethod
    def _in_range(cls, value: int | None, info: ValidationInfo) -> int | None:
        problem = None if value is None else hnsw_problem(str(info.field_name), value)
        if problem:
            raise ValueError(problem)
        return value


class StoreConfig(_OpModel):
    """The vector store. Default: embedded Qdrant in the state folder."""

    url: str | None = Field(None, description="Qdrant server URL (http:// or https://; another scheme picks the store "
                            "backend registered for it); None = embedded.")
    path: str | None = Field(None, description="Embedded store folder (default: <state>/qdrant).")
    backend: str = Field(
        "edge",
        description="Embedded engine when store.url is unset: edge (qdrant-edge: on disk, HNSW, readers in other "
        "processes), local (qdrant-client local mode, the previous default; for folders not yet converted), or a "
        "backend registered with reindex.adapters.stores.opening.register_backend.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings of the store backend itself, checked by the schema its registry entry declares (the "
        "built-in backends take none).",
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
    hnsw: HnswConfig = Field(
        default_factory=HnswConfig,
        description="The HNSW index: {m, ef_construct} of the graph built for populations created from now on, ef of "
        "every search. Neither half: it changes recall and cost (the plan prices the build with m and ef_construct), "
        "not the vectors; a live population keeps the graph it was built with. Ignored by store.backend local "
        "(brute-force search).")
    shard_number: int = Field(1, gt=0, strict=True, description="Collection shards (server/cluster only).")
    replication_factor: int = Field(1, gt=0, strict=True, description="Replicas per shard (cluster only).")

    @field_validator("url")
    @classmethod
    def _url_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return no_credentials(value, "put the key in the environment variable that store.api_key_env names", info)

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return env_name(value, info)


class StateConfig(_OpModel):
    """Where plans, manifests and locks live: a folder or s3://bucket/prefix."""

    uri: str = Field(".reindex", description="Local folder (relative to the config file) or s3://bucket/prefix.")
    endpoint_url: str | None = Field(None, description="S3 endpoint for an s3:// state URI.")

    @field_validator("uri")
    @classmethod
    def _uri_given(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip():
            raise ValueError("must not be empty (a folder, or s3://bucket/prefix; leave state out for .reindex)")
        return no_credentials(value, _S3_FIX, info)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint_without_credentials(cls, value: str | None, info: ValidationInfo) -> str | None:
        return no_credentials(value, _S3_FIX, info)


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
        return no_credentials(value, "put the key in the environment variable that embed.api_key_env names", info)

    @field_validator("api_key_env")
    @classmethod
    def _names_a_variable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return env_name(value, info)

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
    max_truncated_share: float | None = Field(
        None, ge=0.0, le=1.0, description="Apply refuses a plan in which more than this share of the chunks it cuts "
        "exceed the embedding model's input limit, counted in the model's own tokens (the model truncates them: their "
        "tails are not in the vectors); None = warn only.")
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
        return env_name(value, info)


#: The most shards a config may ask for (apply.shards).
MAX_SHARDS = 4096


class ApplyConfig(_OpModel):
    """How apply runs."""

    shards: int = Field(16, gt=0, strict=True, description="Shards (stable hash of doc id mod shards; at most "
                        f"{MAX_SHARDS:,}: a shard is a unit of work and resume, each with its manifest part).")

    @field_validator("shards")
    @classmethod
    def _shards(cls, value: int, info: ValidationInfo) -> int:
        if value > MAX_SHARDS and not is_recorded(info):  # a record reads as written
            shown = f"{value:,}" if value < 10**15 else f"{value:.3g}"
            raise ValueError(f"got {shown}; at most {MAX_SHARDS:,} (each shard is a unit of work with a manifest "
                             "part of its own: more shards than that only add files and round trips)")
        return value
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
    queries: str | None = Field(
        None, description="Labelled queries file (JSONL, as `reindex cutover --queries`) the cutover and an unattended "
        "`reindex sync` evaluate on when no --queries is given; None: cutover.probes known-item probes.")
    metric: Literal["ndcg", "recall", "mrr", "passage_mrr"] = Field(
        "ndcg", description="The primary metric (at k) whose paired verdict decides the gate: `worse` fails, a lower "
        "95 % bound of new − old at least min_delta passes, an interval too wide to tell is `cannot tell`; segments "
        "are judged on it too. recall@k stays a floor (min_recall_delta).")
    min_delta: float = Field(
        -0.02, le=0.0, description="The primary metric's lower 95 % bound of new − old must be at least this (the loss "
        "the gate tolerates; the interval must be narrow enough to show it).")
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
        "metric's interval corrected for the number of segments (Holm), and a gate rule per field that judges every "
        "segment on the primary metric (cutover.metric) as the whole is judged: a segment `worse` fails, one whose "
        "corrected interval is too wide to show min_delta is `cannot tell`. A query's value is the queries "
        "file's field of that name, else its labelled document's metadata, else (none).")
    min_index_recall: float = Field(
        0.95, ge=0.0, le=1.0, description="The shadow's search index must find at least this share of the exact top-10 "
        "(recall@10 of its ANN search against exact search, on up to 200 of its stored vectors used as queries).")
    max_latency_ratio: float = Field(
        2.0, gt=0.0, description="The shadow's query latency p95 on the gate's queries may be at most this many times "
        "the live population's.")
    index_wait: str = Field(
        "10m", description="How long the cutover waits for a Qdrant server to finish indexing the shadow (optimizer "
        "green, every vector indexed) before it gives up: a duration like 90s, 10m, 1h. The embedded store builds its "
        "index during apply: nothing to wait for.")
    retention_days: float = Field(7.0, ge=0.0, description="Retired populations are kept this long for rollback, then gc deletes them.")

    @field_validator("index_wait")
    @classmethod
    def _wait_duration(cls, value: str) -> str:
        duration_seconds(value)
        return value

    @property
    def index_wait_seconds(self) -> float:
        return duration_seconds(self.index_wait)


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
    min_delta: float = Field(0.0, description="A mode goes live when its anytime lower bound of metric − old's is "
                             "above this: a betting bound whose level is spent over the build's evaluations, so that "
                             "all of them together switch on a mode no better than old with probability at most 5 % "
                             "(and no segment of cutover.segments is hurt past cutover.min_recall_delta). A mode "
                             "measurably worse than old is refused whatever this says; validate warns of a negative "
                             "value.")
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
                              "every this many committed shards (0: only `reindex serving --evaluate`).")
    queries: str | None = Field(None, description="Labelled queries file (JSONL, as `reindex cutover --queries`) the "
                                "modes are evaluated on; None: the cutover's probes.")
    max_ms: float | Literal["auto"] = Field(
        "auto", description="A mode goes live only when a reader pays at most this many milliseconds per query (p95, "
        "measured from a reader's seat: a reader opened as another process opens it); auto: 5 × the slower native "
        "p95 (the live model's reads now, the new model's query after the cutover), at least 20 ms.")
    max_embedded_per_query: int | None = Field(
        None, ge=0, description="A mode goes live only when a reader embeds at most this many cascade candidates per "
        "query (the rest read from the shadow as the build shares it); null: no limit of its own (max_ms bounds what "
        "embedding costs here). Set it for a model paid per token: 0 serves the cascade only once every candidate is "
        "built.")

    @field_validator("max_ms", mode="before")
    @classmethod
    def _finite_ms(cls, value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            raise PydanticCustomError("finite_number", "Input should be a finite number")  # said as the others are
        return value

    @field_validator("max_ms")
    @classmethod
    def _positive_ms(cls, value: float | str) -> float | str:
        if value != "auto" and float(value) <= 0:
            raise ValueError(f"got {value}; expected a number of milliseconds above 0, or auto")
        return value


class PlansConfig(_OpModel):
    """The plans folder: how many plans ``reindex sync`` and the live mode keep there."""

    keep: int | None = Field(
        100, ge=1, strict=True, description="Plans of this index kept in the plans folder by `reindex sync` and "
        "`reindex sync --watch` (each with its reports, run report and approval): older ones that were carried out in "
        "place (their run is recorded in the state) are deleted at the end of a cycle; a plan that built a population, "
        "or waits for approval, is never deleted. null: keep every plan.")


class SyncConfig(_OpModel):
    """How a sync finds changes: by the source's cursor, with a full read now and then."""

    verify_every: str | None = Field(
        None, description="Read the whole source and compare content hashes (as `reindex sync --verify`) when the live "
        "population's last full read is older than this: a duration like 30m, 12h, 7d (units s, m, h, d). Listing "
        "metadata can lie (new bytes, same size and mtime). None: only when asked.")

    @field_validator("verify_every")
    @classmethod
    def _duration(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and duration_seconds(value) <= 0 and not is_recorded(info):  # a record reads as written
            raise ValueError(f"got {value!r}; a full read at every sync is `reindex sync --verify` (or a source "
                             "without a cursor): give a duration longer than 0, like 12h or 7d, or null")
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
