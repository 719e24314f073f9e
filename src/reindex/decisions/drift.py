"""The books against the store (DESIGN.md invariant 17): what ``reindex doctor`` checks, as :class:`Finding` values.

Two kinds of check, both pure over the state store, a vector store (a reader is enough) and an embedding function:

* :func:`check_population`: one population's collection against its chunk manifest. The counts, then the points
  of a sample of manifest rows (present, the row's doc id and fingerprint, the population's pipeline id, the
  dimension, a payload text that hashes to its fingerprint), a sample of the store's own points (listed in the
  manifest?), and the vectors of a few points re-embedded with the population's own vector half. ``full``: every
  manifest row, and every point of the store when the counts leave room for unlisted ones.
* :func:`check_books`: the index's records: the alias against the live record and the population states, runs
  with shard manifests and no done record, populations stuck in ``building``, collections without a record,
  staged shard results, a lock whose holder is gone.

Costs. The sampled check reads three columns of the chunk manifest part by part (point id, doc id, fingerprint:
the state store's side, ~0.3 CPU-s for two columns at a million rows; it keeps 8 bytes a point, for "is this stored
point listed?", and the sample), counts the store, retrieves ``sample`` points by id and scrolls ``sample`` more:
O(manifest columns + sample), never a scroll of the collection. ``full`` retrieves every listed point part
by part and scrolls the collection (payloads only) when its count says some point may be unlisted: O(index),
streaming; memory is one manifest part and the 8-byte id array. Vectors are re-embedded for ``embed_sample``
points in both modes: re-embedding every point costs what a rebuild costs.

Lines: one role, the checks and their tallies; the kinds are listed once, in :data:`KINDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from reindex.domain.kinds import PopulationState
from reindex.errors import ReindexError, StateError
from reindex.domain.identity import fingerprint, identity_of
from reindex.books.layout import Books
from reindex.books.locks import LockInfo
from reindex.books.manifests import (
    Population,
    read_chunk_manifest_columns,
    read_json,
    read_live_record,
)
from reindex.adapters.stores.objects import ObjectStore
from reindex.adapters.stores.payload import payload_text

__all__ = [
    "KINDS",
    "PLAN_FIXES",
    "VECTOR_MATCH",
    "StoreView",
    "Finding",
    "PopulationCheck",
    "Tally",
    "check_books",
    "check_population",
    "id_keys",
]

#: Every kind of drift, with what it means (the doctor's docs and ``--help`` list them from here).
KINDS: dict[str, str] = {
    "count-mismatch": "the collection holds another number of points than the chunk manifest lists",
    "missing-points": "points the chunk manifest lists are not in the collection",
    "unlisted-points": "points in the collection that the chunk manifest does not list",
    "stale-points": "a listed point holds another document or text (fingerprint) than its manifest row",
    "mixed-vector-ids": "points whose payload names another pipeline (text + vector id) than the population's",
    "payload-text-mismatch": "a point's payload text does not hash to its fingerprint (the payload was edited)",
    "wrong-dimension": "a point's vector has another dimension than the population's model",
    "vector-mismatch": "a point's vector is not what the population's model gives its text (another model's)",
    "state-contradicts-alias": "the alias, the live record and the population states disagree",
    "half-done-apply": "a run wrote shard manifests but no done record, and nothing finished after it",
    "stuck-building": "a population is recorded as building while no apply runs",
    "orphaned-collection": "a collection of the index in the store that no population record names",
    "staged-results": "staged shard writes or published shard results of a run no apply is running",
    "stale-lock": "the index lock is held by a process that is gone, or was not renewed for a whole lease",
}
#: The kinds a repair plan fixes (in place, in the live population); the others get advice.
PLAN_FIXES = frozenset({"missing-points", "unlisted-points", "stale-points", "mixed-vector-ids",
                        "payload-text-mismatch", "wrong-dimension", "vector-mismatch", "count-mismatch"})
#: Least cosine between a stored vector and its text re-embedded by the same model: the same model on another
#: device or batch gives ~0.9999; another model's vector is unrelated (~0 for the hash embedder, <0.9 for MiniLM
#: vs its static distillation).
VECTOR_MATCH = 0.98
EXAMPLES = 5
RETRIEVE_BATCH = 512


@dataclass(frozen=True, slots=True)
class Finding:
    """One kind of drift in one population (``population`` None: the index's own records)."""

    kind: str
    population: str | None
    count: int
    examples: tuple[str, ...]
    detail: str  # one line for people
    checked: int | None = None  # how many points were looked at for it (None: not a point check)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "population": self.population, "count": self.count,
                "examples": list(self.examples), "detail": self.detail, "checked": self.checked}


