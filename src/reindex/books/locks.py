"""The index lock: one writer per index, with a lease, compare-and-swap renewal and a fencing token.

The lock is one object, ``indexes/<index>/lock.json``, changed only by compare-and-swap on its
version (the S3 ETag, or a digest of the file's bytes for a folder; see ``stores.objects``):

- *acquire*: read the lock and its version; if it is absent, released ("free"), stale, or left by
  a process that is provably gone (see ``ProcessIdentity``), write a held body from exactly that version (``If-None-Match: *``
  when absent, ``If-Match: <version>`` otherwise). Of two contenders that read the same version, the
  store lets one write through; the other re-reads and fails fast naming the winner. Never
  delete-then-create.
- *renew* (``heartbeat``): a compare-and-swap from the version we last wrote, pushing ``expires``
  forward. If the lock moved on, someone took it over: the lease is marked lost.
- *release*: a compare-and-swap to a "free" body that keeps the token, only if the lock is still
  ours. The object is never deleted, so the token can only grow.

Every held body carries a **fencing token**: the previous token plus one, on every acquisition and
takeover. It names one lease; a writer compares it (and its nonce) with the stored lock to know it
still holds the index.

A holder stops before its next write when ``check()`` raises ``LockLost``: after a takeover or a
release seen by a renewal, after renewals kept failing until the lease ran out, or when its own
lease (measured on its monotonic clock from the moment it sent the last successful renewal, less a
margin of ttl/10) has run out. A contender takes a held lock over only when it is **stale**: its
current version was written more than its ttl ago *as the store's own clock measures it* (the file
system's stamps, or S3's ``LastModified`` against the reply's ``Date``; ``get_versioned_aged``), i.e.
nobody renewed it for a whole ttl. No host's wall clock is compared with another's, so a contender
whose clock runs minutes ahead cannot take a live lease; the guarantee assumes only that clocks run at
about the same rate (the holder stops ttl/10 early). The ``expires`` a holder writes is for people
(``reindex status``), except in a lock written before leases carried their ttl (format 1), which is
judged by it as it was then. A write that is already under way when the lease ends is not stopped: the
vector store does not check the token.

Who holds a lock is recorded beside the owner name as a ``ProcessIdentity`` (host, boot id, PID-namespace
inode, pid, start time). A contender takes a lock over before its lease ends only when that identity is
provably a process of its own kernel boot and PID namespace that is gone (or whose pid now names a process
started at another time); a lock from another container, machine or boot, or one written before the
identity existed (only ``host:pid`` in its owner), waits for its lease on the store's clock. Two containers
sharing a host name but not a PID namespace therefore never see each other's live lock as dead.

A holder confirms the lock (``check(confirm=True)``: one read, comparing owner, nonce and token) before
every commit point of its work, so a holder whose lock was taken over behind its back stops before its
next record instead of at its next renewal.

A conditional write whose reply is lost (and whose retry then reports "precondition failed", or
which fails for good) is resolved by reading the lock back: if it holds our exact bytes (owner,
nonce, token, renewal count), the write is ours.
"""

from __future__ import annotations

import json
import math
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Self

from reindex.errors import LockHeld, LockLost, ReindexError, StateError, TransientError
from reindex.books.layout import Books
from reindex.foundation.processes import ProcessIdentity
from reindex.adapters.stores.objects import ObjectStore

__all__ = [
    "LOCK_FORMAT",
    "LONGEST_LEASE_S",
    "Heartbeat",
    "Fence",
    "IndexLock",
    "LockHeld",
    "LockInfo",
    "LockLost",
    "ProcessIdentity",
    "acquire_lock",
    "lease_words",
    "lock_key",
    "parse_lock",
    "read_lock",
]

LOCK_FORMAT = 3  # 3: held bodies carry the holder's ProcessIdentity ("process")
# How many times acquire re-reads the lock after losing a compare-and-swap to a change that left it
# takeable (a release, say) before giving up; each lost round means another writer made progress.
_ACQUIRE_ROUNDS = 5


def lock_key(index: str) -> str:
    """The object key of an index's lock."""
    return Books(None, index).lock_key


