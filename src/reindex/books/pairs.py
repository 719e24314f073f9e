"""Free pairs: the (old vector, new vector) of one chunk text under two models, kept as a vector-half change builds.

A shadow build of a ``pipeline-scoped/vector`` change embeds every chunk text with the new model while the live
population already holds the old model's vector of the same text: the pairs a bridge is fitted from cost nothing
but two reads. When a shard of such a build commits (:func:`reindex.engine.execution.write_shard_outputs`, before its
chunk-manifest part and shard manifest: presence of the manifest means its pairs are there), up to ``per_shard``
of its chunks are drawn and both vectors are read back by point id:

* the new point (its vector and payload, hence its text) from the shadow, which the shard has just written;
* the old point of the *same document and the same text*: its id is ``point_id(doc, H(old vector id ‖ text),
  occurrence)`` — the deterministic point ids make it a computation, not a search or a manifest scan. A text that
  the old population does not hold (another chunker cut it) has no old point and gives no pair.

Nothing is embedded. The draw is deterministic (the chunks whose point ids hash lowest), so a shard redone after a
crash writes the same pairs. Pairs are stored in the state store beside the run's shard manifests
(``runs/<run>/pairs/<shard>.npz``), so any process can read them during the build — a reader of the embedded
store cannot see an unpublished shadow, but it can read the state store. Cost per shard: two ``retrieve`` calls of
``per_shard`` points and one state write of ``per_shard × (d_old + d_new) × 4`` bytes (655 KB a shard at 4,096
pairs in 16 shards, 384 + 256 dimensions); a bridge evaluation reads every part once.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reindex.domain.identity import fingerprint, point_id
from reindex.books.layout import Books
from reindex.books.manifests import ManifestRow, pairs_key
from reindex.adapters.stores.objects import ObjectStore
from reindex.adapters.stores.payload import payload_text

__all__ = ["PAIRS_VERSION", "PairSet", "draw", "occurrences", "pairs_from_points", "per_shard", "read_pairs",
           "record_shard_pairs", "runs_with_pairs", "sample_points"]

PAIRS_VERSION = 1
#: How far a chunk's occurrence in its document is searched when the old point id is recomputed from a hit.
MAX_OCCURRENCE = 8


@dataclass(frozen=True)
class PairSet:
    """Pairs of one shadow build: row i of ``old`` and of ``new`` are the two models' vectors of one chunk text."""

    old: np.ndarray  # (n, d_old) float32: the live population's vectors
    new: np.ndarray  # (n, d_new) float32: the shadow's vectors
    old_ids: tuple[str, ...]
    new_ids: tuple[str, ...]
    shards: tuple[int, ...]  # the shards whose pairs these are
    old_vector_id: str
    new_vector_id: str

    @property
    def n(self) -> int:
        return int(self.old.shape[0])

    def first(self, n: int) -> "PairSet":
        """The first ``n`` pairs (shard order, then each shard's draw order): what a build had after fewer pairs."""
        return PairSet(self.old[:n], self.new[:n], self.old_ids[:n], self.new_ids[:n], self.shards,
                       self.old_vector_id, self.new_vector_id)


def per_shard(total: int, shards: int) -> int:
    """Pairs each shard keeps so that a whole build keeps about ``total``."""
    return math.ceil(total / max(shards, 1)) if total > 0 else 0


def _rank(point: str) -> bytes:
    return hashlib.blake2b(point.encode(), digest_size=8).digest()


def draw(rows: Iterable[ManifestRow], m: int) -> list[ManifestRow]:
    """The ``m`` rows whose point ids hash lowest (a deterministic reservoir: the same rows on every run)."""
    return sorted(rows, key=lambda r: _rank(r.point_id))[:m] if m > 0 else []


def occurrences(rows: Iterable[ManifestRow]) -> dict[str, int]:
    """Point id → how many earlier chunks of its document (in ordinal order) have its fingerprint: the
    occurrence its point id was made with (:func:`reindex.domain.identity.point_ids`)."""
    by_doc: dict[str, list[ManifestRow]] = {}
    for r in rows:
        by_doc.setdefault(r.doc_id, []).append(r)
    out: dict[str, int] = {}
    for doc_rows in by_doc.values():
        seen: dict[str, int] = {}
        for r in sorted(doc_rows, key=lambda r: r.ordinal):
            out[r.point_id] = seen.get(r.fingerprint, 0)
            seen[r.fingerprint] = out[r.point_id] + 1
    return out


def sample_points(points: Iterable[Any], m: int) -> tuple[list[Any], dict[str, int]]:
    """(the ``m`` points of a whole population whose ids hash lowest, each point's occurrence as
    :func:`occurrences` finds it from the payloads' doc id, ordinal and fingerprint): the forecast's pairs."""
    rows = [ManifestRow(str(p.payload.get("doc_id", "")), "", int(p.payload.get("ordinal", 0)),
                        str(p.payload.get("fingerprint", "")), 0, str(p.id)) for p in points]
    by_id = {str(p.id): p for p in points}
    return [by_id[r.point_id] for r in draw(rows, m)], occurrences(rows)


