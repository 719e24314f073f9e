"""Cutover (issue 6): readers through the alias during the swap, the gate, --force, rollback and gc.

Populations: A = recursive:size=150 (built and cut over first), B = recursive:size=120 (a
pipeline-scoped/text change, applied beside it). With the ``hash`` embedder a query whose text equals
a chunk's text gets exactly that chunk's vector, so labelled query files can be designed to pass (texts
present in both populations) or to fail (texts only the old population has)."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.planner.approvals import approval_path
from reindex.cli import main
from reindex.decisions.cutover import CutoverError
from reindex.adapters.embedders import make_embedder
from reindex.books.manifests import Population, read_live, read_population, write_population


def _texts(ws: Workspace, collection: str) -> set[tuple[str, str]]:
    return {(p["doc_id"], p["page_content"]) for _, p in ws.snapshot(collection).points.values()}


def _queries(path: Path, pairs: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"query": t, "doc_id": d}) + "\n" for d, t in pairs), encoding="utf-8")
    return path


@pytest.fixture
def two_populations(tmp_path: Path) -> dict:
    """A live, B built and approved beside it; query files designed to pass and to fail the gate. The passing
    queries are chunk texts both populations hold, so every query is at the ceiling on both sides: the verdict is
    `cannot tell`, let through here (cutover.cannot_tell: pass) because these tests are about the mechanics."""
    mechanics = "cutover: {cannot_tell: pass}"
    ws = Workspace(tmp_path / "ws", extra=mechanics)
    a = ws.build_live()
    plan, path = ws.planned_change(size=120, extra=mechanics)
    b = ws.apply(path).collection
    ta, tb = _texts(ws, a), _texts(ws, b)
    both, only_a = sorted(ta & tb), sorted(ta - tb)
    assert len(both) >= 10 and len(only_a) >= 10
    rng = random.Random(0)
    return {
        "ws": ws, "a": a, "b": b, "plan": plan, "path": path,
        "pid": {c: read_population(ws.state(), "docs", c).identity["pipeline_id"] for c in (a, b)},
        "passing": _queries(tmp_path / "pass.jsonl", rng.sample(both, 10)),
        "failing": _queries(tmp_path / "fail.jsonl", rng.sample(only_a, 10)),
    }


def test_readers_through_the_alias_never_fail_and_see_one_population_per_answer(
    two_populations: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = two_populations
    ws: Workspace = t["ws"]
    store = api.vector_store_for(ws.cfg())  # one open embedded store: the readers and the cutover share it
    emb = make_embedder(ws.cfg().vector)
    vectors = list(emb.embed([f"reader query {i} about PEP process and packaging" for i in range(32)]).vectors)
    answers: list[list[tuple[float, frozenset[str]]]] = [[], [], []]
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(n: int) -> None:
        rng = random.Random(n)
        while not stop.is_set():
            try:
                hits = store.query("docs", rng.choice(vectors), limit=10)
            except BaseException as err:  # noqa: BLE001 - every failed query is a test failure
                errors.append(err)
                continue
            answers[n].append((time.monotonic(), frozenset(h.payload["pipeline_id"] for h in hits)))

    def reads() -> int:
        return sum(map(len, answers))

    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(3)]
    try:
        for th in threads:
            th.start()
        deadline = time.monotonic() + 30
        while reads() < 30 and time.monotonic() < deadline:
            time.sleep(0.005)
        with api.Index.open(ws.config, store=store) as ix:
            report = ix.cutover(t["path"], queries=t["passing"])
        after = reads()
        while reads() < after + 30 and time.monotonic() < deadline + 30:
            time.sleep(0.005)
    finally:
        stop.set()
        for th in threads:
            th.join(10)
        alias_now = store.get_alias("docs")
        store.close()

    assert report.passed, [r for r in report.report["rules"] if not r["passed"]]
    assert report.report["swap"]["to"] == t["b"] and report.report["swap"]["from"] == t["a"]
    assert report.report["swap"]["verified_query"] is True
    assert alias_now == t["b"]
    assert not errors, f"{len(errors)} failed queries, first: {errors[0]!r}"
    a, b = t["pid"][t["a"]], t["pid"][t["b"]]
    seen = set()
    for per_reader in answers:
        assert per_reader, "a reader got no answer"
        assert all(len(pids) == 1 for _, pids in per_reader), "an answer mixed two populations"
        sequence = [next(iter(pids)) for _, pids in per_reader]
        assert set(sequence) <= {a, b}
        first_b = sequence.index(b) if b in sequence else len(sequence)
        assert all(p == a for p in sequence[:first_b]) and all(p == b for p in sequence[first_b:]), \
            "a reader saw the old population again after the new one"
        seen |= set(sequence)
    assert seen == {a, b}, "the readers did not span the swap"
    ev = report.report["evaluation"]
    assert ev["pipelines_seen"] == {"old": [a], "new": [b]}
    assert ev["aggregate"]["recall_at_10_diff"] == {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 10}


def test_a_failing_gate_leaves_the_alias_and_says_which_rule_failed(two_populations: dict) -> None:
    t = two_populations
    ws: Workspace = t["ws"]
    live_before = ws.state().get("indexes/docs/live.json")
    runner = CliRunner()

    res = runner.invoke(main, ["cutover", str(t["path"]), "-c", str(ws.config), "--queries", str(t["failing"])])
    assert res.exit_code == 3, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"FAIL: docs: {t['a']} → {t['b']} ")
    assert "  ok   point-count: shadow holds" in res.stdout and "  ok   no-failed-shards:" in res.stdout
    failed = [ln for ln in lines if ln.startswith("  FAIL ")]
    assert len(failed) == 2 and failed[0].startswith("  FAIL recall@10: recall@10 new − old = -")
    assert failed[0].endswith("lower bound must be ≥ -0.020")
    # The change's own verdict on the primary metric (nDCG@10) is worse: a worse change never passes.
    assert failed[1].startswith("  FAIL evidence: verdict worse on nDCG@10 (cutover.metric): nDCG@10 new − old = -")
    assert "  alias not moved" in lines
    assert ws.alias() == t["a"]
    assert ws.state().get("indexes/docs/live.json") == live_before
    assert read_population(ws.state(), "docs", t["b"]).state == "ready"
    assert read_population(ws.state(), "docs", t["a"]).state == "live"
    report = json.loads(Path(str(t["path"]).removesuffix(".json") + ".cutover.json").read_text())
    assert report["passed"] is False and report["swap"] is None
    assert [r["rule"] for r in report["rules"] if not r["passed"]] == ["recall@10", "evidence"]

    # --force needs an approval record of this plan; without one it refuses before evaluating.
    approval = approval_path(t["path"])
    approval.unlink()
    res = runner.invoke(main, ["cutover", str(t["path"]), "-c", str(ws.config), "--queries", str(t["failing"]),
                               "--force"])
    assert res.exit_code == 1
    assert res.stderr == (f"error: --force needs an approval record for plan {t['plan'].plan_hash[:12]}: "
                          f"run `reindex approve {t['path']} --by NAME` first\n")
    assert ws.alias() == t["a"]

    # Approved, a forced cutover swaps despite the failed rule and records who forced it.
    ws.approve(t["path"])
    r = api.cutover(t["path"], ws.config, queries=t["failing"], force=True)
    assert not r.passed and r.report["forced_by"] == "tester" and r.report["swap"]["to"] == t["b"]
    assert ws.alias() == t["b"]


def test_a_gate_at_the_ceiling_says_cannot_tell_and_fails_unless_the_policy_lets_it_through(two_populations: dict) -> None:
    """The passing queries are chunk texts both populations hold: every query ranks its document first on both
    sides, recall@10 is 1.000 → 1.000 with the interval [+0.000, +0.000] — the recall rule is satisfied by
    construction. The evidence rule is not: it says cannot tell and fails the gate under the default policy."""
    t = two_populations
    ws: Workspace = t["ws"]
    ws.write_config(120, extra="cutover: {cannot_tell: fail}")  # the cutover section is in no digest: same plan
    res = CliRunner().invoke(main, ["cutover", str(t["path"]), "-c", str(ws.config), "--queries", str(t["passing"]),
                                    "--json"])
    assert res.exit_code == 3, res.output
    report = json.loads(res.stdout)
    rules = {r["rule"]: r for r in report["rules"]}
    assert rules["recall@10"]["passed"] and "+0.000 [+0.000, +0.000]" in rules["recall@10"]["detail"]
    assert not rules["evidence"]["passed"] and "verdict cannot tell" in rules["evidence"]["detail"]
    assert report["evaluation"]["aggregate"]["verdict"] == "cannot tell"
    assert ws.alias() == t["a"]
    ws.write_config(120, extra="cutover: {cannot_tell: pass}")
    r = api.cutover(t["path"], ws.config, queries=t["passing"])
    assert r.passed and "let through by cutover.cannot_tell: pass" in {x["rule"]: x for x in r.report["rules"]}[
        "evidence"]["detail"]


def test_the_point_count_rule_fails_a_shadow_missing_a_point(two_populations: dict) -> None:
    t = two_populations
    ws: Workspace = t["ws"]
    with ws.store() as s:
        victim = next(iter(s.scroll(t["b"]))).id
        s.delete_points(t["b"], [victim])
    r = api.cutover(t["path"], ws.config, queries=t["passing"])
    rules = {x["rule"]: x for x in r.report["rules"]}
    n = t["plan"].body["work"]["chunks_new"]
    assert rules["point-count"] == {"rule": "point-count", "passed": False,
                                    "detail": f"shadow holds {n - 1:,} points, its chunk manifest has {n:,} chunks"}
    assert rules["recall@10"]["passed"] and rules["no-failed-shards"]["passed"]
    assert not r.passed and r.report["swap"] is None
    assert ws.alias() == t["a"]


def test_rollback_gc_and_retention(two_populations: dict) -> None:
    t = two_populations
    ws: Workspace = t["ws"]
    a, b = t["a"], t["b"]
    assert api.cutover(t["path"], ws.config, queries=t["passing"]).passed
    assert ws.alias() == b and read_population(ws.state(), "docs", a).state == "retired"

    # gc never deletes what an alias points at, even by name.
    with pytest.raises(CutoverError, match=f"{b} is served by an alias"):
        api.gc(ws.config, names=[b])
    # A was live a moment ago: --older-than 0s keeps it (the rollback window); --force lists it;
    # --dry-run deletes nothing.
    kept = api.gc(ws.config, older_than="0s", dry_run=True)
    assert [(x["collection"], x["state"], x["action"]) for x in kept] == [(a, "retired", "kept")]
    listed = api.gc(ws.config, older_than="0s", dry_run=True, force=True)
    assert [(x["collection"], x["state"], x["action"]) for x in listed] == [(a, "retired", "would delete")]
    with ws.store() as s:
        assert s.collection_exists(a) and s.collection_exists(b)

    # Rollback: one call back to the previous population; readers through the alias get A's points.
    rec = api.rollback(ws.config)
    assert (rec["from"], rec["to"]) == (b, a)
    with ws.store() as s:
        assert s.get_alias("docs") == a
        hits = s.query("docs", make_embedder(ws.cfg().vector).embed(["rollback probe"]).vectors[0], limit=5)
    assert {h.payload["pipeline_id"] for h in hits} == {t["pid"][a]}
    assert read_live(ws.state(), "docs").collection == a
    assert read_population(ws.state(), "docs", b).state == "retired"
    with pytest.raises(CutoverError, match="has no previous population to roll back to"):
        api.rollback(ws.config)
    res = CliRunner().invoke(main, ["rollback", "-c", str(ws.config)])
    assert res.exit_code == 1 and res.stderr.startswith("error: index 'docs' has no previous population to roll back to")
    with pytest.raises(CutoverError, match=f"{a} is served by an alias"):
        api.gc(ws.config, names=[a])

    # Within retention nothing goes; past it (B retired 8 days ago) gc deletes B and its state.
    assert api.gc(ws.config) == []
    state = ws.state()
    rb = read_population(state, "docs", b)
    write_population(state, Population(rb.index, rb.collection, rb.config_json, rb.identity, rb.state,
                                             rb.created_at - 8 * 86400, rb.updated_at - 8 * 86400))
    res = CliRunner().invoke(main, ["gc", "-c", str(ws.config), "--dry-run"])
    assert res.exit_code == 0 and res.stdout.startswith(f"would delete {b} (retired, 8.0 days)")
    with ws.store() as s:
        assert s.collection_exists(b)
    done = api.gc(ws.config)
    assert [(x["collection"], x["action"]) for x in done] == [(b, "deleted")]
    with ws.store() as s:
        assert not s.collection_exists(b) and s.collection_exists(a)
        assert s.get_alias("docs") == a and s.count("docs") == len(ws.manifest_rows(a))
    assert state.list(f"indexes/docs/populations/{b}/") == []
    assert [p["collection"] for p in api.status(ws.config)["populations"]] == [a]
    with pytest.raises(CutoverError, match="no longer exists"):
        api.rollback(ws.config, to=b)


def test_the_gate_reads_the_apply_record_in_the_state_store_not_a_file_beside_the_plan(tmp_path: Path) -> None:
    from helpers_index import switched_workspace

    t = switched_workspace(tmp_path / "ws")
    ws, path, plan = t["ws"], t["path"], t["plan"]
    path.with_name(path.name.removesuffix(".json") + ".run.json").unlink()  # the copy for people is gone
    key = f"indexes/docs/runs/{plan.plan_hash}/done.json"
    state = ws.state()
    record = json.loads(state.get(key))
    state.put(key, json.dumps({**record, "failures": [{"shard": 1, "reason": "boom"}]}).encode())
    failed = ws.cutover(path)
    assert not failed.report["swap"]
    assert [r["detail"] for r in failed.report["rules"] if r["rule"] == "no-failed-shards"] == [
        "1 failed shards or documents"]
    state.put(key, json.dumps(record).encode())
    assert ws.cutover(path).report["swap"]["to"] == t["b"]