# --------------------------------------------------------------------------------------------
# What a lock object says
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockInfo:
    """What the lock object of an index says. ``state``: ``absent`` (never taken), ``free``
    (released; keeps the last token), ``held``, or ``corrupt`` (unreadable; ``reason`` says why)."""

    state: Literal["absent", "free", "held", "corrupt"]
    token: int = 0
    owner: str | None = None
    purpose: str | None = None
    expires: float | None = None
    nonce: str | None = None
    reason: str | None = None
    acquired: float | None = None  # when this lease was taken (the holder's wall clock)
    ttl: float | None = None  # the lease length the holder renews within (None: a format-1 lock)
    process: ProcessIdentity | None = None  # who wrote it (None: a lock written before identities)

    @property
    def held(self) -> bool:
        return self.state == "held"

    @property
    def corrupt(self) -> bool:
        return self.state == "corrupt"

    def expired(self, now: float | None = None) -> bool:
        """Whether a held lock's expiry (the holder's wall clock) has passed on ours (for display)."""
        return self.held and (self.expires or 0.0) < (time.time() if now is None else now)

    def stale(self, age: float) -> bool:
        """Whether a held lock may be taken over, given ``age``: seconds since its current version was
        written, on the store's clock. Stale when nobody renewed it for a whole ttl; a format-1 lock
        (no ttl) when its expiry has passed on our clock."""
        if not self.held:
            return False
        if self.ttl is None:
            return self.expired()
        return age > self.ttl

    def describe(self, where: str = "") -> str | None:
        """One line for ``reindex status``; None when nobody holds the lock."""
        if self.corrupt:
            return (f"lock file {where or 'of the index'} is corrupt ({self.reason}); if no reindex command "
                    "is running for this index, delete it")
        if not self.held:
            return None
        when = lease_words((self.expires or 0.0) - time.time())
        return f"locked by {self.owner} ({self.purpose}), token {self.token}, {when}"

    def as_status(self) -> dict[str, Any] | None:
        """The ``lock`` entry of ``api.status()``: None when free; ``owner`` and ``purpose`` always
        present (for a corrupt file, ``?`` and the reason) so a one-line renderer never fails."""
        if self.corrupt:
            return {"owner": "?", "purpose": f"corrupt lock file: {self.reason}", "corrupt": True,
                    "reason": self.reason, "token": None, "expires": None}
        if not self.held:
            return None
        host, _, rest = (self.owner or "").partition(":")
        pid = rest.partition(":")[0]
        return {"owner": self.owner, "purpose": self.purpose, "corrupt": False, "reason": None,
                "token": self.token, "expires": self.expires, "host": host or None,
                "pid": int(pid) if pid.isdigit() else None, "since": self.acquired, "lease_s": self.ttl}


# No reindex lease is longer than this (they last 120 s, or through an index build as long as it is priced):
# an expiry further away was forged, or written by a host whose clock is far ahead; said so instead of
# "expires in 998203807402 s".
LONGEST_LEASE_S = 86400.0


def lease_words(left: float) -> str:
    """How a lease with ``left`` seconds to run is told to people: ``expires in 90 s``, ``expired 5 s ago``,
    or, beyond any real lease, that the lock was forged or written with a wrong clock."""
    if left > LONGEST_LEASE_S:
        return (f"its expiry is {left / 86400:,.0f} days away, longer than any reindex lease (a forged lock, or "
                "one written by a host whose clock is wrong)")
    return f"expires in {int(left)} s" if left >= 0 else f"expired {int(-left)} s ago"


def _where(store: ObjectStore, key: str) -> str:
    """The file or object holding ``key``, for a message."""
    describe_key = getattr(store, "describe_key", None)
    return describe_key(key) if describe_key is not None else f"{store.describe()}/{key}"


def parse_lock(data: bytes | None) -> LockInfo:
    """Read a lock object's bytes; anything unreadable is ``corrupt`` with the reason, never raised."""
    if data is None:
        return LockInfo("absent")
    try:
        body = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return LockInfo("corrupt", reason="not UTF-8 text")
    except json.JSONDecodeError as err:
        return LockInfo("corrupt", reason=f"not JSON: {err.msg} at line {err.lineno} column {err.colno}")
    if not isinstance(body, dict):
        return LockInfo("corrupt", reason=f"a JSON {type(body).__name__}, not an object")
    token = body.get("token", 0)  # format 1 (before fencing) had no token: count it as 0
    if not _is_int(token) or token < 0:
        return LockInfo("corrupt", reason=f"token {token!r} is not a whole number >= 0")
    nonce = body.get("nonce")
    if nonce is not None and not isinstance(nonce, str):
        return LockInfo("corrupt", reason=f"nonce {nonce!r} is not text")
    if body.get("state") == "free":
        return LockInfo("free", token=token, nonce=nonce)
    if body.get("state", "held") != "held":
        return LockInfo("corrupt", reason=f"unknown state {body.get('state')!r}")
    owner, purpose, expires = body.get("owner"), body.get("purpose", "?"), body.get("expires")
    if not isinstance(owner, str) or not owner:
        return LockInfo("corrupt", reason="no owner")
    if not isinstance(purpose, str):
        return LockInfo("corrupt", reason=f"purpose {purpose!r} is not text")
    if not _is_number(expires):
        return LockInfo("corrupt", reason=f"expiry {expires!r} is not a number")
    acquired, ttl = body.get("acquired"), body.get("ttl")
    if ttl is not None and (not _is_number(ttl) or ttl < 0):
        return LockInfo("corrupt", reason=f"ttl {ttl!r} is not a number of seconds")
    return LockInfo("held", token=token, owner=owner, purpose=purpose, expires=float(expires), nonce=nonce,
                    acquired=float(acquired) if _is_number(acquired) else None,
                    ttl=float(ttl) if ttl is not None else None,
                    process=ProcessIdentity.from_dict(body.get("process")))


