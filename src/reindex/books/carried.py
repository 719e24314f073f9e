"""The plan's exact chunking, carried to apply: each document is tokenized once per change.

Planning a change chunks every document it prices (an initial build, a pipeline change: all of them; an
in-place sync: the added and edited ones). The shards of its apply used to chunk the same bytes again, and the
tokenizer is most of a chunker change's CPU. Now the planner writes what it cut beside the chunk manifests, in
the state store, and apply's shards read it instead of chunking:

    indexes/<index>/carried/<carry id>.json             what a plan carries: shard layout, parts, counts
    indexes/<index>/carried/parts/<digest>.parquet      rows of whole documents of one shard

A row is one chunk: ``doc_id, content_hash, ordinal, start, end, tokens, fingerprint`` and ``text`` only where
the chunk is not the slice ``document[start:end]`` of the normalised text (a trimming chunker). The text is
rebuilt from the document as the shard reads it, so a carry is ~1/5 of the chunk texts' size.

*Content-addressed and verified at every step.* A part's name is the digest of its bytes; the carry id is the
digest of its index (which names the parts and the pipeline id the chunks were cut with); the plan body names
the id, so the plan hash covers the whole chain. A shard uses a document's carried chunks only when the
document's content hash is the carried one, the pipeline id is the plan's, and every rebuilt chunk text hashes
to its carried fingerprint. Anything else — a document edited since the plan, a missing or corrupt part or
index, another pipeline — and the document is chunked as before, with a line in the run report: a carry can
make apply slower, never different (chosen over refusing the apply: chunking from the source is what apply
did before, and the result is the same by construction).

*Bounded memory.* The planner holds at most :data:`HELD_ROWS` rows (flushing the largest shard's rows as a
part when it passes that, and any shard's at :data:`PART_ROWS`); a shard reads only its own parts (all parts,
filtered, when apply runs with another shard count than planned). A remote worker reads them from the state
store by the plain :class:`CarriedRef` in its shard spec (invariant 12).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reindex.adapters.chunkers.base import Chunk
from reindex.errors import ReindexError
from reindex.domain.identity import canonical_json
from reindex.books.layout import Books
from reindex.books.manifests import shard_of
from reindex.adapters.pipeline import ChunkRecord, TextPipeline
from reindex.adapters.sources.base import Document
from reindex.adapters.stores.objects import ObjectStore
from reindex.foundation.tables import TableError, columns_from_parquet, parquet_from_columns

__all__ = ["CARRY_COLUMNS", "CARRY_VERSION", "HELD_ROWS", "PART_ROWS", "CarriedRef", "CarryWriter", "ShardCarry",
           "carried_index_key", "carried_part_key", "delete_carried", "prune_carried", "read_shard_carry"]

CARRY_VERSION = 1
#: Column → Parquet type of a carried part (``text`` is null where the chunk is ``document[start:end]``).
CARRY_COLUMNS = {"doc_id": "string", "content_hash": "string", "ordinal": "int32", "start": "int64",
                 "end": "int64", "tokens": "int32", "fingerprint": "string", "text": "string"}
#: A shard's rows are written as a part once it holds this many.
PART_ROWS = 16_384
#: The most rows the planner holds before it writes the largest shard's rows as a part.
HELD_ROWS = 65_536

_log = logging.getLogger("reindex")


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def carried_index_key(index: str, carry_id: str) -> str:
    """Where the index of carry ``carry_id`` lives in the state store."""
    return Books(None, index).carried_key(carry_id)


def carried_part_key(index: str, digest: str) -> str:
    """Where the carried part whose bytes hash to ``digest`` lives in the state store."""
    return Books(None, index).carried_part_key(digest)


@dataclass(frozen=True, slots=True)
class CarriedRef:
    """Which carry an apply's shards read: plain data (a shard spec carries it to any process)."""

    index: str
    id: str


