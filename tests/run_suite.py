"""`make test`: the suite as four pytest processes side by side, one exit status.

tests/test_flows.py runs a real Prefect server and worker, and its headline test stays paused ~4 minutes
past Prefect's deployment-lease renewal (mostly asleep); tests/test_scale_out.py starts Dask clusters,
Prefect workers and worker processes (mostly waiting on them): those are the two side groups, one process
each (one after the other they were the longest group: 8 min 10 s, 317 s of it the paused run). Everything else is
CPU-bound and is dealt into two groups of about equal size (greedy on the test files' sizes, largest first,
so the split is the same on every run). Run together, the waits overlap the CPU-bound tests and both cores
stay busy (two groups left ~1/3 of the cores idle: 20.4 CPU-minutes in 16 minutes of wall on 2 cores).
Each process gets its own base temp folder and its own PREFECT_HOME (two temporary Prefect servers must not
share one database; fixtures already pick free ports). The groups' output is printed one after another; the
status is the first failure, and pytest's 5 (no tests collected) is a failure, not a pass: in any group
when the whole suite runs, in every group when extra arguments select tests. Extra arguments go to every
group (e.g. ``-x``, ``-k name``). Each group prints its 15 slowest tests (``--durations=15``), so a test
that grows slow is seen. Tests marked ``soak`` (minutes of waiting, e.g. a run paused past Prefect's lease
renewal) run here too; ``REINDEX_SKIP_SOAK=1`` (``make test-fast``) skips them for a quick local run."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDE = ("tests/test_flows.py", "tests/test_scale_out.py")  # the waiting groups, one process each
CPU_GROUPS = 2
SLOWEST = 15  # each group lists its slowest tests


def split(files: list[Path], n: int) -> list[list[str]]:
    """``files`` dealt into ``n`` groups of about equal total size (largest first, to the lightest group)."""
    groups: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for f in sorted(files, key=lambda p: (-p.stat().st_size, p.name)):
        i = sizes.index(min(sizes))
        groups[i].append(str(f.relative_to(ROOT)))
        sizes[i] += f.stat().st_size
    return [sorted(g) for g in groups if g]


def main(argv: list[str]) -> int:
    side = [t for t in SIDE if (ROOT / t).is_file()]
    rest = [p for p in sorted((ROOT / "tests").glob("test_*.py")) if str(p.relative_to(ROOT)) not in side]
    groups = [*((f"side: {t}", [t]) for t in side), *((f"group {i + 1}", g) for i, g in enumerate(split(rest, CPU_GROUPS)))]
    with tempfile.TemporaryDirectory(prefix="reindex-tests-") as tmp:
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations={SLOWEST}", *argv]
        running = []
        for n, (name, files) in enumerate(groups):
            log = Path(tmp) / f"group{n}.log"
            env = {**os.environ, "PREFECT_HOME": f"{tmp}/prefect-home-{n}"}
            with log.open("wb") as out:
                proc = subprocess.Popen([*base, f"--basetemp={tmp}/g{n}", *files], cwd=ROOT, stdout=out,
                                        stderr=subprocess.STDOUT, env=env)
            running.append((name, files, log, proc))
        codes = []
        for name, files, log, proc in running:
            rc = proc.wait()
            print(f"\n--- {name} ({len(files)} files) ---", flush=True)
            sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
            sys.stdout.flush()
            codes.append((name, rc))
    empty = [name for name, rc in codes if rc == 5]
    if empty and (not argv or len(empty) == len(codes)):
        print(f"make test: no tests were collected in {', '.join(empty)}", file=sys.stderr)
        return 1
    for name, rc in codes:
        if rc not in (0, 5):
            print(f"make test: {name} failed (pytest exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
