"""Mutation testing helpers for `make mutation` (see bench/mutation/README.md).

    python bench/mutation/tally.py sample [--full-rate R] [--rate 0.04] [--seed 12]   sampled mutant names
    python bench/mutation/tally.py table [DIR]                        killed/survived/... per module
    python bench/mutation/tally.py survivors [MODULE_GLOB]            surviving mutant names

Reads mutmut's per-file results (mutants/src/**/*.py.meta) after `mutmut run` generated them.
"""

from __future__ import annotations

import fnmatch
import json
import random
import sys
from collections import Counter
from pathlib import Path

__all__ = ["FULL", "results", "sample", "status"]

# Modules whose every mutant is run; the rest of the configured modules are sampled.
FULL = ("reindex.books.manifests.", "reindex.decisions.cutover.", "reindex.planner._classify.", "reindex.engine.execution.")
_STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
           36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}


def status(code: int | None) -> str:
    return _STATUS.get(code, f"suspicious ({code})")


def results(root: Path = Path("mutants")) -> dict[str, int | None]:
    """Mutant name → mutmut exit code (None: not run yet)."""
    out: dict[str, int | None] = {}
    for meta in sorted(root.glob("src/**/*.py.meta")):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def module_of(name: str) -> str:
    return name.split(".x")[0]


def sample(names: list[str], rate: float, seed: int, full_rate: float | None = None) -> list[str]:
    """A seeded random sample of `rate` of each module's mutants (stratified by module). The FULL modules
    are left out (run whole) unless `full_rate` is given: then they are sampled at that rate."""
    rng = random.Random(seed)
    by_module: dict[str, list[str]] = {}
    for n in sorted(names):
        if full_rate is not None or not n.startswith(FULL):
            by_module.setdefault(module_of(n), []).append(n)
    picked: list[str] = []
    for module in sorted(by_module):
        pool = by_module[module]
        share = full_rate if full_rate is not None and module + "." in FULL else rate
        picked += sorted(rng.sample(pool, max(1, round(share * len(pool)))))
    return picked


def main(argv: list[str]) -> None:
    res = results()
    if argv[0] == "sample":
        rate = float(argv[argv.index("--rate") + 1]) if "--rate" in argv else 0.04
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 12
        full = float(argv[argv.index("--full-rate") + 1]) if "--full-rate" in argv else None
        print("\n".join(sample(list(res), rate, seed, full)))
    elif argv[0] == "table":
        if len(argv) > 1:  # a saved copy of mutants/ (its src/**/*.meta)
            res = results(Path(argv[1]))
        rows: dict[str, Counter] = {}
        for name, code in res.items():
            rows.setdefault(module_of(name), Counter())[status(code)] += 1
        cols = ["killed", "survived", "timeout", "no tests", "not checked"]
        print("| module | mutants | run | " + " | ".join(cols) + " | kill rate (of tested) |")
        print("|---|" + "---:|" * (len(cols) + 3))
        for module in sorted(rows):
            c = rows[module]
            run = sum(c.values()) - c["not checked"]
            tested = c["killed"] + c["timeout"] + c["survived"]  # "no tests": no selected test calls it
            rate = f"{(c['killed'] + c['timeout']) / tested:.0%}" if tested else "–"
            other = sum(v for k, v in c.items() if k not in cols)
            extra = f" (+{other} other)" if other else ""
            print(f"| {module} | {sum(c.values())} | {run}{extra} | " + " | ".join(str(c[k]) for k in cols) + f" | {rate} |")
        total = sum(rows.values(), Counter())
        tested = total["killed"] + total["timeout"] + total["survived"]
        print(f"| **all** | {sum(total.values())} | {sum(total.values()) - total['not checked']} | "
              + " | ".join(str(total[k]) for k in cols)
              + f" | {(total['killed'] + total['timeout']) / tested:.0%} |" if tested else " | – |")
    elif argv[0] == "survivors":
        pattern = argv[1] if len(argv) > 1 else "*"
        print("\n".join(n for n, c in sorted(res.items()) if c == 0 and fnmatch.fnmatch(n, pattern)))


if __name__ == "__main__":
    main(sys.argv[1:] or ["table"])
