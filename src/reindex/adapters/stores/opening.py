"""Which vector store a config opens, and what it can do — the one place that maps a config to its backend.

A backend is **its module plus one entry here** (:class:`BackendEntry`, in :data:`REGISTRY`, or added with
:func:`register_backend`): its :class:`Capabilities` (declared, so that planning and the use cases ask them
without importing the backend's library), the functions that open it for writing and for reading (they import
the backend module only when called: ``reindex.adapters.stores.qdrant`` — qdrant-client, ~1.4 CPU-s to import —
for a server URL or local mode, ``reindex.adapters.stores.edge`` — qdrant-edge, ~0.02 CPU-s — for the embedded
default), the ``store.url`` schemes it claims, the schema of its ``store.options``, its cost model
(:mod:`reindex.adapters.stores.footprints`: what a plan prices its footprint with) and its disk guard (what its
writing commands add to its folder's file system). Nothing else in reindex names a backend: ``store.url``'s scheme
or ``store.backend`` picks the entry, and every caller asks it (docs/design-notes.md, "Store backends").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from urllib.parse import urlsplit

from reindex.domain.kinds import HNSW_DEFAULTS
from reindex.adapters.stores.footprints import EdgeFootprint, FootprintModel, LocalFootprint, ServerFootprint
from reindex.adapters.stores.vectors import VectorStore, VectorStoreError

__all__ = ["QUANTIZATIONS", "REGISTRY", "BackendEntry", "Capabilities", "DiskGuard", "StoreBackend", "backend_for",
           "embedded_backends", "footprint_model", "open_vector_reader", "open_vector_store", "register_backend",
           "store_folder_problem"]

QUANTIZATIONS = ("none", "int8")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a vector-store backend can do (dlt's destination capabilities): asked, never inferred."""

    #: ``many``: any process writes (shard workers write their own points); ``one``: one writer process per
    #: store (workers in other processes stage their writes; the coordinator is the only writer).
    writers: Literal["many", "one"]
    #: Other processes can read (search, count) while a writer runs: ``reindex query`` during an apply.
    readers_beside_writer: bool
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

    @property
    def entry(self) -> BackendEntry:
        return REGISTRY[self.name]

    @property
    def footprint(self) -> FootprintModel:
        """The cost model the plan prices this store's footprint with."""
        return self.entry.footprint

    @property
    def disk(self) -> DiskGuard | None:
        """What writing commands add to this store's folder besides the plan's footprint (None: nothing)."""
        return self.entry.disk if self.capabilities.local_disk and self.folder else None

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
class DiskGuard:
    """What a backend's writing commands add to its folder's file system besides the plan's footprint, checked
    before they start (:mod:`reindex.context.disk`): ``build_overhead(folder, in_place_collection)`` for an apply
    (files preallocated, a copy-on-write generation of the collection an in-place change writes), and
    ``first_loads(folder, collections)`` for the collections a command opens (a memory file system allocates
    their preallocated files when they are mapped; 0 elsewhere), and ``new_population_load(folder)``, the same for a
    population not built yet (the cutover's first load of the shadow an apply builds)."""

    build_overhead: Callable[[str, "str | None"], int]
    first_loads: Callable[[str, Sequence[str]], int]
    #: What the first load of a population an apply is about to build will allocate there (its cutover opens it in
    #: another process): estimated before it exists; None: nothing.
    new_population_load: Callable[[str], int] | None = None


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """One backend, as the rest of reindex knows it (see the module docstring)."""

    capabilities: Capabilities
    open_writer: Opener
    open_reader: Opener | None
    no_reader: str = ""  #: why there is no reader beside a writer, and what to do (``{folder}`` filled in)
    footprint: FootprintModel = field(default_factory=ServerFootprint)
    schemes: tuple[str, ...] = ()  #: the ``store.url`` schemes it claims (none: named by ``store.backend``)
    #: ``store.options`` → why they are wrong (one line), or None; None: the backend takes no options.
    options: Callable[[dict], "str | None"] | None = None
    disk: DiskGuard | None = None
    description: str = ""


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
def _edge_build_overhead(folder: str, in_place: str | None) -> int:
    from reindex.adapters.stores.edge import generation_copy_bytes

    return EDGE_BUILD_OVERHEAD_BYTES + (generation_copy_bytes(folder, in_place) if in_place else 0)


def _edge_new_population_load(folder: str) -> int:
    from reindex.adapters.stores.edge import fills_holes_when_mapped

    return EDGE_FIRST_LOAD_BYTES if fills_holes_when_mapped(folder) else 0


def _edge_first_loads(folder: str, collections: Sequence[str]) -> int:
    from reindex.adapters.stores.edge import newest_load_bytes

    return sum(newest_load_bytes(folder, c) for c in sorted(set(collections)))


