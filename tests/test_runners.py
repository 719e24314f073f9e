"""The shard-runner seam: the in-process thread runner and the Prefect flow build the same population and
write the same run report, including a run with a per-document failure, its resume, and a catch-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers_index import Workspace, config_text, prefect_api_url
from reindex import api
from reindex.engine.execution import shard_of
from reindex.adapters.pipeline import TextPipeline
from reindex.runners import ShardJob, ThreadRunner, summarize
from reindex.context import backends

EDIT = ("\n\nA paragraph added while the resumed apply runs; catch-up must replay it into the shadow "
        "population before cutover. " * 8) + "\n"
TIMING = {"seconds", "phases", "runner", "throughput"}
SHARD_TIMING = {"seconds", "embed_seconds", "embed_cpu_seconds", "embed_concurrency", "commit_seconds"}


def _comparable(report: dict) -> dict:
    """A run report without timings and the runner's name (each shard keeps its worker and counts)."""
    out = {k: v for k, v in report.items() if k not in TIMING}
    if "index_build" in out:  # the build's seconds are timings; its points are not
        out["index_build"] = {k: v for k, v in out["index_build"].items() if k not in ("seconds", "cpu_seconds")}
    out["shards"] = sorted(({k: v for k, v in s.items() if k not in SHARD_TIMING} for s in report["shards"]),
                           key=lambda s: s["shard"])
    return out


