"""Query vectors, recorded once per query side: what a cutover or a forecast embedded for its queries, read back by
the next one that asks the same side (:func:`reindex.context.queries.side_query_embedder`). A cache, never the
truth: a torn or foreign file reads as empty, and the queries are embedded again."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from reindex.adapters.stores.objects import ObjectStore
from reindex.books.layout import Books

__all__ = ["read_query_vectors", "write_query_vectors"]


def read_query_vectors(store: ObjectStore, side_key: str) -> dict[str, Any]:
    """The query vectors recorded for one query side: text digest → vector (empty when none, or unreadable)."""
    data = store.get(Books.query_vectors_key(side_key))
    if not data:
        return {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return dict(zip((str(d) for d in z["digests"]), z["vectors"]))
    except (OSError, ValueError, KeyError):
        return {}  # a torn or foreign file: embed again (it is a cache, never the truth)


def write_query_vectors(store: ObjectStore, side_key: str, vectors: dict[str, Any]) -> None:
    """Record one query side's query vectors (text digest → vector), replacing what was there."""
    buf = io.BytesIO()
    digests = sorted(vectors)
    np.savez(buf, digests=np.array(digests, dtype="U64"),
             vectors=np.stack([np.asarray(vectors[d], dtype=np.float32) for d in digests]))
    store.put(Books.query_vectors_key(side_key), buf.getvalue())
