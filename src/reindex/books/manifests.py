"""State kept in the object store: population records, chunk manifests, calibration.

Where each of them lives is :class:`reindex.books.layout.Books`'s business (every key is spelled there).

A chunk manifest row: doc_id, content_hash, ordinal, fingerprint, tokens, point_id. It lets planning
and catch-up run without scrolling the vector store.

Chunk-text parts (``text.rechunk: sticky`` only) map fingerprint → chunk text for the fingerprints of the
manifest part of the same name: sticky re-chunking needs an edited document's previous chunk texts,
and the manifest holds only their fingerprints. They are content-addressed (a fingerprint is a digest of
its text), written *before* their manifest part and holding the texts of both the part they replace and
the new one, so whichever manifest part is current after a crash between the two writes, its texts are
there.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from reindex.domain.config import PipelineConfig, config_from_dict
from reindex.domain.kinds import PopulationState, check_transition
from reindex.errors import StateError
from reindex.domain.identity import digest_json as _digest_json, identity_of, payload_id_of_record
from reindex.adapters.stores.objects import ObjectStore
from reindex.foundation.tables import TableError, columns_from_parquet, parquet_from_columns
from reindex.books.layout import Books, shard_name

# Column → Parquet type of a chunk-text part.
CHUNK_TEXT_COLUMNS = {"fingerprint": "string", "text": "string"}
# Column → Parquet type of a chunk manifest part.
CHUNK_COLUMNS = {"doc_id": "string", "content_hash": "string", "ordinal": "int32", "fingerprint": "string",
                 "tokens": "int32", "point_id": "string"}


def read_json(store: ObjectStore, key: str) -> dict | None:
    data = store.get(key)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as err:
        raise StateError(f"{store.describe()}/{key}: not valid JSON ({err}); restore it or delete it") from None


def write_json(store: ObjectStore, key: str, value: Any) -> None:
    store.put(key, (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode())


@dataclass(frozen=True)
class Population:
    """One population as a value: its collection, state and identity, and the resolved config that built it
    (both halves, the payload contract, the shard layout), read once from the state store and parsed once on
    first use (:attr:`config`). Readers embed queries with its vector half, never the config file's
    (invariant 14); writers build, sync and verify it under its own config."""

    index: str
    collection: str
    config_json: dict  # the resolved PipelineConfig as recorded (JSON); :attr:`config` is it parsed
    identity: dict  # Identity.as_dict() at build time
    state: PopulationState  # see reindex.domain.kinds: building → ready → live → retired → deleting
    created_at: float
    updated_at: float

    @functools.cached_property
    def config(self) -> PipelineConfig:
        """The recorded config, parsed (once per value)."""
        return config_from_dict(self.config_json, f"population {self.collection}", recorded=True)

    @property
    def vector_id(self) -> str:
        """The vector id of the recorded vector half, as this version computes it (see ``identity_of``)."""
        return identity_of(self.config).vector_id

    @property
    def payload_id(self) -> str:
        """The payload contract's id of the recorded config (the legacy id for a record without one)."""
        return payload_id_of_record(self.config_json)

    def governs(self, cfg: PipelineConfig) -> PipelineConfig:
        """The config an in-place sync of this population runs under while ``cfg`` (the config file) names
        another pipeline: ``cfg``'s location, operational and policy sections, with this population's text
        half, vector half, payload contract and metadata fields (what its points were built with), so that
        document changes reach the live index without waiting for the pipeline change (seed 001's two
        tickets)."""
        own = self.config
        source = cfg.source.model_copy(update={"metadata_fields": list(own.source.metadata_fields)})
        return cfg.model_copy(update={"text": own.text, "vector": own.vector, "payload": own.payload,
                                      "source": source})

    def with_state(self, state: PopulationState, *, at: float | None = None) -> "Population":
        """The same population in ``state`` (updated now, or at ``at``)."""
        return Population(self.index, self.collection, self.config_json, self.identity, state, self.created_at,
                          time.time() if at is None else at)

    def with_config(self, config_json: dict, *, at: float | None = None) -> "Population":
        """The same population with its recorded config replaced (a payload contract updated in place)."""
        return Population(self.index, self.collection, config_json, self.identity, self.state, self.created_at,
                          time.time() if at is None else at)

    def as_dict(self) -> dict:
        return {
            "index": self.index,
            "collection": self.collection,
            "config": self.config_json,
            "identity": self.identity,
            "state": self.state,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "population record") -> "Population":
        """The population of ``d`` (read from ``where``); a field missing or of the wrong type is a StateError."""
        problem = _record_problem(d, _RECORD_TYPES)
        if problem is not None:
            raise StateError(f"{where}: not a valid population record ({problem}); restore it from a backup (the "
                             "plan that built the population holds its config)")
        return cls(d["index"], d["collection"], d["config"], d["identity"], PopulationState.of(d["state"]),
                   d["created_at"], d["updated_at"])


