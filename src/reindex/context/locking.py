"""The index lock as the use cases hold it: taken before the first write, renewed in the background,
released at the end. Every writer (apply, cutover, rollback, gc, sync) goes through :func:`holding_index_lock`.

The lock is taken in one place per call chain: a block that already holds an index's lock (``Index.sync``
holds it from before planning to after cutover) lends it to the writers it calls, which check it instead of
taking it again. Held locks are kept by the use cases' :class:`~reindex.context.Context`
(``held_locks``, per thread), so another handle, thread or process contends as before."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from typing import Any, Iterator

from reindex.books.locks import acquire_lock

__all__ = ["holding_index_lock", "lock_owner"]


def lock_owner() -> str:
    """``host:pid:nonce`` — the host and pid let a later run see that the holder died."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def holding_index_lock(ctx: Any, purpose: str) -> Iterator[Any]:
    """Hold the index lock of ``ctx`` (a Context) for the duration of the block, renewed in the background; a
    writer calls ``lock.check()`` before each write and stops when the lease is lost (see
    :mod:`reindex.books.locks`)."""
    key = (ctx.state.describe(), ctx.index, threading.get_ident())  # per thread, as a contextvar was
    held = ctx.held_locks.get(key)
    if held is not None:  # this call chain holds the index already: the inner writer works under that lease
        held.check()
        yield held
        return
    lock = acquire_lock(ctx.state, ctx.index, lock_owner(), purpose=purpose)
    ctx.held_locks[key] = lock
    try:
        with lock:
            yield lock
    finally:
        ctx.held_locks.pop(key, None)
