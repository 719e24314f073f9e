"""The engine's calls: the only module that imports ``qdrant_edge``. Loading and creating a shard, the update
operations the writer applies, the read operations the writer and readers share, and the engine's failures
as one-line errors."""

from __future__ import annotations

import contextlib
import errno
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe

from reindex.domain.kinds import QDRANT_HNSW
from reindex.errors import TransientError
from reindex.adapters.stores.edge._generations import Record
from reindex.adapters.stores.vectors import Hit, Point, VectorStoreError, equality_conditions, hnsw_params, one_line

__all__ = [
    "DISTANCES",
    "EXACT",
    "FULL_SCAN_THRESHOLD_KB",
    "INDEXING_THRESHOLD_KB",
    "PAYLOAD_KINDS",
    "SEGMENT_NUMBER",
    "count_points",
    "create_shard",
    "delete_op",
    "describe",
    "edge_errors",
    "field_index_op",
    "hnsw_of",
    "load",
    "overwrite_payload_ops",
    "query_points",
    "retrieve_points",
    "scroll_page",
    "search_params",
    "upsert_op",
]

DISTANCES = {"cosine": qe.Distance.Cosine, "dot": qe.Distance.Dot, "euclid": qe.Distance.Euclid}
PAYLOAD_KINDS = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
    "bool": qe.PayloadSchemaType.Bool,
    "text": qe.PayloadSchemaType.Text,
    "uuid": qe.PayloadSchemaType.Uuid,
    "datetime": qe.PayloadSchemaType.Datetime,
}
# Loading a generation can race a reader rewriting edge_config.json; a retry after a short pause settles it.
_LOAD_TRIES = 5
# The engine's optimiser thresholds for a new collection, chosen so that an in-place sync costs O(edit):
# a segment whose vectors pass indexing_threshold (KB) is sealed (HNSW, its big files shared by the next
# delta generation) and only the appendable remainder is copied per sync, so a low threshold bounds that
# copy (~1,300 points of 384 dims). The merge optimiser keeps at most ~default_segment_number segments
# (Qdrant's default on 2 CPUs is 2, which would merge the largest segment into a small one every few syncs).
INDEXING_THRESHOLD_KB = 2_000
SEGMENT_NUMBER = 8
# A search of a segment holding fewer KB of vectors than this scans it instead of walking its graph (Qdrant's default,
# measured here: m 4, ef_construct 4 found 1.000 of the exact top-10 at 3,000 × 384 dims, 0.18 at 10,000).
FULL_SCAN_THRESHOLD_KB = 10_000
#: Search parameters of an exact search (every vector scored: the reference an index's recall is measured against).
EXACT = qe.SearchParams(exact=True)


