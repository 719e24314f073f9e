"""Canonical, versioned hashing: text id, vector id, pipeline id, fingerprints, point ids and
collection names.

* ``text_id = H("reindex/text/v1" ‖ canonical JSON of the text half)``
* ``vector_id = H("reindex/vector/v1" ‖ canonical JSON of the vector half)``, where a local model is
  identified by the content digest of its files (``revision``), not by its name or path, and
  ``query_prefix`` is left out (see :func:`vector_id`)
* ``pipeline_id = H("reindex/adapters/pipeline/v1" ‖ text_id ‖ vector_id)``
* ``fingerprint = H(vector_id ‖ chunk text)``: equal fingerprints ⇒ equal vectors, whatever chunker
  produced the text.
* point id: a UUID from (doc id, fingerprint, occurrence of that fingerprint within the document).
* ``payload_id = H("reindex/payload/v1" ‖ metadata_fields, payload section)``: neither half, not in the
  pipeline id; a change of it alone is a payload-only change (points rewritten in place, no embedding).
* document hash: the bytes' digest, or with metadata ``H(bytes digest ‖ metadata)``: what change detection
  compares, so a metadata edit alone reaches the payload.

Bump a version prefix whenever the meaning of a hashed field changes.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from reindex.domain.config import (
    PipelineConfig,
    RechunkConfig,
    TextHalf,
    VectorHalf,
    config_from_dict,
    without_env_names,
)
from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.errors import ConfigError
from reindex.domain.models import digest_path, find_tokenizer_file, is_static_folder, resolve_model_path

__all__ = [
    "CorpusDigest", "DOCUMENT_HASH_VERSION", "Identity", "LEGACY_PAYLOAD_ID", "LOCATION_FIELDS",
    "PAYLOAD_ID_VERSION", "PIPELINE_ID_VERSION", "POINT_ID_VERSION", "RUN_ONLY_SECTIONS", "SHORT",
    "TEXT_ID_VERSION", "VECTOR_ID_VERSION", "canonical_json", "collection_name", "config_digest", "content_hash",
    "corpus_digest", "digest_json", "document_hash", "fingerprint", "identity_of", "jsonable",
    "legacy_config_digest", "payload_id", "payload_id_of_record", "pipeline_id", "point_id", "point_ids",
    "resolve_config", "splitter_version", "text_id", "vector_id", "TOUCHED_REMOVED", "TOUCHED_UNMOVED",
    "TOUCHED_UNREADABLE", "touched_digest",
]

TEXT_ID_VERSION = "reindex/text/v1"
VECTOR_ID_VERSION = "reindex/vector/v1"
PIPELINE_ID_VERSION = "reindex/adapters/pipeline/v1"
POINT_ID_VERSION = "reindex/point/v1"
PAYLOAD_ID_VERSION = "reindex/payload/v1"
DOCUMENT_HASH_VERSION = "reindex/document/v1"
# The payload id of a population written before the payload contract: chunk text under ``text``, no
# metadata. Its config record has no ``payload`` section.
LEGACY_PAYLOAD_ID = "legacy-text-payload"
SHORT = 12


def canonical_json(value: Any) -> str:
    """Sorted keys, fixed separators, no ASCII escaping: one byte string per value."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _h(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=32)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def text_id(text: TextHalf) -> str:
    """Hash of the text half (all fields, defaults included, so omitted = explicit default).

    ``rechunk`` is left out while it equals its default (stateless): the field came after v1, and
    leaving it out keeps every existing stateless population's text id, and so its collection name.
    Any other value is hashed, so switching to sticky re-chunking is a text change."""
    data = text.model_dump(mode="json")
    if text.rechunk == RechunkConfig():
        del data["rechunk"]
    if "params" in data["chunker"]:
        data["chunker"]["params"] = without_env_names(data["chunker"]["params"])
    return _h(TEXT_ID_VERSION.encode(), canonical_json(data).encode())


#: Providers whose model is a local folder: an ``auto`` revision is the digest of its files.
_LOCAL_MODELS = ("sentence-transformers", "model2vec")