class CarryWriter:
    """The planner's side: the chunks of each document it cut, written to ``state`` as parts of the shard
    layout apply will use (``shards``), then an index naming them (:meth:`finish`). A write that fails (a
    read-only state store) turns carrying off for this plan, with one warning: the plan is made without it."""

    def __init__(self, state: ObjectStore, index: str, shards: int, pipeline_id: str, *,
                 part_rows: int = PART_ROWS, held_rows: int = HELD_ROWS) -> None:
        self.state, self.index, self.shards, self.pipeline_id = state, index, shards, pipeline_id
        self.part_rows, self.held_rows = part_rows, held_rows
        self._held: dict[int, dict[str, list]] = {}
        self._rows_held = 0
        self._parts: list[list] = []  # [shard, digest, rows, bytes] in the order written
        self.documents = 0
        self.chunks = 0
        self.failed: str | None = None

    def add(self, doc: Document, text: str, records: Sequence[ChunkRecord]) -> None:
        """Carry ``records``, the chunks of ``doc`` cut from its normalised ``text``."""
        if self.failed is not None or not records:
            return  # a document without chunks is cut again at apply (nothing to tokenize there)
        own = [None if text[r.start:r.end] == r.text else r.text for r in records]
        try:
            for value in (doc.doc_id, *(t for t in own if t is not None)):
                value.encode("utf-8")
        except UnicodeEncodeError:
            return  # a name or text Parquet cannot hold (a lone surrogate from undecodable bytes): cut at apply
        k = shard_of(doc.doc_id, self.shards)
        cols = self._held.get(k)
        if cols is None:
            cols = self._held[k] = {name: [] for name in CARRY_COLUMNS}
        for r, own_text in zip(records, own):
            cols["doc_id"].append(doc.doc_id)
            cols["content_hash"].append(doc.content_hash)
            cols["ordinal"].append(r.ordinal)
            cols["start"].append(r.start)
            cols["end"].append(r.end)
            cols["tokens"].append(r.tokens)
            cols["fingerprint"].append(r.fingerprint)
            cols["text"].append(own_text)
        self.documents += 1
        self.chunks += len(records)
        self._rows_held += len(records)
        if len(cols["doc_id"]) >= self.part_rows:
            self._flush(k)
        elif self._rows_held > self.held_rows:
            self._flush(max(self._held, key=lambda s: (len(self._held[s]["doc_id"]), -s)))

    def _flush(self, k: int) -> None:
        cols = self._held.pop(k)
        n = len(cols["doc_id"])
        self._rows_held -= n
        try:
            data = parquet_from_columns(cols, CARRY_COLUMNS)
            digest = _digest(data)
            self.state.put(carried_part_key(self.index, digest), data)
        except Exception as err:  # noqa: BLE001 - a value Parquet cannot hold (a lone surrogate), a refused write:
            # carrying saves work, it must never stop a plan
            self._fail(f"{type(err).__name__}: {err}")
            return
        self._parts.append([k, digest, n, len(data)])

    def _fail(self, why: str) -> None:
        self.failed = why.splitlines()[0]
        self._held.clear()
        self._rows_held = 0
        _log.warning("the plan's chunks are not carried to apply (its shards will chunk again): writing them to "
                     "%s failed: %s", self.state.describe(), self.failed)

    def finish(self) -> dict[str, Any] | None:
        """Write what is still held and the index; the plan's ``carried`` section (its id names the index),
        or None when nothing was carried."""
        while self._held and self.failed is None:
            self._flush(min(self._held))
        if self.failed is not None or not self._parts:
            return None
        body = {"v": CARRY_VERSION, "index": self.index, "pipeline_id": self.pipeline_id, "shards": self.shards,
                "documents": self.documents, "chunks": self.chunks, "parts": self._parts}
        data = canonical_json(body).encode()
        carry_id = _digest(data)
        try:
            self.state.put(carried_index_key(self.index, carry_id), data)
        except (ReindexError, OSError) as err:
            self._fail(f"{type(err).__name__}: {err}")
            return None
        return {"id": carry_id, "documents": self.documents, "chunks": self.chunks, "shards": self.shards,
                "parts": len(self._parts), "bytes": sum(p[3] for p in self._parts)}


@dataclass
class ShardCarry:
    """The carried chunks of one shard's documents, as a shard uses them (:meth:`records`), and what it
    could not use (``problems``: one line each, for the run report)."""

    docs: dict[str, tuple[str, list[tuple]]] = field(default_factory=dict)  # doc id → (content hash, rows)
    problems: list[str] = field(default_factory=list)
    moved: int = 0  # documents whose content hash moved since the plan

    def records(self, pipeline: TextPipeline, doc: Document, text: str) -> list[ChunkRecord] | None:
        """``doc``'s chunk records rebuilt from the carry and its normalised ``text``; None when the carry has
        none for it, its bytes moved since the plan, or a rebuilt text does not hash to its fingerprint (then
        the caller chunks it). Each document is given once."""
        got = self.docs.pop(doc.doc_id, None)
        if got is None:
            return None
        content_hash, rows = got
        if content_hash != doc.content_hash:
            self.moved += 1
            return None
        chunks = [Chunk(ordinal, start, end, tokens, text[start:end] if own is None else own)
                  for ordinal, start, end, tokens, _, own in rows]
        recs = pipeline.records(doc.doc_id, chunks)
        if [r.fingerprint for r in recs] != [row[4] for row in rows]:
            self.problems.append(f"document {doc.doc_id!r}: its carried chunks do not match its text; chunked again")
            return None
        return recs