@dataclass
class Tally:
    """Point ids found per kind (first seen first), and what a repair needs: documents to write again, ids to
    delete."""

    ids: dict[str, dict[str, None]] = field(default_factory=dict)
    resync: set[str] = field(default_factory=set)
    delete: set[str] = field(default_factory=set)

    def add(self, kind: str, point_id: str, *, doc: str | None = None, delete: bool = False) -> None:
        self.ids.setdefault(kind, {})[point_id] = None
        if doc is not None:
            self.resync.add(doc)
        if delete:
            self.delete.add(point_id)


@dataclass(frozen=True, slots=True)
class PopulationCheck:
    """What :func:`check_population` found in one population."""

    collection: str
    findings: tuple[Finding, ...]
    resync: frozenset[str]  # documents whose points a repair writes again (embedded afresh)
    delete: frozenset[str]  # unlisted point ids a repair deletes
    points: int  # points the store holds
    listed: int  # rows the chunk manifest lists
    checked: int  # listed points looked at
    scanned: int  # store points looked at (listed or not)
    embedded: int  # vectors re-embedded and compared


def id_keys(ids: Sequence[str]) -> np.ndarray:
    """64-bit keys of UUID point ids (their first 16 hex digits), for a membership array of 8 bytes a point."""
    return np.fromiter((int(s[:8] + s[9:13] + s[14:18], 16) for s in ids), dtype=np.uint64, count=len(ids))


