"""Where ``dask-processes:N`` spends CPU beyond the in-process runner, for the same build (issue 44, item 3).

The first ``--peps`` PEPs of ``snapshot_new.parquet`` (sorted ids), recursive 250 (MiniLM tokens), ``--shards``
shards, the ``hash`` embedder (free: the runner's own cost shows) or with ``--model`` the packaged MiniLM. One plan
(an initial build) is made and approved once; every variant applies it from a fresh copy of the workspace as a
fresh ``reindex apply PLAN --no-prefect --task-runner SPEC`` process, CPU-seconds of it and of every process it
starts (``RUSAGE_CHILDREN``: the Dask scheduler, nannies and workers are its children), ``--repeat`` rounds with
the variants' order rotating, medians.

Variants: ``threads`` (in-process, the default), ``dask-processes:N``. Beside them, the parts of the Dask
side measured alone in fresh processes (same rounds):

* **cluster**: start a ``LocalCluster`` of N worker processes (one thread each, as the runner starts them), run
  nothing, stop it: its fixed cost (process starts, imports of dask.distributed);
* **cluster + shard imports**: the same, each worker importing what a shard needs (``reindex.engine.workers``)
  and making the embedder (``--model``: torch, sentence-transformers and the model load, once per worker);
* **stage + commit**: in one process, the staged writes of the build's points encoded by the workers and decoded
  by the coordinator (``workers._encode_points`` / ``_decode_points``) — serialization of vectors and payloads.

What is left (dask − threads − the parts) is per-shard scheduling, result transfer and the idle polling of the
cluster's processes while the build runs (heartbeats: proportional to wall).

    HF_HUB_OFFLINE=1 nice .venv/bin/python bench/workers_cpu.py [--peps 60] [--shards 8] [--repeat 3] [--model]
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
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
REINDEX = PY.with_name("reindex")
SNAPSHOT = REPO.parent / "shared" / "corpus" / "snapshot_new.parquet"
CONFIG = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: 250}}}}
vector: {vector}
apply: {{shards: {shards}}}
embed: {{device: cpu}}
"""


def env(src: Path = REPO / "src") -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PREFECT_API_URL", "REINDEX_")) and k != "PYTHONDONTWRITEBYTECODE"}
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
             PREFECT_SERVER_ANALYTICS_ENABLED="false",
             PYTHONPATH=os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return e


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


TREE: dict[str, float] = {}  # the last run's CPU-seconds by process role (sampled)


def _sample(root: int, seen: dict[int, tuple[str, float]], stop: threading.Event) -> None:
    """Every 50 ms, the CPU-seconds (user + system, its own) of ``root`` and each of its descendants, by pid: what a
    process used up to its last sample (a forkserver's workers are not waited for, so RUSAGE_CHILDREN misses them)."""
    import psutil

    try:
        top = psutil.Process(root)
    except psutil.Error:
        return
    while not stop.is_set():
        try:
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return
        for p in procs:
            try:
                t = p.cpu_times()
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            server = "forkserver import main" in cmd and p.ppid() == root  # its forks share its command line
            role = ("coordinator" if p.pid == root else "forkserver" if server
                    else "resource tracker" if "resource_tracker" in cmd else "worker")
            if os.environ.get("BENCH_TREE"):
                print(p.pid, p.ppid(), role, round(t.user + t.system, 2), cmd[:150], file=sys.stderr)
            seen[p.pid] = (role, t.user + t.system)
        stop.wait(0.05)


def run(cmd: list[str], cwd: Path, ok=(0,), src: Path = REPO / "src") -> tuple[str, float, float]:
    c, t = cpu_children(), time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env(src), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, tuple[str, float]] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(p.pid, seen, stop), daemon=True)
    sampler.start()
    out, err = p.communicate()
    stop.set()
    sampler.join()
    if p.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}\n{out[-2000:]}\n{err[-3000:]}")
    TREE.clear()
    for role, v in seen.values():
        TREE[role] = TREE.get(role, 0.0) + v
    waited = cpu_children() - c
    # Waited-for processes are exact in RUSAGE_CHILDREN; a forkserver's are only sampled: take the larger total.
    return out, max(waited, sum(TREE.values())), time.perf_counter() - t


def setup(ws: Path, peps: int, shards: int, model: bool) -> Path:
    sys.path.insert(0, str(REPO / "src"))
    from reindex.foundation.tables import parquet_from_columns, read_parquet

    ws.mkdir(parents=True)
    cols = read_parquet(SNAPSHOT)
    pairs = sorted(zip(cols["doc_id"], cols["text"]))[:peps]
    (ws / "corpus.parquet").write_bytes(parquet_from_columns(
        {"doc_id": [d for d, _ in pairs], "text": [t for _, t in pairs]}, {"doc_id": "string", "text": "string"}))
    vector = "{provider: sentence-transformers}" if model else "{provider: hash}"
    (ws / "reindex.yaml").write_text(CONFIG.format(vector=vector, shards=shards), encoding="utf-8")
    out, _, _ = run([str(REINDEX), "plan", "-c", "reindex.yaml", "--json"], ws, ok=(0, 2))
    plan = json.loads(out)
    if plan["approval_required"]:
        run([str(REINDEX), "approve", plan["plan_file"], "--by", "bench"], ws)
    return Path(plan["plan_file"])


