"""`reindex sync` / ``Index.sync``: one plan → apply → cutover → gc cycle as one library call, for cron; and
the ``Index`` handle that owns a config and its backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.api import Index, SyncPolicy
from reindex.cli import main
from reindex.books.locks import acquire_lock


def _sync(ws: Workspace, code: int) -> dict:
    r = CliRunner().invoke(main, ["sync", "-c", str(ws.config), "--plans", str(ws.plans), "--json"])
    assert r.exit_code == code, (r.exit_code, r.output)
    return _consistent(json.loads(r.output))


def _consistent(out: dict) -> dict:
    """Every result names its index; one about a plan names that plan's file, hash and kind, and a waiting
    or refusing message the plan's short hash and kind."""
    assert out["index"] == "docs", out
    if out["plan_file"] is not None:
        body = json.loads(Path(out["plan_file"]).read_text())
        assert (out["plan_hash"], out["kind"]) == (body["plan_hash"], body["kind"]), out
        if out["outcome"] in ("awaiting-approval", "rejected"):
            assert f"plan {body['plan_hash'][:12]} ({body['kind']}) " in out["message"], out
    return out


def _plan_files(ws: Workspace) -> list[Path]:
    return sorted(p for p in ws.plans.glob("*.json") if p.name.count(".") == 1) if ws.plans.exists() else []