#: What the edge engine writes beyond the footprint model's per-point bytes: files it preallocates per segment and
#: payload index (1 MiB each). Measured: a 320-point build used 5.6 MiB on tmpfs where the plan said 1.0.
EDGE_BUILD_OVERHEAD_BYTES = 8 * 2**20
#: What the first load of a freshly built edge population allocates on a memory file system: the files the engine
#: preallocates and leaves sparse (an appendable segment's 32 MiB vector chunk, payload-index pages, flags). Measured:
#: the sample's 0.8 MiB generation filled 40.3 MiB (bench/disk_alloc.py); ~36 MiB after an index build.
EDGE_FIRST_LOAD_BYTES = 40 * 2**20

REGISTRY: dict[str, BackendEntry] = {
    "server": BackendEntry(Capabilities(writers="many", readers_beside_writer=True, local_disk=False,
                                        index_build="server"),
                           _server, _server, footprint=ServerFootprint(), schemes=("http", "https"),
                           description="a Qdrant server or cluster at store.url"),
    "edge": BackendEntry(Capabilities(writers="one", readers_beside_writer=True, local_disk=True),
                         _edge, _edge_reader, footprint=EdgeFootprint(),
                         disk=DiskGuard(_edge_build_overhead, _edge_first_loads, _edge_new_population_load),
                         description="embedded qdrant-edge in store.path (the default)"),
    "local": BackendEntry(Capabilities(writers="one", readers_beside_writer=False, local_disk=True,
                                       index_build="none"),
                          _local, None,
                          "store.backend `local` (qdrant-client local mode) admits one process per folder, so `{folder}` "
                          "cannot be read while reindex writes it. Convert it: "
                          "`python -m reindex.adapters.stores.migrate {folder} {folder}.edge`.",
                          footprint=LocalFootprint(), description="qdrant-client local mode in store.path"),
}


def register_backend(name: str, entry: BackendEntry, *, replace: bool = False) -> None:
    """Add a backend: ``store.backend: NAME`` (or a ``store.url`` with one of ``entry.schemes``) opens it from now
    on, in this process. Its module is the entry's openers; nothing else in reindex needs to know it."""
    if not replace and name in REGISTRY:
        raise ValueError(f"a store backend named {name!r} is registered already")
    claimed = {s: n for n, e in REGISTRY.items() for s in e.schemes if n != name}
    taken = [s for s in entry.schemes if s in claimed]
    if taken:
        raise ValueError(f"store.url scheme(s) {', '.join(taken)} belong to backend {claimed[taken[0]]!r}")
    REGISTRY[name] = entry


def embedded_backends() -> tuple[str, ...]:
    """The backends a config names in ``store.backend`` (those that claim no ``store.url`` scheme)."""
    return tuple(name for name, e in REGISTRY.items() if not e.schemes)


def footprint_model(name: str) -> FootprintModel:
    """The cost model backend ``name`` declared."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"backend must be one of {', '.join(REGISTRY)}, got {name!r}")
    return entry.footprint


def backend_for(store: Any, default_folder: str | None = None) -> StoreBackend:
    """The backend a config's ``store`` section names: the one claiming ``store.url``'s scheme when it is set (a
    Qdrant server for ``http``/``https``), else ``store.backend`` (the embedded ones in ``store.path``, or
    ``default_folder``). Its ``store.options`` are checked against the entry's schema."""
    if store.url:
        scheme = urlsplit(store.url).scheme.lower()
        name = next((n for n, e in REGISTRY.items() if scheme in e.schemes), None) if scheme else "server"
        if name is None:
            raise VectorStoreError(f"store.url {store.url}: no store backend claims the scheme `{scheme}`; the "
                                   "registered ones claim " + ", ".join(f"{s}:// ({n})" for n, e in REGISTRY.items()
                                                                       for s in e.schemes))
    else:
        name = store.backend
        if name not in REGISTRY or REGISTRY[name].schemes:
            raise VectorStoreError(f"Unknown store.backend `{name}`; use one of {', '.join(embedded_backends())} "
                                   "(or set store.url for a server).")
    entry = REGISTRY[name]
    options = dict(getattr(store, "options", None) or {})
    problem = entry.options(options) if entry.options is not None else (
        f"store backend `{name}` takes no store.options (got {', '.join(sorted(options))})" if options else None)
    if problem is not None:
        raise VectorStoreError(f"store.options: {problem}")
    if store.quantization not in QUANTIZATIONS:
        raise VectorStoreError(f"Unknown store.quantization `{store.quantization}`; use one of "
                               f"{', '.join(QUANTIZATIONS)}.")
    folder = (store.path or default_folder) if entry.capabilities.local_disk else None
    return StoreBackend(name, entry.capabilities, folder, store)


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