@contextlib.contextmanager
def edge_errors(action: str) -> Iterator[None]:
    """Engine and file-system failures as one-line errors: OSError may clear up, the rest will not."""
    try:
        yield
    except (VectorStoreError, TransientError):
        raise
    except Exception as exc:
        # The optimiser checks its own room: "Not enough space available for optimization, needed: 81.77 MiB,
        # available: 512.00 KiB".
        short = re.search(r"Not enough space available[^,]*, (needed: [^,]+, available: [^,\n]+)", str(exc))
        if short:
            raise VectorStoreError(f"Embedded store ran out of disk during {action} (the engine {short[1]}): free "
                                   "some space and run the command again (finished work is kept)") from exc
        if (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "os error 28" in str(exc):
            raise VectorStoreError(f"Embedded store ran out of disk during {action} (no space left on device): free "
                                   "some space and run the command again (finished work is kept)") from exc
        if isinstance(exc, OSError):
            raise TransientError(f"Embedded store I/O failed during {action}: {one_line(exc)}. Retry later.") from exc
        raise VectorStoreError(f"Embedded store failed to {action}: {one_line(exc)}") from exc


def load(path: Path) -> Any:
    """The engine's shard in the generation folder ``path``."""
    for attempt in range(_LOAD_TRIES):
        try:
            return qe.EdgeShard.load(str(path))
        except Exception:
            if attempt == _LOAD_TRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def hnsw_of(folder: Path) -> dict[str, int]:
    """The graph parameters (``m``, ``ef_construct``) the engine builds the shard in ``folder`` with, as it recorded
    them (``edge_config.json``; a shard created without them, by an older reindex, has Qdrant's defaults)."""
    try:
        config = json.loads((folder / "edge_config.json").read_bytes()).get("hnsw_config") or {}
    except (OSError, ValueError):
        config = {}
    return {name: int(config.get(name, default)) for name, default in QDRANT_HNSW.items()}


def create_shard(path: Path, *, dimension: int, distance: str, int8: bool,
                 hnsw: Mapping[str, int | None] | None = None) -> Any:
    """A new, empty shard in ``path`` (WAL off: durable at each flush; readers in other processes may load it).
    ``int8``: the optimiser builds a 1-byte-per-dimension copy of each sealed segment's vectors, kept in RAM and
    searched first; the float32 originals stay on disk (mapped) and rescore the candidates. ``hnsw``: the graph's
    ``m`` and ``ef_construct`` (:func:`reindex.adapters.stores.vectors.hnsw_params`; threads auto, the full-scan threshold
    Qdrant's 10,000 KB: :data:`FULL_SCAN_THRESHOLD_KB`)."""
    quantization = qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8, quantile=0.99, always_ram=True) \
        if int8 else None
    graph = hnsw_params(hnsw)
    assert graph["m"] is not None and graph["ef_construct"] is not None
    config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=dimension, distance=DISTANCES[distance],
                                                       on_disk=True if int8 else None),
                           quantization_config=quantization,
                           hnsw_config=qe.HnswIndexConfig(m=graph["m"], ef_construct=graph["ef_construct"],
                                                          full_scan_threshold=FULL_SCAN_THRESHOLD_KB),
                           wal_enabled=False, optimizers=qe.EdgeOptimizersConfig(
                               indexing_threshold=INDEXING_THRESHOLD_KB,
                               default_segment_number=SEGMENT_NUMBER))
    return qe.EdgeShard.create(str(path), config)


def upsert_op(points: Sequence[Point], record: Record) -> Any:
    """The update that writes ``points`` into ``record``'s collection (each checked for a vector of its
    dimension). Converting points is most of an upsert's CPU: callers run it outside their lock."""
    structs = []
    for p in points:
        if p.vector is None:
            raise VectorStoreError(f"Point `{p.id}` has no vector; every upserted point needs one.")
        vector = _as_list(p.vector)
        if len(vector) != record.dimension:
            raise VectorStoreError(
                f"Point `{p.id}` has {len(vector)} dimensions; `{record.name}` holds {record.dimension}."
            )
        structs.append(qe.Point(p.id, vector, p.payload))
    return qe.UpdateOperation.upsert_points(structs)


def delete_op(ids: Sequence[str]) -> Any:
    return qe.UpdateOperation.delete_points(list(ids))


def overwrite_payload_ops(payloads: Mapping[str, dict[str, Any]]) -> list[Any]:
    return [qe.UpdateOperation.overwrite_payload([pid], dict(p)) for pid, p in payloads.items()]


def field_index_op(field: str, kind: str) -> Any:
    return qe.UpdateOperation.create_field_index(field, PAYLOAD_KINDS[kind])


def _point(record: Any, with_vectors: bool) -> Point:
    vector = record.vector if with_vectors else None
    if isinstance(vector, dict):
        vector = vector.get("")
    return Point(id=str(record.id), vector=vector, payload=dict(record.payload or {}))


def _doc_filter(doc_id: str | None, where: Mapping[str, Any] | None = None) -> Any:
    conditions = equality_conditions(doc_id, where)
    if not conditions:
        return None
    return qe.Filter(must=[qe.FieldCondition(key=k, match=qe.MatchValue(v)) for k, v in conditions])


