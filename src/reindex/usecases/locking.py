"""The index lock as the use cases hold it: taken before the first write, renewed in the background,
released at the end. Every writer (apply, cutover, rollback, gc) goes through :func:`holding_index_lock`."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from typing import Any, Iterator

from reindex.manifests import acquire_lock

__all__ = ["holding_index_lock", "lock_owner"]


def lock_owner() -> str:
    """``host:pid:nonce`` — the host and pid let a later run see that the holder died."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def holding_index_lock(state: Any, index: str, purpose: str) -> Iterator[Any]:
    """Hold the index lock for the duration of the block, renewed in the background; a writer calls
    ``lock.check()`` before each write and stops when the lease is lost (see :mod:`reindex.locks`)."""
    lock = acquire_lock(state, index, lock_owner(), purpose=purpose)
    with lock:
        yield lock
