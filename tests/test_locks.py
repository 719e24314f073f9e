"""The fencing index lock on a real folder and on the loopback S3 server, with the same tests:
races forced by pausing a contender between its read of the lock and its write, lost replies,
failed renewals, expiry, release, tokens and corrupt lock files."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import botocore.exceptions as bex
import pytest
from helpers_locks import (
    FlakyStore,
    PausingStore,
    age_on_store,
    child_lock_command,
    lock_taken_by_a_killed_process,
    serialise_moto_writes,
)

import reindex
import reindex.books.locks as locks_module
from reindex.errors import StateError, TransientError
from reindex.books.locks import (
    IndexLock,
    LockHeld,
    LockLost,
    ProcessIdentity,
    acquire_lock,
    lock_key,
    parse_lock,
    read_lock,
)
from reindex.adapters.stores.objects import ObjectStore, S3ObjectStore, open_object_store

KEY = lock_key("docs")


@dataclass(frozen=True)
class MakeStore:
    """Opens a new store (its own client) on one shared location each time it is called; ``uri`` and
    ``endpoint`` let another process open the same one."""

    uri: str
    endpoint: str | None = None

    def __call__(self) -> ObjectStore:
        return open_object_store(self.uri, endpoint_url=self.endpoint)


@pytest.fixture(params=["folder", "s3"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> MakeStore:
    if request.param == "folder":
        return MakeStore(str(tmp_path / "state"))
    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    serialise_moto_writes(request.getfixturevalue("monkeypatch"))
    return MakeStore(f"s3://{bucket}/team/state", endpoint)


def _put_held(store: ObjectStore, token: int, owner: str = "gone-host:4242:dead", *, expires_in: float = -5.0,
              purpose: str = "apply (stale)") -> None:
    """Write a held lock in one plain put: by default (``expires_in`` < 0) one whose holder stopped
    renewing it, its version left unrenewed for longer than its ttl on the store's clock (test setup),
    else a fresh write (a holder, or a takeover by someone else)."""
    body = {"v": 2, "state": "held", "owner": owner, "purpose": purpose, "nonce": f"n{token}-{owner}",
            "token": token, "beat": 7, "ttl": 120, "acquired": 1.0, "heartbeat": 2.0, "expires": time.time() + expires_in}
    store.put(KEY, json.dumps(body).encode())
    if expires_in < 0:
        age_on_store(store, KEY, 120 + 5)


def _free_lock(store: ObjectStore, token: int) -> None:
    store.put(KEY, json.dumps({"v": 2, "state": "free", "token": token, "nonce": "x", "released_by": "a"}).encode())


def _wait_for(cond: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return bool(cond())


# --------------------------------------------------------------------------------------------
# Two contenders, one winner
# --------------------------------------------------------------------------------------------


def test_two_contenders_paused_between_read_and_takeover_exactly_one_wins(make_store: MakeStore) -> None:
    """The issue's race: both read the same lock (absent, free or expired), both wait until the other
    has read it too, then both write, at once or one 20 ms after the other. Delete-then-put gave
    two holders in 63 of 100 such rounds."""
    setup = make_store()
    barrier = threading.Barrier(2, timeout=30)
    delay = [0.0, 0.0]

    def pause(i: int) -> None:
        barrier.wait()  # both have read the same version
        time.sleep(delay[i])  # in some rounds one of them writes 20 ms after the other

    stores = [PausingStore(make_store(), lambda i=i: pause(i)) for i in range(2)]
    rounds, starts = 100, {"absent": 0, "free": 0, "expired": 0}
    for r in range(rounds):
        start = ("absent", "free", "expired")[r % 3]
        starts[start] += 1
        token = 0
        if start == "absent":
            setup.delete(KEY)
        elif start == "free":
            token = r
            _free_lock(setup, token)
        else:
            token = r
            _put_held(setup, token)
        delay[:] = [0.02 if r % 4 == 1 else 0.0, 0.02 if r % 4 == 3 else 0.0]
        results: list[IndexLock | LockHeld] = [LockHeld("unset"), LockHeld("unset")]

        def contend(i: int, r: int, results: list[IndexLock | LockHeld]) -> None:
            stores[i].armed = True
            try:
                results[i] = acquire_lock(stores[i], "docs", f"host{i}:{r}:c{i}", purpose=f"round {r}")
            except LockHeld as err:
                results[i] = err

        threads = [threading.Thread(target=contend, args=(i, r, results)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [x for x in results if isinstance(x, IndexLock)]
        assert len(winners) == 1, f"round {r} ({start}): {results}"
        (winner,) = winners
        loser = results[1 - results.index(winner)]
        assert f"locked by {winner.owner} (round {r})" in str(loser)
        stored = read_lock(setup, "docs")
        assert stored.held and stored.nonce == winner.nonce and stored.token == winner.token == token + 1
        winner.check(confirm=True)
    assert starts == {"absent": 34, "free": 33, "expired": 33}


def test_two_processes_paused_between_read_and_takeover_exactly_one_wins(tmp_path: Path) -> None:
    """The same race between two real processes on one state folder (the flock guard is what
    serialises them), 100 rounds of an expired lock being taken over; in half of them one process
    writes 20 ms after the other."""
    state, meet = tmp_path / "state", tmp_path / "meet"
    meet.mkdir()
    setup = open_object_store(str(state))
    env_path = str(Path(reindex.__file__).resolve().parents[1])
    helper = Path(__file__).with_name("helpers_locks.py")
    procs = [
        subprocess.Popen([sys.executable, str(helper), str(state), name, str(meet)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})
        for name in ("p0", "p1")
    ]
    try:
        for r in range(100):
            _put_held(setup, token=r)
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(f"go {r}\n")
                p.stdin.flush()
            answers = [p.stdout.readline().split() for p in procs if p.stdout is not None]
            won = [a for a in answers if a and a[0] == "won"]
            assert len(won) == 1 and sorted(a[0] for a in answers) == ["held", "won"], f"round {r}: {answers}"
            stored = read_lock(setup, "docs")
            assert stored.nonce == won[0][2] and stored.token == int(won[0][1]) == r + 1
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
            p.wait(timeout=30)
    assert [p.returncode for p in procs] == [0, 0]


def test_a_live_lock_is_never_taken_over(make_store: MakeStore) -> None:
    store = make_store()
    held = acquire_lock(store, "docs", "other-host:4242:deadbeef", purpose="apply 0123456789ab (initial)")
    with pytest.raises(LockHeld) as err:
        acquire_lock(make_store(), "docs", "me:1:x", purpose="apply")
    msg = str(err.value)
    assert msg.startswith("index 'docs' is locked by other-host:4242:deadbeef (apply 0123456789ab (initial)), expires in ")
    assert "wait for it to finish" in msg and "\n" not in msg
    where = f"the file {make_store.uri}/{KEY}" if "://" not in make_store.uri else \
        f"the object {make_store.uri}/{KEY} at {make_store.endpoint}"
    assert msg.endswith(f"delete {where} if that process is gone"), msg  # a file, not "folder …/lock.json"
    held.check(confirm=True)


@pytest.mark.parametrize("reaped", [True, False], ids=["reaped", "zombie"])
def test_a_dead_local_owners_lock_is_taken_over_by_compare_and_swap(make_store: MakeStore, reaped: bool) -> None:
    """A real process of this host, boot and PID namespace took the lock and was SIGKILLed: its pid is
    gone (or a zombie nobody reaped yet), so its lock is taken over at once, long before its hour-long
    lease ends."""
    pid, token = lock_taken_by_a_killed_process(make_store.uri, make_store.endpoint, reap=reaped)
    held = read_lock(make_store(), "docs")
    assert held.owner == f"{socket.gethostname()}:{pid}:child" and held.process is not None
    assert held.process.pid == pid and held.process.shares_pids_with(ProcessIdentity.current())
    lock = acquire_lock(make_store(), "docs", "me:1:x", purpose="resume")
    assert lock.token == token + 1
    assert read_lock(make_store(), "docs").owner == "me:1:x"


def _identity_body(**change: object) -> dict:
    return {**ProcessIdentity.current().as_dict(), **change}


def _dead_pid() -> int:
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that existed and is gone
    return dead.pid


@pytest.mark.parametrize("forged", ["boot_id", "pid_ns", "host", "old-format"])
def test_a_same_host_owner_not_provably_ours_waits_for_its_lease(make_store: MakeStore, forged: str) -> None:
    """An owner naming this host and a pid that does not exist here, but another kernel boot (a cloned
    VM), another PID namespace (a container sharing the host name), another host, or no identity at all (a
    lock written before identities): nothing proves it is gone, so only its lease on the store's clock
    decides. Before, any ``<this host>:<absent pid>`` owner was taken over at once."""
    store = make_store()
    pid = _dead_pid()
    owner = f"{socket.gethostname()}:{pid}:forged"
    process = {"boot_id": _identity_body(boot_id="0" * 36, pid=pid), "pid_ns": _identity_body(pid_ns=1, pid=pid),
               "host": _identity_body(host="elsewhere", pid=pid), "old-format": None}[forged]
    body = {"v": 3, "state": "held", "owner": owner, "purpose": "apply (elsewhere)", "nonce": "n", "token": 7,
            "beat": 0, "ttl": 120, "acquired": time.time(), "heartbeat": time.time(), "expires": time.time() + 120}
    if process is not None:
        body["process"] = process
    store.put(KEY, json.dumps(body).encode())
    with pytest.raises(LockHeld, match=f"locked by {owner} "):
        acquire_lock(make_store(), "docs", "me:1:x", purpose="apply")
    age_on_store(store, KEY, 125)  # its lease ran out on the store's clock: now it may be taken
    assert acquire_lock(make_store(), "docs", "me:1:x", purpose="apply").token == 8
    # The control: the same body naming this boot and namespace is taken over at once.
    store.put(KEY, json.dumps({**body, "token": 9, "process": _identity_body(pid=pid)}).encode())
    assert acquire_lock(make_store(), "docs", "me:2:x", purpose="apply").token == 10


def test_an_extended_lease_is_waited_for_and_the_next_renewal_shortens_it(make_store: MakeStore) -> None:
    """Before a call that keeps the heartbeat from running (the edge engine's index build holds the interpreter
    lock), the holder extends its lease: contenders wait for the extended length on the store's clock, not the
    ttl; the next plain renewal returns the lease to the ttl; an extension is never shorter than the ttl nor
    longer than any lease a contender believes."""
    store = make_store()
    a = acquire_lock(make_store(), "docs", "a:1:x", purpose="apply", ttl=60)
    a.extend(600)
    assert json.loads(store.get(KEY))["ttl"] == 600 and a.remaining() > 500
    age_on_store(store, KEY, 125)  # past the ttl, within the extension: still held
    with pytest.raises(LockHeld, match="locked by a:1:x"):
        acquire_lock(make_store(), "docs", "b:1:x", purpose="apply")
    a.check(confirm=True)
    a.heartbeat()  # the build is over: a plain renewal
    assert json.loads(store.get(KEY))["ttl"] == 60 and a.remaining() < 60
    age_on_store(store, KEY, 65)
    b = acquire_lock(make_store(), "docs", "b:1:x", purpose="apply")  # stale after the ttl again
    assert b.token == a.token + 1
    b.extend(1)
    assert json.loads(store.get(KEY))["ttl"] == 120  # b's own ttl, the default
    b.extend(10**12)
    assert json.loads(store.get(KEY))["ttl"] == locks_module.LONGEST_LEASE_S


def test_a_live_local_owner_with_a_reused_pid_is_gone(make_store: MakeStore) -> None:
    """The recorded pid runs, but it started at another time than the holder did: the pid was reused."""
    store = make_store()
    me = ProcessIdentity.current()
    assert me.start is not None, "this test needs /proc"
    body = {"v": 3, "state": "held", "owner": "x:1:y", "purpose": "apply", "nonce": "n", "token": 1, "beat": 0,
            "ttl": 120, "acquired": time.time(), "heartbeat": time.time(), "expires": time.time() + 120,
            "process": _identity_body(start=me.start + 1)}
    store.put(KEY, json.dumps(body).encode())
    assert acquire_lock(make_store(), "docs", "me:1:x", purpose="apply").token == 2
    store.put(KEY, json.dumps({**body, "token": 5, "process": me.as_dict()}).encode())  # this very process
    with pytest.raises(LockHeld):
        acquire_lock(make_store(), "docs", "me:1:x", purpose="apply")


def _unshare_prefix() -> list[str]:
    """``unshare`` options that give a child its own PID namespace (and /proc) here, or skip."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare (not installed)")
    tried = []
    for opts in (["--pid", "--kill-child", "--mount-proc"],
                 ["--user", "--map-root-user", "--pid", "--kill-child", "--mount-proc"]):
        r = subprocess.run(["unshare", *opts, "true"], capture_output=True, text=True)
        if r.returncode == 0:
            return ["unshare", *opts]
        tried.append(f"unshare {' '.join(opts)}: {r.stderr.strip() or r.returncode}")
    pytest.skip("cannot make a PID namespace here (" + "; ".join(tried) + ")")


