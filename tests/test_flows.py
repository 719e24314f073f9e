"""Scheduled flows (issues 7 and 13) against a REAL local Prefect server and a process worker.

One ``prefect server start`` (its own PREFECT_HOME and SQLite database; scheduler off so the cron
schedules of ``flows/prefect.yaml`` never fire, expired leases reclaimed every second) and one
``prefect worker start --pool reindex`` serve the whole module. Deployments come from ``reindex deploy``
(module entrypoints) and from ``prefect deploy --all`` of ``flows/prefect.yaml``, runs from
``run_deployment``; flow runs are separate processes, so the test process opens a workspace's embedded
Qdrant only when no flow run of that workspace is in flight. The worker's flow runs hold their index
with a 60 s lease (``REINDEX_INDEX_LEASE_S``, Prefect's minimum), so a test that pauses and applies
for longer than 60 s proves the hold survives lease renewals.
Also here: the same plan built with the thread runner and with a local Dask cluster."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from click.testing import CliRunner

from helpers_browser import CHROMIUM, Browser, by_text, labelled_control
from helpers_index import stop_group, SAMPLE, Workspace, subprocess_env, wait_for_workers
from reindex.planner.approvals import approval_path, rejection_path

PREFECT_BIN = Path(sys.executable).with_name("prefect")
POOL = "reindex"  # the work pool flows/prefect.yaml names: one worker serves both kinds of deployment
REPO = Path(__file__).resolve().parents[1]
LEASE_S = 60  # REINDEX_INDEX_LEASE_S of the worker's flow runs (Prefect refuses shorter leases)
# How long the headline run stays paused after it started: past the index lease, and past the 225 s at
# which Prefect's flow engine renews a deployment concurrency lease (a fixed 300 s lease it cannot be
# told to shorten): a run that still held a deployment slot would be cancelled there.
PAUSE_S = 235
EMBED_KEY_ENV = "REINDEX_TEST_EMBED_KEY"

CONFIG = """\
index: {index}
source: ./corpus
text: {{chunker: {{kind: recursive, size: 150}}}}
vector: {{provider: hash}}
apply: {{shards: 4}}
cutover: {{min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_stop = stop_group


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real Prefect server on a free loopback port; PREFECT_API_URL points this process at it."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = subprocess_env(PREFECT_HOME=str(home), PREFECT_LOGGING_LEVEL="WARNING", PREFECT_UI_API_URL=url,
                         PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
                         PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS="1")
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
    env = {**prefect_server["env"], "PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_LOGGING_LEVEL": "INFO",
           "REINDEX_INDEX_LEASE_S": str(LEASE_S), "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30", EMBED_KEY_ENV: "test"}
    logpath = home / "worker.log"
    log = open(logpath, "wb")
    proc = subprocess.Popen([str(PREFECT_BIN), "worker", "start", "--pool", POOL, "--type", "process"],
                            env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # The pool exists once the worker is online: `prefect deploy` refuses a pool that does not exist yet.
        wait_for_workers(prefect_server["url"], POOL, [proc], logpath)
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
    # The deployments were just made through the server: no advice to start one (issue 33), its UI instead.
    ui = os.environ["PREFECT_API_URL"].removesuffix("/").removesuffix("/api")
    assert "prefect server start" not in r.output
    assert f"# runs waiting for approval: {ui}, under Flow Runs" in r.output, r.output
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
    assert "approver" in form["schema"].get("required", [])  # the UI marks it required, never optional
    desc = form["description"]
    assert desc.endswith("\n\nLeave **approve** false to reject the plan: nothing changes.")
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

    # A second reindex run of the same index (no deployment limit any more) waits for the index instead.
    second = _run("reindex-reindex/flowok", worker, poll_interval_s=1)
    _wait(second.id, lambda c, r: r.state.is_running(), "running (waiting for the index)", worker)

    resume_flow_run(fr.id, run_input={"approve": True, "approver": "alice", "reason": "looks right"})
    done = _wait(fr.id, _final, "finished", worker)
    assert done.state.is_completed(), done.state
    # It planned only after the first run had swapped the alias: nothing left to do, no second pause.
    second_done = _wait(second.id, _final, "finished", worker)
    assert second_done.state.is_completed(), second_done.state
    assert "Nothing to do" in _artifact(second.id, "reindex-result-flowok")
    assert second_done.end_time >= done.end_time
    approval = json.loads(approval_path(plan_file).read_text())
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
    from reindex.errors import ApprovalError

    cfg = _workspace(tmp_path / "ws", "flowno")
    _deploy(cfg)
    fr = _run("reindex-reindex/flowno", worker, poll_interval_s=1)
    _wait(fr.id, _paused_with_form, "paused with its approval form", worker)
    # An approval recorded on the CLI side (no run resumed: as without a Prefect API) ...
    plan_file = _plan_file(tmp_path / "ws" / "plans")
    api.approve_plan(plan_file, "carol", "fine by me")
    assert api.approval_status(plan_file).by == "carol"
    # ... is revoked by a rejection in Prefect's form, which writes the same record `reindex approve --reject` does.
    resume_flow_run(fr.id, run_input={"approve": False, "approver": "bob", "reason": "too expensive"})
    done = _wait(fr.id, _final, "finished", worker)
    assert done.state.is_completed() and done.state.name == "Rejected", done.state  # not the "Completed" of a swap
    assert "rejected by bob (too expensive); nothing changed" in (done.state.message or "")
    assert "rejected by bob (too expensive); nothing changed" in _artifact(fr.id, "reindex-result-flowno")
    published = _artifact(fr.id, "reindex-plan-flowno")  # what the UI shows of the plan: its key figures
    assert "| Tokens to embed |" in published and "file://" not in published
    rejection = json.loads(rejection_path(plan_file).read_text())
    assert (rejection["by"], rejection["reason"], rejection["plan_hash"]) == (
        "bob", "too expensive", api.show_plan(plan_file).plan_hash)
    with pytest.raises(ApprovalError, match="approval by carol of plan .* was revoked: the plan was rejected by bob"):
        api.approval_status(plan_file)
    with pytest.raises(ApprovalError, match="was rejected by bob"):
        api.approve_plan(plan_file, "carol")
    approval_path(plan_file).unlink()  # the rest checks that runs wrote none

    # Nobody decides: the run rejects itself at the deadline (before Prefect's pause timeout).
    late = _run("reindex-reindex/flowno", worker, poll_interval_s=1, approval_timeout_s=3)
    late_done = _wait(late.id, _final, "finished", worker)
    assert late_done.state.is_completed() and late_done.state.name == "Rejected", late_done.state
    assert "rejected by reindex (deadline) (no decision within 3 s); nothing changed" in _artifact(
        late.id, "reindex-result-flowno")

    ws = tmp_path / "ws"
    assert not list((ws / "plans" / "approvals").glob("*.json"))
    st = api.status(cfg)
    assert st["aliases"] == {} and st["populations"] == [] and st["lock"] is None
    store = api.vector_store_for(api.load_resolved(cfg))
    try:
        assert store.list_collections() == []
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# Issue 26: the approval form in the Prefect UI, filled in a real (headless) browser
# --------------------------------------------------------------------------------------------

# How each of the two UIs a Prefect 3.9 server serves reaches the paused run's form: the page, the clicks
# that open the "Resume Flow Run" dialog, and the button that sends it. v1 (Vue) answers the links Prefect
# prints (`/runs/flow-run/ID`); v2 (React) is what the dashboard at `/` opens by default.
_UIS = {
    "v1": ("/runs/flow-run/{id}", [by_text("button", "Resume")], "Submit"),
    "v2": ("/v2/runs/flow-run/{id}", [by_text("button", "Open menu"), by_text("[role=menuitem]", "Resume")], "Resume"),
}


def _flow_run_of(config: Path) -> Any:
    """The reindex-reindex flow run started with this config (None until the run exists)."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    with _client() as c:
        runs = c.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["reindex-reindex"])))
    return next((r for r in runs if r.parameters.get("config") == str(config)), None)


def _start_paused_run(root: Path, index: str, prefect_server: dict) -> tuple[Path, Path, subprocess.Popen]:
    """A reindex-reindex run of a new workspace in its own process (no deployment): it plans, then pauses."""
    cfg = _workspace(root, index)
    log = root / "flow.log"
    env = {**prefect_server["env"], "PREFECT_LOGGING_LEVEL": "INFO"}
    code = ("import sys; from reindex.orchestration import reindex_flow; "
            "out = reindex_flow(config=sys.argv[1], poll_interval_s=1, approval_timeout_s=150); "
            "sys.exit(0 if out.get('status') == 'done' else 3)")
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code, str(cfg)], cwd=root, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return cfg, log, proc


def _approve_in_the_ui(b: Browser, base_url: str, ui: str, fr: Any, index: str, approver: str, reason: str) -> None:
    """What an approver does in the UI: open the run's page, Resume, approve on, name and reason, send."""
    path, opening, send = _UIS[ui]
    b.open(base_url + path.format(id=fr.id))
    b.wait_for(by_text("*", fr.name), f"{ui}: the page of flow run {fr.name}")
    for step in opening:
        b.click(step, f"{ui}: the Resume control")
    dialog = "[role=dialog]"
    switch = labelled_control(dialog, "Approve")
    b.wait_for(switch, f"{ui}: the approve switch of the Resume Flow Run dialog")
    # The form's description (the plan's key figures) arrives after the fields: read it before touching them.
    heading = f"Approve initial reindex of {index}"
    b.wait_until(f"(document.querySelector('{dialog}')?.innerText || '').includes({json.dumps(heading)})",
                 f"{ui}: the dialog shows the plan ({heading!r})")
    assert b.js(f"({switch}).getAttribute('aria-checked')") == "false"  # preset: leaving it rejects
    b.click(switch, f"{ui}: the approve switch")
    b.wait_until(f"({switch}).getAttribute('aria-checked') === 'true'", f"{ui}: the approve switch is on")
    for label, text in (("Approver", approver), ("Reason", reason)):
        field = labelled_control(dialog, label)
        b.type_into(field, text, f"{ui}: the {label.lower()} field")
        b.wait_until(f"({field}).value === {json.dumps(text)}", f"{ui}: the {label.lower()} field reads {text!r}")
    button = by_text(f"{dialog} button", send)
    b.wait_until(f"!({button}).disabled", f"{ui}: the {send} button is enabled", timeout=60)
    b.click(button, f"{ui}: the {send} button of the dialog")


def _wait_resumed(b: Browser, ui: str, fr: Any, log: Path, timeout: float = 180) -> None:
    """Wait until the run has left its paused state, which is what sending the form means. On a loaded box a
    click can land while the page is still busy and do nothing: while the run is still paused and the dialog
    still offers its enabled send button a minute later, press it again."""
    button = by_text("[role=dialog] button", _UIS[ui][2])
    deadline = last = time.monotonic()
    deadline += timeout
    while True:
        with _client() as c:
            if not c.read_flow_run(fr.id).state.is_paused():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{ui}: flow run {fr.id} not resumed by the form within {timeout} s; worker log:\n"
                                 + log.read_text()[-3000:] + "\npage:\n" + b.text()[-2000:])
        if time.monotonic() - last > 60 and b.js(f"(() => {{ const e = {button}; return !!e && !e.disabled; }})()"):
            b.js(f"({button}).click()")
            last = time.monotonic()
        time.sleep(0.5)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (`.ci/run` installs Debian's package)")
def test_approval_in_the_prefect_ui_resume_approve_approver_submit_applies_and_records_the_approver(
    tmp_path: Path, prefect_server: dict
) -> None:
    """Two reindex-reindex runs paused for approval (one per UI, started together so their start-ups overlap);
    headless Chromium opens each run's page in the Prefect UI, clicks Resume, turns **approve** on, types the
    approver and a reason, and sends the form. Each run resumes, records the approval with that name (the same
    record `reindex approve` writes), applies and swaps its alias."""
    from prefect.input.run_input import keyset_from_paused_state

    from reindex import api

    runs = {ui: _start_paused_run(tmp_path / ui, f"ui{ui}", prefect_server) for ui in sorted(_UIS)}
    sent: dict[str, dict] = {}
    try:
        with Browser(tmp_path / "chromium") as b:
            for ui, (cfg, log, proc) in runs.items():
                fr = _wait_for_run(cfg, proc, log)
                form = _wait(fr.id, _paused_with_form, "paused with its approval form", log)
                assert "approver" in form["schema"]["required"]
                with _client() as c:
                    keys = keyset_from_paused_state(c.read_flow_run(fr.id).state)
                _approve_in_the_ui(b, prefect_server["url"].removesuffix("/api"), ui, fr, f"ui{ui}",
                                   f"alice-{ui}", f"read the plan in the {ui} UI")
                # Keep the page open until the resume reached the server (the dialog sends it asynchronously).
                _wait_resumed(b, ui, fr, log)
                sent[ui] = {"run": fr, "keys": keys}
        for ui, (cfg, log, proc) in runs.items():
            sent[ui]["done"] = _wait(sent[ui]["run"].id, _final, f"finished after the {ui} form was sent", log,
                                     timeout=180)
            assert proc.wait(60) == 0, f"{ui}:\n" + log.read_text()[-3000:]
    finally:
        for _cfg, _log, proc in runs.values():
            _stop(proc)
    for ui, (cfg, _log, _proc) in runs.items():
        index, approver, reason = f"ui{ui}", f"alice-{ui}", f"read the plan in the {ui} UI"
        fr, done = sent[ui]["run"], sent[ui]["done"]
        assert done.state.is_completed() and done.state.name == "Completed", (ui, done.state)  # not "Rejected"
        with _client() as c:  # what the UI sent, as Prefect stored it for the run
            got = json.loads(c.read_flow_run_input(fr.id, sent[ui]["keys"]["response"]))
        assert (got["approve"], got["approver"], got["reason"]) == (True, approver, reason), (ui, got)
        plan_file = _plan_file(cfg.parent / "plans")
        plan = api.show_plan(plan_file)
        approval = json.loads(approval_path(plan_file).read_text())
        assert (approval["by"], approval["plan_hash"]) == (approver, plan.plan_hash), ui
        assert approval["note"] == f"{reason} (Prefect flow run {fr.id})"
        assert api.approval_status(plan_file).by == approver
        assert f"approved by {approver}: apply done" in _artifact(fr.id, f"reindex-result-{index}")
        st = api.status(cfg)
        assert st["aliases"] == {index: plan.body["identity"]["new"]["collection"]}, ui
        assert [p["state"] for p in st["populations"]] == ["live"] and st["lock"] is None, ui


def _wait_for_run(config: Path, proc: subprocess.Popen, log: Path, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while (fr := _flow_run_of(config)) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no reindex-reindex run for {config} (flow process exit {proc.poll()}):\n"
                        + log.read_text()[-3000:])
        time.sleep(0.5)
    return fr


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
# Issue 13: deployments that survive a long pause and a slow apply; one approval channel
# --------------------------------------------------------------------------------------------

YAML_CONFIG = """\
index: docs
source: ./corpus
text: {{chunker: {{kind: recursive, size: 150}}}}
vector: {{provider: openai, model: test-embed, revision: "2026-01", dimension: 16}}
embed: {{base_url: "{url}/v1", api_key_env: %s, timeout_s: 600, max_retries: 0}}
apply: {{shards: 4}}
cutover: {{min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}}
""" % EMBED_KEY_ENV


@contextlib.contextmanager
def _http(handle) -> Iterator[str]:
    """A loopback HTTP server in a thread: ``handle(path, json_body) -> (status, json_reply)``."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            n = int(self.headers.get("Content-Length") or 0)
            status, reply = handle(self.path, json.loads(self.rfile.read(n) or b"{}"))
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True, name="loopback-http").start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


class _SlowEmbeddings:
    """An OpenAI-compatible /embeddings endpoint whose answers are held until ``hold_s`` after the first
    request arrived: the apply that calls it takes at least that long."""

    def __init__(self, hold_s: float, dim: int = 16) -> None:
        self.hold_s, self.dim, self.first, self.requests = hold_s, dim, None, 0
        self.lock = threading.Lock()

    def _vec(self, text: str) -> list[float]:
        d = hashlib.sha256(text.encode()).digest()
        return [b / 127.5 - 1.0 for b in d[: self.dim]]

    def __call__(self, path: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            self.first = self.first or time.monotonic()
            self.requests += 1
            release = self.first + self.hold_s
        time.sleep(max(0.0, release - time.monotonic()))
        texts = body["input"]
        return 200, {"data": [{"index": i, "embedding": self._vec(t)} for i, t in enumerate(texts)],
                     "usage": {"prompt_tokens": sum(max(1, len(t) // 4) for t in texts)}}


def _yaml_workspace(root: Path, embed_url: str) -> Path:
    """A checkout as `prefect deploy` sees it: flows/ from this repository, reindex.yaml, a corpus and a
    queries file."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "flows", root / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SAMPLE / "corpus", root / "corpus")
    (root / "reindex.yaml").write_text(YAML_CONFIG.format(url=embed_url), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps({"query": q}) + "\n" for q in (
        "import hooks", "unicode source encoding", "generators and iterators")), encoding="utf-8")
    return root


def _plan_file(plans: Path) -> Path:
    files = [p for p in plans.glob("*.json") if p.name.count(".") == 1]
    assert len(files) == 1, files
    return files[0]


def _child_runs(parent_id: Any) -> list[Any]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with _client() as c:
        return c.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])))


