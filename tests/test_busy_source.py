"""Live mode and cron on a busy source (issue 43, item 1): a source that moves while it is planned is applied as
the plan read it, the rest caught up or left to the next cycle; a plan whose inputs moved all the same is made
again by the cycle itself (``replanned``); a watch rides out transient errors with backoff and says so, and a
change that waits for approval is said once."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers_index import REINDEX_BIN, Workspace, subprocess_env

from reindex import api
from reindex.api import Index, SyncPolicy
from reindex.books.locks import read_lock
from reindex.cli import main
from reindex.errors import TransientError

LENIENT = "cutover: {min_recall_delta: -1.0, min_overlap: 0.0}"


def _wait(condition, what: str, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _found(querier: api.Querier, doc: str, sentence: str) -> bool:
    got = querier.query("any", k=500, filters={"doc_id": doc})
    return any(sentence in r["page_content"] for r in got.results)


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:  # one small append: a reader sees it whole or not at all
        f.write(f"\n\n{line}\n")


def _live(ws: Workspace) -> str:
    from reindex.books.manifests import read_live

    return read_live(ws.state(), "docs").collection


def test_a_watch_rides_out_edits_one_second_apart_and_ends_equal_to_a_build_from_scratch(tmp_path: Path) -> None:
    """Done when (issue 43): `reindex sync --watch --interval 0.3` while another thread edits files in steps 1 s
    apart (the same few files again and again, so that edits land between a plan and its apply): the watch is still
    running at the end, a reader finds the last edit, and the population equals a build from scratch of the corpus
    the edits left."""
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    docs = sorted(p.name for p in ws.corpus.iterdir())[:3]
    proc = subprocess.Popen([str(REINDEX_BIN), "sync", "--watch", "--interval", "0.3", "-c", str(ws.config),
                             "--plans", str(ws.plans), "--json"], cwd=ws.root, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[dict] = []
    reader = threading.Thread(target=lambda: lines.extend(json.loads(x) for x in proc.stdout if x.strip()),
                              daemon=True)
    reader.start()
    steps = 10
    done = threading.Event()

    def edit() -> None:
        for n in range(steps):
            _append(ws.corpus / docs[n % len(docs)], f"Busy sentence {n} written while the watch runs.")
            if n + 1 < steps:
                time.sleep(1.0)  # steps 1 s apart, whatever the watch is doing
        done.set()

    try:
        _wait(lambda: read_lock(ws.state(), "docs").purpose == "sync --watch", "the watch holds the lock")
        editor = threading.Thread(target=edit, daemon=True)
        editor.start()
        _wait(done.is_set, "the edits are written")
        last = steps - 1
        with api.Querier(ws.config) as q:
            _wait(lambda: _found(q, docs[last % len(docs)], f"Busy sentence {last} written"), "the last edit served")
        _wait(lambda: api.make_plan(ws.config, out=None)[0].kind == "none", "the index matches the corpus")
        assert proc.poll() is None, f"the watch ended: {proc.stderr.read()}"
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        reader.join(10)
    assert rc == 0, proc.stderr.read()
    assert lines and all("outcome" in x and "replanned" in x for x in lines)
    assert all(x["outcome"] in ("applied-in-place", "nothing-to-do") for x in lines), lines
    assert not read_lock(ws.state(), "docs").held

    scratch = Workspace(tmp_path / "scratch")
    shutil.rmtree(scratch.corpus)
    shutil.copytree(ws.corpus, scratch.corpus)
    scratch.build_live()
    ws.snapshot(_live(ws)).assert_same(scratch.snapshot(_live(scratch)))


def test_cron_syncs_beside_a_file_appended_every_0_7_s_each_exit_0_with_their_edits(tmp_path: Path) -> None:
    """Done when (issue 43): `reindex sync` three times while a file is appended every 0.7 s: each exits 0, and each
    applied every line written before it started (a reader finds it when it exits)."""
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    doc = sorted(p.name for p in ws.corpus.iterdir())[0]
    written: list[int] = []
    stop = threading.Event()

    def appender() -> None:
        n = 0
        while not stop.is_set():
            _append(ws.corpus / doc, f"Appended line {n} of the busy file.")
            written.append(n)
            n += 1
            stop.wait(0.7)

    t = threading.Thread(target=appender, daemon=True)
    t.start()
    outs = []
    try:
        _wait(lambda: len(written) >= 2, "the file is being appended to")
        with api.Querier(ws.config) as q:
            for _ in range(3):
                before = written[-1]
                p = subprocess.run([str(REINDEX_BIN), "sync", "-c", str(ws.config), "--plans", str(ws.plans), "--json"],
                                   cwd=ws.root, env=subprocess_env(), capture_output=True, text=True, timeout=300)
                assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
                out = json.loads(p.stdout)
                outs.append(out)
                assert out["outcome"] in ("applied-in-place", "nothing-to-do"), out
                assert _found(q, doc, f"Appended line {before} of the busy file."), (before, out)
    finally:
        stop.set()
        t.join(10)
    assert any(o["outcome"] == "applied-in-place" for o in outs)


def _editing_after_each_plan(monkeypatch: pytest.MonkeyPatch, ws: Workspace, times: int) -> list[int]:
    """Edit a document right after each of the next ``times`` plans a cycle makes (between the plan and its
    apply: the build's drift check then sees another corpus)."""
    import reindex.usecases.cycle as cycle

    real = cycle._plan_file
    edits: list[int] = []
    doc = sorted(ws.corpus.iterdir())[1]

    def plan_file(fresh, plans_dir):
        got = real(fresh, plans_dir)
        if len(edits) < times:
            edits.append(len(edits))
            _append(doc, f"Moved after plan {len(edits)}.")
        return got

    monkeypatch.setattr(cycle, "_plan_file", plan_file)
    return edits


def test_a_sync_plans_a_build_again_when_its_corpus_moved_and_says_how_often(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    edits = _editing_after_each_plan(monkeypatch, ws, 2)
    r = CliRunner().invoke(main, ["sync", "-c", str(ws.config), "--plans", str(ws.plans), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["outcome"] == "cut-over" and out["replanned"] == 2 and len(edits) == 2
    assert api.make_plan(ws.config, out=None)[0].kind == "none"  # the third plan read the corpus as it is


def test_a_sync_whose_plans_keep_drifting_stops_after_its_replans_in_one_line(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    edits = _editing_after_each_plan(monkeypatch, ws, 100)
    r = CliRunner().invoke(main, ["sync", "-c", str(ws.config), "--plans", str(ws.plans)])
    assert r.exit_code == 1 and len(edits) == SyncPolicy().replans + 1
    assert r.output.count("\n") == 1 and "the corpus was " in r.output
    assert f"(planned {SyncPolicy().replans + 1} times in this sync; each plan's inputs moved before it could be " \
           "applied: run `reindex sync` again, or `reindex sync --watch`, which retries with backoff)" in r.output
    assert ws.alias() is None and not read_lock(ws.state(), "docs").held


class _Blinking:
    """A state store that does not answer while ``down`` is set (a blip of the object store)."""

    def __init__(self, store) -> None:
        self._store, self.down, self.refused = store, threading.Event(), 0

    def __getattr__(self, name: str):
        attr = getattr(self._store, name)
        if name not in ("get", "put", "list", "exists", "get_versioned") or not callable(attr):
            return attr

        def call(*a, **kw):
            if self.down.is_set() and threading.current_thread().name != f"reindex-lock-docs":
                self.refused += 1
                raise TransientError(f"{name} on the state store: connection refused (a test's blip)")
            return attr(*a, **kw)

        return call


def test_a_watch_rides_out_a_state_store_blip_with_backoff_and_says_so(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    doc = sorted(ws.corpus.iterdir())[0]
    state = _Blinking(ws.state())
    seen: list = []
    stop = threading.Event()

    def on_cycle(r) -> None:
        seen.append(r)
        if len(seen) == 1:
            state.down.set()  # the next cycles fail: the state store does not answer
            _append(doc, "Written during the outage.")
        elif r.outcome == "retrying" and sum(x.outcome == "retrying" for x in seen) == 2:
            state.down.clear()  # it answers again
        elif r.outcome == "applied-in-place":
            stop.set()

    with Index.open(ws.config, state=state) as ix:
        summary = ix.watch(SyncPolicy(plans_dir=ws.plans), interval=0.05, stop=stop, on_cycle=on_cycle)
    retrying = [r for r in seen if r.outcome == "retrying"]
    assert len(retrying) == 2 and state.refused >= 2
    assert "connection refused" in retrying[0].error and retrying[0].retry_in == pytest.approx(0.05)
    assert retrying[1].retry_in == pytest.approx(0.1)  # the backoff doubles
    d = retrying[0].as_dict()
    assert d["outcome"] == "retrying" and d["error"] == retrying[0].error and "trying again in 0.05 s" in d["message"]
    assert seen[-1].outcome == "applied-in-place" and summary.retries == 2 and summary.stopped_by == "stop"
    with api.Querier(ws.config) as q:
        assert _found(q, doc.name, "Written during the outage.")


def test_a_watch_ends_on_a_fatal_error(tmp_path: Path) -> None:
    from reindex.errors import LockLost

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    seen: list = []

    def on_cycle(r) -> None:
        seen.append(r)
        lock = json.loads(ws.lock_file.read_text())
        ws.lock_file.write_text(json.dumps({**lock, "nonce": "someone-else"}))  # taken over behind its back
        _append(sorted(ws.corpus.iterdir())[0], "An edit the next cycle would write.")  # its writes confirm the lock

    with Index.open(ws.config) as ix, pytest.raises(LockLost):
        ix.watch(SyncPolicy(plans_dir=ws.plans), interval=0.05, on_cycle=on_cycle)
    assert len(seen) == 1


def test_a_watch_says_once_that_a_change_waits_for_approval_and_plans_nothing_until_it_is_approved(
        tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    ws.build_live()
    ws.write_config(120, extra=LENIENT)  # a chunker change: it needs approval
    seen: list = []
    stop = threading.Event()
    planned: list[int] = []
    import reindex.usecases.plan as plan_mod

    real = plan_mod.plan_change

    def counting(req):
        planned.append(1)
        return real(req)

    def on_cycle(r) -> None:
        seen.append(r)
        if r.outcome == "cut-over":
            stop.set()

    mp = pytest.MonkeyPatch()
    mp.setattr(plan_mod, "plan_change", counting)
    try:
        with Index.open(ws.config) as ix:
            t = threading.Thread(target=lambda: ix.watch(SyncPolicy(plans_dir=ws.plans), interval=0.05, stop=stop,
                                                         on_cycle=on_cycle), daemon=True)
            t.start()
            _wait(lambda: seen, "the first cycle")
            waiting = seen[0]
            assert waiting.outcome == "awaiting-approval" and "this watch carries it out once it is approved" in \
                waiting.message and "then `reindex sync` again" not in waiting.message
            after = len(planned)
            time.sleep(0.5)  # ten intervals: a watch that planned again would have planned by now
            assert len(seen) == 1 and len(planned) == after, "the watch planned again while nothing moved"
            api.approve_plan(waiting.plan_file, "alice")
            t.join(120)
    finally:
        mp.undo()
    assert [r.outcome.value for r in seen] == ["awaiting-approval", "cut-over"]


@pytest.mark.parametrize("interval", ["nan", "inf", "-inf", "0", "-1"])
def test_watch_refuses_an_interval_that_is_not_a_finite_positive_number_in_one_line(tmp_path: Path,
                                                                                     interval: str) -> None:
    ws = Workspace(tmp_path / "ws")
    r = CliRunner().invoke(main, ["sync", "--watch", "--interval", interval, "-c", str(ws.config)])
    assert r.exit_code == 1 and r.output == (f"error: --interval {float(interval)}: must be a finite number of seconds "
                                             "above 0, e.g. 2\n"), r.output


def test_a_mass_removal_after_the_plan_is_not_caught_up_but_left_for_an_approved_plan(tmp_path: Path) -> None:
    """The drift check no longer refuses a plan for documents it does not change, so the catch-up meets them; it
    replays edits, but never removes more than approval.max_removed_share of the index unpriced (invariant 8)."""
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    docs = sorted(ws.corpus.iterdir())
    _append(docs[0], "An edit the plan prices.")
    plan, path = ws.plan()
    assert plan.body["work"]["affected_documents"] == [docs[0].name]
    for d in docs[6:]:  # 18 of 24 documents go after the plan: far past the 5 % that needs approval
        d.rename(tmp_path / d.name)
    r = ws.apply(path)
    assert r.status == "done" and "left for the next sync" in r.report["catch_up"]["deferred"]
    with ws.store() as s:
        held = {p.payload["doc_id"] for p in s.scroll(live)}
    assert {d.name for d in docs} <= held  # nothing removed unpriced
    nxt, _ = ws.plan()
    assert nxt.body["work"]["documents"]["removed"] == 18 and nxt.body["approval"]["required"]


def test_the_live_mode_keeps_plans_keep_plans_and_never_one_that_built_a_population(tmp_path: Path) -> None:
    """Issue 43: live mode wrote a plan and three reports per change and nothing pruned them (5 edits, 20 files).
    With plans.keep: 2, the folder holds the newest two in-place plans and the plan that built the population."""
    ws = Workspace(tmp_path / "ws", extra="plans: {keep: 2}\n")
    ws.build_live()
    built = sorted(p.name for p in ws.plans.glob("*-initial-*"))
    assert built and any(n.endswith(".run.json") for n in built)
    doc = sorted(ws.corpus.iterdir())[0]
    seen: list = []
    stop = threading.Event()

    def on_cycle(r) -> None:
        seen.append(r)
        if len(seen) < 5:
            _append(doc, f"Edit {len(seen)} of the watched document.")
        else:
            stop.set()

    _append(doc, "Edit 0 of the watched document.")
    with Index.open(ws.config) as ix:
        ix.watch(SyncPolicy(plans_dir=ws.plans), interval=0.05, stop=stop, on_cycle=on_cycle)
    assert [r.outcome.value for r in seen] == ["applied-in-place"] * 5
    in_place = sorted(p.name for p in ws.plans.glob("*-document-scoped-*.json") if p.name.count(".") == 1)
    assert len(in_place) == 2 and {Path(r.plan_file).name for r in seen[-2:]} == set(in_place)
    assert sorted(p.name for p in ws.plans.glob("*-initial-*")) == built  # the build's plan and reports stay
    left = {p.name.split(".", 1)[0] for p in ws.plans.iterdir() if p.is_file()}
    assert left == {n.removesuffix(".json") for n in in_place} | {n.split(".", 1)[0] for n in built}


def test_a_watch_keeps_its_last_good_config_when_the_file_is_edited_into_one_that_does_not_load(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    doc = sorted(ws.corpus.iterdir())[0]
    seen: list = []
    stop = threading.Event()

    def on_cycle(r) -> None:
        seen.append(r)
        if len(seen) == 1:
            ws.config.write_text("index: [an edit half made\n", encoding="utf-8")
            _append(doc, "Edited while the config is broken.")
        elif r.outcome == "applied-in-place":
            ws.write_config(120)  # the edit finished: a chunker change, planned against from the next cycle
        elif r.outcome == "awaiting-approval":
            stop.set()

    with caplog.at_level(logging.WARNING, logger="reindex"), Index.open(ws.config) as ix:
        ix.watch(SyncPolicy(plans_dir=ws.plans), interval=0.05, stop=stop, on_cycle=on_cycle)
    assert [r.outcome.value for r in seen if r.outcome != "nothing-to-do"] == ["applied-in-place", "awaiting-approval"]
    assert seen[-1].kind == "pipeline-scoped/text"  # the config file as it is now, not the one the handle opened with
    said = [r for r in caplog.records if "no longer loads" in r.getMessage()]
    assert len(said) == 1 and "syncing with the config it had" in said[0].getMessage()
