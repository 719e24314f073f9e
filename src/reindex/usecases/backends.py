"""The one seam between the use cases and the outside world: the state store, the vector store, the
embedder and the shard runner of a config.

An :class:`~reindex.usecases.index.Index` handle lends the use cases what it holds (:class:`Lent`, set for
the duration of one call with :func:`lending`): the resolved config, and whichever of state, store,
reader, embedder and runner it was given or has opened. Each function here returns the lent object when
there is one for the config's index, else opens its own as before. A lent vector store is handed out
behind :class:`Borrowed`, whose ``close`` does nothing: the handle closes what it owns."""

from __future__ import annotations

import contextlib
import shutil
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from reindex.domain.config import PipelineConfig
from reindex.foundation import settings
from reindex.errors import ConfigError
from reindex.adapters.stores.objects import open_object_store

__all__ = ["DEFAULT_CONFIG", "Borrowed", "Lent", "free_disk_bytes",
           "lending", "lent", "make_embedder", "make_query_embedder", "model_files", "read_only_store", "resolve_device", "shard_runner",
           "state_store", "store_backend",
           "vector_reader_for", "vector_store_for"]

DEFAULT_CONFIG = "reindex.yaml"


@dataclass
class Lent:
    """What an Index handle lends the use cases during one call (None: the use case opens its own)."""

    config_path: str
    cfg: PipelineConfig
    state: Any = None
    store: Any = None
    reader: Any = None
    embedder: Any = None  # for the index's own vector half (passages and queries)
    runner: Any = None
    embedders: dict[str, Any] = field(default_factory=dict)  # made on demand, kept for the handle's lifetime

    def owns(self, cfg: PipelineConfig) -> bool:
        return cfg.index == self.cfg.index and cfg.state.uri == self.cfg.state.uri


_LENT: ContextVar[Lent | None] = ContextVar("reindex_lent_backends", default=None)


def lent() -> Lent | None:
    """What the current Index call lends, if any."""
    return _LENT.get()


@contextlib.contextmanager
def lending(what: Lent) -> Iterator[Lent]:
    """Lend ``what`` to the use cases called inside the block (this thread and context only)."""
    token = _LENT.set(what)
    try:
        yield what
    finally:
        _LENT.reset(token)


class Borrowed:
    """A lent vector store: every call goes to the store, ``close`` is the owner's business."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        pass


def state_store(cfg: PipelineConfig):
    """The object store holding plans' state, manifests, locks and calibration."""
    o = _LENT.get()
    if o is not None and o.state is not None and o.owns(cfg):
        return o.state
    return open_object_store(cfg.state.uri, cfg.state.endpoint_url)


def store_backend(cfg: PipelineConfig):
    """The vector-store backend ``cfg`` names (:func:`reindex.adapters.stores.opening.backend_for`): its capabilities and,
    for an embedded store, its folder (``store.path``, else ``qdrant/`` under a folder state or ``.reindex/``),
    resolved as this process sees it (what a shard worker in another process is told to open)."""
    from reindex.adapters.stores.opening import backend_for

    base = cfg.state.uri if "://" not in cfg.state.uri else str(Path(".reindex").resolve())
    return backend_for(cfg.store, str(Path(base) / "qdrant"))