def pairs_from_points(store: Any, old_collection: str, new_points: Sequence[Any], occurrence: dict[str, int],
                      old_vector_id: str, payload: Any) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """(old ids, new ids, old vectors, new vectors) for ``new_points`` (points of the new population, with vectors
    and payloads) whose text the old population holds in the same document: each one's old point id is computed
    from its document, ``H(old vector id ‖ its text)`` and ``occurrence[new id]``, and read by id."""
    wanted: dict[str, tuple[Any, str]] = {}  # old id → (new point, old fingerprint)
    for p in new_points:
        if p.vector is None:
            continue
        text = payload_text(p.payload, payload)
        fp = fingerprint(old_vector_id, text)
        wanted[point_id(str(p.payload.get("doc_id", "")), fp, occurrence.get(str(p.id), 0))] = (p, fp)
    found = {q.id: q for q in store.retrieve(old_collection, sorted(wanted), with_vectors=True)} if wanted else {}
    old_ids, new_ids, old_vecs, new_vecs = [], [], [], []
    for oid, (p, fp) in wanted.items():
        q = found.get(oid)
        if q is None or q.vector is None or q.payload.get("fingerprint") != fp:
            continue  # not the same text in the old population (another cut of the document)
        old_ids.append(oid)
        new_ids.append(str(p.id))
        old_vecs.append(np.asarray(q.vector, dtype=np.float32))
        new_vecs.append(np.asarray(p.vector, dtype=np.float32))
    return (old_ids, new_ids, np.stack(old_vecs) if old_vecs else np.zeros((0, 0), np.float32),
            np.stack(new_vecs) if new_vecs else np.zeros((0, 0), np.float32))


def _bytes(old_ids: list[str], new_ids: list[str], old: np.ndarray, new: np.ndarray, meta: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, old=old.astype(np.float32), new=new.astype(np.float32), old_ids=np.array(old_ids, dtype="U64"),
             new_ids=np.array(new_ids, dtype="U64"), meta=np.array(json.dumps(meta, sort_keys=True)))
    return buf.getvalue()


def record_shard_pairs(state: ObjectStore, store: Any, *, index: str, target: str, old: str, run: str, shard: int,
                       rows: Sequence[ManifestRow], m: int, old_vector_id: str, new_vector_id: str,
                       payload: Any) -> int:
    """Draw ``m`` of a committed shard's chunks, read both vectors of each back (nothing embedded) and store the
    pairs beside the run's shard manifests. Returns how many pairs were kept."""
    picked = draw(rows, m)
    if not picked:
        return 0
    occ = occurrences(rows)
    new_points = store.retrieve(target, [r.point_id for r in picked], with_vectors=True)
    old_ids, new_ids, old_vecs, new_vecs = pairs_from_points(store, old, new_points, occ, old_vector_id, payload)
    meta = {"version": PAIRS_VERSION, "shard": shard, "old_vector_id": old_vector_id,
            "new_vector_id": new_vector_id, "drawn": len(picked), "pairs": len(old_ids)}
    state.put(pairs_key(index, target, run, shard), _bytes(old_ids, new_ids, old_vecs, new_vecs, meta))
    return len(old_ids)


def runs_with_pairs(state: ObjectStore, index: str, collection: str) -> dict[str, int]:
    """Run (plan hash) → how many shards of it have stored pairs."""
    books = Books(state, index)
    out: dict[str, int] = {}
    for key in state.list(books.population_runs_prefix(collection)):
        found = books.population_run_file(collection, key)
        if found is not None and found[1] == "pairs":
            out[found[0]] = out.get(found[0], 0) + 1
    return out


def read_pairs(state: ObjectStore, index: str, collection: str, run: str, *, limit: int | None = None) -> PairSet | None:
    """Every stored pair of run ``run`` of ``collection``, in shard order (at most ``limit``); None when none."""
    prefix = Books(state, index).pairs_prefix(collection, run)
    olds, news, oids, nids, shards = [], [], [], [], []
    vids: tuple[str, str] | None = None
    for key in sorted(k for k in state.list(prefix) if k.endswith(".npz")):
        data = state.get(key)
        if data is None:
            continue
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if z["old"].shape[0] == 0:
                continue
            olds.append(z["old"])
            news.append(z["new"])
            oids += [str(x) for x in z["old_ids"]]
            nids += [str(x) for x in z["new_ids"]]
        shards.append(int(meta["shard"]))
        vids = vids or (meta["old_vector_id"], meta["new_vector_id"])
    if not olds or vids is None:
        return None
    old, new = np.concatenate(olds), np.concatenate(news)
    out = PairSet(old, new, tuple(oids), tuple(nids), tuple(shards), vids[0], vids[1])
    return out.first(limit) if limit is not None else out
