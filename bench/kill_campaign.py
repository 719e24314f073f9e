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

With ``--every-point`` it runs, on both state backends, one trial per crash point (every
``crashpoint(...)`` in ``src/``) of every step that can reach it, plus the random timer: apply of a new
population (shadow), an in-place document-scoped sync (8 edited documents over several shards), a
payload-only apply, a sticky in-place sync (the only one that reaches ``before-chunk-texts``), cutover
(of a current shadow, and of a stale one that must be caught up first: the corpus changed and the live
population was synced in place after the shadow was built), rollback and gc. Kills numbered ``:2`` and
higher come after earlier shards wrote their manifests. In-place, payload and stale-cutover trials also
require the next ``reindex plan`` to be ``none``.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/kill_campaign.py --trials 24 --seed 1
    HF_HUB_OFFLINE=1 .venv/bin/python bench/kill_campaign.py --every-point
    HF_HUB_OFFLINE=1 .venv/bin/python bench/kill_campaign.py --trials 120 --random-moments --seed 33
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
source: {source}
text: {{chunker: {{kind: recursive, size: {size}}}{rechunk}}}
vector: {{provider: hash{vector}}}
apply: {{shards: 4, embed_batch_size: {batch}}}
store: {{path: {root}/qdrant}}
state: {state}
cutover: {{min_recall_delta: -1.0, min_overlap: 0.0, retention_days: 0}}
"""

# step → crash points it can reach (plus "timer": a SIGKILL after a random delay). Every crashpoint(...) of
# src/ is here: before-upsert, after-batch-upsert, after-upsert, before-payload, after-payload,
# before-chunk-texts, before-unit-batch, before-unit-part, before-manifest, catch-up, {cutover,rollback}-{before,after}-swap, gc-marked,
# gc-collection-deleted.
POINTS = {
    "plan": ["timer"],
    "apply": ["before-upsert:3", "after-batch-upsert:5", "after-upsert:2", "before-manifest:1", "before-manifest:2",
              "catch-up", "timer"],
    "sync": ["before-upsert:1", "before-upsert:2", "after-batch-upsert:1", "after-upsert:1", "after-upsert:2",
             "before-manifest:1", "before-manifest:2", "catch-up", "timer"],
    "payload": ["before-payload:1", "after-payload:1", "after-payload:3", "before-manifest:2", "catch-up", "timer"],
    "sticky": ["before-upsert:1", "after-upsert:1", "before-chunk-texts:1", "before-chunk-texts:2",
               "before-manifest:2", "timer"],
    # vector.compose: units — the same eight edits synced in place, each chunk to embed composed from its units.
    "compose": ["before-unit-batch:1", "before-unit-batch:2", "after-upsert:1", "before-unit-part:1",
                "before-unit-part:2", "before-manifest:2", "timer"],
    "cutover": ["cutover-before-swap", "cutover-after-swap", "timer"],
    "stale-cutover": ["catch-up", "before-upsert:1", "after-upsert:1", "before-manifest:1", "cutover-before-swap",
                      "cutover-after-swap", "timer"],
    "rollback": ["rollback-before-swap", "rollback-after-swap", "timer"],
    "gc": ["gc-marked", "gc-collection-deleted", "timer"],
    # The live mode: `reindex sync --watch` with the eight edits waiting, killed inside its apply or at a random
    # moment (often idle, between looks); then one `reindex sync` carries out whatever is left.
    "watch": ["before-upsert:1", "after-upsert:1", "before-manifest:1", "timer"],
    # A serving-mode switch: `reindex serving --evaluate` while a vector-half change's shadow is built (the hash
    # embedder's modes are refused: what is killed is the evaluation and the write of the serving record).
    "serving": ["timer"],
}
APPLY_STEPS = ("apply", "sync", "payload", "sticky", "compose", "watch")  # compared with an uninterrupted reference
REFERENCE = {"watch": "sync"}  # the live mode applies the same edits in place as the sync step
NEXT_PLAN_NONE = ("sync", "payload", "sticky", "compose", "cutover", "stale-cutover", "gc", "watch")  # next plan is `none`


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
    elif "--watch" in args:
        timer = 60.0  # a watch never ends by itself: killed at its crash point, or here if it never reaches it
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


def write_config(root: Path, env: Env, size: int, name: str, *, title: bool = False, sticky: bool = False,
                 dimension: int | None = None, compose: bool = False) -> None:
    source = f"{{uri: {root}/corpus, metadata_fields: [title]}}" if title else f"{root}/corpus"
    vector = (f", dimension: {dimension}" if dimension else "") + (", compose: units" if compose else "")
    (root / "reindex.yaml").write_text(CONFIG.format(root=root, size=size, batch=BATCH, state=env.state(root, name),
                                                     source=source, rechunk=", rechunk: sticky" if sticky else "",
                                                     vector=vector))


def edit_corpus(root: Path) -> None:
    """The sample's two real edits, and six more documents edited upstream (8 over several shards)."""
    for f in (SAMPLE / "edits").iterdir():
        shutil.copy(f, root / "corpus" / f.name)
    names = {f.name for f in (SAMPLE / "edits").iterdir()}
    for f in [f for f in sorted((root / "corpus").iterdir()) if f.name not in names][:6]:
        f.write_bytes(f.read_bytes() + b"\n\nA paragraph added upstream after the build.\n")