_RECORD_TYPES = {"index": str, "collection": str, "config": dict, "identity": dict, "state": str,
                 "created_at": (int, float), "updated_at": (int, float)}


def _record_problem(d: Any, types: dict[str, Any]) -> str | None:
    """What is wrong with a state record's shape (a field missing or of the wrong type), or None."""
    if not isinstance(d, dict):
        return f"expected a JSON object, got {type(d).__name__}"
    for name, kind in types.items():
        if name not in d:
            return f"field {name!r} is missing"
        if not isinstance(d[name], kind) or isinstance(d[name], bool):
            return f"field {name!r} is {type(d[name]).__name__}, not {getattr(kind, '__name__', 'a number')}"
    return None


def read_population(store: ObjectStore, index: str, collection: str) -> Population | None:
    key = Books(store, index).population_key(collection)
    d = read_json(store, key)
    if not d:
        return None
    return Population.from_dict(d, f"{store.describe()}/{key}")


def write_population(store: ObjectStore, record: Population) -> None:
    """Write a population record; its state may move only along :data:`reindex.domain.kinds.TRANSITIONS`."""
    old = read_population(store, record.index, record.collection)
    check_transition(record.collection, old.state if old else None, record.state)
    write_json(store, Books(store, record.index).population_key(record.collection), record.as_dict())


def read_live_record(store: ObjectStore, index: str) -> dict | None:
    """The index's live record as stored (``collection``, ``previous``, ``at``), None before the first cutover:
    what rollback and the checks of the books read besides the population it names (:func:`read_live`)."""
    return read_json(store, Books(store, index).live_key) or None


def read_live(store: ObjectStore, index: str) -> Population | None:
    """The population the index's alias serves, per the state store (None before the first cutover)."""
    key = Books(store, index).live_key
    d = read_json(store, key)
    if not d:
        return None
    problem = _record_problem(d, {"collection": str})
    if problem is not None:
        raise StateError(f"{store.describe()}/{key}: not a valid live record ({problem}); delete it: the next "
                         "`reindex plan` rebuilds it from the alias and the population records")
    rec = read_population(store, index, d["collection"])
    if rec is None:
        raise StateError(
            f"{Books(store, index).describe(key)} names population {d['collection']!r} "
            "but its record is missing; the state store is inconsistent"
        )
    return rec


def apply_record_key(index: str, plan_hash: str) -> str:
    """Where a finished apply of a plan records its run (written once, when no shard failed): its presence
    means the plan's work is done; cutover's gate reads its failures and the cycle its collection."""
    return Books(None, index).apply_record_key(plan_hash)


def read_apply_record(store: ObjectStore, index: str, plan_hash: str) -> dict | None:
    """The record of a finished apply of ``plan_hash``, None when none finished."""
    return read_json(store, apply_record_key(index, plan_hash))


def write_apply_record(store: ObjectStore, index: str, plan_hash: str, record: dict) -> None:
    store.put(apply_record_key(index, plan_hash), json.dumps(record, sort_keys=True).encode())


def write_live(store: ObjectStore, index: str, collection: str, previous: str | None) -> None:
    write_json(store, Books(store, index).live_key,
                {"collection": collection, "previous": previous, "at": time.time()})


# --------------------------------------------------------------------------------------------
# Chunk manifests
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManifestRow:
    doc_id: str
    content_hash: str
    ordinal: int
    fingerprint: str
    tokens: int
    point_id: str


def chunk_manifest_bytes(rows: Iterable[ManifestRow]) -> bytes:
    """A Parquet file (zstd) of manifest rows."""
    rows = list(rows)
    return parquet_from_columns({name: [getattr(r, name) for r in rows] for name in CHUNK_COLUMNS}, CHUNK_COLUMNS)


