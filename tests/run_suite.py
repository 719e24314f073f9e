"""`make test`: the suite as two pytest processes side by side, one exit status.

tests/test_flows.py runs a real Prefect server and worker, and its headline test stays paused ~4 minutes
past Prefect's deployment-lease renewal (mostly asleep); everything else is CPU-bound. Run together, the
wait overlaps the rest of the suite. Each process gets its own base temp folder (fixtures already pick free
ports and their own Prefect homes). The Prefect half's output is printed after the main half's; the status
is the first failure of either, and pytest's 5 (no tests collected) in either half is a failure, not a pass.
Extra arguments go to both halves (e.g. ``-x``, ``-k name``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOWS = "tests/test_flows.py"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="reindex-tests-") as tmp:
        log = Path(tmp) / "flows.log"
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv]
        with log.open("wb") as out:
            flows = subprocess.Popen([*base, f"--basetemp={tmp}/flows", FLOWS], cwd=ROOT, stdout=out,
                                     stderr=subprocess.STDOUT)
            try:
                rest = subprocess.call([*base, f"--basetemp={tmp}/rest", f"--ignore={FLOWS}"], cwd=ROOT)
            finally:
                flows_rc = flows.wait()
        print(f"\n--- {FLOWS} (ran beside the rest) ---", flush=True)
        sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
    for name, rc in (("tests (all but test_flows.py)", rest), (FLOWS, flows_rc)):
        if rc == 5:
            print(f"make test: {name}: no tests were collected", file=sys.stderr)
            return 1
    for name, rc in (("tests (all but test_flows.py)", rest), (FLOWS, flows_rc)):
        if rc != 0:
            print(f"make test: {name} failed (pytest exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
