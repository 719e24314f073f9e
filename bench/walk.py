"""The walk of a one-document ``reindex sync``: which reindex modules it enters, and how the use-case layer moves.

A workspace (the bundled sample, the ``hash`` provider so no model is loaded) is built and cut over, one document
is edited, then ``reindex sync`` runs in a fresh process under ``sys.setprofile``. Reported:

* ``modules``: reindex modules a function of which was called (a module only imported, its module and class
  bodies run, is not entered);
* ``usecases``: the sequence of use-case modules (``reindex.usecases.*``) whose functions were called, consecutive
  repeats folded: ``visits`` is its length, ``returns`` how many of its entries go back to a module the walk had
  already left (a layer that re-enters itself is a layer whose steps are spread over modules).

``--src DIR`` runs the sync (and the build) with another checkout's ``src`` on ``PYTHONPATH``, so two trees are
compared side by side in one run (the workspace is built by each tree itself)::

    python bench/walk.py                                  # this tree
    python bench/walk.py --src /tmp/before/src --json     # a checkout of an earlier commit
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """\
index: docs
source: ./corpus
text: {chunker: {kind: recursive, size: 150}}
vector: {provider: hash}
apply: {shards: 4}
"""

BUILD = """
import sys
from pathlib import Path
from reindex import api
with api.Index.open("reindex.yaml") as ix:
    plan, path = ix.plan()
    if plan.body["approval"]["required"]:
        ix.approve(path, by="bench")
    assert ix.apply(path, prefect=False).status == "done"
    assert ix.cutover(path).passed
"""

# Runs `reindex sync` as the CLI does, under a profiler that records every reindex frame called.
PROFILED = """
import json, sys
entered, walk = [], []
seen = set()
def prof(frame, event, arg):
    if event != "call":
        return
    name = frame.f_globals.get("__name__", "")
    code = frame.f_code
    # CO_OPTIMIZED: a function, not a module or class body run at import; __create_fn__: dataclasses making the
    # methods of a class as it is defined (import time too)
    if not name.startswith("reindex") or not code.co_flags & 1 or code.co_name == "__create_fn__":
        return
    if name not in seen:
        seen.add(name)
        entered.append(name)
    if name.startswith("reindex.usecases") and (not walk or walk[-1] != name):
        walk.append(name)
sys.setprofile(prof)
from reindex import cli
try:
    cli.main(["sync", "--json"], standalone_mode=False)
except SystemExit:
    pass
sys.setprofile(None)
print("WALK" + json.dumps({"entered": entered, "walk": walk}), file=sys.stderr)
"""


def measure(src: Path | None) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory(prefix="reindex-walk-") as tmp:
        ws = Path(tmp)
        sample = Path(subprocess.run([sys.executable, "-c", "import reindex, pathlib; print(pathlib.Path("
                                      "reindex.__file__).parent / 'sample')"], env=env, capture_output=True,
                                     text=True, check=True).stdout.strip())
        shutil.copytree(sample / "corpus", ws / "corpus")
        (ws / "reindex.yaml").write_text(CONFIG, encoding="utf-8")
        subprocess.run([sys.executable, "-c", BUILD], cwd=ws, env=env, check=True, capture_output=True, text=True)
        doc = sorted((ws / "corpus").iterdir())[0]
        doc.write_text(doc.read_text(encoding="utf-8") + "\nOne more sentence, edited for the walk.\n", encoding="utf-8")
        run = subprocess.run([sys.executable, "-c", PROFILED], cwd=ws, env=env, capture_output=True, text=True)
        line = next(ln for ln in run.stderr.splitlines() if ln.startswith("WALK"))
        got = json.loads(line[4:])
        sync = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {}
    walk = got["walk"]
    returns = sum(1 for i, m in enumerate(walk) if m in walk[:i])
    return {"src": str(src or ROOT / "src"), "outcome": sync.get("outcome"), "modules": len(got["entered"]),
            "usecases_visits": len(walk), "usecases_returns": returns,
            "usecases_modules": sorted(set(walk)), "walk": walk, "entered": got["entered"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", action="append", type=Path, default=[],
                   help="another checkout's src folder to measure beside this tree (repeatable)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = [measure(None)] + [measure(s.resolve()) for s in args.src]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'tree':<40} {'outcome':<18} {'modules':>8} {'uc visits':>10} {'uc returns':>11}")
    for r in rows:
        print(f"{r['src'][-40:]:<40} {str(r['outcome']):<18} {r['modules']:>8} {r['usecases_visits']:>10} "
              f"{r['usecases_returns']:>11}")


if __name__ == "__main__":
    main()