def test_sync_carries_out_each_kind_and_waits_for_approval_once(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    first = _sync(ws, 0)  # nothing live yet: the initial build needs no approval here, so it is built and cut over
    assert first["outcome"] == "cut-over" and first["kind"] == "initial"
    assert ws.alias() == first["cutover"]["shadow"]
    assert _sync(ws, 0)["outcome"] == "nothing-to-do"
    n_plans = len(_plan_files(ws))

    edited = ws.edit_documents()
    synced = _sync(ws, 0)
    assert synced["outcome"] == "applied-in-place" and synced["kind"] == "document-scoped"
    assert synced["apply"]["status"] == "done" and ws.alias() == first["cutover"]["shadow"]
    assert sorted(synced["apply"]["actual"].keys()) and edited
    assert _sync(ws, 0)["outcome"] == "nothing-to-do"

    ws.write_config(120, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")  # a chunker change: approval
    waiting = _sync(ws, 2)
    assert waiting["outcome"] == "awaiting-approval" and waiting["kind"] == "pipeline-scoped/text"
    assert Path(waiting["plan_file"]).is_file() and "reindex approve" in waiting["message"]
    again = _sync(ws, 2)  # the same inputs: the same plan, no second plan file
    assert again["plan_file"] == waiting["plan_file"]
    assert len(_plan_files(ws)) == n_plans + 2  # the in-place sync's plan and this one
    live_before = ws.alias()

    api.approve_plan(waiting["plan_file"], "alice", "smaller chunks")
    done = _sync(ws, 0)
    assert done["outcome"] == "cut-over" and done["plan_file"] == waiting["plan_file"]
    assert ws.alias() == done["cutover"]["shadow"] != live_before
    plan, _ = api.make_plan(ws.config, out=None)
    assert plan.kind == "none"


def test_a_rejected_plan_is_not_carried_out(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.write_config(120)
    waiting = _sync(ws, 2)
    api.reject_and_resume(waiting["plan_file"], "bob", "too big")
    rejected = _sync(ws, 0)
    assert rejected["outcome"] == "rejected" and "rejected by bob" in rejected["message"]
    assert (rejected["index"], rejected["plan_file"], rejected["plan_hash"], rejected["kind"]) == (
        "docs", waiting["plan_file"], waiting["plan_hash"], "pipeline-scoped/text")
    assert f"plan {waiting['plan_hash'][:12]} (pipeline-scoped/text)" in rejected["message"]


def test_sync_beside_a_running_writer_is_skipped_and_touches_nothing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.edit_documents()
    before = _plan_files(ws)
    lock = acquire_lock(ws.state(), "docs", "otherhost:4242:abcd", purpose="apply 123 (document-scoped)")
    try:
        skipped = _sync(ws, 0)
    finally:
        lock.release()
    assert skipped["outcome"] == "skipped" and skipped["index"] == "docs"
    assert "otherhost:4242" in skipped["message"]
    assert _plan_files(ws) == before  # not even planned: the other writer's changes would make it drift
    assert _sync(ws, 0)["outcome"] == "applied-in-place"  # the next tick catches up


class _Counting:
    """Wraps an embedder or a store and counts the calls made through it."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)
        if callable(attr):
            def counted(*a, **k):
                self.calls += 1
                return attr(*a, **k)
            return counted
        return attr


def test_index_open_uses_what_it_is_given_and_closes_only_its_own(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    cfg = ws.cfg()
    real_store = api.vector_store_for(cfg)
    store = _Counting(real_store)
    embedder = _Counting(api.make_embedder(cfg.vector))
    try:
        with Index.open(ws.config, store=store, embedder=embedder) as ix:
            plan, path = ix.plan(out=ws.plans)
            report = ix.apply(path)
            assert report.status == "done"
            assert embedder.calls > 0, "apply embedded with another embedder than the one given"
            writes = store.calls
            assert writes > 0, "apply wrote through another store than the one given"
            ix.cutover(path)
            assert ix.status()["aliases"] == {"docs": report.collection}
            hits = ix.query("PEP", k=3).results
            assert len(hits) == 3 and store.calls > writes
        assert real_store.count(report.collection) > 0  # the handle did not close the store it was given
    finally:
        real_store.close()


def test_index_status_is_the_cli_status(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    r = CliRunner().invoke(main, ["status", "-c", str(ws.config), "--json"])
    assert r.exit_code == 0
    with Index.open(ws.config) as ix:
        st = ix.status()
    cli = json.loads(r.output)
    for pop in (*cli["populations"], *st["populations"]):
        pop.pop("age_days")
    assert json.loads(json.dumps(st)) == cli


def test_a_closed_handle_refuses_calls(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ix = Index.open(ws.config)
    ix.close()
    with pytest.raises(api.ReindexError, match="closed"):
        ix.status()


def test_policy_can_leave_new_populations_to_an_explicit_apply(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    with Index.open(ws.config) as ix:
        r = ix.sync(SyncPolicy(plans_dir=ws.plans, apply_new_populations=False))
    assert r.outcome == "awaiting-approval" and "reindex apply" in r.message
    _consistent(json.loads(json.dumps(r.as_dict())))
    assert ws.alias() is None


def test_sync_after_a_rollback_does_not_go_forward_again(tmp_path: Path) -> None:
    from helpers_index import switched_workspace

    t = switched_workspace(tmp_path / "ws")
    ws = t["ws"]
    ws.cutover(t["path"])
    api.rollback(ws.config)
    assert ws.alias() == t["a"]
    back = _sync(ws, 2)  # the config still describes B, whose approved plan was carried out before
    assert back["outcome"] == "awaiting-approval" and "moved back since" in back["message"]
    assert "--force" not in back["message"]  # it passed its gate: going forward again needs no force
    assert ws.alias() == t["a"], "a cron tick undid the rollback"


def test_after_a_rollback_of_a_forced_cutover_the_way_forward_says_force(tmp_path: Path) -> None:
    strict = "cutover: {min_recall_delta: 1.0, min_overlap: 1.0}"  # a gate no change can pass
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_overlap: 0.0}")
    a = ws.build_live()
    plan, path = ws.planned_change(size=120, extra=strict)
    ws.apply(path)
    assert not ws.cutover(path).passed and ws.alias() == a
    forced = ws.cutover(path, force=True)
    assert not forced.passed and forced.report["forced_by"] == "tester" and ws.alias() != a
    api.rollback(ws.config)
    back = _sync(ws, 2)
    assert back["outcome"] == "awaiting-approval" and "moved back since" in back["message"]
    assert f"reindex cutover {path} --force (the cutover was forced by tester past a failed gate)" in back["message"]


def test_sync_after_a_cli_apply_carries_out_its_cutover_through_the_gate(tmp_path: Path) -> None:
    """Built by `reindex apply`, approved, not cut over: the sync goes on to the cutover (it used to answer "was
    carried out before … (a rollback?)" on every tick); with a gate that cannot pass it reports gate-failed."""
    from helpers_index import switched_workspace

    t = switched_workspace(tmp_path / "ws")  # B built from an approved plan; lenient gates
    ws = t["ws"]
    done = _sync(ws, 0)
    assert done["outcome"] == "cut-over" and done["cutover"]["shadow"] == t["b"], done
    assert "moved back" not in done["message"] and ws.alias() == t["b"]

    t2 = switched_workspace(tmp_path / "ws2")
    ws2 = t2["ws"]
    ws2.write_config(120, extra="cutover: {min_recall_delta: 2.0}")  # a recall gain of +2 cannot be reached
    failed = _sync(ws2, 3)
    assert failed["outcome"] == "gate-failed" and ws2.alias() == t2["a"], failed


def test_a_missing_live_record_is_rebuilt_from_the_alias_instead_of_planning_an_initial_build(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    (ws.root / ".reindex" / "indexes" / "docs" / "live.json").unlink()
    plan, _ = ws.plan()
    assert plan.kind == "none", plan.kind  # not an initial build of every document
    from reindex.books.manifests import read_live

    rec = read_live(ws.state(), "docs")
    assert rec is not None and rec.collection == live and rec.state == "live"


def _doc_holds(ws: Workspace, doc_id: str, sentence: str) -> bool:
    """Whether the live alias holds ``sentence`` in one of ``doc_id``'s chunks (as a reader finds it)."""
    found = api.query("any", ws.config, k=200, filters={"doc_id": doc_id})
    return any(sentence in r["page_content"] for r in found.results)


def _append(ws: Workspace, doc_id: str, sentence: str) -> None:
    path = ws.corpus / doc_id
    path.write_text(path.read_text(encoding="utf-8") + f"\n\n{sentence}\n", encoding="utf-8")


def test_document_edits_beside_a_chunker_change_reach_the_live_index_at_once(tmp_path: Path) -> None:
    """Seed 001's two tickets: three documents are edited and the chunk size changes in the same sync. The edits
    are applied in place to the live population under its own config; the chunker change waits for approval;
    after approval (and one more edit, synced in place with the approval carried over) the next sync builds and
    cuts over a population that holds every edit."""
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    ws = Workspace(tmp_path / "ws", extra=lenient)
    a = ws.build_live()
    docs = sorted(p.name for p in ws.corpus.iterdir())[:3]
    for n, doc in enumerate(docs):
        _append(ws, doc, f"Zebra clause {n} names the quantum socket of the first ticket.")
    ws.write_config(120, extra=lenient)  # the second ticket: the chunker

    plan, path = ws.plan()  # `reindex plan` shows both parts
    part = plan.numbers.in_place_part
    assert plan.kind == "pipeline-scoped/text" and part is not None
    assert part["kind"] == "document-scoped" and part["documents"]["edited"] == 3 and (ws.plans / part["file"]).is_file()
    r = CliRunner().invoke(main, ["plan", "-c", str(ws.config), "--out", str(ws.plans)])
    assert "part 1, in place now: document-scoped plan" in r.output and "part 2, below" in r.output

    waiting = _sync(ws, 2)
    assert waiting["outcome"] == "awaiting-approval" and waiting["kind"] == "pipeline-scoped/text", waiting
    assert waiting["in_place"]["kind"] == "document-scoped" and waiting["in_place"]["status"] == "done"
    assert ws.alias() == a  # still the old population, with the edits in it
    for n, doc in enumerate(docs):
        assert _doc_holds(ws, doc, f"Zebra clause {n} names the quantum socket")
    assert _sync(ws, 2)["outcome"] == "awaiting-approval"  # the same pipeline plan, nothing else to sync

    ws.approve(Path(waiting["plan_file"]))
    _append(ws, docs[0], "Zebra clause 9 arrived after the approval.")  # edits keep coming
    done = _sync(ws, 0)
    assert done["outcome"] == "cut-over", done
    assert done["in_place"]["kind"] == "document-scoped"  # the new edit went in place first
    approval = json.loads(next((ws.plans / "approvals").glob(Path(done["plan_file"]).stem + "*")).read_text())
    assert approval["plan_hash"] == done["plan_hash"] and "carried over from plan" in approval["note"]
    b = done["cutover"]["shadow"]
    assert ws.alias() == b != a
    for n, doc in enumerate(docs):
        assert _doc_holds(ws, doc, f"Zebra clause {n} names the quantum socket")
    assert _doc_holds(ws, docs[0], "Zebra clause 9 arrived after the approval.")


def test_an_approval_is_not_carried_over_once_the_change_grows_past_the_bound(tmp_path: Path) -> None:
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    ws = Workspace(tmp_path / "ws", extra=lenient + "\napproval: {carry_over: 0.01}")
    a = ws.build_live()
    ws.write_config(120, extra=lenient + "\napproval: {carry_over: 0.01}")
    waiting = _sync(ws, 2)
    ws.approve(Path(waiting["plan_file"]))
    for doc in sorted(p.name for p in ws.corpus.iterdir())[:6]:  # far more than 1 % more to embed
        _append(ws, doc, " ".join(f"Growth sentence {i} of {doc} adds tokens." for i in range(40)))
    again = _sync(ws, 2)
    assert again["outcome"] == "awaiting-approval" and again["plan_hash"] != waiting["plan_hash"], again
    assert again["in_place"]["status"] == "done" and ws.alias() == a


def test_the_json_of_a_cycle_names_every_field_scripts_read(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    out = _sync(ws, 0)
    assert sorted(out) == ["apply", "cutover", "gc", "in_place", "index", "kind", "message", "outcome", "plan_file",
                           "plan_hash", "replanned"]
    assert out["index"] == "docs" and out["gc"] == [] and out["replanned"] == 0
    assert out["plan_hash"] == json.loads(Path(out["plan_file"]).read_text())["plan_hash"]


def _with_inputs(plan, **changes):
    from reindex.planner import Plan

    body = json.loads(json.dumps(plan.body))
    for where, value in changes.items():
        if where in ("index", "kind"):
            body[where] = value
        elif where == "baseline":
            body["inputs"]["baseline"] = value
        else:
            body["inputs"][where]["digest"] = value
    return Plan(body)


def test_same_inputs_means_every_input_is_the_same(tmp_path: Path) -> None:
    from reindex.usecases.cycle import _same_inputs

    ws = Workspace(tmp_path / "ws")
    plan, _ = api.make_plan(ws.config, out=None)
    assert _same_inputs(plan, _with_inputs(plan))
    for change in ({"index": "other"}, {"kind": "document-scoped"}, {"config": "0" * 64}, {"corpus": "0" * 64},
                   {"baseline": {"collection": "docs-elsewhere"}}):
        assert not _same_inputs(plan, _with_inputs(plan, **change)), change
        assert not _same_inputs(_with_inputs(plan, **change), plan), change


def test_the_earlier_plan_is_the_newest_with_the_same_inputs(tmp_path: Path) -> None:
    from reindex.usecases.cycle import _earlier_plan

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    ws.write_config(120)
    _, other = ws.plan()
    d = tmp_path / "plans"
    d.mkdir()
    for name, source in [("2026-01-01-docs-a.json", path), ("2026-01-02-docs-b.json", path),
                         ("2026-01-03-docs-c.json", other), ("2026-01-04-docs-d.run.json", path)]:
        (d / name).write_bytes(source.read_bytes())
    (d / "2026-01-05-docs-e.json").write_text("not a plan")
    assert _earlier_plan(plan, d) == d / "2026-01-02-docs-b.json"
    assert _earlier_plan(plan, tmp_path / "nowhere") is None


def test_a_cycle_deletes_retired_populations_past_retention_only_when_its_policy_says(tmp_path: Path) -> None:
    extra = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass, retention_days: 0}\napproval: {pipeline_scoped: false}"
    for gc in (False, True):
        ws = Workspace(tmp_path / f"ws-{gc}", extra=extra)
        with Index.open(ws.config) as ix:
            first = ix.sync(SyncPolicy(plans_dir=ws.plans, gc=gc))
        ws.write_config(120, extra=extra)  # a chunker change (a handle keeps the config it was opened with)
        with Index.open(ws.config) as ix:
            second = ix.sync(SyncPolicy(plans_dir=ws.plans, gc=gc))
        assert first.outcome == "cut-over" and second.outcome == "cut-over", (first.message, second.message)
        with ws.store() as s:
            left = set(s.list_collections())
        old = first.cutover["shadow"]
        if gc:
            assert [a["collection"] for a in second.gc] == [old] and {a["action"] for a in second.gc} == {"deleted"}
            assert old not in left
        else:
            assert second.gc == [] and old in left
        assert second.cutover["shadow"] in left


def test_plans_go_to_plans_in_the_working_folder_and_nothing_to_do_says_so(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    monkeypatch.chdir(tmp_path)
    with Index.open(ws.config) as ix:
        built = ix.sync(SyncPolicy())
        idle = ix.sync(SyncPolicy())
    assert built.outcome == "cut-over" and Path(built.plan_file).resolve().parent == tmp_path / "plans"
    assert idle.as_dict() | {"message": "", "plan_hash": ""} == {
        "outcome": "nothing-to-do", "index": "docs", "message": "", "plan_file": None,
        "plan_hash": "", "kind": "none", "apply": None, "cutover": None, "gc": [], "in_place": None, "replanned": 0}
    assert len(idle.plan_hash) == 32 and idle.plan_hash != built.plan_hash  # the no-op plan just made
    assert idle.message == "nothing to do: index 'docs' matches its config and corpus" and idle.exit_code == 0


def test_a_cycle_holds_the_index_lock_as_a_sync_throughout(tmp_path: Path) -> None:
    from reindex.books.locks import read_lock

    ws = Workspace(tmp_path / "ws")
    seen: list = []

    class Watching(_Counting):
        def embed(self, texts):
            lock = read_lock(ws.state(), "docs")
            seen.append((lock.held, lock.purpose))
            return self.inner.embed(texts)

    with Index.open(ws.config, embedder=Watching(api.make_embedder(ws.cfg().vector))) as ix:
        assert ix.sync(SyncPolicy(plans_dir=ws.plans)).outcome == "cut-over"
    assert seen and set(seen) == {(True, "sync")}
    assert not read_lock(ws.state(), "docs").held
