"""The live mode (`reindex sync --watch`, issue 34 item 4): one process holds the lock and the writer and applies
each change as it arrives; a reader in another process (here, this test process) sees each batch once published;
a mass removal still stops for approval; SIGTERM ends the watch with the lock released."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

from helpers_index import REINDEX_BIN, Workspace, subprocess_env

from reindex import api
from reindex.api import Index
from reindex.books.locks import read_lock


def _found(querier: api.Querier, doc: str, sentence: str) -> bool:
    got = querier.query("any", k=200, filters={"doc_id": doc})
    return any(sentence in r["page_content"] for r in got.results)


def _wait(condition, what: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _append(ws: Workspace, doc: str, sentence: str) -> None:
    path = ws.corpus / doc
    path.write_text(path.read_text(encoding="utf-8") + f"\n\n{sentence}\n", encoding="utf-8")


def test_the_watch_applies_each_change_readers_see_it_and_sigterm_releases_the_lock(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    docs = sorted(p.name for p in ws.corpus.iterdir())
    proc = subprocess.Popen([str(REINDEX_BIN), "sync", "--watch", "--interval", "0.2", "-c", str(ws.config),
                             "--plans", str(ws.plans), "--json"], cwd=ws.root, env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[dict] = []
    reader = threading.Thread(target=lambda: lines.extend(json.loads(x) for x in proc.stdout if x.strip()),
                              daemon=True)
    reader.start()
    try:
        _wait(lambda: read_lock(ws.state(), "docs").purpose == "sync --watch", "the watch holds the lock")
        with api.Querier(ws.config) as q:
            for n in range(3):  # three batches, each seen by a reader of another process once published
                _append(ws, docs[n], f"Watched sentence {n} about the live mode.")
                _wait(lambda: _found(q, docs[n], f"Watched sentence {n} about"), f"edit {n} served")
            # a mass removal is not applied: it waits for approval while the watch goes on
            removed = docs[6:]
            for d in removed:
                (ws.corpus / d).rename(tmp_path / d)
            _wait(lambda: any(x["outcome"] == "awaiting-approval" for x in lines), "the removal waits for approval")
            assert all(q.query("any", k=1, filters={"doc_id": d}).results for d in removed[:3])
            for d in removed:
                (tmp_path / d).rename(ws.corpus / d)
            _append(ws, docs[3], "Watched sentence after the pause.")
            _wait(lambda: _found(q, docs[3], "Watched sentence after the pause."), "a later edit served")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(60)
        reader.join(10)
    assert rc == 0, proc.stderr.read()
    applied = [x for x in lines if x["outcome"] == "applied-in-place"]
    assert len(applied) >= 4 and all(x["kind"] == "document-scoped" for x in applied)
    assert not read_lock(ws.state(), "docs").held  # released at the end
    assert ws.plan()[0].kind == "none"  # the watch left the index matching the corpus


def test_an_index_watch_holds_one_lock_and_one_writer_for_all_its_cycles(tmp_path: Path, monkeypatch) -> None:
    """In-process: the writer is opened once for every cycle (not per batch), and a competing writer is refused
    for the whole watch, not only while a batch is applied."""
    from reindex.errors import LockHeld
    from reindex.adapters.stores.edge import EdgeStore

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    monkeypatch.chdir(ws.root)  # the handle's plans go to plans/ of the working directory
    opened = []  # writers opened on the store's folder
    real = EdgeStore.__init__
    monkeypatch.setattr(EdgeStore, "__init__", lambda self, *a, **kw: opened.append(1) or real(self, *a, **kw))
    docs = sorted(p.name for p in ws.corpus.iterdir())
    stop = threading.Event()
    seen: list = []

    def on_cycle(r) -> None:
        seen.append(r.outcome.value)
        if len(seen) == 1:
            _append(ws, docs[0], "Edited between two cycles.")

            def other_writer() -> None:  # another thread: its own context, so it must contend for the lock
                try:
                    api.apply_plan(ws.plan()[1], ws.config)
                except LockHeld:
                    seen.append("refused")

            t = threading.Thread(target=other_writer)
            t.start()
            t.join(60)
        if len(seen) >= 4:
            stop.set()

    with Index.open(ws.config) as ix:
        summary = ix.watch(interval=0.05, stop=stop, on_cycle=on_cycle)
    assert "refused" in seen and "applied-in-place" in seen, seen
    assert summary.applied >= 1 and summary.stopped_by == "stop"
    assert len(opened) == 1  # one writer for every cycle (the other thread was refused before opening one)


def test_the_watch_flow_applies_changes_for_its_duration(tmp_path: Path, monkeypatch, request) -> None:
    """The Prefect-served live mode: a `reindex-watch` run applies the change waiting in the source, then ends
    when its duration is up, releasing the lock."""
    from helpers_index import prefect_api_url

    prefect_api_url(request.config)
    from reindex.orchestration import watch_flow

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    doc = sorted(p.name for p in ws.corpus.iterdir())[0]
    _append(ws, doc, "Watched by the flow.")
    monkeypatch.chdir(ws.root)
    out = watch_flow(config=str(ws.config), plans_dir=str(ws.plans), interval_s=0.2, duration_s=3.0)
    assert out["applied"] >= 1 and out["outcomes"]["applied-in-place"] >= 1 and out["stopped_by"] == "stop"
    with api.Querier(ws.config) as q:
        assert _found(q, doc, "Watched by the flow.")
    assert not read_lock(ws.state(), "docs").held