def approved(root: Path, env: Env, plan: str) -> str:
    """Approve ``plan`` (a no-op for one that needs none); remembered as sync-plan.txt."""
    run(root, env, "approve", plan, "--by", "campaign")
    (root / "sync-plan.txt").write_text(plan)
    return plan


def prepare(root: Path, env: Env, name: str, *, sticky: bool = False, compose: bool = False) -> dict:
    """The live population A of the bundled corpus."""
    shutil.copytree(SAMPLE / "corpus", root / "corpus")
    write_config(root, env, 150, name, sticky=sticky, compose=compose)
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
    from reindex.decisions import cutover as co

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
    restore(trial, saved, env, "cutover")  # stale-cutover: B built; then the corpus changes and A is synced in place
    edit_corpus(trial)
    write_config(trial, env, 150, "trial")
    approved(trial, env, plan_file(run(trial, env, "plan", "--json")))
    run(trial, env, "apply", (trial / "sync-plan.txt").read_text(), "--no-progress")
    write_config(trial, env, 120, "trial")  # back to B's config; plan.txt is still B's plan
    save(trial, saved, env, "stale-cutover")
    restore(trial, saved, env, "live")  # serving: a vector-half change (another dimension) built, not cut over
    write_config(trial, env, 150, "trial", dimension=64)
    p = plan_file(run(trial, env, "plan", "--json"))
    run(trial, env, "approve", p, "--by", "campaign")
    run(trial, env, "apply", p, "--no-progress")
    save(trial, saved, env, "serving")
    restore(trial, saved, env, "live")  # sync: eight documents edited upstream
    edit_corpus(trial)
    (trial / "plan.txt").write_text(approved(trial, env, plan_file(run(trial, env, "plan", "--json"))))
    save(trial, saved, env, "sync")
    restore(trial, saved, env, "live")  # payload: a metadata field added (payload-only, in place)
    write_config(trial, env, 150, "trial", title=True)
    (trial / "plan.txt").write_text(approved(trial, env, plan_file(run(trial, env, "plan", "--json"))))
    save(trial, saved, env, "payload")
    shutil.rmtree(trial, ignore_errors=True)  # sticky: its own live population, then the same edits
    if env.s3:
        _copy_prefix(env, "empty", "trial")
    prepare(trial, env, "trial", sticky=True)
    edit_corpus(trial)
    (trial / "plan.txt").write_text(approved(trial, env, plan_file(run(trial, env, "plan", "--json"))))
    save(trial, saved, env, "sticky")
    shutil.rmtree(trial, ignore_errors=True)  # compose: its own live population (compose: units), the same edits
    if env.s3:
        _copy_prefix(env, "empty", "trial")
    prepare(trial, env, "trial", compose=True)
    edit_corpus(trial)
    (trial / "plan.txt").write_text(approved(trial, env, plan_file(run(trial, env, "plan", "--json"))))
    save(trial, saved, env, "compose")
    refs = {}
    for step in (s for s in APPLY_STEPS if s not in REFERENCE):
        restore(trial, saved, env, step)
        log = saved / f"{step}-ref.log"
        r = run(trial, env, "apply", (trial / "plan.txt").read_text(), "--no-progress", "--json", log=log)
        coll = json.loads(r.stdout)["collection"]
        refs[step] = {"collection": coll, "snapshot": snapshot(trial, coll), "log": read_log(log)}
    return {"stage": {"plan": "sync", "apply": "apply", "sync": "sync", "payload": "payload", "sticky": "sticky",
                      "compose": "compose",
                      "cutover": "cutover", "stale-cutover": "stale-cutover", "rollback": "rollback",
                      "gc": "rollback", "watch": "sync", "serving": "serving"}, "refs": refs}