def _read_index(state: ObjectStore, ref: CarriedRef) -> tuple[dict | None, str | None]:
    """The index of carry ``ref`` checked against its id, or (None, why not)."""
    key = carried_index_key(ref.index, ref.id)
    try:
        data = state.get(key)
    except (ReindexError, OSError) as err:
        return None, f"the plan's carried chunks {ref.id[:12]} cannot be read ({type(err).__name__}: {err})"
    if data is None:
        return None, f"the plan's carried chunks {ref.id[:12]} are gone ({state.describe()}/{key})"
    if _digest(data) != ref.id:
        return None, f"the plan's carried chunks {ref.id[:12]} are corrupt ({state.describe()}/{key} does not hash to its name)"
    try:
        body = json.loads(data)
    except ValueError:
        return None, f"the plan's carried chunks {ref.id[:12]} are corrupt (not JSON)"
    if not isinstance(body, dict) or body.get("v") != CARRY_VERSION:
        return None, f"the plan's carried chunks {ref.id[:12]} were written by another version"
    return body, None


def _read_part(state: ObjectStore, index: str, digest: str) -> tuple[dict[str, list] | None, int, str | None]:
    key = carried_part_key(index, digest)
    try:
        data = state.get(key)
    except (ReindexError, OSError) as err:
        return None, 0, f"carried part {digest[:12]} cannot be read ({type(err).__name__}: {err})"
    if data is None:
        return None, 0, f"carried part {digest[:12]} is gone ({state.describe()}/{key})"
    if _digest(data) != digest:
        return None, 0, f"carried part {digest[:12]} is corrupt ({state.describe()}/{key} does not hash to its name)"
    try:
        cols, n = columns_from_parquet(data, list(CARRY_COLUMNS))
    except TableError as err:
        return None, 0, f"carried part {digest[:12]} is not readable ({err})"
    return cols, n, None


def read_shard_carry(state: ObjectStore, ref: CarriedRef, shard: int, shards: int, pipeline_id: str) -> ShardCarry:
    """The carried chunks of the documents of ``shard`` (of ``shards``), for a shard that cuts with
    ``pipeline_id``. Never raises for a missing or damaged carry: what cannot be used is in ``problems`` and
    those documents are chunked."""
    out = ShardCarry()
    body, why = _read_index(state, ref)
    if body is None:
        out.problems.append(f"{why}: this shard chunks its documents")
        return out
    if body.get("pipeline_id") != pipeline_id:
        out.problems.append(f"the plan's carried chunks {ref.id[:12]} were cut for another pipeline: this shard "
                            "chunks its documents")
        return out
    same_layout = body.get("shards") == shards
    for part_shard, digest, _, _ in body.get("parts", []):
        if same_layout and part_shard != shard:
            continue
        cols, n, why = _read_part(state, ref.index, digest)
        if cols is None:
            out.problems.append(f"{why}: its documents are chunked")
            continue
        rows = zip(cols["doc_id"], cols["content_hash"], cols["ordinal"], cols["start"], cols["end"], cols["tokens"],
                   cols["fingerprint"], cols["text"])
        for doc_id, content_hash, *row in rows:
            if not same_layout and shard_of(doc_id, shards) != shard:
                continue
            got = out.docs.get(doc_id)
            if got is None:
                got = out.docs[doc_id] = (content_hash, [])
            got[1].append(tuple(row))
    return out


def delete_carried(state: ObjectStore, ref: CarriedRef) -> int:
    """Delete carry ``ref`` (its parts, then its index) once its apply is done; returns the objects deleted.
    Best effort: a carry left behind costs space, never correctness."""
    body, _ = _read_index(state, ref)
    n = 0
    try:
        for _, digest, _, _ in (body or {}).get("parts", []):
            state.delete(carried_part_key(ref.index, digest))
            n += 1
        state.delete(carried_index_key(ref.index, ref.id))
        return n + 1
    except (ReindexError, OSError) as err:
        _log.warning("the carried chunks %s were not deleted: %s", ref.id[:12], err)
        return n


def prune_carried(state: ObjectStore, index: str, older_than_s: float) -> int:
    """Delete what plans carried and no apply deleted (plans never applied, or superseded) once it is older than
    ``older_than_s`` as the state store's clock tells (a re-plan of the same change rewrites it, so its age is the
    last plan's): each such index with its parts, then parts no index names (a plan that stopped half-way).
    Returns the objects deleted. A plan applied after its carry was pruned chunks its documents."""
    books = Books(state, index)
    keys = state.list(books.carried_prefix)
    named: set[str] = set()
    n = 0
    for key in keys:
        what = books.carried_of(key)
        if what is None or what[0] != "index":
            continue
        got = state.get_versioned_aged(key)
        if got is None:
            continue
        data, _, age = got
        try:
            parts = {p[1] for p in json.loads(data).get("parts", [])}
        except (ValueError, AttributeError, TypeError, IndexError):
            parts = set()
        if age > older_than_s:
            n += delete_carried(state, CarriedRef(index, what[1]))
        else:
            named |= parts
    for key in keys:
        what = books.carried_of(key)
        if what is None or what[0] != "part":
            continue
        digest = what[1]
        if digest in named:
            continue
        got = state.get_versioned_aged(key)
        if got is not None and got[2] > older_than_s:
            state.delete(key)
            n += 1
    return n
