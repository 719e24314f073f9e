"""Fixed cost of a command: CPU-seconds (user + sys, getrusage of the child) of a no-op `reindex plan` and of
`reindex status` on the embedded default store, hash embedder, the bundled 24-PEP sample.

    PYTHONPATH=src .venv/bin/python bench/fixed_cost.py [--runs 5] [--src OTHER/src ...]

Builds one workspace with this tree (plan, apply, cutover), then runs each command ``--runs`` times with
each ``--src`` tree on PYTHONPATH (default: this tree's ``src``; pass ``/work/main/src`` too to compare),
interleaved, and prints the median CPU-s per command and tree. Target (issue 24): ≤ 0.6 CPU-s each.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import reindex
from reindex import api

SAMPLE = Path(reindex.__file__).resolve().parent / "sample" / "corpus"
HERE = Path(reindex.__file__).resolve().parents[1]


def build(root: Path) -> Path:
    shutil.copytree(SAMPLE, root / "corpus")
    config = root / "reindex.yaml"
    config.write_text("index: docs\nsource: ./corpus\nvector: {provider: hash}\n", encoding="utf-8")
    old = os.getcwd()
    os.chdir(root)
    try:
        plan, path = api.make_plan(config, out=root / "plans")
        api.apply_plan(path, config, use_prefect=False)
        api.cutover(path, config)
    finally:
        os.chdir(old)
    return config


def cpu_of(cmd: list[str], cwd: Path, src: str) -> float:
    env = {**os.environ, "PYTHONPATH": src, "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--src", nargs="+", default=[str(HERE)])
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="fixed-cost-"))
    try:
        config = build(base)
        commands = {"plan (no-op)": ["plan", "--out", str(base / "plans-noop")], "status": ["status"]}
        got: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            for src in args.src:
                for name, argv in commands.items():
                    cmd = [sys.executable, "-m", "reindex", *argv, "-c", str(config)]
                    got.setdefault((name, src), []).append(cpu_of(cmd, base, src))
        print("| command | tree | median CPU-s | min | max |")
        print("| --- | --- | ---: | ---: | ---: |")
        for (name, src), xs in got.items():
            print(f"| {name} | {src} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
