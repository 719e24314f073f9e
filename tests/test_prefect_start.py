"""Prefect's temporary API server (no PREFECT_API_URL) that does not start in time is one line: the cause and
the two ways out, not Prefect's RuntimeError with the server's captured output. The real failure, from a
real `reindex apply --prefect`, is in tests/test_flows.py (it imports Prefect's server: run beside the rest)."""

from __future__ import annotations

from reindex.settings import temporary_server_failure

LINE = ("error: Prefect's temporary API server (started because no PREFECT_API_URL is set) did not answer within 1 s "
        "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; a busy machine starts it slowly): start a Prefect server "
        "(`prefect server start`) and set PREFECT_API_URL to it, or run without Prefect (`reindex apply --no-prefect "
        "PLAN`; from Python, runner=api.ThreadRunner())\n")


def test_only_that_failure_is_rewritten() -> None:
    err = RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server. stdout: lots\nmore")
    assert "error: " + (temporary_server_failure(err) or "") + "\n" != LINE  # the limit comes from the environment
    assert "\n" not in (temporary_server_failure(err) or "x\n") and "lots" not in (temporary_server_failure(err) or "")
    assert temporary_server_failure(RuntimeError("something else")) is None
    assert temporary_server_failure(ValueError("ephemeral Prefect API server")) is None
