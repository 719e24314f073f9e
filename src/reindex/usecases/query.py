"""Query the live alias (or a named population) the way a reader would: resolve the alias to the population
it serves, embed the text with *that population's* vector half (query prefix included), search it through a
read-only store that follows alias swaps, and return chunks with their scores.

Invariant 14 (DESIGN.md): a reader never embeds with the config file's vector half. The config file tells a
reader *where* the index is (its name, the state store, the vector store) and how to run the model here
(``embed``: device, threads); the population record tells it *what* the index holds (model, dimension, query
prefix, payload layout, metadata fields). So a config edit changes nothing a reader sees until a cutover moves
the alias, and a cutover or a rollback is followed without a restart. Every reader path — ``reindex query``,
``api.query``, :class:`Querier`, both retrievers and ``ReindexVectorStore`` — goes through :class:`_ReadSide`,
which asks the context for the population's side (:meth:`~reindex.context.Context.side`: invariant 18).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reindex.errors import ConfigError, ReindexError, StateError, TransientError, VectorStoreError
from reindex.adapters.stores.payload import filter_key, payload_metadata, payload_text
from reindex.context.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved
from reindex.context import Context, Side

__all__ = ["Querier", "QueryResult", "parse_filters", "query"]

FILTERABLE = ("doc_id",)  # always; plus the served population's source.metadata_fields
# With a remote state store (S3), a population record is read again at most this often while the alias stays
# on it (a payload-layout update in place); a move of the alias is always followed at once.
REMOTE_RECORD_REFRESH_S = 1.0
_log = logging.getLogger("reindex")


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The top-k chunks for one query text, and what answered it: the population (collection) the alias
    served, its vector id and model, the serving mode, and ``note`` when the config file's vector half
    differs from the one that answered (a change planned or being built: readers keep the served model)."""

    index: str
    target: str  # the alias or collection asked
    results: tuple[dict, ...]
    population: str | None = None  # the collection that answered
    vector_id: str | None = None
    model: dict[str, Any] = field(default_factory=dict)
    mode: str = "old"
    note: str | None = None
    # bridge / cascade: the model the query was embedded with, the bridge's id, the cascade's cost (candidates,
    # read from the shadow, embedded on the fly, milliseconds). Empty when served natively.
    serving: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"index": self.index, "target": self.target, "population": self.population,
                "vector_id": self.vector_id, "model": dict(self.model), "mode": self.mode, "note": self.note,
                "serving": dict(self.serving), "results": list(self.results)}


def parse_filters(items: tuple[str, ...] | list[str], metadata_fields: Sequence[str] | None = None) -> dict[str, str]:
    """``key=value`` options → a dict. ``doc_id`` and the configured metadata fields (``metadata_fields``;
    None: keys are checked later, by :func:`query` against the served population) can be filtered on."""
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


def _check_args(text: str, k: int, filters: dict[str, str] | None) -> None:
    if not text.strip():
        raise ConfigError("the query text is empty")
    if k < 1:
        raise ConfigError(f"--k {k}: must be at least 1")


@dataclass(frozen=True, slots=True)
class _Served:
    """What answers a query now: the collection and its side (recorded config, vector half, query embedder)."""

    collection: str
    side: Side
    note: str | None

    @property
    def cfg(self) -> Any:
        return self.side.config


@dataclass(frozen=True, slots=True)
class _Mode:
    """A serving mode other than ``old`` that readers of the alias follow now (``reindex.usecases.serve``)."""

    kind: str  # bridge | cascade
    shadow: Any  # the shadow's Population: its model embeds the queries
    bridge: Any  # reindex.decisions.serving.Bridge (bridge mode)
    candidates: int


_SHADOWS = ("building", "ready")  # reindex.usecases.serve.SHADOW_STATES (not imported: it loads the serving engine)


