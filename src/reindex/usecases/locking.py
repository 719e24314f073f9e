"""The index lock as the use cases hold it: taken before the first write, renewed in the background,
released at the end. Every writer (apply, cutover, rollback, gc, sync) goes through :func:`holding_index_lock`.

The lock is taken in one place per call chain: a block that already holds an index's lock (``Index.sync``
holds it from before planning to after cutover) lends it to the writers it calls, which check it instead of
taking it again. Held locks are tracked per context (a contextvar), so another thread or process contends
as before."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from contextvars import ContextVar
from typing import Any, Iterator

from reindex.books.locks import acquire_lock

__all__ = ["holding_index_lock", "lock_owner"]


def lock_owner() -> str:
    """``host:pid:nonce`` — the host and pid let a later run see that the holder died."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def holding_index_lock(state: Any, index: str, purpose: str) -> Iterator[Any]:
    """Hold the index lock for the duration of the block, renewed in the background; a writer calls
    ``lock.check()`` before each write and stops when the lease is lost (see :mod:`reindex.books.locks`)."""
    key = (state.describe(), index)
    held = _HELD.get()
    if key in held:  # this call chain holds the index already: the inner writer works under that lease
        held[key].check()
        yield held[key]
        return
    lock = acquire_lock(state, index, lock_owner(), purpose=purpose)
    token = _HELD.set({**held, key: lock})
    try:
        with lock:
            yield lock
    finally:
        _HELD.reset(token)


_HELD: ContextVar[dict[tuple[str, str], Any]] = ContextVar("reindex_held_index_locks", default={})
