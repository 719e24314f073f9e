"""Prefect's temporary API server (no PREFECT_API_URL) that does not start in time is one line: the cause and
the two ways out, not Prefect's RuntimeError with the server's captured output. The real failure, from a
real `reindex apply --prefect`, is in tests/test_flows.py (it imports Prefect's server: run beside the rest)."""

from __future__ import annotations

from reindex.foundation.settings import temporary_server_failure

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


_TIMED_OUT = "RuntimeError('Timed out while attempting to connect to ephemeral Prefect API server.')"


def _child(code: str) -> list[str]:
    import subprocess
    import sys

    from helpers_index import subprocess_env

    env = subprocess_env()
    env.pop("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", None)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_the_start_up_limit_reaches_prefect_from_the_flows_and_the_line_names_the_limit_prefect_applied() -> None:
    """Prefect reads its settings once, at import. reindex's flows module imports Prefect before the runner
    module, so the 120 s default set there never reached Prefect (it waited 20 s) while the line said 120 s.
    A script that imports Prefect itself first keeps Prefect's 20 s: the line says 20 s."""
    setting = "from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as S; print(S.value())"
    line = f"from reindex.runners.prefect import api_failure_line; print(api_failure_line({_TIMED_OUT}))"
    flows = _child(f"import reindex.orchestration; {setting}; {line}")
    assert flows[0] == "120" and "did not answer within 120 s" in flows[1], flows
    own = _child(f"import prefect; {setting}; {line}")  # the Python guide's own flow: `from prefect import flow` first
    assert own[0] == "20" and "did not answer within 20 s" in own[1], own
