"""The vector-store contract shared by every backend: ``VectorStore``, ``Point``, ``Hit`` and its error.

No third-party import lives here, so a backend module (``qdrant.py`` for qdrant-client, ``edge/_engine.py`` for
qdrant-edge) and its callers can share these names without loading the other backend's library.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from reindex.domain.kinds import HNSW_DEFAULTS, hnsw_problem
from reindex.errors import VectorStoreError

__all__ = ["DOC_ID_FIELD", "Hit", "NoStoreError", "Point", "VectorStore", "VectorStoreError", "equality_conditions",
           "hnsw_params", "one_line"]

def hnsw_params(hnsw: Mapping[str, int | None] | None) -> dict[str, int | None]:
    """The HNSW parameters a store builds new collections with (``m``, ``ef_construct``) and searches with (``ef``;
    None: the engine's default, the graph's ef_construct); a missing key (or ``hnsw`` None) takes reindex's default
    (:data:`reindex.domain.kinds.HNSW_DEFAULTS`). Checked: a bad value is a one-line :class:`VectorStoreError` naming the
    option."""
    params: dict[str, int | None] = {**HNSW_DEFAULTS, **(hnsw or {})}
    unknown = sorted(set(params) - set(HNSW_DEFAULTS))
    if unknown:
        raise VectorStoreError(f"store.hnsw.{unknown[0]}: unknown field; use m, ef_construct and ef")
    for name, value in params.items():
        problem = None if name == "ef" and value is None else hnsw_problem(name, value)
        if problem:
            raise VectorStoreError(f"store.hnsw.{name}: {problem}")
    return params


class NoStoreError(VectorStoreError):
    """A read-only open found no store where the config points: nothing has been built there yet."""


# Payload key that ``count(doc_id=…)`` and ``query(doc_id=…)`` filter on; every point's payload carries it.
DOC_ID_FIELD = "doc_id"


@dataclass(frozen=True, slots=True)
class Point:
    """One stored point: a UUID string id, its vector (None when not requested) and its payload."""

    id: str
    vector: list[float] | np.ndarray | None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """One query result."""

    id: str
    score: float
    payload: dict[str, Any]


@runtime_checkable
class VectorStore(Protocol):
    """Collections of points, and aliases that name them. Writes are durable when they return."""

    def collection_exists(self, name: str) -> bool: ...
    def create_collection(
        self, name: str, *, dimension: int, distance: str, bulk: bool = False,
        shard_number: int = 1, replication_factor: int = 1,
    ) -> None: ...
    def finish_bulk(self, name: str) -> None: ...
    def prepare_writes(self, name: str) -> None: ...  # about to change ``name``: embedded stores open it to write
    def create_payload_index(self, name: str, field: str, kind: str = "keyword") -> None: ...
    def delete_collection(self, name: str) -> None: ...
    def list_collections(self) -> list[str]: ...
    def collection_info(self, name: str) -> dict[str, Any]:
        """``points_count``, ``indexed_vectors_count``, ``dimension``, ``distance``, ``status`` (green, yellow, grey,
        red), ``optimizer`` (``ok`` or the optimiser's error), ``index_build`` (``apply``: built in ``finish_bulk``;
        ``server``: built in the background after it; ``none``: searched by brute force), ``indexing_threshold_kb`` and
        ``full_scan_threshold_kb`` (KB of vectors per segment below which a segment is not indexed / is scanned), and
        the graph's ``hnsw`` parameters."""
        ...
    def upsert(self, name: str, points: list[Point]) -> None: ...
    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]: ...
    def delete_points(self, name: str, ids: list[str]) -> None: ...
    def overwrite_payload(self, name: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """Replace the whole payload of each point id in ``payloads`` (vectors untouched); durable when
        it returns. A payload-only change and an in-place document whose chunks did not change use it."""
        ...
    def count(self, name: str, *, doc_id: str | None = None) -> int: ...
    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]: ...
    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None, exact: bool = False,
    ) -> list[Hit]:
        """Nearest points; ``doc_id`` and ``where`` (payload path → value, e.g. ``metadata.lang``) are
        equality filters, all of which must hold; ``exact``: every vector scored, no index (the reference of an
        index's recall)."""
        ...
    def publish(self, name: str) -> None:
        """Make the writes to ``name`` so far visible to readers in other processes (an in-place sync, before
        the writer closes: the live mode keeps it open). A no-op where writes are visible at once (a server)."""
        ...
    def share(self, name: str) -> str | None:
        """Let readers in other processes read what ``name`` holds so far, while it is still being built (no alias
        moves): the cascade reads a shadow's vectors. None when they can (a no-op where writes are visible at once),
        else why not (the embedded store: no room for the copy its next write makes)."""
        ...
    def get_alias(self, alias: str) -> str | None: ...
    def list_aliases(self) -> dict[str, str]: ...
    def swap_alias(self, alias: str, new_collection: str, old_collection: str | None) -> None: ...
    def delete_alias(self, alias: str) -> None: ...
    def close(self) -> None: ...


def equality_conditions(doc_id: str | None, where: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The (payload path, value) pairs of a query's equality filter, ``doc_id`` first; empty: no filter."""
    out = [(DOC_ID_FIELD, doc_id)] if doc_id is not None else []
    return out + [(str(k), v) for k, v in (where or {}).items()]


def one_line(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters, for error messages."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
