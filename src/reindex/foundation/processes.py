"""Who a process is, precisely enough to tell that it is gone: :class:`ProcessIdentity`.

A lock holder records its identity; a contender may treat the holder as dead without waiting for its lease
only when that identity is provably its own kind of process (same host, kernel boot and PID namespace) and
``/proc`` says the pid is gone, a zombie, or another process (see :mod:`reindex.books.locks`)."""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ProcessIdentity"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process, named uniquely across hosts, boots and PID namespaces: the host name, the kernel's boot id
    (``/proc/sys/kernel/random/boot_id``), the inode of its PID namespace (``/proc/self/ns/pid``), its pid
    there and its start time (clock ticks after boot, ``/proc/<pid>/stat``). ``boot_id``/``pid_ns`` are None
    where ``/proc`` cannot tell them (not Linux, or a ``/proc`` mounted for another PID namespace): such an
    identity is never judged dead, only its lease decides."""

    host: str
    boot_id: str | None
    pid_ns: int | None
    pid: int
    start: int | None

    @classmethod
    def current(cls) -> ProcessIdentity:
        """This process (computed once per pid: a forked child gets its own)."""
        return _identity_of(os.getpid())

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "boot_id": self.boot_id, "pid_ns": self.pid_ns, "pid": self.pid,
                "start": self.start}

    @classmethod
    def from_dict(cls, value: object) -> ProcessIdentity | None:
        """The identity a lock body records; None when absent or malformed (then the lease decides)."""
        if not isinstance(value, dict):
            return None
        host, boot, ns, pid, start = (value.get(k) for k in ("host", "boot_id", "pid_ns", "pid", "start"))
        if not isinstance(host, str) or not _is_int(pid) or pid <= 0:
            return None
        if boot is not None and not isinstance(boot, str):
            return None
        if (ns is not None and not _is_int(ns)) or (start is not None and not _is_int(start)):
            return None
        return cls(host, boot, ns, pid, start)

    def shares_pids_with(self, other: ProcessIdentity) -> bool:
        """Whether a pid means the same process to both: same host, same kernel boot, same PID namespace,
        all three known. Only then can one of them tell from ``/proc`` that the other is gone."""
        return (None not in (self.boot_id, self.pid_ns)
                and (self.host, self.boot_id, self.pid_ns) == (other.host, other.boot_id, other.pid_ns))

    def gone(self) -> bool:
        """Whether this process provably no longer runs, as seen from the calling process: it shares our
        host, boot and PID namespace, and its pid is gone, a zombie, or names a process that started at
        another time (the pid was reused). Anything this process cannot prove is "not gone"."""
        if not ProcessIdentity.current().shares_pids_with(self):
            return False
        seen = _proc_stat(self.pid)
        if seen is None:
            return False  # unreadable for another reason than absence: cannot prove anything
        if seen == "gone":
            return True
        state, start = seen
        return state in ("Z", "X") or (self.start is not None and start != self.start)


def _proc_stat(pid: int) -> tuple[str, int] | Literal["gone"] | None:
    """(state letter, start time in clock ticks) of ``pid`` from ``/proc``; ``"gone"`` when no such
    process exists; None when ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return "gone" if _own_proc() else None
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name (in parentheses) may hold spaces
    try:
        return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime) of proc(5)
    except (IndexError, ValueError):
        return None


def _own_proc() -> bool:
    """Whether ``/proc`` is mounted for this process's PID namespace (its pids are the ones we see)."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


@functools.cache
def _identity_of(pid: int) -> ProcessIdentity:
    host = socket.gethostname()
    if not _own_proc():
        return ProcessIdentity(host, None, None, pid, None)
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot: str | None = f.read().strip() or None
        ns: int | None = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        boot, ns = None, None
    seen = _proc_stat(pid)
    return ProcessIdentity(host, boot, ns, pid, seen[1] if isinstance(seen, tuple) else None)
