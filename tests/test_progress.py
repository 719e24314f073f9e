"""The apply progress bar's arithmetic (issue 15): never a negative or impossible count, an ETA from the
first finished shard on. Fed recorded event sequences: hand-written ones that reproduce the −875 seen
(embedding events of every shard arrive before their documents), and real ones recorded from an apply
that failed on one shard, retried a transient embedding error, and was resumed with skipped shards."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_index import Workspace

from reindex.errors import ModelError, TransientError
from reindex.engine.eta import progress_line
from reindex.terminal.progress import ProgressCounts, format_eta
from reindex import api


def _feed(events: list[dict], step: float = 1.0) -> tuple[ProgressCounts, list[tuple[int, int, int, int, float | None]]]:
    """Feed events one per ``step`` seconds of a fake clock; returns the counts and what the bar showed."""
    c = ProgressCounts()
    shown = []
    for i, e in enumerate(events):
        c.feed(e, now=i * step)
        shown.append((c.completed, c.chunks, c.reused, c.embedded, c.eta(i * step)))
    return c, shown


def _check(c: ProgressCounts, shown: list) -> None:
    for completed, chunks, reused, embedded, eta in shown:
        assert min(completed, chunks, reused, embedded) >= 0, shown
        assert reused + embedded == chunks
        assert c.documents_total is None or completed <= c.documents_total
        assert eta is None or eta >= 0


def test_embedding_events_before_their_documents_never_make_reuse_negative() -> None:
    # Two shards' threads: 875 chunks embedded before either batch's documents event (the issue's −875).
    events = [{"kind": "start", "runner": "in-process", "shards": 2, "documents_planned": 64}]
    events += [{"kind": "embedded", "chunks": 125, "tokens": 25_000}] * 7
    events += [
        {"kind": "documents", "documents": 32, "chunks": 500, "reused": 0, "embedded": 500},
        {"kind": "documents", "documents": 32, "chunks": 400, "reused": 25, "embedded": 375},
    ]
    c, shown = _feed(events)
    _check(c, shown)
    naive = [sum(e.get("chunks", 0) for e in events[:i + 1] if e["kind"] == "documents")
             - sum(e.get("chunks", 0) for e in events[:i + 1] if e["kind"] == "embedded") for i in range(len(events))]
    assert min(naive) == -875  # what the old bar showed: documented chunks minus embedded chunks
    assert (c.reused, c.embedded, c.chunks, c.completed, c.tokens) == (25, 875, 900, 64, 175_000)


def test_eta_appears_with_the_first_finished_shard_and_counts_resumed_shards_as_done() -> None:
    events = [
        {"kind": "start", "shards": 4, "documents_planned": 100},
        {"kind": "shard-skipped", "shard": 0, "documents": 25, "chunks": 300},  # done by the killed run
        {"kind": "documents", "documents": 10, "chunks": 120, "reused": 100, "embedded": 20},
        {"kind": "documents", "documents": 15, "chunks": 180, "reused": 180, "embedded": 0},
        {"kind": "shard-done", "shard": 1},
        {"kind": "documents", "documents": 25, "chunks": 250, "reused": 200, "embedded": 50},
        {"kind": "shard-done", "shard": 2},
    ]
    c, shown = _feed(events, step=2.0)
    _check(c, shown)
    etas = [s[4] for s in shown]
    assert etas[:4] == [None, None, None, None]  # no shard finished yet: no guess
    # At t=8 s: 25 documents done by this run in 8 s, 50 of 100 left (25 were resumed) → 16 s.
    assert etas[4] == pytest.approx(16.0)
    # At t=12 s: 50 done here, 25 left → 6 s.
    assert etas[6] == pytest.approx(6.0)
    assert c.completed == 75 and c.resumed_documents == 25 and c.shards_skipped == 1
    assert format_eta(etas[4]) == "0:00:16" and format_eta(None) == "-:--:--" and format_eta(3725) == "1:02:05"


def test_catch_up_never_pushes_the_count_past_the_total_and_eta_by_shards_without_a_total() -> None:
    events = [
        {"kind": "start", "shards": 2, "documents_planned": 10},
        {"kind": "documents", "documents": 10, "chunks": 20, "reused": 20, "embedded": 0},
        {"kind": "shard-done", "shard": 0},
        {"kind": "shard-done", "shard": 1},
        {"kind": "catch-up", "round": 1, "documents": 3},
        {"kind": "documents", "documents": 3, "chunks": 6, "reused": 0, "embedded": 6},
        {"kind": "shard-done", "shard": 0},
    ]
    c, shown = _feed(events)
    _check(c, shown)
    assert c.completed == 10 and c.catch_up_documents == 3 and c.chunks == 20 and c.shards_done == 2
    assert shown[-1][4] is None and c.phase == "catch-up"
    # In place with an unknown total: shards measure the work.
    c, shown = _feed([{"kind": "start", "shards": 4, "documents_planned": None},
                      {"kind": "documents", "documents": 3, "chunks": 3, "reused": 3, "embedded": 0},
                      {"kind": "shard-done", "shard": 0}])
    assert shown[-1][4] == pytest.approx(2.0 * 3 / 1)


class _Flaky:
    """The real embedder, with a transient error on its first call and (optionally) a terminal one on its
    ``fail_at``-th call."""

    def __init__(self, inner, fail_at: int | None) -> None:
        self.inner, self.fail_at, self.calls = inner, fail_at, 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def embed(self, texts):
        self.calls += 1
        if self.calls == 1:
            raise TransientError("injected: connection reset")
        if self.fail_at is not None and self.calls == self.fail_at:
            raise ModelError("injected: the model crashed")
        return self.inner.embed(texts)


def _recorded_apply(ws: Workspace, path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: int | None):
    events: list[dict] = []
    with api.Index.open(ws.config, embedder=_Flaky(api.make_embedder(ws.cfg().vector), fail_at)) as ix:
        r = ix.apply(path, progress=events.append, use_prefect=False)
    return r, events


def test_recorded_events_of_a_failed_retried_and_resumed_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    # A recut: some chunks reused, others embedded; small embedding batches, so that the resumed run embeds more
    # than one (its ETA starts with its second).
    plan, path = ws.planned_change(size=100, extra="apply: {shards: 4, embed_batch_size: 8}")
    first, ev1 = _recorded_apply(ws, path, monkeypatch, fail_at=3)
    assert first.status == "failed"
    second, ev2 = _recorded_apply(ws, path, monkeypatch, fail_at=None)
    assert second.status == "done", second.report["failures"]
    for events, run in ((ev1, first), (ev2, second)):
        c, shown = _feed(events)
        _check(c, shown)
        actual = run.report["actual"]
        assert c.chunks == actual["chunks_written"]
        assert c.reused == actual["reused_from_old"] + actual["reused_from_target"]
        assert c.tokens == actual["tokens_embedded"]
        assert c.shards_skipped == actual["shards_skipped"]
    c, shown = _feed(ev2)
    assert c.shards_skipped >= 1 and c.resumed_documents > 0 and c.resumed_tokens > 0
    assert c.completed == plan.body["work"]["documents"]["total"]  # resumed shards count as done
    # With tokens to embed the ETA comes from the measured rate, from this run's second embedding batch on
    # (not from the first finished shard: shards run side by side and the first ends near the end).
    batches = [i for i, e in enumerate(ev2) if e["kind"] == "embedded"]
    assert len(batches) >= 2 and ev2[0]["tokens_planned"] == plan.body["work"]["tokens_to_embed"] > 0
    assert all(s[4] is None for s in shown[:batches[1]]) and shown[batches[1]][4] is not None
    assert c.tokens_done == min(c.tokens + c.resumed_tokens, c.tokens_planned)


def test_eta_from_tokens_is_the_tokens_left_at_the_rate_measured_after_the_first_batch() -> None:
    events = [
        {"kind": "start", "shards": 4, "documents_planned": 40, "tokens_planned": 10_000},
        {"kind": "shard-skipped", "shard": 0, "documents": 10, "chunks": 50, "tokens": 2_000},  # the killed run's
        {"kind": "embedded", "chunks": 10, "tokens": 1_000},  # t=2: the first batch (a model load in it): no rate
        {"kind": "embedded", "chunks": 10, "tokens": 1_000},  # t=3: 1,000 tokens in 1 s since the first batch
        {"kind": "documents", "documents": 10, "chunks": 20, "reused": 0, "embedded": 20},
        {"kind": "embedded", "chunks": 10, "tokens": 1_000},  # t=5: 2,000 tokens in 3 s
        {"kind": "catch-up", "round": 1, "documents": 1},
    ]
    c, shown = _feed(events)
    etas = [s[4] for s in shown]
    assert etas[:3] == [None, None, None]
    assert etas[3] == pytest.approx((10_000 - 2_000 - 2_000) / 1_000.0)  # 6 s
    assert etas[4] == pytest.approx((10_000 - 2_000 - 2_000) / (1_000 / 2))  # t=4, same tokens: slower, 12 s
    assert etas[5] == pytest.approx((10_000 - 2_000 - 3_000) / (2_000 / 3))  # 7.5 s
    assert etas[6] is None  # catch-up: the shards are over
    snap = c.snapshot(5.0)
    assert (snap["tokens_done"], snap["tokens_planned"], snap["documents_done"], snap["shards_done"]) == (5_000, 10_000, 20, 1)
    assert snap["tokens_per_second"] == pytest.approx(2_000 / 3, abs=0.1)
    assert progress_line({**snap, "eta_seconds": 7.5}) == "5,000 / 10,000 tokens · 667 tok/s · ETA 0:00:08 · shards 1/4"


def test_the_prefect_progress_artifact_follows_tokens_and_says_the_rate_and_eta(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import re

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterType

    from helpers_index import prefect_api_url

    prefect_api_url(request.config)  # the session's Prefect test server, in this process
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    plan, path = ws.planned_change(size=120)
    planned = plan.body["work"]["tokens_to_embed"]
    only_progress = ArtifactFilter(type=ArtifactFilterType(any_=["progress"]))
    with get_client(sync_client=True) as c:  # the session's server: earlier tests' applies left theirs
        before = {a.id for a in c.read_artifacts(artifact_filter=only_progress)}
    r = ws.apply(path, use_prefect=True)
    assert r.status == "done" and r.report["actual"]["tokens_embedded"] == planned > 0
    with get_client(sync_client=True) as c:
        arts = [a for a in c.read_artifacts(artifact_filter=only_progress) if a.id not in before]
    line = re.compile(rf"reindex apply: {planned:,} / {planned:,} tokens · [\d,]+ tok/s · ETA \d+:\d\d:\d\d · shards 4/4")
    ours = [a for a in arts if line.fullmatch(a.description or "")]
    assert len(ours) == 1 and float(ours[0].data) == 100.0, [(a.description, a.data) for a in arts]


def test_an_apply_counts_each_event_once_and_its_listener_renders_those_counts(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress flows once (issue 40): the apply feeds every event to one ProgressCounts and hands it to a listener
    that can render it (the CLI's bar); the bar does not count again. Without ``attach`` a listener still gets every
    event, as scripts' callbacks always did."""
    from reindex.terminal.progress import ApplyProgress

    fed: list[dict] = []
    real_feed = ProgressCounts.feed
    monkeypatch.setattr(ProgressCounts, "feed", lambda self, e, now: (fed.append(e), real_feed(self, e, now))[1])
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    seen: list[dict] = []
    with ApplyProgress(enabled=False, announce=False) as bar:
        own = bar.counts
        r = ws.apply(path, progress=lambda e: (seen.append(e), bar(e)))
    assert r.status == "done"
    assert bar.counts is own  # a plain callable gets no attach: the bar it wraps counted for itself
    fed.clear()
    ws2 = Workspace(tmp_path / "ws2")
    plan2, path2 = ws2.plan()
    with ApplyProgress(enabled=False, announce=False) as bar2:
        mine = bar2.counts
        assert ws2.apply(path2, progress=bar2).status == "done"
    assert bar2.counts is not mine and bar2.counts.completed == plan2.body["work"]["documents"]["total"]
    assert len(fed) == len({id(e) for e in fed})  # each event fed once (the bar did not feed it again)
    assert seen and len(fed) == len(seen)  # the same event stream, counted once however it is listened to
