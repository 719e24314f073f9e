"""Scale-out with real separate processes (loopback only): shards as plain data run by Dask worker
processes — a local cluster (`--task-runner dask-processes:2`) and a `dask scheduler` with two `dask worker`
processes (`--task-runner dask:tcp://…`) — on the embedded default store with folder state and no Prefect
API. Each run is compared with the in-process build of the same plan: same point ids, vectors, payloads,
chunk manifests and query answers. Also: a worker SIGKILLed mid-shard, a coordinator killed mid-commit,
a coordinator that loses its lock while workers run, a worker whose lease is gone, and the unapproved
token budget counted across processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from helpers_index import stop_group, Workspace, subprocess_env, wait_for_workers
from reindex import api
from reindex.engine import execution, workers
from reindex.errors import ApprovalError, ConfigError, LockLost
from reindex.books.locks import Fence, acquire_lock, lock_key, read_lock
from reindex.books.manifests import read_shard_manifest
from reindex.runners import ShardJob, failure_of, parse_task_runner, summarize
from reindex.adapters.stores.objects import open_object_store

SRC = Path(__file__).resolve().parents[1] / "src"
DASK = Path(sys.executable).with_name("dask")


def _env(prefect_api: str | None = None, **extra: str) -> dict[str, str]:
    """A child's environment: this tree's sources first (workers re-import reindex), offline, no Prefect API
    unless ``prefect_api`` names one."""
    env = subprocess_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("PREFECT_API_URL", None)
    if prefect_api:
        env["PREFECT_API_URL"] = prefect_api
    return env


def _fresh(root: Path, extra: str = "") -> tuple[Workspace, Path]:
    """A workspace with a live population and an approved chunker change (150 → 120), not applied."""
    ws = Workspace(root, extra=extra)
    ws.build_live()
    _, path = ws.planned_change(size=120, extra=extra)
    return ws, path


def _initial(root: Path) -> tuple[Workspace, Path]:
    """A workspace with the initial build planned (and approved if the policy asks), not applied."""
    ws = Workspace(root)
    plan, path = ws.plan()
    if plan.body["approval"]["required"]:
        ws.approve(path)
    return ws, path


def _answers(ws: Workspace, collection: str) -> list[list[str]]:
    """Top-5 point ids of a few fixed query vectors against ``collection``."""
    rng = np.random.default_rng(7)
    with ws.store() as s:
        return [[h.id for h in s.query(collection, rng.standard_normal(384).astype(np.float32), limit=5)]
                for _ in range(5)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The in-process builds of the plans the tests apply elsewhere: the chunker change, and under
    ``"initial"`` the initial build before it."""
    ws = Workspace(tmp_path_factory.mktemp("reference") / "ws")
    live = ws.build_live()
    initial = _facts(ws, live, {})
    _, path = ws.planned_change(size=120)
    r = ws.apply(path)
    assert r.status == "done", r.report
    return {**_facts(ws, r.collection, r.report), "initial": initial}


def _facts(ws: Workspace, collection: str, report: dict) -> dict[str, Any]:
    return {"snapshot": ws.snapshot(collection), "collection": collection, "report": report,
            "manifest": [(m.doc_id, m.ordinal, m.fingerprint, m.point_id) for m in ws.manifest_rows(collection)],
            "answers": _answers(ws, collection)}


def _same_as_reference(ws: Workspace, collection: str, reference: dict[str, Any]) -> None:
    assert collection == reference["collection"]
    ws.snapshot(collection).assert_same(reference["snapshot"])
    assert [(m.doc_id, m.ordinal, m.fingerprint, m.point_id) for m in ws.manifest_rows(collection)] == reference["manifest"]
    assert _answers(ws, collection) == reference["answers"]
    assert [k for k in ws.state().list("indexes/docs/runs/") if "/staging/" in k] == []  # committed staging is gone


@dataclass
class _Cli:
    returncode: int
    stderr: str
    pid: int


