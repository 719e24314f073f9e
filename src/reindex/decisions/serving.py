"""Serving across a model change: bridges fitted from the build's free pairs, the cascade, and the gate each mode
must pass before readers are served by it (DESIGN.md, "serving mode"; docs/design-notes.md, "Serving across a
model change").

While a ``pipeline-scoped/vector`` change builds, readers are served one of three modes:

* ``old`` — the live population with the live model (always available; the fallback);
* ``bridge`` — the query embedded with the *new* model, mapped into the live population's space by a
  :class:`Bridge` (centred orthogonal Procrustes, semi-orthogonal between dimensions, or ridge) fitted from the
  free pairs (:mod:`reindex.books.pairs`), then a search of the live population;
* ``cascade`` — ``candidates`` recalled from the live population with the live model, reranked by the new model:
  the query embedded with it, each candidate's new vector read from the shadow when its text is built there
  (same document and text → the new point id, computed) and embedded on the fly otherwise, counted per query.

A mode is evaluated exactly as a cutover evaluates a shadow (:func:`reindex.decisions.evaluation.evaluate` on the cutover's
queries, paired bootstrap intervals, per segment with Holm's correction), against ``old`` as the other side, and
goes live only when every rule of :func:`mode_rules` holds: its lower bound of the gated metric beats ``old`` by
``serving.min_delta``, the evidence can see a difference (never by ceiling), no segment is hurt past the cutover's
bound, and a bridge had at least ``serving.min_pairs`` pairs. Lines: the three modes share the bridge, the
cascade and the gate; split, the gate would be read away from what it gates.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np

from reindex.decisions.gate import Rule, evidence_rule, segment_rules
from reindex.errors import StateError, VectorStoreError
from reindex.decisions.evaluation import Query, evaluate, gate_metrics, side_of_hits
from reindex.domain.identity import fingerprint, identity_of, point_id
from reindex.books.layout import Books
from reindex.books.manifests import bridge_key, read_serving_checked
from reindex.decisions.drift import Finding
from reindex.books.pairs import MAX_OCCURRENCE, PairSet
from reindex.adapters.sources.extract import normalise
from reindex.adapters.stores.objects import ObjectStore
from reindex.adapters.stores.payload import payload_text
from reindex.adapters.stores.vectors import Hit
from reindex.foundation.stats import betting_lower_bound, percentile, spent_alpha

__all__ = ["AUTO_FACTOR", "AUTO_FLOOR_MS", "BRIDGE_KINDS", "COST_QUERIES", "MODES", "MODE_NAMES", "RIDGE_GRID",
           "SERVING_ALPHA", "Bridge", "EvaluationMemo", "check_serving", "ModeInputs", "ModeQuery", "answer_in_mode", "beats_old",
           "cascade_rerank", "choose_mode", "cost_rules", "cost_sample", "digest_of", "evaluate_modes", "fit_bridge",
           "fit_procrustes", "fit_ridge", "gate_metric", "load_bridge", "look_of", "measure_native", "measure_reader",
           "mode_rules", "near_boundary", "paired_diffs", "reader_passages", "recommend", "store_bridge"]

MODES = ("old", "bridge", "cascade")
BRIDGE_KINDS = ("procrustes", "procrustes-uncentred", "ridge")
#: Ridge penalties tried, times the mean squared norm of the centred inputs; the one that maps held-out pairs
#: best (mean cosine) is refitted on all pairs.
RIDGE_GRID = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
BRIDGE_VERSION = 1
_NEVER_BY_CEILING = SimpleNamespace(cannot_tell="fail")  # a serving mode never passes on evidence that saw nothing


# --------------------------------------------------------------------------------------------
# Bridges: new-model query space → the live population's space
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bridge:
    """``map(x) = scale · (x − mean_new) · matrix + mean_old`` (then L2-normalised when the live vectors are; the
    means are zero for an uncentred rotation; the fits here all give scale 1, kept in the format), fitted
    from free pairs; versioned by :attr:`id` and the two vector ids it joins."""

    kind: str  # procrustes | procrustes-uncentred | ridge
    matrix: np.ndarray  # (d_new, d_old)
    mean_new: np.ndarray  # (d_new,)
    mean_old: np.ndarray  # (d_old,)
    scale: float
    from_vector_id: str  # the new model's: queries are embedded with it
    to_vector_id: str  # the live population's: the space searched
    pairs: int
    shards: tuple[int, ...]
    normalize: bool = True
    params: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        h = hashlib.blake2b(digest_size=12)
        h.update(json.dumps([BRIDGE_VERSION, self.kind, self.from_vector_id, self.to_vector_id, self.scale,
                             self.normalize], sort_keys=True).encode())
        for a in (self.matrix, self.mean_new, self.mean_old):
            h.update(np.ascontiguousarray(a, dtype=np.float32).tobytes())
        return h.hexdigest()

    def map(self, vectors: Any) -> np.ndarray:
        """New-model vectors (n, d_new) → the live space (n, d_old)."""
        x = np.asarray(vectors, dtype=np.float32)
        y = self.scale * ((x - self.mean_new) @ self.matrix) + self.mean_old
        if self.normalize:
            y /= np.maximum(np.linalg.norm(y, axis=-1, keepdims=True), 1e-12)
        return y.astype(np.float32)

    def describe(self) -> dict[str, Any]:
        """What the serving record and reports say of it (no arrays)."""
        return {"id": self.id, "kind": self.kind, "from_vector_id": self.from_vector_id,
                "to_vector_id": self.to_vector_id, "dims": [int(self.matrix.shape[0]), int(self.matrix.shape[1])],
                "pairs": self.pairs, "shards": len(self.shards), "scale": round(self.scale, 6),
                "params": dict(self.params)}

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        meta = {**self.describe(), "normalize": self.normalize, "shards": list(self.shards), "scale": self.scale}
        np.savez(buf, matrix=self.matrix.astype(np.float32), mean_new=self.mean_new.astype(np.float32),
                 mean_old=self.mean_old.astype(np.float32), meta=np.array(json.dumps(meta, sort_keys=True)))
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "bridge") -> "Bridge":
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                return cls(meta["kind"], z["matrix"], z["mean_new"], z["mean_old"], float(meta["scale"]),
                           meta["from_vector_id"], meta["to_vector_id"], int(meta["pairs"]),
                           tuple(meta["shards"]), bool(meta["normalize"]), dict(meta.get("params") or {}))
        except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile) as err:
            raise StateError(f"{where}: not a readable bridge ({type(err).__name__}: {err}); delete it and run "
                             "`reindex serving --evaluate` to fit it again") from None


def _centred(pairs: PairSet) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x = pairs.new.astype(np.float64)
    y = pairs.old.astype(np.float64)
    mx, my = x.mean(axis=0), y.mean(axis=0)
    return x - mx, y - my, mx, my


def fit_procrustes(pairs: PairSet, *, normalize: bool = True, centre: bool = True) -> Bridge:
    """Orthogonal Procrustes, centred by default: ``W = U·Vᵀ`` from the SVD of ``Xcᵀ·Yc`` (``centre=False``: of
    ``XᵀY``, a rotation through the origin). With ``d_new ≠ d_old`` the thin SVD gives a semi-orthogonal ``W``
    (orthonormal columns or rows): the same map as zero-padding the smaller space to the larger one and rotating.
    No scale: a least-squares scale (0.53–0.57 on MiniLM ↔ static) shrank the centred part under the mean and
    cost 0.06–0.09 nDCG@10 (bench/RESULTS.md)."""
    if centre:
        xc, yc, mx, my = _centred(pairs)
    else:
        xc, yc = pairs.new.astype(np.float64), pairs.old.astype(np.float64)
        mx, my = np.zeros(xc.shape[1]), np.zeros(yc.shape[1])
    u, _, vt = np.linalg.svd(xc.T @ yc, full_matrices=False)
    return Bridge("procrustes" if centre else "procrustes-uncentred", (u @ vt).astype(np.float32),
                  mx.astype(np.float32), my.astype(np.float32), 1.0, pairs.new_vector_id, pairs.old_vector_id,
                  pairs.n, pairs.shards, normalize)


def _ridge(xc: np.ndarray, yc: np.ndarray, lam: float) -> np.ndarray:
    return np.linalg.solve(xc.T @ xc + lam * np.eye(xc.shape[1]), xc.T @ yc)


def _mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float((a * b).sum(axis=1).mean())


def fit_ridge(pairs: PairSet, *, normalize: bool = True, grid: Sequence[float] = RIDGE_GRID, seed: int = 0) -> Bridge:
    """Centred ridge regression ``W = (XcᵀXc + λI)⁻¹ XcᵀYc``; λ = g × (mean squared norm of Xc) with g from
    ``grid`` chosen on a seeded 20 % of the pairs held out (mean cosine of mapped to true old vectors)."""
    x, y = pairs.new.astype(np.float64), pairs.old.astype(np.float64)
    xc, yc, mx, my = _centred(pairs)
    base = float((xc * xc).sum() / max(xc.shape[0], 1))
    order = np.random.default_rng(seed).permutation(x.shape[0])
    cut = max(1, x.shape[0] // 5)
    held, fit = order[:cut], order[cut:]
    best, best_g = float("-inf"), grid[0]
    if fit.size >= 2:
        fx, fy = x[fit].mean(axis=0), y[fit].mean(axis=0)
        for g in grid:
            w = _ridge(x[fit] - fx, y[fit] - fy, g * base)
            score = _mean_cosine((x[held] - fx) @ w + fy, y[held])
            if score > best:
                best, best_g = score, g
    w = _ridge(xc, yc, best_g * base)
    return Bridge("ridge", w.astype(np.float32), mx.astype(np.float32), my.astype(np.float32), 1.0,
                  pairs.new_vector_id, pairs.old_vector_id, pairs.n, pairs.shards, normalize,
                  {"lambda": best_g * base, "lambda_factor": best_g,
                   "held_out_cosine": round(best, 6) if np.isfinite(best) else None})


def fit_bridge(pairs: PairSet, kind: str, *, normalize: bool = True, seed: int = 0) -> Bridge:
    """The bridge of ``kind`` (one of :data:`BRIDGE_KINDS`) fitted on ``pairs``."""
    if kind in ("procrustes", "procrustes-uncentred"):
        return fit_procrustes(pairs, normalize=normalize, centre=kind == "procrustes")
    if kind == "ridge":
        return fit_ridge(pairs, normalize=normalize, seed=seed)
    raise ValueError(f"unknown bridge kind {kind!r}; expected one of {', '.join(BRIDGE_KINDS)}")


def store_bridge(state: ObjectStore, index: str, bridge: Bridge) -> str:
    """Write the bridge's matrices under its id (content-addressed: writing it again changes nothing)."""
    key = bridge_key(index, bridge.id)
    if state.get(key) is None:
        state.put(key, bridge.to_bytes())
    return key