def vector_id(vector: VectorHalf) -> str:
    """Hash of the vector half: of what decides the stored vectors.

    * A local model whose revision is a content digest of its files (``sha256:…``, what ``auto``
      resolves to) is identified by that digest alone: ``model`` (a hub id, a packaged name or a folder
      path) is a display name, so the same weights under another name keep the vector id. The ``hash``
      provider's vectors do not depend on ``model`` either. API models (and explicit non-digest
      revisions) keep ``model`` in the hash: the name is all that identifies them.
    * ``query_prefix`` is left out: it changes how queries are embedded, not any stored vector.
    * ``<name>_env`` params are left out: they name the variable a secret is read from, and a key (its
      value or its variable) decides no vector, so rotating one plans nothing.
    * ``compose`` and ``compose_unit`` are left out while ``compose`` is ``none``: they came after v1, and
      ``compose: units`` (vectors composed from units) is another vector for the same text.

    Both keys are left out rather than renamed, so every other population keeps its v1 id; a config
    whose hash lost ``model`` cannot collide with a v1 payload, which always had it."""
    data = vector.model_dump(mode="json")
    del data["query_prefix"]
    data["params"] = without_env_names(data["params"])  # where secrets are read from: operational
    if not data["params"]:
        del data["params"]  # came after v1: left out while empty, so every earlier population keeps its id
    if data.get("compose", "none") == "none":  # came after v1 too: left out while off, with its unit rule
        data.pop("compose", None)
        data.pop("compose_unit", None)
    if vector.provider == "hash" or (vector.provider in _LOCAL_MODELS and vector.revision.startswith("sha256:")):
        del data["model"]
    return _h(VECTOR_ID_VERSION.encode(), canonical_json(data).encode())


def pipeline_id(text: TextHalf, vector: VectorHalf) -> str:
    """Hash of both halves: names the population."""
    return _h(PIPELINE_ID_VERSION.encode(), text_id(text).encode(), vector_id(vector).encode())


def collection_name(index: str, pid: str) -> str:
    """``<index>__<short pipeline id>``."""
    return f"{index}__{pid[:SHORT]}"


