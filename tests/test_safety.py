"""Never lose or corrupt what readers see (issue 11): only verified populations go live, every alias move
is recoverable after a kill, re-running a finished step is a no-op, gc is careful."""

from __future__ import annotations

import os

import json
import signal
import subprocess
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env, switched_workspace
from reindex import api
from reindex.decisions.cutover import CutoverError
from reindex.errors import PlanError
from reindex.books.manifests import Population, read_live, read_population, write_population


@pytest.fixture
def embed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every text the hash embedder embeds in this process is logged here (one digest a line)."""
    path = tmp_path / "embed.log"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(path))
    return path


def _cli(ws: Workspace, *args: str, crash_at: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = subprocess_env(**({"REINDEX_CRASH_AT": crash_at} if crash_at else {}))
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([str(REINDEX_BIN), *args, "-c", str(ws.config)], cwd=ws.root, env=env, text=True,
                          capture_output=True, timeout=300, input=stdin)


@pytest.fixture
def switched(tmp_path: Path) -> dict:
    """A live; B built beside it from an approved chunker change (not cut over yet)."""
    return switched_workspace(tmp_path / "ws")


def test_rollback_refuses_a_population_that_was_never_verified(switched: dict) -> None:
    t = switched
    ws, b = t["ws"], t["b"]
    state = ws.state()
    rec = read_population(state, "docs", b)
    write_population(state, Population(rec.index, rec.collection, rec.config_json, rec.identity, "building",
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


def test_a_sampled_point_holding_another_text_is_refused_by_rollback(switched: dict) -> None:
    # verify_population samples manifest rows (every len/32-th, from the first) and compares each stored
    # point's fingerprint with its row's: the first row is always sampled.
    from reindex.decisions.cutover import verify_population
    from reindex.books.manifests import read_chunk_manifest

    t = switched
    ws, b = t["ws"], t["b"]
    row = next(iter(read_chunk_manifest(ws.state(), "docs", b)))
    with ws.store() as s:
        assert verify_population(s, ws.state(), "docs", b) == []
        point = s.retrieve(b, [row.point_id])[0]
        s.overwrite_payload(b, {row.point_id: {**point.payload, "fingerprint": "0" * 32}})
    with pytest.raises(CutoverError, match=f"point {row.point_id} of {row.doc_id} holds another text than its "
                                           "manifest row"):
        api.rollback(ws.config, to=b)
    assert ws.alias() == t["a"]


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


# --------------------------------------------------------------------------------------------
# Read errors, emptied sources, operational fields, self-approved plans, reuse after a rollback
# --------------------------------------------------------------------------------------------


def _points_of(ws: Workspace, doc_id: str) -> int:
    alias = ws.alias()
    with ws.store() as s:
        return s.count(alias, doc_id=doc_id)


def test_an_unreadable_empty_or_binary_document_keeps_its_live_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    docs = sorted(p.name for p in ws.corpus.iterdir())
    eio, empty, binary = docs[0], docs[1], docs[2]
    before = {d: _points_of(ws, d) for d in (eio, empty, binary)}
    assert all(before.values())
    (ws.corpus / empty).write_bytes(b"")
    (ws.corpus / binary).write_bytes(b"\x00\x01\x02binary\x00" * 10)
    edited = ws.edit_documents()  # a real change beside them, so the plan is applied in place
    st = (ws.corpus / eio).stat()  # its listing moved (the folder cursor reads only files whose pair moved)
    os.utime(ws.corpus / eio, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    real = Path.open

    def open_(self: Path, *a, **kw):  # the folder source reads through Path.open (then checks where it is)
        if self.name == eio:
            raise OSError(5, "Input/output error", str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "open", open_)
    plan, path = ws.plan()
    w = plan.body["work"]
    assert plan.kind == "document-scoped"
    assert w["removed_documents"] == [] and w["documents"]["removed"] == 0
    assert w["unreadable_documents"] == sorted([eio, empty, binary])
    reasons = {b["doc_id"]: b["reason"] for b in w["bad_documents"]}
    assert "Input/output error" in reasons[eio] and reasons[empty].startswith("empty")
    assert reasons[binary].startswith("binary")
    assert not plan.body["approval"]["required"], plan.body["approval"]
    r = ws.apply(path)
    assert r.status == "done" and r.report["actual"]["deleted"] >= 0
    monkeypatch.undo()
    assert {d: _points_of(ws, d) for d in (eio, empty, binary)} == before
    assert all(_points_of(ws, d) for d in edited)


def test_an_emptied_source_cannot_be_applied_without_approval(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    for f in ws.corpus.iterdir():
        f.unlink()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped" and len(plan.body["work"]["removed_documents"]) == 24
    reasons = plan.body["approval"]["reasons"]
    assert plan.body["approval"]["required"]
    assert any("no readable document" in x for x in reasons) and any("removes 24 of 24" in x for x in reasons)
    r = _cli(ws, "apply", str(path), "--no-progress")
    assert r.returncode == 1 and "needs approval" in r.stderr
    with ws.store() as s:
        assert s.count("docs") > 0


def test_an_empty_source_never_plans_an_initial_build_silently(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    for f in ws.corpus.iterdir():
        f.unlink()
    plan, _ = ws.plan()
    assert plan.kind == "initial" and plan.body["approval"]["required"]
    assert any("no readable document" in x for x in plan.body["approval"]["reasons"])


OPERATIONAL = ("apply: {shards: 5, embed_batch_size: 7}\n"
               "cost: {usd_per_mtok: 0.5, tokens_per_minute: 1000}\n"
               "approval: {max_tokens: 5000000, max_usd: 100.0, max_removed_share: 0.5}\n"
               "cutover: {k: 5, probes: 8, retention_days: 1.0}\n"
               "embed: {max_retries: 1}\n")


def test_operational_fields_change_nothing_that_is_built(tmp_path: Path) -> None:
    """Every operational field changes between two runs: the unchanged corpus re-plans as none, and an
    in-place sync under the new shard count gives the population the old settings would have."""
    ref = Workspace(tmp_path / "ref")
    ref.build_live()
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.config.write_text(ws.config.read_text().replace("apply: {shards: 4}\n", "") + OPERATIONAL, encoding="utf-8")
    plan, _ = ws.plan()
    assert plan.kind == "none", plan.body["explanation"]
    gone = sorted(p.name for p in ws.corpus.iterdir())[5]
    for w in (ws, ref):
        w.edit_documents()
        (w.corpus / gone).unlink()
        plan, path = w.plan()
        assert plan.kind == "document-scoped"
        if plan.body["approval"]["required"]:
            w.approve(path)
        r = w.apply(path)
        assert r.status == "done", r.report["failures"]
        assert r.report["actual"]["deleted"] > 0
    ws.snapshot(ws.alias()).assert_same(ref.snapshot(ref.alias()))
    assert [(x.doc_id, x.ordinal, x.point_id) for x in ws.manifest_rows(ws.alias())] == \
        [(x.doc_id, x.ordinal, x.point_id) for x in ref.manifest_rows(ref.alias())]
    again, _ = ws.plan()
    assert again.kind == "none"


def test_a_plan_made_before_the_workspace_moved_still_applies(tmp_path: Path) -> None:
    """Issue 22: after moving a workspace, ``plan`` called the move operational but ``apply`` refused a plan
    made before it as "config changed" (the digest held absolute source/state/store paths)."""
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped"
    if plan.body["approval"]["required"]:
        ws.approve(path)
    (tmp_path / "ws").rename(tmp_path / "moved")
    moved = object.__new__(Workspace)
    moved.root = tmp_path / "moved"
    path = moved.plans / path.name
    # What lives at the locations still binds the plan: against another corpus it is refused ...
    doc = moved.corpus / sorted(plan.numbers.affected_documents)[0]  # a document the plan changes: in its scope
    original, st = doc.read_bytes(), doc.stat()
    doc.write_text("changed\n", encoding="utf-8")
    with pytest.raises(PlanError, match=r"the source moved since the plan in the documents it changes \(read from its "
                                         r"cursor: .* at planning, now") as info:
        moved.apply(path)
    assert "config changed" not in str(info.value)
    doc.write_bytes(original)
    os.utime(doc, ns=(st.st_atime_ns, st.st_mtime_ns))  # the bytes and the listing as they were at planning
    r = moved.apply(path)  # ... and the moved workspace itself is the same inputs
    assert r.status == "done", r.report
    assert moved.plan()[0].kind == "none"


def _tamper(path: Path, edit) -> None:
    from reindex.planner import seal

    body = json.loads(path.read_text(encoding="utf-8"))
    body.pop("plan_hash")
    edit(body)
    path.write_text(json.dumps(seal(body).body, indent=2), encoding="utf-8")


def test_a_self_approved_plan_file_is_refused(tmp_path: Path) -> None:
    from reindex.planner.approvals import ApprovalError
    from reindex.errors import PlanError

    ws = Workspace(tmp_path / "ws")
    old = ws.build_live()
    ws.write_config(120)
    plan, path = ws.plan()
    assert plan.body["approval"]["required"]

    def no_approval(body: dict) -> None:
        body["approval"] = {"required": False, "reasons": []}
        body["config"]["approval"]["pipeline_scoped"] = False

    _tamper(path, no_approval)
    with pytest.raises(ApprovalError, match="pipeline-scoped/text plans need approval"):
        ws.apply(path)
    _tamper(path, lambda b: b.update(kind="document-scoped"))
    with pytest.raises(PlanError, match="the plan says document-scoped but the live index and the config make it "
                                        "pipeline-scoped/text"):
        ws.apply(path)
    with ws.store() as s:
        assert s.list_collections() == [old]


def test_an_understated_document_scoped_plan_stops_at_the_token_limit(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.write_config(150, extra="approval: {max_tokens: 50}")
    ws.edit_documents()
    plan, path = ws.plan()
    assert plan.body["approval"]["required"]  # far more than 50 tokens to embed
    _tamper(path, lambda b: (b["work"].update(tokens_to_embed=10), b.update(approval={"required": False, "reasons": []})))
    r = ws.apply(path)  # the check at apply passes (10 tokens) but the embedder stops at the limit
    assert r.status == "failed"
    assert r.report["failures"] and all("more than approval.max_tokens (50)" in f["reason"] for f in r.report["failures"])
    assert r.report["actual"]["tokens_embedded"] <= 50


def test_a_rollback_then_the_same_config_reuses_the_retained_population(tmp_path: Path, embed_log: Path) -> None:
    from helpers_index import read_log

    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    a = ws.build_live()
    plan, path = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    b = ws.apply(path).collection
    assert ws.cutover(path).report["swap"]
    api.rollback(ws.config)
    assert ws.alias() == a
    before = sum(read_log(embed_log).values())
    again, again_path = ws.plan()
    assert again.kind == "pipeline-scoped/text"
    assert again.body["work"]["tokens_to_embed"] == 0 and again.body["work"]["reuses_retained_population"] == b
    assert any("reuses the retained population" in line for line in again.body["explanation"])
    ws.approve(again_path)
    r = ws.apply(again_path)
    assert r.status == "done" and r.report["actual"]["embedded"] == 0
    assert sum(read_log(embed_log).values()) == before
    assert ws.cutover(again_path).report["swap"]
    assert ws.alias() == b


@pytest.mark.parametrize("force, config", [(False, 120), (True, 120), (False, 150)],
                         ids=["gated", "forced", "under-the-live-config"])
def test_a_cutover_after_an_in_place_sync_of_the_live_population_catches_the_shadow_up_first(
    switched: dict, force: bool, config: int,
) -> None:
    """Issue 22's reproduction: B is built beside A; the corpus changes (edits and a takedown); A is synced in
    place under A's config; then B is cut over. B must not serve the text the documents no longer hold:
    the cutover replays the changes into B before the gate, says so, and the next plan under B's config is
    `none`."""
    ws, a, b, path = switched["ws"], switched["a"], switched["b"], switched["path"]
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    edited = ws.edit_documents()
    gone = sorted(p.name for p in ws.corpus.iterdir() if p.name not in edited)[0]
    (ws.corpus / gone).unlink()
    ws.write_config(150, extra=lenient)  # A's config: a document-scoped sync of A, in place
    sync, sync_path = ws.plan()
    assert sync.kind == "document-scoped"
    if sync.body["approval"]["required"]:
        ws.approve(sync_path)
    assert ws.apply(sync_path).collection == a
    with ws.store() as s:
        assert s.count(b, doc_id=gone) > 0, "B still holds the document taken down after it was built"
        before = {p.id for p in s.scroll(b) if p.payload["doc_id"] in edited}
    ws.write_config(config, extra=lenient)  # back to B's config (or still A's: B is caught up with its own)
    c = ws.cutover(path, force=force)
    ws.write_config(120, extra=lenient)
    assert c.report["swap"] and ws.alias() == b
    with ws.store() as s:
        assert s.count(b, doc_id=gone) == 0, "the taken-down document came back"
        after = {p.id for p in s.scroll(b) if p.payload["doc_id"] in edited}
    rows = {r.point_id for r in ws.manifest_rows(b) if r.doc_id in edited}
    assert after == rows and before - after, "B serves chunks of the edited documents' old text"
    assert c.report["caught_up"]["documents"] == len(edited) + 1
    again, _ = ws.plan()
    assert again.kind == "none", again.body["explanation"]
    from reindex.reports import cutover_text

    assert f"caught up first: {len(edited) + 1} documents changed since {b} was built" in cutover_text(c)


def test_a_cutover_of_a_current_shadow_catches_up_nothing(switched: dict) -> None:
    c = switched["ws"].cutover(switched["path"])
    assert c.report["swap"] and c.report.get("caught_up", "absent") is None


def test_gc_never_picks_a_population_an_alias_points_at_even_if_its_record_says_retired(switched: dict) -> None:
    """gc's own guard, alone (the store's guard in delete_population is tested apart): a record that says
    retired (a killed bookkeeping step, a hand edit) must not make the live population a candidate."""
    from reindex.decisions import cutover as co

    ws, a = switched["ws"], switched["a"]
    state = ws.state()
    rec = read_population(state, "docs", a)
    write_population(state, Population(rec.index, rec.collection, rec.config_json, rec.identity, "retired",
                                             rec.created_at, rec.updated_at - 30 * 86400))
    (ws.root / ".reindex" / "indexes" / "docs" / "live.json").unlink()  # only the alias protects it now
    with ws.store() as s:
        found = co.gc_candidates(s, state, "docs", older_than_s=0, retention_s=0, force=True)
        assert a not in [c["collection"] for c in found]
        assert s.collection_exists(a)


def test_delete_population_refuses_a_population_an_alias_points_at(switched: dict) -> None:
    """The guard inside delete_population, alone: called directly, it refuses and deletes nothing."""
    from reindex.decisions import cutover as co

    ws, a = switched["ws"], switched["a"]
    state = ws.state()
    with ws.store() as s, pytest.raises(CutoverError, match=f"{a} is served by an alias"):
        co.delete_population(s, state, "docs", a)
    with ws.store() as s:
        assert s.collection_exists(a) and read_population(state, "docs", a).state == "live"
def test_apply_refuses_to_start_without_disk_for_the_plans_peak_footprint(tmp_path: Path, monkeypatch) -> None:
    """Issue 22: on a full disk apply died of SIGBUS (writes through memory maps) with no message. It now
    checks the free space of the store's disk against the plan's peak footprint before writing anything."""
    from reindex.errors import StateError
    from reindex.adapters.stores.edge import generation_copy_bytes
    from reindex.context import backends
    from reindex.adapters.stores.opening import EDGE_BUILD_OVERHEAD_BYTES

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    fp = plan.body["cost"]["footprint"]
    need = fp["peak"]["disk_bytes"] - fp["old"]["disk_bytes"] + EDGE_BUILD_OVERHEAD_BYTES
    assert fp["peak"]["disk_bytes"] > fp["old"]["disk_bytes"]
    asked: list[str] = []

    def free(n: int):
        return lambda folder: asked.append(folder) or n

    monkeypatch.setattr(backends, "free_disk_bytes", free(need - 1))
    with pytest.raises(StateError) as info:
        ws.apply(path)
    store = ws.root / ".reindex" / "qdrant"
    assert str(info.value) == (f"not enough free disk for plan {plan.plan_hash[:12]}: it adds about "
                               f"{need / 2**20:,.1f} MiB to the store in {store} (its peak footprint) but "
                               f"{(need - 1) / 2**20:,.1f} MiB is free there; free some space (or move store.path) and "
                               "run `reindex apply` again")
    assert asked == [str(store)] and not store.exists()  # refused before the store was opened
    monkeypatch.setattr(backends, "free_disk_bytes", free(need))
    assert ws.apply(path).status == "done"
    assert backends.free_disk_bytes(str(store / "not" / "yet")) > 0  # the real seam: the nearest existing folder
    ws.cutover(path)
    # In place, the edge store's delta generation copies what the engine changes in place (segment metadata
    # and the appendable segment, not the population): that much more must be free.
    ws.edit_documents()
    plan, path = ws.plan()
    live = plan.body["inputs"]["baseline"]["collection"]
    copy = generation_copy_bytes(store, live)
    fp = plan.body["cost"]["footprint"]
    need = fp["peak"]["disk_bytes"] - fp["old"]["disk_bytes"] + EDGE_BUILD_OVERHEAD_BYTES + copy
    apparent = sum(p.stat().st_size for p in (store / "collections" / live).rglob("*") if p.is_file())
    assert plan.kind == "document-scoped" and 0 < copy < apparent / 4
    monkeypatch.setattr(backends, "free_disk_bytes", free(need - 1))
    with pytest.raises(StateError, match=f"adds about {need / 2**20:,.1f} MiB to the store"):
        ws.apply(path)
    monkeypatch.setattr(backends, "free_disk_bytes", free(need))
    assert ws.apply(path).status == "done"


def test_a_cutover_whose_catch_up_fails_for_a_document_refuses_and_leaves_the_alias(
    switched: dict, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reindex.adapters.pipeline import TextPipeline

    ws, a, path = switched["ws"], switched["a"], switched["path"]
    edited = ws.edit_documents()
    real = TextPipeline.chunk_document

    def failing(self: TextPipeline, doc):  # type: ignore[no-untyped-def]
        if doc.doc_id == edited[0]:
            raise RuntimeError("the splitter blew up")
        return real(self, doc)

    monkeypatch.setattr(TextPipeline, "chunk_document", failing)
    with pytest.raises(CutoverError, match=rf"could not be caught up with the corpus \(1 documents failed, first "
                                           rf"{edited[0]}: chunking failed: RuntimeError: the splitter blew up\); "
                                           r"the alias was not moved"):
        ws.cutover(path)
    assert ws.alias() == a
