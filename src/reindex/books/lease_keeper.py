"""The lease keeper: a small process that renews an index lock's lease while its holder cannot run Python.

The edge engine's index build holds the interpreter lock for its whole length (70 s for 60 k points on a loaded
2-core box), so no heartbeat thread of the holder runs during it; extending the lease once by the build's price
was not enough where wall time is 15–20× CPU time (issue 43). This process does not share the holder's
interpreter: the kernel schedules it whatever the build does, and it needs a few milliseconds of CPU per renewal.

Started by :meth:`reindex.books.locks.IndexLock.renewed_elsewhere` (:class:`Keeper`: a fresh interpreter running
:func:`reindex.books.locks.keep_lease`, which serves the lock with :func:`serve`); one JSON line on stdin says which store, lock, version and body to renew from (the holder's own renewals stop
meanwhile: one writer of the lock at a time). It renews by the same compare-and-swap as the holder
(:meth:`~reindex.books.locks.IndexLock.heartbeat`), every ``interval`` seconds, and reports each renewal on stdout
without ever blocking (a report that does not fit the pipe is dropped: the holder may not be reading while the
build runs). ``stop`` on stdin: a last, blocking report, then exit. End of stdin — the holder is gone — stops it
at once without renewing again: the lease then runs out as it would have, and a contender takes it over. A
renewal that finds the lock taken over or released reports the loss and exits; a store error is retried until
the lease runs out, as the holder's heartbeat does."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["Keeper", "read_spec", "serve"]

# The keeper process: a fresh interpreter that builds the lock from the spec and serves it (reindex.books.locks).
_COMMAND = "import sys; from reindex.books.locks import keep_lease; sys.exit(keep_lease())"


class _Lines:
    """Lines from a file descriptor, read without blocking past what ``select`` announced."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def wait(self, timeout: float) -> list[str] | None:
        """Complete lines that arrived within ``timeout`` seconds ([] when none); None at end of input."""
        if b"\n" not in self.buf and not self.eof:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
            if ready:
                chunk = os.read(self.fd, 65536)
                self.buf += chunk
                self.eof = not chunk
        if b"\n" in self.buf:
            *lines, self.buf = self.buf.split(b"\n")
            return [x.decode() for x in lines]
        return None if self.eof else []


def read_spec() -> tuple[dict[str, Any] | None, _Lines]:
    """The holder's spec (the first line on stdin; None when it closed first) and the rest of stdin's lines."""
    lines = _Lines(sys.stdin.fileno())
    first = lines.wait(60.0)
    return (json.loads(first[0]) if first else None), lines


def _say(fd: int, report: dict[str, Any], *, final: bool = False) -> None:
    data = (json.dumps({**report, "final": final}, sort_keys=True) + "\n").encode()
    if final:
        os.set_blocking(fd, True)
    try:
        os.write(fd, data)  # a line under PIPE_BUF is written whole or not at all
    except (BlockingIOError, BrokenPipeError):
        pass  # the holder is not reading now (or is gone): the next report, or the last one, says it


class Keeper:
    """A running lease keeper (:mod:`reindex.books.lease_keeper`) for one held lease, and the thread that reads its
    reports into the lease."""

    def __init__(self, lock: Any, uri: str, endpoint_url: str | None) -> None:
        self.lock = lock
        self.done = threading.Event()
        self.renewed = threading.Event()  # the keeper renewed (or ended) at least once
        self.proc = subprocess.Popen([sys.executable, "-c", _COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        spec = {"uri": uri, "endpoint_url": endpoint_url, "index": lock.index, "owner": lock.owner, "ttl": lock.ttl,
                "body": lock.body, "version": lock.version, "sent": time.monotonic() + lock.remaining() - lock.ttl + lock.ttl / 10,
                "interval": lock.ttl / 3}
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(spec) + "\n").encode())
        self.proc.stdin.flush()
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"reindex-lease-keeper-{lock.index}")
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            self.lock.adopt(report)
            self.renewed.set()
            if report.get("final"):
                break
        self.renewed.set()
        self.done.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask for its last report and wait for it (the lease then holds what the keeper last wrote)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        self.done.wait(timeout)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout)


def serve(lock: Any, spec: dict[str, Any], lines: _Lines, out: int, lost_errors: tuple[type[BaseException], ...]) -> int:
    """The keeper's loop, in its own process, for ``lock`` (an :class:`~reindex.books.locks.IndexLock` made from the
    holder's ``spec``): renew every ``interval``, report, stop when asked or when the holder is gone."""
    interval = float(spec["interval"])
    retry_every = max(min(interval / 4, 5.0), 0.01)
    os.set_blocking(out, False)
    state: dict[str, Any] = {"renewals": 0, "error": None, "lost": None, "version": spec["version"],
                             "body": spec["body"], "sent": float(spec["sent"])}
    wait = 0.0  # the first renewal at once: the holder waits for it before it stops running Python
    while True:
        got = lines.wait(wait)
        if got is None:
            return 0  # the holder is gone: never renew a lease for nobody
        if "stop" in (x.strip() for x in got):
            _say(out, state, final=True)
            return 0
        if got:
            continue
        sent = time.monotonic()
        try:
            lock.heartbeat()
        except lost_errors:
            state["lost"] = lock.lost
            _say(out, state, final=True)
            return 0
        except Exception as err:  # noqa: BLE001 - a store that does not answer: retried while the lease lasts
            state["error"] = " ".join(str(err).split()) or type(err).__name__
            if lock.remaining() <= 0:
                state["lost"] = f"could not renew it before the lease ran out (last error: {state['error']})"
                _say(out, state, final=True)
                return 0
            wait = min(retry_every, max(0.0, lock.remaining()))
            continue
        state.update(renewals=state["renewals"] + 1, error=None, version=lock.version, body=lock.body, sent=sent)
        _say(out, state)
        wait = interval
