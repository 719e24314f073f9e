"""The one seam between the use cases and the outside world: what opens the state store, the vector store, the
embedder and the shard runner of a config. A :class:`~reindex.context.Context` calls these for what its
caller did not give it; tests that need another world patch them here (one seam), or give the handle their own
objects (``Index.open(…, store=…, embedder=…)``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from reindex.domain.config import PipelineConfig
from reindex.foundation import settings
from reindex.errors import ConfigError
from reindex.adapters.stores.objects import open_object_store

__all__ = ["DEFAULT_CONFIG", "Borrowed", "free_disk_bytes", "make_embedder", "model_files", "resolve_device",
           "shard_runner", "state_store", "store_backend", "vector_reader_for", "vector_store_for"]

DEFAULT_CONFIG = "reindex.yaml"


class Borrowed:
    """A vector store the caller owns, lent to a use case: every call goes to the store, ``close`` is the owner's
    business."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def close(self) -> None:
        pass


def state_store(cfg: PipelineConfig):
    """The object store holding plans' state, manifests, locks and calibration."""
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
    """The vector store of a config (see :func:`store_backend`), for its one writer."""
    return store_backend(cfg).open()


def vector_reader_for(cfg: PipelineConfig):
    """A read-only store for a process that queries while another one may write (refused, saying what to do,
    by a backend without readers beside a writer)."""
    return store_backend(cfg).open_reader()


def make_embedder(vector, **kwargs):
    """The embedder of a vector half (see :func:`reindex.adapters.embedders.make_embedder`)."""
    from reindex.adapters.embedders import make_embedder as _make

    return _make(vector, **kwargs)


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
