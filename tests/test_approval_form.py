"""The approval form a paused run shows in the Prefect UI: ``approver`` required and never blank, and a
description whose every paragraph is whole (the deadline is a list item, the closing lines are short)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pydantic
import pytest

from helpers_index import Workspace


def test_the_approver_is_required_and_the_description_ends_whole(tmp_path: Path) -> None:
    from reindex.orchestration import approval_description, approval_form

    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    deadline = dt.datetime(2026, 12, 8, 12, 0, tzinfo=dt.timezone.utc)
    form = approval_form(plan, str(path), deadline)
    schema = form.model_json_schema()
    assert "approver" in schema["required"] and "approve" not in schema.get("required", [])
    assert "default" not in schema["properties"]["approver"]
    for blank in ("", "   "):
        with pytest.raises(pydantic.ValidationError):
            form(approve=True, approver=blank)
    assert form(approve=True, approver="alice").approver == "alice"
    assert form(approver="bob").approve is False  # rejecting is the preset

    text = approval_description(plan, str(path), deadline)
    assert "- **Deadline:** 2026-12-08 12:00 UTC; without a decision the plan is rejected" in text.splitlines()
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    assert paragraphs[-2:] == [
        "Set **approve** to true and your name in **approver** to build, cut over and schedule gc.",
        "Leave **approve** false to reject the plan: nothing changes."]
