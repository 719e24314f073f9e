"""Scheduled flows (issue 7) against a REAL local Prefect server and a process worker.

One ``prefect server start`` (its own PREFECT_HOME and SQLite database) and one ``prefect worker
start --pool reindex-test`` serve the whole module. Deployments come from ``reindex deploy`` (module
entrypoints), runs from ``run_deployment``; flow runs are separate processes, so the test process
opens a workspace's embedded Qdrant only when no flow run of that workspace is in flight.
Also here: the same plan built with the thread runner and with a local Dask cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from click.testing import CliRunner

from helpers_index import SAMPLE, Workspace, subprocess_env

PREFECT_BIN = Path(sys.executable).with_name("prefect")
POOL = "reindex-test"

CONFIG = """\
index: {index}
source: ./corpus
text: {{chunker: {{kind: recursive, size: 150}}}}
vector: {{provider: hash}}
apply: {{shards: 4}}
cutover: {{min_recall_delta: -1.0, min_overlap: 0.0}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen, timeout: float = 20) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real Prefect server on a free loopback port; PREFECT_API_URL points this process at it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = subprocess_env(PREFECT_HOME=str(home), PREFECT_LOGGING_LEVEL="WARNING")
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen([str(PREFECT_BIN), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("prefect server did not start:\n" + (home / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        with pytest.MonkeyPatch.context() as mp, temporary_settings(updates={PREFECT_API_URL: url}):
            mp.setenv("PREFECT_API_URL", url)
            yield {"url": url, "home": home, "env": {**env, "PREFECT_API_URL": url}}
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def worker(prefect_server: dict[str, Any]) -> Iterator[Path]:
    """A process worker polling every second; stopped before the server. Yields its log file."""
    home = prefect_server["home"]
    env = {**prefect_server["env"], "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO"}
    logpath = home / "worker.log"
    log = open(logpath, "wb")
    proc = subprocess.Popen([str(PREFECT_BIN), "worker", "start", "--pool", POOL, "--type", "process"],
                            env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield logpath
    finally:
        _stop(proc)
        log.close()


def _workspace(root: Path, index: str) -> Path:
    root.mkdir(parents=True)
    shutil.copytree(SAMPLE / "corpus", root / "corpus")
    cfg = root / "reindex.yaml"
    cfg.write_text(CONFIG.format(index=index), encoding="utf-8")
    return cfg


def _deploy(cfg: Path) -> str:
    from reindex.cli import main

    r = CliRunner().invoke(main, ["deploy", "-c", str(cfg), "--pool", POOL, "--no-schedules"])
    assert r.exit_code == 0, r.output
    assert f"prefect worker start --pool {POOL}" in r.output
    return r.output


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _run(name: str, worker_log: Path, **params: Any):
    from prefect.deployments import run_deployment

    return run_deployment(name, parameters=params, timeout=0)


def _wait(flow_run_id: Any, done, what: str, worker_log: Path, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    with _client() as c:
        while True:
            fr = c.read_flow_run(flow_run_id)
            got = done(c, fr)
            if got:
                return got
            if time.monotonic() > deadline:
                pytest.fail(f"flow run {flow_run_id} not {what} within {timeout} s (state {fr.state}); worker log:\n"
                            + worker_log.read_text()[-4000:])
            time.sleep(0.5)


def _paused_with_form(c: Any, fr: Any) -> dict | None:
    """The run is Paused and its approval form (schema and description) is stored."""
    from prefect.input.run_input import keyset_from_paused_state

    if fr.state.is_final():
        pytest.fail(f"run ended before pausing: {fr.state}")
    if not fr.state.is_paused():
        return None
    keys = keyset_from_paused_state(fr.state)
    try:
        schema = json.loads(c.read_flow_run_input(fr.id, keys["schema"]))
        description = c.read_flow_run_input(fr.id, keys["description"])
    except Exception:  # noqa: BLE001 - not written yet
        return None
    return {"schema": schema, "description": json.loads(description)}


def _final(c: Any, fr: Any) -> Any:
    return fr if fr.state.is_final() else None


def _artifact(flow_run_id: Any, key_prefix: str) -> str:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with _client() as c:
        arts = c.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(str(a.data) for a in arts if (a.key or "").startswith(key_prefix))


# --------------------------------------------------------------------------------------------


def test_reindex_run_pauses_for_approval_then_builds_and_swaps_the_alias(
    tmp_path: Path, prefect_server: dict, worker: Path
) -> None:
    from prefect.flow_runs import resume_flow_run

    from reindex import api

    cfg = _workspace(tmp_path / "ws", "flowok")
    _deploy(cfg)
    fr = _run("reindex-reindex/flowok", worker, poll_interval_s=1)
    form = _wait(fr.id, _paused_with_form, "paused with its approval form", worker)
    assert set(form["schema"]["properties"]) == {"approve", "approver", "reason"}
    desc = form["description"]
    plan_file = next(p for p in (tmp_path / "ws" / "plans").glob("*.json") if p.name.count(".") == 1)
    plan = api.show_plan(plan_file)
    c = plan.body["cost"]
    for needle in (f"{c['peak_vectors']:,} vectors", f"{plan.body['work']['tokens_to_embed']:,}",
                   f"${c['usd']:,.4f}", f"{c['hours']:,.3f} hours", "Peak footprint", "disk", plan.plan_hash[:12]):
        assert needle in desc, f"{needle!r} missing from the approval description:\n{desc}"
    assert "peak vectors" in _artifact(fr.id, "reindex-plan-flowok-numbers")

    # While the run is paused it holds the index: a sync of the same index gives up and says so.
    sync = _run("reindex-sync/flowok", worker, busy_timeout_s=1, poll_interval_s=1)
    sync_done = _wait(sync.id, _final, "finished", worker)
    assert sync_done.state.is_completed()
    assert "skipped: another run holds index 'flowok'" in _artifact(sync.id, "reindex-result-flowok")
    assert len([p for p in plan_file.parent.glob("*.json") if p.name.count(".") == 1]) == 1, "the sync planned"

    resume_flow_run(fr.id, run_input={"approve": True, "approver": "alice", "reason": "looks right"})
    done = _wait(fr.id, _final, "finished", worker)
    assert done.state.is_completed(), done.state
    approval = json.loads(plan_file.with_name(plan_file.stem + ".approval.json").read_text())
    assert (approval["by"], approval["plan_hash"]) == ("alice", plan.plan_hash)
    assert str(fr.id) in approval["note"]
    st = api.status(cfg)
    new = plan.body["identity"]["new"]["collection"]
    assert st["aliases"] == {"flowok": new}
    assert [p["state"] for p in st["populations"]] == ["live"] and st["lock"] is None
    assert "approved by alice" in _artifact(fr.id, "reindex-result-flowok")

    # A sync with nothing changed plans `none` and finishes without asking anyone.
    again = _run("reindex-sync/flowok", worker)
    assert _wait(again.id, _final, "finished", worker).state.is_completed()
    assert api.status(cfg)["aliases"] == {"flowok": new}


def test_rejected_and_timed_out_runs_change_nothing(tmp_path: Path, prefect_server: dict, worker: Path) -> None:
    from prefect.flow_runs import resume_flow_run

    from reindex import api

    cfg = _workspace(tmp_path / "ws", "flowno")
    _deploy(cfg)
    fr = _run("reindex-reindex/flowno", worker, poll_interval_s=1)
    _wait(fr.id, _paused_with_form, "paused with its approval form", worker)
    resume_flow_run(fr.id, run_input={"approve": False, "approver": "bob", "reason": "too expensive"})
    done = _wait(fr.id, _final, "finished", worker)
    assert done.state.is_completed(), done.state
    assert "rejected by bob (too expensive); nothing changed" in _artifact(fr.id, "reindex-result-flowno")

    # Nobody decides: the run rejects itself at the deadline (before Prefect's pause timeout).
    late = _run("reindex-reindex/flowno", worker, poll_interval_s=1, approval_timeout_s=3)
    late_done = _wait(late.id, _final, "finished", worker)
    assert late_done.state.is_completed(), late_done.state
    assert "rejected by reindex (deadline) (no decision within 3 s); nothing changed" in _artifact(
        late.id, "reindex-result-flowno")

    ws = tmp_path / "ws"
    assert not list((ws / "plans").glob("*.approval.json"))
    st = api.status(cfg)
    assert st["aliases"] == {} and st["populations"] == [] and st["lock"] is None
    store = api.vector_store_for(api.load_resolved(cfg))
    try:
        assert store.list_collections() == []
    finally:
        store.close()


def test_two_runs_of_one_index_never_overlap(tmp_path: Path, prefect_server: dict, worker: Path) -> None:
    cfg = _workspace(tmp_path / "ws", "flowgc")
    _deploy(cfg)
    a = _run("reindex-gc/flowgc", worker)
    b = _run("reindex-gc/flowgc", worker)
    runs = [_wait(r.id, _final, "finished", worker) for r in (a, b)]
    assert all(r.state.is_completed() for r in runs), [r.state for r in runs]
    first, second = sorted(runs, key=lambda r: r.start_time)
    assert second.start_time >= first.end_time, (
        f"runs overlapped: {first.start_time}–{first.end_time} and {second.start_time}–{second.end_time}")
    with _client() as c:
        names = [s.name for s in c.read_flow_run_states(second.id)]
    assert "AwaitingConcurrencySlot" in names, names


# --------------------------------------------------------------------------------------------
# Scale-out: the same plan through the thread runner and a local Dask cluster
# --------------------------------------------------------------------------------------------


def test_thread_and_dask_runners_build_the_identical_population(tmp_path: Path, prefect_server: dict) -> None:
    pytest.importorskip("prefect_dask")
    from reindex import api
    from reindex.orchestration import using_task_runner

    built = {}
    for runner in ("threads", "dask"):
        ws = Workspace(tmp_path / runner)
        plan, path = ws.plan()
        ws.approve(path)
        with using_task_runner(runner):
            r = api.apply_plan(path, ws.config, use_prefect=True)
        assert r.status == "done", r.report
        built[runner] = (plan.plan_hash, r.collection, ws.snapshot(r.collection))
    (_h1, c1, s1), (_h2, c2, s2) = built["threads"], built["dask"]
    assert c1 == c2
    assert len(s1.ids) == plan.body["work"]["chunks_new"]
    s1.assert_same(s2)


def test_unknown_task_runner_is_refused_with_the_choices() -> None:
    from reindex.errors import ConfigError
    from reindex.orchestration import make_task_runner

    with pytest.raises(ConfigError, match="expected threads, threads:N, dask, dask-processes"):
        make_task_runner("ray")
