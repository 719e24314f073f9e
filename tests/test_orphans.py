"""No process outlives a killed reindex command: Prefect's temporary API server, started by
`reindex apply --prefect` with no API configured, is stopped by the next reindex command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env
from reindex.foundation.orphans import OWNER_VARIABLE, find_orphans, stop_orphans

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _sleeper(owner: int) -> subprocess.Popen:
    env = {**os.environ, OWNER_VARIABLE: str(owner)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)


def _marked(owner: int) -> list[int]:
    out = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if f"{OWNER_VARIABLE}={owner}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
        except OSError:
            pass
    return out


def test_only_processes_of_a_dead_owner_are_stopped() -> None:
    orphan, kept = _sleeper(_dead_pid()), _sleeper(os.getpid())
    try:
        deadline = time.monotonic() + 10  # until both children have exec'd (their environ is theirs): 0.3 s
        while time.monotonic() < deadline and orphan.pid not in find_orphans():  # was not always enough
            time.sleep(0.05)
        assert orphan.pid in find_orphans() and kept.pid not in find_orphans()
        assert orphan.pid in stop_orphans()
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert kept.poll() is None
    finally:
        for p in (orphan, kept):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_next_command_stops_the_server_a_killed_prefect_apply_left(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    env = subprocess_env(REINDEX_CRASH_AT="after-upsert:1", PREFECT_HOME=str(tmp_path / "prefect-home"),
                         PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120")
    env.pop("PREFECT_API_URL", None)
    log = tmp_path / "apply.log"
    with log.open("w") as out:  # not a pipe: an orphan holding it would keep a reader waiting
        killed = subprocess.run([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress",
                                 "--prefect"], cwd=ws.root, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300)
    assert killed.returncode == -signal.SIGKILL, log.read_text()[-2000:]
    left = _marked(_owner_pid())
    assert left, "the killed apply left no marked process (did Prefect start a temporary server?)"
    env.pop("REINDEX_CRASH_AT")
    err = tmp_path / "status.err"
    with err.open("w") as fh:
        status = subprocess.run([str(REINDEX_BIN), "status", "-c", str(ws.config)], cwd=ws.root, env=env,
                                stdout=subprocess.DEVNULL, stderr=fh, timeout=120)
    assert status.returncode == 0, err.read_text()
    assert "left behind by a reindex command that was killed" in err.read_text()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and _state(p) != "Z" for p in left):
        time.sleep(0.2)
    assert not [p for p in left if Path(f"/proc/{p}").exists() and _state(p) != "Z"]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def _owner_pid() -> int:
    """The pid of the killed apply, from the marker its children carry (the only dead owner here)."""
    owners = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            for item in (entry / "environ").read_bytes().split(b"\0"):
                if item.startswith(OWNER_VARIABLE.encode() + b"="):
                    owners.add(int(item.split(b"=", 1)[1]))
        except (OSError, ValueError):
            pass
    dead = [o for o in owners if not Path(f"/proc/{o}").exists()]
    assert dead, "no process carries the marker of a dead reindex command"
    return dead[0]
