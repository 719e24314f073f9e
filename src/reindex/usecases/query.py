"""Query the live alias (or a named population) the way a reader would: embed the text with the vector
half, search through a read-only store that follows alias swaps, return chunks with their scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reindex.errors import ConfigError
from reindex.stores.payload import filter_key, payload_metadata, payload_text
from reindex.usecases import backends
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved

__all__ = ["QueryResult", "parse_filters", "query"]

FILTERABLE = ("doc_id",)  # always; plus the config's source.metadata_fields


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The top-k chunks for one query text."""

    index: str
    target: str  # the alias or collection asked
    results: tuple[dict, ...]

    def as_dict(self) -> dict:
        return {"index": self.index, "target": self.target, "results": list(self.results)}


def parse_filters(items: tuple[str, ...] | list[str], metadata_fields: Sequence[str] | None = None) -> dict[str, str]:
    """``key=value`` options → a dict. ``doc_id`` and the configured metadata fields (``metadata_fields``;
    None: keys are checked later, by :func:`query` against the config) can be filtered on."""
    allowed = (*FILTERABLE, *(f for f in metadata_fields or () if f not in FILTERABLE))
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"--filter {item!r}: expected key=value, e.g. doc_id=pep-0008.rst")
        if metadata_fields is not None and key not in allowed:
            raise ConfigError(f"--filter {key}: can filter on {', '.join(allowed)} only"
                              + ("" if metadata_fields else " (add metadata keys to source.metadata_fields)"))
        out[key] = value
    return out


def query(text: str, config_path: str | Path = DEFAULT_CONFIG, *, k: int = 10, filters: dict[str, str] | None = None,
          collection: str | None = None) -> QueryResult:
    """Top ``k`` chunks for ``text`` from the live alias (or ``collection``), from any process: the embedded
    store is opened read-only, so this works while `reindex apply` or `cutover` runs."""
    if not text.strip():
        raise ConfigError("the query text is empty")
    if k < 1:
        raise ConfigError(f"--k {k}: must be at least 1")
    cfg = load_resolved(config_path)
    filters = dict(filters or {})
    if filters:
        parse_filters([f"{k}={v}" for k, v in filters.items()], cfg.source.metadata_fields)
    where = {filter_key(cfg.payload, k): v for k, v in filters.items() if k != "doc_id"}
    embedder = backends.make_embedder(cfg.vector, options=cfg.embed)
    vector = embedder.embed([text]).vectors[0]
    target = collection or cfg.index
    store = backends.vector_reader_for(cfg)
    try:
        hits = store.query(target, vector, limit=k, doc_id=filters.get("doc_id"), where=where or None)
    finally:
        store.close()
    results = tuple({"doc_id": h.payload.get("doc_id"), "score": round(float(h.score), 6),
                     "page_content": payload_text(h.payload, cfg.payload),
                     "metadata": payload_metadata(h.payload, cfg.payload),
                     "ordinal": h.payload.get("ordinal")} for h in hits)
    return QueryResult(cfg.index, target, results)
