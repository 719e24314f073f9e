"""`make test`: the suite as five pytest processes side by side, one exit status.

Three side groups, one process each, mostly waiting on servers and workers: the ``soak`` tests of
tests/test_flows.py (a run paused ~4 minutes past Prefect's deployment-lease renewal, asleep), the rest of
tests/test_flows.py (a real Prefect server and worker), and tests/test_scale_out.py (Dask clusters, Prefect
workers, worker processes). Everything else is CPU-bound and is dealt into two groups of about equal *time*:
greedy, longest first, on each file's seconds as recorded in ``tests/durations.json`` (a file not recorded
there is weighed by its size at the recorded seconds per byte), so the split is the same on every run and the
two groups end together. Run together, the waits overlap the CPU-bound tests and both cores stay busy.

``REINDEX_RECORD_DURATIONS=1 make test`` writes each file's measured seconds (its tests' setup, call and
teardown, from pytest's JUnit XML) back into ``tests/durations.json``: do it when tests are added or grow.

Each process gets its own base temp folder and its own PREFECT_HOME (two temporary Prefect servers must not
share one database; fixtures already pick free ports). The groups' output is printed one after another; the
status is the first failure, and pytest's 5 (no tests collected) is a failure, not a pass: in any group when
the whole suite runs, in every group when extra arguments select tests. Extra arguments go to every group
(e.g. ``-x``, ``-k name``). Each group prints its 15 slowest tests (``--durations=15``), so a test that grows
slow is seen. Tests marked ``soak`` run here too; ``REINDEX_SKIP_SOAK=1`` (``make test-fast``) skips them
for a quick local run (their group then collects nothing, which is expected and not a failure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
FLOWS, SCALE_OUT = "tests/test_flows.py", "tests/test_scale_out.py"
# The waiting groups, one process each: (name, files, extra pytest arguments).
SIDE = (
    ("side: soak tests of tests/test_flows.py", [FLOWS], ["-m", "soak"]),
    ("side: tests/test_flows.py", [FLOWS], ["-m", "not soak"]),
    ("side: tests/test_scale_out.py", [SCALE_OUT], []),
)
CPU_GROUPS = 2
SLOWEST = 15  # each group lists its slowest tests


def recorded() -> dict[str, float]:
    """Each test file's recorded seconds (``tests/durations.json``), {} when there is none."""
    try:
        data = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


def weights(files: list[Path], seconds: dict[str, float]) -> dict[str, float]:
    """Seconds per file: recorded, else its size at the recorded files' seconds per byte (1 s per KB with none)."""
    rel = {str(f.relative_to(ROOT)): f for f in files}
    known = {k: seconds[k] for k in rel if k in seconds}
    size = sum(rel[k].stat().st_size for k in known)
    per_byte = sum(known.values()) / size if size else 1e-3
    return {k: known.get(k, rel[k].stat().st_size * per_byte) for k in rel}


def split(files: list[Path], n: int, seconds: dict[str, float] | None = None) -> list[list[str]]:
    """``files`` dealt into ``n`` groups of about equal total seconds (longest first, to the lightest group)."""
    w = weights(files, recorded() if seconds is None else seconds)
    groups: list[list[str]] = [[] for _ in range(n)]
    totals = [0.0] * n
    for name in sorted(w, key=lambda k: (-w[k], k)):
        i = totals.index(min(totals))
        groups[i].append(name)
        totals[i] += w[name]
    return [sorted(g) for g in groups if g]


def file_seconds(xml_paths: list[Path]) -> dict[str, float]:
    """Seconds per test file from pytest's JUnit XML reports (setup, call and teardown of each test case)."""
    out: dict[str, float] = {}
    for path in xml_paths:
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            module = (case.get("classname") or "").split(".")
            if len(module) >= 2 and module[0] == "tests":
                key = f"tests/{module[1]}.py"
                out[key] = out.get(key, 0.0) + float(case.get("time") or 0.0)
    return out


def skipped(xml_paths: list[Path]) -> dict[str, int]:
    """Why tests were skipped, from pytest's JUnit XML reports: reason → how many tests it skipped."""
    out: dict[str, int] = {}
    for path in xml_paths:
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            for skip in case.iter("skipped"):
                reason = (skip.get("message") or "no reason given").strip()
                reason = reason.split(": ", 1)[1] if reason.startswith("Skipped: ") else reason
                out[reason] = out.get(reason, 0) + 1
    return out


def skip_summary(reasons: dict[str, int]) -> list[str]:
    """The lines ``make test`` ends with: what it skipped and why, most first, and how to run them."""
    if not reasons:
        return ["make test: nothing skipped"]
    lines = [f"make test: {sum(reasons.values())} tests skipped:"]
    lines += [f"  {n:>3} × {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append("  (`.ci/run` installs Chromium and PostgreSQL from Debian's packages as root; the corpus tests need "
                 "../shared beside the checkout: README.md, \"What `make test` skips without extra software\")")
    return lines


def main(argv: list[str]) -> int:
    side = [(name, files, extra) for name, files, extra in SIDE if all((ROOT / f).is_file() for f in files)]
    taken = {f for _, files, _ in side for f in files}
    rest = [p for p in sorted((ROOT / "tests").glob("test_*.py")) if str(p.relative_to(ROOT)) not in taken]
    groups = [*side, *((f"group {i + 1}", g, []) for i, g in enumerate(split(rest, CPU_GROUPS)))]
    record = bool(os.environ.get("REINDEX_RECORD_DURATIONS"))
    skip_soak = bool(os.environ.get("REINDEX_SKIP_SOAK"))
    with tempfile.TemporaryDirectory(prefix="reindex-tests-") as tmp:
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations={SLOWEST}", *argv]
        running = []
        for n, (name, files, extra) in enumerate(groups):
            log, xml = Path(tmp) / f"group{n}.log", Path(tmp) / f"group{n}.xml"
            env = {**os.environ, "PREFECT_HOME": f"{tmp}/prefect-home-{n}"}
            with log.open("wb") as out:
                proc = subprocess.Popen([*base, f"--basetemp={tmp}/g{n}", f"--junitxml={xml}", *extra, *files],
                                        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
            running.append((name, files, extra, log, xml, proc))
        codes = []
        for name, files, extra, log, xml, proc in running:
            rc = proc.wait()
            print(f"\n--- {name} ({len(files)} files) ---", flush=True)
            sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
            sys.stdout.flush()
            # A soak-only group collects nothing when soak tests are skipped, or deselected by -k: not a failure.
            soak_only = extra == ["-m", "soak"]
            codes.append((name, 0 if rc == 5 and soak_only and (skip_soak or argv) else rc, soak_only))
        reasons = skipped([x for *_, x, _ in running])
        if record:
            measured = file_seconds([x for *_, x, _ in running])
            DURATIONS.write_text(json.dumps({**recorded(), **{k: round(v, 1) for k, v in sorted(measured.items())}},
                                            indent=1, sort_keys=True) + "\n", encoding="utf-8")
            print(f"make test: recorded the seconds of {len(measured)} test files in {DURATIONS.relative_to(ROOT)}")
    print("\n" + "\n".join(skip_summary(reasons)), flush=True)
    empty = [name for name, rc, _ in codes if rc == 5]
    if empty and (not argv or len(empty) == len([c for c in codes if not c[2]])):
        print(f"make test: no tests were collected in {', '.join(empty)}", file=sys.stderr)
        return 1
    for name, rc, _ in codes:
        if rc not in (0, 5):
            print(f"make test: {name} failed (pytest exit {rc})", file=sys.stderr)
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
