"""``reindex doctor`` (DESIGN.md invariant 17): the store against the books.

Drift is injected behind reindex's back with the real store and state (points deleted, foreign points upserted,
vectors overwritten with another model's, a payload edited, a point given another chunk's payload, an apply SIGKILLed at a crash point, staged results
and an orphaned collection left, the alias moved), and the doctor must name each kind with its exact count; a
healthy index reports healthy; ``--repair`` writes a plan that ``reindex apply`` carries out, after which the
collection equals what it was before the drift, point for point."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers_index import REINDEX_BIN, Workspace, subprocess_env, switched_workspace

from reindex import api
from reindex.cli import main
from reindex.adapters.stores.vectors import Point

EVERY = ["--sample", "100000", "--embed-sample", "100000"]  # a sample larger than the index: every point


def _doctor(ws: Workspace, *args: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["doctor", "-c", str(ws.config), "--json", "--plans", str(ws.plans), *args])
    assert r.exit_code in (0, 1) and r.stdout.startswith("{"), r.output
    return r.exit_code, json.loads(r.stdout)


def _kinds(body: dict) -> dict[tuple[str, str | None], int]:
    return {(f["kind"], f["population"]): f["count"] for f in body["findings"]}


def _inject(ws: Workspace, live: str) -> dict:
    """Five kinds of drift in the live collection, written through the store itself; what was done, by id."""
    rows = ws.manifest_rows(live)
    docs = sorted({r.doc_id for r in rows})
    by_doc = {d: [r for r in rows if r.doc_id == d] for d in docs}
    deleted = [r.point_id for r in by_doc[docs[0]][:3]]
    overwritten = [r.point_id for r in by_doc[docs[1]][:2]]
    edited = by_doc[docs[2]][0].point_id
    swapped, other_text = by_doc[docs[3]][0].point_id, by_doc[docs[3]][1].point_id  # one chunk's payload on another
    other_model = api.make_embedder(ws.cfg().vector.model_copy(update={"prefix": "another model: "}))
    foreign = [str(uuid.uuid4()) for _ in range(2)]
    with ws.store() as s:
        s.prepare_writes(live)
        s.delete_points(live, deleted)
        pts = {p.id: p for p in s.retrieve(live, overwritten + [edited, other_text], with_vectors=True)}
        vecs = other_model.embed([pts[i].payload["page_content"] for i in overwritten]).vectors
        s.upsert(live, [Point(i, v, pts[i].payload) for i, v in zip(overwritten, vecs)])
        s.overwrite_payload(live, {edited: {**pts[edited].payload, "page_content": "edited behind reindex's back"},
                                   swapped: pts[other_text].payload})
        s.upsert(live, [Point(f, vecs[0], {**pts[overwritten[0]].payload, "pipeline_id": "someone-else"})
                        for f in foreign])
        s.publish(live)
    return {"deleted": deleted, "overwritten": overwritten, "edited": edited, "foreign": foreign, "swapped": swapped,
            "docs": {docs[0], docs[1], docs[2], docs[3]}}


def test_a_healthy_index_is_healthy_and_every_injected_drift_is_found_with_its_count(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    for args in ([], ["--full"], EVERY):
        code, body = _doctor(ws, *args)
        assert (code, body["healthy"], body["findings"]) == (0, True, []), body
    points = ws.snapshot(live)
    did = _inject(ws, live)

    expected = {("count-mismatch", live): 1, ("missing-points", live): 3, ("unlisted-points", live): 2,
                ("mixed-vector-ids", live): 2, ("payload-text-mismatch", live): 1, ("vector-mismatch", live): 2,
                ("stale-points", live): 1}
    for args in (["--full", *EVERY], EVERY):
        code, body = _doctor(ws, *args)
        assert code == 1 and body["healthy"] is False
        assert _kinds(body) == expected, (args, body["findings"])
        found = {f["kind"]: set(f["examples"]) for f in body["findings"]}
        assert found["missing-points"] == set(did["deleted"])
        assert found["unlisted-points"] == found["mixed-vector-ids"] == set(did["foreign"])
        assert found["vector-mismatch"] == set(did["overwritten"])
        assert found["payload-text-mismatch"] == {did["edited"]} and found["stale-points"] == {did["swapped"]}

    # The sampled check looks at its sample, not the whole collection: 16 rows of the manifest, 16 stored points.
    _code, body = _doctor(ws, "--sample", "16", "--embed-sample", "4")
    # The live population's index health: small enough that every search scans its vectors, so exact by construction.
    health = body["populations"][0].pop("index_health")
    assert (health["ready"], health["searched"], health["recall_at_10_vs_exact"]) == (True, "exact", 1.0)
    assert body["populations"] == [{"collection": live, "points": len(points.ids) - 1, "listed": len(points.ids),
                                    "checked": 16, "scanned": 16, "embedded": 4}]
    assert ("count-mismatch", live) in _kinds(body)  # counts are always compared

    # --repair: a plan like any other, carried out by `reindex apply`; then healthy, and the points are what they
    # were before the drift.
    code, body = _doctor(ws, "--full", "--repair", *EVERY)
    fix = body["repair"]
    assert code == 1 and fix["kind"] == "document-scoped" and fix["documents"] == 4 and fix["delete_points"] == 2
    assert fix["approval_required"] is False and Path(fix["plan"]).parent == ws.plans
    plan = api.show_plan(fix["plan"])
    assert set(plan.body["work"]["affected_documents"]) == did["docs"]
    assert set(plan.body["repair"]["delete_points"]) == set(did["foreign"])
    applied = CliRunner().invoke(main, ["apply", fix["plan"], "-c", str(ws.config), "--no-progress",
                                        "--no-prefect", "--json"])
    assert applied.exit_code == 0, applied.output
    report = json.loads(applied.stdout)
    assert report["actual"]["tokens_embedded"] == plan.body["work"]["tokens_to_embed"]
    assert report["actual"]["deleted"] == 2 and report["actual"]["reused_from_target"] == 0
    for args in ([], ["--full", *EVERY]):
        code, body = _doctor(ws, *args)
        assert (code, body["findings"]) == (0, []), body
    ws.snapshot(live).assert_same(points)


def test_a_killed_apply_staged_results_and_an_orphan_are_found_and_resuming_clears_them(tmp_path: Path) -> None:
    from reindex.engine.workers import staging_prefix

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    plan, path = ws.planned_change(size=120)
    target = plan.body["identity"]["new"]["collection"]
    killed = subprocess.run([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress",
                             "--no-prefect"], cwd=ws.root, capture_output=True, text=True, timeout=240, check=False,
                            env=subprocess_env(REINDEX_SHARD_WORKERS="1", REINDEX_CRASH_AT="before-shard-manifest:2"))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    state = ws.state()
    state.put(f"{staging_prefix('docs', plan.plan_hash, 3)}1/0.upsert", b"[]")  # what a killed shard worker leaves
    orphan = "docs__0123456789ab"
    with ws.store() as s:
        s.create_collection(orphan, dimension=ws.cfg().vector.dimension, distance="cosine")

    code, body = _doctor(ws)
    assert code == 1
    assert _kinds(body) == {("half-done-apply", target): 1, ("stuck-building", target): 1, ("stale-lock", None): 1,
                            ("staged-results", None): 1, ("orphaned-collection", orphan): 1}, body["findings"]
    half = next(f for f in body["findings"] if f["kind"] == "half-done-apply")
    assert half["examples"] == [plan.plan_hash]
    advice = "\n".join(body["advice"])
    assert f"`reindex gc {orphan} --yes`" in advice and "the next command that writes takes it over" in advice
    assert "resume it with `reindex apply" in advice  # the plan file is found in plans/ by its hash

    # What the advice says fixes it: resume the apply, delete the orphan, drop the staged leftovers.
    assert ws.apply(path).status == "done"
    gc = CliRunner().invoke(main, ["gc", orphan, "--yes", "-c", str(ws.config)])
    assert gc.exit_code == 0, gc.output
    for key in state.list(f"indexes/docs/runs/{plan.plan_hash}/staging/"):
        state.delete(key)
    code, body = _doctor(ws)
    assert (code, body["findings"]) == (0, []), body


def test_an_alias_moved_behind_reindex_s_back_contradicts_the_records(tmp_path: Path) -> None:
    sw = switched_workspace(tmp_path / "ws")
    ws, a, b = sw["ws"], sw["a"], sw["b"]
    assert _doctor(ws)[0] == 0
    with ws.store() as s:
        s.swap_alias("docs", b, a)
    code, body = _doctor(ws)
    assert code == 1 and _kinds(body) == {("state-contradicts-alias", b): 1}, body["findings"]
    assert f"`reindex rollback --to {a}`" in "\n".join(body["advice"])
    r = CliRunner().invoke(main, ["rollback", "--to", a, "-c", str(ws.config)])
    assert r.exit_code == 0, r.output
    code, body = _doctor(ws)
    assert (code, body["findings"]) == (0, []), body


def test_a_repair_is_refused_while_the_source_has_unsynced_changes(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    rows = ws.manifest_rows(live)
    with ws.store() as s:
        s.prepare_writes(live)
        s.delete_points(live, [rows[0].point_id])
        s.publish(live)
    ws.edit_documents()
    code, body = _doctor(ws, "--repair")
    assert code == 1 and body["repair"]["plan"] is None
    assert body["repair"]["error"].startswith("the source changed since the live population was last synced (")
    assert body["repair"]["error"].endswith("then run `reindex doctor --repair` again")
    assert not [p for p in ws.plans.glob("*document-scoped*")]  # nothing written


@pytest.mark.parametrize("bad", [["--sample", "0"], ["--embed-sample", "-1"]])
def test_bad_sizes_are_refused_before_any_work(tmp_path: Path, bad: list[str]) -> None:
    ws = Workspace(tmp_path / "ws")
    r = CliRunner().invoke(main, ["doctor", "-c", str(ws.config), *bad])
    assert r.exit_code == 1
    assert r.stderr.startswith("error: --sample must be at least 1 and --embed-sample at least 0 (got ")


def test_a_full_check_that_scrolled_nothing_says_why_with_the_counts() -> None:
    """``--full`` scrolls no stored point when the counts prove every stored point is a listed one: the line says
    so with the numbers, also when points are missing (a count mismatch), never just "its count agrees"."""
    from reindex.reports import doctor_text
    from reindex.usecases.doctor import DoctorReport

    def line(points: int, listed: int) -> str:
        pop = {"collection": "docs__x", "points": points, "listed": listed, "checked": listed, "scanned": 0,
               "embedded": 0}
        return doctor_text(DoctorReport("docs", "full", (), (), (), (pop,), None, 0.1)).splitlines()[0]

    assert "320 stored, as many as listed: every stored point is a listed one, none scrolled" in line(320, 320)
    missing = line(317, 320)
    assert "317 stored = 320 listed less 3 missing: every stored point is a listed one, none scrolled" in missing
    assert "count agrees" not in missing