def free_disk_bytes(path: str) -> int:
    """Free bytes on the file system that holds ``path`` (or would: its nearest existing folder)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def vector_store_for(cfg: PipelineConfig):
    """The vector store of a config (see :func:`store_backend`), or the one the Index handle lends."""
    o = _LENT.get()
    if o is not None and o.store is not None and o.owns(cfg):
        return Borrowed(o.store)
    return store_backend(cfg).open()


def vector_reader_for(cfg: PipelineConfig):
    """A read-only store for a process that queries while another one may write (refused, saying what to do,
    by a backend without readers beside a writer)."""
    o = _LENT.get()
    if o is not None and o.owns(cfg) and (o.reader is not None or o.store is not None):
        return Borrowed(o.reader if o.reader is not None else o.store)
    return store_backend(cfg).open_reader()


@contextlib.contextmanager
def read_only_store(cfg: PipelineConfig) -> Iterator[Any]:
    """The store opened for reading only, so that a command works while another process writes it (an apply
    holding the embedded store's one writer slot); None when nothing has been built there yet. Local mode
    admits one process per folder whatever the mode, so it is opened as before."""
    from reindex.adapters.stores.vectors import NoStoreError

    if not store_backend(cfg).capabilities.readers_beside_writer:
        store = vector_store_for(cfg)
    else:
        try:
            store = vector_reader_for(cfg)
        except NoStoreError:
            yield None
            return
    try:
        yield store
    finally:
        store.close()


def make_embedder(vector, **kwargs):
    """The embedder of a vector half (see :func:`reindex.adapters.embedders.make_embedder`). Under an Index handle: the
    embedder it was given for its own model, or one made once per vector half and options and kept."""
    o = _LENT.get()
    if o is not None and o.embedder is not None and _same_model(vector, o.cfg.vector):
        return o.embedder
    from reindex.adapters.embedders import make_embedder as _make

    if o is None:
        return _make(vector, **kwargs)
    key = vector.model_dump_json() + repr(sorted(kwargs.items(), key=lambda kv: kv[0]))
    if key not in o.embedders:
        o.embedders[key] = _make(vector, **kwargs)
    return o.embedders[key]


def make_query_embedder(vector, **kwargs):
    """The embedder a reader embeds queries with: :func:`make_embedder`'s, run on one intra-op thread a query
    without touching the build's thread settings (:func:`reindex.adapters.embedders.for_queries`)."""
    from reindex.adapters.embedders import for_queries

    return for_queries(make_embedder(vector, **kwargs))


def _same_model(a: Any, b: Any) -> bool:
    """Two vector halves that differ at most in the text prefixed to inputs (passages vs queries)."""
    drop = {"prefix", "query_prefix"}
    return a.model_dump(exclude=drop) == b.model_dump(exclude=drop)


def model_files(vector):
    """The files a local model's ``auto`` revision digests (see :func:`reindex.adapters.embedders.model_files`)."""
    from reindex.adapters.embedders import model_files as _files

    return _files(vector)


def resolve_device(spec: str) -> str:
    """The device ``embed.device`` names here (see :func:`reindex.adapters.embedders.resolve_device`)."""
    from reindex.adapters.embedders import resolve_device as _resolve

    return _resolve(spec)


def shard_runner(prefect: bool | None = None, task_runner: str | None = None):
    """The shard runner for an apply: Prefect's ``reindex-apply`` flow when ``prefect`` is true, or when it
    is None and a Prefect API is configured (``PREFECT_API_URL`` or the active Prefect profile), its shards
    on the ``task_runner`` spec's task runner; otherwise the in-process thread runner, or with a dask spec
    (``dask-processes:N``, ``dask:tcp://HOST:PORT``) the Dask runner without Prefect. A ``prefect-pool:POOL``
    spec always means Prefect (flow runs on a work pool): with ``prefect`` false it is refused. Prefect and
    Dask are imported only when chosen (Prefect's import alone takes seconds)."""
    from reindex.runners import ThreadRunner, parse_task_runner

    spec = parse_task_runner(task_runner)  # a bad spec fails before any work
    o = _LENT.get()
    if o is not None and o.runner is not None:
        return o.runner
    if spec.kind == "prefect-pool":
        if prefect is False:
            raise ConfigError(f"task runner {task_runner!r} runs shards as Prefect flow runs on a work pool; it cannot "
                              "run without Prefect (drop --no-prefect, or pick threads / dask-processes:N)")
        if not settings.prefect_api_url():  # before any work: a temporary server is unreachable for the pool
            raise ConfigError(f"task runner {task_runner!r} needs a Prefect server that the pool's workers reach too: "
                              "start one (`prefect server start`) and set PREFECT_API_URL to it")
        prefect = True
    if prefect is None:
        prefect = settings.prefect_api_url() is not None
    if not prefect:
        if spec.dask:
            try:
                from reindex.runners.distributed import DaskRunner
            except ImportError:
                raise ConfigError(f"task runner {task_runner!r} needs dask.distributed: "
                                  "pip install 'vector-reindex[dask]'") from None
            return DaskRunner(spec)
        return ThreadRunner(spec.workers)
    from reindex.runners.prefect import PrefectRunner

    return PrefectRunner(task_runner)
