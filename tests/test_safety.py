"""Never lose or corrupt what readers see (issue 11): only verified populations go live, every alias move
is recoverable after a kill, re-running a finished step is a no-op, gc is careful."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env
from reindex import api
from reindex.cutover import CutoverError
from reindex.manifests import PopulationRecord, read_live, read_population, write_population


def _cli(ws: Workspace, *args: str, crash_at: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(**({"REINDEX_CRASH_AT": crash_at} if crash_at else {}))
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([str(REINDEX_BIN), *args, "-c", str(ws.config)], cwd=ws.root, env=env, text=True,
                          capture_output=True, timeout=300, input=stdin)


@pytest.fixture
def switched(tmp_path: Path) -> dict:
    """A live; B built beside it from an approved chunker change (not cut over yet)."""
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_overlap: 0.0}")
    a = ws.build_live()
    plan, path = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_overlap: 0.0}")
    b = ws.apply(path).collection
    return {"ws": ws, "a": a, "b": b, "path": path, "plan": plan}


def test_rollback_refuses_a_population_that_was_never_verified(switched: dict) -> None:
    t = switched
    ws, b = t["ws"], t["b"]
    state = ws.state()
    rec = read_population(state, "docs", b)
    write_population(state, PopulationRecord(rec.index, rec.collection, rec.config, rec.identity, "building",
                                             rec.created_at, rec.updated_at))
    with pytest.raises(CutoverError, match=f"refusing to roll back to {b}: {b} is building"):
        api.rollback(ws.config, to=b)
    assert ws.alias() == t["a"]
    # A collection reindex never built (no record) cannot be made live either.
    with ws.store() as s:
        s.create_collection("docs__stranger", dimension=ws.cfg().vector.dimension, distance="cosine")
    with pytest.raises(CutoverError, match="docs__stranger has no population record"):
        api.rollback(ws.config, to="docs__stranger")


def test_a_population_missing_points_is_refused_by_rollback_and_cutover(switched: dict) -> None:
    t = switched
    ws, b = t["ws"], t["b"]
    victim = ws.manifest_rows(b)[0].point_id
    with ws.store() as s:
        s.delete_points(b, [victim])
    with pytest.raises(CutoverError, match=f"{b} holds .* points but its chunk manifest has"):
        api.rollback(ws.config, to=b)
    c = api.cutover(t["path"], ws.config)
    assert not c.report["swap"] and ws.alias() == t["a"]


def test_a_kill_right_after_the_swap_is_completed_by_the_next_command(switched: dict) -> None:
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    killed = _cli(ws, "cutover", str(path), crash_at="cutover-after-swap")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ws.alias() == b  # the alias moved ...
    assert read_live(ws.state(), "docs").collection == a  # ... the bookkeeping did not
    again = _cli(ws, "cutover", str(path))
    assert again.returncode == 0, again.stderr
    assert "already cut over" in again.stdout
    live = read_live(ws.state(), "docs")
    assert live.collection == b and read_population(ws.state(), "docs", a).state == "retired"
    assert json.loads((ws.root / ".reindex" / "indexes" / "docs" / "live.json").read_text())["previous"] == a
    plan = _cli(ws, "plan", "--json")
    assert plan.returncode == 0 and json.loads(plan.stdout)["kind"] == "none", plan.stdout
    back = _cli(ws, "rollback")
    assert back.returncode == 0, back.stderr
    assert ws.alias() == a


def test_a_kill_before_the_swap_leaves_everything_as_it_was(switched: dict) -> None:
    ws, a, path = switched["ws"], switched["a"], switched["path"]
    killed = _cli(ws, "cutover", str(path), crash_at="cutover-before-swap")
    assert killed.returncode == -signal.SIGKILL
    st = api.status(ws.config)
    assert st["aliases"]["docs"] == a
    done = _cli(ws, "cutover", str(path))
    assert done.returncode == 0, done.stderr + done.stdout
    assert ws.alias() == switched["b"]


def test_rerunning_a_finished_cutover_is_a_no_op(switched: dict) -> None:
    ws, b, path = switched["ws"], switched["b"], switched["path"]
    assert api.cutover(path, ws.config).report["swap"]
    r = api.cutover(path, ws.config)
    assert r.report["already"] and r.report["swap"] is None and ws.alias() == b
    cli = _cli(ws, "cutover", str(path))
    assert cli.returncode == 0 and cli.stdout.startswith("already cut over")


def test_gc_keeps_a_population_live_within_the_retention_window_unless_forced(switched: dict) -> None:
    ws, a, path = switched["ws"], switched["a"], switched["path"]
    assert api.cutover(path, ws.config).report["swap"]  # A was live until a moment ago
    r = _cli(ws, "gc", "--older-than", "0d", "--yes", "--json")
    assert r.returncode == 0, r.stderr
    [kept] = json.loads(r.stdout)["actions"]
    assert kept["collection"] == a and kept["action"] == "kept" and "rollback window" in kept["protected"]
    with ws.store() as s:
        assert s.collection_exists(a)
    # Forced, but no terminal and no --yes: nothing is deleted, and the exit code says so.
    r = _cli(ws, "gc", "--older-than", "0d", "--force")
    assert r.returncode == 1 and "pass --yes" in r.stderr and f"not confirmed {a}" in r.stdout
    with ws.store() as s:
        assert s.collection_exists(a)
    r = _cli(ws, "gc", "--older-than", "0d", "--force", "--yes")
    assert r.returncode == 0 and f"deleted {a}" in r.stdout
    with ws.store() as s:
        assert not s.collection_exists(a)


def test_a_kill_inside_gc_never_leaves_a_population_that_can_go_live(switched: dict) -> None:
    ws, a, path = switched["ws"], switched["a"], switched["path"]
    assert api.cutover(path, ws.config).report["swap"]
    killed = _cli(ws, "gc", a, "--force", "--yes", crash_at="gc-collection-deleted")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert read_population(ws.state(), "docs", a).state == "deleting"
    # Even if the collection comes back empty (local mode after a kill), it is refused.
    with ws.store() as s:
        if not s.collection_exists(a):
            s.create_collection(a, dimension=ws.cfg().vector.dimension, distance="cosine")
    with pytest.raises(CutoverError, match=f"{a} is deleting"):
        api.rollback(ws.config)
    assert ws.alias() == switched["b"]
    done = api.gc(ws.config)  # the next gc finishes the deletion
    assert [(x["collection"], x["action"]) for x in done] == [(a, "deleted")]
    with ws.store() as s:
        assert not s.collection_exists(a)
    assert ws.state().list(f"indexes/docs/populations/{a}/") == []
