"""The read-only commands while a real ``reindex apply`` process builds a population on the embedded store.

The apply stops itself (SIGSTOP, ``REINDEX_PAUSE_AT``) after its first shard manifest, holding the index lock
and the store's one writer slot, exactly as a running apply does. ``status``, ``query``, ``show`` and
``gc --dry-run`` must answer through the read-only path; then the apply is let go and finishes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import REINDEX_BIN, Workspace, subprocess_env
from reindex.cli import main


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


@pytest.fixture()
def paused_apply(tmp_path: Path):
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    # Small embedding batches: several before the pause, so the apply has measured a rate (its ETA).
    _plan, path = ws.planned_change(size=120, extra="apply: {shards: 4, embed_batch_size: 8}")
    env = subprocess_env(REINDEX_PAUSE_AT="before-manifest:2", REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress",
                             "--no-prefect"], cwd=ws.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while not _stopped(proc.pid):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the apply never reached its pause point"
            time.sleep(0.1)
        yield ws, live, path, proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            os.kill(proc.pid, signal.SIGCONT)
            proc.communicate()


def _plan_tokens(path: Path) -> int:
    return json.loads(Path(path).read_text())["work"]["tokens_to_embed"]


def test_read_only_commands_answer_while_an_apply_holds_the_store(paused_apply) -> None:
    ws, live, path, proc = paused_apply
    env = subprocess_env()
    st = subprocess.run([str(REINDEX_BIN), "status", "--json", "-c", str(ws.config)], cwd=ws.root, env=env,
                        capture_output=True, text=True, timeout=120)
    assert st.returncode == 0, st.stderr
    body = json.loads(st.stdout)
    assert body["lock"]["pid"] == proc.pid and body["lock"]["purpose"].startswith("apply ")
    assert body["lock"]["since"] is not None and body["lock"]["lease_s"] > 0
    assert body["aliases"] == {"docs": live}
    pops = {p["collection"]: p for p in body["populations"]}
    building = [p for p in pops.values() if p["state"] == "building"]
    assert len(building) == 1 and building[0]["progress"]["shards_done"] == 1
    assert building[0]["progress"]["shards_total"] == 4 and building[0]["points"] is None
    # Tokens done / planned, the measured rate and an ETA, from the progress record the apply keeps.
    planned = _plan_tokens(path)
    prog = building[0]["progress"]
    assert prog["tokens_planned"] == planned and 0 < building[0]["tokens_done"] == prog["tokens_done"] < planned
    assert prog["tokens_per_second"] > 0 and building[0]["eta_seconds"] == prog["eta_seconds"] >= 0
    assert pops[live]["eta_seconds"] is None and pops[live]["tokens_done"] is None
    assert pops[live]["state"] == "live" and pops[live]["points"] > 0

    runner = CliRunner()
    text = runner.invoke(main, ["status", "-c", str(ws.config)])
    assert text.exit_code == 0, text.output
    assert f"locked by pid {proc.pid} on " in text.output and "shards 1/4 done" in text.output
    assert f"/{planned:,} tokens, " in text.output and " tok/s, ETA " in text.output
    q = runner.invoke(main, ["query", "style guide", "-c", str(ws.config), "--k", "3", "--json"])
    assert q.exit_code == 0, q.output
    assert len(json.loads(q.output)["results"]) == 3
    gc = runner.invoke(main, ["gc", "--dry-run", "-c", str(ws.config), "--json"])
    assert gc.exit_code == 0, gc.output
    assert json.loads(gc.output) == {"actions": []}
    show = runner.invoke(main, ["show", str(path)])
    assert show.exit_code == 0, show.output
    cut = runner.invoke(main, ["cutover", str(path), "-c", str(ws.config)])
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(body["lock"]["since"]))
    assert (cut.exit_code, cut.stderr) == (1, (
        f"error: population {building[0]['collection']} is still being built: an apply is running (pid {proc.pid} "
        f"on {body['lock']['host']} since {since}); wait for it to finish, then run `reindex cutover` again\n"))

    os.kill(proc.pid, signal.SIGCONT)  # let the apply go: it finishes as if nobody had looked
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    after = runner.invoke(main, ["status", "-c", str(ws.config), "--json"])
    assert [p["state"] for p in json.loads(after.output)["populations"]] == ["live", "ready"]
    assert json.loads(after.output)["lock"] is None


def test_status_before_any_build_reads_nothing_and_creates_nothing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    r = CliRunner().invoke(main, ["status", "-c", str(ws.config)])
    assert (r.exit_code, r.output) == (0, "index docs: alias → none\n")
    assert not (ws.root / ".reindex" / "qdrant").exists()


def test_an_apply_whose_lock_was_overwritten_behind_its_back_stops_at_its_next_commit_point(paused_apply) -> None:
    """The audit's second writer: while the apply is stopped after its first shard manifest, its lock is
    overwritten by another holder (as a contender in another PID namespace did). Resumed, the apply
    confirms its lock before its next commit point, sees the other holder and stops: exit 1, one line, no
    further chunk-manifest part or shard manifest, the other holder's lock left as it is. (Its heartbeat
    renews every 40 s: without the confirmation it would have finished exit 0.)"""
    from reindex.books.manifests import chunk_manifest_keys, read_shard_manifest
    from reindex.planner import read_plan

    ws, _live, path, proc = paused_apply
    plan = read_plan(path)
    target = plan.body["identity"]["new"]["collection"]
    state = ws.state()
    assert len(chunk_manifest_keys(state, "docs", target)) == 1  # paused before its second shard's records
    ours = json.loads(ws.lock_file.read_text())
    theirs = {**ours, "owner": "intruder:1:x", "purpose": "apply elsewhere", "nonce": "theirs",
              "token": ours["token"] + 1, "process": {**ours["process"], "pid_ns": 1, "pid": 1}}
    ws.lock_file.write_text(json.dumps(theirs))
    os.kill(proc.pid, signal.SIGCONT)
    out, _err = proc.communicate(timeout=120)
    lost = (f"LockLost: lost the lock on index 'docs' (token {ours['token']}, {ours['purpose']}): it is now held by "
            f"intruder:1:x (apply elsewhere, token {ours['token'] + 1}); stopped before the next write. Check "
            "`reindex status`, then run the command again (work already recorded is kept)")
    assert proc.returncode == 1 and out.startswith("running in-process;"), out
    failed = [line for line in out.splitlines() if line.startswith("  failed: shard ")]
    assert len(failed) == 3 and all(line.endswith(lost) for line in failed), out
    done = [s for s in range(4) if read_shard_manifest(state, "docs", target, plan.plan_hash, s) is not None]
    assert len(done) == 1, f"shard manifests written after the lock was lost: {done}"
    assert len(chunk_manifest_keys(state, "docs", target)) == 1
    assert json.loads(ws.lock_file.read_text()) == theirs