def chunk_manifest_part_columns(data: bytes, where: str, names: list[str]) -> dict[str, list]:
    """The named columns of one chunk manifest part's bytes (``where``: its location, for the error)."""
    try:
        return columns_from_parquet(data, names)[0]
    except TableError as err:
        raise StateError(f"{where}: not a readable chunk manifest part ({err}); delete it and re-run the apply") from None


def chunk_manifest_part_rows(data: bytes, where: str) -> list[ManifestRow]:
    """The rows of one chunk manifest part's bytes (``where``: its location, for the error)."""
    cols = chunk_manifest_part_columns(data, where, list(CHUNK_COLUMNS))
    return [ManifestRow(*row) for row in zip(*(cols[name] for name in CHUNK_COLUMNS))]


def write_chunk_manifest_part(store: ObjectStore, index: str, collection: str, part: str, rows: Iterable[ManifestRow]) -> str:
    key = Books(store, index).chunk_part_key(collection, part)
    store.put(key, chunk_manifest_bytes(rows))
    return key


def chunk_manifest_keys(store: ObjectStore, index: str, collection: str) -> list[str]:
    books = Books(store, index)
    return [k for k in store.list(books.chunks_prefix(collection)) if books.part_of(k) is not None]


def read_chunk_manifest(store: ObjectStore, index: str, collection: str) -> Iterator[ManifestRow]:
    """Every row of a population's chunk manifest, part by part (streaming by part)."""
    for key in chunk_manifest_keys(store, index, collection):
        data = store.get(key)
        if data is None:  # deleted between list and get
            continue
        yield from chunk_manifest_part_rows(data, f"{store.describe()}/{key}")


def read_chunk_manifest_columns(store: ObjectStore, index: str, collection: str,
                                names: list[str]) -> Iterator[dict[str, list]]:
    """The named columns of each part of a population's chunk manifest, part by part (rows of one document
    stay together in a part). For passes over a whole manifest that need a few columns and no row objects:
    at a million rows a row scan costs ~3 CPU-s, two columns ~0.3 (bench/RESULTS.md)."""
    for key in chunk_manifest_keys(store, index, collection):
        data = store.get(key)
        if data is None:  # deleted between list and get
            continue
        yield chunk_manifest_part_columns(data, f"{store.describe()}/{key}", names)


def read_document_hashes(store: ObjectStore, index: str, collection: str) -> dict[str, str]:
    """Document id → content hash of every document in a population's chunk manifest (what change detection
    compares). A document's last row wins, as in a row scan."""
    hashes: dict[str, str] = {}
    for cols in read_chunk_manifest_columns(store, index, collection, ["doc_id", "content_hash"]):
        hashes.update(zip(cols["doc_id"], cols["content_hash"]))
    return hashes


def check_chunk_manifest(store: ObjectStore, index: str, collection: str) -> None:
    """Raise StateError naming the first part of a population's chunk manifest that is not a readable
    Parquet file (truncated, overwritten). One column of each part is read: for a failure path, so that
    a corrupt file is reported as such instead of as a change of the population."""
    for key in chunk_manifest_keys(store, index, collection):
        data = store.get(key)
        if data is None:  # deleted between list and get
            continue
        try:
            columns_from_parquet(data, ["point_id"])
        except TableError as err:
            raise StateError(f"the chunk manifest file {store.describe()}/{key} of population {collection} is corrupt "
                             f"({err}); restore it from a backup, or delete it and run `reindex plan` again (its "
                             "documents are then planned as added)") from None


def count_chunk_manifest_rows(store: ObjectStore, index: str, collection: str) -> int:
    """How many chunks a population's chunk manifest lists (one column read)."""
    return sum(len(cols["point_id"]) for cols in read_chunk_manifest_columns(store, index, collection, ["point_id"]))


