"""Which vector store a config opens, without importing any backend's library before it is chosen.

``open_vector_store`` / ``open_vector_reader`` pick the backend from ``store.url``, ``store.path`` and
``store.backend`` and only then import it: ``reindex.stores.qdrant`` (qdrant-client, ~1.4 CPU-s to import)
for a server URL or local mode, ``reindex.stores.edge`` (qdrant-edge, ~0.02 CPU-s) for the embedded default.
A command on the default store therefore never loads qdrant-client.
"""

from __future__ import annotations

from pathlib import Path

from reindex.stores.vectors import VectorStore, VectorStoreError

__all__ = ["BACKENDS", "QUANTIZATIONS", "open_vector_reader", "open_vector_store", "store_folder_problem"]

BACKENDS = ("edge", "local")
QUANTIZATIONS = ("none", "int8")


def store_folder_problem(path: str | None) -> str | None:
    """Why the embedded store's folder ``path`` cannot be one (it exists and is a file, or another non-folder),
    or None. Checked before any backend opens it: a file there made every population look deleted."""
    if path is None:
        return None
    p = Path(path)
    if p.exists() and not p.is_dir():
        return f"store.path `{path}` is a file, not a folder: point store.path at a folder (it is created if missing)"
    return None


def _check_folder(path: str) -> None:
    problem = store_folder_problem(path)
    if problem is not None:
        raise VectorStoreError(problem)


def open_vector_store(
    url: str | None, path: str | None, api_key_env: str = "QDRANT_API_KEY", backend: str = "edge", *,
    quantization: str = "none", oversampling: float | None = None,
) -> VectorStore:
    """A store on the Qdrant server at ``url``; else embedded in the folder ``path`` (created if missing):
    ``backend="edge"`` (default, ``reindex.stores.edge``) or ``"local"`` (qdrant-client local mode).
    ``quantization`` (``none`` | ``int8``) applies to the collections this store creates (not local mode);
    ``oversampling`` (>= 1, or None) to its searches of quantised collections."""
    if quantization not in QUANTIZATIONS:
        raise VectorStoreError(f"Unknown store.quantization `{quantization}`; use one of {', '.join(QUANTIZATIONS)}.")
    if url:
        from reindex.stores.qdrant import server_store

        return server_store(url, api_key_env, quantization=quantization, oversampling=oversampling)
    if not path:
        raise VectorStoreError("No vector store configured: set store.url (a Qdrant server) or store.path (a folder).")
    if backend not in BACKENDS:
        raise VectorStoreError(f"Unknown store.backend `{backend}`; use one of {', '.join(BACKENDS)}.")
    _check_folder(path)
    folder = Path(path)
    if backend == "edge":
        from reindex.stores.edge import open_edge_store

        return open_edge_store(folder, quantization=quantization, oversampling=oversampling)
    from reindex.stores.edge import is_edge_folder

    if is_edge_folder(folder):
        raise VectorStoreError(
            f"`{folder}` holds an embedded store of backend `edge`, but store.backend is `local`; "
            "remove store.backend (edge is the default) to open it."
        )
    from reindex.stores.qdrant import local_mode_store

    return local_mode_store(folder)


def open_vector_reader(
    url: str | None, path: str | None, api_key_env: str = "QDRANT_API_KEY", backend: str = "edge", *,
    oversampling: float | None = None,
) -> VectorStore:
    """A store for a process that only reads (search by alias) while another process may write.

    A server (``url``) serves any number of clients: this is ``open_vector_store``. The edge backend
    gives ``reindex.stores.edge.EdgeReader``, which follows alias swaps and published syncs by itself.
    Local mode cannot: its folder admits one process, so this refuses it with what to do instead.
    """
    if url:
        return open_vector_store(url, path, api_key_env, backend, oversampling=oversampling)
    if not path:
        raise VectorStoreError("No vector store configured: set store.url (a Qdrant server) or store.path (a folder).")
    if backend == "local":
        raise VectorStoreError(
            f"store.backend `local` (qdrant-client local mode) admits one process per folder, so `{path}` cannot be "
            f"read while reindex writes it. Convert it: `python -m reindex.stores.migrate {path} {path}.edge`."
        )
    _check_folder(path)
    from reindex.stores.edge import open_reader

    return open_reader(path, oversampling=oversampling)  # type: ignore[return-value]
