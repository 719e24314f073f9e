"""Processes a killed reindex command left behind, and their cleanup.

Prefect starts a temporary API server as a child process when a flow runs with no API configured; a SIGKILL
of reindex leaves it running (it is re-parented to init). Every reindex process that may start such a child
marks its environment with :data:`OWNER_VARIABLE` = its pid; children inherit it. The next reindex command
stops every process whose marker names a pid that no longer exists. Linux (``/proc``) only; elsewhere this
finds nothing."""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["OWNER_VARIABLE", "find_orphans", "mark_owner", "stop_orphans"]

OWNER_VARIABLE = "REINDEX_OWNER_PID"


def mark_owner() -> None:
    """Mark this process as the owner of the children it starts from now on."""
    os.environ[OWNER_VARIABLE] = str(os.getpid())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_of(pid_dir: Path) -> int | None:
    try:
        env = (pid_dir / "environ").read_bytes()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(OWNER_VARIABLE.encode() + b"="):
            value = item.split(b"=", 1)[1]
            return int(value) if value.isdigit() else None
    return None


def find_orphans(proc: Path = Path("/proc")) -> list[int]:
    """Pids of processes started under a reindex process that has died (not this process or its own)."""
    me = os.getpid()
    out = []
    for entry in proc.glob("[0-9]*"):
        pid = int(entry.name)
        if pid == me:
            continue
        owner = _owner_of(entry)
        if owner is None or owner == me or pid == owner or _alive(owner):
            continue
        out.append(pid)
    return sorted(out)


def stop_orphans() -> list[int]:
    """SIGTERM the processes :func:`find_orphans` names; returns their pids."""
    stopped = []
    for pid in find_orphans():
        try:
            os.kill(pid, signal.SIGTERM)
            stopped.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return stopped
