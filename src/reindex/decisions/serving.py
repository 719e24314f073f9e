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
from reindex.books.manifests import bridge_key
from reindex.books.pairs import MAX_OCCURRENCE, PairSet
from reindex.adapters.sources.extract import normalise
from reindex.adapters.stores.objects import ObjectStore
from reindex.adapters.stores.payload import payload_text
from reindex.adapters.stores.vectors import Hit

__all__ = ["BRIDGE_KINDS", "MODES", "RIDGE_GRID", "Bridge", "ModeInputs", "cascade_rerank", "choose_mode",
           "evaluate_modes", "fit_bridge", "fit_procrustes", "fit_ridge", "gate_metric", "load_bridge",
           "mode_rules", "near_boundary", "recommend", "store_bridge"]

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
        except (ValueError, KeyError, OSError) as err:
            raise StateError(f"{where}: not a readable bridge ({err}); run `reindex serving --evaluate` to fit "
                             "it again") from None


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
    its document and text have there; one the shadow does not hold yet (or cannot be read from this process: an
    unpublished shadow of the embedded store) is embedded with ``embed_passages``. ``cache`` (new fingerprint →
    vector): vectors already embedded, shared across calls (an evaluation); the cost counts what a reader without
    it embeds. Returns (hits, cost: candidates, from_shadow, embedded, shadow_readable, ms)."""
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
            readable = False  # not visible here (an unpublished shadow of the embedded store): embed instead
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


# --------------------------------------------------------------------------------------------
# The gate of a serving mode, and evaluating the modes on the cutover's queries
# --------------------------------------------------------------------------------------------


def gate_metric(metric: str, k: int) -> str:
    """The evaluation's name of ``serving.metric`` at depth ``k``."""
    return "mrr" if metric == "mrr" else f"{metric}_at_{k}"


def mode_rules(evaluation: dict | None, serving: Any, cutover: Any, k: int, *, pairs: int | None = None) -> list[Rule]:
    """The rules a mode must pass, on its evaluation against ``old`` (None: not evaluated). ``pairs``: a bridge's
    free pairs (checked first; too few and nothing else is evaluated)."""
    rules = []
    if pairs is not None:
        rules.append(Rule("pairs", pairs >= serving.min_pairs,
                          f"{pairs:,} free pairs; a bridge is fitted from at least {serving.min_pairs:,}"))
    if evaluation is None:
        return rules
    agg = evaluation["aggregate"]
    m = gate_metric(serving.metric, k)
    d = agg.get(f"{m}_diff")
    if d is None:
        rules.append(Rule(f"{m} beats old", False, f"no labelled query measured {m}"))
    else:
        rules.append(Rule(f"{m} beats old", d["low"] > serving.min_delta,
                          f"{m} mode − old = {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] over {d['n']} "
                          f"queries; the lower bound must be above {serving.min_delta:+.3f}"))
    if "verdict" in agg:
        rules.append(evidence_rule(agg, _NEVER_BY_CEILING, k))
    rules.extend(segment_rules(evaluation.get("segments") or {}, cutover, k))
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


def _evidence(evaluation: dict, rules: list[Rule], k: int, metric: str) -> dict[str, Any]:
    agg = evaluation["aggregate"]
    metrics = {}
    for m in gate_metrics(k):
        if f"{m}_diff" in agg:
            d = agg[f"{m}_diff"]
            metrics[m] = _rounded({"old": agg[f"{m}_old"], "new": agg[f"{m}_new"], "diff": d["mean"], "low": d["low"],
                                   "high": d["high"], "verdict": agg.get("metrics", {}).get(m)})
    return {"passed": all(r.passed for r in rules), "rules": [r.as_dict() for r in rules], "metrics": metrics,
            "gate": {"metric": metric, **metrics.get(metric, {})}, "queries": agg.get("queries", 0),
            "verdict": agg.get("verdict"), "segments": evaluation.get("segments") or {}}


@dataclass(frozen=True)
class ModeInputs:
    """What evaluating the serving modes needs: the store, the live population (searched) and the shadow (read by
    the cascade; None: embed every candidate), both recorded configs, the cutover's queries, the three embedding
    calls (queries with the old model, queries with the new one, passages with the new one), the policy, and the
    free pairs (None: no bridge)."""

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


