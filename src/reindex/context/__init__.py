"""The handle's inside: one index's config, books, backends and clock, given to every use case explicitly.

An :class:`~reindex.usecases.index.Index` handle holds one :class:`Context`; each use case takes it as its first
argument (``make_plan(ctx, …)``, ``cutover(ctx, plan)``) and asks it for what it needs — the state
(:attr:`Context.books`), the vector store (:meth:`Context.store`, :meth:`Context.reader`), an embedder
(:meth:`Context.embedder`), the shard runner (:meth:`Context.runner`), the time (:attr:`Context.clock`) — instead
of opening its own from a config path. What a caller gave the handle (a service's clients, a test's fakes, a
worker's cached model) is used and never closed; what the context opens through :mod:`reindex.context.backends`
(the one seam to the outside world) it keeps until :meth:`Context.close` (the state, embedders), or hands to the
caller to close (a vector store: the embedded store allows one writer per folder, so it is opened per use case).

**One side, one rule** (DESIGN.md invariant 18): :meth:`Context.side` is the only way to get what embeds a
population's queries — its recorded vector half, query prefix, backend and precision, as a :class:`Side`. Readers,
the cutover (each side its own), serving modes, the forecast and doctor ask it. The config file's vector half
describes only the *next* population (:meth:`Context.next_side`).

The package holds what the context gives use cases, below them: :mod:`~reindex.context.backends` (what opens the
state store, vector stores, embedders and runners: the one seam tests patch), :mod:`~reindex.context.locking` (the
index lock as a use case holds it), :mod:`~reindex.context.disk` (free-space guards), :mod:`~reindex.context.progress`
(a running apply's progress, counted once and recorded), :mod:`~reindex.context.rates` (the rates an apply measured),
:mod:`~reindex.context.queries` (the queries a comparison runs)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Protocol

from reindex.books.layout import Books
from reindex.domain.config import PipelineConfig, VectorHalf
from reindex.domain.identity import identity_of
from reindex.context import backends

if TYPE_CHECKING:
    from reindex.books.manifests import Population

__all__ = ["Clock", "Context", "Side", "SystemClock", "model_of"]


class Clock(Protocol):
    """The time a use case reads (wall seconds for records, monotonic seconds for waits)."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The machine's clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def model_of(vector: VectorHalf) -> dict[str, Any]:
    """What answers a population's queries, for reports and readers: provider, model, backend, precision,
    dimension, and ``label``, the words users read (``model2vec (static, distilled from all-MiniLM-L6-v2) 256d``)."""
    return {"provider": vector.provider, "model": vector.model, "backend": vector.backend,
            "precision": vector.precision, "dimension": vector.dimension, "label": vector.label}


@dataclass(frozen=True, eq=False)
class Side:
    """What serves one population's queries (DESIGN.md: side): its recorded config and vector half, the query
    embedder made from them, and how it is labelled. Get one from :meth:`Context.side`; never build one from
    the config file for a population that exists."""

    collection: str | None  #: the population (None: the next population, not built yet)
    config: PipelineConfig  #: the population's recorded config (payload layout, text half, metadata fields)
    vector: VectorHalf  #: the vector half its passages were embedded with (``vector.for_queries()`` embeds queries)
    vector_id: str
    note: str | None  #: why the side is not the population's own record (None when it is)
    _ctx: "Context" = field(repr=False)

    @property
    def model(self) -> dict[str, Any]:
        return model_of(self.vector)

    @property
    def label(self) -> str:
        return self.vector.label

    @property
    def payload(self) -> Any:
        return self.config.payload

    def query_embedder(self) -> Any:
        """The embedder of this side's queries (``query_prefix`` applied), made once per context."""
        return self._ctx.embedder(self.vector.for_queries(), options=self._ctx.config.embed, queries=True)

    def passage_embedder(self, **kwargs: Any) -> Any:
        """The embedder of this side's passages (what its stored vectors were made with)."""
        return self._ctx.embedder(self.vector, options=self._ctx.config.embed, **kwargs)

    def embed_queries(self, texts: list[str]) -> Any:
        return self.query_embedder().embed(texts).vectors

    def embed_passages(self, texts: list[str]) -> Any:
        return self.passage_embedder().embed(texts).vectors

    def same_queries(self, other: "Side") -> bool:
        """Whether the two sides embed a query into the same vector (same vector id and query prefix)."""
        return self.vector_id == other.vector_id and \
            self.vector.for_queries().prefix == other.vector.for_queries().prefix


