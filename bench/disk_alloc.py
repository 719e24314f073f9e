"""What each writing command allocates in the embedded store, on tmpfs and on ext4 (issue 33, item 2).

Runs the sample corpus through initial apply → cutover → a chunker change (apply, cutover) → rollback → an
in-place `reindex sync` → `reindex gc --force --yes` with the CLI, in a workspace on a private mount of the
chosen file system (a tmpfs, or an ext4 image on a loop device), and prints per command the bytes the file
system had in use before, at its peak (statvfs sampled every 2 ms) and after, beside the plan's footprint
prediction (peak less old) and what the command's free-space guard asks for (``reindex.context.disk``). The
engine preallocates sparse files; ext4 allocates their blocks only when written, tmpfs also when they are mapped
and read (a load populates them).

Needs root (mount) and util-linux `unshare`; re-runs itself in a private mount namespace.

    python bench/disk_alloc.py --fs tmpfs
    python bench/disk_alloc.py --fs ext4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REINDEX = Path(sys.executable).with_name("reindex")
LENIENT = "cutover: {min_recall_delta: -1.0, min_overlap: 0.0, retention_days: 0}"


def _used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _run(ws: Path, mount: Path, *args: str) -> dict:
    """One CLI command, with the file system's use before, at its peak and after."""
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    before = peak = _used(mount)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _used(mount))
            time.sleep(0.002)

    t = threading.Thread(target=sample)
    t.start()
    r = subprocess.run([str(REINDEX), *args, "-c", str(ws / "reindex.yaml")], cwd=ws, env=env, capture_output=True,
                       text=True)
    done.set()
    t.join()
    after = _used(mount)
    return {"cmd": " ".join(args[:1]), "rc": r.returncode, "before": before, "peak": max(peak, after), "after": after,
            "err": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""}


def _latest_plan(ws: Path) -> Path:
    plans = [p for p in (ws / "plans").glob("*.json") if not p.name.endswith((".run.json", ".cutover.json"))
             and ".approval" not in p.name and ".rejection" not in p.name]
    return max(plans, key=lambda p: p.stat().st_mtime)


def _guard(ws: Path, command: str, *args: str) -> int:
    """What the command's free-space guard asks for now (reindex.context.disk), computed in a child process
    from the workspace's folder (so that its own files are its only open files)."""
    code = """
import json, sys
from pathlib import Path
from reindex.api import load_resolved, make_plan, state_store
from reindex.planner import read_plan
from reindex.context import disk
ws, command, args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
cfg = load_resolved(ws / "reindex.yaml")
state = state_store(cfg)
record = ws / ".reindex/indexes/docs/live.json"
live = json.loads(record.read_text()) if record.exists() else {}
if command == "apply":
    need = disk.need_for_plan(read_plan(args[0]), cfg)
elif command == "sync":
    need = disk.need_for_plan(make_plan(ws / "reindex.yaml", out=None)[0], cfg)
elif command == "cutover":
    plan = read_plan(args[0])
    done = json.loads((ws / f".reindex/indexes/docs/runs/{plan.plan_hash}/done.json").read_text())
    need = disk.need_for_cutover(cfg, done["collection"], live.get("collection"))
elif command == "rollback":
    need = disk.need_for_rollback(cfg, state, None)
else:
    need = disk.RECORDS_BYTES
print(need)
"""
    env = {**os.environ, "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run([sys.executable, "-c", code, str(ws), command, *args], cwd=ws, env=env, capture_output=True,
                       text=True, check=True)
    return int(r.stdout.strip())


def measure(mount: Path) -> list[dict]:
    sys.path.insert(0, str(REPO / "tests"))
    from helpers_index import SAMPLE, config_text

    ws = mount / "ws"
    ws.mkdir()
    shutil.copytree(SAMPLE / "corpus", ws / "corpus")
    (ws / "reindex.yaml").write_text(config_text(150, extra=LENIENT))
    rows = []

    def plan_and_apply(label: str) -> None:
        rows.append({**_run(ws, mount, "plan", "--out", "plans"), "cmd": f"plan ({label})"})
        path = _latest_plan(ws)
        body = json.loads(path.read_text())
        subprocess.run([str(REINDEX), "approve", str(path), "--by", "bench"], cwd=ws, capture_output=True)
        fp = body["cost"]["footprint"]
        guard = _guard(ws, "apply", str(path))
        row = _run(ws, mount, "apply", str(path), "--no-progress")
        row["predicted"] = int(fp["peak"]["disk_bytes"]) - int(fp["old"]["disk_bytes"])
        rows.append({**row, "cmd": f"apply ({label})", "guard": guard})
        guard = _guard(ws, "cutover", str(path))
        rows.append({**_run(ws, mount, "cutover", str(path)), "cmd": f"cutover ({label})", "guard": guard})

    plan_and_apply("initial")
    (ws / "reindex.yaml").write_text(config_text(120, extra=LENIENT))
    plan_and_apply("chunker change")
    guard = _guard(ws, "rollback")
    rows.append({**_run(ws, mount, "rollback"), "guard": guard})
    (ws / "reindex.yaml").write_text(config_text(150, extra=LENIENT))  # the config of the live population again
    for f in sorted((SAMPLE / "edits").glob("*.rst")):
        shutil.copy(f, ws / "corpus" / f.name)
    guard = _guard(ws, "sync")
    rows.append({**_run(ws, mount, "sync", "--no-gc"), "cmd": "sync (in place)", "guard": guard})
    guard = _guard(ws, "gc")
    rows.append({**_run(ws, mount, "gc", "--force", "--yes"), "guard": guard})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fs", choices=["tmpfs", "ext4"], required=True)
    ap.add_argument("--size-mb", type=int, default=512)
    args = ap.parse_args()
    if os.environ.get("_DISK_ALLOC_NS") != "1":
        os.execvpe("unshare", ["unshare", "-m", sys.executable, __file__, *sys.argv[1:]],
                   {**os.environ, "_DISK_ALLOC_NS": "1"})
    with tempfile.TemporaryDirectory(prefix="disk-alloc-") as tmp:
        mount = Path(tmp) / "mnt"
        mount.mkdir()
        if args.fs == "tmpfs":
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.size_mb}m", "tmpfs", str(mount)], check=True)
        else:
            image = Path(tmp) / "ext4.img"
            with open(image, "wb") as f:
                f.truncate(args.size_mb << 20)
            subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
            subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
        try:
            rows = measure(mount)
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)
    mib = lambda n: f"{n / 2**20:8.2f}"  # noqa: E731
    print(f"{args.fs}: MiB in use on the file system (the workspace alone on it)")
    print(f"{'command':<24} {'rc':>3} {'before':>8} {'peak':>8} {'after':>8} {'peak-before':>11} {'footprint':>9} "
          f"{'guard':>8}")
    for r in rows:
        pred = mib(r["predicted"]) if "predicted" in r else ""
        guard = mib(r["guard"]) if "guard" in r else ""
        err = r["err"][:80] if r["rc"] not in (0, 2) else ""
        print(f"{r['cmd']:<24} {r['rc']:>3} {mib(r['before'])} {mib(r['peak'])} {mib(r['after'])} "
              f"{mib(r['peak'] - r['before']):>11} {pred:>9} {guard:>8}  {err}")


if __name__ == "__main__":
    main()
