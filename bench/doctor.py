"""What ``reindex doctor`` costs at two sizes (issue 34, item 5): the sampled check and ``--full``.

    PYTHONPATH=src nice -n 5 .venv/bin/python bench/doctor.py --points 50000 --dir build/doctor [--repeat 3]

Two healthy indexes, hash embedder, edge store, built once per ``--dir`` (kept for a re-run):

- ``sample``: the bundled 24-PEP sample (``src/reindex/sample/corpus``), ``recursive:size=150``;
- ``large``: bench/million.py's replicated PEP corpus at ``--points`` (its ``write_corpus``), ``recursive:size=250``.

Each check is one ``reindex doctor --json`` child process (``--repeat`` times; the median is printed): wall and
CPU seconds of the child (imports and opening the store's reader included), the doctor's own ``seconds`` (its
work after the imports), and what it looked at per population (listed rows, points checked, points scanned,
vectors re-embedded). The sampled check uses the defaults (``--sample 256 --embed-sample 32``); ``--full``
checks every listed point and re-embeds the default 32 vectors. Both must report ``healthy``. Then a copy of one
point of the large index is upserted under a new id behind reindex's back: ``--full`` (its count disagrees, so it
scrolls the collection),
``--full --repair``, ``reindex apply`` of the repair plan, and ``--full`` again (healthy), once each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(ROOT / "bench"))

SAMPLE_CONFIG = """index: docs
source: ./corpus
text: {chunker: {kind: recursive, size: 150}}
vector: {provider: hash}
state: {uri: ./state}
store: {path: ./store}
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PREFECT_API_URL", None)
    return env


def build(work: Path) -> dict:
    """Plan, apply and cut over the config in ``work`` (in this process, in-process runner); figures."""
    from reindex import api

    cwd = os.getcwd()
    os.chdir(work)
    try:
        t0 = time.perf_counter()
        with api.Index.open(work / "reindex.yaml") as ix:
            plan, path = ix.plan()
            if plan.body["approval"]["required"]:
                ix.approve(path, by="bench")
            resumed = 0
            while True:
                try:
                    r = ix.apply(path, prefect=False)
                    break
                except api.ReindexError as err:  # LockLost after a long index build on a busy box: resume once
                    if resumed or "lost the lock" not in str(err):
                        raise
                    print(f"apply stopped ({str(err)[:160]}…); resuming it", flush=True)
                    resumed += 1
            assert r.status == "done", r.report["failures"]
            ix.cutover(path)
        return {"build_s": round(time.perf_counter() - t0, 1), "points": r.report["actual"]["points_in_collection"],
                "apply_resumed": resumed}
    finally:
        os.chdir(cwd)


def drifted(work: Path) -> dict:
    """One unlisted point upserted behind reindex's back: ``--full`` now scrolls the collection (its count leaves
    room for it); then
    ``--full --repair`` and ``reindex apply`` of the plan it wrote, timed as child processes, and healthy again."""
    from reindex import api
    from reindex.books.manifests import read_chunk_manifest_columns

    cfg = api.load_resolved(work / "reindex.yaml")
    with api.Index.open(work / "reindex.yaml") as ix:
        live = ix.status()["aliases"][cfg.index]
        first = next(read_chunk_manifest_columns(ix.state, cfg.index, live, ["point_id"]))["point_id"][0]
    import uuid

    from reindex.adapters.stores.vectors import Point

    store = api.vector_store_for(cfg)
    try:
        store.prepare_writes(live)
        p = store.retrieve(live, [first], with_vectors=True)[0]
        store.upsert(live, [Point(str(uuid.uuid4()), p.vector, p.payload)])  # a copy under an id nobody lists
        store.publish(live)
    finally:
        store.close()
    out = {"full_scroll": doctor(work, "--full", healthy=False)}
    out["full_repair"] = doctor(work, "--full", "--repair", healthy=False)
    plan = out["full_repair"].pop("repair")["plan"]
    out["apply"] = _child(work, "apply", plan, "--no-progress", "--no-prefect")
    out["after"] = doctor(work, "--full")
    return out


def _child(work: Path, *args: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "reindex", *args, "-c", str(work / "reindex.yaml")], cwd=work, env=_env(),
                       capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"reindex {' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return {"wall_s": round(time.perf_counter() - t0, 2),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2)}


def doctor(work: Path, *args: str, healthy: bool = True) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "reindex", "doctor", "--json", "-c", str(work / "reindex.yaml"), *args],
                       cwd=work, env=_env(), capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != (0 if healthy else 1):
        raise SystemExit(f"reindex doctor {' '.join(args)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    body = json.loads(p.stdout)
    assert body["healthy"] is healthy, body["findings"]
    return {"wall_s": wall, "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
            "doctor_s": body["seconds"], "populations": body["populations"], "repair": body["repair"],
            "findings": [(f["kind"], f["count"]) for f in body["findings"]]}


def measure(work: Path, repeat: int) -> dict:
    out = {}
    for name, args in (("sampled", ()), ("full", ("--full",))):
        runs = [doctor(work, *args) for _ in range(repeat)]
        out[name] = {k: round(statistics.median(r[k] for r in runs), 2) for k in ("wall_s", "cpu_s", "doctor_s")}
        out[name]["looked_at"] = runs[0]["populations"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=50_000)
    ap.add_argument("--dir", type=Path, default=ROOT / "build" / "doctor")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.dir = args.dir.resolve()
    import million

    results = {}
    for name in ("sample", "large"):
        work = args.dir / name
        built = (work / "built.json")
        if not built.exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            if name == "sample":
                shutil.copytree(SRC / "reindex" / "sample" / "corpus", work / "corpus")
                (work / "reindex.yaml").write_text(SAMPLE_CONFIG, encoding="utf-8")
            else:
                million.write_corpus(work, round(args.points / million.POINTS_PER_DOC))
                million.configure(work, 250)
            built.write_text(json.dumps(build(work)))
        results[name] = {**json.loads(built.read_text()), **measure(work, args.repeat)}
        print(json.dumps({name: results[name]}), flush=True)
    drift = drifted(args.dir / "large")
    print(json.dumps({"large, one unlisted point": drift}), flush=True)
    print("| index | points | check | wall s | CPU s | doctor's own s | looked at |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- |")
    for name, r in results.items():
        for check in ("sampled", "full"):
            m = r[check]
            p = m["looked_at"][0]
            looked = f"{p['checked']:,} listed, {p['scanned']:,} stored, {p['embedded']} re-embedded"
            print(f"| {name} | {r['points']:,} | {check} | {m['wall_s']} | {m['cpu_s']} | {m['doctor_s']} | {looked} |")
    for step in ("full_scroll", "full_repair", "apply", "after"):
        m = drift[step]
        looked = (f"{m['populations'][0]['checked']:,} listed, {m['populations'][0]['scanned']:,} stored; "
                  f"{m['findings'] or 'healthy'}") if "populations" in m else "the repair plan"
        print(f"| large, one unlisted point | {results['large']['points']:,} | {step} | {m['wall_s']:.2f} | "
              f"{m['cpu_s']:.2f} | {m.get('doctor_s', '')} | {looked} |")


if __name__ == "__main__":
    main()