def _listed(keys: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """Whether each id is in the sorted key array ``keys``."""
    want = id_keys(ids)
    pos = np.searchsorted(keys, want)
    return (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == want) if len(keys) else np.zeros(len(ids), bool)


def check_population(store: Any, state: ObjectStore, rec: Population, *, full: bool = False, sample: int = 256,
                     embed_sample: int = 32, embed: Callable[[list[str]], Any] | None = None,
                     seed: int = 0) -> PopulationCheck:
    """The collection of ``rec`` against its chunk manifest (see the module docstring). ``embed``: texts → vectors
    with the population's own vector half (None: no vector is re-embedded)."""
    cfg = rec.config
    name = rec.collection
    pipelines = {rec.identity.get("pipeline_id"), identity_of(cfg).pipeline_id} - {None}
    vector_ids = [v for v in dict.fromkeys((rec.identity.get("vector_id"), rec.vector_id)) if v]
    dim = cfg.vector.dimension
    tally = Tally()
    rng = np.random.default_rng(seed)
    key_parts: list[np.ndarray] = []
    picked: list[tuple[float, str, str, str]] = []  # (random key, point id, doc id, fingerprint): the sample
    passed: dict[str, Any] = {}  # point id → point that passed every check: candidates for the vector check
    counts = {"listed": 0, "checked": 0}

    def look(rows: Sequence[tuple[str, str, str]], keep: set[str]) -> None:
        for i in range(0, len(rows), RETRIEVE_BATCH):
            batch = rows[i:i + RETRIEVE_BATCH]
            points = {p.id: p for p in store.retrieve(name, [r[0] for r in batch], with_vectors=True)}
            for pid, doc, fp in batch:
                counts["checked"] += 1
                p = points.get(pid)
                if p is None:
                    tally.add("missing-points", pid, doc=doc)
                elif _check_listed(tally, p, doc, fp, pipelines, vector_ids, dim, cfg) and pid in keep:
                    passed[pid] = p

    for cols in read_chunk_manifest_columns(state, rec.index, name, ["point_id", "doc_id", "fingerprint"]):
        rows = list(zip(cols["point_id"], cols["doc_id"], cols["fingerprint"]))
        counts["listed"] += len(rows)
        key_parts.append(id_keys(cols["point_id"]))
        if full:
            look(rows, set())  # part by part: memory is one part
        # The sample: the rows with the ``sample`` smallest random keys over every part (with ``full``, the
        # points whose vectors are re-embedded are drawn from it too).
        keys = rng.random(len(rows))
        picked = sorted(picked + [(float(keys[j]), *rows[j]) for j in np.argsort(keys)[:sample]])[:sample]
    drawn = [(pid, doc, fp) for _key, pid, doc, fp in picked]
    embed_ids = {pid for pid, _doc, _fp in drawn[:embed_sample]}
    if not full:
        look(drawn, embed_ids)
    elif embed is not None and embed_sample > 0:  # fetched again: the full pass keeps no point
        flagged = {pid for ids in tally.ids.values() for pid in ids}
        passed.update((p.id, p) for p in store.retrieve(name, sorted(embed_ids - flagged), with_vectors=True))
    keys = np.sort(np.concatenate(key_parts)) if key_parts else np.zeros(0, np.uint64)
    listed, points = counts["listed"], store.count(name)
    # Unlisted points: a sample of the store's own (point ids are hashes, so the first ones in id order are a
    # uniform sample); with ``full``, every point, unless the counts say every stored point is a listed one.
    present = listed - len(tally.ids.get("missing-points", {}))
    limit = None if full else sample
    scanned = 0
    if not (full and points == present):
        stream = store.scroll(name, with_vectors=False, batch=2048 if full else max(16, min(sample, 2048)))
        for page in _pages(stream if limit is None else islice(stream, limit), 2048):
            scanned += len(page)
            for p, ok in zip(page, _listed(keys, [p.id for p in page])):
                if not ok:
                    tally.add("unlisted-points", p.id, delete=True)
                    if (p.payload or {}).get("pipeline_id") not in pipelines:
                        tally.add("mixed-vector-ids", p.id)
    embedded = _check_vectors(tally, passed, embed, cfg) if embed is not None and embed_sample > 0 else 0
    findings = _findings(tally, name, points, listed, counts["checked"], scanned, embedded)
    return PopulationCheck(name, tuple(findings), frozenset(tally.resync), frozenset(tally.delete), points, listed,
                           counts["checked"], scanned, embedded)


def _pages(items: Iterable[Any], size: int) -> Iterable[list[Any]]:
    page: list[Any] = []
    for item in items:
        page.append(item)
        if len(page) >= size:
            yield page
            page = []
    if page:
        yield page


def _check_listed(tally: Tally, p: Any, doc: str, fp: str, pipelines: set[str], vector_ids: list[str], dim: int,
                  cfg: Any) -> bool:
    """One stored point against its manifest row (doc id, fingerprint); True when it passed every check."""
    payload = p.payload or {}
    if payload.get("pipeline_id") not in pipelines:
        tally.add("mixed-vector-ids", p.id, doc=doc)
        return False
    if payload.get("fingerprint") != fp or payload.get("doc_id") != doc:
        tally.add("stale-points", p.id, doc=doc)
        return False
    text = payload_text(payload, cfg.payload)
    if not any(fingerprint(v, text) == fp for v in vector_ids):
        tally.add("payload-text-mismatch", p.id, doc=doc)
        return False
    if p.vector is None or (dim and len(p.vector) != dim):
        tally.add("wrong-dimension", p.id, doc=doc)
        return False
    return True


def _check_vectors(tally: Tally, passed: dict[str, Any], embed: Callable[[list[str]], Any], cfg: Any) -> int:
    """Re-embed the payload texts of ``passed`` points and compare with their stored vectors (cosine)."""
    if not passed:
        return 0
    pts = list(passed.values())
    fresh = np.asarray(embed([payload_text(p.payload, cfg.payload) for p in pts]), dtype=np.float64)
    stored = np.asarray([np.asarray(p.vector, dtype=np.float64) for p in pts])
    norms = np.maximum(np.linalg.norm(fresh, axis=1) * np.linalg.norm(stored, axis=1), 1e-12)
    for p, cos in zip(pts, np.sum(fresh * stored, axis=1) / norms):
        if cos < VECTOR_MATCH:
            tally.add("vector-mismatch", p.id, doc=p.payload.get("doc_id"))
    return len(pts)


def _findings(tally: Tally, name: str, points: int, listed: int, checked: int, scanned: int,
              embedded: int) -> list[Finding]:
    out = []
    if points != listed:
        out.append(Finding("count-mismatch", name, abs(points - listed), (f"store {points}", f"manifest {listed}"),
                           f"{name} holds {points:,} points, its chunk manifest lists {listed:,}"))
    listed_s, stored_s = f"{checked:,} listed points", f"{scanned:,} stored points"
    seen = {"missing-points": (checked, listed_s), "stale-points": (checked, listed_s),
            "payload-text-mismatch": (checked, listed_s), "wrong-dimension": (checked, listed_s),
            "unlisted-points": (scanned, stored_s), "mixed-vector-ids": (checked + scanned, f"{checked:,} listed and {stored_s}"),
            "vector-mismatch": (embedded, f"{embedded:,} vectors re-embedded")}
    for kind in KINDS:
        ids = tally.ids.get(kind)
        if ids:
            n, what = seen[kind]
            out.append(Finding(kind, name, len(ids), tuple(islice(ids, EXAMPLES)),
                               f"{len(ids):,} of {what} in {name}: {KINDS[kind]}", n))
    return out


# --------------------------------------------------------------------------------------------
# The index's own records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreView:
    """What :func:`check_books` reads besides the state store: the store's view and the lock's."""

    alias: str | None  # the collection the index's alias points at in the store
    collections: tuple[str, ...]  # the store's collections
    lock: LockInfo
    lock_age: float  # seconds since the lock's current version was written (the store's clock)
    lock_gone: bool  # its holder is provably gone (reindex.foundation.processes)


def check_books(state: ObjectStore, index: str, records: Sequence[Population], view: StoreView) -> tuple[list[Finding], list[str]]:
    """Findings about the index's records (see the module docstring), and notes: what was not judged and why."""
    findings: list[Finding] = []
    notes: list[str] = []
    recs = {r.collection: r for r in records}
    findings += _alias_findings(state, index, recs, view.alias)
    lock = view.lock
    stale = lock.held and (lock.stale(view.lock_age) or view.lock_gone)
    if lock.corrupt:
        findings.append(Finding("stale-lock", None, 1, (f"corrupt: {lock.reason}",),
                                f"the lock file of {index} is corrupt ({lock.reason})"))
    elif stale:
        why = "its holder is gone" if view.lock_gone else f"not renewed for {view.lock_age:,.0f} s (lease {lock.ttl} s)"
        findings.append(Finding("stale-lock", None, 1, (f"{lock.owner} ({lock.purpose})",),
                                f"the lock of {index} is held by {lock.owner} ({lock.purpose}): {why}"))
    writing = lock.held and not stale
    if writing:
        notes.append(f"index {index} is locked by {lock.owner} ({lock.purpose}): runs, building populations and "
                     "staged results are not judged while a writer works, and what it writes may differ from the "
                     "books for a moment")
    else:
        findings += _run_findings(state, index, recs)
        findings += _staged_findings(state, index)
        stuck = [r.collection for r in records if r.state is PopulationState.BUILDING]
        for c in stuck:
            findings.append(Finding("stuck-building", c, 1, (c,), f"{c} is recorded as building and no apply runs"))
    orphans = [c for c in view.collections if c.startswith(f"{index}__") and c not in recs]
    for c in orphans:
        findings.append(Finding("orphaned-collection", c, 1, (c,), f"collection {c} has no population record"))
    return findings, notes


def _alias_findings(state: ObjectStore, index: str, recs: dict[str, Population], alias: str | None) -> list[Finding]:
    problems: list[tuple[str | None, str]] = []
    try:
        live = read_live_record(state, index)
    except StateError as err:
        live, problems = None, [(None, str(err))]
    named = (live or {}).get("collection") if isinstance(live, dict) else None
    if read_json(state, Books(state, index).intent_key):
        problems.append((alias, f"an alias move of {index} was interrupted and is still pending"))
    if alias is not None and alias != named:
        problems.append((alias, f"the alias {index} points at {alias} but the live record names {named or 'nothing'}"))
    if alias is not None and alias not in recs:
        problems.append((alias, f"the alias {index} points at {alias}, which has no population record"))
    if named is not None and named in recs and recs[named].state is not PopulationState.LIVE:
        problems.append((named, f"{named} is the live record's population but its state is {recs[named].state}"))
    for c, r in recs.items():
        if r.state is PopulationState.LIVE and c != named:
            problems.append((c, f"{c} is recorded as live but the live record names {named or 'nothing'}"))
    return [Finding("state-contradicts-alias", pop, 1, (line,), line) for pop, line in problems]


def _run_findings(state: ObjectStore, index: str, recs: dict[str, Population]) -> list[Finding]:
    """Runs with shard manifests and no done record, unless an apply of the same population finished after them."""
    runs: dict[tuple[str, str], list[str]] = {}
    books = Books(state, index)
    for key in state.list(books.populations_prefix):
        found = books.shard_manifest_of(key)
        if found is not None:
            runs.setdefault(found, []).append(key)
    finished: dict[str, float] = {}  # collection → when its last finished apply ended (0: a record without time)
    done: set[str] = set()
    for key in state.list(books.runs_prefix):
        run, rest = books.run_of(key) or ("", "")
        if books.is_apply_record(rest):
            done.add(run)
            try:
                rec = read_json(state, key) or {}
            except ReindexError:
                continue
            coll = rec.get("collection")
            if isinstance(coll, str):
                finished[coll] = max(finished.get(coll, 0.0), float(rec.get("at") or 0.0))
    out = []
    for (coll, run), keys in sorted(runs.items()):
        if run in done:
            continue
        last = max(float((_json_or_empty(state, k)).get("at") or 0.0) for k in keys)
        if finished.get(coll, 0.0) > last:
            continue  # a later apply of this population finished: what this run left undone was done since
        out.append(Finding("half-done-apply", coll, 1, (run,),
                           f"run {run[:12]} of {coll} wrote {len(keys)} shard manifest(s) and no done record"))
    return out


def _json_or_empty(state: ObjectStore, key: str) -> dict:
    try:
        value = read_json(state, key)
    except ReindexError:
        return {}
    return value if isinstance(value, dict) else {}


def _staged_findings(state: ObjectStore, index: str) -> list[Finding]:
    """Staged writes (``runs/<run>/staging/``) and published results (``runs/<run>/results-<token>/``) left."""
    left: dict[str, list[str]] = {}
    books = Books(state, index)
    prefix = books.runs_prefix
    for key in state.list(prefix):
        run, rest = books.run_of(key) or ("", "")
        if books.is_staged(rest):
            left.setdefault(run, []).append(key)
    return [Finding("staged-results", None, len(keys), (run,),
                    f"run {run[:12]} left {len(keys)} staged object(s) under {prefix}{run}/")
            for run, keys in sorted(left.items())]
