"""A finished command exits with its status (``reindex.foundation.exiting``), whatever native teardown would do after it.

Arrow's thread pools now and then end a Python process in ``std::terminate`` during the static destructors that
run after the interpreter has finished (SIGABRT: a refused `reindex apply` exited -6 instead of 1 in a loaded suite).
The tests stand in for such a destructor with ``abort`` registered as a C exit handler: a process that leaves the usual way dies of
it (the control), a command that leaves through ``exit_now`` does not — and still runs what Python runs at exit
(non-daemon threads joined, ``atexit`` handlers, buffered output flushed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers_index import REINDEX_BIN, subprocess_env

# abort() registered as C's exit handler (glibc's __cxa_atexit, what a C++ static object's destructor is registered
# with): it runs with the libraries' static destructors, after the interpreter has finished.
NATIVE_ABORT = "import ctypes; libc = ctypes.CDLL('libc.so.6'); libc.__cxa_atexit(libc.abort, None, None)\n"


def _env() -> dict[str, str]:
    env = subprocess_env()
    env.pop("PYTHONUNBUFFERED", None)  # output to a pipe stays in its buffer until flushed, as for most callers
    return env


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)


def test_exit_now_keeps_the_status_and_runs_what_python_runs_at_exit() -> None:
    r = _python(NATIVE_ABORT + (
        "import atexit, threading, time\n"
        "from reindex.foundation.exiting import exit_now\n"
        "t = threading.Thread(target=lambda: (time.sleep(0.3), print('thread finished')))\n"
        "t.start()\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print('the answer', end='; ')\n"
        "exit_now(3)\n"))
    assert r.returncode == 3, r.stderr
    assert r.stdout == "the answer; thread finished\natexit ran\n"


def test_without_it_the_native_teardown_ends_the_process() -> None:
    """The control: the same stand-in kills a process that exits the usual way (so the test above can fail)."""
    r = _python(NATIVE_ABORT + "import sys\nsys.exit(3)\n")
    assert r.returncode == -6


@pytest.mark.parametrize(("args", "status"), [(["--version"], 0), (["plan", "-c", "missing.yaml"], 1),
                                             (["plan", "--no-such-option"], 64)])
def test_the_reindex_command_exits_through_it(args: list[str], status: int, tmp_path) -> None:
    r = subprocess.run([sys.executable, "-c", NATIVE_ABORT + (
        f"import sys\nsys.argv = ['reindex', *{args!r}]\nfrom reindex.cli import run\nrun()\n")],
        capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert r.returncode == status, r.stderr
    assert (r.stdout if status == 0 else r.stderr).strip()


def test_the_installed_entry_points_are_run() -> None:
    """`reindex` and `python -m reindex` (what `make demo` runs) both end through ``run``."""
    script = REINDEX_BIN.read_text(encoding="utf-8")
    assert "from reindex.cli import run" in script
    r = subprocess.run([sys.executable, "-m", "reindex", "--version"], capture_output=True, text=True,
                       env=subprocess_env(), timeout=120)
    assert r.returncode == 0 and r.stdout.strip()
    from reindex import __main__

    assert __main__.run.__module__ == "reindex.cli"
