"""Embedding queries the way a reader does: a few texts a call, on one intra-op thread.

A query is a dozen tokens. torch's default intra-op threads (one per core) cost ~10-18× the CPU of one thread for
it (measured: 318 ms vs 17.5 ms of CPU, MiniLM, a loaded 2-core box): the threads' fork/join and spinning outweigh
the work. ``torch.set_num_threads`` is process-global, and an apply that evaluates serving modes embeds queries
while its shards embed passages with every thread, so the reader's setting must not be the process's.

What torch keeps per thread makes that possible: an OpenMP thread's team size (and MKL's local thread count) is
set for the calling thread, and a new thread takes the process-wide number the first time it runs a parallel
op. So queries are embedded on a small pool of dedicated threads, each set to one intra-op thread once by the
torch owner (:func:`reindex.adapters.embedders.sentence_transformers.one_intra_op_thread`, which puts the
process-wide number back at once): the build's threads, and threads started later, keep what they had. ONNX
models get a session of their own with one thread (onnxruntime's threads belong to a session). No torch here."""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

from reindex.adapters.embedders.base import EmbedResult

__all__ = ["QueryEmbedder", "for_queries", "in_query_thread", "query_threads"]

T = TypeVar("T")
_LOCK = threading.Lock()
_POOL: _Pool | None = None
_LOCAL = threading.local()  # .prepared: the prepare functions this pool thread has run


def query_threads() -> int:
    """Threads of the query pool: one query each, one intra-op thread each (half the CPUs, at least one)."""
    return max(1, (os.cpu_count() or 2) // 2)


def _prepare(prepare: Callable[[], bool] | None) -> None:
    """Run ``prepare`` (size the calling pool thread's intra-op threads) once per thread, until it says it is done
    (False: nothing to size yet, e.g. torch not imported). Serialised: a prepare may touch process-wide settings
    for an instant."""
    if prepare is None:
        return
    done = getattr(_LOCAL, "prepared", None)
    if done is None:
        done = _LOCAL.prepared = set()
    if prepare in done:
        return
    with _LOCK:
        if prepare():
            done.add(prepare)


class _Pool:
    """``size`` daemon threads taking calls from one queue: idle, they never hold a process's exit (a
    ThreadPoolExecutor's threads are joined at exit, and ``reindex``'s own exit joins every other thread first)."""

    def __init__(self, size: int) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(size):
            threading.Thread(target=self._work, name=f"reindex-query_{i}", daemon=True).start()

    def _work(self) -> None:
        while True:
            fn, done = self._calls.get()
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as err:  # noqa: BLE001 - handed to the caller, raised there
                    done.set_exception(err)

    def submit(self, fn: Callable[[], T]) -> Future:
        done: Future = Future()
        self._calls.put((fn, done))
        return done


def _pool() -> _Pool:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = _Pool(query_threads())
        return _POOL


def in_query_thread(fn: Callable[..., T], *args: Any, prepare: Callable[[], bool] | None = None, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a query thread, prepared by ``prepare`` (e.g. one torch intra-op thread); its
    exception is raised here."""
    def call() -> T:
        _prepare(prepare)
        return fn(*args, **kwargs)

    if threading.current_thread().name.startswith("reindex-query"):
        return call()
    return _pool().submit(call).result()


class QueryEmbedder:
    """An embedder whose calls run on the query pool, each thread prepared by ``prepare`` (one intra-op thread);
    the embedder it wraps is unchanged and may be the build's own."""

    def __init__(self, inner: Any, prepare: Callable[[], bool] | None = None, *, owns: bool = False) -> None:
        self.inner = inner
        self.prepare = prepare
        self.owns = owns  # made for it (an ONNX model's one-thread session): closed with it
        self.vector = getattr(inner, "vector", None)
        self.dimension = inner.dimension
        self.max_tokens = getattr(inner, "max_tokens", None)

    def embed(self, texts: list[str]) -> EmbedResult:
        return in_query_thread(self.inner.embed, texts, prepare=self.prepare)

    def describe(self) -> dict:
        """The wrapped embedder's description, with the threads one query call uses."""
        describe = getattr(self.inner, "describe", None)
        out = dict(describe()) if callable(describe) else {}
        return {**out, "threads": 1, "role": "queries"}

    def close(self) -> None:
        """Close the embedder it wraps if it was made for it; one it was given (the build's) is its owner's."""
        close = getattr(self.inner, "close", None)
        if self.owns and callable(close):
            close()


def for_queries(embedder: Any) -> Any:
    """``embedder`` as a reader embeds queries with: its own ``for_queries()`` when it has one (a model run by
    torch or onnxruntime), else itself (an API, a hash, a table lookup: no intra-op threads to size)."""
    if isinstance(embedder, QueryEmbedder):
        return embedder
    own = getattr(embedder, "for_queries", None)
    return own() if callable(own) else embedder