def part_digest(data: bytes) -> str:
    """The digest of one chunk manifest part's bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def manifest_digest(store: ObjectStore, index: str, collection: str, *,
                    rewritten: dict[str, tuple[str | None, str]] | None = None) -> str:
    """A digest of a population's chunk manifest (each part's key and the digest of its bytes), for plan
    input checks. ``rewritten`` (part key → (digest before, digest after): the parts one run rewrote, see
    :func:`rewrite_chunk_manifest_part`): a part holding exactly what that run wrote counts as what it held
    before the run (absent: not counted), so a resumed run does not take its own writes for drift, while
    any other change to any part still changes the digest."""
    parts = []
    for key in chunk_manifest_keys(store, index, collection):
        digest: str | None = part_digest(store.get(key) or b"")
        if rewritten and key in rewritten and digest == rewritten[key][1]:
            digest = rewritten[key][0]
            if digest is None:
                continue
        parts.append((key, digest))
    return digest_of_parts(parts)


def digest_of_parts(parts: Iterable[tuple[str, str | None]]) -> str:
    """:func:`manifest_digest` of (part key, digest of its bytes) pairs, in listing order."""
    h = hashlib.blake2b(digest_size=16)
    for key, digest in parts:
        h.update(key.encode() + b"\0" + str(digest).encode() + b"\0")
    return h.hexdigest()


def chunk_summary_key(index: str, collection: str, part: str) -> str:
    """Where the totals of a chunk manifest part's documents are cached, for the digest of its bytes they name."""
    return Books(None, index).summary_key(collection, part)


def _rewrite_key(index: str, collection: str, run: str, part: str) -> str:
    return Books(None, index).rewrite_key(collection, run, part)


def rewrite_chunk_manifest_part(store: ObjectStore, index: str, collection: str, run: str, part: str,
                                rows: Iterable[ManifestRow]) -> str:
    """Replace manifest part ``part`` of a population in place (an in-place apply of plan ``run``), first
    recording the digests of the part it replaces and of the new bytes. A run killed after this write can
    then resume with its plan: :func:`run_rewrites` lets the drift check tell its own writes from anyone
    else's. The first record of a run keeps its "before" (a resumed run rewrites a part it already wrote)."""
    key = Books(store, index).chunk_part_key(collection, part)
    data = chunk_manifest_bytes(rows)
    earlier = read_json(store, _rewrite_key(index, collection, run, part))
    if earlier is not None:
        before = earlier.get("before")
    else:
        current = store.get(key)
        before = part_digest(current) if current is not None else None
    write_json(store, _rewrite_key(index, collection, run, part),
               {"part": key, "before": before, "after": part_digest(data), "at": time.time()})
    store.put(key, data)
    return key


def run_rewrites(store: ObjectStore, index: str, collection: str, run: str) -> dict[str, tuple[str | None, str]]:
    """Manifest part key → (digest before, digest after) of the parts run ``run`` rewrote in place."""
    out: dict[str, tuple[str | None, str]] = {}
    for key in store.list(Books(store, index).rewrites_prefix(collection, run)):
        rec = read_json(store, key)
        if rec and isinstance(rec.get("part"), str) and isinstance(rec.get("after"), str):
            out[rec["part"]] = (rec.get("before"), rec["after"])
    return out


# --------------------------------------------------------------------------------------------
# Calibration
# --------------------------------------------------------------------------------------------


def write_calibration(store: ObjectStore, vector_id: str, result: dict) -> None:
    write_json(store, Books.calibration_key(vector_id), result)


def read_calibration(store: ObjectStore, vector_id: str) -> dict | None:
    return read_json(store, Books.calibration_key(vector_id))


def write_measured_rate(store: ObjectStore, vector_id: str, result: dict) -> None:
    """The embedding throughput the last apply of this vector half measured."""
    write_json(store, Books.measured_rate_key(vector_id), result)


def read_measured_rate(store: ObjectStore, vector_id: str) -> dict | None:
    return read_json(store, Books.measured_rate_key(vector_id))


def build_rate_key(backend: str, dimension: int, precision: str, m: int, ef_construct: int) -> str:
    """The name a measured index build is recorded under: what its rate depends on besides the points."""
    return f"{backend}-{dimension}d-{precision}-m{m}-ef{ef_construct}"


def write_build_rate(store: ObjectStore, key: str, result: dict) -> None:
    """The index build (HNSW) the last apply with these parameters (:func:`build_rate_key`) measured."""
    write_json(store, Books.build_rate_key(key), result)


def read_build_rate(store: ObjectStore, key: str) -> dict | None:
    return read_json(store, Books.build_rate_key(key))


def digest_json(value: Any) -> str:
    """:func:`reindex.domain.identity.digest_json` (kept importable here)."""
    return _digest_json(value)