def read_lock(store: ObjectStore, index: str) -> LockInfo:
    """What the lock of ``index`` says now. A corrupt file is reported, not raised; an unreachable
    store raises its StateError or TransientError."""
    return parse_lock(store.get(lock_key(index)))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _encode(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _swap(store: ObjectStore, key: str, data: bytes, version: str | None) -> str | None:
    """Compare-and-swap ``data`` in from ``version``; the new version, or None if the lock moved on.
    A write whose reply was lost is recognised by reading our exact bytes back."""
    try:
        new = store.put_if_version(key, data, version)
    except TransientError:
        now = store.get_versioned(key)  # raises in turn if the store is still unreachable
        if now is not None and now[0] == data:
            return now[1]
        raise
    if new is not None:
        return new
    now = store.get_versioned(key)
    return now[1] if now is not None and now[0] == data else None


# --------------------------------------------------------------------------------------------
# A fence: the holder's lease as plain data, for writers in other processes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fence:
    """The coordinator's lease as plain data (index, fencing token, nonce), carried to shard workers in
    other processes and machines. ``check(store)`` reads the lock and raises ``LockLost`` unless it is
    still held, unexpired, under exactly this token and nonce: a worker calls it before every write, so
    when the coordinator's lease ends (taken over, released, or run out because the coordinator died and
    stopped renewing) every worker stops before its next write. One state read per check."""

    index: str
    token: int
    nonce: str

    def check(self, store: ObjectStore) -> None:
        info = read_lock(store, self.index)
        if info.held and info.token == self.token and info.nonce == self.nonce and not info.expired():
            return
        if info.held and info.token == self.token and info.nonce == self.nonce:
            why = f"its lease expired {time.time() - (info.expires or 0.0):.0f} s ago (the coordinator stopped renewing it)"
        elif info.held:
            why = f"it is now held by {info.owner} ({info.purpose}, token {info.token})"
        elif info.corrupt:
            why = f"the lock file is unreadable ({info.reason})"
        else:
            why = "the coordinator released it"
        raise LockLost(f"the coordinator of this shard lost the lock on index {self.index!r} (token {self.token}): "
                       f"{why}; this worker stopped before its next write. Run the apply again (work already "
                       "recorded is kept)")

    @classmethod
    def of(cls, lock: IndexLock) -> Fence:
        """The fence of a held lease."""
        return cls(lock.index, lock.token, lock.nonce)


# --------------------------------------------------------------------------------------------
# A held lock
# --------------------------------------------------------------------------------------------


class IndexLock:
    """A held lease on an index. ``check()`` before every write; keep it renewed with
    ``start_heartbeat()`` (or ``with lock:``); ``release()`` when done. Made by ``acquire_lock``."""

    def __init__(self, store: ObjectStore, index: str, owner: str, ttl: float, body: dict[str, Any],
                 version: str, sent_at: float) -> None:
        self.store = store
        self.index = index
        self.owner = owner
        self.ttl = ttl
        self._body = dict(body)
        self._version = version
        self._deadline = sent_at + ttl - ttl / 10
        self._lost: str | None = None
        self._lost_guard = threading.Lock()  # apart from _mutex, so check() never waits for a renewal's I/O
        self._released = False
        self._mutex = threading.RLock()  # one renewal or release at a time
        self._attempts = 0  # renewal attempts: each writes a new "beat", so no two bodies are equal
        self._beater: Heartbeat | None = None

    @property
    def key(self) -> str:
        return lock_key(self.index)

    @property
    def token(self) -> int:
        """The fencing token of this lease (grows on every acquisition and takeover of the lock)."""
        return int(self._body["token"])

    @property
    def nonce(self) -> str:
        return str(self._body["nonce"])

    @property
    def purpose(self) -> str:
        return str(self._body["purpose"])

    @property
    def body(self) -> dict[str, Any]:
        """A copy of the body last written."""
        return dict(self._body)

    @property
    def lost(self) -> str | None:
        """Why the lease is lost, or None while it holds."""
        return self._lost

    def remaining(self) -> float:
        """Seconds left on this holder's lease (its monotonic clock, margin included)."""
        return self._deadline - time.monotonic()

    # ---- fencing ------------------------------------------------------------------------------

    def check(self, *, confirm: bool = False) -> None:
        """Raise ``LockLost`` unless this lease still holds. Without ``confirm`` it reads no state
        (cheap enough for every write); with ``confirm`` it also reads the lock and compares owner,
        nonce and token (use it before a step that cannot be undone, such as an alias swap)."""
        if self._lost is None and self.remaining() <= 0:
            self._mark_lost(f"its lease ran out {-self.remaining():.1f} s ago without a renewal "
                            "(the process was paused, or the heartbeat was not running or could not reach the state store)")
        if self._lost is None and confirm:
            info = read_lock(self.store, self.index)
            if not self._is_ours(info):
                self._mark_lost(self._moved_on(info))
        if self._lost is not None:
            raise LockLost(self._message())

    def _is_ours(self, info: LockInfo) -> bool:
        return info.held and info.nonce == self.nonce and info.owner == self.owner and info.token == self.token

    def _moved_on(self, info: LockInfo) -> str:
        if info.held:
            return f"it is now held by {info.owner} ({info.purpose}, token {info.token})"
        if info.corrupt:
            return f"the lock file was overwritten and is now unreadable ({info.reason})"
        return "the lock file was released or removed by someone else"

    def _mark_lost(self, reason: str) -> None:
        with self._lost_guard:
            if self._lost is None:
                self._lost = reason

    def _message(self) -> str:
        return (f"lost the lock on index {self.index!r} (token {self.token}, {self.purpose}): {self._lost}; "
                "stopped before the next write. Check `reindex status`, then run the command again "
                "(work already recorded is kept)")

    # ---- renewal ------------------------------------------------------------------------------

    def heartbeat(self, lease: float | None = None) -> None:
        """Renew the lease by compare-and-swap, for ``ttl`` seconds (``lease``: for that long instead, see
        :meth:`extend`). ``LockLost`` (and the lease marked lost) if the lock was taken over or released; a
        state-store error is raised as it is and leaves the lease as it was (``start_heartbeat`` retries it
        while the lease lasts)."""
        with self._mutex:
            self.check()
            length = self.ttl if lease is None else min(max(float(lease), self.ttl), LONGEST_LEASE_S)
            now, sent = time.time(), time.monotonic()
            self._attempts += 1
            # The lease's length is written with it: contenders judge a lock stale by its "ttl" (on the store's
            # clock), so an extended lease is one they wait for, and the next plain renewal shortens it again.
            body = {**self._body, "beat": self._attempts, "heartbeat": now, "ttl": length, "expires": now + length}
            data = _encode(body)
            new = _swap(self.store, self.key, data, self._version)
            if new is None:
                current = self.store.get_versioned(self.key)
                info = parse_lock(current[0] if current is not None else None)
                if current is not None and self._is_ours(info):
                    # Our nonce is still there: an earlier renewal of ours landed but its outcome
                    # never reached us (it raised). Nobody else writes our nonce, so swap from there.
                    new = _swap(self.store, self.key, data, current[1])
                    if new is None:
                        info = read_lock(self.store, self.index)
            if new is None:
                self._mark_lost(self._moved_on(info))
                raise LockLost(self._message())
            self._body, self._version = body, new
            self._deadline = sent + length - length / 10

    def extend(self, seconds: float) -> None:
        """Renew the lease once for ``seconds`` (at least the ttl, at most :data:`LONGEST_LEASE_S`) before a call
        that keeps every other thread of this process from running for longer than a renewal interval: the edge
        engine's index build holds the interpreter lock for its whole length (70 s for 60 k points on a loaded
        2-core box; no heartbeat ran), so a lease of the usual length ran out during every large build and the
        apply stopped with ``LockLost`` after it. The heartbeat's next renewal returns the lease to the ttl."""
        self.heartbeat(lease=seconds)

    def start_heartbeat(self, interval: float | None = None) -> Heartbeat:
        """Renew in a background thread every ``interval`` (ttl/3). A failed renewal is retried until
        the lease runs out, then the lease is marked lost: ``check()`` raises from then on."""
        with self._mutex:
            if self._beater is None or not self._beater.alive:
                self._beater = Heartbeat(self, interval if interval is not None else self.ttl / 3)
                self._beater.start()
            return self._beater

    # ---- release ------------------------------------------------------------------------------

    def release(self) -> None:
        """Stop renewing and mark the lock free, only if it is still ours (a compare-and-swap: a lock
        someone else took over is never touched). The token stays in the free lock. Idempotent."""
        beater = self._beater
        if beater is not None and beater.thread is not threading.current_thread():
            beater.stop()
        with self._mutex:
            if self._released:
                return
            self._mark_lost("this process released it")
            current = self.store.get_versioned(self.key)
            if current is not None and self._is_ours(parse_lock(current[0])):
                free = {"v": LOCK_FORMAT, "state": "free", "token": self.token, "nonce": self.nonce,
                        "released_by": self.owner, "released": time.time()}
                _swap(self.store, self.key, _encode(free), current[1])
            self._released = True  # only now: a release that failed on the store can be called again

    def __enter__(self) -> Self:
        self.start_heartbeat()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            self.release()
            return
        try:
            self.release()
        except ReindexError:
            pass  # the original error matters more; an unreleased lock expires after ttl


class Heartbeat:
    """The background renewal of one lease (a daemon thread); ``stop()`` ends it."""

    def __init__(self, lock: IndexLock, interval: float) -> None:
        self.lock = lock
        self.interval = interval
        self.retry_every = max(min(interval / 4, 5.0), 0.01)
        self.renewals = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"reindex-lock-{lock.index}")

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not threading.current_thread() and self.thread.ident is not None:
            self.thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._renew():
                return

    def _renew(self) -> bool:
        """One renewal, retried while the lease lasts; False when the lease is lost or we stop."""
        failed: str | None = None
        while True:
            if failed is not None and self.lock.remaining() <= 0:
                self.lock._mark_lost(f"could not renew it before the lease ran out (last error: {failed})")
                return False
            try:
                self.lock.heartbeat()
                self.renewals += 1
                return True
            except LockLost:
                return False
            except Exception as err:  # noqa: BLE001 - any failure to renew must end in a lost lease, never silence
                failed = self.last_error = _one_line(err)
            if self._stop.wait(max(0.0, min(self.retry_every, self.lock.remaining()))):
                return False