def _cli_apply(ws: Workspace, path: Path, spec: str, prefect_api: str | None = None,
               **env: str) -> tuple[_Cli, dict | None]:
    """`reindex apply PLAN --task-runner SPEC` in a child process; (its outcome, the run report or None)."""
    run_json = path.with_name(path.name.removesuffix(".json") + ".run.json")
    run_json.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "reindex", "apply", str(path), "-c", str(ws.config),
                             "--task-runner", spec, "--no-progress"], env=_env(prefect_api, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=240)
    return _Cli(proc.returncode, err, proc.pid), json.loads(run_json.read_text()) if run_json.exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory, s3_server: str) -> Iterator[dict[str, Any]]:
    """`dask scheduler` and two `dask worker` processes (no nanny: the worker is the process we start),
    with the loopback S3 server's credentials in their environment."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("dask")
    procs = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              env=_env(), stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "w"))]
    try:
        for n in range(2):
            procs.append(subprocess.Popen(
                [str(DASK), "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{n}",
                 "--local-directory", str(logs / f"w{n}")],
                env=_env(), stdout=subprocess.DEVNULL, stderr=open(logs / f"worker{n}.log", "w")))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=90)
        yield {"address": address, "worker_pids": {p.pid for p in procs[1:]}}
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


POOL = "shards"
PREFECT = Path(sys.executable).with_name("prefect")


_stop_group = stop_group


@pytest.fixture(scope="module")
def prefect_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real `prefect server start`, the `reindex-shard/shards` deployment made by `reindex deploy-shards`,
    and two `prefect worker start --pool shards --type process --limit 1` processes (one flow run at a time
    each). Their flow runs carry the crash hook: the first one to reach its first staged embedding batch is
    SIGKILLed (once across all of them: ``REINDEX_CRASH_ONCE``)."""
    import httpx

    home = tmp_path_factory.mktemp("prefect-pool")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    base = _env(PREFECT_HOME=str(home), PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false")
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        log = open(home / "server.log", "wb")
        logs.append(log)
        procs.append(subprocess.Popen([str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                                      env=base, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 150
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail("prefect server did not start:\n" + (home / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        env = {**base, "PREFECT_API_URL": url}
        deploy = subprocess.Popen([sys.executable, "-m", "reindex", "deploy-shards", "--pool", POOL, "--json"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        marker = home / "crashed-once"
        worker_env = {**env, "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO",
                      "REINDEX_CRASH_AT": "after-batch-upsert", "REINDEX_CRASH_ONCE": str(marker)}
        for n in range(2):
            log = open(home / f"worker{n}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                [str(PREFECT), "worker", "start", "--pool", POOL, "--type", "process", "--limit", "1", "--name", f"w{n}"],
                env=worker_env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        out, err = deploy.communicate(timeout=120)  # beside the workers' start-up
        assert deploy.returncode == 0, err[-2000:]
        assert json.loads(out)["deployments"] == [f"reindex-shard/{POOL}"]
        wait_for_workers(url, POOL, procs, home / "worker0.log", n=2)
        yield {"url": url, "home": home, "crash_marker": marker, "worker_logs": [home / "worker0.log", home / "worker1.log"]}
    finally:
        for proc in reversed(procs):  # the workers before the server
            _stop_group(proc)
        for log in logs:
            log.close()


# --------------------------------------------------------------------------------------------
# Specs, parsing, fences
# --------------------------------------------------------------------------------------------


def test_task_runner_specs_parse_and_bad_ones_fail_in_one_line() -> None:
    assert parse_task_runner(None).kind == "threads"
    assert parse_task_runner("threads:3").workers == 3
    assert parse_task_runner("dask").kind == "dask-threads"
    assert (parse_task_runner("dask-processes:4").kind, parse_task_runner("dask-processes:4").workers) == ("dask-processes", 4)
    assert parse_task_runner("dask-processes").workers == 2
    assert parse_task_runner("dask:tcp://10.0.0.5:8786").address == "tcp://10.0.0.5:8786"
    assert (parse_task_runner("prefect-pool:gpu").pool, parse_task_runner("prefect-pool:gpu").workers) == ("gpu", None)
    assert parse_task_runner("prefect-pool:gpu:3").workers == 3 and parse_task_runner("prefect-pool:gpu:3").name == "prefect-pool:gpu:3"
    for bad, msg in (("dask-processes:0", "'0' is not a positive whole number"), ("ray", "expected threads, threads:N"),
                     ("dask:nowhere", "expected a scheduler address"), ("prefect-pool:", "expected a work pool name"),
                     ("prefect-pool:gpu:x", "'x' is not a positive whole number")):
        with pytest.raises(ConfigError, match=msg):
            parse_task_runner(bad)


def test_a_spec_picks_the_runner_with_or_without_prefect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.errors import RunnerError
    from reindex.runners import ThreadRunner
    from reindex.runners.distributed import DaskRunner
    from reindex.context import backends

    assert isinstance(backends.shard_runner(False, "threads:3"), ThreadRunner)
    assert backends.shard_runner(False, "threads:3").workers == 3
    local = backends.shard_runner(False, "dask-processes:3")
    assert isinstance(local, DaskRunner) and local.name == "dask-processes:3" and local.spec.workers == 3
    assert backends.shard_runner(False, "dask:tcp://127.0.0.1:8786").name == "dask:tcp://127.0.0.1:8786"
    flow = backends.shard_runner(True, "dask-processes:2")
    assert type(flow).__name__ == "PrefectRunner" and flow.task_runner == "dask-processes:2"
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "no-profile"))  # no profile with an API on this machine
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    with pytest.raises(ConfigError, match="needs a Prefect server that the pool's workers reach too"):
        backends.shard_runner(None, "prefect-pool:gpu")  # refused before any work (no temporary server)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    pool = backends.shard_runner(None, "prefect-pool:gpu:2")  # a work pool means Prefect
    assert type(pool).__name__ == "PrefectRunner" and pool.name == "prefect-pool:gpu:2"
    with pytest.raises(ConfigError, match="cannot run without Prefect"):
        backends.shard_runner(False, "prefect-pool:gpu")
    monkeypatch.delenv("PREFECT_API_URL")
    from reindex.runners.prefect import PrefectRunner, using_task_runner

    with using_task_runner("prefect-pool:gpu"):  # how the flows' task_runner parameter reaches the runner
        assert PrefectRunner().name == "prefect-pool:gpu"
    assert PrefectRunner().name == "prefect"
    with pytest.raises(RunnerError, match="pass either runner= or task_runner="):
        api.apply_plan(tmp_path / "p.json", tmp_path / "reindex.yaml", runner=ThreadRunner(), task_runner="dask")


def test_the_cli_refuses_a_bad_task_runner_before_any_work(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from reindex.cli import main

    r = CliRunner().invoke(main, ["apply", str(tmp_path / "missing.json"), "--task-runner", "ray"])
    assert r.exit_code != 0
    assert ("task runner 'ray': expected threads, threads:N, dask, dask-processes[:N], dask:tcp://HOST:PORT or "
            "prefect-pool:POOL[:N]") in r.output


def test_a_fence_holds_only_for_the_unexpired_lease_it_names(tmp_path: Path) -> None:
    state = open_object_store(str(tmp_path / "state"))
    lock = acquire_lock(state, "docs", "host:1:a", purpose="apply", ttl=60)
    fence = Fence.of(lock)
    fence.check(state)  # held: passes
    with pytest.raises(LockLost, match="token 1"):
        Fence("docs", lock.token, "another-nonce").check(state)
    body = json.loads(state.get(lock_key("docs")))
    state.put(lock_key("docs"), json.dumps({**body, "expires": time.time() - 5}).encode())
    with pytest.raises(LockLost, match="lease expired"):
        fence.check(state)  # a coordinator that stopped renewing: its workers stop
    state.put(lock_key("docs"), json.dumps({**body, "token": 2, "nonce": "n2", "owner": "other:2:b"}).encode())
    with pytest.raises(LockLost, match="now held by other:2:b"):
        fence.check(state)


def _spend(state_dir: str, key: str, limit: int, each: int, times: int, out: Any) -> None:
    state = open_object_store(state_dir)
    counter = workers.SharedTokenCounter(state, key, limit, lambda: None)
    ok = 0
    for _ in range(times):
        try:
            counter(each)
            ok += 1
        except ApprovalError:
            break
    out.put(ok)


def test_the_token_budget_is_one_count_across_processes(tmp_path: Path) -> None:
    """Two processes spend against one budget of 100 in steps of 10: together they get exactly 10 steps
    (each alone would have got 10, i.e. 200 tokens, with a count of its own)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    key = "indexes/docs/runs/p/tokens-1.json"
    procs = [ctx.Process(target=_spend, args=(str(tmp_path), key, 100, 10, 10, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    granted = out.get(timeout=5) + out.get(timeout=5)
    assert granted == 10
    spent = workers.SharedTokenCounter(open_object_store(str(tmp_path)), key, 100, lambda: None).spent()
    assert spent == 100


def test_a_spec_is_plain_data(tmp_path: Path) -> None:
    import pickle

    spec = workers.ShardSpec(index="docs", config="{}", run="r", target="t", old=None, old_shards=None, shards=4,
                             in_place=True, shard=1, only=("a",), removed=("b",), state_uri=str(tmp_path),
                             state_endpoint=None, store_path=None, fence_token=3, fence_nonce="n", token_budget=5,
                             coordinator="h:1")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert workers.ShardSpec.from_dict(json.loads(json.dumps(spec.as_dict()))) == spec
    assert spec.key == "r:3:n"


# --------------------------------------------------------------------------------------------
# Whole applies on worker processes
# --------------------------------------------------------------------------------------------


def test_cli_apply_on_a_local_dask_cluster_survives_a_sigkilled_worker(tmp_path: Path, reference: dict) -> None:
    """`reindex apply --task-runner dask-processes:2`, one worker SIGKILLed after staging its first embedding
    batch: the scheduler runs the shard again on a worker, which reuses that batch; exit 0, the same
    population as in-process, each shard's worker named as host:pid of a process other than the CLI."""
    ws, path = _fresh(tmp_path)
    ws.write_config(120, extra="apply: {shards: 4, embed_batch_size: 8}")  # several batches per shard
    _, path = ws.plan()
    ws.approve(path)
    marker = tmp_path / "killed-once"
    proc, report = _cli_apply(ws, path, "dask-processes:2", REINDEX_CRASH_AT="after-batch-upsert",
                              REINDEX_CRASH_ONCE=str(marker))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert marker.exists()  # a worker really died mid-shard
    assert report is not None and report["runner"] == "dask-processes:2"
    _same_as_reference(ws, report["collection"], reference)
    # The killed worker's staged batch was reused by the shard's next attempt, not embedded again.
    # Texts embedded twice: none (it died right after staging); the batch it staged (≤ 8 texts) was reused.
    assert report["actual"]["reused_from_target"] >= 1
    assert 1 <= reference["report"]["actual"]["embedded"] - report["actual"]["embedded"] <= 8
    host = socket.gethostname()
    pids = set()
    for s in report["shards"]:
        h, _, pid = s["worker"].partition(":")
        assert h == host and pid.isdigit() and int(pid) != proc.pid, s
        pids.add(pid)
        assert s["seconds"] > 0 and s["commit_seconds"] >= 0
    assert sorted(s["shard"] for s in report["shards"]) == [0, 1, 2, 3]


def test_cli_apply_on_a_running_dask_cluster(tmp_path: Path, reference: dict, dask_cluster: dict) -> None:
    ws, path = _fresh(tmp_path)
    proc, report = _cli_apply(ws, path, f"dask:{dask_cluster['address']}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report is not None
    _same_as_reference(ws, report["collection"], reference)
    assert report["actual"]["embedded"] == reference["report"]["actual"]["embedded"]
    # The workers read the plan's carried chunks from the state store: no document was chunked again.
    assert report["carried"]["documents"] == 24 and report["carried"]["chunked"] == 0, report["carried"]
    ran = {int(s["worker"].partition(":")[2]) for s in report["shards"]}
    assert ran <= dask_cluster["worker_pids"], (ran, dask_cluster["worker_pids"])  # only the `dask worker`s ran shards


def test_a_killed_coordinator_is_resumed_by_the_next_apply(tmp_path: Path, reference: dict, dask_cluster: dict) -> None:
    """The CLI dies (SIGKILL) in its second commit, after writing that shard's points and before its
    manifest; the workers outlive it. The next apply takes the lock over, skips the committed shard and
    ends with the reference population."""
    ws, path = _initial(tmp_path)
    proc, _ = _cli_apply(ws, path, f"dask:{dask_cluster['address']}", REINDEX_CRASH_AT="before-manifest:2")
    assert proc.returncode == -9, proc.stderr[-2000:]
    proc, report = _cli_apply(ws, path, f"dask:{dask_cluster['address']}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report is not None and report["actual"]["shards_skipped"] == 1
    _same_as_reference(ws, report["collection"], reference["initial"])


def test_a_coordinator_that_loses_its_lock_stops_every_write(tmp_path: Path, reference: dict,
                                                             dask_cluster: dict) -> None:
    """While workers run, another writer takes the lock over (the first shard's completion is the moment):
    nothing more is committed, the other shards fail with the lost lock; once that writer is gone the
    next apply builds the reference population."""
    ws, path = _initial(tmp_path)
    state = ws.state()
    stolen: list[int] = []

    def steal(event: dict) -> None:
        if event["kind"] == "shard-done" and not stolen:
            body = json.loads(state.get(lock_key("docs")))
            state.put(lock_key("docs"), json.dumps({**body, "token": body["token"] + 1, "nonce": "thief",
                                                    "owner": "elsewhere:1:thief"}).encode())
            stolen.append(body["token"] + 1)

    r = api.apply_plan(path, ws.config, task_runner=f"dask:{dask_cluster['address']}", progress=steal, prefect=False)
    assert stolen and r.status == "failed"
    assert len(r.report["failures"]) == 3
    assert all("lost the lock" in f["reason"] for f in r.report["failures"]), r.report["failures"]
    done = [k for k in range(4) if read_shard_manifest(state, "docs", r.collection, r.plan_hash, k) is not None]
    assert len(done) == 1  # only the shard committed before the takeover
    assert read_lock(state, "docs").owner == "elsewhere:1:thief"  # the loser never touched the thief's lock
    body = json.loads(state.get(lock_key("docs")))
    state.put(lock_key("docs"), json.dumps({"v": 2, "state": "free", "token": body["token"], "nonce": "thief"}).encode())
    again = api.apply_plan(path, ws.config, task_runner=f"dask:{dask_cluster['address']}", prefect=False)
    assert again.status == "done", again.report["failures"]
    assert again.report["actual"]["shards_skipped"] == 1
    _same_as_reference(ws, again.collection, reference["initial"])


WORKER_SCRIPT = "import json, sys\nfrom reindex.engine.workers import run_shard_spec\nprint(json.dumps(run_shard_spec(json.load(sys.stdin))))\n"


def _in_process(spec: workers.ShardSpec) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WORKER_SCRIPT], input=json.dumps(spec.as_dict()), env=_env(),
                          capture_output=True, text=True, timeout=120)


class _OneShardElsewhere:
    """Runs shard 0 in a separate Python process from its spec and commits it; reports the rest failed."""

    name = "one-shard-elsewhere"

    def __init__(self) -> None:
        self.specs: list[workers.ShardSpec] = []
        self.pid: int | None = None

    def run(self, ctx: Any, job: ShardJob) -> dict:
        self.specs = workers.shard_specs(ctx, job.shards, job.only, job.removed)
        proc = _in_process(self.specs[0])
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(proc.stdout)
        workers.commit_staged(ctx, result["staged"])
        return summarize([result], [failure_of(k, RuntimeError("not run here")) for k in job.shards[1:]], dict)


def test_a_worker_runs_its_spec_anywhere_and_stops_when_the_lease_is_gone(tmp_path: Path) -> None:
    ws, path = _initial(tmp_path)
    runner = _OneShardElsewhere()
    r = api.apply_plan(path, ws.config, runner=runner)
    assert r.status == "failed" and r.report["shards"][0]["shard"] == 0
    assert r.report["shards"][0]["worker"] != f"{socket.gethostname()}:{os.getpid()}"
    state = ws.state()
    assert read_shard_manifest(state, "docs", r.collection, r.plan_hash, 0) is not None  # committed by the coordinator
    # The coordinator is gone (its lock released): a worker left with shard 1's spec writes nothing.
    counter = workers.budget_key("docs", r.plan_hash, runner.specs[1].fence)
    spent = state.get(counter)  # the initial build is unapproved: approval.max_tokens counts it
    assert spent is not None
    left_behind = _in_process(runner.specs[1])
    assert left_behind.returncode != 0
    assert "LockLost" in left_behind.stderr and "lost the lock on index 'docs'" in left_behind.stderr
    assert state.list(workers.staging_prefix("docs", r.plan_hash, 1)) == []
    assert state.get(counter) == spent


def test_an_unapproved_budget_holds_across_the_workers_together(tmp_path: Path, dask_cluster: dict) -> None:
    """An understated, unapproved document-scoped plan with approval.max_tokens at half its real work, on
    two worker processes: the run stops at the budget, counted once for all (a count per process would
    let each worker spend up to the budget, and the two together finish the work)."""
    from reindex.planner import seal

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.edit_documents()
    total = ws.plan()[0].body["work"]["tokens_to_embed"]
    limit = total // 2
    ws.write_config(150, extra=f"approval: {{max_tokens: {limit}}}\napply: {{shards: 4, embed_batch_size: 1}}")
    plan, path = ws.plan()
    assert plan.body["approval"]["required"] and plan.body["work"]["tokens_to_embed"] == total > 400
    body = json.loads(path.read_text(encoding="utf-8"))  # understated and unapproved, as in test_safety
    body.pop("plan_hash")
    body["work"]["tokens_to_embed"] = 10
    body["approval"] = {"required": False, "reasons": []}
    path.write_text(json.dumps(seal(body).body, indent=2), encoding="utf-8")
    r = api.apply_plan(path, ws.config, task_runner=f"dask:{dask_cluster['address']}", prefect=False)
    assert r.status == "failed"
    assert r.report["failures"] and all(f"more than approval.max_tokens ({limit:,})" in f["reason"]
                                        for f in r.report["failures"]), r.report["failures"]
    state = ws.state()
    fence = Fence("docs", read_lock(state, "docs").token, "")  # the apply's lease (a free lock keeps its token)
    spent = workers.SharedTokenCounter(state, workers.budget_key("docs", r.plan_hash, fence), limit, lambda: None).spent()
    assert 0 < spent <= limit  # the workers counted in the one shared counter


def test_s3_state_shared_by_the_coordinator_and_the_workers(tmp_path: Path, reference: dict, s3_server: str,
                                                             s3_bucket: str, dask_cluster: dict) -> None:
    """State on the loopback S3 server, read and written by the coordinator and the two `dask worker`
    processes (from the Python API, without Prefect); the store folder stays the coordinator's."""
    extra = f"state: {{uri: 's3://{s3_bucket}/ws', endpoint_url: '{s3_server}'}}\nstore: {{path: ./qdrant}}\n"
    ws = Workspace(tmp_path / "ws", extra=extra)
    _, path = ws.plan()  # the initial build (no approval needed)
    from reindex.terminal.progress import ProgressCounts

    counts = ProgressCounts()
    r = api.apply_plan(path, ws.config, task_runner=f"dask:{dask_cluster['address']}", prefect=False,
                       progress=lambda e: counts.feed(e, time.perf_counter()))
    assert r.status == "done", r.report["failures"]
    assert all(s["worker"] != execution.worker_name() for s in r.report["shards"])
    # The progress display counts every worker's shards (their events stay in their processes).
    assert (counts.shards_done, counts.documents, counts.tokens) == (4, 24, r.report["actual"]["tokens_embedded"])
    assert counts.chunks == r.report["actual"]["chunks_written"]
    assert not (tmp_path / "ws" / ".reindex").exists()  # nothing went to a local state folder
    _same_as_reference(ws, r.collection, reference["initial"])


class _Recording:
    """A stand-in for a Qdrant server's store: records the writes and forwards them to a real store."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.writes = inner, []

    def upsert(self, name: str, points: list) -> None:
        self.writes.append(("upsert", name, len(points)))
        self.inner.upsert(name, points)

    def delete_points(self, name: str, ids: list) -> None:
        self.writes.append(("delete", name, len(ids)))
        self.inner.delete_points(name, ids)

    def retrieve(self, *a: Any, **kw: Any) -> list:
        return self.inner.retrieve(*a, **kw)

    def prepare_writes(self, name: str) -> None:
        self.inner.prepare_writes(name)

    def overwrite_payload(self, name: str, payloads: dict) -> None:
        self.writes.append(("payload", name, len(payloads)))
        self.inner.overwrite_payload(name, payloads)

    def close(self) -> None:
        pass


class _ServerWorkers:
    """Each shard's spec opened as a worker of a store with ``store.url`` would open it (the store given:
    no server can run here), run there, its manifests written by the worker itself."""

    name = "server-workers"

    def __init__(self) -> None:
        self.stores: list[_Recording] = []
        self.results: list[dict] = []

    def run(self, ctx: Any, job: ShardJob) -> dict:
        results = []
        for spec in workers.shard_specs(ctx, job.shards, job.only, job.removed):
            cfg = json.loads(spec.config)
            cfg["store"]["url"] = "http://qdrant.invalid:6333"  # operational: the ids stay the same
            wctx = workers.open_shard_context(replace(spec, config=json.dumps(cfg)), store=_Recording(ctx.store))
            assert wctx.staging is None and wctx.store is not ctx.store
            self.stores.append(wctx.store)
            results.append(execution.run_shard(wctx, spec.shard).as_dict())
        self.results = results
        return summarize(results, [], lambda: execution.catch_up(ctx))


def test_with_a_server_store_workers_write_their_shards_themselves(tmp_path: Path, reference: dict) -> None:
    ws, path = _initial(tmp_path)
    runner = _ServerWorkers()
    r = api.apply_plan(path, ws.config, runner=runner)
    assert r.status == "done", r.report["failures"]
    assert [res["staged"] for res in runner.results] == [None] * 4  # nothing staged: the workers wrote
    assert all(any(w[0] == "upsert" and w[1] == r.collection for w in st.writes) for st in runner.stores)
    _same_as_reference(ws, r.collection, reference["initial"])


def test_a_local_cluster_of_threads_runs_shards_in_this_process_on_its_own_context(tmp_path: Path,
                                                                                   reference: dict) -> None:
    """`dask` (a Dask cluster of threads in this process): each spec resolves to the coordinator's own
    context, so shards write directly (nothing staged) and the population is the in-process one."""
    ws, path = _initial(tmp_path)
    r = api.apply_plan(path, ws.config, task_runner="dask", prefect=False)
    assert r.status == "done", r.report["failures"]
    assert r.report["runner"] == "dask"
    assert {s["worker"] for s in r.report["shards"]} == {execution.worker_name()}
    assert all("commit_seconds" not in s for s in r.report["shards"])  # nothing was staged
    _same_as_reference(ws, r.collection, reference["initial"])


def test_an_in_place_sync_on_workers_equals_the_in_process_sync(tmp_path: Path, dask_cluster: dict) -> None:
    """Document-scoped: the workers read the live target through the reader, stage upserts, stale deletes
    and payload rewrites; the coordinator commits them in order."""
    results = {}
    for name, spec in (("in-process", None), ("workers", f"dask:{dask_cluster['address']}")):
        ws = Workspace(tmp_path / name)
        live = ws.build_live()
        edited = ws.edit_documents()
        plan, path = ws.plan()
        assert plan.kind == "document-scoped"
        if plan.body["approval"]["required"]:
            ws.approve(path)
        r = api.apply_plan(path, ws.config, task_runner=spec, prefect=False)
        assert r.status == "done", r.report["failures"]
        assert r.collection == live and r.report["actual"]["deleted"] > 0
        results[name] = (ws.snapshot(live), [(m.doc_id, m.ordinal, m.point_id) for m in ws.manifest_rows(live)],
                         {k: v for k, v in r.report["actual"].items()}, edited)
    (a, ma, ra, _), (b, mb, rb, _) = results["in-process"], results["workers"]
    a.assert_same(b)
    assert ma == mb
    assert ra == rb


def _shard_flow_runs(url: str) -> list[dict]:
    import httpx

    r = httpx.post(f"{url}/flow_runs/filter", json={"flows": {"name": {"any_": ["reindex-shard"]}}}, timeout=10)
    r.raise_for_status()
    return r.json()


def test_cli_apply_on_a_prefect_work_pool_survives_a_crashed_flow_run(tmp_path: Path, reference: dict,
                                                                       prefect_pool: dict) -> None:
    """`reindex apply --task-runner prefect-pool:shards:2` against a real Prefect server: the shards go out as
    two flow runs of `reindex-shard/shards`, one per process worker; the first flow-run process dies
    (SIGKILL) after staging its first embedding batch, Prefect marks that run Crashed, and the coordinator
    starts its shards once more (the staged batch is reused). Exit 0, the in-process population, and every
    shard named with the flow-run process (not the CLI) that ran it."""
    ws, path = _fresh(tmp_path)
    ws.write_config(120, extra="apply: {shards: 4, embed_batch_size: 8}")  # several batches per shard
    _, path = ws.plan()
    ws.approve(path)
    proc, report = _cli_apply(ws, path, f"prefect-pool:{POOL}:2", prefect_api=prefect_pool["url"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert prefect_pool["crash_marker"].exists()  # a flow-run process really died mid-shard
    assert report is not None and report["runner"] == f"prefect-pool:{POOL}:2"
    _same_as_reference(ws, report["collection"], reference)
    assert report["actual"]["reused_from_target"] >= 1  # the killed run's staged batch, taken by the next run
    assert 1 <= reference["report"]["actual"]["embedded"] - report["actual"]["embedded"] <= 8
    runs = _shard_flow_runs(prefect_pool["url"])
    states = sorted(r["state"]["type"] for r in runs)
    assert states == ["COMPLETED", "COMPLETED", "CRASHED"], [(r["name"], r["state"]) for r in runs]
    assert sum("-again1" in r["name"] for r in runs) == 1  # the crashed run's shards, started once more
    flow_run_pids = {r["infrastructure_pid"].rpartition(":")[2] for r in runs if r["state"]["type"] == "COMPLETED"}
    host = socket.gethostname()
    for s in report["shards"]:
        h, _, pid = s["worker"].partition(":")
        assert h == host and pid.isdigit() and int(pid) != proc.pid, s
        assert pid in flow_run_pids, (s["worker"], flow_run_pids)  # a flow-run process of a pool worker ran it
    assert sorted(s["shard"] for s in report["shards"]) == [0, 1, 2, 3]
    assert len({s["worker"] for s in report["shards"]}) == 2  # two flow runs, two processes
    ran = [sum(r["name"] in log.read_text(errors="replace") for r in runs) for log in prefect_pool["worker_logs"]]
    assert all(n >= 1 for n in ran), ran  # both workers of the pool took flow runs


def test_a_missing_shard_deployment_is_one_line_with_the_fix(tmp_path: Path, prefect_pool: dict,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool nobody ran `reindex deploy-shards` for: refused before any shard starts, with both commands;
    the index lock is released."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from reindex.errors import RunnerError

    ws, path = _initial(tmp_path)
    url = prefect_pool["url"]
    monkeypatch.setenv("PREFECT_API_URL", url)
    with temporary_settings(updates={PREFECT_API_URL: url}), pytest.raises(RunnerError) as err:
        api.apply_plan(path, ws.config, task_runner="prefect-pool:elsewhere")
    assert str(err.value) == (f"the Prefect API at {url} has no deployment reindex-shard/elsewhere: create it with "
                              "`reindex deploy-shards --pool elsewhere` and start workers with `prefect worker start "
                              "--pool elsewhere`")
    assert not read_lock(ws.state(), "docs").held
    assert not any("elsewhere" in r["name"] for r in _shard_flow_runs(url))


@pytest.mark.parametrize("n, seconds, target, sizes", [
    (16, 0.05, 10.0, [16]),  # 0.8 s of work in all: one unit, its overhead paid once
    (16, 2.0, 10.0, [6, 5, 5]),  # 32 s: three units of ~10 s, contiguous
    (16, 30.0, 10.0, [1] * 16),  # each shard is work enough on its own
    (16, 2.0, 0.0, [1] * 16),  # unit_seconds 0: one shard per unit, as before
    (3, 0.0, 10.0, [3]),  # nothing to embed (a rate-less plan): one unit
    (0, 1.0, 10.0, []),
])
def test_shards_are_dealt_into_contiguous_units_by_planned_work(n: int, seconds: float, target: float,
                                                                 sizes: list[int]) -> None:
    from reindex.runners import deal_units

    units = deal_units(list(range(n)), seconds, target)
    assert [len(u) for u in units] == sizes
    assert [k for u in units for k in u] == list(range(n))  # every shard once, in order: numbering unchanged


def test_a_dask_apply_hands_a_worker_a_unit_of_shards_sized_by_work(tmp_path: Path, reference: dict) -> None:
    """A chunker change of the sample (a fraction of a second of hash embedding per shard) with the default
    apply.unit_seconds is one unit: every shard runs in the same worker process, one after the other, and the
    population is the in-process one."""
    ws, path = _fresh(tmp_path / "one-unit")
    proc, report = _cli_apply(ws, path, "dask-processes:2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    _same_as_reference(ws, report["collection"], reference)
    assert len({s["worker"] for s in report["shards"]}) == 1, report["shards"]
    assert len(report["shards"]) == ws.cfg().apply.shards
    assert report["carried"]["documents"] == 24 and report["carried"]["chunked"] == 0, report["carried"]
