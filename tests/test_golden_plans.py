"""Golden files: what every renderer of a plan's key numbers prints for the checked-in example plans.

The plan JSON itself must not move (a plan file read and written back is byte-identical), and neither may
what ``reindex plan --json`` (``Plan.summary``), ``reindex plan``'s text, the Markdown and HTML reports, the
approval request of a paused run, the Prefect table artifact and the approval form say. Regenerate after a
deliberate change with ``REINDEX_UPDATE_GOLDEN=1 pytest tests/test_golden_plans.py`` and review the diff."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from reindex.planner import read_plan
from reindex.reports import plan_html, plan_markdown, plan_text
from reindex.usecases.runs import approval_request

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "plans" / "examples").glob("2026-*.json") if p.name.count(".") == 1)
GOLDEN = Path(__file__).with_name("golden")
DEADLINE = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.timezone.utc)


def _renderings(path: Path) -> dict[str, str]:
    from reindex.orchestration import approval_description, plan_numbers

    plan = read_plan(path)
    request = approval_request(plan, path, DEADLINE)
    request["plan"] = path.name  # the absolute path differs between machines
    return {
        "summary.json": json.dumps(plan.summary(), indent=2, sort_keys=True) + "\n",
        "text.txt": plan_text(plan, f"plans/{path.name}") + "\n",
        "md": plan_markdown(plan),
        "html": plan_html(plan),
        "request.json": json.dumps(request, indent=2, sort_keys=True) + "\n",
        "numbers.json": json.dumps(plan_numbers(plan), indent=2) + "\n",
        "approval.md": approval_description(plan, f"plans/{path.name}", DEADLINE) + "\n",
    }


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_json_round_trips_byte_for_byte(path: Path) -> None:
    plan = read_plan(path)
    assert json.dumps(plan.body, indent=2, ensure_ascii=False) + "\n" == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_renderings_match_the_golden_files(path: Path) -> None:
    got = _renderings(path)
    folder = GOLDEN / path.stem
    if os.environ.get("REINDEX_UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in got.items():
            (folder / name).write_text(text, encoding="utf-8")
    for name, text in got.items():
        want = (folder / name).read_text(encoding="utf-8")
        assert text == want, f"{path.stem}/{name} moved (REINDEX_UPDATE_GOLDEN=1 to accept a deliberate change)"