def load_bridge(state: ObjectStore, index: str, bridge_id: str) -> Bridge | None:
    key = bridge_key(index, bridge_id)
    data = state.get(key)
    return None if data is None else Bridge.from_bytes(data, f"{state.describe()}/{key}")


# --------------------------------------------------------------------------------------------
# The cascade: old-space recall, new-model rerank
# --------------------------------------------------------------------------------------------


def _occurrence(hit: Any) -> int:
    """The occurrence a live point's id was made with (its text's repeats earlier in the document; almost always 0)."""
    doc, fp = str(hit.payload.get("doc_id", "")), str(hit.payload.get("fingerprint", ""))
    for occ in range(MAX_OCCURRENCE):
        if point_id(doc, fp, occ) == str(hit.id):
            return occ
    return 0


def _similarity(query: np.ndarray, vectors: np.ndarray, distance: str) -> np.ndarray:
    if distance == "euclid":
        return -np.linalg.norm(vectors - query, axis=1)
    if distance == "cosine":
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        query = query / max(float(np.linalg.norm(query)), 1e-12)
    return vectors @ query


def cascade_rerank(store: Any, live: str, shadow: str | None, old_vector: Any, new_vector: Any, *, candidates: int,
                   new_vector_id: str, payload: Any, embed_passages: Callable[[list[str]], Any], distance: str,
                   doc_id: str | None = None, where: dict | None = None,
                   cache: dict[str, np.ndarray] | None = None) -> tuple[list[Hit], dict[str, Any]]:
    """``candidates`` hits of ``live`` for ``old_vector``, reranked by the new model's similarity to
    ``new_vector`` (scores are the new model's). A candidate's new vector is read from ``shadow`` by the point id
    its document and text have there; the ones the shadow does not hold yet (or this process cannot read: a shadow
    of the embedded store before its build has shared anything) are embedded with ``embed_passages``, in one
    batch. ``cache`` (new fingerprint → vector): vectors already embedded, shared across calls (an evaluation);
    the cost counts what a reader without it embeds. Returns (hits, cost: candidates, from_shadow, embedded,
    shadow_readable, ms)."""
    t0 = time.perf_counter()
    hits = store.query(live, old_vector, limit=candidates, doc_id=doc_id, where=where)
    if not hits:
        return [], {"candidates": 0, "from_shadow": 0, "embedded": 0, "shadow_readable": shadow is not None,
                    "ms": (time.perf_counter() - t0) * 1000}
    texts = [payload_text(h.payload, payload) for h in hits]
    fps = [fingerprint(new_vector_id, t) for t in texts]
    ids = [point_id(str(h.payload.get("doc_id", "")), fp, _occurrence(h)) for h, fp in zip(hits, fps)]
    vectors: dict[str, np.ndarray] = {}
    readable = shadow is not None
    if shadow is not None:
        try:
            for p in store.retrieve(shadow, sorted(set(ids)), with_vectors=True):
                if p.vector is not None and p.payload.get("fingerprint") in fps:
                    vectors[p.payload["fingerprint"]] = np.asarray(p.vector, dtype=np.float32)
        except VectorStoreError:
            readable = False  # not visible here (a shadow of the embedded store nothing has shared yet): embed
    from_shadow = sum(1 for fp in fps if fp in vectors)
    missing = list(dict.fromkeys(fp for fp in fps if fp not in vectors))
    embedded = len(missing)
    if cache is not None:
        vectors.update({fp: cache[fp] for fp in missing if fp in cache})
    todo = [fp for fp in missing if fp not in vectors]
    if todo:
        text_of = dict(zip(fps, texts))
        for fp, v in zip(todo, np.asarray(embed_passages([text_of[fp] for fp in todo]), dtype=np.float32)):
            vectors[fp] = v
            if cache is not None:
                cache[fp] = v
    scores = _similarity(np.asarray(new_vector, dtype=np.float32), np.stack([vectors[fp] for fp in fps]), distance)
    order = np.argsort(-scores, kind="stable")
    ranked = [Hit(hits[i].id, float(scores[i]), hits[i].payload) for i in order]
    return ranked, {"candidates": len(hits), "from_shadow": from_shadow, "embedded": embedded,
                    "shadow_readable": readable, "ms": (time.perf_counter() - t0) * 1000}