def test_a_contender_in_another_pid_namespace_never_takes_a_live_lock(make_store: MakeStore) -> None:
    """The audit's two holders: a contender with the same host name in another PID namespace (a container
    sharing the host's UTS name) cannot see the holder's pid, yet must not take its live lock. Then a
    holder in that namespace that dies is not provably gone to us either: its lease decides."""
    from reindex.context.locking import lock_owner

    prefix = _unshare_prefix()
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(reindex.__file__).resolve().parents[1])}
    holder = acquire_lock(make_store(), "docs", lock_owner(), purpose="apply 0123456789ab (initial)")
    contender = subprocess.run([*prefix, *child_lock_command(make_store.uri, make_store.endpoint)], input="",
                               capture_output=True, text=True, env=env, timeout=120)
    assert contender.returncode == 1 and "LockHeld: index 'docs' is locked by " in contender.stderr, contender.stderr
    holder.check(confirm=True)
    holder.release()
    # The other way round: the namespaced process takes the lock and dies; its pid means nothing here.
    child = subprocess.Popen([*prefix, *child_lock_command(make_store.uri, make_store.endpoint)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None and int(child.stdout.readline()) == holder.token + 1
    child.kill()
    child.communicate()
    theirs = read_lock(make_store(), "docs").process
    assert theirs is not None and theirs.pid_ns != ProcessIdentity.current().pid_ns
    with pytest.raises(LockHeld):
        acquire_lock(make_store(), "docs", "me:1:x", purpose="apply")


# --------------------------------------------------------------------------------------------
# Fencing: a holder that lost its lease stops before its next write
# --------------------------------------------------------------------------------------------


def test_a_takeover_stops_the_old_holder_before_its_next_write(make_store: MakeStore) -> None:
    """A holder renews every ttl/3 and checks before each write. Someone takes the lock over (here
    a contender whose clock runs ahead, so it thought the lease had expired): the holder's next
    renewal sees it, and no write follows."""
    # ttl 6 s (renewal every 2 s): long enough that a loaded 2-core machine still renews in time, so
    # what stops the holder is the takeover, not its own lease running out.
    a = acquire_lock(make_store(), "docs", "a:1:x", purpose="apply", ttl=6.0)
    writes: list[float] = []
    stopped: list[BaseException] = []

    def writer() -> None:
        try:
            while True:
                a.check()
                writes.append(time.monotonic())
                time.sleep(0.005)
        except LockLost as err:
            stopped.append(err)

    with a.start_heartbeat() as beat:
        t = threading.Thread(target=writer)
        t.start()
        assert _wait_for(lambda: beat.renewals >= 1 or a.lost is not None, timeout=30.0), "no renewal in 30 s"
        assert a.lost is None and not stopped
        other = make_store()
        body = json.loads(other.get(KEY) or b"{}")
        assert body["beat"] >= 1, "the heartbeat did not renew"
        _put_held(other, token=body["token"] + 1, owner="b:2:y", purpose="apply 2", expires_in=60)
        taken = time.monotonic()
        t.join(timeout=10)
    assert not t.is_alive() and stopped, "the old holder kept writing"
    assert "now held by b:2:y (apply 2, token 2)" in str(stopped[0])
    assert "stopped before the next write" in str(stopped[0])
    # Detected by the next renewal (every 2 s), long before the 6 s lease would have run out.
    assert writes[-1] - taken < 2.0 + 1.5
    assert read_lock(other, "docs").owner == "b:2:y", "the old holder overwrote the new one"


def test_check_with_confirm_sees_a_takeover_at_once(make_store: MakeStore) -> None:
    a = acquire_lock(make_store(), "docs", "a:1:x", purpose="apply", ttl=60)
    a.check(confirm=True)
    _put_held(make_store(), token=2, owner="b:2:y", purpose="cutover", expires_in=60)
    a.check()  # reads nothing: cannot know yet
    with pytest.raises(LockLost) as err:
        a.check(confirm=True)
    assert str(err.value) == (
        "lost the lock on index 'docs' (token 1, apply): it is now held by b:2:y (cutover, token 2); "
        "stopped before the next write. Check `reindex status`, then run the command again (work already recorded is kept)"
    )
    with pytest.raises(LockLost, match="now held by b:2:y"):
        a.check()  # lost stays lost
    with pytest.raises(LockLost):
        a.heartbeat()
    a.release()
    assert read_lock(make_store(), "docs").owner == "b:2:y"


def test_expiry_without_renewal_is_detected_by_check(make_store: MakeStore) -> None:
    """The issue's "apply whose lock expired during a long pause also carried on": nobody took
    the lock, yet the holder's own lease ran out, so it must stop."""
    a = acquire_lock(make_store(), "docs", "a:1:x", purpose="apply", ttl=0.5)
    a.check()
    time.sleep(0.5)  # lease 0.5 s less a 0.05 s margin
    with pytest.raises(LockLost, match="its lease ran out .* without a renewal"):
        a.check()
    with pytest.raises(LockLost):
        a.check()  # lost stays lost
    with pytest.raises(LockLost):
        a.heartbeat()  # and cannot be revived
    assert read_lock(make_store(), "docs").nonce == a.nonce, "nobody else wrote"


def test_the_holder_stops_before_contenders_may_take_over(make_store: MakeStore) -> None:
    """The holder's lease ends ttl/10 before contenders may take the lock (no renewal for a whole ttl, on the
    store's clock), so its last write comes before anyone can take over (on clocks that run at about the same
    rate). Measured as contenders judge it: the age of the lock on the store when the holder has stopped.
    ttl 8 s, so the margin (0.8 s) is far above the time a loaded box takes to notice and read (a 1 s ttl's
    0.1 s margin failed at load 28-39)."""
    store, other = make_store(), make_store()
    ttl = 8.0
    a = acquire_lock(store, "docs", "a:1:x", purpose="apply", ttl=ttl)
    while True:
        try:
            a.check()
        except LockLost:
            break
        time.sleep(min(0.05, max(0.001, a.remaining())))
    got = store.get_versioned_aged(KEY)
    assert got is not None and parse_lock(got[0]).owner == "a:1:x"
    assert got[2] < ttl, f"the lock was {got[2]:.2f} s old on the store when its holder stopped: takeable before that"
    with pytest.raises(LockHeld):
        acquire_lock(other, "docs", "b:2:y", purpose="apply")


def test_a_heartbeat_that_cannot_renew_marks_the_lease_lost(make_store: MakeStore) -> None:
    store = FlakyStore(make_store())
    a = acquire_lock(store, "docs", "a:1:x", purpose="apply", ttl=0.9)
    store.fail_puts = -1  # the state store stops answering
    beat = a.start_heartbeat()
    assert _wait_for(lambda: a.lost is not None, timeout=3.0)
    assert _wait_for(lambda: not beat.alive, timeout=1.0), "the heartbeat thread kept running"
    assert "could not renew it before the lease ran out (last error: conditional put" in (a.lost or "")
    assert store.put_calls >= 3, "the renewal was not retried within the lease"
    with pytest.raises(LockLost, match="could not renew"):
        a.check()
    store.fail_puts = 0
    a.release()
    assert read_lock(store, "docs").state == "free"


def test_a_renewal_that_fails_briefly_is_retried_and_keeps_the_lease(make_store: MakeStore) -> None:
    """Two renewals fail; the third attempt, within the lease, succeeds and the lease holds. ttl 6 s: the
    retries (every 0.5 s from the first renewal at 2 s) land ~2.4 s before the lease would end; with 0.9 s
    they had ~0.3 s, which a loaded box with S3 round trips did not always leave (failed 2 of 7)."""
    store = FlakyStore(make_store())
    a = acquire_lock(store, "docs", "a:1:x", purpose="apply", ttl=6.0)
    store.fail_puts = 2
    with a.start_heartbeat() as beat:
        assert _wait_for(lambda: beat.renewals >= 1 or a.lost is not None, timeout=30.0)
        assert a.lost is None, a.lost
        a.check(confirm=True)
    assert beat.renewals >= 1 and store.fail_puts == 0 and store.put_calls >= 3 and beat.last_error is not None


def test_with_block_renews_and_releases(make_store: MakeStore) -> None:
    store = make_store()
    with acquire_lock(store, "docs", "a:1:x", purpose="gc", ttl=0.6) as lock:
        time.sleep(0.9)  # longer than the lease: only renewals keep it
        lock.check(confirm=True)
    assert read_lock(store, "docs").state == "free"
    with pytest.raises(LockLost, match="this process released it"):
        lock.check()


# --------------------------------------------------------------------------------------------
# Tokens, lost replies, release, corrupt files
# --------------------------------------------------------------------------------------------


def test_the_fencing_token_grows_on_every_acquisition_and_takeover(make_store: MakeStore) -> None:
    store = make_store()
    tokens = []
    first = acquire_lock(store, "docs", "a:1:x", purpose="p")  # absent → 1
    tokens.append(first.token)
    first.release()
    again = acquire_lock(store, "docs", "b:1:x", purpose="p", ttl=0.05)  # free → 2
    tokens.append(again.token)
    age_on_store(store, KEY, 3.0)  # not renewed for longer than its ttl (S3 stamps whole seconds)
    expired = acquire_lock(store, "docs", "c:1:x", purpose="p", ttl=3600)  # expired → 3
    tokens.append(expired.token)
    again.release()  # not ours any more: leaves token 3 alone
    expired.release()
    _pid, token = lock_taken_by_a_killed_process(make_store.uri, make_store.endpoint)  # free → 4
    tokens.append(token)
    tokens.append(acquire_lock(store, "docs", "d:1:x", purpose="p").token)  # dead local owner → 5
    assert tokens == [1, 2, 3, 4, 5]
    assert read_lock(store, "docs").token == 5


def test_a_lock_in_the_format_before_fencing_is_understood(make_store: MakeStore) -> None:
    store = make_store()
    old = {"owner": "old-host:1:abc", "purpose": "apply (v1)", "acquired": 1.0, "heartbeat": 1.0}
    store.put(KEY, json.dumps({**old, "expires": time.time() + 60}).encode())
    with pytest.raises(LockHeld, match="locked by old-host:1:abc"):
        acquire_lock(store, "docs", "me:1:x", purpose="p")
    store.put(KEY, json.dumps({**old, "expires": time.time() - 1}).encode())
    assert acquire_lock(store, "docs", "me:1:x", purpose="p").token == 1


@pytest.mark.parametrize("start", ["absent", "expired"])
@pytest.mark.parametrize("reply", ["precondition", "error"])
def test_a_lost_reply_to_our_conditional_put_is_reported_as_ours(make_store: MakeStore, start: str, reply: str) -> None:
    """The write landed but its answer did not: a retry then reports "precondition failed" (or the
    call fails for good). The lock is read back and recognised by its exact bytes."""
    store = FlakyStore(make_store())
    if start == "expired":
        _put_held(store, token=5)
    store.lose_replies, store.lost_reply_as = 1, reply
    lock = acquire_lock(store, "docs", "me:1:x", purpose="apply")
    assert store.lose_replies == 0, "no reply was lost"
    assert lock.token == (6 if start == "expired" else 1)
    lock.check(confirm=True)
    store.lose_replies = 1
    lock.heartbeat()  # a renewal whose reply is lost is a renewal too
    assert store.lose_replies == 0
    lock.check(confirm=True)
    lock.heartbeat()  # and the version it read back is the one the next renewal swaps from
    lock.release()
    assert read_lock(store, "docs").state == "free"


def test_a_renewal_whose_outcome_never_arrived_is_adopted_by_the_next(make_store: MakeStore) -> None:
    """A renewal lands, its reply is lost and the read-back fails too: the call raises and the holder
    does not know its own version. The next renewal finds its own nonce and carries on."""
    store = FlakyStore(make_store())
    lock = acquire_lock(store, "docs", "me:1:x", purpose="apply")
    store.lose_replies, store.lost_reply_as, store.fail_gets = 1, "error", 1
    with pytest.raises(TransientError, match="injected"):
        lock.heartbeat()
    assert store.lose_replies == 0 and store.fail_gets == 0 and lock.lost is None
    assert json.loads(store.get(KEY) or b"{}")["beat"] == 1, "the renewal did land"
    lock.heartbeat()
    assert json.loads(store.get(KEY) or b"{}")["beat"] == 2
    lock.check(confirm=True)


def test_s3_a_retried_conditional_put_after_a_lost_reply_is_ours(s3_server: str, s3_bucket: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's S3 case through the real retry layer: the put reaches the server, the reply times
    out, tenacity retries, the server answers 412; the lock is still ours, not someone else's."""
    serialise_moto_writes(monkeypatch)
    store = S3ObjectStore(s3_bucket, "p", endpoint_url=s3_server, backoff_s=0.01)
    real = store._client
    lose = {"n": 0}

    class LostReply:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(real, name)

        def put_object(self, **kwargs):  # type: ignore[no-untyped-def]
            resp = real.put_object(**kwargs)
            if lose["n"]:
                lose["n"] -= 1
                raise bex.ReadTimeoutError(endpoint_url=s3_server)
            return resp

    store._client = LostReply()
    lose["n"] = 1
    lock = acquire_lock(store, "docs", "me:1:x", purpose="apply")  # create (If-None-Match) lost reply
    assert lose["n"] == 0 and lock.token == 1
    lose["n"] = 1
    lock.heartbeat()  # renewal (If-Match) lost reply
    assert lose["n"] == 0
    lock.check(confirm=True)
    _put_held(store, token=lock.token)
    lose["n"] = 1
    other = acquire_lock(store, "docs", "other:2:y", purpose="takeover")  # takeover (If-Match) lost reply
    assert lose["n"] == 0 and other.token == 2
    with pytest.raises(LockLost, match="now held by other:2:y"):
        lock.heartbeat()


def test_release_never_touches_someone_elses_lock(make_store: MakeStore) -> None:
    store = make_store()
    a = acquire_lock(store, "docs", "a:1:x", purpose="apply", ttl=0.05)
    age_on_store(store, KEY, 3.0)
    b = acquire_lock(make_store(), "docs", "b:2:y", purpose="apply 2")
    a.release()
    assert read_lock(store, "docs").nonce == b.nonce
    b.check(confirm=True)


def test_release_loses_a_race_with_a_takeover_cleanly(make_store: MakeStore) -> None:
    """``a`` reads its (expired) lock to release it; ``b`` takes it over before ``a`` writes."""
    base = make_store()
    holder: dict[str, IndexLock] = {}
    pausing = PausingStore(base, lambda: holder.update(b=acquire_lock(make_store(), "docs", "b:2:y", purpose="p")))
    a = acquire_lock(pausing, "docs", "a:1:x", purpose="apply", ttl=0.05)
    age_on_store(base, KEY, 3.0)
    pausing.armed = True
    a.release()
    assert "b" in holder, "the hook did not run"
    info = read_lock(base, "docs")
    assert info.held and info.nonce == holder["b"].nonce
    holder["b"].check(confirm=True)


def test_a_contended_acquire_fails_fast(make_store: MakeStore) -> None:
    store = make_store()
    acquire_lock(store, "docs", "a:1:x", purpose="apply")
    t0 = time.perf_counter()
    with pytest.raises(LockHeld):
        acquire_lock(make_store(), "docs", "b:1:x", purpose="apply")
    # Fast means it does not sit out the holder's lease (120 s): a loose bound, so a loaded box cannot fail it.
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"owner": "a:1:x", "expires', "not JSON: Unterminated string"),
        (b"\xff\xfe\x00", "not UTF-8 text"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"purpose": "apply", "expires": 1.0}', "no owner"),
        (b'{"owner": "a:1:x", "expires": "soon"}', "expiry 'soon' is not a number"),
        (b'{"owner": "a:1:x", "expires": 1.0, "token": -3}', "token -3 is not a whole number"),
        (b'{"state": "stuck", "token": 1}', "unknown state 'stuck'"),
    ],
)
def test_a_corrupt_lock_file_is_reported_not_raised(make_store: MakeStore, data: bytes, reason: str) -> None:
    store = make_store()
    store.put(KEY, data)
    info = read_lock(store, "docs")
    assert info.corrupt and reason in (info.reason or "")
    status = info.as_status()
    assert status is not None and status["corrupt"] and f"locked by {status['owner']} ({status['purpose']})".count("\n") == 0
    line = info.describe(f"{store.describe()}/{KEY}") or ""
    assert line.startswith("lock file ") and "is corrupt (" in line and "delete it" in line and "\n" not in line
    with pytest.raises(StateError, match=r"the lock of index 'docs' .* is corrupt: .*delete that file") as err:
        acquire_lock(store, "docs", "me:1:x", purpose="p")
    assert not isinstance(err.value, LockHeld) and "\n" not in str(err.value)


def test_status_lines() -> None:
    assert parse_lock(None).as_status() is None and parse_lock(None).describe() is None
    free = parse_lock(b'{"state": "free", "token": 4}')
    assert free.state == "free" and free.token == 4 and free.as_status() is None
    held = parse_lock(json.dumps({"owner": "h:1:x", "purpose": "apply", "expires": time.time() + 30.5, "token": 3,
                                  "acquired": 1000.0, "ttl": 120}).encode())
    assert held.as_status() == {"owner": "h:1:x", "purpose": "apply", "corrupt": False, "reason": None,
                                "token": 3, "expires": held.expires, "host": "h", "pid": 1, "since": 1000.0,
                                "lease_s": 120.0}
    old_format = parse_lock(json.dumps({"owner": "h:x", "expires": 1.0}).encode()).as_status() or {}
    assert (old_format["host"], old_format["pid"], old_format["since"], old_format["lease_s"]) == ("h", None, None, None)
    assert held.describe() == "locked by h:1:x (apply), token 3, expires in 30 s"


def test_an_unreachable_store_is_an_error_not_a_corrupt_lock() -> None:
    store = S3ObjectStore("bucket", "x", endpoint_url="http://127.0.0.1:9", attempts=1, backoff_s=0.01)
    with pytest.raises(TransientError):
        read_lock(store, "docs")


# --------------------------------------------------------------------------------------------
# Clock skew: takeover never compares one host's wall clock with another's (issue 22)
# --------------------------------------------------------------------------------------------


class _SkewedTime:
    """The ``time`` module as seen by a host whose wall clock is ``offset`` seconds off (its monotonic
    clock, and every other process's clocks, untouched)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(time, name)


def test_a_contender_whose_clock_runs_300_s_ahead_never_takes_a_live_lock(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder = acquire_lock(make_store(), "docs", "a:1:x", purpose="apply", ttl=40)
    monkeypatch.setattr(locks_module, "time", _SkewedTime(300))  # the contender's clock from here on
    with pytest.raises(LockHeld, match="locked by a:1:x") as err:
        acquire_lock(make_store(), "docs", "b:2:y", purpose="apply")
    # Told on the store's clock, not its own: before, "expires in 0 s" (its clock was past the expiry).
    assert 30 <= _seconds_left(err.value) <= 40, str(err.value)
    holder.check(confirm=True)
    holder.heartbeat()
    age_on_store(make_store(), KEY, 30)  # renewed 30 s ago: still within its 40 s ttl
    with pytest.raises(LockHeld, match="locked by a:1:x") as err:
        acquire_lock(make_store(), "docs", "b:2:y", purpose="apply")
    assert 1 <= _seconds_left(err.value) <= 11, str(err.value)  # 40 s less 30 and the time since (S3: whole seconds)
    holder.check(confirm=True)


def _seconds_left(err: BaseException) -> int:
    found = re.search(r"\(apply\), expires in (\d+) s unless renewed; ", str(err))
    assert found, str(err)
    return int(found[1])


@pytest.mark.parametrize("forged", ["expiry", "ttl"])
def test_a_far_future_forged_lock_is_called_so_not_given_a_countdown(make_store: MakeStore, forged: str) -> None:
    """A lock whose expiry (a lock without ttl, judged by it) or ttl lies years ahead: "expires in 998203807402 s"
    before; now the message says it is longer than any reindex lease, and how to get rid of it."""
    store = make_store()
    body = {"owner": "h:1:x", "purpose": "apply", "token": 3, "expires": time.time() + 998203807402}
    if forged == "ttl":
        body = {**body, "expires": time.time() + 60, "ttl": 998203807402}
    store.put(KEY, json.dumps(body).encode())
    with pytest.raises(LockHeld) as err:
        acquire_lock(make_store(), "docs", "me:1:x", purpose="p")
    where = store.describe_key(KEY)  # type: ignore[attr-defined]
    assert str(err.value) == (
        "index 'docs' is locked by h:1:x (apply), its expiry is 11,553,285 days away, longer than any reindex lease "
        f"(a forged lock, or one written by a host whose clock is wrong); wait for it to finish, or delete {where} "
        "if that process is gone")
    if forged == "expiry":
        assert read_lock(store, "docs").describe() == (
            "locked by h:1:x (apply), token 3, its expiry is 11,553,285 days away, longer than any reindex lease (a "
            "forged lock, or one written by a host whose clock is wrong)")


def test_a_contender_whose_clock_runs_300_s_behind_takes_a_stale_lock_after_one_ttl(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = acquire_lock(make_store(), "docs", "gone-host:1:x", purpose="apply (stopped renewing)", ttl=40)
    monkeypatch.setattr(locks_module, "time", _SkewedTime(-300))
    with pytest.raises(LockHeld):
        acquire_lock(make_store(), "docs", "b:2:y", purpose="apply")
    age_on_store(make_store(), KEY, 42)  # no renewal for more than a ttl, on the store's clock
    lock = acquire_lock(make_store(), "docs", "b:2:y", purpose="apply")
    assert lock.token == gone.token + 1
    with pytest.raises(LockLost, match="now held by b:2:y"):
        gone.check(confirm=True)


def test_a_stale_lock_is_taken_over_in_real_time_whatever_the_contenders_clock(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No faked ages: a 0.5 s lease left unrenewed is taken over once the store has aged it past 0.5 s
    (S3 stamps whole seconds, so up to ~2.5 s there), by a contender whose clock is 300 s behind."""
    store = make_store()
    gone = acquire_lock(store, "docs", "gone-host:1:x", purpose="apply", ttl=0.5)
    monkeypatch.setattr(locks_module, "time", _SkewedTime(-300))
    deadline = time.monotonic() + 6.0
    while True:
        try:
            lock = acquire_lock(make_store(), "docs", "b:2:y", purpose="apply")
            break
        except LockHeld:
            assert time.monotonic() < deadline, "a lock unrenewed for seconds was never taken over"
            time.sleep(0.1)
    assert lock.token == gone.token + 1


def test_the_store_measures_an_objects_age_on_its_own_clock(make_store: MakeStore) -> None:
    store = make_store()
    store.put("a/b.json", b"{}")
    data, version, age = store.get_versioned_aged("a/b.json") or (b"", "", -1.0)
    assert data == b"{}" and version == store.get_versioned("a/b.json")[1]  # type: ignore[index]
    assert 0.0 <= age < 1.0
    age_on_store(store, "a/b.json", 100)
    assert 98.0 <= (store.get_versioned_aged("a/b.json") or (b"", "", 0.0))[2] <= 100.5
    assert store.get_versioned_aged("a/missing.json") is None
    assert store.list("a/") == ["a/b.json"], "the folder's clock probe leaves nothing behind"