def _memo(embed: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
    seen: dict[tuple[str, ...], Any] = {}

    def call(texts: list[str]) -> Any:
        key = tuple(texts)
        if key not in seen:
            seen[key] = np.asarray(embed(list(texts)), dtype=np.float32)
        return seen[key]

    return call


def _evaluate_on_live(i: ModeInputs, embed_old, embed_mode, search_new=None) -> dict:
    norm = partial(normalise, cfg=i.live_cfg.text.normaliser)
    return evaluate(i.store, i.live, i.live, i.queries, embed_old, embed_mode, k=i.k, seed=i.seed,
                    payload_old=i.live_cfg.payload, payload_new=i.live_cfg.payload, segments=i.cutover.segments,
                    bound=i.cutover.min_recall_delta, text_old=norm, text_new=norm, search_new=search_new,
                    latency_repeats=0)  # a mode's latency is not gated here (a cascade reports its own cost)


def evaluate_modes(i: ModeInputs, modes: Sequence[str] = ("bridge", "cascade")) -> tuple[dict[str, dict], Bridge | None]:
    """Each of ``modes`` evaluated against ``old`` on the same queries and gated (:func:`mode_rules`). Returns
    (evidence per mode, the bridge that was evaluated — of ``serving.bridge``'s kinds, the one whose gated metric
    ranked higher on the same evaluation — or None)."""
    embed_old = _memo(i.embed_old)
    embed_new = _memo(i.embed_new)
    metric = gate_metric(i.serving.metric, i.k)
    out: dict[str, dict] = {}
    chosen: Bridge | None = None
    normalize = bool(i.live_cfg.vector.normalize)
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
                e = _evaluate_on_live(i, embed_old, lambda t, b=b: b.map(embed_new(t)))
                mean = e["aggregate"].get(f"{metric}_new", float("-inf"))
                tried.append((mean, -len(tried), b, e))
            _, _, chosen, e = max(tried, key=lambda t: (t[0], t[1]))
            rules = mode_rules(e, i.serving, i.cutover, i.k, pairs=n)
            out["bridge"] = {**_evidence(e, rules, i.k, metric), "pairs": n, "bridge": chosen.describe(),
                             "tried": [{"kind": b.kind, metric: round(float(m), 6)} for m, _, b, _ in tried]}
    if "cascade" in modes:
        cache: dict[str, np.ndarray] = {}
        costs: list[dict] = []
        new_vid = _vector_id(i.new_cfg)

        def search(old_vector, new_vector):
            hits, cost = cascade_rerank(i.store, i.live, i.shadow, old_vector, new_vector,
                                        candidates=i.serving.candidates, new_vector_id=new_vid,
                                        payload=i.live_cfg.payload, embed_passages=i.embed_passages,
                                        distance=i.new_cfg.vector.distance, cache=cache)
            costs.append(cost)
            return side_of_hits(hits, cost["ms"] / 1000, i.live_cfg.payload)

        e = _evaluate_on_live(i, embed_old, embed_new, search)
        rules = mode_rules(e, i.serving, i.cutover, i.k)
        out["cascade"] = {**_evidence(e, rules, i.k, metric), "candidates": i.serving.candidates,
                          "cost": _cost_summary(costs)}
    return out, chosen


def _vector_id(cfg: Any) -> str:
    return identity_of(cfg).vector_id


def _cost_summary(costs: list[dict]) -> dict[str, Any]:
    """A cascade query's cost, per query: candidates, read from the shadow, embedded on the fly, milliseconds."""
    if not costs:
        return {}
    n = len(costs)
    ms = sorted(c["ms"] for c in costs)
    return {"queries": n, "candidates_per_query": round(sum(c["candidates"] for c in costs) / n, 3),
            "from_shadow_per_query": round(sum(c["from_shadow"] for c in costs) / n, 3),
            "embedded_per_query": round(sum(c["embedded"] for c in costs) / n, 3),
            "ms_p50": round(ms[n // 2], 3), "ms_mean": round(sum(ms) / n, 3),
            "shadow_readable": all(c["shadow_readable"] for c in costs)}


def choose_mode(modes: dict[str, dict], allowed: str) -> str:
    """The mode readers get: of the modes ``allowed`` (``serving.mode``: auto | old | bridge | cascade) that passed
    their gate, the one with the highest lower bound of the gated metric (a tie goes to the bridge, which costs a
    matrix product where the cascade costs candidates); ``old`` when none passed."""
    ok = [m for m in ("bridge", "cascade") if allowed in ("auto", m) and modes.get(m, {}).get("passed")]
    if not ok:
        return "old"
    return max(ok, key=lambda m: (modes[m].get("gate", {}).get("low", float("-inf")), m == "bridge"))


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
