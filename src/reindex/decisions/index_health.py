"""Index health: is a population's search index fully built, and how close are its answers to exact search?

Three questions, asked of any store through :meth:`reindex.adapters.stores.vectors.VectorStore.collection_info` and
:meth:`~reindex.adapters.stores.vectors.VectorStore.query` (its ``exact`` search):

* **Built** (:func:`index_state`): every vector indexed, or the rest in segments the engine never indexes (below
  its indexing threshold) and so scans exactly. A Qdrant server indexes in the background after the upload
  (status yellow while its optimizer works): :func:`wait_until_indexed` waits for it, bounded. The embedded store
  builds its graph in apply (``finish_bulk``): nothing builds it later, so there is nothing to wait for.
* **How good** (:func:`measure_recall`): up to :data:`HEALTH_SAMPLE` stored vectors are used as queries; each one's
  ANN top-10 is compared with its exact top-10 (recall@10 vs exact kNN, rebasis' and Qdrant's own check).
* **How fast** is read by the cutover from its own evaluation (the gate's queries, each side timed as readers query
  it): see :func:`reindex.decisions.evaluation.evaluate`.

Which search answered is said, not guessed: a segment holding fewer KB of vectors than the full-scan threshold is
scanned even when it has a graph, so on a small population every answer is exact and its recall is 1 by
construction; the state says so (``searched``)."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from reindex.errors import TransientError
from reindex.foundation.stats import percentile

__all__ = ["HEALTH_K", "HEALTH_SAMPLE", "POLL_SECONDS", "IndexState", "health_problem", "index_state", "latency_ratio",
           "measure_recall", "side_health", "wait_until_indexed"]

#: The depth of the recall check (recall@10 against exact kNN).
HEALTH_K = 10
#: Stored vectors used as queries per population (fewer when it holds fewer).
HEALTH_SAMPLE = 200
#: Seconds between two looks at a server that is still indexing.
POLL_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class IndexState:
    """What a store says of a collection's index, read: ``ready`` (nothing left to index), ``building`` (the store
    indexes it now: worth waiting), ``searched`` (how a search answers: ``graph``, ``exact`` or ``graph + exact``)
    and one line saying why."""

    points: int
    indexed_vectors: int
    status: str
    optimizer: str
    build: str  # apply | server | none
    ready: bool
    building: bool
    searched: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"points": self.points, "indexed_vectors": self.indexed_vectors, "status": self.status,
                "optimizer": self.optimizer, "ready": self.ready, "searched": self.searched, "detail": self.detail}


def _kb(points: int, dimension: int) -> float:
    return points * dimension * 4 / 1024


def index_state(info: dict[str, Any]) -> IndexState:
    """The index state of a collection from its ``collection_info``."""
    points = int(info.get("points_count") or 0)
    indexed = int(info.get("indexed_vectors_count") or 0)
    status = str(info.get("status") or "green")
    optimizer = str(info.get("optimizer") or "ok")
    build = str(info.get("index_build") or "apply")
    dim = int(info.get("dimension") or 0)
    indexing_kb = int(info.get("indexing_threshold_kb") or 0)
    full_scan_kb = int(info.get("full_scan_threshold_kb") or 0)
    segments = max(1, int(info.get("segments_count") or 1))

    def state(ready: bool, building: bool, searched: str, detail: str) -> IndexState:
        return IndexState(points, indexed, status, optimizer, build, ready, building, searched, detail)

    if build == "none":
        return state(True, False, "exact", "the store searches by brute force (no index to build)")
    if optimizer != "ok":
        return state(False, False, "exact", f"the optimizer failed: {optimizer}")
    if status == "red":
        return state(False, False, "exact", "the collection is red (an optimisation failed)")
    if status == "yellow":
        return state(False, True, "graph + exact",
                     f"the server is indexing it (status yellow, {indexed:,} of {points:,} vectors indexed)")
    if status == "grey":
        return state(False, False, "graph + exact",
                     f"status grey: optimisations are pending and start with the next update ({indexed:,} of "
                     f"{points:,} vectors indexed)")
    rest = max(0, points - indexed)
    rest_kb = _kb(rest, dim)
    small = full_scan_kb and _kb(points, dim) < full_scan_kb
    scanned = (f"; {_kb(points, dim):,.0f} KB of vectors, under the full-scan threshold of {full_scan_kb:,} KB per "
               "segment: every search scans, none walks the graph") if small else ""
    if rest == 0:
        return state(True, False, "exact" if small else "graph",
                     f"every vector indexed ({indexed:,} of {points:,}){scanned}")
    if indexing_kb and rest_kb <= indexing_kb * segments:
        what = "all of them" if indexed == 0 else f"{rest:,} of {points:,}"
        return state(True, False, "exact" if small or indexed == 0 else "graph + exact",
                     f"{what} in segments below the engine's indexing threshold ({indexing_kb:,} KB of vectors per "
                     f"segment), searched exactly{scanned}")
    later = ("nothing builds it now: the embedded store builds its index during apply; build the population again"
             if build == "apply" else "the server is not indexing it (check its optimizer config: "
             "indexing_threshold 0 disables indexing)")
    return state(False, False, "graph + exact",
                 f"{rest:,} of {points:,} vectors ({rest_kb:,.0f} KB) have no index, over the indexing threshold of "
                 f"{indexing_kb:,} KB: every search scans them; {later}")


def wait_until_indexed(store: Any, name: str, timeout_s: float, *, sleep: Callable[[float], None] = time.sleep,
                       clock: Callable[[], float] = time.monotonic) -> tuple[IndexState, float]:
    """(the index state of ``name``, seconds waited): looks again every :data:`POLL_SECONDS` while the store is
    building its index, up to ``timeout_s``; then raises a one-line :class:`~reindex.errors.TransientError` (the
    server may finish later: run the cutover again). A state nothing will change (built, or not being built)
    returns at once."""
    start = clock()
    while True:
        st = index_state(store.collection_info(name))
        waited = clock() - start
        if st.ready or not st.building:
            return st, waited
        if waited >= timeout_s:
            raise TransientError(
                f"{name} is not fully indexed after waiting {waited:,.0f} s (cutover.index_wait {timeout_s:g} s): "
                f"{st.detail}; readers would get slow, approximate answers from it, so the alias was not moved: run "
                "`reindex cutover` again once the server has indexed it, or raise cutover.index_wait")
        sleep(min(POLL_SECONDS, max(0.0, timeout_s - waited)))


def measure_recall(store: Any, name: str, *, sample: int = HEALTH_SAMPLE, k: int = HEALTH_K) -> dict[str, Any]:
    """Recall@k of ``name``'s ANN search against its exact search, with up to ``sample`` of its stored vectors as
    queries (the first ``sample`` in the store's id order: point ids are hashes, so an unbiased draw), and the ANN
    search's latency (ms p50/p95). ``recall_at_10_vs_exact`` None when the collection is empty, or when the store
    offers no exact search (its ``query`` takes no ``exact``: ``exact_search`` False)."""
    ann_ms: list[float] = []
    recalls: list[float] = []
    if "exact" not in inspect.signature(store.query).parameters:  # a backend that offers no exact search
        return {"recall_at_10_vs_exact": None, "sampled": 0, "ann_ms_p50": 0.0, "ann_ms_p95": 0.0,
                "exact_search": False}
    for p in islice(store.scroll(name, with_vectors=True, batch=max(1, sample)), sample):
        if p.vector is None:
            continue
        t = time.perf_counter()
        ann = store.query(name, p.vector, limit=k)
        ann_ms.append((time.perf_counter() - t) * 1000)
        exact = {h.id for h in store.query(name, p.vector, limit=k, exact=True)}
        if exact:
            recalls.append(len({h.id for h in ann} & exact) / len(exact))
    return {"recall_at_10_vs_exact": round(sum(recalls) / len(recalls), 4) if recalls else None,
            "sampled": len(recalls), "ann_ms_p50": round(percentile(ann_ms, 0.5), 3),
            "ann_ms_p95": round(percentile(ann_ms, 0.95), 3)}


def side_health(store: Any, name: str, *, wait_s: float = 0.0, sample: int = HEALTH_SAMPLE) -> dict[str, Any]:
    """One population's health: its index state (waited for up to ``wait_s`` while a server builds it) and its
    recall against exact search. ``{collection, points, indexed_vectors, state, ready, searched, detail,
    recall_at_10_vs_exact, sampled, waited_seconds, seconds}``."""
    t = time.perf_counter()
    st, waited = wait_until_indexed(store, name, wait_s)
    out = {"collection": name, **st.as_dict(), "waited_seconds": round(waited, 3)}
    out.update(measure_recall(store, name, sample=sample))
    out["seconds"] = round(time.perf_counter() - t, 3)
    return out


def latency_ratio(new_p95: float, old_p95: float) -> float:
    """new p95 ÷ old p95 (inf when the old side measured 0)."""
    return new_p95 / old_p95 if old_p95 > 0 else (math.inf if new_p95 > 0 else 1.0)


def health_problem(health: dict[str, Any], min_recall: float) -> str | None:
    """What is wrong with one population's index health (``side_health``), in one line, or None: not fully indexed,
    or its recall@10 against exact search below ``min_recall``."""
    if not health["ready"]:
        return f"{health['collection']} is not fully indexed: {health['detail']}"
    r = health.get("recall_at_10_vs_exact")
    if r is not None and r < min_recall:
        return (f"{health['collection']}'s index finds {r:.3f} of the exact top-10 on {health['sampled']} stored "
                f"vectors, below cutover.min_index_recall {min_recall:.2f}")
    return None
