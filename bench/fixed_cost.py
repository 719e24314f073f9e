"""Fixed cost of a command: CPU-seconds (user + sys, getrusage of the child) of a no-op `reindex plan`, of
`reindex status` and of `reindex query` on the embedded default store, hash embedder, the bundled 24-PEP sample.

    PYTHONPATH=src .venv/bin/python bench/fixed_cost.py [--runs 5] [--src OTHER/src ...] [--source-only]
        [--build-src TREE]

Builds one workspace (plan, apply, cutover) with the last ``--src`` tree (or ``--build-src``: an older tree cannot
read the records a newer one's config writes), then runs each command ``--runs`` times with each ``--src`` tree on
PYTHONPATH (default: this tree's ``src``; pass ``/work/main/src`` too to compare), interleaved, beside a yardstick
(``python -c "import numpy, pyarrow.parquet, pydantic, click, yaml"``: the third-party imports a no-op plan pays),
and prints the median CPU-s per command and tree with the 1-minute load average before each command.

Each tree is copied into the bench's folder and byte-compiled there first, as an installed package is
(``compileall``). ``--source-only``: no bytecode and ``PYTHONDONTWRITEBYTECODE=1``, every module compiled from
source in every run (0.04-0.21 CPU-s more per command, measured here); our machines set that variable, so a
checkout run as is pays it. CPU-seconds move less with the load than wall seconds, but on a shared VM not little:
compare trees measured in one run. Target (issues 24 and 35): ≤ 0.6 CPU-s each on an idle box.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "src"
SAMPLE = HERE / "reindex" / "sample" / "corpus"


#: What the yardstick row imports: the third-party libraries a no-op plan loads.
YARDSTICK = "import numpy, pyarrow.parquet, pydantic, click, yaml"


def build(root: Path) -> Path:
    from reindex import api

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


def cpu_of(cmd: list[str], cwd: Path, src: str, compiled: bool) -> float:
    env = {**os.environ, "PYTHONPATH": src, "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    if compiled:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert r.returncode == 0, r.stderr[-2000:]
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--src", nargs="+", default=[str(HERE)])
    ap.add_argument("--source-only", action="store_true", help="no bytecode: compile every module in every run")
    ap.add_argument("--build-src", default=None, help="the tree that builds the workspace (default: the last --src; "
                    "an older tree cannot read the records of a newer one's config)")
    ap.add_argument("--build-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        build(args.build_only)
        return
    base = Path(tempfile.mkdtemp(prefix="fixed-cost-"))
    try:
        env = {**os.environ, "PYTHONPATH": args.build_src or args.src[-1], "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        env.pop("PREFECT_API_URL", None)
        subprocess.run([sys.executable, __file__, "--build-only", str(base)], env=env, check=True, capture_output=True)
        config = base / "reindex.yaml"
        trees = {}
        for i, src in enumerate(args.src):  # a private copy: nothing is written into the trees compared
            copy = base / f"src-{i}"
            shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if not args.source_only:
                compileall.compile_dir(copy, quiet=1)
            trees[src] = str(copy)
        commands = {"plan (no-op)": ["plan", "--out", str(base / "plans-noop")], "status": ["status"],
                    "query": ["query", "how are imports resolved", "--k", "5"]}
        got: dict[tuple[str, str], list[float]] = {}
        loads: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            # A yardstick in the same loop: the third-party imports every command pays (this box's CPU-seconds move
            # by tens of percent within minutes, whatever the load average says; compare trees within one run).
            loads.setdefault(("yardstick", "-"), []).append(os.getloadavg()[0])
            got.setdefault(("yardstick", "-"), []).append(cpu_of([sys.executable, "-c", YARDSTICK], base, "", True))
            for src in args.src:
                for name, argv in commands.items():
                    cmd = [sys.executable, "-m", "reindex", *argv, "-c", str(config)]
                    loads.setdefault((name, src), []).append(os.getloadavg()[0])
                    got.setdefault((name, src), []).append(cpu_of(cmd, base, trees[src], not args.source_only))
        print(f"{os.cpu_count()} CPUs; {'source only (no bytecode)' if args.source_only else 'byte-compiled trees'}")
        print("| command | tree | median CPU-s | min | max | load (1 min) during the runs |")
        print("| --- | --- | ---: | ---: | ---: | ---: |")
        for (name, src), xs in got.items():
            ld = loads[(name, src)]
            print(f"| {name} | {src} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} | "
                  f"{min(ld):.1f}–{max(ld):.1f} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