# --------------------------------------------------------------------------------------------
# Shard manifests: written last, after a shard's points are durably upserted. Presence = done.
# --------------------------------------------------------------------------------------------


#: Documents apply takes from a shard at a time (one store round trip); a text is embedded once per batch.
#: The planner replays this batching to count exactly what apply embeds.
DOC_BATCH = 32


def shard_of(doc_id: str, shards: int) -> int:
    """Stable shard of a document: blake2b of its id, mod the shard count (its manifest part is
    ``shard_name(shard_of(doc_id, shards))`` for the shard count the part was written with)."""
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little") % shards



def shard_manifest_key(index: str, collection: str, run: str, shard: int) -> str:
    return Books(None, index).shard_manifest_key(collection, run, shard)


def run_progress_key(index: str, collection: str, run: str) -> str:
    """Where a running apply of plan ``run`` records how far it is (``reindex status`` reads it)."""
    return Books(None, index).progress_key(collection, run)


def write_run_progress(store: ObjectStore, index: str, collection: str, run: str, snapshot: dict) -> None:
    """Record a running apply's progress (a :meth:`reindex.engine.eta.ProgressCounts.snapshot`, stamped now)."""
    write_json(store, run_progress_key(index, collection, run), {**snapshot, "run": run, "updated_at": time.time()})


def read_run_progress(store: ObjectStore, index: str, collection: str, run: str) -> dict | None:
    """The last progress record of a run of plan ``run`` into ``collection`` (None: none, or unreadable)."""
    try:
        rec = read_json(store, run_progress_key(index, collection, run))
    except StateError:
        return None
    return rec if isinstance(rec, dict) else None


def read_shard_manifest(store: ObjectStore, index: str, collection: str, run: str, shard: int) -> dict | None:
    return read_json(store, shard_manifest_key(index, collection, run, shard))


def write_shard_manifest(store: ObjectStore, index: str, collection: str, run: str, shard: int, manifest: dict) -> None:
    write_json(store, shard_manifest_key(index, collection, run, shard), manifest)


def read_chunk_manifest_part(store: ObjectStore, index: str, collection: str, part: str) -> list[ManifestRow]:
    key = Books(store, index).chunk_part_key(collection, part)
    data = store.get(key)
    if data is None:
        return []
    return chunk_manifest_part_rows(data, f"{store.describe()}/{key}")


def chunk_texts_key(index: str, collection: str, part: str) -> str:
    return Books(None, index).chunk_texts_key(collection, part)


def write_chunk_texts_part(store: ObjectStore, index: str, collection: str, part: str, texts: dict[str, str]) -> str:
    """Write the chunk-text part ``part`` (fingerprint → text, sorted by fingerprint)."""
    fps = sorted(texts)
    key = chunk_texts_key(index, collection, part)
    store.put(key, parquet_from_columns({"fingerprint": fps, "text": [texts[f] for f in fps]}, CHUNK_TEXT_COLUMNS))
    return key


def read_chunk_texts_part(store: ObjectStore, index: str, collection: str, part: str) -> dict[str, str]:
    """Fingerprint → text of one chunk-text part; empty when the population has none (not sticky)."""
    key = chunk_texts_key(index, collection, part)
    data = store.get(key)
    if data is None:
        return {}
    try:
        cols, _ = columns_from_parquet(data, list(CHUNK_TEXT_COLUMNS))
    except TableError as err:
        raise StateError(f"{store.describe()}/{key}: not a readable chunk-text part ({err}); delete it and re-run "
                         "the apply (its documents are then re-chunked statelessly once)") from None
    return dict(zip(cols["fingerprint"], cols["text"]))


def read_chunk_texts(store: ObjectStore, index: str, collection: str, wanted: set[str] | None = None) -> dict[str, str]:
    """Fingerprint → text over every chunk-text part of a population, only ``wanted`` fingerprints if given."""
    out: dict[str, str] = {}
    for key in store.list(Books(store, index).chunk_texts_prefix(collection)):
        name = Books.part_of(Books(None, index), key)
        if name is None:
            continue
        part = read_chunk_texts_part(store, index, collection, name)
        out.update(part if wanted is None else {f: t for f, t in part.items() if f in wanted})
    return out


# --------------------------------------------------------------------------------------------
# Serving across a model change: the mode readers are served, free pairs, bridges (reindex.decisions.serving)
# --------------------------------------------------------------------------------------------


