"""Fault injection around a real object store, for the lock tests, and a lock contender that runs as
its own process (``python helpers_locks.py STATE_DIR NAME RENDEZVOUS_DIR``).

The contender reads ``go ROUND`` lines on stdin; for each it tries ``acquire_lock`` once, pausing
after its first read of the lock until the other contender has read it too (a file rendezvous), so
both hold the same version when they write. It answers ``won TOKEN NONCE`` or ``held`` on stdout.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reindex.errors import TransientError


def serialise_moto_writes(monkeypatch: Any) -> None:
    """Make the in-process moto server's conditional writes atomic, as real S3's are.

    moto 5.2.5 honours ``If-Match`` / ``If-None-Match`` on PUT and ``If-Match`` on DELETE, but checks
    the condition and then writes in two unsynchronised steps (``moto/s3/responses.py``,
    ``S3Response.put_object`` and ``delete_object``): two requests that arrive together can both pass
    the check. Seen once in 100 forced-race rounds on a loaded box. Holding one lock around each
    PUT and DELETE handler gives the server-side atomicity real S3 documents, so the tests exercise
    the lock protocol and not moto's race."""
    from moto.s3.responses import S3Response

    gate = threading.Lock()
    for name in ("put_object", "delete_object"):
        real = getattr(S3Response, name)

        def serialised(self: Any, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            with gate:
                return _real(self, *args, **kwargs)

        monkeypatch.setattr(S3Response, name, serialised)


class PausingStore:
    """A real store whose next ``get_versioned`` or ``get_versioned_aged`` (once armed) calls ``hook`` after reading: the
    caller then holds a version that someone else may change before the caller writes."""

    def __init__(self, inner: Any, hook: Callable[[], None]) -> None:
        self._inner = inner
        self._hook = hook
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        got = self._inner.get_versioned(key)
        if self.armed:
            self.armed = False
            self._hook()
        return got

    def get_versioned_aged(self, key: str) -> tuple[bytes, str, float] | None:
        got = self._inner.get_versioned_aged(key)
        if self.armed:
            self.armed = False
            self._hook()
        return got


class FlakyStore:
    """A real store whose conditional puts misbehave on demand.

    ``fail_puts``: that many conditional puts raise TransientError without writing (-1: all of them).
    ``fail_gets``: that many versioned reads raise TransientError.
    ``lose_replies``: that many conditional puts write, then answer as a retried S3 call would after
    a lost reply (``"precondition"``: None, i.e. "the key has moved on") or raise (``"error"``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.fail_puts = 0
        self.lose_replies = 0
        self.lost_reply_as = "precondition"
        self.fail_gets = 0
        self.put_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        if self.fail_gets > 0:
            self.fail_gets -= 1
            raise TransientError(f"get {key!r}: connection reset (injected)")
        return self._inner.get_versioned(key)

    def get_versioned_aged(self, key: str) -> tuple[bytes, str, float] | None:
        if self.fail_gets > 0:
            self.fail_gets -= 1
            raise TransientError(f"get {key!r}: connection reset (injected)")
        return self._inner.get_versioned_aged(key)

    def put_if_version(self, key: str, data: bytes, version: str | None) -> str | None:
        self.put_calls += 1
        if self.fail_puts != 0:
            if self.fail_puts > 0:
                self.fail_puts -= 1
            raise TransientError(f"conditional put {key!r}: connection reset (injected)")
        new = self._inner.put_if_version(key, data, version)
        if self.lose_replies and new is not None:
            self.lose_replies -= 1
            if self.lost_reply_as == "error":
                raise TransientError(f"conditional put {key!r}: read timeout (injected, after the write)")
            return None
        return new


def _rendezvous(folder: Path, round_no: str, name: str, timeout: float = 30.0) -> None:
    """Wait until both contenders have read the lock; then, in every other round, one of them
    waits 20 ms more (p0 in rounds 1, 5, 9, …; p1 in rounds 3, 7, 11, …)."""
    (folder / f"{round_no}-{name}").touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.glob(f"{round_no}-*"))) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"round {round_no}: the other contender never read the lock")
        time.sleep(0.001)
    if int(round_no) % 4 == (1 if name == "p0" else 3):
        time.sleep(0.02)


def _contend(state_dir: str, name: str, rendezvous: str) -> None:
    from reindex.books.locks import LockHeld, acquire_lock
    from reindex.adapters.stores.objects import LocalObjectStore

    folder = Path(rendezvous)
    current = {"round": ""}
    store = PausingStore(LocalObjectStore(state_dir), lambda: _rendezvous(folder, current["round"], name))
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd != "go":
            break
        current["round"] = arg
        store.armed = True
        try:
            lock = acquire_lock(store, "docs", f"{name}-host:{arg}:{name}", purpose=f"round {arg}", ttl=60)
        except LockHeld:
            print("held", flush=True)
        else:
            print(f"won {lock.token} {lock.nonce}", flush=True)


if __name__ == "__main__":
    _contend(*sys.argv[1:4])


def age_on_store(store: Any, key: str, seconds: float) -> None:
    """Make the object under ``key`` look ``seconds`` older *on the store's own clock*, as if that much
    time had passed since its last write without one: the folder's file times are set back (``os.utime``),
    the in-process moto server's ``LastModified`` for it is set back. A stale lock without waiting a ttl."""
    import datetime as dt
    import os

    from reindex.adapters.stores.objects import LocalObjectStore, S3ObjectStore

    while not isinstance(store, (LocalObjectStore, S3ObjectStore)):
        store = store._inner  # a fault-injecting wrapper
    if isinstance(store, LocalObjectStore):
        path = store.root / key
        st = path.stat()
        back = int(seconds * 1e9)
        os.utime(path, ns=(st.st_atime_ns - back, st.st_mtime_ns - back))
        return
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    fake = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[store.bucket].keys[store._key(key)]
    fake.last_modified = fake.last_modified - dt.timedelta(seconds=seconds)


_TAKE_AND_WAIT = """\
import os, socket, sys
from reindex.books.locks import acquire_lock
from reindex.adapters.stores.objects import open_object_store
store = open_object_store(sys.argv[1], endpoint_url=sys.argv[2] or None)
lock = acquire_lock(store, sys.argv[3], f"{socket.gethostname()}:{os.getpid()}:child", purpose=sys.argv[4],
                    ttl=float(sys.argv[5]))
print(lock.token, flush=True)
sys.stdin.read()
"""


def child_lock_command(uri: str, endpoint: str | None, index: str = "docs", purpose: str = "apply (child)",
                       ttl: float = 3600.0) -> list[str]:
    """The argv of a real process that takes the lock of ``index`` on the store at ``uri``, prints its
    token and holds it (without renewing) until its stdin closes."""
    return [sys.executable, "-c", _TAKE_AND_WAIT, uri, endpoint or "", index, purpose, str(ttl)]


def lock_taken_by_a_killed_process(uri: str, endpoint: str | None = None, index: str = "docs",
                                   ttl: float = 3600.0, *, reap: bool = True) -> tuple[int, int]:
    """A real child process takes the lock and is SIGKILLed, then reaped (as a shell reaps a killed
    command), or with ``reap=False`` left a zombie (reaped when the test's process ends); returns (its
    pid, its token)."""
    import os
    import subprocess

    import reindex

    env = {**os.environ, "PYTHONPATH": str(Path(reindex.__file__).resolve().parents[1])}
    proc = subprocess.Popen(child_lock_command(uri, endpoint, index, "apply (killed)", ttl), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        token = int(proc.stdout.readline())
    finally:
        proc.kill()
        if reap:
            proc.communicate()
    if not reap:
        deadline = time.monotonic() + 30
        while open(f"/proc/{proc.pid}/stat").read().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.01)
        _ZOMBIES.append(proc)
    return proc.pid, token


_ZOMBIES: list[Any] = []  # kept referenced so that they stay unreaped until the test has looked