class _ReadSide:
    """The one read path: alias → population record → that population's side (its query embedder) → search.

    The context (``ctx``) makes and keeps one embedder per vector half; this keeps one parsed population per
    record bytes; neither is keyed on the config file. Thread-safe."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._lock = threading.RLock()
        self._records: dict[str, tuple[bytes, float, Any]] = {}  # collection → (record bytes, read at, Population)
        self._noted: set[Any] = set()  # what was logged once: (collection, note), damaged optional files
        self._serving: tuple[bytes, float, dict | None] | None = None  # serving.json (bytes, read at, parsed)
        self._bridges: dict[str, Any] = {}  # bridge id → Bridge

    def close(self) -> None:
        self.ctx.close()

    def _population(self, state, index: str, collection: str, *, fresh: bool):
        """The population record of ``collection`` (None when it has none), parsed once per record bytes."""
        from reindex.books.manifests import Population

        with self._lock:
            cached = self._records.get(collection)
            if cached is not None and not fresh and getattr(state, "remote", False) \
                    and time.monotonic() - cached[1] < REMOTE_RECORD_REFRESH_S:
                return cached[2]
        key = self.ctx.books.population_key(collection)
        data = state.get(key)
        if data is None:
            return None
        with self._lock:
            cached = self._records.get(collection)
            if cached is not None and cached[0] == data:
                self._records[collection] = (data, time.monotonic(), cached[2])
                return cached[2]
        try:
            d = json.loads(data)
        except ValueError as err:
            raise StateError(f"{state.describe()}/{key}: not valid JSON ({err}); restore it or delete it") from None
        pop = Population.from_dict(d, f"{state.describe()}/{key}")
        with self._lock:
            self._records[collection] = (data, time.monotonic(), pop)
        return pop

    def served(self, store, target: str, *, fresh: bool = False) -> _Served:
        """What answers a query of ``target`` (the index's alias, or a collection) now."""
        ctx = self.ctx
        cfg = ctx.config
        collection = target if target != cfg.index else store.get_alias(cfg.index)
        if collection is None:
            _raise_if_never_built(ctx, None, None)  # said before any model is loaded
            collection = target  # no alias: the store answers (or refuses) for the name itself
        pop = self._population(ctx.state, cfg.index, collection, fresh=fresh)
        side = ctx.side(pop, collection=collection)
        note = side.note
        if pop is not None and not side.same_queries(ctx.next_side()):
            note = (f"the config's vector half ({cfg.vector.label}, vector id {ctx.next_side().vector_id[:12]}) "
                    f"differs from the one that answered ({side.label}, vector id {side.vector_id[:12]}, population "
                    f"{collection}); readers embed with the served population's until a cutover moves the alias")
        if note is not None and (collection, note) not in self._noted:
            self._noted.add((collection, note))
            _log.warning("reindex query: %s", note)
        return _Served(collection, side, note)

    def _serving_record(self, state, index: str) -> dict | None:
        """The index's serving record (parsed once per bytes; with a remote state read at most once a second)."""
        from reindex.books.manifests import serving_key

        with self._lock:
            cached = self._serving
            if cached is not None and getattr(state, "remote", False) \
                    and time.monotonic() - cached[1] < REMOTE_RECORD_REFRESH_S:
                return cached[2]
        data = state.get(serving_key(index))
        if data is None:
            rec = None
        elif cached is not None and cached[0] == data:
            rec = cached[2]
        else:
            try:
                rec = json.loads(data)
            except ValueError:
                _log.warning("reindex query: %s/%s is not valid JSON; serving the live population natively",
                             state.describe(), serving_key(index))
                rec = None
        with self._lock:
            self._serving = (data or b"", time.monotonic(), rec)
        return rec

    def _once(self, key: Any, message: str, *args: Any) -> None:
        """Log ``message`` once per ``key`` for this reader (an optional file that keeps failing logs once)."""
        with self._lock:
            if key in self._noted:
                return
            self._noted.add(key)
        _log.warning(message, *args)

    def mode(self, served: _Served) -> _Mode | None:
        """The serving mode readers of the alias follow now, for the population ``served``: the record's mode while
        the alias still serves the population it was evaluated for and its shadow is still a shadow, the bridge
        joining exactly these two vector ids; None (native serving) otherwise — also when one of those optional
        files cannot be read (a damaged shadow record or bridge: logged once, never the query's failure)."""
        cfg, state = self.ctx.config, self.ctx.state
        rec = self._serving_record(state, cfg.index)
        if rec is not None and not isinstance(rec, dict):
            self._once(("serving", repr(rec)[:64]), "reindex query: the serving record of %s is not a JSON object; "
                       "serving the live population natively (`reindex doctor` says how to fix it)", cfg.index)
            return None
        if not isinstance(rec, dict) or rec.get("mode") not in ("bridge", "cascade") \
                or rec.get("live") != served.collection:
            return None
        try:
            shadow = self._population(state, cfg.index, str(rec.get("shadow")), fresh=False)
        except (ReindexError, ValueError, KeyError, TypeError) as err:
            self._once(("shadow", str(rec.get("shadow")), str(err)), "reindex query: the record of the shadow %s "
                       "cannot be read (%s); serving the live population natively (`reindex doctor` says how to fix "
                       "it)", rec.get("shadow"), err)
            return None
        if shadow is None or shadow.state not in _SHADOWS:
            return None
        bridge = None
        if rec["mode"] == "bridge":
            bid = (rec.get("bridge") or {}).get("id")
            with self._lock:
                bridge = self._bridges.get(bid)
            if bridge is None and bid:
                from reindex.decisions.serving import load_bridge

                try:
                    bridge = load_bridge(state, cfg.index, bid)
                except Exception as err:  # noqa: BLE001 - an optional file: readers serve natively, whatever broke
                    self._once(("bridge", bid), "reindex query: bridge %s cannot be loaded (%s: %s); serving the "
                               "live population natively (`reindex doctor` says how to fix it)", bid,
                               type(err).__name__, err)
                    return None
                with self._lock:
                    self._bridges[bid] = bridge
            if bridge is None or bridge.to_vector_id != served.side.vector_id or bridge.from_vector_id != shadow.vector_id:
                return None
        return _Mode(rec["mode"], shadow, bridge, int(rec.get("candidates") or 50))

    def _search_mode(self, store, served: _Served, mode: _Mode, text: str, k: int, doc_id, where):
        """One query in a serving mode, answered as the gate measured it (:func:`reindex.decisions.serving.
        answer_in_mode`): (hits, what QueryResult.serving says)."""
        from reindex.decisions.serving import ModeQuery, answer_in_mode, reader_passages

        new = self.ctx.side(mode.shadow)
        hits, cost = answer_in_mode(ModeQuery(store, served.collection, mode.kind, mode.shadow.collection, mode.bridge,
                                              served.side.embed_queries, new.embed_queries, reader_passages(new),
                                              mode.candidates, new.vector_id, served.cfg.payload, new.vector.distance),
                                    text, k, doc_id=doc_id, where=where)
        info: dict[str, Any] = {"query_model": new.model, "shadow": mode.shadow.collection}
        if mode.kind == "bridge":
            info.update(bridge=mode.bridge.id, bridge_kind=mode.bridge.kind)
        info.update({key: v for key, v in cost.items() if key != "shadow_readable"})
        return hits, info

    def search(self, store, text: str, *, k: int, filters: dict[str, str] | None,
               collection: str | None) -> QueryResult:
        """Embed ``text`` for the population ``collection`` (or the alias) serves and search that population.
        Filters on keys the served population cannot filter on are refused, never dropped silently."""
        cfg = self.ctx.config
        target = collection or cfg.index
        try:
            served = self.served(store, target)
            pcfg = served.cfg
            filters = dict(filters or {})
            if filters:
                parse_filters([f"{key}={v}" for key, v in filters.items()], pcfg.source.metadata_fields)
            where = {filter_key(pcfg.payload, key): v for key, v in filters.items() if key != "doc_id"}
            mode = self.mode(served) if target == cfg.index else None  # an explicit collection: natively
            info: dict[str, Any] = {}
            if mode is None:
                vector = served.side.embed_queries([text])[0]
                hits = store.query(served.collection, vector, limit=k, doc_id=filters.get("doc_id"), where=where or None)
            else:
                hits, info = self._search_mode(store, served, mode, text, k, filters.get("doc_id"), where or None)
        except VectorStoreError as err:
            _raise_if_never_built(self.ctx, collection, err)
            raise
        results = tuple({"doc_id": h.payload.get("doc_id"), "score": round(float(h.score), 6),
                         "page_content": payload_text(h.payload, pcfg.payload),
                         "metadata": payload_metadata(h.payload, pcfg.payload),
                         "ordinal": h.payload.get("ordinal")} for h in hits)
        return QueryResult(cfg.index, target, results, population=served.collection, vector_id=served.side.vector_id,
                           model=served.side.model, mode=mode.kind if mode is not None else "old", note=served.note,
                           serving=info)


def query(ctx: Context, text: str, *, k: int = 10, filters: dict[str, str] | None = None,
          collection: str | None = None) -> QueryResult:
    """Top ``k`` chunks for ``text`` from the live alias (or ``collection``), from any process: the embedded
    store is opened read-only, so this works while `reindex apply` or `cutover` runs. The text is embedded
    with the vector half of the population that answers, never the config file's."""
    _check_args(text, k, filters)
    try:
        store = ctx.reader()
    except VectorStoreError as err:
        _raise_if_never_built(ctx, collection, err)
        raise
    try:
        return _ReadSide(ctx).search(store, text, k=k, filters=filters, collection=collection)
    finally:
        store.close()


def _raise_if_never_built(ctx: Context, collection: str | None, err: VectorStoreError | None) -> None:
    """A search of the alias failed (or found no alias) and no population was ever made live: say how to build one
    (checked only then, so a query costs nothing more)."""
    from reindex.books.manifests import read_live

    if collection is None and read_live(ctx.state, ctx.index) is None:
        raise VectorStoreError(f"index {ctx.index!r} has nothing to search yet: build it with `reindex plan`, then "
                               "`reindex apply PLAN` and `reindex cutover PLAN`") from err


class Querier:
    """:func:`query` for a process that asks many questions (a retriever, a web handler): each model is
    loaded once and the read-only store is opened once and held, so a call costs the embedding and the
    store's search, not an open of the store.

    The held reader follows the index as it moves: every call resolves the alias to the population it
    serves and embeds with that population's recorded vector half (one embedder per vector half, kept), so a
    cutover to another model, and a rollback from it, are followed without a restart. A call that fails on the
    held reader (its generation or store gone from under it) closes it, opens a fresh one and asks again, once.

    The config file is read again when its bytes change, for *where* the index is (its name, state and vector
    store: the reader is reopened when they move) and how to run models here (``embed``); its vector half
    decides nothing a reader sees. A config that no longer loads is reported once and the last good one kept.
    Safe to call from several threads; ``close()`` (or ``with``) releases the reader and the models.
    """

    def __init__(self, config_path: str | Path = DEFAULT_CONFIG) -> None:
        self.config_path = Path(config_path)
        self._lock = threading.Lock()
        self._source = self.config_path.read_bytes() if self.config_path.is_file() else None
        self._cfg = load_resolved(self.config_path)
        self._side = _ReadSide(Context(self._cfg, config_path=str(self.config_path)))
        self._store = None
        self._store_at = None  # (store config, state uri) the held reader was opened for

    def _current(self):
        """The config file as it is now (the last good one if it no longer loads)."""
        with self._lock:
            source = self.config_path.read_bytes() if self.config_path.is_file() else None
            if source != self._source:
                try:
                    cfg = load_resolved(self.config_path)
                    old = self._side.ctx
                    same_state = (cfg.index, cfg.state) == (old.config.index, old.config.state)
                    self._side = _ReadSide(old.with_config(cfg) if same_state else
                                           Context(cfg, config_path=str(self.config_path)))
                    if not same_state:
                        old.close()
                    self._cfg = cfg
                except ConfigError as err:
                    _log.warning("%s no longer loads (%s); queries keep using the config it had", self.config_path,
                                 err)
                self._source = source
            return self._cfg

    def _reader(self, cfg):
        """The held read-only store for ``cfg``'s store, opened on first use or when the store moved."""
        with self._lock:
            at = (cfg.store, cfg.state.uri)
            if self._store is not None and self._store_at != at:
                self._drop()
            if self._store is None:
                self._store, self._store_at = self._side.ctx.reader(), at
            return self._store

    def _drop(self, store=None) -> None:
        """Close the held reader (only if it is still ``store``, when given)."""
        if self._store is not None and (store is None or self._store is store):
            held, self._store, self._store_at = self._store, None, None
            held.close()

    @property
    def index(self) -> str:
        """The alias this querier reads (the config's ``index``)."""
        return self._current().index

    @property
    def distance(self) -> str:
        """The vector distance of the population the alias serves (``cosine``, ``dot`` or ``euclid``)."""
        cfg = self._current()
        return self._side.served(self._reader(cfg), cfg.index).side.vector.distance

    def query(self, text: str, *, k: int = 10, filters: dict[str, str] | None = None,
              collection: str | None = None) -> QueryResult:
        """Top ``k`` chunks for ``text``; see :func:`query`."""
        _check_args(text, k, filters)
        cfg = self._current()
        store = self._reader(cfg)
        try:
            return self._side.search(store, text, k=k, filters=filters, collection=collection)
        except (VectorStoreError, TransientError):
            with self._lock:
                self._drop(store)
            return self._side.search(self._reader(cfg), text, k=k, filters=filters, collection=collection)

    def close(self) -> None:
        """Release the held reader and the models (a later call opens them again)."""
        with self._lock:
            self._drop()
        self._side.close()

    def __enter__(self) -> Querier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