def _as_list(vector: Sequence[float] | np.ndarray) -> list[float]:
    return vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]


# Read operations on one open shard, shared by the writer and readers.


def count_points(shard: Any, doc_id: str | None) -> int:
    return int(shard.count(qe.CountRequest(exact=True, filter=_doc_filter(doc_id))))


def search_params(oversampling: float | None, ef: int | None = None) -> Any:
    """Search parameters for ``oversampling`` and the HNSW search's ``ef`` (None, None: the engine's defaults).
    Quantised segments take ``limit × oversampling`` candidates by their int8 copy and rescore them with the float32
    originals; unquantised segments ignore it. ``ef``: candidates an HNSW search considers (the engine's default is
    the graph's ef_construct); segments searched by a full scan ignore it."""
    if oversampling is None and ef is None:
        return None
    if oversampling is not None and not oversampling >= 1.0:
        raise VectorStoreError(f"store.oversampling {oversampling!r}: must be at least 1")
    quantization = None if oversampling is None else qe.QuantizationSearchParams(rescore=True,
                                                                                 oversampling=float(oversampling))
    return qe.SearchParams(hnsw_ef=ef, quantization=quantization)


def query_points(shard: Any, vector: Sequence[float] | np.ndarray, limit: int, doc_id: str | None,
                 where: Mapping[str, Any] | None = None, params: Any = None) -> list[Hit]:
    request = qe.QueryRequest(limit=limit, query=qe.Query.Nearest(_as_list(vector)), with_payload=True,
                              filter=_doc_filter(doc_id, where), params=params)
    return [Hit(id=str(p.id), score=float(p.score), payload=dict(p.payload or {})) for p in shard.query(request)]


def retrieve_points(shard: Any, ids: list[str], with_vectors: bool) -> list[Point]:
    if not ids:
        return []
    return [_point(r, with_vectors) for r in shard.retrieve(list(ids), with_payload=True, with_vector=with_vectors)]


def scroll_page(shard: Any, offset: Any, batch: int, with_vectors: bool) -> tuple[list[Point], Any]:
    records, nxt = shard.scroll(qe.ScrollRequest(offset=offset, limit=batch, with_payload=True,
                                                 with_vector=with_vectors))
    return [_point(r, with_vectors) for r in records], nxt


def describe(shard: Any, record: Record, folder: Path) -> dict[str, Any]:
    """Points count, dimension, distance, shards, status and graph parameters of the collection ``shard`` (loaded
    from the generation ``folder``) holds, and how its index is built: ``index_build`` ``apply`` (in the writer's
    ``finish_bulk``: nothing builds in the background), the engine's indexing and full-scan thresholds (KB of vectors
    per segment) and ``optimizer`` ``ok``."""
    info = shard.info()
    return {
        "name": record.name,
        "points_count": int(info.points_count),
        "indexed_vectors_count": int(info.indexed_vectors_count),
        "dimension": record.dimension,
        "distance": record.distance,
        "shard_number": 1,
        "replication_factor": 1,
        "status": "green",
        "segments_count": int(info.segments_count),
        "payload_indexes": sorted(getattr(info, "payload_schema", None) or {}),
        "hnsw": hnsw_of(folder),
        "optimizer": "ok",
        "index_build": "apply",
        **_thresholds(folder),
    }


def _thresholds(folder: Path) -> dict[str, int]:
    """The indexing and full-scan thresholds (KB of vectors per segment) the shard in ``folder`` was created with, as
    the engine recorded them (``edge_config.json``), else reindex's and Qdrant's."""
    try:
        config = json.loads((folder / "edge_config.json").read_bytes())
    except (OSError, ValueError):
        config = {}
    indexing = (config.get("optimizers") or {}).get("indexing_threshold") or INDEXING_THRESHOLD_KB
    full_scan = (config.get("hnsw_config") or {}).get("full_scan_threshold") or FULL_SCAN_THRESHOLD_KB
    return {"indexing_threshold_kb": int(indexing), "full_scan_threshold_kb": int(full_scan)}
