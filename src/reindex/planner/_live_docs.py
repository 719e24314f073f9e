"""The live population's documents as its chunk manifest lists them (:class:`LiveDocs`): a mapping doc id →
:class:`DocState` read part by part on demand, with the totals of all its documents (:class:`DocsSummary`) kept
per manifest part.

Why: a sync that finds its changes from a cursor reads the changed documents only, and its plan must cost about
that too (DESIGN.md invariant 13). The plan's figures for the unchanged documents are the population's totals
less those of the documents it touches, so it needs the totals (kept per part, cached in the state store under
the digest of the part's bytes: a part an apply rewrote is summed again once, by the next plan) and the states of
the touched documents (their parts only: a document's rows are in the part of its shard). Reading the parts'
bytes for their digests is what the plan's input check (:func:`reindex.books.manifests.manifest_digest`) does anyway;
decoding a part and building a state per document is what it no longer does for every part.

Anything the fast path cannot vouch for falls back to reading every part, as before: a part not named by its
shard, a document in a part its shard does not name (a hand-edited or foreign manifest), iterating over all
documents. Costs: O(parts) bytes read and hashed, O(touched parts) decoded; O(manifest) once per rewritten part
for its summary."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from reindex import cost as costmod
from reindex.errors import ReindexError
from reindex.books.layout import Books, shard_name
from reindex.books.manifests import (
    ManifestRow,
    chunk_manifest_keys,
    chunk_manifest_part_columns,
    chunk_manifest_part_rows,
    digest_of_parts,
    part_digest,
    read_json,
    shard_of,
    write_json,
)
from reindex.adapters.stores.objects import ObjectStore

__all__ = ["STATE_COLUMNS", "DocState", "DocsSummary", "LiveDocs", "doc_payload", "docs_summary"]

STATE_COLUMNS = ["doc_id", "content_hash", "ordinal", "fingerprint", "tokens"]
SUMMARY_VERSION = "reindex/part-summary/v1"
_PART = re.compile(r"shard-(\d{4,})")


@dataclass(frozen=True, slots=True)
class DocState:
    """One document as chunked by the baseline."""

    content_hash: str
    fingerprints: tuple[str, ...]
    tokens: tuple[int, ...]


def doc_payload(d: DocState) -> int:
    """A document's payload bytes in the population, estimated from its tokens (the manifest holds no texts)."""
    return int(sum(d.tokens) * costmod.BYTES_PER_TOKEN) + len(d.fingerprints) * costmod.PAYLOAD_FIELD_BYTES


@dataclass
class DocsSummary:
    """Totals of a set of documents' states: what a plan counts for documents it does not cut again."""

    documents: int = 0
    chunks: int = 0
    tokens: int = 0
    payload: int = 0  # Σ doc_payload
    lengths: Counter = field(default_factory=Counter)  # chunk tokens → chunks
    doc_tokens: Counter = field(default_factory=Counter)  # a document's tokens (Σ of its chunks') → documents
    doc_chunks: Counter = field(default_factory=Counter)  # a document's tokens → the chunks of those documents

    def add(self, d: DocState, sign: int = 1) -> None:
        n, tokens = len(d.fingerprints), sum(d.tokens)
        self.documents += sign
        self.chunks += sign * n
        self.tokens += sign * tokens
        self.payload += sign * doc_payload(d)
        for t in d.tokens:
            self.lengths[t] += sign
        self.doc_tokens[tokens] += sign
        self.doc_chunks[tokens] += sign * n

    def merge(self, other: DocsSummary) -> None:
        self.documents += other.documents
        self.chunks += other.chunks
        self.tokens += other.tokens
        self.payload += other.payload
        self.lengths.update(other.lengths)
        self.doc_tokens.update(other.doc_tokens)
        self.doc_chunks.update(other.doc_chunks)

    def without(self, states: Iterable[DocState]) -> DocsSummary:
        """These totals less those of ``states`` (documents among them), with no zero entries left."""
        out = DocsSummary(self.documents, self.chunks, self.tokens, self.payload, Counter(self.lengths),
                          Counter(self.doc_tokens), Counter(self.doc_chunks))
        for d in states:
            out.add(d, -1)
        for counts in (out.lengths, out.doc_tokens, out.doc_chunks):
            for k in [k for k, v in counts.items() if not v]:
                del counts[k]
        return out

    @classmethod
    def of(cls, states: Iterable[DocState]) -> DocsSummary:
        s = cls()
        for d in states:
            s.add(d)
        return s

    def as_json(self) -> dict[str, Any]:
        return {"documents": self.documents, "chunks": self.chunks, "tokens": self.tokens, "payload": self.payload,
                **{name: {str(k): v for k, v in sorted(getattr(self, name).items())}
                   for name in ("lengths", "doc_tokens", "doc_chunks")}}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DocsSummary:
        counts = {name: Counter({int(k): int(v) for k, v in d[name].items()})
                  for name in ("lengths", "doc_tokens", "doc_chunks")}
        return cls(int(d["documents"]), int(d["chunks"]), int(d["tokens"]), int(d["payload"]), **counts)


