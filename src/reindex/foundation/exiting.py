"""How a ``reindex`` command process ends: Python's own exit steps, then an immediate exit.

A command that has done its work and printed its answer must exit with its status, not die in the C++ teardown
that follows Python's: native thread pools (Arrow's, started by reading or writing Parquet even on the calling
thread) are destroyed with the process's static objects, and now and then one still has a worker thread then,
which ends the process in ``std::terminate`` — "terminate called without an active exception", SIGABRT, exit 134
(apache/arrow#34314; seen here 7 of 60 refused applies on a loaded box before reads went single-threaded, and once
in a loaded suite after). So :func:`exit_now` does what the interpreter does first at exit — waits for non-daemon
threads, runs the ``atexit`` handlers (Prefect's temporary server is stopped there, logging flushed) — flushes
standard output and error, and leaves with ``os._exit``: the interpreter's module teardown and the libraries'
static destructors, which hold nothing of ours (every file reindex writes is closed and synced before it is
renamed into place), never run.

Only the command's entry points use it (``reindex`` and ``python -m reindex``); a library caller's process ends as
its own program decides."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

__all__ = ["exit_now", "status_of"]


def status_of(code: object) -> int:
    """The process status of a ``SystemExit`` code: None → 0, an int as is, anything else printed → 1 (Python's rule)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` after Python's exit steps, skipping native teardown (see the module)."""
    main = threading.main_thread()
    for t in threading.enumerate():
        if t is not main and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # closed or a broken pipe: nothing more can be said there
    os._exit(status)