CLUSTER = r"""
import json, sys, time
from distributed import Client, LocalCluster
n, imports, model = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
def shard_imports(model):
    import reindex.engine.workers  # what a shard needs
    if model:
        from reindex.domain.config import EmbedConfig, VectorHalf
        from reindex.adapters.embedders import make_embedder
        make_embedder(VectorHalf(), options=EmbedConfig(device="cpu")).embed(["warm up"])
    return True
if __name__ == "__main__":
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        if imports:
            workers = list(client.scheduler_info()["workers"])
            client.gather([client.submit(shard_imports, model, workers=[w], pure=False) for w in workers])
"""


def stage_commit(ws: Path, points: int) -> float:
    """CPU-seconds of encoding and decoding ``points`` staged points of this build's shape (384 d, chunk
    payloads of ~1 KB of text), in this process."""
    sys.path.insert(0, str(REPO / "src"))
    import numpy as np

    from reindex.adapters.stores.vectors import Point
    from reindex.engine import workers

    rng = np.random.default_rng(0)
    text = ("lorem ipsum dolor sit amet " * 40)[:1000]
    pts = [Point(f"{i:032x}", rng.standard_normal(384).astype(np.float32),
                 {"doc_id": f"pep-{i // 20:04d}.rst", "ordinal": i % 20, "fingerprint": f"{i:064x}",
                  "page_content": text, "metadata": {"doc_id": f"pep-{i // 20:04d}.rst"}}) for i in range(points)]
    c = time.process_time()
    for i in range(0, points, 64):  # one staged object per embedding batch
        workers._decode_points(workers._encode_points(pts[i:i + 64]))  # noqa: SLF001 - bench only
    return time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peps", type=int, default=60)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", action="store_true", help="the packaged MiniLM instead of the hash embedder")
    ap.add_argument("--work", type=Path, default=REPO / "build" / "bench_workers_cpu")
    ap.add_argument("--base", type=Path, default=None,
                    help="another checkout's src/ (e.g. a worktree of main): its dask-processes run beside ours (before)")
    ap.add_argument("--variants", default="threads,dask,cluster,cluster+imports",
                    help="which of threads, dask, dask@base, threads@base, cluster, cluster+imports to run")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    plan = setup(args.work / "base", args.peps, args.shards, args.model)
    spec = f"dask-processes:{args.workers}"
    (args.work / "cluster.py").write_text(CLUSTER, encoding="utf-8")
    apply = [str(REINDEX), "apply", str(plan), "-c", "reindex.yaml", "--no-progress", "--json", "--no-prefect"]
    base = (args.base or REPO / "src").resolve()
    every = {
        "threads": lambda ws: run(apply, ws),
        "dask": lambda ws: run([*apply, "--task-runner", spec], ws),
        "threads@base": lambda ws: run(apply, ws, src=base),
        "dask@base": lambda ws: run([*apply, "--task-runner", spec], ws, src=base),
        "cluster": lambda ws: run([str(PY), str(args.work / "cluster.py"), str(args.workers), "0", "0"], ws),
        "cluster+imports": lambda ws: run([str(PY), str(args.work / "cluster.py"), str(args.workers), "1",
                                           "1" if args.model else "0"], ws),
    }
    variants = {k: every[k] for k in args.variants.split(",")}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    wall: dict[str, list[float]] = {k: [] for k in variants}
    points = 0
    names = list(variants)
    for i in range(args.repeat):
        for name in names[i % len(names):] + names[: i % len(names)]:
            ws = args.work / f"trial-{i}-{name.replace(' ', '_').replace(':', '_')}"
            shutil.copytree(args.work / "base", ws)
            out, c, w = variants[name](ws)
            if name.startswith(("threads", "dask")):
                rep = json.loads(out)
                assert rep["status"] == "done", rep
                points = rep["actual"]["points_in_collection"]
                # CPU inside the shards' embedding calls (their threads', as the shards measured them)
                TREE["(embedding calls)"] = sum(s.get("embed_cpu_seconds", 0.0) for s in rep.get("shards", []))
            cpu[name].append(c)
            wall[name].append(w)
            roles = ", ".join(f"{k} {v:.2f}" for k, v in sorted(TREE.items()))
            print(f"round {i + 1} {name:26s} {c:7.2f} CPU-s {w:6.1f} s wall (load {os.getloadavg()[0]:.1f}); "
                  f"sampled: {roles}", flush=True)
            shutil.rmtree(ws)
    serial = stage_commit(args.work / "base", points)
    med = {k: (statistics.median(cpu[k]), statistics.median(wall[k])) for k in variants}
    t = med["threads"][0] if "threads" in med else next(iter(med.values()))[0]
    print(f"\n{args.peps} PEPs, {points} points, {args.shards} shards, {'MiniLM' if args.model else 'hash'} embedder; "
          f"median of {args.repeat}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'':28s} {'CPU-s':>8s} {'wall s':>8s} {'÷ threads CPU':>14s}  ({spec} = dask)")
    for k, (c, w) in med.items():
        print(f"{k:28s} {c:8.2f} {w:8.2f} {c / t:14.2f}")
    print(f"{'stage + commit (encode+decode)':28s} {serial:8.2f} {'':8s} {serial / t:14.2f}")
    if "dask" in med and "cluster+imports" in med:
        rest = med["dask"][0] - t - med["cluster+imports"][0] - serial
        print(f"{'left (scheduling, polling…)':28s} {rest:8.2f} {'':8s} {rest / t:14.2f}")


if __name__ == "__main__":
    main()
