"""The payload contract: what each point carries for readers, and how any payload is read back.

A point's payload holds reindex's own keys at the top level (``doc_id``, ``ordinal``, ``fingerprint``,
``tokens``, ``start``, ``end``, ``pipeline_id``: ``doc_id`` is what the payload index, ``count(doc_id=…)``
and catch-up use), plus, under the keys of the config's ``payload`` section:

* ``content_key`` (default ``page_content``): the chunk text;
* ``metadata_key`` (default ``metadata``): the document's configured metadata fields plus ``doc_id``.

The defaults are LangChain's ``QdrantVectorStore`` layout, so a stock reader over the alias gets the chunk
text and metadata. Populations written before this contract carry the text under ``text`` and no
metadata: the readers here fall back to that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reindex.domain.config import PayloadConfig
from reindex.domain.identity import jsonable

__all__ = ["INDEXED_FIELDS", "LEGACY_TEXT_KEY", "build_payload", "filter_key", "jsonable", "payload_metadata", "payload_text"]

# Where populations written before the payload contract keep the chunk text.
LEGACY_TEXT_KEY = "text"
# reindex's own payload keys with a keyword index in every new population: doc_id (a document's points, the
# filter of queries and counts). Not fingerprint: nothing filters on it (reuse goes by point id), and its
# index of one distinct value per point was ~40 % of loading a shard (0.16 vs 0.09 s at 100 k points) and
# held as much memory in every reader (bench/RESULTS.md). Populations built before keep theirs.
INDEXED_FIELDS = ("doc_id",)


def build_payload(cfg: PayloadConfig, own: Mapping[str, Any], text: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """One point's payload: reindex's ``own`` keys, the chunk text and the document's metadata (with
    its ``doc_id``) under the configured keys."""
    meta = {str(k): jsonable(v) for k, v in metadata.items()}
    meta["doc_id"] = own["doc_id"]
    return {**own, cfg.content_key: text, cfg.metadata_key: meta}


def payload_text(payload: Mapping[str, Any], cfg: PayloadConfig | None = None) -> str:
    """The chunk text of a stored point: under the configured key, else the default key, else the key a
    population written before the payload contract used (``text``)."""
    keys = ([cfg.content_key] if cfg is not None else []) + [PayloadConfig().content_key, LEGACY_TEXT_KEY]
    for key in keys:
        value = payload.get(key)
        if isinstance(value, str):
            return value
    return ""


def payload_metadata(payload: Mapping[str, Any], cfg: PayloadConfig | None = None) -> dict[str, Any]:
    """The document metadata of a stored point (configured key, else the default); ``{}`` for a
    population written before the payload contract."""
    keys = ([cfg.metadata_key] if cfg is not None else []) + [PayloadConfig().metadata_key]
    for key in keys:
        value = payload.get(key)
        if isinstance(value, Mapping):
            return dict(value)
    return {}


def filter_key(cfg: PayloadConfig, field: str) -> str:
    """The payload path an equality filter on ``field`` uses: ``doc_id`` at the top level, any metadata
    field under the metadata key (``metadata.<field>``)."""
    return field if field == "doc_id" else f"{cfg.metadata_key}.{field}"
