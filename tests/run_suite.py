"""`make test`: the suite as two pytest processes side by side, one exit status.

tests/test_flows.py runs a real Prefect server and worker, and its headline test stays paused ~4 minutes
past Prefect's deployment-lease renewal (mostly asleep); tests/test_scale_out.py starts Dask clusters and
worker processes (mostly waiting on them). Everything else is CPU-bound in this process. Run together, the
waits overlap the rest of the suite. Each process gets its own base temp folder (fixtures already pick free
ports and their own Prefect homes). The side half's output is printed after the main half's; the status is
the first failure of either, and pytest's 5 (no tests collected) in either half is a failure, not a pass.
Extra arguments go to both halves (e.g. ``-x``, ``-k name``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDE = ("tests/test_flows.py", "tests/test_scale_out.py")  # the waiting half


def main(argv: list[str]) -> int:
    side = [t for t in SIDE if (ROOT / t).is_file()]
    with tempfile.TemporaryDirectory(prefix="reindex-tests-") as tmp:
        log = Path(tmp) / "side.log"
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv]
        with log.open("wb") as out:
            waiting = subprocess.Popen([*base, f"--basetemp={tmp}/side", *side], cwd=ROOT, stdout=out,
                                       stderr=subprocess.STDOUT)
            try:
                rest = subprocess.call([*base, f"--basetemp={tmp}/rest", *(f"--ignore={t}" for t in side)], cwd=ROOT)
            finally:
                side_rc = waiting.wait()
        print(f"\n--- {' '.join(side)} (ran beside the rest) ---", flush=True)
        sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
    halves = (("tests (all but " + ", ".join(Path(t).name for t in side) + ")", rest), (" ".join(side), side_rc))
    for name, rc in halves:
        if rc == 5:
            print(f"make test: {name}: no tests were collected", file=sys.stderr)
            return 1
    for name, rc in halves:
        if rc != 0:
            print(f"make test: {name} failed (pytest exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
