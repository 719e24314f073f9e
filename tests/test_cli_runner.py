"""`reindex apply` chooses its runner: in-process by default, Prefect when an API is configured; an
unreachable Prefect API is one short error, and `--no-prefect` then applies the same plan."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from helpers_index import REINDEX_BIN, Workspace, subprocess_env


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def _apply(ws: Workspace, path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    e = subprocess_env(PREFECT_HOME=str(ws.root / "prefect-home"), **env)
    e.pop("PREFECT_API_URL", None)
    e.update(env)
    return subprocess.run([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-progress", *args],
                          env=e, capture_output=True, text=True, timeout=300)


def test_apply_runs_in_process_without_a_prefect_api_and_says_so(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    r = _apply(ws, path)
    assert r.returncode == 0, r.stderr
    assert "running in-process; set PREFECT_API_URL to track runs in Prefect" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr


def test_an_unreachable_prefect_api_is_one_short_error_and_no_prefect_applies(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    url = f"http://127.0.0.1:{_dead_port()}/api"
    t0 = time.monotonic()
    r = _apply(ws, path, PREFECT_API_URL=url)
    took = time.monotonic() - t0
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 1, out
    assert took < 60, took
    assert "Traceback" not in out
    lines = out.splitlines()
    assert len(lines) <= 3, out
    assert f"the Prefect API at {url} does not answer" in r.stderr
    assert "--no-prefect" in r.stderr and "PREFECT_API_URL" in r.stderr
    ok = _apply(ws, path, "--no-prefect", PREFECT_API_URL=url)
    assert ok.returncode == 0, ok.stderr
    assert "in-process" in ok.stdout and "done:" in ok.stdout



def test_an_unexpected_error_is_one_line_without_debug_and_a_traceback_with_it(monkeypatch) -> None:
    from click.testing import CliRunner

    from reindex import api, cli

    def broken(*a, **kw):
        raise RuntimeError("injected\nsecond line")

    monkeypatch.setattr(api.Index, "open", broken)
    r = CliRunner().invoke(cli.main, ["status"])
    assert r.exit_code == 1
    assert r.output.strip() == ("error: unexpected RuntimeError: injected (run with --debug for the traceback "
                                "and report it)")
    d = CliRunner().invoke(cli.main, ["--debug", "status"])
    assert isinstance(d.exception, RuntimeError)


def test_an_os_error_names_the_file(monkeypatch) -> None:
    from click.testing import CliRunner

    from reindex import api, cli

    def full(*a, **kw):
        raise OSError(28, "No space left on device", "/data/plans/x.json")

    monkeypatch.setattr(api.Index, "open", full)
    r = CliRunner().invoke(cli.main, ["status"])
    assert r.exit_code == 1
    assert r.output.strip() == "error: No space left on device (/data/plans/x.json); fix that and run the command again"
