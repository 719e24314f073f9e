"""Signed approvals (issue 22): an approval record is a plain file, so whoever can write ``plans/`` can
approve. With ``approval.hmac_key_env`` set, `reindex approve` signs the record and apply and
``cutover --force`` refuse one that is unsigned, tampered with, or signed with another key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers_index import Workspace
from reindex import api
from reindex.planner.approvals import approval_path
from reindex.errors import ApprovalError

KEY_ENV = "REINDEX_TEST_APPROVAL_KEY"
SIGNED = f"approval: {{hmac_key_env: {KEY_ENV}}}"


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A live index whose config then turns signing on and changes the chunker: a plan needing approval."""
    ws = Workspace(tmp_path_factory.mktemp("signed") / "ws")
    ws.build_live()
    ws.write_config(120, extra=SIGNED)
    plan, path = ws.plan()
    assert plan.body["approval"]["required"]
    return ws.root, path.name


@pytest.fixture
def signed_change(planned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Workspace, Path]:
    """A copy of ``planned`` for one test (a plan stays valid when its workspace moves), the key set."""
    root, name = planned
    shutil.copytree(root, tmp_path / "ws", symlinks=True)
    ws = object.__new__(Workspace)
    ws.root = tmp_path / "ws"
    monkeypatch.setenv(KEY_ENV, "k3y-for-tests")
    return ws, ws.plans / name


def _record(path: Path) -> dict:
    return json.loads(approval_path(path).read_text(encoding="utf-8"))


def _write(path: Path, record: dict) -> None:
    approval_path(path).parent.mkdir(parents=True, exist_ok=True)
    approval_path(path).write_text(json.dumps(record), encoding="utf-8")


def test_a_hand_written_approval_is_refused_when_signing_is_configured(signed_change, monkeypatch) -> None:
    ws, path = signed_change
    plan = api.show_plan(path)
    _write(path, {"schema": "reindex/approval/v1", "plan_hash": plan.plan_hash, "index": "docs", "kind": plan.kind,
                  "by": "mallory", "note": "", "at": "2026-12-01T00:00:00+00:00"})
    with pytest.raises(ApprovalError) as info:
        ws.apply(path)
    assert str(info.value) == (f"{approval_path(path)}: the approval by mallory is not signed, but approval.hmac_key_env "
                               "is set: record it with `reindex approve PLAN --by NAME -c CONFIG` where the key is set")
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ApprovalError, match=f"^approval.hmac_key_env: environment variable {KEY_ENV} is not set"):
        ws.apply(path)
    with ws.store() as s:
        assert len(s.list_collections()) == 1  # nothing was built


def test_a_signed_approval_passes_and_a_tampered_one_fails(signed_change, monkeypatch) -> None:
    ws, path = signed_change
    api.approve_plan(path, "alice", "ok", config_path=ws.config)
    good = _record(path)
    assert good["signature"].startswith("hmac-sha256:") and len(good["signature"]) == len("hmac-sha256:") + 64
    mismatch = (f"^{approval_path(path)}: the approval's signature does not match its content \\(changed after "
                "signing, or signed with another key\\); approve the plan again with `reindex approve`$")
    for field, value in (("by", "mallory"), ("at", "2030-01-01T00:00:00+00:00"), ("plan_hash", "0" * 64)):
        _write(path, {**good, field: value})
        with pytest.raises(ApprovalError, match=mismatch if field != "plan_hash" else "signature does not match"):
            ws.apply(path)
    monkeypatch.setenv(KEY_ENV, "another-key")
    _write(path, good)
    with pytest.raises(ApprovalError, match=mismatch):
        ws.apply(path)
    monkeypatch.setenv(KEY_ENV, "k3y-for-tests")
    r = ws.apply(path)
    assert r.status == "done", r.report
    # cutover --force verifies too: a tampered record is refused, the signed one lets it through.
    _write(path, {**good, "by": "mallory"})
    with pytest.raises(ApprovalError, match=mismatch):
        ws.cutover(path, force=True)
    _write(path, good)
    assert ws.cutover(path, force=True).report["swap"]


def test_reindex_approve_signs_with_the_config_here_and_the_prefect_task_signs_too(signed_change, monkeypatch) -> None:
    ws, path = signed_change
    monkeypatch.chdir(ws.root)  # `reindex approve PLAN --by NAME` without -c: the reindex.yaml here
    api.approve_plan(path, "alice")
    first = _record(path)["signature"]
    assert first.startswith("hmac-sha256:")
    from reindex.orchestration import record_approval_task

    approval_path(path).unlink()
    record_approval_task.fn(str(path), str(ws.config), "bob", "from the Prefect form")
    rec = _record(path)
    assert rec["by"] == "bob" and rec["signature"].startswith("hmac-sha256:") and rec["signature"] != first
    assert ws.apply(path).status == "done"
