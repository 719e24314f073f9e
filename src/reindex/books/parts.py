"""The chunk manifest's parts as units: written and rewritten under the index lock, read once per process while
they do not move, and their digests known from their signatures (issue 43: state read in proportion to the change).

A part's digest is the digest of its bytes; the manifest's digest (what a plan records and apply's drift check
compares) is the digest of every part's key and digest. Each part's digest is recorded with its signature — what the
object store's listing says of it without reading it (``ObjectStore.signatures``: a file's inode, size and times, an
object's ETag), returned with its bytes by the same read (``get_signed``) — in ``Books.part_digests_key``: a part
whose signature did not move is not read again. The record is a cache of facts (this signature, these bytes): a
damaged or missing one costs reading the parts, never a wrong digest. A part this process read or wrote is kept by
the store with its signature (``ObjectStore.get_cached``/``remember``): a plan and its apply's shard read the part
they touch once."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable

from reindex.adapters.stores.objects import ObjectStore
from reindex.books.layout import Books
from reindex.books.manifests import (
    ManifestRow,
    chunk_manifest_bytes,
    chunk_manifest_keys,
    chunk_manifest_part_rows,
    read_json,
    write_json,
)
from reindex.errors import ReindexError, StateError

__all__ = [
    "DIGESTS_VERSION", "digest_of_parts", "manifest_digest", "part_digest", "part_digests", "read_chunk_manifest_part",
    "read_json_cached", "read_part_bytes", "rewrite_chunk_manifest_part", "run_rewrites", "write_chunk_manifest_part",
]


def _rewrite_key(index: str, collection: str, run: str, part: str) -> str:
    return Books(None, index).rewrite_key(collection, run, part)



def write_chunk_manifest_part(store: ObjectStore, index: str, collection: str, part: str, rows: Iterable[ManifestRow]) -> str:
    key = Books(store, index).chunk_part_key(collection, part)
    data = chunk_manifest_bytes(rows)
    store.put(key, data)
    _written_part(store, index, collection, key, data)
    return key


def part_digest(data: bytes) -> str:
    """The digest of one chunk manifest part's bytes."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


DIGESTS_VERSION = "reindex/part-digests/v1"


def part_digests(store: ObjectStore, index: str, collection: str, *,
                 read: dict[str, bytes] | None = None) -> list[tuple[str, str]]:
    """(key, digest of its bytes) of each part of a population's chunk manifest, in listing order, reading only the
    parts that changed: a part whose signature (its listing metadata: a file's inode, size and times, an object's
    ETag; ``ObjectStore.signatures``) is the one recorded with its digest (``Books.part_digests_key``) is not read;
    the others are read (with their signature, from the same read) and hashed, and the record updated. The record is
    a cache of facts (this signature, these bytes): a damaged or stale one only costs reading the parts again. A
    store without signatures reads and hashes every part, as before. ``read``: the bytes of the parts read here are
    kept there (a plan decodes a changed part it had to hash)."""
    signatures, get_signed = getattr(store, "signatures", None), getattr(store, "get_signed", None)
    if not callable(signatures) or not callable(get_signed):
        out = []
        for key in chunk_manifest_keys(store, index, collection):
            data = store.get(key) or b""
            if read is not None:
                read[key] = data
            out.append((key, part_digest(data)))
        return out
    books = Books(store, index)
    sigs = {k: v for k, v in signatures(books.chunks_prefix(collection)).items() if books.part_of(k) is not None}
    cache = books.part_digests_key(collection)
    try:
        rec = read_json(store, cache)
    except StateError:
        rec = None
    known = rec.get("parts") if isinstance(rec, dict) and rec.get("version") == DIGESTS_VERSION else None
    known = known if isinstance(known, dict) else {}
    out, fresh = [], {}
    for key in sorted(sigs):
        entry = known.get(key)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == sigs[key] and isinstance(entry[1], str):
            sig, digest = entry
        else:
            got = get_signed(key)
            data, sig = got if got is not None else (b"", None)  # deleted between list and read: as it reads now
            digest = part_digest(data)
            if read is not None:
                read[key] = data
            remember = getattr(store, "remember", None)
            if callable(remember):
                remember(key, data, sig)  # the decode that follows reads it from memory
        out.append((key, digest))
        if sig is not None:
            fresh[key] = [sig, digest]
    if fresh != known:
        try:
            write_json(store, cache, {"version": DIGESTS_VERSION, "parts": fresh})
        except (ReindexError, OSError):
            pass  # a cache: a store that refuses the write only costs the next reader the hashing
    return out


