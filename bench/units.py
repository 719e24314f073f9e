"""Work units of a remote runner: the runner's overhead per unit against the unit's own work, with shards dealt one
per unit (``apply.unit_seconds: 0``, the old behaviour) and sized by planned work (the default, 10 s), on 1 and 2
Dask worker processes, in one run.

A chunker change (recursive 250 → 200 tokens) of the first ``--peps`` PEPs of ``snapshot_new.parquet`` (or the
bundled sample without the shared corpus), the live population built with the same embedder, ``--shards`` shards.
The embedder is ``hash`` (free: the runner's own cost becomes visible) or, with ``--model``, the packaged MiniLM (one
torch thread per worker process, as the Dask runner starts them). Every variant applies the same approved plan from
a fresh copy of the workspace, ``--repeat`` times (medians), on a Dask LocalCluster of N worker processes (one
thread each) started and warmed in this process before the timed applies, which reach it as ``dask:tcp://…`` (so
that a cluster's start-up, seconds on a loaded box, is not counted as the units' overhead), and warmed by one
untimed apply of the same change (each worker process makes its embedder once: with MiniLM a model load of seconds
that would otherwise fall on the first variant). The two unit sizes alternate repetition by repetition.

Per variant: the shards phase's wall (``phases["shards+catch-up"]`` of the apply report), the seconds the shards
spent inside ``run_shard`` (the report's per-shard ``seconds``) and the units the runner made (``deal_units`` of
the planned seconds per shard, as the runner calls it). A unit's overhead is the marginal cost of one more unit on
one worker: (phase wall with one shard per unit − phase wall with work-sized units) ÷ (the difference in units);
against the work of a unit (Σ shard seconds ÷ units).

    HF_HUB_OFFLINE=1 PYTHONPATH=src .venv/bin/python bench/units.py [--peps 60] [--shards 16] [--model]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import reindex  # noqa: E402
from reindex import api  # noqa: E402
from reindex.runners import deal_units  # noqa: E402
from reindex.usecases.apply import job_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "snapshot_new.parquet"
SAMPLE = Path(reindex.__file__).resolve().parent / "sample" / "corpus"
CONFIG = """\
index: units
source: {source}
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {vector}
apply: {{shards: {shards}, unit_seconds: {unit}}}
approval: {{max_tokens: null, max_usd: null}}
cutover: {{min_recall_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}}
"""


def corpus(work: Path, peps: int) -> str:
    if CORPUS.exists():
        t = pq.read_table(CORPUS, columns=["doc_id", "text"]).to_pydict()
        rows = sorted(zip(t["doc_id"], t["text"]))[:peps]
        pq.write_table(pa.table({"id": [d for d, _ in rows], "text": [x for _, x in rows]}), work / "corpus.parquet")
        return "./corpus.parquet"
    shutil.copytree(SAMPLE, work / "corpus")
    return "./corpus"


def write(work: Path, source: str, size: int, vector: str, shards: int, unit: float) -> Path:
    cfg = work / "reindex.yaml"
    cfg.write_text(CONFIG.format(source=source, size=size, vector=vector, shards=shards, unit=unit), encoding="utf-8")
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peps", type=int, default=60)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--model", action="store_true", help="the packaged MiniLM instead of the hash embedder")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    vector = "{model: all-MiniLM-L6-v2}" if args.model else "{provider: hash}"
    tmp = Path(tempfile.mkdtemp(prefix="reindex-units-"))
    base = tmp / "base"
    base.mkdir()

    source = corpus(base, args.peps)
    cfg = write(base, source, 250, vector, args.shards, 0.0)
    plan, path = api.make_plan(cfg, out=base / "plans")
    api.approve_plan(path, by="bench")
    assert api.apply_plan(path, cfg, prefect=False).status == "done"
    api.cutover(path, cfg)
    import statistics

    from dask.distributed import Client, LocalCluster

    rows = []
    for workers in (1, 2):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            client.run(lambda: None)  # every worker up
            # Warm every worker before anything is timed: an untimed apply of the same change (its embedder is made
            # once per worker process, a model load of seconds) so that the first variant does not carry it.
            warm = tmp / f"w{workers}-warm"
            shutil.copytree(base, warm, symlinks=True)
            cfg = write(warm, source, 200, vector, args.shards, 0.0)
            plan, path = api.make_plan(cfg, out=warm / "plans")
            api.approve_plan(path, by="bench")
            api.apply_plan(path, cfg, prefect=False, task_runner=f"dask:{cluster.scheduler_address}")
            shutil.rmtree(warm, ignore_errors=True)
            runs_of: dict[float, list] = {0.0: [], 10.0: []}
            for rep_n in range(args.repeat):  # the two variants alternate, so the box's drift hits both alike
                for unit in (0.0, 10.0):
                    runs = runs_of[unit]
                    work = tmp / f"w{workers}-u{unit:g}-{rep_n}"
                    shutil.copytree(base, work, symlinks=True)

                    cfg = write(work, source, 200, vector, args.shards, unit)
                    plan, path = api.make_plan(cfg, out=work / "plans")
                    api.approve_plan(path, by="bench")
                    rep = api.apply_plan(path, cfg, prefect=False, task_runner=f"dask:{cluster.scheduler_address}").report
                    job = job_of(plan, api.load_resolved(cfg))  # what the runner deals: planned seconds per shard
                    units = len(deal_units(list(job.shards), job.planned_seconds(), job.unit_seconds))
                    runs.append({"units": units, "phase": rep["phases"]["shards+catch-up"],
                                 "shard_s": sum(s["seconds"] for s in rep["shards"] if not s.get("skipped")),
                                 "procs": len({s["worker"] for s in rep["shards"]}), "embedded": rep["actual"]["embedded"]})
                    shutil.rmtree(work, ignore_errors=True)
            for unit in (0.0, 10.0):
                runs = runs_of[unit]
                med = lambda k: statistics.median(r[k] for r in runs)  # noqa: E731
                rows.append({"workers": workers, "unit_seconds": unit, "units": runs[0]["units"],
                             "phase_wall_s": round(med("phase"), 3), "shard_seconds": round(med("shard_s"), 3),
                             "worker_processes": max(r["procs"] for r in runs), "embedded": runs[0]["embedded"]})
                print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()[0]
    by = {(r["workers"], r["unit_seconds"]): r for r in rows}
    one, sized = by[(1, 0.0)], by[(1, 10.0)]
    per_unit = (one["phase_wall_s"] - sized["phase_wall_s"]) / max(1, one["units"] - sized["units"])
    print(f"\n{args.peps} PEPs, {args.shards} shards, {'MiniLM' if args.model else 'hash'} embedder, medians of "
          f"{args.repeat}, load {load:.1f} on {os.cpu_count()} CPUs")
    print("| workers | unit_seconds | units | shards phase wall s | Σ shard s | work per unit s | worker processes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workers']} | {r['unit_seconds']:g} | {r['units']} | {r['phase_wall_s']} | {r['shard_seconds']} | "
              f"{r['shard_seconds'] / r['units']:.3f} | {r['worker_processes']} |")
    print(f"overhead of one more unit (1 worker): {per_unit:.3f} s; ÷ a one-shard unit's work "
          f"{per_unit / (one['shard_seconds'] / one['units']):.2f}; ÷ a work-sized unit's work "
          f"{per_unit / (sized['shard_seconds'] / sized['units']):.3f}")
    outside = ((one["phase_wall_s"] - one["shard_seconds"]) - (sized["phase_wall_s"] - sized["shard_seconds"])) \
        / max(1, one["units"] - sized["units"])
    print(f"of which outside the shards (phase wall − Σ shard s, per unit more): {outside:.3f} s")
    for unit in (0.0, 10.0):
        print(f"unit_seconds {unit:g}: 2 workers ÷ 1 worker, shards phase wall: "
              f"{by[(2, unit)]['phase_wall_s'] / by[(1, unit)]['phase_wall_s']:.2f}")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