@pytest.mark.soak  # ~235 s paused + an apply longer than the 60 s lease: `make test-fast` skips it
def test_prefect_yaml_deploy_then_pause_past_the_lease_approve_on_the_cli_and_slow_apply_complete(
    tmp_path: Path, prefect_server: dict, worker: Path
) -> None:
    """`prefect deploy --all` of flows/prefect.yaml; a reindex-reindex run (queries file) and a second
    index's run stay paused past the 60 s index lease and past the 225 s deployment-lease renewal; `reindex runs` lists both, a webhook is told of both;
    `reindex approve --reject` ends one with nothing changed, `reindex approve` resumes the other, whose
    apply then takes longer than the lease: apply → cutover on the queries → alias swapped → gc scheduled."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter
    from prefect.client.schemas.filters import FlowRunFilterState, FlowRunFilterStateType
    from prefect.client.schemas.objects import StateType

    from reindex import api
    from reindex.cli import main
    from reindex.orchestration import index_limit_name, notify_on_approval_requests

    hooks: list[dict] = []
    emb = _SlowEmbeddings(hold_s=LEASE_S + 5)
    with _http(lambda path, body: (hooks.append(body), (200, {}))[1]) as hook_url, _http(emb) as emb_url:
        ws = _yaml_workspace(tmp_path / "docs", emb_url)
        t_story = time.monotonic()
        deploy = subprocess.run(
            [str(PREFECT_BIN), "--no-prompt", "deploy", "--all", "--prefect-file", "flows/prefect.yaml"],
            cwd=ws, env={**prefect_server["env"], "REINDEX_WORKDIR": str(ws)}, capture_output=True, text=True,
            timeout=400)
        deploy_s = time.monotonic() - t_story
        assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
        with _client() as c:
            deps = {f: c.read_deployment_by_name(f"{f}/docs") for f in ("reindex-sync", "reindex-reindex", "reindex-gc")}
        # The fix: flows that pause hold no deployment slot (Prefect frees it at the pause); gc keeps one.
        assert deps["reindex-reindex"].global_concurrency_limit is None
        assert deps["reindex-sync"].global_concurrency_limit is None
        assert deps["reindex-gc"].global_concurrency_limit is not None
        assert deps["reindex-gc"].global_concurrency_limit.limit == 1
        assert {"queries", "k", "gate"} <= set(deps["reindex-reindex"].parameters)
        notify_on_approval_requests(hook_url + "/hook")
        cfg_no = _workspace(tmp_path / "rej", "flowrej")
        _deploy(cfg_no)

        fr = _run("reindex-reindex/docs", worker, poll_interval_s=1, queries="queries.jsonl")
        fr_no = _run("reindex-reindex/flowrej", worker, poll_interval_s=1)
        _wait(fr.id, _paused_with_form, "paused with its approval form", worker, timeout=240)
        _wait(fr_no.id, _paused_with_form, "paused with its approval form", worker, timeout=240)
        plan_file, plan_no = _plan_file(ws / "plans"), _plan_file(tmp_path / "rej" / "plans")
        plan = api.show_plan(plan_file)

        r = CliRunner().invoke(main, ["runs", "--json"])
        assert r.exit_code == 0, r.output
        waiting = {w["index"]: w for w in json.loads(r.output)}
        assert set(waiting) == {"docs", "flowrej"}, waiting
        w = waiting["docs"]
        assert (w["plan"], w["plan_hash"], w["flow_run_id"], w["flow"]) == (
            str(plan_file.resolve()), plan.plan_hash, str(fr.id), "reindex-reindex")
        assert w["peak_vectors"] == plan.body["cost"]["peak_vectors"] > 0
        assert w["peak_disk_bytes"] == plan.body["cost"]["footprint"]["peak"]["disk_bytes"]
        import datetime as dt

        assert dt.datetime.fromisoformat(w["deadline"]) > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=6)
        text = CliRunner().invoke(main, ["runs", "--index", "docs"]).output
        assert f"reindex approve {plan_file.resolve()} --by NAME" in text and "flowrej" not in text

        # Prefect's automation posts to the webhook for each paused run (plan, footprint, command).
        deadline = time.monotonic() + 120
        while len({h.get("body", "").split("plan ")[1][:12] for h in hooks if "plan " in h.get("body", "")}) < 2:
            assert time.monotonic() < deadline, f"webhook got {hooks}"
            time.sleep(1)
        told = next(h for h in hooks if plan.plan_hash[:12] in h["body"])
        assert f"reindex approve {plan_file.resolve()} --by NAME" in told["body"]
        assert f"{plan.body['cost']['peak_vectors']} vectors" in told["body"] and "docs" in told["subject"]

        # Stay paused past the index lease and past Prefect's deployment-lease renewal: the run is still
        # paused and the index slot still held (renewed by the paused process).
        with _client() as c:
            started = c.read_flow_run(fr.id).start_time
        while (dt.datetime.now(dt.timezone.utc) - started).total_seconds() < PAUSE_S:
            time.sleep(2)
        with _client() as c:
            state = c.read_flow_run(fr.id).state
            assert state.is_paused(), state
            assert state.state_details.deployment_concurrency_lease_id is None
            for index in ("docs", "flowrej"):
                assert c.read_global_concurrency_limit_by_name(index_limit_name(index)).active_slots == 1, index

        r = CliRunner().invoke(main, ["approve", str(plan_no), "--by", "erin", "--reject", "--note", "not this week"])
        assert r.exit_code == 0, r.output
        assert f"resumed flow run {fr_no.name} ({fr_no.id})" in r.output
        r = CliRunner().invoke(main, ["approve", str(plan_file), "--by", "alice", "--note", "go"])
        assert r.exit_code == 0, r.output
        assert f"resumed flow run {fr.name} ({fr.id}) of reindex-reindex/docs" in r.output

        done_no = _wait(fr_no.id, _final, "finished", worker, timeout=120)
        assert done_no.state.is_completed(), done_no.state
        done = _wait(fr.id, _final, "finished", worker, timeout=420)
        story_s = time.monotonic() - t_story
        assert done.state.is_completed(), done.state

    # The rejected index: nothing built, the rejection is on record and final.
    assert "rejected by erin (not this week); nothing changed" in _artifact(fr_no.id, "reindex-result-flowrej")
    assert json.loads(rejection_path(plan_no).read_text())["by"] == "erin"
    st_no = api.status(cfg_no)
    assert st_no["aliases"] == {} and st_no["populations"] == [] and st_no["lock"] is None
    again = CliRunner().invoke(main, ["approve", str(plan_no), "--by", "mallory"])
    assert again.exit_code != 0 and "was rejected by erin" in again.output, again.output

    # The approved index: an apply longer than the lease, cutover on the queries file, alias, gc.
    with _client() as c:
        applies = [r for r in _child_runs(fr.id) if c.read_flow(r.flow_id).name == "reindex-apply"]
    assert len(applies) == 1 and applies[0].state.is_completed(), applies
    apply_s = (applies[0].end_time - applies[0].start_time).total_seconds()
    assert apply_s > LEASE_S, f"apply took {apply_s:.0f} s: not longer than the {LEASE_S} s lease"
    assert emb.requests > 0
    approval = json.loads(approval_path(plan_file).read_text())
    assert (approval["by"], approval["plan_hash"]) == ("alice", plan.plan_hash)
    assert not rejection_path(plan_file).exists()
    cut = json.loads(plan_file.with_name(plan_file.stem + ".cutover.json").read_text())
    assert cut["queries_source"] == str((ws / "queries.jsonl").resolve()) and cut["swap"], cut
    st = api.status(ws / "reindex.yaml")
    assert st["aliases"] == {"docs": plan.body["identity"]["new"]["collection"]} and st["lock"] is None
    with _client() as c:
        gcs = c.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deps["reindex-gc"].id])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))))
        assert c.read_global_concurrency_limit_by_name(index_limit_name("docs")).active_slots == 0
    assert len(gcs) == 1, gcs
    assert gcs[0].expected_start_time > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=6)
    assert "approved by alice" in _artifact(fr.id, "reindex-result-docs")
    print(f"\n[issue 13] prefect deploy --all: {deploy_s:.1f} s; paused until {PAUSE_S} s after start; apply {apply_s:.1f} s; "
          f"deploy → completed run: {story_s:.1f} s")


# --------------------------------------------------------------------------------------------
# Issue 13 without a server: the decision records and the flow parameters
# --------------------------------------------------------------------------------------------


@pytest.fixture
def no_prefect_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PREFECT_API_URL and no Prefect profile: `reindex approve` can only record."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))


def test_a_rejection_revokes_an_approval_and_refuses_a_later_one(tmp_path: Path, no_prefect_api: None) -> None:
    from reindex import api
    from reindex.cli import main
    from reindex.errors import ApprovalError

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    r = CliRunner().invoke(main, ["approve", str(path), "--by", "carol", "--note", "ok"])
    assert r.exit_code == 0, r.output
    assert f"approved plan {plan.plan_hash[:12]} ({plan.kind}) by carol" in r.output
    assert "no Prefect API configured (PREFECT_API_URL): no paused run to resume" in r.output
    assert api.approval_status(path).by == "carol"

    r = CliRunner().invoke(main, ["approve", str(path), "--by", "bob", "--reject", "--note", "too big"])
    assert r.exit_code == 0, r.output
    assert f"rejected plan {plan.plan_hash[:12]} ({plan.kind}) by bob; recorded in {rejection_path(path)}" in r.output
    with pytest.raises(ApprovalError, match=r"approval by carol of plan \w+ was revoked: the plan was rejected by bob .* \(too big\)"):
        api.approval_status(path)
    with pytest.raises(ApprovalError, match="was rejected by bob .* run `reindex plan` again"):
        ws.apply(path)
    r = CliRunner().invoke(main, ["approve", str(path), "--by", "carol"])
    assert r.exit_code != 0 and "was rejected by bob" in r.output and "run `reindex plan` again" in r.output, r.output
    # The first rejection stays the record; a second one does not rewrite it.
    CliRunner().invoke(main, ["approve", str(path), "--by", "dave", "--reject"])
    assert json.loads(rejection_path(path).read_text())["by"] == "bob"

    # A rejection binds one plan hash: a new plan of the same change can be approved and applied.
    time.sleep(1.1)  # plans made in another second have another created_at, hence another hash
    plan2, path2 = ws.plan()
    assert plan2.plan_hash != plan.plan_hash
    api.approve_plan(path2, "carol")
    assert api.approval_status(path2).by == "carol"


def test_reindex_runs_without_a_prefect_api_lists_nothing(no_prefect_api: None) -> None:
    from reindex.cli import main

    r = CliRunner().invoke(main, ["runs"])
    assert (r.exit_code, r.output) == (0, "no run is waiting for approval\n")
    assert CliRunner().invoke(main, ["runs", "--json"]).output.strip() == "[]"


def test_cutover_parameters_are_checked_before_anything_runs(tmp_path: Path) -> None:
    from reindex.errors import ConfigError
    from reindex.orchestration import _cutover_options

    cfg = tmp_path / "reindex.yaml"
    (tmp_path / "q.jsonl").write_text('{"query": "x"}\n')
    assert _cutover_options(str(cfg), "q.jsonl", 5, "force") == {
        "queries": str((tmp_path / "q.jsonl").resolve()), "k": 5, "gate": "force"}
    assert _cutover_options(str(cfg), None, None, "enforce") == {"queries": None, "k": None, "gate": "enforce"}
    with pytest.raises(ConfigError, match="parameter gate='skip': expected one of enforce, force"):
        _cutover_options(str(cfg), None, None, "skip")
    with pytest.raises(ConfigError, match="parameter queries='missing.jsonl': .* is not a file"):
        _cutover_options(str(cfg), "missing.jsonl", None, "enforce")
    with pytest.raises(ConfigError, match="parameter k=0"):
        _cutover_options(str(cfg), None, 0, "enforce")


def test_index_lease_setting_refuses_what_prefect_would_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.foundation import settings
    from reindex.errors import ConfigError

    monkeypatch.delenv("REINDEX_INDEX_LEASE_S", raising=False)
    assert settings.index_lease_seconds() == 300
    monkeypatch.setenv("REINDEX_INDEX_LEASE_S", "60")
    assert settings.index_lease_seconds() == 60
    monkeypatch.setenv("REINDEX_INDEX_LEASE_S", "59")
    with pytest.raises(ConfigError, match="REINDEX_INDEX_LEASE_S='59': expected seconds ≥ 60"):
        settings.index_lease_seconds()


# --------------------------------------------------------------------------------------------
# Scale-out: the same plan through the thread runner and a local Dask cluster
# --------------------------------------------------------------------------------------------


def test_thread_and_dask_runners_build_the_identical_population(tmp_path: Path, prefect_server: dict) -> None:
    """Through prefect-dask too: with `dask-processes:2` the shard task runs land in two worker processes
    (which reach the same API through PREFECT_API_URL), stage their writes on the embedded store, and the
    flow, in this process, commits them (issue 23; before it every shard failed with a KeyError)."""
    pytest.importorskip("prefect_dask")
    from reindex import api
    from reindex.engine.execution import worker_name
    from reindex.runners.prefect import using_task_runner

    built = {}
    for runner in ("threads", "dask", "dask-processes:2"):
        ws = Workspace(tmp_path / runner.replace(":", "-"))
        plan, path = ws.plan()
        ws.approve(path)
        with using_task_runner(runner):
            r = api.apply_plan(path, ws.config, use_prefect=True)
        assert r.status == "done", r.report
        built[runner] = (plan.plan_hash, r.collection, ws.snapshot(r.collection))
        where = {s["worker"] for s in r.report["shards"]}
        assert (worker_name() in where) == (runner != "dask-processes:2"), (runner, where)
    (_h1, c1, s1), (_h2, c2, s2), (_h3, c3, s3) = built["threads"], built["dask"], built["dask-processes:2"]
    assert c1 == c2 == c3
    assert len(s1.ids) == plan.body["work"]["chunks_new"]
    s1.assert_same(s2)
    s1.assert_same(s3)


def test_unknown_task_runner_is_refused_with_the_choices() -> None:
    from reindex.errors import ConfigError
    from reindex.runners.prefect import make_task_runner

    with pytest.raises(ConfigError, match="expected threads, threads:N, dask, dask-processes"):
        make_task_runner("ray")


def test_scheduled_sync_beside_a_cli_apply_ends_completed_and_skipped(tmp_path: Path, prefect_server: dict) -> None:
    """The hourly `reindex-sync` run at the moment a `reindex apply` from a shell holds the index lock: it plans
    nothing and ends Completed with "skipped" (it used to plan, then fail on the apply's own writes)."""
    from reindex import api
    from reindex.books.locks import acquire_lock
    from reindex.orchestration import sync_flow

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.edit_documents()
    plans = tmp_path / "ws" / "plans"
    before = sorted(plans.glob("*.json"))
    lock = acquire_lock(ws.state(), "docs", "shell-host:31337:cafe", purpose="apply 0123456789ab (document-scoped)")
    try:
        state = sync_flow(config=str(ws.config), plans_dir=str(plans), return_state=True)
    finally:
        lock.release()
    assert state.is_completed(), state
    out = state.result()
    assert out["status"] == "skipped" and "shell-host:31337" in out["message"], out
    assert sorted(plans.glob("*.json")) == before, "the skipped sync planned"
    # With the lock free the next tick syncs the edits in place, through the same cycle.
    again = sync_flow(config=str(ws.config), plans_dir=str(plans))
    assert again["status"] == "done" and again["kind"] == "document-scoped", again
    assert api.make_plan(ws.config, out=None)[0].kind == "none"
TEMPORARY_SERVER_LINE = (
    "error: Prefect's temporary API server (started because no PREFECT_API_URL is set) did not answer within 1 s "
    "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; a busy machine starts it slowly): start a Prefect server "
    "(`prefect server start`) and set PREFECT_API_URL to it, or run without Prefect (`reindex apply --no-prefect "
    "PLAN`; from Python, runner=api.ThreadRunner())\n")


def test_a_temporary_server_that_does_not_start_is_one_line_with_the_two_ways_out(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ws = Workspace(tmp_path / "ws")
    _plan, path = ws.plan()
    env = subprocess_env(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1", PREFECT_HOME=str(tmp_path / "home"),
                         PREFECT_PROFILES_PATH=str(tmp_path / "home" / "profiles.toml"))
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run([str(PREFECT_BIN.with_name("reindex")), "apply", str(path), "-c", str(ws.config), "--prefect",
                        "--no-progress"],
                       cwd=ws.root, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 1
    assert r.stderr.splitlines()[-1] + "\n" == TEMPORARY_SERVER_LINE, r.stderr  # the CLI through PrefectRunner


