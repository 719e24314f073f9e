"""Qdrant through qdrant-client: a server by URL (server or cluster), or the previous embedded store
(qdrant-client local mode in a folder, ``store.backend: local``). The only module that imports
qdrant_client; no client type leaves it. ``open_vector_store`` chooses the backend: a URL gives this
module's ``QdrantStore``; an embedded folder gives ``reindex.adapters.stores.edge.EdgeStore`` by default (see that
module for why and for its measurements), or local mode when asked. The choice lives in
``reindex.adapters.stores.opening`` (which imports this module only then), so that a command on the embedded default never imports
qdrant-client (~1.4 CPU-s).

Server and local mode run the same code path through ``QdrantClient``: collections, aliases (a swap is
one ``update_collection_aliases`` call) and errors behave alike.

Local-mode writes. Stock local mode commits one SQLite transaction per point
(``CollectionPersistence.persist``/``delete``), ~57 points/s on a slow disk. ``_BatchCommitConnection``
replaces a collection's SQLite connection with a proxy that turns qdrant's per-point
``with connection:`` commit into a no-op while a batch is open; the store then commits once per
``upsert``/``delete_points`` call (WAL journal, ``synchronous=FULL``). A call is all-or-nothing on disk,
so a kill -9 after ``upsert`` returns loses nothing and a kill during it leaves no partial batch. This
depends on qdrant-client internals, so ``pyproject.toml`` pins qdrant-client 1.20.0 and every process
checks once, on a scratch database, that ``persist`` really joins an open transaction; if it does not
(another version), local mode falls back to stock per-point commits with one warning. Local mode's
metadata (``meta.json``: collections and aliases, written by qdrant-client with rename but no fsync) is
fsynced, with its folder, before a create/delete/alias call returns.

Lines: one role, the boundary with qdrant-client (server and local mode go through the same calls, and local mode's
write batching and its probe belong beside them).

Local-mode limits (why it is no longer the default): exact brute-force search, a filtered query or
``count(doc_id=…)`` scans the collection, payload indexes are ignored, one process per folder (no reader
during apply), everything in memory (~25 KB per 384-dim point with a 1 KB payload).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from qdrant_client.local.persistence import CollectionPersistence
from qdrant_client.local.qdrant_local import QdrantLocal

from reindex.foundation.atomic import fsync_dir
from reindex.domain.kinds import QDRANT_HNSW
from reindex.errors import TransientError
from reindex.adapters.stores.vectors import (
    DOC_ID_FIELD,
    Hit,
    Point,
    VectorStore,
    VectorStoreError,
    equality_conditions,
    hnsw_params,
    one_line,
)

__all__ = [
    "DOC_ID_FIELD",
    "Hit",
    "Point",
    "QdrantStore",
    "VectorStore",
    "VectorStoreError",
    "batched_commit_available",
    "local_mode_store",
    "server_store",
]

log = logging.getLogger(__name__)

_DISTANCES = {
    "cosine": models.Distance.COSINE,
    "dot": models.Distance.DOT,
    "euclid": models.Distance.EUCLID,
}
_DISTANCE_NAMES = {v: k for k, v in _DISTANCES.items()} | {models.Distance.MANHATTAN: "manhattan"}
_PAYLOAD_KINDS = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
    "float": models.PayloadSchemaType.FLOAT,
    "bool": models.PayloadSchemaType.BOOL,
    "text": models.PayloadSchemaType.TEXT,
    "uuid": models.PayloadSchemaType.UUID,
    "datetime": models.PayloadSchemaType.DATETIME,
}
# Server-side bulk build: no HNSW indexing while points stream in; finish_bulk restores the default.
_BULK_INDEXING_THRESHOLD = 0
_DEFAULT_INDEXING_THRESHOLD = 20_000
# Qdrant's documented default of both the indexing and the full-scan threshold (KB of vectors per segment).
_SERVER_INDEXING_KB = 10_000
# Ids per retrieve request against a server (keeps request bodies small).
_RETRIEVE_CHUNK = 1024
_QUIET = (
    r"Local mode is not recommended.*",  # above 20k points; our docs say so once
    r"Payload indexes have no effect in the local Qdrant.*",  # issued on purpose, see create_payload_index
)


def server_store(url: str, api_key_env: str = "QDRANT_API_KEY", *, quantization: str = "none",
                 oversampling: float | None = None, hnsw: Mapping[str, int | None] | None = None) -> QdrantStore:
    """The store on the Qdrant server (or cluster) at ``url``; the API key from ``api_key_env`` if set;
    ``quantization`` ``int8``: new collections get scalar quantisation, originals on disk; ``oversampling``:
    searches rescore k × oversampling quantised candidates with the originals; ``hnsw``: ``{m, ef_construct}``
    of the collections it creates and ``ef`` of its searches (missing: reindex's defaults)."""
    client = QdrantClient(url=url, api_key=os.environ.get(api_key_env) or None, timeout=60)
    return QdrantStore(client, where=url, quantization=quantization, oversampling=oversampling, hnsw=hnsw)


def local_mode_store(folder: Path) -> QdrantStore:
    """qdrant-client local mode in ``folder`` (created if missing): ``store.backend: local``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VectorStoreError(f"Cannot create the embedded Qdrant folder `{folder}`: {exc.strerror or exc}.") from exc
    return QdrantStore(_open_local(folder), where=str(folder), folder=folder)


# --------------------------------------------------------------------------------------------
# Embedded mode: one SQLite transaction per upsert/delete call
# --------------------------------------------------------------------------------------------


class _BatchCommitConnection:
    """Stands in for a local collection's ``sqlite3.Connection``.

    qdrant-client writes each point inside ``with connection:``, which commits. While ``batching`` is
    set, entering and leaving that block does nothing, so every write joins the open transaction that
    ``QdrantStore._batch`` commits (or rolls back) once. Everything else goes to the real connection.
    """

    __slots__ = ("conn", "batching")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.batching = False
        # WAL + FULL: a commit is one fsync of the log, and a committed batch survives power loss too.
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def __enter__(self) -> Any:
        return self if self.batching else self.conn.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return False if self.batching else self.conn.__exit__(*exc)


_BATCHING: dict[str, bool] = {}


def batched_commit_available() -> bool:
    """Whether this qdrant-client's ``persist`` joins an open transaction (checked once per process).

    Writes one point through ``CollectionPersistence.persist`` on a scratch database behind the proxy
    with batching on: the transaction must still be open afterwards. A version that commits directly
    (1.12-1.19 call ``connection.commit()``) fails this, and local mode then keeps stock per-point
    commits, with one warning.
    """
    if "ok" not in _BATCHING:
        _BATCHING["ok"] = _probe_batching()
        if not _BATCHING["ok"]:
            log.warning(
                "qdrant-client %s does not commit through `with connection:` as 1.20.0 does; local-mode writes "
                "fall back to one commit per point (slow). Install qdrant-client==1.20.0 (the pinned version).",
                getattr(__import__("qdrant_client"), "__version__", "?"),
            )
    return _BATCHING["ok"]


def _probe_batching() -> bool:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="reindex-probe-") as tmp:
        persistence = None
        try:
            persistence = CollectionPersistence(tmp)
            if not isinstance(persistence.storage, sqlite3.Connection):
                return False
            proxy = _BatchCommitConnection(persistence.storage)
            persistence.storage = proxy  # type: ignore[assignment]
            proxy.batching = True
            persistence.persist(models.PointStruct(id=1, vector=[0.0], payload={}))
            joined = proxy.conn.in_transaction
            proxy.conn.rollback()
            return bool(joined)
        except Exception:
            return False
        finally:
            if persistence is not None:
                with contextlib.suppress(Exception):
                    storage = persistence.storage
                    (storage.conn if isinstance(storage, _BatchCommitConnection) else storage).close()


def _open_local(folder: Path) -> QdrantClient:
    try:
        with _quiet():
            client = QdrantClient(path=str(folder))
    except RuntimeError as exc:
        if "already accessed" not in str(exc):
            raise VectorStoreError(f"Cannot open the embedded Qdrant folder `{folder}`: {one_line(exc)}") from exc
        raise VectorStoreError(
            f"The embedded Qdrant folder `{folder}` is held by another reindex process (one process per folder); "
            "wait for it to finish, or set store.url to a Qdrant server for concurrent access."
        ) from None
    except Exception as exc:
        raise VectorStoreError(f"Cannot open the embedded Qdrant folder `{folder}`: {one_line(exc)}") from exc
    _make_meta_durable(_local(client), folder)
    for collection in _local(client).collections.values():
        _install_batching(collection)
    return client


def _make_meta_durable(local: QdrantLocal, folder: Path) -> None:
    """qdrant-client replaces ``meta.json`` (collections, aliases) by rename without fsync: add both fsyncs."""
    save = local._save

    def durable_save(*args: Any, **kwargs: Any) -> None:
        save(*args, **kwargs)
        meta = folder / "meta.json"
        fd = os.open(meta, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(folder)

    local._save = durable_save  # type: ignore[method-assign]


def _local(client: QdrantClient) -> QdrantLocal:
    return client._client  # type: ignore[attr-defined,return-value]


def _install_batching(collection: Any) -> None:
    if not batched_commit_available():
        return  # stock per-point commits: correct, slow; batched_commit_available warned once
    storage = getattr(collection, "storage", None)
    if isinstance(storage, CollectionPersistence) and isinstance(storage.storage, sqlite3.Connection):
        storage.storage = _BatchCommitConnection(storage.storage)  # type: ignore[assignment]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        for message in _QUIET:
            warnings.filterwarnings("ignore", message=message, category=UserWarning)
        yield


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _translate(action: str) -> Iterator[None]:
    """Turn client failures into TransientError (retry may help) or VectorStoreError, one line each."""
    try:
        yield
    except (TransientError, VectorStoreError):
        raise
    except UnexpectedResponse as exc:
        status = exc.status_code or 0
        detail = one_line(exc.content.decode("utf-8", "replace") if exc.content else exc.reason_phrase)
        if status == 429 or status >= 500:
            raise TransientError(f"Qdrant answered {status} to {action}: {detail}. Retry later.") from exc
        raise VectorStoreError(f"Qdrant refused {action} ({status}): {detail}") from exc
    except (ResponseHandlingException, httpx.TransportError, ConnectionError, TimeoutError) as exc:
        cause = getattr(exc, "source", exc)
        raise TransientError(f"Cannot reach Qdrant for {action}: {one_line(cause)}. Retry later.") from exc
    except sqlite3.OperationalError as exc:  # disk full, I/O error, busy: may clear up
        raise TransientError(f"Embedded Qdrant storage failed during {action}: {one_line(exc)}. Retry later.") from exc
    except Exception as exc:
        raise VectorStoreError(f"Vector store failed to {action}: {one_line(exc)}") from exc


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------


class QdrantStore:
    """``VectorStore`` over a ``QdrantClient``: a server by URL, or local mode in a folder."""

    def __init__(self, client: QdrantClient, *, where: str, folder: Path | None = None,
                 quantization: str = "none", oversampling: float | None = None,
                 hnsw: Mapping[str, int | None] | None = None) -> None:
        self._client = client
        # The graph of the collections a server builds and the ef of its searches (local mode searches by brute force:
        # none is sent).
        graph = hnsw_params(hnsw)
        self._hnsw = None if folder is not None else {"m": graph["m"], "ef_construct": graph["ef_construct"]}
        self._ef = None if folder is not None else graph["ef"]
        self._oversampling = oversampling
        self._where = where
        self._int8 = quantization == "int8" and folder is None  # local mode has no quantisation
        self._folder = folder  # set for embedded mode
        # Embedded mode shares one SQLite connection per collection and batches writes on it.
        self._lock = threading.RLock()
        self._closed = False

    def __repr__(self) -> str:
        return f"QdrantStore({'embedded ' if self._folder else ''}{self._where!r})"

    @property
    def embedded(self) -> bool:
        return self._folder is not None

    # collections ------------------------------------------------------------------------------

    def collection_exists(self, name: str) -> bool:
        return name in self.list_collections()

    def create_collection(
        self, name: str, *, dimension: int, distance: str, bulk: bool = False,
        shard_number: int = 1, replication_factor: int = 1,
    ) -> None:
        if distance not in _DISTANCES:
            raise VectorStoreError(f"Unknown distance `{distance}`; use one of {', '.join(_DISTANCES)}.")
        optimizers = models.OptimizersConfigDiff(indexing_threshold=_BULK_INDEXING_THRESHOLD) if bulk else None
        with self._lock, _translate(f"create collection `{name}`"):
            self._client.create_collection(
                name,
                vectors_config=models.VectorParams(size=dimension, distance=_DISTANCES[distance],
                                                   on_disk=True if self._int8 else None),
                shard_number=shard_number,
                replication_factor=replication_factor,
                optimizers_config=optimizers,
                quantization_config=models.ScalarQuantization(scalar=models.ScalarQuantizationConfig(
                    type=models.ScalarType.INT8, quantile=0.99, always_ram=True)) if self._int8 else None,
                hnsw_config=models.HnswConfigDiff(**self._hnsw) if self._hnsw else None,
            )
            if self.embedded:
                _install_batching(_local(self._client).collections[name])

    def finish_bulk(self, name: str) -> None:
        with self._lock, _translate(f"finish the bulk build of `{name}`"):
            self._client.update_collection(
                name, optimizers_config=models.OptimizersConfigDiff(indexing_threshold=_DEFAULT_INDEXING_THRESHOLD)
            )

    def prepare_writes(self, name: str) -> None:
        """Nothing to prepare: a server and local mode change collections in place."""

    def create_payload_index(self, name: str, field: str, kind: str = "keyword") -> None:
        """Index ``field`` on a server; issued in embedded mode too, where it is accepted and ignored."""
        if kind not in _PAYLOAD_KINDS:
            raise VectorStoreError(f"Unknown payload index kind `{kind}`; use one of {', '.join(_PAYLOAD_KINDS)}.")
        with self._lock, _quiet(), _translate(f"index payload field `{field}` of `{name}`"):
            self._client.create_payload_index(name, field, field_schema=_PAYLOAD_KINDS[kind], wait=True)

    def delete_collection(self, name: str) -> None:
        """Delete a collection (absent: nothing to do). Refuses one that an alias points at."""
        targets = [a for a, c in self.list_aliases().items() if c == name]
        if targets:
            raise VectorStoreError(
                f"Collection `{name}` is what alias `{targets[0]}` points at; move or delete the alias first."
            )
        with self._lock, _translate(f"delete collection `{name}`"):
            if self.embedded:
                collection = _local(self._client).collections.get(name)
                if collection is not None:
                    collection.close()  # release the SQLite file before its folder is removed
            self._client.delete_collection(name)

    def list_collections(self) -> list[str]:
        with self._lock, _translate("list collections"):
            return sorted(c.name for c in self._client.get_collections().collections)

    def collection_info(self, name: str) -> dict[str, Any]:
        """Points count, dimension, distance, shards, status and ``hnsw`` (``m`` and ``ef_construct`` as the
        server reports its config) of a collection (or an alias's target), and how its index is built (see
        :meth:`reindex.adapters.stores.vectors.VectorStore.collection_info`): a server indexes in the background
        (``index_build`` ``server``; ``status`` yellow and ``optimizer`` ok while it does, an error when it failed),
        local mode searches by brute force (``none``)."""
        with self._lock, _translate(f"describe collection `{name}`"):
            info = self._client.get_collection(name)
        vectors = info.config.params.vectors
        graph = info.config.hnsw_config
        optimizers = getattr(info.config, "optimizer_config", None)
        optimizer = info.optimizer_status
        optimizer = (getattr(optimizer, "error", None) or str(getattr(optimizer, "value", optimizer) or "ok"))
        if not isinstance(vectors, models.VectorParams):
            raise VectorStoreError(f"Collection `{name}` has named vectors; reindex expects one unnamed vector.")
        return {
            "name": name,
            "points_count": info.points_count or 0,
            "indexed_vectors_count": info.indexed_vectors_count or 0,
            "dimension": vectors.size,
            "distance": _DISTANCE_NAMES.get(vectors.distance, str(vectors.distance).lower()),
            "shard_number": info.config.params.shard_number or 1,
            "replication_factor": info.config.params.replication_factor or 1,
            "status": str(getattr(info.status, "value", info.status)),
            "payload_indexes": sorted(info.payload_schema or {}),  # local mode ignores payload indexes: []
            "hnsw": {"m": graph.m, "ef_construct": graph.ef_construct} if graph is not None else dict(QDRANT_HNSW),
            "optimizer": optimizer,
            "index_build": "none" if self.embedded else "server",
            # Qdrant's documented defaults when the server does not say (10,000 KB both).
            "indexing_threshold_kb": int(getattr(optimizers, "indexing_threshold", None) or _SERVER_INDEXING_KB),
            "full_scan_threshold_kb": int(getattr(graph, "full_scan_threshold", None) or _SERVER_INDEXING_KB),
        }

    # points -----------------------------------------------------------------------------------

    def upsert(self, name: str, points: list[Point]) -> None:
        """Write ``points`` (same ids replace); durable and all-or-nothing when it returns."""
        if not points:
            return
        structs = []
        for p in points:
            if p.vector is None:
                raise VectorStoreError(f"Point `{p.id}` has no vector; every upserted point needs one.")
            vector = p.vector.tolist() if isinstance(p.vector, np.ndarray) else list(p.vector)
            structs.append(models.PointStruct(id=p.id, vector=vector, payload=p.payload))
        with self._lock, self._batch(name), _quiet(), _translate(f"upsert {len(points)} points into `{name}`"):
            self._client.upsert(name, structs, wait=True)

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        """The points with these ids, in no guaranteed order; missing ids are simply absent."""
        out: list[Point] = []
        step = len(ids) if self.embedded else _RETRIEVE_CHUNK  # embedded: a dict lookup per id
        with self._lock, _translate(f"retrieve points from `{name}`"):
            for start in range(0, len(ids), max(step, 1)):
                records = self._client.retrieve(
                    name, ids[start : start + step], with_payload=True, with_vectors=with_vectors
                )
                out.extend(_point(r, with_vectors) for r in records)
        return out

    def delete_points(self, name: str, ids: list[str]) -> None:
        """Delete points by id (missing ids are ignored); durable and all-or-nothing when it returns."""
        if not ids:
            return
        with self._lock, self._batch(name), _translate(f"delete {len(ids)} points from `{name}`"):
            self._client.delete(name, points_selector=models.PointIdsList(points=list(ids)), wait=True)

    def overwrite_payload(self, name: str, payloads: Mapping[str, dict[str, Any]]) -> None:
        """Replace each listed point's whole payload (vectors untouched); durable, all-or-nothing."""
        if not payloads:
            return
        ops = [models.OverwritePayloadOperation(overwrite_payload=models.SetPayload(payload=dict(p), points=[pid]))
               for pid, p in payloads.items()]
        with self._lock, self._batch(name), _quiet(), _translate(f"overwrite the payload of {len(ops)} points in `{name}`"):
            self._client.batch_update_points(name, ops, wait=True)

    def count(self, name: str, *, doc_id: str | None = None) -> int:
        """Exact number of points, or of one document's points."""
        with self._lock, _translate(f"count points in `{name}`"):
            return self._client.count(name, count_filter=_doc_filter(doc_id), exact=True).count

    def scroll(self, name: str, *, with_vectors: bool = False, batch: int = 2048) -> Iterator[Point]:
        """Every point of a collection, page by page (pages ≥ 1,024: local mode re-reads per page)."""
        offset: Any = None
        while True:
            with self._lock, _translate(f"scroll `{name}`"):
                records, offset = self._client.scroll(
                    name, limit=batch, offset=offset, with_payload=True, with_vectors=with_vectors
                )
            for r in records:
                yield _point(r, with_vectors)
            if offset is None:
                return

    def query(
        self, name: str, vector: Sequence[float] | np.ndarray, *, limit: int = 10, doc_id: str | None = None,
        where: Mapping[str, Any] | None = None, exact: bool = False,
    ) -> list[Hit]:
        """Nearest points to ``vector`` in a collection or alias, best first; ``doc_id`` and ``where``
        (payload path → value) are equality filters; ``exact``: the server scores every vector (no index)."""
        query = vector.tolist() if isinstance(vector, np.ndarray) else list(vector)
        with self._lock, _translate(f"query `{name}`"):
            if exact:
                params = models.SearchParams(exact=True)
            else:
                params = None if self._oversampling is None and self._ef is None else models.SearchParams(
                    hnsw_ef=self._ef, quantization=None if self._oversampling is None else
                    models.QuantizationSearchParams(rescore=True, oversampling=self._oversampling))
            result = self._client.query_points(name, query=query, limit=limit, with_payload=True,
                                               query_filter=_equality_filter(doc_id, where), search_params=params)
        return [Hit(id=str(p.id), score=float(p.score), payload=p.payload or {}) for p in result.points]

    # aliases ----------------------------------------------------------------------------------

    def get_alias(self, alias: str) -> str | None:
        return self.list_aliases().get(alias)

    def list_aliases(self) -> dict[str, str]:
        with self._lock, _translate("list aliases"):
            return {a.alias_name: a.collection_name for a in self._client.get_aliases().aliases}

    def swap_alias(self, alias: str, new_collection: str, old_collection: str | None) -> None:
        """Point ``alias`` at ``new_collection`` in one atomic call (delete + create).

        ``old_collection`` is where the alias must point now (None: nowhere); if it points elsewhere the
        swap is refused. Already pointing at ``new_collection`` (a retried swap) is success.
        """
        current = self.get_alias(alias)
        if current == new_collection:
            return
        if current != old_collection:
            raise VectorStoreError(
                f"Alias `{alias}` points at `{current}`, not `{old_collection}` as expected; "
                "someone else moved it. Check `reindex status` and plan again."
            )
        ops: list[Any] = []
        if old_collection is not None:
            ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        ops.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=new_collection, alias_name=alias)
            )
        )
        with self._lock, _translate(f"move alias `{alias}` to `{new_collection}`"):
            self._client.update_collection_aliases(change_aliases_operations=ops)

    def delete_alias(self, alias: str) -> None:
        """Remove an alias (absent: nothing to do); its collection stays."""
        if self.get_alias(alias) is None:
            return
        op = models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias))
        with self._lock, _translate(f"delete alias `{alias}`"):
            self._client.update_collection_aliases(change_aliases_operations=[op])

    def publish(self, name: str) -> None:
        """Nothing to do: a server's (and local mode's) writes are visible when they return."""

    def share(self, name: str) -> str | None:
        """Nothing to do: what a build has written is readable by every client (local mode: by this process)."""
        return None

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                with contextlib.suppress(Exception):
                    self._client.close()

    # embedded write batching ------------------------------------------------------------------

    @contextlib.contextmanager
    def _batch(self, name: str) -> Iterator[None]:
        """Embedded: run the body's per-point writes as one SQLite transaction, committed at the end."""
        conn = self._batch_connection(name)
        if conn is None:
            yield
            return
        conn.batching = True
        try:
            yield
        except BaseException:
            conn.batching = False
            wrote = conn.conn.in_transaction
            with contextlib.suppress(Exception):
                conn.conn.rollback()
            if wrote:  # memory already holds writes the disk just dropped: reload so both agree
                self._reload()
            raise
        conn.batching = False
        try:
            conn.conn.commit()
        except sqlite3.Error as exc:
            with contextlib.suppress(Exception):
                conn.conn.rollback()
            self._reload()
            raise TransientError(
                f"Embedded Qdrant could not commit to `{self._folder}`: {one_line(exc)}. "
                "Nothing of this call was stored; retry it."
            ) from exc

    def _batch_connection(self, name: str) -> _BatchCommitConnection | None:
        if not self.embedded:
            return None
        local = _local(self._client)
        collection = local.collections.get(local.aliases.get(name, name))
        storage = getattr(getattr(collection, "storage", None), "storage", None)
        return storage if isinstance(storage, _BatchCommitConnection) else None

    def _reload(self) -> None:
        assert self._folder is not None
        with contextlib.suppress(Exception):
            self._client.close()
        self._client = _open_local(self._folder)


def _doc_filter(doc_id: str | None) -> models.Filter | None:
    if doc_id is None:
        return None
    return models.Filter(must=[models.FieldCondition(key=DOC_ID_FIELD, match=models.MatchValue(value=doc_id))])


def _equality_filter(doc_id: str | None, where: Mapping[str, Any] | None) -> models.Filter | None:
    if not (conditions := equality_conditions(doc_id, where)):
        return None
    return models.Filter(must=[models.FieldCondition(key=k, match=models.MatchValue(value=v)) for k, v in conditions])


def _point(record: Any, with_vectors: bool) -> Point:
    vector = record.vector if with_vectors else None
    if isinstance(vector, dict):  # a collection with named vectors: take the unnamed one
        vector = vector.get("")
    return Point(id=str(record.id), vector=vector, payload=record.payload or {})
