"""The plan's footprint figures against what the embedded store then uses, and plan streaming (issue 14).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/footprint.py [--scales 1,10] [--dir FOLDER]

For each scale N: the PEP snapshot (``../shared/corpus/snapshot_new.parquet``) replicated N times (ids
suffixed ``~k``) as a JSONL source, ``vector.provider: hash`` (384 dims, so the store and not the model is
measured), the default embedded edge store. Steps, each a real ``reindex`` command in its own process:

1. ``plan`` (initial) → ``apply`` → ``cutover``;
2. a chunker change (recursive 250 → 200 tokens): ``plan`` → ``approve`` → ``apply`` → ``cutover``.

Every command's RSS (anonymous and file-backed, sampled from ``/proc/<pid>/status`` every 0.2 s) and the
store folder's size (every 1 s) are recorded. The table sets them beside the plan's footprint: for apply,
the plan's peak RAM (old population served + new one built) against the apply process's RSS minus the
RSS of a bare ``reindex status`` process (the interpreter and libraries), and the plan's peak disk
against the store folder's peak. Plan streaming: the ``plan`` commands' peak RSS at N× over 1×.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "snapshot_new.parquet"
MIB = 2**20


def _status(pid: int) -> dict[str, float]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512  # allocated, not apparent (sparse files)
            except FileNotFoundError:
                pass
    return total


def run(args: list[str], cwd: Path, store: Path, ok=(0,)) -> dict:
    """Run one reindex command; its peak RSS (anon, file, sum) and the store folder's peak size."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "reindex", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = {"anon": 0, "file": 0, "rss": 0, "disk": 0}
    done = threading.Event()

    def sample() -> None:
        last_disk = 0.0
        while not done.is_set():
            s = _status(proc.pid)
            if s:
                a, f = s.get("RssAnon", 0), s.get("RssFile", 0)
                peak["anon"], peak["file"], peak["rss"] = max(peak["anon"], a), max(peak["file"], f), max(peak["rss"], a + f)
            if time.perf_counter() - last_disk >= 1.0 and store.exists():
                peak["disk"] = max(peak["disk"], _size(store))
                last_disk = time.perf_counter()
            done.wait(0.2)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, _ = proc.communicate()
    done.set()
    th.join()
    if store.exists():
        peak["disk"] = max(peak["disk"], _size(store))
    if proc.returncode not in ok:
        raise SystemExit(f"reindex {' '.join(args)} exited {proc.returncode}:\n{out[-3000:]}")
    return {**peak, "seconds": time.perf_counter() - t0, "out": out}


def write_corpus(path: Path, scale: int) -> int:
    table = pq.read_table(CORPUS).to_pylist()
    id_col = next(c for c in ("id", "doc_id", "_id") if c in table[0])
    text_col = next(c for c in ("text", "content", "body") if c in table[0])
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for k in range(scale):
            for row in table:
                f.write(json.dumps({"id": f"{row[id_col]}~{k}", "text": row[text_col]}) + "\n")
                n += 1
    return n


CONFIG = """index: pep
source: {source}
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash, model: hash-384, dimension: 384}}
state: {{uri: ./state}}
store: {{path: ./store}}
approval: {{pipeline_scoped: false, max_tokens: null, max_usd: null}}
cutover: {{probes: 20, min_recall_delta: -1.0, min_overlap: 0.0}}
"""


def one_scale(scale: int, work: Path) -> list[dict]:
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    docs = write_corpus(work / "corpus.jsonl", scale)
    store = work / "store"
    rows = []

    def cfg(size: int) -> None:
        (work / "reindex.yaml").write_text(CONFIG.format(source=work / "corpus.jsonl", size=size), encoding="utf-8")

    cfg(250)
    base = run(["status"], work, store, ok=(0, 1))
    for label, size in (("initial", 250), ("chunker change", 200)):
        cfg(size)
        p = run(["plan", "--json"], work, store, ok=(2,))
        plan_file = json.loads(p["out"][p["out"].index("{"):])["plan_file"]
        doc = json.loads((work / plan_file).read_text(encoding="utf-8"))
        body = doc.get("body", doc)
        c = body["cost"]
        a = run(["apply", "--no-prefect", plan_file], work, store)
        cut = run(["cutover", plan_file], work, store)
        rows.append({
            "scale": scale, "documents": docs, "step": label, "kind": body["kind"],
            "chunks_new": body["work"]["chunks_new"], "backend": c["footprint"].get("backend"),
            "plan_rss": p["rss"], "plan_s": p["seconds"],
            "predicted_peak_ram": c["footprint"]["peak"]["ram_bytes"],
            "predicted_peak_disk": c["footprint"]["peak"]["disk_bytes"],
            "apply_rss": a["rss"], "apply_anon": a["anon"], "apply_file": a["file"], "apply_s": a["seconds"],
            "cutover_rss": cut["rss"], "baseline_rss": base["rss"], "disk_peak": max(a["disk"], cut["disk"]),
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="1,10")
    ap.add_argument("--dir", default="/tmp/reindex-footprint")
    args = ap.parse_args()
    if not CORPUS.is_file():
        raise SystemExit(f"needs {CORPUS}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = []
    for s in (int(x) for x in args.scales.split(",")):
        rows += one_scale(s, Path(args.dir) / f"x{s}")
    mib = lambda b: f"{b / MIB:,.0f}"
    print("\n| scale | step | chunks | plan peak RAM MiB | apply RSS − baseline MiB (anon + file) | ratio | "
          "plan peak disk MiB | store peak MiB | ratio | cutover RSS MiB | plan RSS MiB | plan s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        used = r["apply_rss"] - r["baseline_rss"]
        print(f"| {r['scale']}× | {r['step']} | {r['chunks_new']:,} | {mib(r['predicted_peak_ram'])} | "
              f"{mib(used)} ({mib(r['apply_anon'])} + {mib(r['apply_file'])}) | {used / r['predicted_peak_ram']:.2f} | "
              f"{mib(r['predicted_peak_disk'])} | {mib(r['disk_peak'])} | {r['disk_peak'] / r['predicted_peak_disk']:.2f} | "
              f"{mib(r['cutover_rss'])} | {mib(r['plan_rss'])} | {r['plan_s']:.0f} |")
    first = {r["step"]: r for r in rows if r["scale"] == rows[0]["scale"]}
    for r in rows:
        if r["scale"] != rows[0]["scale"]:
            print(f"plan RSS {r['step']}: {r['scale']}× / {rows[0]['scale']}× = "
                  f"{r['plan_rss'] / first[r['step']]['plan_rss']:.2f}")
    print(f"baseline (`reindex status`) RSS: {mib(rows[0]['baseline_rss'])} MiB")


if __name__ == "__main__":
    main()