class Context:
    """One index's config, books, backends and clock (see the module docstring).

    ``config``: the resolved config (it describes the next population; a population that exists is described by
    its own record). ``config_path``: the file it came from, recorded in plans (``<config object>`` for an
    object). ``state``/``store``/``reader``/``embedder``/``runner``: what the caller has (None: opened through
    :mod:`reindex.context.backends` on demand); ``clock``: the time (default: the machine's)."""

    CONFIG_OBJECT = "<config object>"

    def __init__(self, config: PipelineConfig, *, config_path: str = CONFIG_OBJECT, state: Any = None,
                 store: Any = None, reader: Any = None, embedder: Any = None, runner: Any = None,
                 clock: Clock | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.state = state if state is not None else backends.state_store(config)
        self.books = Books(self.state, config.index)
        self.clock: Clock = clock or SystemClock()
        self._store, self._reader, self._embedder, self._runner = store, reader, embedder, runner
        self._embedder_vector = config.vector  # what the given embedder embeds (the handle's config's model)
        self._embedders: dict[str, Any] = {}
        self._lock = threading.RLock()
        #: Index locks this context holds (reindex.context.locking): a writer called inside a block that holds
        #: the index (a cycle's apply and cutover) works under that lease instead of taking it again.
        self.held_locks: dict[tuple[str, str], Any] = {}

    def __repr__(self) -> str:
        return f"Context({self.config.index!r}, config={self.config_path!r})"

    @property
    def index(self) -> str:
        return self.config.index

    @property
    def config_arg(self) -> str | PipelineConfig:
        """What a plan records as its config: the file, or the object itself when there is no file."""
        return self.config if self.config_path == self.CONFIG_OBJECT else self.config_path

    def with_config(self, config: PipelineConfig) -> "Context":
        """A context for another config of the same index and state (the config a plan is carried out under, a
        baseline): the same backends, books and clock, and the same held locks."""
        if config is self.config:
            return self
        other = Context.__new__(Context)
        other.__dict__.update(self.__dict__)
        other.config = config
        return other

    def with_store(self, store: Any) -> "Context":
        """The same context lending ``store`` (a writer held across calls: the live mode's), never closed by it."""
        other = self.with_config(self.config)
        if other is self:
            other = Context.__new__(Context)
            other.__dict__.update(self.__dict__)
        other._store = store
        return other

    # -- the backends ---------------------------------------------------------------------------------

    def backend(self, config: PipelineConfig | None = None) -> Any:
        """The vector-store backend the config names (:func:`reindex.adapters.stores.opening.backend_for`)."""
        return backends.store_backend(config or self.config)

    def store(self) -> Any:
        """The vector store for writing: the one the caller gave (its ``close`` is a no-op), else a new one the
        use case closes."""
        if self._store is not None:
            return backends.Borrowed(self._store)
        return backends.vector_store_for(self.config)

    def reader(self) -> Any:
        """A read-only store for a process that queries while another may write (refused, saying what to do, by
        a backend without readers beside a writer)."""
        if self._reader is not None or self._store is not None:
            return backends.Borrowed(self._reader if self._reader is not None else self._store)
        return backends.vector_reader_for(self.config)

    @contextlib.contextmanager
    def read_only_store(self) -> Iterator[Any]:
        """The store opened for reading only, so that a command works while another process writes it; None when
        nothing has been built there yet. Local mode admits one process per folder whatever the mode, so it is
        opened as a writer."""
        from reindex.adapters.stores.vectors import NoStoreError

        if not self.backend().capabilities.readers_beside_writer:
            store = self.store()
        else:
            try:
                store = self.reader()
            except NoStoreError:
                yield None
                return
        try:
            yield store
        finally:
            store.close()

    def embedder(self, vector: VectorHalf, *, queries: bool = False, **kwargs: Any) -> Any:
        """The embedder of a vector half (``batch_size``, ``options``), made once per context. ``queries``: it
        embeds single queries (readers, evaluations), sized for that. The embedder the caller gave is used for
        its own model with its own prefix (a query side with another prefix gets its own embedder)."""
        if queries:  # the passage embedder, run one query at a time on one intra-op thread (the build's unchanged)
            return self._made(vector, True, kwargs, lambda: backends.for_queries(self.embedder(vector, **kwargs)))
        if self._embedder is not None and _same_model(vector, self._embedder_vector) \
                and vector.prefix == self._embedder_vector.prefix:  # it prefixes what it embeds with its own prefix
            return self._embedder
        return self._made(vector, False, kwargs, lambda: backends.make_embedder(vector, **kwargs))

    def _made(self, vector: VectorHalf, queries: bool, kwargs: dict, make: Any) -> Any:
        key = vector.model_dump_json() + repr(queries) + repr(sorted(
            (k, v.model_dump_json() if hasattr(v, "model_dump_json") else v) for k, v in kwargs.items()))
        with self._lock:
            emb = self._embedders.get(key)
            if emb is None:
                emb = self._embedders[key] = make()
            return emb

    def runner(self, prefect: bool | None = None, task_runner: str | None = None) -> Any:
        """The shard runner for an apply (the caller's, else :func:`reindex.context.backends.shard_runner`)."""
        if self._runner is not None:
            from reindex.runners import parse_task_runner

            parse_task_runner(task_runner)  # a bad spec still fails before any work
            return self._runner
        return backends.shard_runner(prefect, task_runner)

    # -- sides ----------------------------------------------------------------------------------------

    def side(self, population: "Population | None", *, collection: str | None = None) -> Side:
        """What embeds the queries of ``population`` (its recorded vector half and query prefix; the config's
        ``embed`` options say how to run the model here). Where the config file's vector half gives the same
        vectors and queries (same vector id and query prefix) it is used instead, as the way to reach the model now
        (the name of a key's environment variable, say). ``population`` None: a collection without a record
        (``collection``), served with the config file's half and a note saying so."""
        own = identity_of(self.config).vector_id
        if population is None:
            note = None if collection is None else (
                f"{collection} has no population record in the state store; queries are embedded with the config "
                "file's vector half")
            return Side(collection, self.config, self.config.vector, own, note, self)
        pcfg = population.config
        vector, vid = pcfg.vector, population.vector_id
        if vid == own and self.config.vector.for_queries().prefix == vector.for_queries().prefix:
            vector = self.config.vector
        return Side(population.collection, pcfg, vector, vid, None, self)

    def next_side(self) -> Side:
        """The side of the next population: the config file's vector half (a forecast's new side, calibrate)."""
        return self.side(None)

    # -- lifetime -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the embedders this context made (never what it was given)."""
        with self._lock:
            made, self._embedders = list(self._embedders.values()), {}
        for emb in made:
            close = getattr(emb, "close", None)
            if callable(close):
                close()


def _same_model(a: VectorHalf, b: VectorHalf) -> bool:
    """Two vector halves that differ at most in the text prefixed to inputs (passages vs queries)."""
    drop = {"prefix", "query_prefix"}
    return a.model_dump(exclude=drop) == b.model_dump(exclude=drop)