def serving_key(index: str) -> str:
    """Where the serving mode of an index is recorded (``indexes/<index>/serving.json``; readers read it)."""
    return Books(None, index).serving_key


def read_serving(store: ObjectStore, index: str) -> dict | None:
    """The serving record of ``index`` (None: never evaluated; readers serve the live population natively). A
    damaged one raises :class:`StateError` (:func:`read_serving_checked` tells it apart instead)."""
    rec, damage = read_serving_checked(store, index)
    if damage is not None:
        raise StateError(damage)
    return rec


def read_serving_checked(store: ObjectStore, index: str) -> tuple[dict | None, str | None]:
    """(the serving record of ``index`` or None, None), or (None, what is wrong with it) when it is not a JSON
    object: an optional file, so readers serve the live population natively, ``reindex doctor`` names it, and the
    next evaluation, cutover, rollback or gc writes a good one over it."""
    key = serving_key(index)
    data = store.get(key)
    if data is None:
        return None, None
    try:
        rec = json.loads(data)
    except ValueError as err:
        return None, f"{store.describe()}/{key} is not valid JSON ({err})"
    if not isinstance(rec, dict):
        return None, f"{store.describe()}/{key} holds a JSON {type(rec).__name__}, not a serving record"
    return rec, None


def write_serving(store: ObjectStore, index: str, record: dict) -> None:
    write_json(store, serving_key(index), record)


def reset_serving(store: ObjectStore, index: str, reason: str, *, at: float | None = None,
                  shadow: str | None = None) -> bool:
    """Put readers back on native serving (mode ``old``) with ``reason``, keeping the last evidence for people;
    only when the record names ``shadow`` (given). Returns whether the record changed. Cutover, rollback and gc
    call it: after a cutover the new population serves natively, after a rollback the old one."""
    rec, damage = read_serving_checked(store, index)
    now = time.time() if at is None else at
    if damage is not None:  # written over, never a reason to refuse a cutover, a rollback or a sync
        write_serving(store, index, {"mode": "old", "since": now, "reason": f"{reason} (a damaged record replaced: "
                                     f"{damage})", "bridge": None, "live": None, "shadow": None, "evidence": {}})
        return True
    if rec is None or rec.get("mode", "old") == "old" or (shadow is not None and rec.get("shadow") != shadow):
        return False
    write_serving(store, index, {**rec, "mode": "old", "since": now, "reason": reason, "bridge": None})
    return True


def pairs_key(index: str, collection: str, run: str, shard: int) -> str:
    """A shard's free pairs (``reindex.books.pairs``), beside the run's shard manifests."""
    return Books(None, index).pairs_key(collection, run, shard)


def bridge_key(index: str, bridge_id: str) -> str:
    """A fitted bridge's matrices (``reindex.decisions.serving``), named by its id."""
    return Books(None, index).bridge_key(bridge_id)


# --------------------------------------------------------------------------------------------
# Locks live in reindex.books.locks (fencing lease, compare-and-swap); these names stay importable here.
# --------------------------------------------------------------------------------------------


__all__ = [
    "CHUNK_COLUMNS", "CHUNK_TEXT_COLUMNS", "DOC_BATCH", "ManifestRow", "Population", "apply_record_key",
    "build_rate_key", "check_chunk_manifest", "chunk_manifest_bytes", "chunk_manifest_keys", "chunk_manifest_part_columns",
    "chunk_manifest_part_rows", "chunk_summary_key",
    "chunk_texts_key", "count_chunk_manifest_rows", "digest_json", "digest_of_parts", "manifest_digest", "part_digest",
    "read_apply_record", "read_calibration", "read_chunk_manifest",
    "read_build_rate", "read_chunk_manifest_columns", "read_chunk_manifest_part", "read_chunk_texts", "read_chunk_texts_part",
    "read_document_hashes", "read_json", "read_live", "read_live_record", "read_measured_rate", "read_population", "read_serving_checked",
    "read_shard_manifest", "rewrite_chunk_manifest_part", "run_rewrites", "shard_manifest_key", "shard_name",
    "shard_of", "write_apply_record", "write_build_rate", "write_calibration", "write_chunk_manifest_part", "write_chunk_texts_part",
    "write_json", "write_live", "write_measured_rate", "write_population", "write_shard_manifest",
]
