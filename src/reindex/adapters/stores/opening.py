"""Which vector store a config opens, and what it can do — the one place that maps a config to its backend.

Each backend is one entry of :data:`REGISTRY`: its :class:`Capabilities` (declared here, so that planning and
the use cases can ask them without importing the backend's library) and the functions that open it for writing
and for reading, which import the backend module only when called: ``reindex.adapters.stores.qdrant`` (qdrant-client,
~1.4 CPU-s to import) for a server URL or local mode, ``reindex.adapters.stores.edge`` (qdrant-edge, ~0.02 CPU-s) for the
embedded default. A command on the default store therefore never loads qdrant-client.

Callers ask the backend (:func:`backend_for`), never the config: ``backend.capabilities.writers`` says whether
shard workers in other processes may write (a server) or stage their writes for the one writer (embedded
stores), ``.readers_beside_writer`` whether ``reindex query`` works while an apply runs, ``.footprint`` which
cost model prices it, ``.local_disk`` whether its folder's free disk is checked before writing. A new backend is
its module plus one entry here (docs/design-notes.md, "Store capabilities").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.adapters.stores.vectors import VectorStore, VectorStoreError

__all__ = ["BACKENDS", "QUANTIZATIONS", "REGISTRY", "Capabilities", "StoreBackend", "backend_for",
           "open_vector_reader", "open_vector_store", "store_folder_problem"]

QUANTIZATIONS = ("none", "int8")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a vector-store backend can do (dlt's destination capabilities): asked, never inferred."""

    #: ``many``: any process writes (shard workers write their own points); ``one``: one writer process per
    #: store (workers in other processes stage their writes; the coordinator is the only writer).
    writers: Literal["many", "one"]
    #: Other processes can read (search, count) while a writer runs: ``reindex query`` during an apply.
    readers_beside_writer: bool
    #: The cost model that prices its footprint (``reindex.cost``): ``server``, ``edge`` or ``local``.
    footprint: Literal["server", "edge", "local"]
    #: The store lives in a local folder: writing commands check that folder's free disk first.
    local_disk: bool
    #: Moves an alias in one atomic call (cutover and rollback need it).
    aliases: bool = True
    #: Where a population's HNSW index is built: ``apply`` (in the writer's process, in ``finish_bulk``: apply
    #: times it and records the rate), ``server`` (by the server, after ``finish_bulk`` returns) or ``none``
    #: (brute-force search, nothing to build). The plan prices the build from it.
    index_build: Literal["apply", "server", "none"] = "apply"


Opener = Callable[[Any, "str | None"], VectorStore]


@dataclass(frozen=True, slots=True)
class StoreBackend:
    """One backend as a config resolves it: its name, capabilities and local folder (None: a server)."""

    name: str
    capabilities: Capabilities
    folder: str | None
    store: Any  # the config's StoreConfig

    def open(self) -> VectorStore:
        """The store, for the one writer (and for readers where the backend has no reader of its own)."""
        return REGISTRY[self.name].open_writer(self.store, self.folder)

    def open_reader(self) -> VectorStore:
        """A store for a process that only reads while another process may write."""
        entry = REGISTRY[self.name]
        if entry.open_reader is None:
            raise VectorStoreError(entry.no_reader.format(folder=self.folder))
        return entry.open_reader(self.store, self.folder)


@dataclass(frozen=True, slots=True)
class _Entry:
    capabilities: Capabilities
    open_writer: Opener
    open_reader: Opener | None
    no_reader: str = ""


def _server(store: Any, folder: str | None) -> VectorStore:
    from reindex.adapters.stores.qdrant import server_store

    return server_store(store.url, store.api_key_env, quantization=store.quantization, oversampling=store.oversampling,
                        hnsw=_hnsw(store))


def _edge(store: Any, folder: str | None) -> VectorStore:
    from reindex.adapters.stores.edge import open_edge_store

    return open_edge_store(Path(_folder(folder)), quantization=store.quantization, oversampling=store.oversampling,
                           hnsw=_hnsw(store))


def _hnsw(store: Any) -> dict[str, int | None] | None:
    """``store.hnsw`` as the backends take it: ``{m, ef_construct, ef}`` (a config's section or a plain mapping), or
    None (reindex's defaults)."""
    hnsw = getattr(store, "hnsw", None)
    if hnsw is None or isinstance(hnsw, dict):
        return hnsw
    return {"m": hnsw.m, "ef_construct": hnsw.ef_construct, "ef": hnsw.ef}


def _edge_reader(store: Any, folder: str | None) -> VectorStore:
    from reindex.adapters.stores.edge import open_reader

    return open_reader(_folder(folder), oversampling=store.oversampling,  # type: ignore[return-value]
                       ef=(_hnsw(store) or {}).get("ef", HNSW_DEFAULTS["ef"]))