def docs_summary(docs: Mapping[str, DocState]) -> DocsSummary:
    """The totals of ``docs``: kept ones for :class:`LiveDocs`, else summed (O(documents))."""
    return docs.summary if isinstance(docs, LiveDocs) else DocsSummary.of(docs.values())


def _doc_states(parts: Iterable[dict[str, list]], rows: Callable[[], Iterable[ManifestRow]]) -> dict[str, DocState]:
    """Per-document states from the manifest's columns (``STATE_COLUMNS`` of each part, part by part): a part
    holds each of its documents' rows together (sorted by document and ordinal), so one document's rows are
    taken at a time and only the compact ``DocState`` is kept (holding every row first cost ~400 B per chunk
    at the peak of a plan), from column lists, not row objects (at a million rows 0.5 CPU-s instead of 4,
    bench/RESULTS.md). If a document's rows are not contiguous (a hand-edited or foreign manifest), the
    rows (``rows()``) are read and grouped in memory, the slow but general way."""
    states: dict[str, DocState] = {}
    for cols in parts:
        ids, hashes, ords, fps, toks = (cols[name] for name in STATE_COLUMNS)
        n, i = len(ids), 0
        while i < n:
            doc_id, j = ids[i], i + 1
            while j < n and ids[j] == doc_id:
                j += 1
            if doc_id in states:
                return _doc_states_in_memory(rows())
            o = ords[i:j]
            if o == sorted(o) and len(set(o)) == len(o):  # in ordinal order already (what apply writes)
                states[doc_id] = DocState(hashes[i], tuple(fps[i:j]), tuple(toks[i:j]))
            else:
                group = sorted(zip(o, fps[i:j], toks[i:j], hashes[i:j]))
                states[doc_id] = DocState(group[0][3], tuple(r[1] for r in group), tuple(r[2] for r in group))
            i = j
    return states


def _doc_states_in_memory(rows: Iterable[ManifestRow]) -> dict[str, DocState]:
    docs: dict[str, list] = {}
    for row in rows:
        entry = docs.setdefault(row.doc_id, [row.content_hash, []])
        entry[1].append((row.ordinal, row.fingerprint, row.tokens))
    out = {}
    for doc_id, (chash, group) in docs.items():
        group.sort()
        out[doc_id] = DocState(chash, tuple(r[1] for r in group), tuple(r[2] for r in group))
    return out


@dataclass
class _Part:
    key: str
    digest: str
    summary: DocsSummary
    routed: bool  # every document of the part is in the shard its name gives


