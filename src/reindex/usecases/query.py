"""Query the live alias (or a named population) the way a reader would: embed the text with the vector
half, search through a read-only store that follows alias swaps, return chunks with their scores."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reindex.errors import ConfigError, TransientError, VectorStoreError
from reindex.stores.payload import filter_key, payload_metadata, payload_text
from reindex.usecases import backends
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved

__all__ = ["Querier", "QueryResult", "parse_filters", "query"]

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
    _check_args(text, k, filters)
    cfg = load_resolved(config_path)
    embedder = backends.make_embedder(cfg.vector.for_queries(), options=cfg.embed)
    return _search(cfg, embedder, text, k=k, filters=filters, collection=collection)


def _check_args(text: str, k: int, filters: dict[str, str] | None) -> None:
    if not text.strip():
        raise ConfigError("the query text is empty")
    if k < 1:
        raise ConfigError(f"--k {k}: must be at least 1")


def _search(cfg, embedder, text: str, *, k: int, filters: dict[str, str] | None, collection: str | None,
            store=None) -> QueryResult:
    """Embed ``text`` with ``embedder`` and search ``store`` (None: a read-only store opened for this call
    and closed after it). Filters on keys the config cannot filter on are refused, never dropped silently."""
    filters = dict(filters or {})
    if filters:
        parse_filters([f"{key}={v}" for key, v in filters.items()], cfg.source.metadata_fields)
    where = {filter_key(cfg.payload, key): v for key, v in filters.items() if key != "doc_id"}
    vector = embedder.embed([text]).vectors[0]
    target = collection or cfg.index
    try:
        if store is not None:
            hits = store.query(target, vector, limit=k, doc_id=filters.get("doc_id"), where=where or None)
        else:
            store = backends.vector_reader_for(cfg)
            try:
                hits = store.query(target, vector, limit=k, doc_id=filters.get("doc_id"), where=where or None)
            finally:
                store.close()
    except VectorStoreError as err:
        _raise_if_never_built(cfg, collection, err)
        raise
    results = tuple({"doc_id": h.payload.get("doc_id"), "score": round(float(h.score), 6),
                     "page_content": payload_text(h.payload, cfg.payload),
                     "metadata": payload_metadata(h.payload, cfg.payload),
                     "ordinal": h.payload.get("ordinal")} for h in hits)
    return QueryResult(cfg.index, target, results)


def _raise_if_never_built(cfg, collection: str | None, err: VectorStoreError) -> None:
    """A search of the alias failed and no population was ever made live: say how to build one (checked only
    on failure, so a query costs nothing more)."""
    from reindex.manifests import read_live

    if collection is None and read_live(backends.state_store(cfg), cfg.index) is None:
        raise VectorStoreError(f"index {cfg.index!r} has nothing to search yet: build it with `reindex plan`, then "
                               "`reindex apply PLAN` and `reindex cutover PLAN`") from err


class Querier:
    """:func:`query` for a process that asks many questions (a retriever, a web handler): the embedding model
    is loaded once and the read-only store is opened once and held, so a call costs the embedding and the
    store's search, not an open of the store.

    The held reader follows the index as it moves: every call re-reads the alias and the published generation
    (two small files) and opens new data only when they moved (a cutover, a rollback, an in-place sync
    published by another process). A call that fails on the held reader (its generation or store gone from
    under it) closes it, opens a fresh one and asks again, once.

    Each call also checks the config file: if its bytes changed, it is loaded again, the embedder is rebuilt
    when the vector half differs (a cutover to a new model must not be queried with the old one) and the
    reader reopened when the store's location differs. Results are exactly those of :func:`query` with the
    same arguments. Safe to call from several threads; ``close()`` (or ``with``) releases the reader.
    """

    def __init__(self, config_path: str | Path = DEFAULT_CONFIG) -> None:
        self.config_path = Path(config_path)
        self._lock = threading.Lock()
        self._source = self.config_path.read_bytes() if self.config_path.is_file() else None
        self._cfg = load_resolved(self.config_path)
        self._embedder = backends.make_embedder(self._cfg.vector.for_queries(), options=self._cfg.embed)
        self._store = None
        self._store_at = None  # (store config, state uri) the held reader was opened for

    def _current(self):
        """(config, embedder) for the config file as it is now."""
        with self._lock:
            source = self.config_path.read_bytes() if self.config_path.is_file() else None
            if source != self._source:
                cfg = load_resolved(self.config_path)
                if cfg.vector != self._cfg.vector or cfg.embed != self._cfg.embed:
                    self._embedder = backends.make_embedder(cfg.vector.for_queries(), options=cfg.embed)
                self._cfg, self._source = cfg, source
            return self._cfg, self._embedder

    def _reader(self, cfg):
        """The held read-only store for ``cfg``'s store, opened on first use or when the store moved."""
        with self._lock:
            at = (cfg.store, cfg.state.uri)
            if self._store is not None and self._store_at != at:
                self._drop()
            if self._store is None:
                self._store, self._store_at = backends.vector_reader_for(cfg), at
            return self._store

    def _drop(self, store=None) -> None:
        """Close the held reader (only if it is still ``store``, when given)."""
        if self._store is not None and (store is None or self._store is store):
            held, self._store, self._store_at = self._store, None, None
            held.close()

    @property
    def index(self) -> str:
        """The alias this querier reads (the config's ``index``)."""
        return self._current()[0].index

    @property
    def distance(self) -> str:
        """The vector distance of the index's vector half (``cosine``, ``dot`` or ``euclid``)."""
        return self._current()[0].vector.distance

    def query(self, text: str, *, k: int = 10, filters: dict[str, str] | None = None,
              collection: str | None = None) -> QueryResult:
        """Top ``k`` chunks for ``text``; see :func:`query`."""
        _check_args(text, k, filters)
        cfg, embedder = self._current()
        store = self._reader(cfg)
        try:
            return _search(cfg, embedder, text, k=k, filters=filters, collection=collection, store=store)
        except (VectorStoreError, TransientError):
            with self._lock:
                self._drop(store)
            return _search(cfg, embedder, text, k=k, filters=filters, collection=collection, store=self._reader(cfg))

    def close(self) -> None:
        """Release the held reader (a later call opens a new one)."""
        with self._lock:
            self._drop()

    def __enter__(self) -> Querier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
