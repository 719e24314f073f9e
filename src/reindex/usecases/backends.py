"""The one seam between the use cases and the outside world: the state store, the vector store, the
embedder and the shard runner of a config. Tests patch these names (and only these)."""

from __future__ import annotations

from pathlib import Path

from reindex.config import PipelineConfig
from reindex.stores.objects import open_object_store

__all__ = ["DEFAULT_CONFIG", "make_embedder", "model_files", "resolve_device", "shard_runner", "state_store", "vector_reader_for",
           "vector_store_for"]

DEFAULT_CONFIG = "reindex.yaml"


def state_store(cfg: PipelineConfig):
    """The object store holding plans' state, manifests, locks and calibration."""
    return open_object_store(cfg.state.uri, cfg.state.endpoint_url)


def _store_path(cfg: PipelineConfig) -> str | None:
    path = cfg.store.path
    if cfg.store.url is None and path is None:
        base = cfg.state.uri if "://" not in cfg.state.uri else str(Path(".reindex").resolve())
        path = str(Path(base) / "qdrant")
    return path


def vector_store_for(cfg: PipelineConfig):
    """The vector store of a config: a Qdrant server by URL, or embedded (``store.backend``: edge by default)
    in ``store.path`` or under the state folder."""
    from reindex.stores.qdrant import open_vector_store

    return open_vector_store(cfg.store.url, _store_path(cfg), cfg.store.api_key_env, cfg.store.backend)


def vector_reader_for(cfg: PipelineConfig):
    """A read-only store for a process that queries while another one may write (see stores.qdrant)."""
    from reindex.stores.qdrant import open_vector_reader

    return open_vector_reader(cfg.store.url, _store_path(cfg), cfg.store.api_key_env, cfg.store.backend)


def make_embedder(vector, **kwargs):
    """The embedder of a vector half (see :func:`reindex.embedders.make_embedder`)."""
    from reindex.embedders import make_embedder as _make

    return _make(vector, **kwargs)


def model_files(vector):
    """The files a local model's ``auto`` revision digests (see :func:`reindex.embedders.model_files`)."""
    from reindex.embedders import model_files as _files

    return _files(vector)


def resolve_device(spec: str) -> str:
    """The device ``embed.device`` names here (see :func:`reindex.embedders.resolve_device`)."""
    from reindex.embedders import resolve_device as _resolve

    return _resolve(spec)


def shard_runner(prefect: bool | None = None):
    """The shard runner for an apply: Prefect's ``reindex-apply`` flow when ``prefect`` is true, or when it
    is None and a Prefect API is configured (``PREFECT_API_URL`` or the active Prefect profile); otherwise
    the in-process thread runner. Prefect is imported only when chosen (its import alone takes seconds)."""
    from reindex import settings
    from reindex.runners import ThreadRunner

    if prefect is None:
        prefect = settings.prefect_api_url() is not None
    if not prefect:
        return ThreadRunner()
    from reindex.runners.prefect import PrefectRunner

    return PrefectRunner()
