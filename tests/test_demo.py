"""`make demo`'s script, with each `reindex` command recorded instead of run (the real demo takes minutes with
the real model): it searches the alias before and after the chunker cutover, and makes a metadata-only change
on the way, filtering the second search on the metadata the change added."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers_index import SAMPLE
from reindex import api
from reindex.terminal import demo
from reindex.adapters.sources.base import title_of


def test_the_demo_searches_before_and_after_a_cutover_around_a_metadata_only_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "demo"
    monkeypatch.setattr(demo, "WORK", work)
    calls: list[tuple[tuple[str, ...], str]] = []

    def record(*args: str, ok: tuple[int, ...] = (0,)) -> str:
        if args[0] == "init":
            api.init_config(work / "reindex.yaml", index="docs", source="./corpus")
        calls.append((args, (work / "reindex.yaml").read_text() if (work / "reindex.yaml").exists() else ""))
        return f"  plan: plans/{len(calls)}.json\n" if args[0] == "plan" else ""

    monkeypatch.setattr(demo, "run", record)
    demo.main()
    names = [a[0] for a, _ in calls]
    chunker_cut = max(i for i, n in enumerate(names) if n == "cutover")
    plan_of_cut = calls[chunker_cut][0][1]
    before = [i for i, n in enumerate(names[:chunker_cut]) if n == "query"]
    after = [i for i, n in enumerate(names) if n == "query" and i > chunker_cut]
    assert before and after
    assert names.index("apply", names.index("approve")) < before[-1]  # built, not yet cut over
    assert calls[before[-1] - 1][0] == ("apply", plan_of_cut)
    # Between the cutover and the second search: a plan and an apply of a config whose only change is a
    # metadata field (a payload-only change: nothing embedded).
    plan_i = names.index("plan", chunker_cut)
    assert plan_i < names.index("apply", plan_i) < after[0]
    old_cfg, new_cfg = calls[chunker_cut][1], calls[plan_i][1]
    assert new_cfg == old_cfg.replace("metadata_fields: []", "metadata_fields: [title]", 1) != old_cfg
    query = calls[after[0]][0]
    assert query[1] == calls[before[-1]][0][1]  # the same question
    title = title_of("pep-0263.rst", (SAMPLE / "corpus" / "pep-0263.rst").read_bytes())
    assert query[-2:] == ("--filter", f"title={title}")