def fingerprint(vid: str, text: str) -> str:
    """``H(vector id ‖ chunk text)``, 128-bit hex."""
    h = hashlib.blake2b(digest_size=16)
    h.update(vid.encode())
    h.update(b"\0")
    h.update(text.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def point_id(doc_id: str, fp: str, occurrence: int) -> str:
    """Deterministic Qdrant point id (UUID string) from doc id, fingerprint and occurrence."""
    digest = hashlib.blake2b(
        canonical_json([POINT_ID_VERSION, doc_id, fp, occurrence]).encode(), digest_size=16
    ).digest()
    return str(uuid.UUID(bytes=digest))


def point_ids(doc_id: str, fingerprints: list[str]) -> list[str]:
    """Point ids of one document's chunks in order; repeated text gets occurrence 0, 1, 2, …"""
    seen: dict[str, int] = {}
    out = []
    for fp in fingerprints:
        occ = seen.get(fp, 0)
        seen[fp] = occ + 1
        out.append(point_id(doc_id, fp, occ))
    return out


def content_hash(data: bytes) -> str:
    """Digest of a document's raw bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def document_hash(data: bytes, metadata: Iterable[tuple[str, Any]] = ()) -> str:
    """What change detection compares for a document: :func:`content_hash` of its bytes when it carries no
    metadata (so every population built without ``metadata_fields`` keeps its hashes), else a digest of
    the bytes' hash and its metadata, so that a metadata edit alone is a change the planner sees."""
    items = list(metadata)
    if not items:
        return content_hash(data)
    body = canonical_json([DOCUMENT_HASH_VERSION, content_hash(data), [[k, jsonable(v)] for k, v in items]])
    return hashlib.blake2b(body.encode(), digest_size=16).hexdigest()


def jsonable(value: Any) -> Any:
    """A metadata value as plain JSON (what canonical JSON and a point's payload accept): timestamps as
    ISO-8601 strings, tuples as lists, bytes as UTF-8 text, NaN/infinity and other objects as their string."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def payload_id(cfg: PipelineConfig) -> str:
    """Hash of what decides a point's payload beyond its chunk: ``source.metadata_fields`` and the
    ``payload`` section. In neither half (no vector or text depends on it) and not in the pipeline id
    (the collection stays): a change of it alone is a payload-only change, applied in place."""
    data = {"metadata_fields": list(cfg.source.metadata_fields), "payload": cfg.payload.model_dump(mode="json")}
    return _h(PAYLOAD_ID_VERSION.encode(), canonical_json(data).encode())


def payload_id_of_record(config: dict) -> str:
    """:func:`payload_id` of a population's recorded config (JSON); :data:`LEGACY_PAYLOAD_ID` for a
    population written before the payload contract (its record has no ``payload`` section)."""
    if "payload" not in config:
        return LEGACY_PAYLOAD_ID
    return payload_id(config_from_dict(config, "population record", recorded=True))


# --------------------------------------------------------------------------------------------
# Resolving 'auto' revisions: the ids must change when model or tokenizer files change.
# --------------------------------------------------------------------------------------------

_BUILTIN_TOKENIZERS = {"whitespace", "char"}


def resolve_config(cfg: PipelineConfig, model_files: Callable[[VectorHalf], Path] | None = None) -> PipelineConfig:
    """Replace ``auto`` revisions with content digests of the model and tokenizer files, and an external
    splitter's ``auto`` version with the version of the library that provides it. ``model_files`` gives the
    files a local model's revision digests (its folder by default); a ``vector.backend: onnx`` half needs it
    (the export is made by the embedders: see :func:`reindex.adapters.embedders.model_files`)."""
    text, vector = cfg.text, cfg.vector
    chunker = text.chunker
    if chunker.kind in ("langchain", "callable") and chunker.version == "auto":
        path = chunker.splitter if chunker.kind == "langchain" else chunker.callable
        text = text.model_copy(update={"chunker": chunker.model_copy(update={"version": splitter_version(path)})})
    if text.tokenizer_revision == "auto":
        rev = "builtin-v1" if text.tokenizer in _BUILTIN_TOKENIZERS else digest_path(
            find_tokenizer_file(resolve_model_path(text.tokenizer))
        )
        text = text.model_copy(update={"tokenizer_revision": rev})
    if vector.revision == "auto":
        if vector.provider == "hash":
            vector = vector.model_copy(update={"revision": "hash-v1"})
            return cfg.model_copy(update={"text": text, "vector": vector})
        if vector.provider in ("langchain", "llamaindex"):
            vector = vector.model_copy(update={"revision": splitter_version(vector.model, field="vector.model")})
            return cfg.model_copy(update={"text": text, "vector": vector})
        if vector.provider == "openai":
            raise ConfigError(
                "vector.revision: an API model has no local files to digest; set vector.revision to the provider's model version"
            )
        if model_files is None and vector.backend == "onnx":
            raise ConfigError("vector.backend: onnx: the revision is the digest of the ONNX export; resolve this config "
                              "with reindex.load_resolved, which makes the export")
        if model_files is None and vector.provider == "model2vec" and not is_static_folder(resolve_model_path(vector.model)):
            raise ConfigError("vector.provider: model2vec: the revision is the digest of the distilled static model; "
                              "resolve this config with reindex.load_resolved, which makes it")
        files = model_files(vector) if model_files is not None else resolve_model_path(vector.model)
        vector = vector.model_copy(update={"revision": digest_path(files)})
    return cfg.model_copy(update={"text": text, "vector": vector})


def splitter_version(path: str, field: str = "text.chunker") -> str:
    """The version of the code behind an external splitter (``package.module.Class`` or
    ``module:function``), without importing it: ``<distribution>==<version>`` of the installed
    distribution that provides the top-level package, else ``sha256:`` of the module's source file (a
    module of your own, outside any distribution). An upgrade (or an edit) changes the text id."""
    module = path.partition(":")[0] if ":" in path else path.rpartition(".")[0]
    if not module:
        raise ConfigError(f"{field}: {path!r} is not an import path (package.module.Class or module:function)")
    top = module.split(".")[0]
    dists = _named_distribution(top) or sorted(set(_packages_distributions().get(top, ())))
    if dists:
        return ",".join(f"{d}=={metadata.version(d)}" for d in dists)
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise ConfigError(f"{field}: module {module!r} of {path!r} cannot be found; is it installed or on PYTHONPATH?")
    return "sha256:" + hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()[:32]


def _named_distribution(top: str) -> list[str]:
    """The distribution named like the top-level package (``langchain_text_splitters`` →
    ``langchain-text-splitters``) if its files hold that package: the common case, without the full scan."""
    try:
        dist = metadata.distribution(top)
    except metadata.PackageNotFoundError:
        return []
    files = dist.files or []
    if any(f.parts and (f.parts[0] == top or f.parts[0] == f"{top}.py") for f in files):
        return [dist.metadata["Name"]]
    return []


@functools.lru_cache(maxsize=1)
def _packages_distributions() -> dict[str, list[str]]:
    # Reads every installed distribution's metadata (~0.1 s in a large venv): once per process.
    return metadata.packages_distributions()


@dataclass(frozen=True, slots=True)
class Identity:
    """The ids of one (resolved) pipeline config."""

    text_id: str
    vector_id: str
    pipeline_id: str
    collection: str
    index: str

    def as_dict(self) -> dict[str, str]:
        return {
            "index": self.index,
            "text_id": self.text_id,
            "vector_id": self.vector_id,
            "pipeline_id": self.pipeline_id,
            "collection": self.collection,
        }


def identity_of(cfg: PipelineConfig) -> Identity:
    """Ids of a config whose revisions are already resolved (see :func:`resolve_config`)."""
    tid, vid = text_id(cfg.text), vector_id(cfg.vector)
    pid = pipeline_id(cfg.text, cfg.vector)
    return Identity(tid, vid, pid, collection_name(cfg.index, pid), cfg.index)


class CorpusDigest:
    """The digest of a corpus as planning and the drift check see it: document ids and content hashes
    in scan order. The one home of this formula: a plan's corpus digest and apply's drift check must agree."""

    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=16)

    def add(self, doc_id: str, content_hash: str) -> None:
        self._h.update(f"{doc_id}\0{content_hash}\n".encode())

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def corpus_digest(documents: Iterable[tuple[str, str]]) -> str:
    """:class:`CorpusDigest` of ``(doc id, content hash)`` pairs."""
    d = CorpusDigest()
    for doc_id, content_hash in documents:
        d.add(doc_id, content_hash)
    return d.hexdigest()


#: What a document the plan changes is, in :func:`touched_digest`, when it is not a document read with a content
#: hash: removed from the source, unreadable there now, or not moved past the cursor the plan read from.
TOUCHED_REMOVED, TOUCHED_UNREADABLE, TOUCHED_UNMOVED = "-removed", "-unreadable", "-unmoved"
TOUCHED_VERSION = "reindex/touched/v1"


def touched_digest(states: Mapping[str, str]) -> str:
    """The digest of the documents a plan changes, each as it found it (doc id → its content hash, or
    :data:`TOUCHED_REMOVED`): the scope of an in-place plan's drift check. The one home of this formula: the
    planner records it and apply's drift check recomputes it over the same ids (docs/design-notes.md, "What a
    plan's corpus digest means")."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{TOUCHED_VERSION}\n".encode())
    for doc_id in sorted(states):
        h.update(f"{doc_id}\0{states[doc_id]}\n".encode())
    return h.hexdigest()