def _local(store: Any, folder: str | None) -> VectorStore:
    from reindex.adapters.stores.edge import is_edge_folder
    from reindex.adapters.stores.qdrant import local_mode_store

    path = Path(_folder(folder))
    if is_edge_folder(path):
        raise VectorStoreError(
            f"`{path}` holds an embedded store of backend `edge`, but store.backend is `local`; "
            "remove store.backend (edge is the default) to open it."
        )
    return local_mode_store(path)


def store_folder_problem(path: str | None) -> str | None:
    """Why the embedded store's folder ``path`` cannot be one (it exists and is a file, or another non-folder),
    or None. Checked before any backend opens it: a file there made every population look deleted."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"store.path `{path}` is a file, not a folder: point store.path at a folder (it is created if missing)"
    return None


def _folder(folder: str | None) -> str:
    if not folder:
        raise VectorStoreError("No vector store configured: set store.url (a Qdrant server) or store.path (a folder).")
    problem = store_folder_problem(folder)
    if problem is not None:
        raise VectorStoreError(problem)
    return folder


#: Every backend: name → capabilities and openers. ``server`` is chosen by ``store.url``; the others by
#: ``store.backend`` (``edge`` by default).
REGISTRY: dict[str, _Entry] = {
    "server": _Entry(Capabilities(writers="many", readers_beside_writer=True, footprint="server", local_disk=False,
                                  index_build="server"),
                     _server, _server),
    "edge": _Entry(Capabilities(writers="one", readers_beside_writer=True, footprint="edge", local_disk=True),
                   _edge, _edge_reader),
    "local": _Entry(Capabilities(writers="one", readers_beside_writer=False, footprint="local", local_disk=True,
                                 index_build="none"),
                    _local, None,
                    "store.backend `local` (qdrant-client local mode) admits one process per folder, so `{folder}` "
                    "cannot be read while reindex writes it. Convert it: "
                    "`python -m reindex.adapters.stores.migrate {folder} {folder}.edge`."),
}
#: The embedded backends a config may name in ``store.backend``.
BACKENDS = tuple(name for name in REGISTRY if name != "server")


def backend_for(store: Any, default_folder: str | None = None) -> StoreBackend:
    """The backend a config's ``store`` section names: a server when ``store.url`` is set, else the embedded
    ``store.backend`` in ``store.path`` (or ``default_folder``)."""
    name = "server" if store.url else store.backend
    if name not in REGISTRY:
        raise VectorStoreError(f"Unknown store.backend `{name}`; use one of {', '.join(BACKENDS)}.")
    if store.quantization not in QUANTIZATIONS:
        raise VectorStoreError(f"Unknown store.quantization `{store.quantization}`; use one of "
                               f"{', '.join(QUANTIZATIONS)}.")
    folder = None if name == "server" else (store.path or default_folder)
    return StoreBackend(name, REGISTRY[name].capabilities, folder, store)


@dataclass(frozen=True, slots=True)
class _Store:
    """A store section given as loose arguments (callers outside a config: migrations, tools)."""

    url: str | None
    path: str | None
    api_key_env: str = "QDRANT_API_KEY"
    backend: str = "edge"
    quantization: str = "none"
    oversampling: float | None = None
    hnsw: dict[str, int | None] | None = None


def open_vector_store(
    url: str | None, path: str | None, api_key_env: str = "QDRANT_API_KEY", backend: str = "edge", *,
    quantization: str = "none", oversampling: float | None = None, hnsw: dict[str, int | None] | None = None,
) -> VectorStore:
    """A store on the Qdrant server at ``url``; else embedded in the folder ``path`` (created if missing):
    ``backend="edge"`` (default, ``reindex.adapters.stores.edge``) or ``"local"`` (qdrant-client local mode). ``hnsw``:
    ``{m, ef_construct}`` of the graphs of the collections it creates and ``ef`` of its searches (None or a missing
    key: reindex's defaults, :data:`reindex.domain.kinds.HNSW_DEFAULTS`)."""
    return backend_for(_Store(url, path, api_key_env, backend, quantization, oversampling, hnsw)).open()


def open_vector_reader(
    url: str | None, path: str | None, api_key_env: str = "QDRANT_API_KEY", backend: str = "edge", *,
    oversampling: float | None = None, ef: int | None = HNSW_DEFAULTS["ef"],
) -> VectorStore:
    """A store for a process that only reads (search by alias) while another process may write; refused for a
    backend without readers beside a writer (local mode), saying what to do instead."""
    return backend_for(_Store(url, path, api_key_env, backend, "none", oversampling, {"ef": ef})).open_reader()
