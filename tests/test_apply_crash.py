"""Crash safety (invariant 2): a real ``reindex apply`` process SIGKILLs itself at a named point
(``REINDEX_CRASH_AT``), a second run resumes it, and the result must equal an uninterrupted build in
another folder: same point ids, vectors and payloads, same chunk manifest, no duplicates, nothing
missing, and (where the killed run's vectors had reached the store) no text embedded twice.

The change under test is a pipeline-scoped/text rebuild (recursive:size=150 → 120) of the 24-PEP
sample with 4 shards, so shards reuse vectors from the live population as well as embed. The CLI
runs the real Prefect flow against the session's Prefect test server (``PREFECT_API_URL``) with one
shard worker, so "the n-th time a point is reached" is one well-defined moment."""

from __future__ import annotations

import json
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Snapshot, Workspace, prefect_api_url, read_log, subprocess_env
from reindex.books.manifests import read_population


def _shard_manifests(state, target: str, run: str = "") -> list[str]:
    """The shard manifests under a population's runs (``run``: one plan's), not the running apply's progress record
    beside them."""
    prefix = f"indexes/docs/populations/{target}/runs/{run + '/' if run else ''}"
    return [k for k in state.list(prefix) if k.rsplit("/", 1)[-1].startswith("shard-")]


@pytest.fixture(scope="module")
def prefect_url(request: pytest.FixtureRequest) -> str:
    return prefect_api_url(request.config)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same change applied without interruption, in another folder, with its embed log."""
    ws = Workspace(tmp_path_factory.mktemp("reference") / "ws")
    ws.build_live()
    plan, path = ws.planned_change(size=120)
    log = ws.root / "embed.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_EMBED_LOG", str(log))
        r = ws.apply(path)
    assert r.status == "done" and r.report["actual"]["reused_from_old"] > 0
    return {"plan": plan, "collection": r.collection, "snapshot": ws.snapshot(r.collection),
            "log": read_log(log), "rows": ws.manifest_rows(r.collection)}


def _cli_apply(ws: Workspace, path: Path, prefect_url: str, **env: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress"],
        cwd=ws.root, env=subprocess_env(PREFECT_API_URL=prefect_url, REINDEX_SHARD_WORKERS="1", **env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    proc.out, proc.err = proc.communicate(timeout=240)  # type: ignore[attr-defined]
    return proc


# (crash point, shard manifests written before the kill, resume through, no text embedded twice)
SCENARIOS = [
    # Shard 2's points are upserted (durably) but it has no manifest: the resumed shard finds them all.
    pytest.param("after-upsert:2", 1, "cli", True, id="after-upsert"),
    # Shard 3 upserted and was about to write its chunk-manifest part and shard manifest.
    pytest.param("before-manifest:3", 2, "api", True, id="before-manifest"),
    # Every shard is done; killed in catch-up, before the population is marked ready.
    pytest.param("catch-up", 4, "api", True, id="catch-up"),
    # The first shard's second embedding batch was embedded but never reached the store (what a kill
    # inside the all-or-nothing upsert leaves): those texts, and only those, are embedded again.
    pytest.param("before-upsert:2", 0, "api", False, id="before-upsert"),
]


@pytest.mark.parametrize("crash_at, manifests_before_kill, resume_with, exactly_once", SCENARIOS)
def test_killed_apply_resumes_to_the_uninterrupted_build(
    crash_at: str, manifests_before_kill: int, resume_with: str, exactly_once: bool,
    tmp_path: Path, reference: dict, prefect_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = Workspace(tmp_path / "ws")
    old = ws.build_live()
    plan, path = ws.planned_change(size=120)
    target = reference["collection"]
    assert plan.body["identity"]["new"]["collection"] == target
    crash_log, resume_log = tmp_path / "crash.log", tmp_path / "resume.log"

    killed = _cli_apply(ws, path, prefect_url, REINDEX_CRASH_AT=crash_at, REINDEX_EMBED_LOG=str(crash_log))
    assert killed.returncode == -signal.SIGKILL, f"exit {killed.returncode}\n{killed.out}\n{killed.err[-3000:]}"

    # The kill really was mid-build: not done, not ready, exactly the expected shards finished.
    state = ws.state()
    assert not state.exists(f"indexes/docs/runs/{plan.plan_hash}/done.json")
    assert read_population(state, "docs", target).state == "building"
    manifests = _shard_manifests(state, target, plan.plan_hash)
    assert len(manifests) == manifests_before_kill, manifests
    assert ws.alias() == old

    # The killed process left its lock behind; its owner is a dead process of this host, so the
    # resume takes the lock over at once instead of waiting for it to expire.
    holder = json.loads(ws.lock_file.read_text())["owner"]
    assert holder.split(":")[1] == str(killed.pid)

    if resume_with == "cli":
        resumed = _cli_apply(ws, path, prefect_url, REINDEX_EMBED_LOG=str(resume_log))
        assert resumed.returncode == 0, f"{resumed.out}\n{resumed.err[-3000:]}"
        report = json.loads(Path(str(path).removesuffix(".json") + ".run.json").read_text())
    else:
        monkeypatch.setenv("REINDEX_EMBED_LOG", str(resume_log))
        r = ws.apply(path)
        assert r.status == "done"
        report = r.report
    assert report["actual"]["shards_skipped"] == manifests_before_kill
    assert report["failures"] == []
    assert read_population(state, "docs", target).state == "ready"
    assert ws.alias() == old, "apply must never move the alias"

    snap: Snapshot = ws.snapshot(target)
    snap.assert_same(reference["snapshot"])
    assert ws.manifest_rows(target) == reference["rows"]

    crashed, resumed_log, want = read_log(crash_log), read_log(resume_log), reference["log"]
    assert sum(crashed.values()) > 0 or crash_at == "catch-up"
    both = crashed + resumed_log
    if exactly_once:
        assert both == want, (
            f"embedded {sum(both.values())} texts across the two runs, the uninterrupted build "
            f"{sum(want.values())}; twice: {sum((both - want).values())}, never: {sum((want - both).values())}"
        )
    else:
        assert not (want - both), "a text was never embedded"
        again = both - want
        assert again, "the lost batch should have been embedded again"
        assert all(crashed[d] and resumed_log[d] for d in again), "only the killed batch may be embedded twice"
        assert max(resumed_log.values()) <= max(want.values())
    assert Counter(resumed_log) <= want


# --------------------------------------------------------------------------------------------
# Exactly-once embedding: a kill inside a shard wastes at most the one embedding batch in flight
# --------------------------------------------------------------------------------------------

SMALL_BATCHES = "apply: {shards: 4, embed_batch_size: 8}"  # operational: the same population as the reference


@pytest.mark.parametrize("crash_at, waste_at_most", [
    pytest.param("before-upsert:5", 8, id="killed-with-a-batch-embedded-but-not-written"),
    pytest.param("after-batch-upsert:5", 0, id="killed-right-after-a-batch-was-written"),
])
def test_a_kill_inside_a_shard_wastes_at_most_one_embedding_batch(
    crash_at: str, waste_at_most: int, tmp_path: Path, reference: dict, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    ws.write_config(120)
    ws.config.write_text(ws.config.read_text().replace("apply: {shards: 4}", SMALL_BATCHES), encoding="utf-8")
    plan, path = ws.plan()
    ws.approve(path)
    crash_log, resume_log = tmp_path / "crash.log", tmp_path / "resume.log"
    proc = subprocess.run(
        [str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress"],
        cwd=ws.root, env=subprocess_env(REINDEX_SHARD_WORKERS="1", REINDEX_CRASH_AT=crash_at,
                                        REINDEX_EMBED_LOG=str(crash_log)),
        capture_output=True, text=True, timeout=240)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    crashed = read_log(crash_log)
    assert sum(crashed.values()) >= 4 * 8, "the kill came after several batches"
    state = ws.state()
    target = reference["collection"]
    assert not _shard_manifests(state, target), "killed inside the first shard"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(resume_log))
    r = ws.apply(path)
    assert r.status == "done", r.report["failures"]
    ws.snapshot(target).assert_same(reference["snapshot"])
    both, want = crashed + read_log(resume_log), reference["log"]
    assert not (want - both), "a text was never embedded"
    wasted = sum((both - want).values())
    assert wasted <= waste_at_most, f"{wasted} texts embedded twice; at most {waste_at_most} may be"
    if waste_at_most:
        assert wasted > 0, "the batch in flight at the kill is lost and embedded again"


# --------------------------------------------------------------------------------------------
# In place: a run killed after its first shard resumes with the same plan (issue 22)
# --------------------------------------------------------------------------------------------


def _edit_eight(ws: Workspace) -> None:
    for f in sorted(ws.corpus.iterdir())[:8]:
        f.write_bytes(f.read_bytes() + b"\n\nAn edit made upstream after the build.\n")


def _metadata_title(ws: Workspace) -> None:
    ws.config.write_text(ws.config.read_text().replace("source: ./corpus", "source: {uri: ./corpus, metadata_fields: [title]}"),
                         encoding="utf-8")


@pytest.mark.parametrize("change, crash_at, kind, state", [
    pytest.param(_edit_eight, "before-manifest:2", "document-scoped", "folder", id="document-scoped"),
    pytest.param(_metadata_title, "after-payload:3", "payload-only", "folder", id="payload-only"),
    pytest.param(_metadata_title, "after-payload:3", "payload-only", "s3", id="payload-only-s3"),
])
def test_an_in_place_apply_killed_after_its_first_shard_resumes_with_its_plan(
    change, crash_at: str, kind: str, state: str, tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """`REINDEX_CRASH_AT=… reindex apply PLAN` (exit 137) then `reindex apply PLAN` exits 0 and the next
    plan is `none`: the drift check must not take the killed run's own manifest writes for drift."""
    extra = ""
    if state == "s3":
        endpoint, bucket = request.getfixturevalue("s3_server"), request.getfixturevalue("s3_bucket")
        extra = (f"state: {{uri: 's3://{bucket}/state', endpoint_url: '{endpoint}'}}\n"
                 f"store: {{path: {tmp_path / 'qdrant'}}}\n")
    ws = Workspace(tmp_path / "ws", extra=extra)
    live = ws.build_live()
    change(ws)
    plan, path = ws.plan()
    assert plan.kind == kind
    cmd = [str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress"]
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    killed = subprocess.run(cmd, cwd=ws.root, env={**env, "REINDEX_CRASH_AT": crash_at}, capture_output=True,
                            text=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    st = ws.state()
    done = _shard_manifests(st, live, plan.plan_hash)
    assert len(done) >= 1, "the kill came after the first shard finished"
    resumed = subprocess.run(cmd, cwd=ws.root, env=env, capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again, _ = ws.plan()
    assert again.kind == "none", again.body["explanation"]
    assert ws.alias() == live


def test_a_foreign_change_to_a_part_a_killed_run_rewrote_is_still_drift(tmp_path: Path) -> None:
    """The resumed run's own writes are accepted, anyone else's are not: a part changed again after the
    kill (here: rewritten with one row dropped) makes the same plan drift."""
    from reindex.books.manifests import shard_name
    from reindex.books.parts import read_chunk_manifest_part, write_chunk_manifest_part
    from reindex.usecases.apply import check_drift

    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    _edit_eight(ws)
    plan, path = ws.plan()
    env = subprocess_env(REINDEX_SHARD_WORKERS="1", REINDEX_CRASH_AT="before-manifest:2")
    env.pop("PREFECT_API_URL", None)
    killed = subprocess.run([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress"],
                            cwd=ws.root, env=env, capture_output=True, text=True, timeout=240)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    st, cfg = ws.state(), ws.cfg()
    assert check_drift(plan, cfg, st) == [], "the killed run's own writes are not drift"
    rewritten = [k for k in st.list(f"indexes/docs/populations/{live}/rewrites/{plan.plan_hash}/")]
    assert rewritten, "the killed run recorded the part it rewrote"
    part = rewritten[0].rsplit("/", 1)[1].removesuffix(".json")
    rows = read_chunk_manifest_part(st, "docs", live, part)
    write_chunk_manifest_part(st, "docs", live, part, rows[1:])
    assert check_drift(plan, cfg, st) == [f"the live population {live} changed since the plan"]
    write_chunk_manifest_part(st, "docs", live, part, rows)
    assert check_drift(plan, cfg, st) == []
    # a part the run never rewrote
    other = next(shard_name(s) for s in range(4) if shard_name(s) not in {k.rsplit("/", 1)[1].removesuffix(".json") for k in rewritten})
    rows = read_chunk_manifest_part(st, "docs", live, other)
    write_chunk_manifest_part(st, "docs", live, other, rows[1:])
    assert check_drift(plan, cfg, st) == [f"the live population {live} changed since the plan"]


def test_a_part_rewritten_twice_by_one_run_still_counts_as_what_it_held_before_the_run(tmp_path: Path) -> None:
    """A run killed between a part's write and its shard manifest rewrites that part again on resume: the
    record keeps the digest from before the first write, so the plan's digest is still recognised."""
    from reindex.books.manifests import ManifestRow
    from reindex.books.parts import manifest_digest, rewrite_chunk_manifest_part, run_rewrites, write_chunk_manifest_part
    from reindex.adapters.stores.objects import open_object_store

    st = open_object_store(str(tmp_path / "state"))
    row = lambda d, h: ManifestRow(d, h, 0, f"fp-{d}-{h}", 5, f"id-{d}-{h}")  # noqa: E731
    write_chunk_manifest_part(st, "docs", "c", "shard-0000", [row("a", "1")])
    write_chunk_manifest_part(st, "docs", "c", "shard-0001", [row("b", "1")])
    planned = manifest_digest(st, "docs", "c")
    rewrite_chunk_manifest_part(st, "docs", "c", "run1", "shard-0000", [row("a", "2")])
    rewrite_chunk_manifest_part(st, "docs", "c", "run1", "shard-0000", [row("a", "3")])  # the resumed run
    rewrite_chunk_manifest_part(st, "docs", "c", "run1", "shard-0002", [row("z", "1")])  # a part it created
    assert manifest_digest(st, "docs", "c") != planned
    assert manifest_digest(st, "docs", "c", rewritten=run_rewrites(st, "docs", "c", "run1")) == planned
    assert manifest_digest(st, "docs", "c", rewritten=run_rewrites(st, "docs", "c", "run2")) != planned
    write_chunk_manifest_part(st, "docs", "c", "shard-0000", [row("a", "2")])  # not what run1 wrote last
    assert manifest_digest(st, "docs", "c", rewritten=run_rewrites(st, "docs", "c", "run1")) != planned