def digest_json(value: Any) -> str:
    """A short digest of a JSON-able value in canonical form."""
    return hashlib.blake2b(canonical_json(value).encode(), digest_size=16).hexdigest()


# Config sections that only say how a run goes (prices, approval policy, parallelism, batch sizes, API
# access, the cutover gate): a plan stays valid when they change (DESIGN invariant 10).
RUN_ONLY_SECTIONS = ("cost", "approval", "apply", "embed", "cutover", "sync", "serving", "plans")


# Where things live (the planner calls a change of these operational): a plan made before a workspace was
# moved is still the same plan. What lives there is checked by apply's other drift checks: the corpus by its
# digest, the live population by its state record and manifest digest.
LOCATION_FIELDS = (("source", "uri"), ("source", "endpoint_url"), ("state", "uri"), ("state", "endpoint_url"),
                   ("store", "path"))


def config_digest(cfg: PipelineConfig) -> str:
    """What a plan records of its config and apply compares: everything but :data:`RUN_ONLY_SECTIONS` and
    :data:`LOCATION_FIELDS`."""
    data = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in RUN_ONLY_SECTIONS}
    for section, name in LOCATION_FIELDS:
        data[section] = {k: v for k, v in data[section].items() if k != name}
    for part in (data["vector"], data["text"]["chunker"]):
        if "params" in part:
            part["params"] = without_env_names(part["params"])
    return digest_json(_without_default_follow(data))


# Source fields that came after plans existed, left out at their defaults so that earlier plans' digests still
# match (follow_symlinks; the cursor fields of issue 34). password_env is always left out: it names where a
# secret is read from (operational, like every <name>_env).
_LATER_SOURCE_DEFAULTS = {"follow_symlinks": False, "kind": "auto", "cursor": None, "deleted_field": None,
                          "table": None}


def _without_default_follow(data: dict) -> dict:
    data["source"] = {k: v for k, v in data["source"].items() if k != "password_env"
                      and not (k in _LATER_SOURCE_DEFAULTS and v == _LATER_SOURCE_DEFAULTS[k])}
    # Fields of other sections added since (store.hnsw of issue 35, store.options of issue 40, …) likewise: left out
    # at their defaults, in the digest when set (the plan prices the build with the graph, so a plan does not apply
    # once the graph it priced was changed).
    for section, defaults in LATER_DEFAULTS.items():
        if section in data and isinstance(data[section], dict):
            data[section] = {k: v for k, v in data[section].items() if not (k in defaults and v == defaults[k])}
    return data


_DEFAULT_HNSW = dict(HNSW_DEFAULTS)
#: Config fields added after plans existed, per section, with the default at which they are left out of the config
#: digest (a plan made before a field existed still applies; one made with it set does not once it changes).
LATER_DEFAULTS: dict[str, dict] = {"store": {"hnsw": _DEFAULT_HNSW, "options": {}},
                                   "vector": {"compose": "none", "compose_unit": "sentence:min=8"}}


def legacy_config_digest(cfg: PipelineConfig) -> str:
    """:func:`config_digest` as plans made before issue 22 recorded it (absolute locations included), so that
    a plan made before an upgrade still applies where it was made."""
    data = cfg.model_dump(mode="json")
    return digest_json(_without_default_follow({k: v for k, v in data.items() if k not in RUN_ONLY_SECTIONS}))