def trial(n: int, step: str, point: str, root: Path, saved: Path, prep: dict, env: Env) -> dict:
    restore(root, saved, env, prep["stage"][step])
    plan = (root / "plan.txt").read_text() if (root / "plan.txt").exists() else None
    killed_log, resumed_log = saved / f"t{n}-killed.log", saved / f"t{n}-resumed.log"
    t0 = time.perf_counter()
    applying = ("apply", plan, "--no-progress")
    args = {"plan": ("plan", "--json"), "apply": applying, "sync": applying, "payload": applying, "sticky": applying,
            "compose": applying, "cutover": ("cutover", plan), "stale-cutover": ("cutover", plan), "rollback": ("rollback",),
            "gc": ("gc", "--yes", "--force"), "watch": ("sync", "--watch", "--interval", "0.2"),
            "serving": ("serving", "--evaluate")}[step]
    k = run(root, env, *args, crash=point, log=killed_log)
    killed = k.returncode == -signal.SIGKILL
    problems: list[str] = []
    if not killed and k.returncode not in (0, 2):
        problems.append(f"the command under test failed without a kill: {k.stderr.strip()[-300:]}")
    reapply = ("apply", plan, "--no-progress", "--json")
    again = {"plan": ("plan", "--json"), "apply": reapply, "sync": reapply, "payload": reapply, "sticky": reapply,
             "compose": reapply, "cutover": ("cutover", plan), "stale-cutover": ("cutover", plan),
             "rollback": ("status", "--json"), "gc": ("gc", "--yes", "--force"), "watch": ("sync", "--json"),
             "serving": ("serving", "--evaluate", "--json")}[step]
    try:
        r = run(root, env, *again, log=resumed_log)
        if step == "serving":
            rep = json.loads(r.stdout)
            if rep.get("mode") not in ("old", "bridge", "cascade"):
                problems.append(f"the serving record after the killed evaluation: {rep.get('mode')!r}")
            hits = json.loads(run(root, env, "query", "the garbage collector", "--json").stdout)
            if not hits.get("results"):
                problems.append("a query after the killed evaluation found nothing")
        elif step == "watch":
            rep = json.loads(r.stdout)
            if rep["outcome"] not in ("applied-in-place", "nothing-to-do"):
                problems.append(f"the sync after the killed watch: {rep['outcome']}")
        elif step in APPLY_STEPS:
            rep = json.loads(r.stdout)
            if rep["status"] not in ("done", "already-applied"):
                problems.append(f"resumed apply {rep['status']}")
        nxt = json.loads(run(root, env, "plan", "--json").stdout)
        if step in NEXT_PLAN_NONE and nxt["kind"] != "none":
            problems.append(f"the next plan is {nxt['kind']}, not none")
        run(root, env, "status", "--json")
    except RuntimeError as err:
        problems.append(str(err))
    alias, verify = verified_alias(root)
    problems += verify
    extra = None
    if step in APPLY_STEPS and not problems:
        ref = prep["refs"][REFERENCE.get(step, step)]
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
    ap.add_argument("--every-point", action="store_true",
                    help="one trial per (step, crash point) on each backend instead of --trials random ones")
    ap.add_argument("--only", default=None, help="with --every-point: the steps to run, comma-separated")
    ap.add_argument("--backends", default="folder,s3", help="folder, s3 or both (comma-separated)")
    ap.add_argument("--points", default=None, help="with --every-point: only these crash points (comma-separated)")
    ap.add_argument("--random-moments", action="store_true",
                    help="with --trials: every kill after a random delay (no named crash points)")
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
            if tag not in args.backends.split(","):
                continue
            work = Path(tmp) / tag
            root, saved = work / "trial", work / "saved"
            saved.mkdir(parents=True)
            t = time.perf_counter()
            prep = stages(root, saved, env)
            print(f"[{tag}] prepared in {time.perf_counter() - t:.0f} s", flush=True)
            if args.every_point:
                steps = args.only.split(",") if args.only else list(POINTS)
                todo = [(step, point) for step in steps for point in POINTS[step]
                        if args.points is None or point in args.points.split(",")]
            else:
                todo = [(step, "timer" if args.random_moments else random.choice(POINTS[step])) for step in
                        (random.choice(list(POINTS)) for _ in range(args.trials // 2))]
            for n, (step, point) in enumerate(todo):
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
