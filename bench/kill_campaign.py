"""Kill -9 campaign: SIGKILL reindex at random points of plan, apply (a new population), an in-place
sync, cutover, rollback and gc, on folder and on S3 state (a loopback moto server), then run the next
commands and check what readers would see.

Every trial starts from a prepared workspace (24 bundled PEPs, the hash embedder, 4 shards, embedding
batches of 8, 2 shard workers), kills one real `reindex` process (at a named crash point, or after a
random delay), then runs the same command again (or the natural next one) and `reindex plan`. It passes when

* every command after the kill succeeds;
* the alias points at a population that verifies (state record complete, point count equal to its chunk
  manifest, sampled vectors present with the right fingerprints);
* for apply and sync trials, the population equals the uninterrupted reference (same point ids, vectors
  and payloads) and the texts embedded across the killed and the resumed run exceed the reference by at
  most one embedding batch per worker.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/kill_campaign.py --trials 24 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
REINDEX = Path(sys.executable).with_name("reindex")
SAMPLE = REPO / "src" / "reindex" / "sample"
BATCH, WORKERS = 8, 2

CONFIG = """\
index: docs
source: {root}/corpus
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash}}
apply: {{shards: 4, embed_batch_size: {batch}}}
store: {{path: {root}/qdrant}}
state: {state}
cutover: {{min_recall_delta: -1.0, min_overlap: 0.0, retention_days: 0}}
"""

# step → crash points it can reach (plus "timer": a SIGKILL after a random delay)
POINTS = {
    "plan": ["timer"],
    "apply": ["before-upsert:3", "after-batch-upsert:5", "after-upsert:2", "before-manifest:2", "catch-up", "timer"],
    "sync": ["before-upsert:1", "after-upsert:1", "before-manifest:1", "timer"],
    "cutover": ["cutover-before-swap", "cutover-after-swap", "timer"],
    "rollback": ["rollback-before-swap", "rollback-after-swap", "timer"],
    "gc": ["gc-marked", "gc-collection-deleted", "timer"],
}


class Env:
    def __init__(self, s3_endpoint: str | None) -> None:
        self.s3 = s3_endpoint
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("REINDEX_", "PREFECT_API_URL"))}
        self.env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
                        PREFECT_SERVER_ANALYTICS_ENABLED="false", REINDEX_SHARD_WORKERS=str(WORKERS))
        if s3_endpoint:
            self.env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                            AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def state(self, root: Path, name: str) -> str:
        if not self.s3:
            return f"{{uri: {root}/state}}"
        return f"{{uri: 's3://campaign/{name}', endpoint_url: '{self.s3}'}}"


def run(root: Path, env: Env, *args: str, crash: str | None = None, log: Path | None = None,
        ok: tuple[int, ...] = (0, 2)) -> subprocess.CompletedProcess:
    e = dict(env.env)
    if log:
        e["REINDEX_EMBED_LOG"] = str(log)
    timer = None
    if crash and crash != "timer":
        e["REINDEX_CRASH_AT"] = crash
    elif crash == "timer":
        timer = random.uniform(0.5, 6.0)
    cmd = [str(REINDEX), *args, "-c", str(root / "reindex.yaml")]
    p = subprocess.Popen(cmd, cwd=root, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timer) if timer else p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate()
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if crash is None and r.returncode not in ok:
        raise RuntimeError(f"{' '.join(args)} exited {r.returncode}: {err.strip()[-400:]}")
    return r


def plan_file(r: subprocess.CompletedProcess) -> str:
    return json.loads(r.stdout)["plan_file"]


def write_config(root: Path, env: Env, size: int, name: str) -> None:
    (root / "reindex.yaml").write_text(CONFIG.format(root=root, size=size, batch=BATCH, state=env.state(root, name)))


def prepare(root: Path, env: Env, name: str) -> dict:
    """The live population A of the bundled corpus."""
    shutil.copytree(SAMPLE / "corpus", root / "corpus")
    write_config(root, env, 150, name)
    p0 = plan_file(run(root, env, "plan", "--json"))
    run(root, env, "apply", p0, "--no-progress")
    run(root, env, "cutover", p0)
    return {}


def snapshot(root: Path, collection: str) -> dict:
    from reindex import api

    cfg = api.load_resolved(root / "reindex.yaml")
    store = api.vector_store_for(cfg)
    try:
        return {p.id: (np.asarray(p.vector, dtype=np.float32).round(5).tobytes(), json.dumps(p.payload, sort_keys=True))
                for p in store.scroll(collection, with_vectors=True)}
    finally:
        store.close()


def verified_alias(root: Path) -> tuple[str | None, list[str]]:
    from reindex import api
    from reindex import cutover as co

    cfg = api.load_resolved(root / "reindex.yaml")
    store, state = api.vector_store_for(cfg), api.state_store(cfg)
    try:
        alias = store.get_alias("docs")
        return alias, co.verify_population(store, state, "docs", alias) if alias else ["no alias"]
    finally:
        store.close()


def read_log(path: Path) -> Counter:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _s3(env: Env):
    import boto3

    return boto3.client("s3", endpoint_url=env.s3, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _copy_prefix(env: Env, src: str, dst: str) -> None:
    s3 = _s3(env)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="campaign", Prefix=f"{dst}/"):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket="campaign", Key=o["Key"])
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="campaign", Prefix=f"{src}/"):
        for o in page.get("Contents", []):
            s3.copy_object(Bucket="campaign", Key=dst + o["Key"][len(src):], CopySource={"Bucket": "campaign", "Key": o["Key"]})


# Every workspace lives at one path (paths are part of a config's digest, so a copied workspace must
# sit where it was made): stages are prepared there and saved aside; a trial restores one.
def save(trial: Path, saved: Path, env: Env, name: str) -> None:
    shutil.copytree(trial, saved / name)
    if env.s3:
        _copy_prefix(env, "trial", f"saved-{name}")


def restore(trial: Path, saved: Path, env: Env, name: str) -> None:
    shutil.rmtree(trial, ignore_errors=True)
    shutil.copytree(saved / name, trial)
    if env.s3:
        _copy_prefix(env, f"saved-{name}", "trial")


def stages(trial: Path, saved: Path, env: Env) -> dict:
    """Prepared stages, one per step, and the uninterrupted references (snapshot, embed log) for apply and sync."""
    shutil.rmtree(trial, ignore_errors=True)
    prepare(trial, env, "trial")
    save(trial, saved, env, "live")
    write_config(trial, env, 120, "trial")  # apply: a chunker change planned and approved
    p = plan_file(run(trial, env, "plan", "--json"))
    run(trial, env, "approve", p, "--by", "campaign")
    (trial / "plan.txt").write_text(p)
    save(trial, saved, env, "apply")
    run(trial, env, "apply", p, "--no-progress")  # cutover: B built
    save(trial, saved, env, "cutover")
    run(trial, env, "cutover", p)  # rollback and gc: B live, A retired
    save(trial, saved, env, "rollback")
    restore(trial, saved, env, "live")  # sync: two documents edited upstream
    for f in (SAMPLE / "edits").iterdir():
        shutil.copy(f, trial / "corpus" / f.name)
    (trial / "plan.txt").write_text(plan_file(run(trial, env, "plan", "--json")))
    save(trial, saved, env, "sync")
    refs = {}
    for step in ("apply", "sync"):
        restore(trial, saved, env, step)
        log = saved / f"{step}-ref.log"
        r = run(trial, env, "apply", (trial / "plan.txt").read_text(), "--no-progress", "--json", log=log)
        coll = json.loads(r.stdout)["collection"]
        refs[step] = {"collection": coll, "snapshot": snapshot(trial, coll), "log": read_log(log)}
    return {"stage": {"plan": "sync", "apply": "apply", "sync": "sync", "cutover": "cutover", "rollback": "rollback",
                      "gc": "rollback"}, "refs": refs}


def trial(n: int, step: str, point: str, root: Path, saved: Path, prep: dict, env: Env) -> dict:
    restore(root, saved, env, prep["stage"][step])
    plan = (root / "plan.txt").read_text() if (root / "plan.txt").exists() else None
    killed_log, resumed_log = saved / f"t{n}-killed.log", saved / f"t{n}-resumed.log"
    t0 = time.perf_counter()
    args = {"plan": ("plan", "--json"), "apply": ("apply", plan, "--no-progress"), "sync": ("apply", plan, "--no-progress"),
            "cutover": ("cutover", plan), "rollback": ("rollback",), "gc": ("gc", "--yes", "--force")}[step]
    k = run(root, env, *args, crash=point, log=killed_log)
    killed = k.returncode == -signal.SIGKILL
    problems: list[str] = []
    if not killed and k.returncode not in (0, 2):
        problems.append(f"the command under test failed without a kill: {k.stderr.strip()[-300:]}")
    again = {"plan": ("plan", "--json"), "apply": ("apply", plan, "--no-progress", "--json"),
             "sync": ("apply", plan, "--no-progress", "--json"), "cutover": ("cutover", plan),
             "rollback": ("status", "--json"), "gc": ("gc", "--yes", "--force")}[step]
    try:
        r = run(root, env, *again, log=resumed_log)
        if step in ("apply", "sync"):
            rep = json.loads(r.stdout)
            if rep["status"] not in ("done", "already-applied"):
                problems.append(f"resumed apply {rep['status']}")
        run(root, env, "plan", "--json")
        run(root, env, "status", "--json")
    except RuntimeError as err:
        problems.append(str(err))
    alias, verify = verified_alias(root)
    problems += verify
    extra = None
    if step in ("apply", "sync") and not problems:
        ref = prep["refs"][step]
        if snapshot(root, ref["collection"]) != ref["snapshot"]:
            problems.append("population differs from the uninterrupted reference")
        both = read_log(killed_log) + read_log(resumed_log)
        if ref["log"] - both:
            problems.append(f"{sum((ref['log'] - both).values())} texts never embedded")
        extra = sum((both - ref["log"]).values())
        if extra > BATCH * WORKERS:
            problems.append(f"{extra} texts embedded twice (> {BATCH} × {WORKERS})")
    return {"trial": n, "state": "s3" if env.s3 else "folder", "step": step, "kill": point, "killed": killed,
            "alias": alias, "extra_embedded": extra, "ok": not problems, "problems": problems,
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=24, help="trials in all, half on folder state, half on S3")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    random.seed(args.seed)
    # the checks run in this process too (verify, snapshots): the same loopback credentials as the commands
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    from moto.server import ThreadedMotoServer
    import boto3

    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server._server.server_port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="campaign")
    results = []
    with tempfile.TemporaryDirectory(prefix="reindex-kill-") as tmp:
        for env, tag in ((Env(None), "folder"), (Env(endpoint), "s3")):
            work = Path(tmp) / tag
            root, saved = work / "trial", work / "saved"
            saved.mkdir(parents=True)
            t = time.perf_counter()
            prep = stages(root, saved, env)
            print(f"[{tag}] prepared in {time.perf_counter() - t:.0f} s", flush=True)
            for n in range(args.trials // 2):
                step = random.choice(list(POINTS))
                point = random.choice(POINTS[step])
                res = trial(n, step, point, root, saved, prep, env)
                results.append(res)
                print(json.dumps(res), flush=True)
    server.stop()
    ok = sum(r["ok"] for r in results)
    killed = sum(r["killed"] for r in results)
    extra = [r["extra_embedded"] for r in results if r["extra_embedded"] is not None]
    print(f"\n{ok} of {len(results)} trials ended on a verified population with every next command succeeding; "
          f"{killed} processes were SIGKILLed (the rest finished before the kill); texts embedded twice per "
          f"apply/sync trial: max {max(extra) if extra else 0} (bound {BATCH * WORKERS}), total {sum(extra)}")
    print("| state | step | kill at | killed | ok | extra embedded | seconds |")
    print("|---|---|---|---|---|---:|---:|")
    for r in results:
        print(f"| {r['state']} | {r['step']} | {r['kill']} | {r['killed']} | {r['ok']} | "
              f"{'' if r['extra_embedded'] is None else r['extra_embedded']} | {r['seconds']} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))
    sys.exit(0 if ok == len(results) else 1)


if __name__ == "__main__":
    main()
