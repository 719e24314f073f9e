"""A fourth store backend, written outside reindex: a brute-force in-memory store named by ``store.url: toy://NAME``.

It is this module plus one registry entry (:func:`entry`, registered by ``tests/test_toy_backend.py``): nothing in
``src/reindex`` knows it. A "server" lives in this process, one per URL, shared by every store opened on it (as
clients of one server share its collections), so a writer and a reader opened by different use cases see the same
points and aliases. Exact cosine search over numpy arrays; writes are visible at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reindex.adapters.stores.footprints import FootprintModel, Usage
from reindex.adapters.stores.opening import BackendEntry, Capabilities
from reindex.adapters.stores.vectors import Hit, Point, VectorStoreError, equality_conditions


@dataclass
class _Collection:
    dimension: int
    distance: str
    points: dict[str, tuple[np.ndarray, dict]] = field(default_factory=dict)


@dataclass
class _Server:
    collections: dict[str, _Collection] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)


SERVERS: dict[str, _Server] = {}


def _payload_value(payload: dict, path: str) -> Any:
    value: Any = payload
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


class ToyStore:
    """The :class:`reindex.adapters.stores.vectors.VectorStore` contract over one in-process server."""

    def __init__(self, url: str) -> None:
        self.server = SERVERS.setdefault(url, _Server())

    def _get(self, name: str) -> _Collection:
        name = self.server.aliases.get(name, name)
        if name not in self.server.collections:
            raise VectorStoreError(f"toy store: no collection {name!r}")
        return self.server.collections[name]

    def collection_exists(self, name: str) -> bool:
        return name in self.server.collections

    def create_collection(self, name: str, *, dimension: int, distance: str, bulk: bool = False,
                          shard_number: int = 1, replication_factor: int = 1) -> None:
        with self.server.lock:
            self.server.collections.setdefault(name, _Collection(dimension, distance))

    def finish_bulk(self, name: str) -> None:
        pass

    def prepare_writes(self, name: str) -> None:
        pass

    def create_payload_index(self, name: str, field: str, kind: str = "keyword") -> None:
        pass

    def delete_collection(self, name: str) -> None:
        with self.server.lock:
            self.server.collections.pop(name, None)

    def list_collections(self) -> list[str]:
        return sorted(self.server.collections)

    def collection_info(self, name: str) -> dict[str, Any]:
        c = self._get(name)
        return {"dimension": c.dimension, "distance": c.distance, "points": len(c.points),
                "indexed_vectors": len(c.points)}

    def upsert(self, name: str, points: list[Point]) -> None:
        c = self._get(name)
        with self.server.lock:
            for p in points:
                vector = np.asarray(p.vector, dtype=np.float32)
                if vector.shape != (c.dimension,):
                    raise VectorStoreError(f"toy store: vector of {vector.shape[0]} dimensions into {name!r} "
                                           f"({c.dimension})")
                c.points[p.id] = (vector, dict(p.payload))

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        c = self._get(name)
        return [Point(i, c.points[i][0].copy() if with_vectors else None, dict(c.points[i][1]))
                for i in ids if i in c.points]

    def delete_points(self, name: str, ids: list[str]) -> None:
        c = self._get(name)
        with self.server.lock:
            for i in ids:
                c.points.pop(i, None)

    def overwrite_payload(self, name: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        c = self._get(name)
        with self.server.lock:
            for i, payload in payloads.items():
                if i in c.points:
                    c.points[i] = (c.points[i][0], dict(payload))

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        c = self._get(name)
        return sum(1 for _, payload in c.points.values() if doc_id is None or payload.get("doc_id") == doc_id)

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        c = self._get(name)
        for i in sorted(c.points):
            vector, payload = c.points[i]
            yield Point(i, vector.copy() if with_vectors else None, dict(payload))

    def query(self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
              where: Mapping[str, Any] | None = None, exact: bool = False) -> list[Hit]:
        """Brute force: every search is exact (``exact`` changes nothing)."""
        c = self._get(name)
        conditions = equality_conditions(doc_id, where)
        rows = [(i, v, p) for i, (v, p) in c.points.items()
                if all(_payload_value(p, path) == value for path, value in conditions)]
        if not rows:
            return []
        q = np.asarray(vector, dtype=np.float32)
        m = np.stack([v for _, v, _ in rows])
        scores = m @ q / np.maximum(np.linalg.norm(m, axis=1) * np.linalg.norm(q), 1e-12)
        order = np.argsort(-scores, kind="stable")[:limit]
        return [Hit(rows[j][0], float(scores[j]), dict(rows[j][2])) for j in order]

    def publish(self, name: str) -> None:
        pass

    def get_alias(self, alias: str) -> str | None:
        return self.server.aliases.get(alias)

    def list_aliases(self) -> dict[str, str]:
        return dict(self.server.aliases)

    def swap_alias(self, alias: str, new_collection: str, old_collection: str | None) -> None:
        with self.server.lock:
            if new_collection not in self.server.collections:
                raise VectorStoreError(f"toy store: no collection {new_collection!r} to point {alias!r} at")
            self.server.aliases[alias] = new_collection

    def delete_alias(self, alias: str) -> None:
        with self.server.lock:
            self.server.aliases.pop(alias, None)

    def close(self) -> None:
        pass


class ToyFootprint(FootprintModel):
    """Every vector as float32 in RAM, twice (the array and a copy for search), nothing on disk."""

    formula = "toy store: ram = 2 × vectors × dimension × 4 B + payload; no disk"

    def serving(self, n: int, dimension: int, payload: int, precision: str) -> Usage:
        return Usage(ram_bytes=2 * n * dimension * 4 + payload, disk_bytes=0)


def _open(store: Any, folder: str | None) -> ToyStore:
    return ToyStore(store.url)


def _options(options: dict) -> str | None:
    unknown = sorted(set(options) - {"note"})
    return f"the toy store takes only `note`, not {', '.join(unknown)}" if unknown else None


def entry() -> BackendEntry:
    """The registry entry: capabilities, openers, the URL scheme it claims, its options, its cost model."""
    return BackendEntry(Capabilities(writers="one", readers_beside_writer=True, local_disk=False, index_build="none"),
                        _open, _open, schemes=("toy",), options=_options, footprint=ToyFootprint(),
                        description="an in-memory toy store (tests)")
