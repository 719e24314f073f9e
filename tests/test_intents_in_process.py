"""Alias-move intents and two-step gc deletion, stopped *in this process* at the same crash points the
kill tests of test_safety.py use with SIGKILL in a child process.

Why both: mutation testing (bench/mutation/README.md) runs only in-process tests, since a child process
imports the unmutated sources; without these, reconcile and the gc recovery could be broken without a
mutant being killed. A crash point here raises an exception no code catches (BaseException), so nothing
after it runs, as after a kill.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers_index import Workspace, switched_workspace

from reindex import api
from reindex.decisions import cutover as co
from reindex.books.locks import LockLost
from reindex.books.manifests import read_live, read_population
from reindex.context import backends


class Killed(BaseException):
    """Stands for SIGKILL at a crash point."""


@pytest.fixture
def switched(tmp_path: Path) -> dict:
    """A live; B built beside it from an approved chunker change (not cut over yet)."""
    return switched_workspace(tmp_path / "ws")


@contextlib.contextmanager
def _killed_at(monkeypatch: pytest.MonkeyPatch, point: str) -> Iterator[None]:
    """The body must stop at crash point ``point``; the crash hook is removed afterwards."""
    def crashpoint(name: str) -> None:
        if name == point:
            raise Killed(name)

    monkeypatch.setattr(co, "crashpoint", crashpoint)
    with pytest.raises(Killed):
        yield
    monkeypatch.undo()


def _history(ws: Workspace) -> list[dict]:
    folder = ws.root / ".reindex" / "indexes" / "docs" / "history"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_a_cutover_stopped_after_the_swap_is_completed_by_reconcile(switched: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    with _killed_at(monkeypatch, "cutover-after-swap"):
        api.cutover(path, ws.config)
    state = ws.state()
    intent = co.pending_intent(state, "docs")
    assert intent is not None and (intent["op"], intent["from"], intent["to"]) == ("cutover", a, b)
    assert co.pending_intent(state, "other") is None
    assert api.status(ws.config)["pending"]["to"] == b
    assert ws.alias() == b and read_live(state, "docs").collection == a  # moved, not yet recorded
    with ws.store() as s:
        # Until reconciled, both are protected from gc: B by the alias, A by live.json.
        for name in (a, b):
            with pytest.raises(co.CutoverError, match=f"{name} is served by an alias"):
                co.gc_candidates(s, state, "docs", older_than_s=0, retention_s=0, force=True, names=[name])
        assert co.gc_candidates(s, state, "docs", older_than_s=0, retention_s=0, force=True) == []
        done = co.reconcile(s, state, "docs")
        assert co.reconcile(s, state, "docs") is None  # nothing left to do
    # (The history record's "recovered": True overrides the op name in what reconcile returns.)
    assert (done["recovered"], done["outcome"], done["from"], done["to"]) == (True, "completed", a, b)
    assert co.pending_intent(state, "docs") is None
    live = json.loads((ws.root / ".reindex" / "indexes" / "docs" / "live.json").read_text())
    assert (live["collection"], live["previous"]) == (b, a)
    assert read_population(state, "docs", b).state == "live"
    assert read_population(state, "docs", a).state == "retired"
    [*_, last] = _history(ws)
    assert (last["from"], last["to"], last["recovered"]) == (a, b, True)
    back = api.rollback(ws.config)  # the recorded previous population is where rollback goes
    assert (back["from"], back["to"]) == (b, a) and ws.alias() == a


def test_a_cutover_stopped_before_the_swap_is_undone_by_reconcile(switched: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    with _killed_at(monkeypatch, "cutover-before-swap"):
        api.cutover(path, ws.config)
    state = ws.state()
    assert co.pending_intent(state, "docs")["to"] == b
    with ws.store() as s:
        done = co.reconcile(s, state, "docs")
    assert (done["outcome"], done["to"], done["alias"]) == ("undone", b, a)
    assert co.pending_intent(state, "docs") is None and ws.alias() == a
    assert read_live(state, "docs").collection == a and read_population(state, "docs", b).state == "ready"
    assert api.cutover(path, ws.config).report["swap"]["to"] == b and ws.alias() == b


def test_a_rollback_stopped_after_the_swap_is_completed_without_a_previous(switched: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    assert api.cutover(path, ws.config).report["swap"]
    with _killed_at(monkeypatch, "rollback-after-swap"):
        api.rollback(ws.config)
    st = api.status(ws.config)
    assert st["pending"]["op"] == "rollback" and st["aliases"]["docs"] == a
    assert api.gc(ws.config) == []  # every command under the lock reconciles first (this one deletes nothing)
    state = ws.state()
    assert co.pending_intent(state, "docs") is None
    live = json.loads((ws.root / ".reindex" / "indexes" / "docs" / "live.json").read_text())
    assert (live["collection"], live["previous"]) == (a, None)  # a rollback is not itself rolled back
    assert read_population(state, "docs", b).state == "retired"
    assert read_population(state, "docs", a).state == "live"


@pytest.mark.parametrize("point", ["gc-marked", "gc-collection-deleted"])
def test_a_gc_stopped_between_its_steps_finishes_on_the_next_gc(switched: dict, monkeypatch: pytest.MonkeyPatch,
                                                                  point: str) -> None:
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    assert api.cutover(path, ws.config).report["swap"]
    with _killed_at(monkeypatch, point):
        api.gc(ws.config, names=[a], force=True)
    state = ws.state()
    assert read_population(state, "docs", a).state == "deleting"
    with ws.store() as s:
        assert s.collection_exists(a) == (point == "gc-marked")  # marked first, deleted second
        # A deleting population is gc's to finish, whatever its age and the retention window.
        [c] = co.gc_candidates(s, state, "docs", older_than_s=10**9, retention_s=10**9, force=False)
        assert (c["collection"], c["state"], c["protected"]) == (a, "deleting", None)
        # A named population must exist as a record or a collection; a bare collection is "unknown".
        with pytest.raises(co.CutoverError, match="docs__nope: no such population of index 'docs'"):
            co.gc_candidates(s, state, "docs", older_than_s=0, retention_s=0, force=False, names=["docs__nope"])
        s.create_collection("docs__stranger", dimension=ws.cfg().vector.dimension, distance="cosine")
        [x] = co.gc_candidates(s, state, "docs", older_than_s=0, retention_s=0, force=False, names=["docs__stranger"])
        assert (x["collection"], x["state"], x["age_days"], x["protected"]) == ("docs__stranger", "unknown", None, None)
        # delete_population refuses the live one on its own, whoever calls it.
        with pytest.raises(co.CutoverError, match=f"{b} is served by an alias \\(live\\); gc never deletes"):
            co.delete_population(s, state, "docs", b)
    with pytest.raises(co.CutoverError, match=f"{b} is served by an alias"):
        api.gc(ws.config, names=[b], force=True)
    deleted: list[str] = []
    real_state_store = backends.state_store

    def recording_state_store(cfg: object) -> object:
        inner = real_state_store(cfg)
        real_delete = inner.delete
        inner.delete = lambda key: (deleted.append(key), real_delete(key))[1]
        return inner

    monkeypatch.setattr(backends, "state_store", recording_state_store)
    done = api.gc(ws.config)
    assert [(x["collection"], x["action"]) for x in done] == [(a, "deleted")]
    assert state.list(f"indexes/docs/populations/{a}/") == []
    # The record goes last: until then the population stays marked deleting.
    ours = [k for k in deleted if f"/populations/{a}/" in k]
    assert len(ours) > 1 and ours[-1] == f"indexes/docs/populations/{a}/population.json"
    assert read_population(state, "docs", b).state == "live" and ws.alias() == b


@pytest.mark.parametrize("step", ["cutover", "rollback"])
def test_an_alias_move_whose_lock_was_taken_over_stops_before_the_move(
        switched: dict, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Between verifying the population and moving the alias, another owner takes the index lock over:
    the move is fenced (LockLost), the alias and the state stay as they were, no intent is left."""
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    if step == "rollback":
        assert api.cutover(path, ws.config).report["swap"]
    before = ws.alias()
    real_verify = co.require_verified

    def verify_then_lose_the_lock(store: object, state: object, index: str, collection: str, action: str) -> None:
        real_verify(store, state, index, collection, action)
        key = "indexes/docs/lock.json"
        body = json.loads(state.get(key))
        body.update(owner="b:2:y", purpose="apply 2", token=body["token"] + 1)
        state.put(key, json.dumps(body).encode())

    monkeypatch.setattr(co, "require_verified", verify_then_lose_the_lock)
    with pytest.raises(LockLost, match="now held by b:2:y"):
        api.cutover(path, ws.config) if step == "cutover" else api.rollback(ws.config)
    monkeypatch.undo()
    state = ws.state()
    assert ws.alias() == before and co.pending_intent(state, "docs") is None
    assert read_live(state, "docs").collection == before
    assert {read_population(state, "docs", c).state for c in (a, b)} == {"live", "ready" if step == "cutover" else "retired"}