# --------------------------------------------------------------------------------------------
# Acquisition
# --------------------------------------------------------------------------------------------


def acquire_lock(store: ObjectStore, index: str, owner: str, *, purpose: str, ttl: float = 120.0) -> IndexLock:
    """Take the index lock or fail fast naming the holder (``LockHeld``). A free, stale (not renewed
    for a whole ttl, on the store's clock) or provably gone holder's lock (``ProcessIdentity.gone``) is
    taken over by compare-and-swap from the exact version read; the new lease's fencing token is the old
    one plus one."""
    key = lock_key(index)
    nonce = uuid.uuid4().hex
    info = LockInfo("absent")
    for _ in range(_ACQUIRE_ROUNDS):
        current = store.get_versioned_aged(key)
        version = current[1] if current is not None else None
        info = parse_lock(current[0] if current is not None else None)
        if info.corrupt:
            raise StateError(
                f"the lock of index {index!r} ({_where(store, key)}) is corrupt: {info.reason}; "
                "if no reindex command is running for this index, delete that file and run again"
            )
        age = current[2] if current is not None else 0.0
        if info.held and not info.stale(age) and not (info.process is not None and info.process.gone()):
            break
        now, sent = time.time(), time.monotonic()
        body = {"v": LOCK_FORMAT, "state": "held", "owner": owner, "purpose": purpose, "nonce": nonce,
                "token": info.token + 1, "beat": 0, "ttl": ttl, "acquired": now, "heartbeat": now,
                "expires": now + ttl, "process": ProcessIdentity.current().as_dict()}
        new = _swap(store, key, _encode(body), version)
        if new is not None:
            return IndexLock(store, index, owner, ttl, body, new, sent)
        # Someone changed the lock between our read and our write: read it again.
    else:
        raise LockHeld(
            f"index {index!r}: lost the race for its lock {_ACQUIRE_ROUNDS} times in a row to other commands "
            f"taking and releasing it; run `reindex status` to see who, and run again"
        )
    # How long until a contender may take it over: on the store's clock (ttl less the age of its last
    # renewal there), never this host's, so a contender whose clock is off is told the truth.
    left = info.ttl - age if info.ttl is not None else (info.expires or 0.0) - time.time()
    when = lease_words(left) if left > LONGEST_LEASE_S else f"expires in {max(1, math.ceil(left))} s unless renewed"
    raise LockHeld(
        f"index {index!r} is locked by {info.owner or '?'} ({info.purpose or '?'}), {when}; wait for it to "
        f"finish, or delete {_where(store, key)} if that process is gone"
    )
