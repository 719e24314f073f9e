"""A cursor column's value as it is kept in a cursor (typed text that reads back to the same value), and the
digest of an id listing."""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Iterable
from typing import Any

from reindex.errors import SourceError

__all__ = ["decode_mark", "encode_mark", "ids_digest"]


def encode_mark(value: Any) -> str | None:
    """``int:17``, ``float:1.5``, ``str:abc``, ``datetime:2026-12-01T10:00:00+00:00``, ``date:2026-12-01``
    (None: no mark, every row is past it)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SourceError(f"a cursor column holds booleans ({value!r}); source.cursor must name a monotonic column "
                          "(a timestamp, a number or a sortable string)")
    if isinstance(value, int):
        return f"int:{value}"
    if isinstance(value, float):
        return f"float:{value!r}"
    if isinstance(value, str):
        return f"str:{value}"
    if isinstance(value, _dt.datetime):
        return f"datetime:{value.isoformat()}"
    if isinstance(value, _dt.date):
        return f"date:{value.isoformat()}"
    raise SourceError(f"a cursor column holds {type(value).__name__} values; source.cursor must name a timestamp, "
                      "number, date or string column")


def decode_mark(text: str | None) -> Any:
    """The value :func:`encode_mark` wrote."""
    if text is None:
        return None
    kind, _, raw = str(text).partition(":")
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "str":
            return raw
        if kind == "datetime":
            return _dt.datetime.fromisoformat(raw)
        if kind == "date":
            return _dt.date.fromisoformat(raw)
    except ValueError:
        pass
    raise SourceError(f"a recorded cursor mark {text!r} cannot be read back; run `reindex sync --verify` to read "
                      "the source whole and record a new one")


def ids_digest(ids: Iterable[str]) -> str:
    """The digest of an id listing, in the order given (the source's own, stable order)."""
    h = hashlib.blake2b(digest_size=16)
    for doc_id in ids:
        h.update(doc_id.encode() + b"\n")
    return h.hexdigest()