def read_json_cached(store: ObjectStore, key: str) -> dict | None:
    """:func:`read_json` of an object this process may read again (a part's summary): from the store's memory while its
    signature holds."""
    cached = getattr(store, "get_cached", None)
    if not callable(cached):
        return read_json(store, key)
    data = cached(key)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError as err:
        raise StateError(f"{store.describe()}/{key}: not valid JSON ({err}); restore it or delete it") from None


def read_part_bytes(store: ObjectStore, key: str) -> bytes | None:
    """A manifest part's bytes, from the store's memory of them while their signature holds (``get_cached``: a
    plan and its apply's shard read the part they touch once), else read."""
    cached = getattr(store, "get_cached", None)
    return cached(key) if callable(cached) else store.get(key)


def _written_part(store: ObjectStore, index: str, collection: str, key: str, data: bytes) -> None:
    """After a writer holding the index lock wrote a manifest part: its digest recorded with its new signature, and
    its bytes remembered, so that nothing reads back what was just written (the catch-up, the next cycle's plan).
    Under the lock nobody else writes the part between the write and the ``stat``."""
    signature = getattr(store, "signature", None)
    if not callable(signature):
        return
    sig = signature(key)
    remember = getattr(store, "remember", None)
    if callable(remember):
        remember(key, data, sig)
    if sig is None:
        return
    cache = Books(store, index).part_digests_key(collection)
    try:
        rec = read_json(store, cache)
        parts = rec.get("parts") if isinstance(rec, dict) and rec.get("version") == DIGESTS_VERSION else None
        parts = dict(parts) if isinstance(parts, dict) else {}
        parts[key] = [sig, part_digest(data)]
        write_json(store, cache, {"version": DIGESTS_VERSION, "parts": parts})
    except (ReindexError, OSError):
        pass  # a cache: the next reader hashes the part


def manifest_digest(store: ObjectStore, index: str, collection: str, *,
                    rewritten: dict[str, tuple[str | None, str]] | None = None) -> str:
    """A digest of a population's chunk manifest (each part's key and the digest of its bytes), for plan
    input checks. ``rewritten`` (part key → (digest before, digest after): the parts one run rewrote, see
    :func:`rewrite_chunk_manifest_part`): a part holding exactly what that run wrote counts as what it held
    before the run (absent: not counted), so a resumed run does not take its own writes for drift, while
    any other change to any part still changes the digest. Parts whose signature did not move are not read
    (:func:`part_digests`)."""
    parts = []
    for key, digest in part_digests(store, index, collection):
        if rewritten and key in rewritten and digest == rewritten[key][1]:
            digest = rewritten[key][0]  # type: ignore[assignment]
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
        before = dict(part_digests(store, index, collection)).get(key)  # the part's own bytes only if they moved
    write_json(store, _rewrite_key(index, collection, run, part),
               {"part": key, "before": before, "after": part_digest(data), "at": time.time()})
    store.put(key, data)
    _written_part(store, index, collection, key, data)
    return key


def run_rewrites(store: ObjectStore, index: str, collection: str, run: str) -> dict[str, tuple[str | None, str]]:
    """Manifest part key → (digest before, digest after) of the parts run ``run`` rewrote in place."""
    out: dict[str, tuple[str | None, str]] = {}
    for key in store.list(Books(store, index).rewrites_prefix(collection, run)):
        rec = read_json(store, key)
        if rec and isinstance(rec.get("part"), str) and isinstance(rec.get("after"), str):
            out[rec["part"]] = (rec.get("before"), rec["after"])
    return out


def read_chunk_manifest_part(store: ObjectStore, index: str, collection: str, part: str) -> list[ManifestRow]:
    key = Books(store, index).chunk_part_key(collection, part)
    data = read_part_bytes(store, key)
    if data is None:
        return []
    return chunk_manifest_part_rows(data, f"{store.describe()}/{key}")