class LiveDocs(Mapping[str, DocState]):
    """A population's documents (doc id → :class:`DocState`), read from its chunk manifest part by part when asked.

    Made from one pass over the parts' bytes (their digests: :attr:`digest` is the manifest digest a plan records),
    each part's totals taken from the summary cached for that digest or computed once from the part. A document is
    then looked up in the one part its shard names (the layout apply writes, ``shards`` being the population's own
    shard count); when some part does not keep to that layout, or when every document is iterated, every part is
    read, exactly as a whole-manifest read."""

    def __init__(self, store: ObjectStore, index: str, collection: str, shards: int) -> None:
        self._store, self._index, self._collection, self._shards = store, index, collection, shards
        self._books = Books(store, index)
        self._parts: dict[str, _Part] = {}
        self._loaded: dict[str, dict[str, DocState]] = {}  # part key → its documents
        self._all: dict[str, DocState] | None = None
        for key in chunk_manifest_keys(store, index, collection):
            data = store.get(key) or b""  # deleted between list and get: as manifest_digest counts it
            self._parts[key] = self._part(key, data)
        self.digest = digest_of_parts((p.key, p.digest) for p in self._parts.values())
        self.routed = all(p.routed for p in self._parts.values())

    # -- the parts -------------------------------------------------------------------------------------------

    def _part(self, key: str, data: bytes) -> _Part:
        digest = part_digest(data)
        name = self._books.part_of(key) or key
        cache = self._books.summary_key(self._collection, name)
        try:
            cached = read_json(self._store, cache)
        except ReindexError:
            cached = None
        if (isinstance(cached, dict) and cached.get("version") == SUMMARY_VERSION and cached.get("digest") == digest
                and cached.get("shards") == self._shards):
            try:
                return _Part(key, digest, DocsSummary.from_json(cached["summary"]), bool(cached["routed"]))
            except (KeyError, TypeError, ValueError):
                pass  # a damaged cache entry: summed again below
        states = self._decode(key, data)
        self._loaded[key] = states
        self._write_prefixes(name, digest, _prefixes(fp for d in states.values() for fp in d.fingerprints))
        m = _PART.fullmatch(name)
        routed = m is not None and all(shard_of(d, self._shards) == int(m.group(1)) for d in states)
        part = _Part(key, digest, DocsSummary.of(states.values()), routed)
        try:
            write_json(self._store, cache, {"version": SUMMARY_VERSION, "digest": digest, "shards": self._shards,
                                            "routed": routed, "summary": part.summary.as_json()})
        except (ReindexError, OSError):
            pass  # a cache: a state store that refuses the write only costs the next plan this part's decode
        return part

    def _write_prefixes(self, name: str, digest: str, prefixes: Any) -> None:
        import io

        import numpy as np

        buf = io.BytesIO()
        np.savez(buf, digest=np.array(digest), prefixes=prefixes)
        try:
            self._store.put(self._books.fingerprints_key(self._collection, name), buf.getvalue())
        except (ReindexError, OSError):
            pass  # a cache, as the summary

    def _part_prefixes(self, key: str) -> Any:
        """The sorted 64-bit prefixes of the fingerprints of one part: from its decoded documents, or cached for the
        digest of its bytes, or read from its fingerprint column (and cached)."""
        import io

        import numpy as np

        if key in self._loaded:
            return _prefixes(fp for d in self._loaded[key].values() for fp in d.fingerprints)
        part = self._parts[key]
        name = self._books.part_of(key) or key
        cache = self._books.fingerprints_key(self._collection, name)
        try:
            data = self._store.get(cache)
            if data:
                with np.load(io.BytesIO(data)) as z:
                    if str(z["digest"]) == part.digest:
                        return z["prefixes"]
        except (ReindexError, OSError, ValueError, KeyError):
            pass  # damaged: read again below
        data = self._store.get(key) or b""
        fps = chunk_manifest_part_columns(data, f"{self._store.describe()}/{key}", ["fingerprint"])["fingerprint"] \
            if data else []
        prefixes = _prefixes(fps)
        self._write_prefixes(name, part.digest, prefixes)
        return prefixes

    def fingerprints(self) -> Container[str]:
        """Every fingerprint of the population, for membership only (a plan's cross-document reuse figure): the
        64-bit prefixes of each part's fingerprints, cached beside its summary (8 bytes a chunk), not the strings.
        Two different 128-bit fingerprints share a prefix with probability ~n²/2⁶⁵ (< 10⁻⁷ at a million chunks)."""
        if self._all is not None or not self.routed:
            return {fp for d in self._every().values() for fp in d.fingerprints}
        return _PrefixSet(lambda: [self._part_prefixes(key) for key in self._parts])

    def _decode(self, key: str, data: bytes) -> dict[str, DocState]:
        if not data:
            return {}
        where = f"{self._store.describe()}/{key}"
        cols = chunk_manifest_part_columns(data, where, STATE_COLUMNS)
        return _doc_states([cols], lambda: chunk_manifest_part_rows(data, where))

    def _documents_of(self, key: str) -> dict[str, DocState]:
        if key not in self._loaded:
            self._loaded[key] = self._decode(key, self._store.get(key) or b"")
        return self._loaded[key]

    def _every(self) -> dict[str, DocState]:
        """Every document, reading the parts not read yet (a document in two parts: grouped over all rows)."""
        if self._all is None:
            if self.routed:
                self._all = {d: s for key in self._parts for d, s in self._documents_of(key).items()}
            else:
                self._all = _doc_states(self._columns(), self._rows)
        return self._all

    def _columns(self) -> Iterator[dict[str, list]]:
        for key in self._parts:
            data = self._store.get(key)
            if data:
                yield chunk_manifest_part_columns(data, f"{self._store.describe()}/{key}", STATE_COLUMNS)

    def _rows(self) -> Iterator[ManifestRow]:
        for key in self._parts:
            data = self._store.get(key)
            if data:
                yield from chunk_manifest_part_rows(data, f"{self._store.describe()}/{key}")

    def _home(self, doc_id: str) -> str:
        return self._books.chunk_part_key(self._collection, shard_name(shard_of(doc_id, self._shards)))

    # -- the mapping -----------------------------------------------------------------------------------------

    @property
    def summary(self) -> DocsSummary:
        """The totals of every document (from the parts' summaries; summed over all documents when the parts do
        not keep to their shards, where a document could be listed twice)."""
        if self.routed:
            total = DocsSummary()
            for p in self._parts.values():
                total.merge(p.summary)
            return total
        return DocsSummary.of(self._every().values())

    def get(self, doc_id: str, default: Any = None) -> Any:
        if self._all is None and self.routed:
            key = self._home(doc_id)
            return self._documents_of(key).get(doc_id, default) if key in self._parts else default
        return self._every().get(doc_id, default)

    def __getitem__(self, doc_id: str) -> DocState:
        state = self.get(doc_id, _MISSING)
        if state is _MISSING:
            raise KeyError(doc_id)
        return state

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.get(doc_id, _MISSING) is not _MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return self.summary.documents if self.routed else len(self._every())

    def ids(self) -> set[str]:
        """Every document id (only the ids column of the parts not decoded yet, where the parts keep to their shards)."""
        if self._all is not None or not self.routed:
            return set(self._every())
        out: set[str] = set()
        for key in self._parts:
            if key in self._loaded:
                out.update(self._loaded[key])
            else:
                data = self._store.get(key) or b""
                if data:
                    out.update(chunk_manifest_part_columns(data, f"{self._store.describe()}/{key}", ["doc_id"])["doc_id"])
        return out


_MISSING = object()


def _prefix(fp: str) -> int:
    try:
        return int(fp[:16], 16) if len(fp) >= 16 else _hashed(fp)
    except ValueError:
        return _hashed(fp)  # not a hex fingerprint (a foreign manifest): its own digest


def _hashed(fp: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.blake2b(fp.encode(), digest_size=8).digest(), "big")


def _prefixes(fps: Iterable[str]) -> Any:
    import numpy as np

    return np.unique(np.fromiter((_prefix(fp) for fp in fps), dtype=np.uint64))


class _PrefixSet:
    """Membership of a fingerprint among parts' sorted prefix arrays, read when first asked (a plan that embeds
    nothing new never asks)."""

    def __init__(self, arrays: Callable[[], list[Any]]) -> None:
        self._arrays, self._all = arrays, None

    def __contains__(self, fp: object) -> bool:
        import numpy as np

        if not isinstance(fp, str):
            return False
        if self._all is None:
            self._all = self._arrays()  # each part's array is sorted: searched one by one, never merged
        x = np.uint64(_prefix(fp))
        for a in self._all:
            i = int(np.searchsorted(a, x))
            if i < len(a) and a[i] == x:
                return True
        return False