@dataclass(frozen=True)
class ModeQuery:
    """What one query in a serving mode needs, as a reader has it: the store, the live population (searched), the
    mode (``bridge`` | ``cascade``) with its shadow and bridge, the three embedding calls (a query with the old
    model, a query with the new one, passages with the new one: one batch per query), and the live population's
    payload layout. ``new_vector_id``/``distance``: the shadow's."""

    store: Any
    live: str
    kind: str
    shadow: str | None
    bridge: Bridge | None
    embed_old: Callable[[list[str]], Any]
    embed_new: Callable[[list[str]], Any]
    embed_passages: Callable[[list[str]], Any]
    candidates: int
    new_vector_id: str
    payload: Any
    distance: str


def reader_passages(side: Any) -> Callable[[list[str]], Any]:
    """How a reader embeds a cascade's candidates with a side (:class:`reindex.context.Side`): its passages, one
    batch per query, on the embedder sized for single queries (``passage_embedder(queries=True)``: a reader's
    threads, not a build's)."""
    return lambda texts: side.passage_embedder(queries=True).embed(texts).vectors


def answer_in_mode(m: ModeQuery, text: str, k: int, *, doc_id: str | None = None,
                   where: dict | None = None) -> tuple[list[Hit], dict[str, Any]]:
    """One query answered in a serving mode, exactly as readers answer it (``reindex query``, ``Querier``, the
    retrievers) and as the gate measures what they pay: (the top ``k`` hits, embeddings made, candidates, read
    from the shadow, embedded, ms)."""
    t0 = time.perf_counter()
    v_new = np.asarray(m.embed_new([text]), dtype=np.float32)
    if m.kind == "bridge":
        assert m.bridge is not None
        hits = m.store.query(m.live, m.bridge.map(v_new)[0], limit=k, doc_id=doc_id, where=where)
        info: dict[str, Any] = {"embeddings": 1}
    else:
        v_old = np.asarray(m.embed_old([text]), dtype=np.float32)[0]
        hits, cost = cascade_rerank(m.store, m.live, m.shadow, v_old, v_new[0], candidates=max(m.candidates, k),
                                    new_vector_id=m.new_vector_id, payload=m.payload, embed_passages=m.embed_passages,
                                    distance=m.distance, doc_id=doc_id, where=where)
        hits = hits[:k]
        info = {"candidates": cost["candidates"], "from_shadow": cost["from_shadow"], "embedded": cost["embedded"],
                "embeddings": 2 + cost["embedded"], "shadow_readable": cost["shadow_readable"]}
    info["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    return hits, info


# --------------------------------------------------------------------------------------------
# What a mode costs a reader, measured from a reader's seat
# --------------------------------------------------------------------------------------------

#: Queries of the gate's query set a reader's cost is measured on (each one a real query: a cascade's candidates
#: embedded for real, no cache), in a seeded order; the measurement stops as soon as two of them are over the
#: latency limit (with at most 21 queries, two over the limit put the p95 over it).
COST_QUERIES = 16
#: ``serving.max_ms: auto``: a mode may cost a reader at most this many times what the slower of its native
#: reads costs (the live model now; the new model's query after the cutover), and never less than AUTO_FLOOR_MS.
AUTO_FACTOR = 5.0
AUTO_FLOOR_MS = 20.0


@dataclass
class EvaluationMemo:
    """What evaluations of one build reuse (an apply's re-evaluations share one; a ``reindex serving --evaluate``
    makes its own): the queries' vectors and what embedding each cost a reader once (``(side, text)`` → ms), the
    live population's search results (it does not change while its replacement builds: the build holds the index
    lock), and the new model's vectors of the cascade's candidates (fingerprint → vector). Keyed by the live
    population and the two vector ids it was made for: another pair starts afresh."""

    key: tuple[str, str, str] | None = None
    vectors: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    query_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    searches: dict[tuple, list[Hit]] = field(default_factory=dict)
    candidates: dict[str, np.ndarray] = field(default_factory=dict)
    warmed: set[str] = field(default_factory=set)  # embedders called once untimed (their model loaded)

    def for_pair(self, live: str, old_vector_id: str, new_vector_id: str) -> "EvaluationMemo":
        key = (live, old_vector_id, new_vector_id)
        if self.key != key:
            self.key, self.vectors, self.query_ms, self.searches, self.candidates = key, {}, {}, {}, {}
            self.warmed = set()
        return self

    def embedder(self, side: str, embed: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
        """``embed`` (one side's queries) with each text's vector kept: only texts not seen before are embedded."""

        def call(texts: list[str]) -> np.ndarray:
            todo = list(dict.fromkeys(t for t in texts if (side, t) not in self.vectors))
            if todo:
                for t, v in zip(todo, np.asarray(embed(todo), dtype=np.float32)):
                    self.vectors[(side, t)] = v
            return np.stack([self.vectors[(side, t)] for t in texts]) if texts else np.zeros((0, 0), np.float32)

        return call

    def timed(self, side: str, embed: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
        """``embed`` of one query as a reader calls it, timed the first time and reused after: a reader pays the
        time measured then at every query, and an evaluation pays it once a build."""

        def call(texts: list[str]) -> np.ndarray:
            (t,) = texts
            if (side, t) not in self.query_ms:
                t0 = time.perf_counter()
                v = np.asarray(embed([t]), dtype=np.float32)[0]
                self.query_ms[(side, t)] = (time.perf_counter() - t0) * 1000
                self.vectors.setdefault((side, t), v)
            return self.vectors[(side, t)][None, :]

        return call


class _LiveSearches:
    """A store whose searches of the live population are answered from the memo after the first time (the
    evaluation's old side, the cascade's candidates, the segments' metadata lookups); every other call is the
    store's."""

    def __init__(self, store: Any, live: str, memo: EvaluationMemo) -> None:
        self._store, self._live, self._memo = store, live, memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def query(self, name: str, vector: Any, *, limit: int = 10, doc_id: str | None = None,
              where: dict | None = None) -> list[Hit]:
        if name != self._live:
            return self._store.query(name, vector, limit=limit, doc_id=doc_id, where=where)
        key = (np.asarray(vector, dtype=np.float32).tobytes(), limit, doc_id, json.dumps(where, sort_keys=True))
        hits = self._memo.searches.get(key)
        if hits is None:
            hits = self._memo.searches[key] = self._store.query(name, vector, limit=limit, doc_id=doc_id, where=where)
        return hits


def _p(values: Sequence[float], q: float) -> float:
    return round(percentile(list(values), q), 3)


def _limit_ms(serving: Any, native: dict[str, Any]) -> tuple[float, str]:
    """``serving.max_ms`` as a number of milliseconds, and how it was set."""
    if serving.max_ms != "auto":
        return float(serving.max_ms), "serving.max_ms"
    ref = max(native.get("old", {}).get("reader_ms_p95", 0.0), native.get("new_model", {}).get("reader_ms_p95", 0.0))
    limit = max(AUTO_FLOOR_MS, AUTO_FACTOR * ref)
    return round(limit, 3), (f"serving.max_ms auto: {AUTO_FACTOR:g} × the slower native p95 ({ref:,.1f} ms: the live "
                             f"model's reads now, or the new model's query after the cutover), at least "
                             f"{AUTO_FLOOR_MS:g} ms")


_WARM_UP = "a query a held reader has already answered"


def _warm(memo: EvaluationMemo, what: str, embed: Callable[[list[str]], Any]) -> None:
    """One untimed call of ``embed`` (its model loaded, its first call's set-up paid), as in a reader that has
    answered before: a held reader's query does not pay the model's load (a one-off reader does: ``open_ms``)."""
    if what not in memo.warmed:
        embed([_WARM_UP])
        memo.warmed.add(what)


def measure_native(store: Any, live: str, texts: Sequence[str], memo: EvaluationMemo, *,
                   embed_old: Callable[[list[str]], Any], embed_new: Callable[[list[str]], Any], k: int) -> dict:
    """What a reader pays natively, per query of ``texts`` through ``store`` (a reader): ``old`` (the live model's
    query and a search of the live population: what readers pay now) and ``new_model`` (the new model's query and
    the same search: about what they pay after the cutover). Query embeddings are timed once a build (the memo)."""
    old_q, new_q = memo.timed("old", embed_old), memo.timed("new", embed_new)
    _warm(memo, "old", embed_old)
    _warm(memo, "new", embed_new)
    old_ms, new_ms = [], []
    for t in texts:
        v = old_q([t])[0]
        new_q([t])
        t0 = time.perf_counter()
        store.query(live, v, limit=k)
        search = (time.perf_counter() - t0) * 1000
        old_ms.append(memo.query_ms[("old", t)] + search)
        new_ms.append(memo.query_ms[("new", t)] + search)
    one = lambda ms, emb: {"reader_ms_p50": _p(ms, 0.5), "reader_ms_p95": _p(ms, 0.95),  # noqa: E731
                           "embedded_per_query": 0.0, "from_shadow_per_query": 0.0, "embeddings_per_query": emb,
                           "queries": len(ms)}
    return {"old": one(old_ms, 1.0), "new_model": one(new_ms, 1.0)} if texts else {}


def measure_reader(m: ModeQuery, texts: Sequence[str], memo: EvaluationMemo, *, k: int,
                   limit_ms: float | None = None) -> dict[str, Any]:
    """What a reader pays in mode ``m.kind`` per query of ``texts``, answered exactly as readers answer
    (:func:`answer_in_mode`) through ``m.store`` — a reader opened as another process opens it, which sees only what
    the writer has published — with nothing cached but the queries' own embeddings (timed once a build, their time
    added to every query). Also the one-time cost of opening the shadow in that reader (``open_ms``: what a
    one-off reader such as ``reindex query`` pays again at every call), reported apart. Stops early once two
    queries are over ``limit_ms``. The cost fields of ``serving.modes.<mode>.cost``."""
    open_ms = None
    readable = m.shadow is not None
    if m.kind == "cascade":
        _warm(memo, "candidates", m.embed_passages)
    if m.kind == "cascade" and m.shadow is not None:
        t0 = time.perf_counter()
        try:
            m.store.retrieve(m.shadow, [], with_vectors=False)
            open_ms = round((time.perf_counter() - t0) * 1000, 3)
        except VectorStoreError:
            readable = False
    q = ModeQuery(m.store, m.live, m.kind, m.shadow if readable else None, m.bridge, memo.timed("old", m.embed_old),
                  memo.timed("new", m.embed_new), m.embed_passages, m.candidates, m.new_vector_id, m.payload,
                  m.distance)
    rows, over, stopped = [], 0, None
    for t in texts:
        _, info = answer_in_mode(q, t, k)
        ms = info["ms"] + memo.query_ms[("new", t)] + (memo.query_ms[("old", t)] if m.kind == "cascade" else 0.0)
        rows.append({**info, "ms": ms})
        over += limit_ms is not None and ms > limit_ms
        if over >= 2 and len(rows) < len(texts):
            stopped = (f"stopped after {len(rows)} of {len(texts)} queries: two were over {limit_ms:,.1f} ms, which "
                       "puts the p95 over it")
            break
    if not rows:
        return {}
    n = len(rows)
    ms = [r["ms"] for r in rows]
    per = lambda key: round(sum(r.get(key, 0) for r in rows) / n, 3)  # noqa: E731
    out = {"reader_ms_p50": _p(ms, 0.5), "reader_ms_p95": _p(ms, 0.95), "embedded_per_query": per("embedded"),
           "from_shadow_per_query": per("from_shadow"), "embeddings_per_query": per("embeddings"), "queries": n,
           "stopped": stopped}
    if m.kind == "cascade":
        out.update(candidates_per_query=per("candidates"), open_ms=open_ms, shadow_readable=readable)
    return out


# --------------------------------------------------------------------------------------------
# The gate of a serving mode, and evaluating the modes on the cutover's queries
# --------------------------------------------------------------------------------------------

#: The chance that any evaluation of one build switches readers to a mode that is not better than ``old``, at
#: most: each evaluation's lower bound is a betting bound at the level :func:`~reindex.foundation.stats.spent_alpha`
#: gives its look (docs/design-notes.md, "Serving decided from the reader's seat").
SERVING_ALPHA = 0.05


def gate_metric(metric: str, k: int) -> str:
    """The evaluation's name of ``serving.metric`` at depth ``k``."""
    return "mrr" if metric == "mrr" else f"{metric}_at_{k}"


def paired_diffs(evaluation: dict, metric: str) -> list[float]:
    """Per labelled query, ``metric`` of the mode − old's (the evaluation's rows)."""
    return [r[f"{metric}_new"] - r[f"{metric}_old"] for r in evaluation.get("rows") or ()
            if f"{metric}_new" in r and f"{metric}_old" in r]


def digest_of(diffs: Sequence[float]) -> str:
    """What tells one look's evidence from another's: its per-query differences (rounded past float noise)."""
    return hashlib.blake2b(json.dumps([round(d, 6) for d in diffs]).encode(), digest_size=8).hexdigest()


def look_of(diffs: Sequence[float], seen: Sequence[str]) -> int:
    """Which look these differences are, among the looks ``seen`` before in this build (their digests, first first):
    the same evidence again is the same look (nothing new was seen, so nothing more can be falsely passed); other
    evidence is the next one."""
    d = digest_of(diffs)
    return list(seen).index(d) + 1 if d in seen else len(seen) + 1


def beats_old(diffs: Sequence[float], min_delta: float, look: int, *, seed: int = 0) -> tuple[bool, float, float]:
    """The gate's quality test: (passed, the anytime lower bound of the mean difference, the level it was taken at).
    Passed when the betting lower bound at ``spent_alpha(SERVING_ALPHA, look)`` is above ``min_delta``: over every
    look of a build, a mode no better than old passes with probability at most :data:`SERVING_ALPHA`."""
    alpha = spent_alpha(SERVING_ALPHA, look)
    low = betting_lower_bound(diffs, alpha, seed=seed)
    return bool(diffs) and low > min_delta, round(low, 6), alpha


def cost_rules(cost: dict | None, serving: Any, native: dict[str, Any]) -> list[Rule]:
    """What a reader will pay, as rules: its p95 per query within ``serving.max_ms`` (``auto``: see
    :func:`_limit_ms`) and its embeddings per query within ``serving.max_embedded_per_query`` (None: no limit of
    its own). Measured from a reader's seat (:func:`measure_reader`); none when not measured."""
    if not cost:
        return []
    limit, why = _limit_ms(serving, native)
    opened = f"; opening the shadow cost a new reader {cost['open_ms']:,.1f} ms once" if cost.get("open_ms") else ""
    stop = f"; {cost['stopped']}" if cost.get("stopped") else ""
    rules = [Rule("reader latency", cost["reader_ms_p95"] <= limit,
                  f"a reader pays p95 {cost['reader_ms_p95']:,.1f} ms per query (p50 {cost['reader_ms_p50']:,.1f} ms, "
                  f"{cost['queries']} queries measured from a reader's seat{stop}{opened}); at most {limit:,.1f} ms "
                  f"({why})")]
    cap = serving.max_embedded_per_query
    if cap is not None:
        rules.append(Rule("reader embeddings", cost["embedded_per_query"] <= cap,
                          f"a reader embeds {cost['embedded_per_query']:g} candidates per query "
                          f"({cost.get('from_shadow_per_query', 0):g} read from the shadow); at most {cap} "
                          "(serving.max_embedded_per_query)"))
    return rules


def mode_rules(evaluation: dict | None, serving: Any, cutover: Any, k: int, *, pairs: int | None = None,
               look: int = 1, cost: dict | None = None, native: dict | None = None, seed: int = 0) -> list[Rule]:
    """The rules a mode must pass, on its evaluation against ``old`` (None: not evaluated): pairs (a bridge),
    quality (the anytime lower bound of the gated metric above ``serving.min_delta`` at this ``look``), evidence
    that can see a difference, segments, and what a reader pays (``cost``, against ``native``). ``pairs``: a
    bridge's free pairs (checked first; too few and nothing else is evaluated)."""
    rules = []
    if pairs is not None:
        rules.append(Rule("pairs", pairs >= serving.min_pairs,
                          f"{pairs:,} free pairs; a bridge is fitted from at least {serving.min_pairs:,}"))
    if evaluation is None:
        return rules
    agg = evaluation["aggregate"]
    m = gate_metric(serving.metric, k)
    d = agg.get(f"{m}_diff")
    diffs = paired_diffs(evaluation, m)
    if d is None or not diffs:
        rules.append(Rule(f"{m} beats old", False, f"no labelled query measured {m}"))
    else:
        passed, low, alpha = beats_old(diffs, serving.min_delta, look, seed=seed)
        rules.append(Rule(f"{m} beats old", passed,
                          f"{m} mode − old = {d['mean']:+.3f} over {d['n']} queries, anytime lower bound {low:+.3f} "
                          f"(look {look} of this build at α {alpha:.4f}; bootstrap 95 % [{d['low']:+.3f}, "
                          f"{d['high']:+.3f}]); the lower bound must be above {serving.min_delta:+.3f}"))
        worse = d["high"] < 0
        rules.append(Rule(f"{m} not worse", not worse,
                          f"{m} mode − old ≤ {d['high']:+.3f} (bootstrap 95 % upper bound): "
                          + ("measurably worse than old, refused whatever serving.min_delta says" if worse else
                             "not measurably worse than old")))
    if "verdict" in agg:
        rules.append(evidence_rule(agg, _NEVER_BY_CEILING, k))
    rules.extend(segment_rules(evaluation.get("segments") or {}, cutover, k))
    rules.extend(cost_rules(cost, serving, native or {}))
    return rules


def _near_said(numbers: dict[str, dict]) -> str:
    """The near-boundary phrases of the numbers a recommendation rests on (the chosen mode, or the rebuild, and any
    mode refused by a hair), as a sentence to append; empty when none is near."""
    shown = [(name, row["near"]) for name, row in numbers.items() if row.get("near")]
    if not shown:
        return ""
    return " (" + "; ".join(f"{name}: {near}" for name, near in shown) + ")"


def _rounded(d: dict) -> dict:
    return {key: (round(v, 6) if isinstance(v, float) else v) for key, v in d.items()}


def _evidence(evaluation: dict, rules: list[Rule], k: int, metric: str, look: int, seed: int) -> dict[str, Any]:
    agg = evaluation["aggregate"]
    metrics = {}
    for m in gate_metrics(k):
        if f"{m}_diff" in agg:
            d = agg[f"{m}_diff"]
            metrics[m] = _rounded({"old": agg[f"{m}_old"], "new": agg[f"{m}_new"], "diff": d["mean"], "low": d["low"],
                                   "high": d["high"], "verdict": agg.get("metrics", {}).get(m)})
    gate = {"metric": metric, **metrics.get(metric, {})}
    diffs = paired_diffs(evaluation, metric)
    if diffs:
        _, low, alpha = beats_old(diffs, 0.0, look, seed=seed)
        gate.update(anytime_low=low, look=look, alpha=round(alpha, 6), digest=digest_of(diffs))
    return {"passed": all(r.passed for r in rules), "rules": [r.as_dict() for r in rules], "metrics": metrics,
            "gate": gate, "queries": agg.get("queries", 0), "verdict": agg.get("verdict"),
            "segments": evaluation.get("segments") or {}}


@dataclass(frozen=True)
class ModeInputs:
    """What evaluating the serving modes needs: the store the quality is measured through (the writer during an
    apply: it reads the shadow it builds), the live population (searched) and the shadow (read by the cascade;
    None: embed every candidate), both recorded configs, the cutover's queries, the three embedding calls (queries
    with the old model, queries with the new one, passages with the new one), the policy, and the free pairs
    (None: no bridge). ``reader``: a store opened as readers in other processes open it, what a reader's cost is
    measured through (None: no cost measured); ``embed_candidates``: how a reader embeds a cascade's candidates
    (default ``embed_passages``); ``looks``: per mode, the digests of the evidence earlier evaluations of this build
    saw; ``memo``: what earlier evaluations left to reuse."""

    store: Any
    live: str
    shadow: str | None
    live_cfg: Any  # the live population's PipelineConfig
    new_cfg: Any  # the shadow's
    queries: list[Query]
    embed_old: Callable[[list[str]], Any]
    embed_new: Callable[[list[str]], Any]
    embed_passages: Callable[[list[str]], Any]
    serving: Any  # config.serving
    cutover: Any  # config.cutover
    pairs: PairSet | None
    k: int = 10
    seed: int = 0
    reader: Any = None
    embed_candidates: Callable[[list[str]], Any] | None = None
    looks: dict[str, list[str]] = field(default_factory=dict)
    memo: EvaluationMemo | None = None


def _evaluate_on_live(i: ModeInputs, store: Any, embed_old, embed_mode, search_new=None) -> dict:
    norm = partial(normalise, cfg=i.live_cfg.text.normaliser)
    return evaluate(store, i.live, i.live, i.queries, embed_old, embed_mode, k=i.k, seed=i.seed,
                    payload_old=i.live_cfg.payload, payload_new=i.live_cfg.payload, segments=i.cutover.segments,
                    bound=i.cutover.min_recall_delta, text_old=norm, text_new=norm, search_new=search_new,
                    latency_repeats=0)  # a mode's latency is not gated here (a cascade reports its own cost)


def cost_sample(queries: Sequence[Query], seed: int, n: int = COST_QUERIES) -> list[str]:
    """The query texts a reader's cost is measured on: ``n`` of them in a seeded order (the same every evaluation)."""
    texts = list(dict.fromkeys(q.text for q in queries))
    order = np.random.default_rng(seed).permutation(len(texts))
    return [texts[j] for j in order[:n]]


def evaluate_modes(i: ModeInputs, modes: Sequence[str] = ("bridge", "cascade")
                   ) -> tuple[dict[str, dict], Bridge | None, dict[str, Any]]:
    """Each of ``modes`` evaluated against ``old`` on the same queries and gated (:func:`mode_rules`), with what a
    reader pays for it measured through ``i.reader`` (each mode's ``cost``). Returns (evidence per mode, the bridge
    that was evaluated — of ``serving.bridge``'s kinds, the one whose gated metric ranked higher on the same
    evaluation — or None, and what a reader pays natively: :func:`measure_native`, ``{}`` without a reader)."""
    new_vid = _vector_id(i.new_cfg)
    memo = (i.memo or EvaluationMemo()).for_pair(i.live, _vector_id(i.live_cfg), new_vid)
    store = _LiveSearches(i.store, i.live, memo)
    embed_old, embed_new = memo.embedder("old", i.embed_old), memo.embedder("new", i.embed_new)
    metric = gate_metric(i.serving.metric, i.k)
    out: dict[str, dict] = {}
    chosen: Bridge | None = None
    normalize = bool(i.live_cfg.vector.normalize)
    texts = cost_sample(i.queries, i.seed)
    native = measure_native(i.reader, i.live, texts, memo, embed_old=i.embed_old, embed_new=i.embed_new,
                            k=i.k) if i.reader is not None else {}
    limit = _limit_ms(i.serving, native)[0] if i.reader is not None else None

    def reader_cost(kind: str, bridge: Bridge | None) -> dict | None:
        if i.reader is None:
            return None
        return measure_reader(ModeQuery(i.reader, i.live, kind, i.shadow, bridge, i.embed_old, i.embed_new,
                                        i.embed_candidates or i.embed_passages, i.serving.candidates, new_vid,
                                        i.live_cfg.payload, i.new_cfg.vector.distance), texts, memo, k=i.k,
                              limit_ms=limit)

    def gated(name: str, e: dict, extra: dict, cost: dict | None, pairs: int | None = None) -> dict:
        look = look_of(paired_diffs(e, metric), i.looks.get(name, ()))
        rules = mode_rules(e, i.serving, i.cutover, i.k, pairs=pairs, look=look, cost=cost, native=native, seed=i.seed)
        return {**_evidence(e, rules, i.k, metric, look, i.seed), **extra, **({"cost": cost} if cost else {})}

    if "bridge" in modes:
        n = i.pairs.n if i.pairs is not None else 0
        rules = mode_rules(None, i.serving, i.cutover, i.k, pairs=n)
        if not all(r.passed for r in rules) or i.pairs is None:
            out["bridge"] = {"passed": False, "rules": [r.as_dict() for r in rules], "pairs": n}
        else:
            kinds = BRIDGE_KINDS if i.serving.bridge == "auto" else (i.serving.bridge,)
            tried = []
            for kind in kinds:
                b = fit_bridge(i.pairs, kind, normalize=normalize, seed=i.seed)
                e = _evaluate_on_live(i, store, embed_old, lambda t, b=b: b.map(embed_new(t)))
                mean = e["aggregate"].get(f"{metric}_new", float("-inf"))
                tried.append((mean, -len(tried), b, e))
            _, _, chosen, e = max(tried, key=lambda t: (t[0], t[1]))
            out["bridge"] = gated("bridge", e, {"pairs": n, "bridge": chosen.describe(),
                                                "tried": [{"kind": b.kind, metric: round(float(m), 6)}
                                                          for m, _, b, _ in tried]},
                                  reader_cost("bridge", chosen), pairs=n)
    if "cascade" in modes:
        costs: list[dict] = []

        def search(old_vector, new_vector):
            hits, cost = cascade_rerank(store, i.live, i.shadow, old_vector, new_vector,
                                        candidates=i.serving.candidates, new_vector_id=new_vid,
                                        payload=i.live_cfg.payload, embed_passages=i.embed_passages,
                                        distance=i.new_cfg.vector.distance, cache=memo.candidates)
            costs.append(cost)
            return side_of_hits(hits, cost["ms"] / 1000, i.live_cfg.payload)

        e = _evaluate_on_live(i, store, embed_old, embed_new, search)
        out["cascade"] = gated("cascade", e, {"candidates": i.serving.candidates, "evaluated": _cost_summary(costs)},
                               reader_cost("cascade", None))
    return out, chosen, native


def _vector_id(cfg: Any) -> str:
    return identity_of(cfg).vector_id


def _cost_summary(costs: list[dict]) -> dict[str, Any]:
    """What the evaluation's own cascade read and embedded per query (in the evaluating process, with its store and
    its cache: not what a reader pays, which is ``cost``)."""
    if not costs:
        return {}
    n = len(costs)
    return {"queries": n, "candidates_per_query": round(sum(c["candidates"] for c in costs) / n, 3),
            "from_shadow_per_query": round(sum(c["from_shadow"] for c in costs) / n, 3),
            "embedded_per_query": round(sum(c["embedded"] for c in costs) / n, 3),
            "shadow_readable": all(c["shadow_readable"] for c in costs)}


MODE_NAMES = ("bridge", "cascade")


def choose_mode(modes: dict[str, dict], allowed: str) -> str:
    """The mode readers get: of the modes ``allowed`` (``serving.mode``: auto | old | bridge | cascade) that passed
    their gate, the one with the highest (anytime) lower bound of the gated metric (a tie goes to the bridge, which
    costs a matrix product where the cascade costs candidates); ``old`` when none passed."""
    ok = [m for m in MODE_NAMES if allowed in ("auto", m) and modes.get(m, {}).get("passed")]
    if not ok:
        return "old"
    low = lambda m: modes[m].get("gate", {}).get("anytime_low", modes[m].get("gate", {}).get("low", float("-inf")))  # noqa: E731
    return max(ok, key=lambda m: (low(m), m == "bridge"))


def near_boundary(low: float, high: float, bound: float, name: str = "serving.min_delta") -> str | None:
    """How near a recommendation is to flipping: when the lower bound is within a quarter of the interval's width of
    the ``bound`` it is judged against, a phrase saying by how much it clears (or misses) it; None when it is not
    near (another sample of the same size would most likely say the same)."""
    margin, width = low - bound, high - low
    if width <= 0 or abs(margin) > width / 4:
        return None
    return (f"a near call: its lower bound {'clears' if margin > 0 else 'misses'} {name} {bound:+.3f} by "
            f"{abs(margin):.3f}, against an interval {width:.3f} wide — another sample this size could decide the "
            "other way")


def recommend(full: dict | None, modes: dict[str, dict], serving: Any, k: int) -> dict[str, Any]:
    """What the forecast's evidence supports for a model change: ``bridge`` or ``cascade`` (the best mode that passes
    its gate — it beats old measurably: serve it while the build runs), else ``reindex now`` when the rebuild is
    measurably better on the gated metric (its lower bound clears ``serving.min_delta``; readers stay on ``old``
    until the cutover), else ``stay`` (the new model is not better: neither the rebuild nor any mode beats old). ``full``: the forecast's aggregate (new population − old); each mode's retained
    fraction of that gain is given where the gain is positive."""
    m = gate_metric(serving.metric, k)
    d = (full or {}).get(f"{m}_diff")
    numbers: dict[str, Any] = {}
    gain = d["mean"] if d else None
    if d:
        numbers["reindex"] = _rounded({"diff": d["mean"], "low": d["low"], "high": d["high"]})
    for name, e in modes.items():
        g = e.get("gate") or {}
        if "diff" in g:
            row = {"diff": g["diff"], "low": g["low"], "high": g["high"], "passed": bool(e.get("passed"))}
            if gain is not None and gain > 0:
                row["retained"] = round(g["diff"] / gain, 4)
            numbers[name] = row
        else:
            numbers[name] = {"passed": False, "why": "; ".join(r["detail"] for r in e.get("rules", [])
                                                                if not r["passed"])}
    for row in numbers.values():
        if "low" in row:
            row["margin"] = round(row["low"] - serving.min_delta, 6)
            near = near_boundary(row["low"], row["high"], serving.min_delta)
            if near:
                row["near"] = near
    best = choose_mode(modes, serving.mode)
    said = _near_said(numbers)
    if (d is None or d["low"] <= serving.min_delta) and best == "old":
        shown = f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d else "not measured"
        return {"recommendation": "stay", "metric": m, "numbers": numbers,
                "reason": f"the new model is not better: {m} new − old = {shown}, the lower bound does not clear "
                          f"{serving.min_delta:+.3f}, and no serving mode beats old{said}"}
    if best == "old":
        return {"recommendation": "reindex now", "metric": m, "numbers": numbers,
                "reason": f"the new model is better ({m} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]) and "
                          f"no serving mode passes its gate: build it, readers stay on old until the cutover{said}"}
    g = modes[best]["gate"]
    kept = numbers[best].get("retained")
    full_said = (f"the new model is better ({m} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])"
                 if d and d["low"] > serving.min_delta else
                 "the rebuild's own gain is not measurable on these queries"
                 + (f" ({m} {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])" if d else ""))
    return {"recommendation": best, "metric": m, "numbers": numbers,
            "reason": f"{full_said}, and {best} passes its gate ({g['diff']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] "
                      "over old" + (f", {kept:.0%} of the rebuild's gain" if kept is not None else "")
                      + f"): serve it while the new population builds{said}"}


# --------------------------------------------------------------------------------------------
# Doctor: the optional files of serving (the record, the bridges) and the shadow readers would follow
# --------------------------------------------------------------------------------------------


def check_serving(state: ObjectStore, index: str, damaged_records: Sequence[tuple[str, str]] = ()) -> list[Finding]:
    """What ``reindex doctor`` finds in serving's optional files: a serving record that is not a JSON object, a bridge
    file that does not load, the bridge the record names missing, and the record of the shadow it names damaged
    (``damaged_records``: (collection, why) of every population record that does not read). Readers serve the live
    population natively past each of them (logged once); each finding's detail says how to fix it."""
    books = Books(state, index)
    out: list[Finding] = []
    rec, damage = read_serving_checked(state, index)
    if damage is not None:
        out.append(Finding("serving-record-damaged", None, 1, (books.serving_key,),
                           f"{damage}: readers serve the live population natively; `reindex serving --evaluate` "
                           f"writes a good one (so do a cutover, a rollback and gc), or delete "
                           f"{books.describe(books.serving_key)}"))
    bad = []
    for key in state.list(books.bridges_prefix):
        bid = books.bridge_of(key)
        if bid is None:
            continue
        try:
            Bridge.from_bytes(state.get(key) or b"", key)
        except StateError as err:
            bad.append((key, str(err)))
    if bad:
        out.append(Finding("bridge-damaged", None, len(bad), tuple(k for k, _ in bad),
                           f"{len(bad)} bridge file(s) do not load ({bad[0][1]}): readers of a bridge serve the live "
                           f"population natively; delete {books.describe(bad[0][0])} and run `reindex serving "
                           "--evaluate` to fit it again"))
    if rec and rec.get("mode") == "bridge":
        bid = (rec.get("bridge") or {}).get("id")
        if bid and state.get(books.bridge_key(bid)) is None:
            out.append(Finding("bridge-missing", None, 1, (books.bridge_key(bid),),
                               f"the serving record names bridge {bid}, which is not in the state store: readers serve "
                               "the live population natively; `reindex serving --evaluate` fits it again"))
    for collection, why in damaged_records:
        named = bool(rec) and rec.get("shadow") == collection
        out.append(Finding("population-record-damaged", collection, 1, (books.population_key(collection),),
                           f"{why}" + (" — the serving record's shadow: readers serve the live population natively "
                                       "until it reads again" if named else "")))
    return out