def _scenario(root: Path, runner: Any, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Build live; plan a chunker change; apply with one document failing to chunk (→ failed, no catch-up);
    resume with an edit to another document made during the resumed run (→ done, catch-up replays it)."""
    ws = Workspace(root)
    ws.build_live()
    plan, path = ws.planned_change(size=120)
    docs = sorted(p.name for p in ws.corpus.iterdir())
    broken = next(d for d in docs if shard_of(d, 4) == 1)
    edited = next(d for d in docs if shard_of(d, 4) == 2)

    # The shards take the plan's chunks (reindex.books.carried) and never run the chunker on this document: the bug is
    # injected where every shard still reads each document's text.
    real_text = TextPipeline.document_text

    def failing(self: TextPipeline, doc: Any) -> Any:
        if doc.doc_id == broken:
            raise RuntimeError(f"injected chunker bug on {doc.doc_id}")
        return real_text(self, doc)

    monkeypatch.setattr(TextPipeline, "document_text", failing)
    first = api.apply_plan(path, ws.config, runner=runner)
    monkeypatch.undo()


    class Editing:  # edits a document of an already finished shard at the resumed run's first embedding
        def __init__(self, inner: Any) -> None:
            self.inner, self.dimension, self.max_tokens, self.done = inner, inner.dimension, inner.max_tokens, False

        def embed(self, texts: list[str]) -> Any:
            if not self.done:
                self.done = True
                (ws.corpus / edited).write_bytes((ws.corpus / edited).read_bytes() + EDIT.encode())
            return self.inner.embed(texts)

    with api.Index.open(ws.config, embedder=Editing(api.make_embedder(ws.cfg().vector)), runner=runner) as ix:
        second = ix.apply(path)
    return {"ws": ws, "first": first, "second": second, "broken": broken, "edited": edited,
            "snapshot": ws.snapshot(second.collection),
            "manifest": [(r.doc_id, r.ordinal, r.content_hash, r.point_id) for r in ws.manifest_rows(second.collection)]}


def test_both_runners_build_the_same_population_and_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           request: pytest.FixtureRequest) -> None:
    prefect_api_url(request.config)  # the session's Prefect test server
    from reindex.runners.prefect import PrefectRunner

    runs = {name: _scenario(tmp_path / name, runner, monkeypatch)
            for name, runner in (("in-process", ThreadRunner()), ("prefect", PrefectRunner()))}
    for name, run in runs.items():
        first, second = run["first"], run["second"]
        assert first.status == "failed", name
        assert [f["doc_id"] for f in first.report["failures"]] == [run["broken"]], name
        assert first.report["catch_up"] == {"rounds": [], "documents": 0}, name  # no catch-up after failures
        assert first.report["runner"] == name and second.report["runner"] == name
        assert second.status == "done", (name, second.report["failures"])
        assert second.report["catch_up"]["documents"] == 1, (name, second.report["catch_up"])
    a, b = runs["in-process"], runs["prefect"]
    a["snapshot"].assert_same(b["snapshot"])
    assert a["manifest"] == b["manifest"]
    assert _comparable(a["first"].report) == _comparable(b["first"].report)
    assert _comparable(a["second"].report) == _comparable(b["second"].report)


def test_summarize_runs_catch_up_only_after_a_clean_run() -> None:
    calls: list[int] = []

    def catch_up() -> dict:
        calls.append(1)
        return {"rounds": [{"round": 1}], "documents": 3}

    ok = [{"shard": 0, "failures": []}]
    assert summarize(ok, [], catch_up)["catch_up"]["documents"] == 3 and calls == [1]
    assert summarize([{"shard": 0, "failures": [{"doc_id": "x"}]}], [], catch_up)["catch_up"]["documents"] == 0
    assert summarize(ok, [{"shard": 1, "reason": "boom"}], catch_up)["catch_up"]["documents"] == 0
    assert calls == [1]


def _fail_shard_2(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make shard 2 raise in every apply until restored; returns the real ``run_shard``."""
    import reindex.engine.execution as execution

    real = execution.run_shard

    def run_shard(ctx: Any, shard: int, **kw: Any) -> Any:
        if shard == 2:
            raise RuntimeError("injected: the shard's host went away")
        return real(ctx, shard, **kw)

    monkeypatch.setattr(execution, "run_shard", run_shard)
    return real


def test_a_shard_that_raises_is_reported_and_the_others_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    _fail_shard_2(monkeypatch)
    r = api.apply_plan(path, ws.config, runner=ThreadRunner(workers=2))
    assert r.status == "failed"
    assert r.report["failures"] == [{"shard": 2, "reason": "RuntimeError: injected: the shard's host went away"}]
    assert r.report["actual"]["shards_run"] == 3


def test_the_default_runner_is_in_process_unless_a_prefect_api_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.delenv("PREFECT_PROFILES_PATH", raising=False)
    assert isinstance(backends.shard_runner(), ThreadRunner)
    assert isinstance(backends.shard_runner(False), ThreadRunner)
    # The active profile of a profiles file counts as configured, without importing Prefect.
    (tmp_path / "prefect-home").mkdir()
    (tmp_path / "prefect-home" / "profiles.toml").write_text(
        'active = "local"\n[profiles.local]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n', encoding="utf-8")
    from reindex.foundation import settings

    assert settings.prefect_api_url() == "http://127.0.0.1:9/api"
    assert type(backends.shard_runner()).__name__ == "PrefectRunner"
    assert isinstance(backends.shard_runner(False), ThreadRunner)  # --no-prefect wins


def test_shard_job_of_an_in_place_plan_touches_only_affected_shards(tmp_path: Path) -> None:
    from reindex.usecases.apply import job_of

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    edited = ws.edit_documents()
    plan, _ = ws.plan()
    job = job_of(plan, ws.cfg())
    assert job.only == frozenset(edited) and job.removed == frozenset()
    assert job.shards == tuple(sorted({shard_of(d, 4) for d in edited}))
    assert isinstance(job, ShardJob)


def test_units_are_sized_by_what_one_cpu_does_when_the_plan_measured_it(tmp_path: Path) -> None:
    # A remote worker runs one shard at a time on one CPU: the plan's tokens per minute are the whole machine's
    # (every CPU), so a shard's planned seconds come from the measured rate per CPU-second when the plan has one.
    import copy

    from reindex.planner import Plan
    from reindex.usecases.apply import job_of

    ws = Workspace(tmp_path / "ws")
    plan, _ = ws.plan()
    body = copy.deepcopy(dict(plan.body))
    tokens = body["work"]["tokens_to_embed"]
    assert tokens > 0
    body["cost"] = {**body["cost"], "tokens_per_minute": 60_000.0, "rate_assumes": None}
    by_machine = job_of(Plan(body), ws.cfg(), shards=4)
    assert by_machine.seconds_per_shard == pytest.approx(tokens / 4 / 1_000.0)
    body["cost"]["rate_assumes"] = {"tokens_per_cpu_second": 250.0, "cpus": 4}
    by_cpu = job_of(Plan(body), ws.cfg(), shards=4)
    assert by_cpu.seconds_per_shard == pytest.approx(tokens / 4 / 250.0)
    assert by_cpu.shards == by_machine.shards == (0, 1, 2, 3)
    body["cost"] = {**body["cost"], "tokens_per_minute": 0, "rate_assumes": None}  # no rate known: not sized
    assert job_of(Plan(body), ws.cfg(), shards=4).seconds_per_shard == 0.0


def _tokens_by_shard(report: dict, n: int) -> list[int]:
    got = [0] * n
    for r in report["shards"]:
        got[r["shard"]] += r["tokens_embedded"]
    return got


def test_the_plan_counts_the_tokens_apply_embeds_in_each_shard(tmp_path: Path) -> None:
    # Units are dealt by each shard's planned work: the plan's count per shard must be what apply embeds there,
    # for a first build, a chunker change (a new population) and an edit applied in place.
    ws = Workspace(tmp_path / "ws")
    n = ws.cfg().apply.shards
    # two documents of one shard with the same text: apply embeds its chunks once (one batch), the plan too
    names = [f"copy-{i}.rst" for i in range(64)]
    twins = next([a, b] for a in names for b in names if a < b and shard_of(a, n) == shard_of(b, n))
    text = next(ws.corpus.glob("*.rst")).read_text(encoding="utf-8")
    for name in twins:
        (ws.corpus / name).write_text(text + "\n\nA copy kept under another name.\n", encoding="utf-8")
    plan, path = ws.plan()
    by_shard = plan.body["work"]["tokens_to_embed_by_shard"]
    assert len(by_shard) == n and sum(by_shard) == plan.body["work"]["tokens_to_embed"] > 0
    assert len({x for x in by_shard}) > 1  # the sample's shards differ in work (else this proves nothing)
    r = ws.apply(path)
    assert _tokens_by_shard(r.report, n) == by_shard
    ws.cutover(path)

    plan, path = ws.planned_change(size=120)
    by_shard = plan.body["work"]["tokens_to_embed_by_shard"]
    assert sum(by_shard) == plan.body["work"]["tokens_to_embed"] > 0
    r = ws.apply(path)
    assert _tokens_by_shard(r.report, n) == by_shard
    ws.cutover(path)

    edited = ws.edit_documents()
    plan, path = ws.plan()
    by_shard = plan.body["work"]["tokens_to_embed_by_shard"]
    assert sum(by_shard) == plan.body["work"]["tokens_to_embed"] > 0
    assert {k for k, x in enumerate(by_shard) if x} <= {shard_of(d, n) for d in edited}
    if plan.body["approval"]["required"]:
        ws.approve(path)
    r = ws.apply(path)
    assert _tokens_by_shard(r.report, n) == by_shard


def test_a_sampled_plan_counts_no_shard(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, _ = api.make_plan(ws.config, out=ws.plans, sample=5)
    assert plan.body["projection"] is not None
    assert plan.body["work"]["tokens_to_embed_by_shard"] is None


def test_units_are_dealt_by_each_shards_planned_work(tmp_path: Path) -> None:
    # job_of turns the plan's tokens per shard into seconds per shard at the plan's rate; another layout than
    # the plan counted falls back to the mean.
    import copy

    from reindex.planner import Plan
    from reindex.usecases.apply import job_of

    ws = Workspace(tmp_path / "ws")
    plan, _ = ws.plan()
    body = copy.deepcopy(dict(plan.body))
    n = ws.cfg().apply.shards
    body["cost"] = {**body["cost"], "rate_assumes": {"tokens_per_cpu_second": 100.0, "cpus": 2}}
    body["work"]["tokens_to_embed_by_shard"] = [100 * (k + 1) for k in range(n)]
    job = job_of(Plan(body), ws.cfg())
    assert job.planned_seconds() == tuple(float(k + 1) for k in range(n))
    other = job_of(Plan(body), ws.cfg(), shards=n + 1)
    assert other.seconds_by_shard == () and len(set(other.planned_seconds())) == 1


@pytest.mark.parametrize("work, target", [
    ([1] * 11 + [2], 4.3),  # halving the whole again and again gives 6 / 4 / 3; the best is 5 / 4 / 4
    # bench/units.py's 16 PEPs in 8 shards (characters per shard): by count two units held 16 % and 84 % of the work
    ([23065, 0, 22145, 0, 51404, 76320, 36269, 73384], 141_000),
    ([5, 1, 1, 1, 1, 1, 1, 5], 6),
    ([0, 0, 9, 0, 0, 0, 0, 1, 1, 1], 4),
    ([3.0] * 7 + [30.0], 12.0),
])
def test_units_balance_the_planned_work_of_contiguous_shards(work: list[float], target: float) -> None:
    import itertools

    from reindex.runners import deal_units

    units = deal_units(list(range(len(work))), work, target)
    assert [k for u in units for k in u] == list(range(len(work)))  # contiguous, every shard once, in order
    assert all(units)
    count = max(1, min(len(work), int(sum(work) // target)))
    assert len(units) == count
    largest = max(sum(work[k] for k in u) for u in units)
    best = min(max(sum(work[a:b]) for a, b in zip((0, *cuts), (*cuts, len(work))))
               for cuts in itertools.combinations(range(1, len(work)), count - 1))
    assert largest <= best * (1 + 1e-5)  # no contiguous split of as many units has a smaller largest unit


def test_both_remote_runners_deal_units_by_each_shards_planned_work(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The Dask runner (a cluster of threads in this process) and the Prefect runner's grouping both take each
    # shard's planned seconds, not one mean for all.
    from reindex.runners import deal_units, distributed, prefect
    from reindex.usecases.apply import job_of

    ws = Workspace(tmp_path / "ws", extra="apply: {shards: 4, unit_seconds: 0.001}\n")
    plan, path = ws.plan()
    job = job_of(plan, ws.cfg())
    assert len(set(job.planned_seconds())) > 1
    dealt: list = []
    monkeypatch.setattr(distributed, "deal_units", lambda items, seconds, target: dealt.append(
        (list(seconds), [s.planned_seconds for s in items])) or deal_units(items, seconds, target))
    r = api.apply_plan(path, ws.config, task_runner="dask", prefect=False)
    assert r.status == "done", r.report["failures"]
    assert dealt == [(list(job.planned_seconds()), list(job.planned_seconds()))]  # each spec carries its own too

    specs = [{"shard": k, "planned_seconds": s, "unit_seconds": 10.0} for k, s in enumerate([1, 1, 1, 1, 1, 15, 1])]
    assert [[s["shard"] for s in u] for u in prefect._groups(specs, None)] == [[0, 1, 2, 3, 4], [5, 6]]


def test_units_of_equal_planned_work_are_dealt_by_count() -> None:
    from reindex.runners import deal_units

    assert [len(u) for u in deal_units(list(range(16)), [2.0] * 16, 10.0)] == [6, 5, 5]
    assert [len(u) for u in deal_units(list(range(16)), [0.0] * 16, 10.0)] == [16]
    with pytest.raises(ValueError, match="3 planned figures for 4 items"):
        deal_units(list(range(4)), [1.0, 2.0, 3.0], 1.0)


def test_a_resumed_apply_skips_the_shards_that_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by the sampled mutmut run: only the kill tests (child processes) showed that a shard with a
    # manifest is not run again. In process: shard 2 fails, the re-apply runs shard 2 alone and embeds only
    # its texts; the others are skipped.
    import reindex.engine.execution as execution

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    real = _fail_shard_2(monkeypatch)
    first = api.apply_plan(path, ws.config, runner=ThreadRunner(workers=2))
    assert first.status == "failed"
    monkeypatch.setattr(execution, "run_shard", real)
    again = api.apply_plan(path, ws.config, runner=ThreadRunner(workers=2))
    assert again.status != "failed", again.report
    total = first.report["actual"]["shards_run"] + 1
    assert again.report["actual"]["shards_skipped"] == total - 1
    assert again.report["actual"]["shards_run"] == 1
    embedded = first.report["actual"]["embedded"] + again.report["actual"]["embedded"]
    assert embedded == plan.body["work"]["chunks_to_embed"], (first.report["actual"], again.report["actual"])


def test_reuse_from_an_old_population_written_with_another_shard_count(tmp_path: Path) -> None:
    # Found by the sampled mutmut run: reuse when the old population's manifest parts were written with a
    # different shard count (a streaming filter over all parts) ran in no in-process test. 4 shards → 3.
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.config.write_text(config_text(120).replace("shards: 4", "shards: 3"), encoding="utf-8")
    plan, path = ws.plan()
    ws.approve(path)
    assert plan.body["work"]["chunks_reused"] > 0
    r = ws.apply(path)
    assert r.status == "done", r.report
    assert r.report["actual"]["reused_from_old"] == plan.body["work"]["chunks_reused"]
    assert r.report["actual"]["embedded"] == plan.body["work"]["chunks_to_embed"]
