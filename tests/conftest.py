"""Shared fixtures: an offline environment, a loopback S3 server and the shared corpus."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as _hypothesis_settings

# Property tests draw the same examples on every run (CI and `make test` must not fail on a new random
# draw); `HYPOTHESIS_PROFILE=explore make test` draws fresh ones to look for counterexamples (that is how
# the sticky alignment's repeated-chunk limit was found).
_hypothesis_settings.register_profile("ci", derandomize=True)
_hypothesis_settings.register_profile("explore", derandomize=False)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SHARED_CORPUS = REPO.parent / "shared" / "corpus"
# Set by `make mutation` (and mutmut sets MUTANT_UNDER_TEST): only tests whose code runs in this process count.
IN_PROCESS_ONLY = bool(os.environ.get("REINDEX_TESTS_IN_PROCESS")) or "MUTANT_UNDER_TEST" in os.environ
_VENV_BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``REINDEX_SKIP_SOAK=1`` (``make test-fast``) skips the tests marked ``soak``; ``make test`` and CI run them."""
    if not os.environ.get("REINDEX_SKIP_SOAK"):
        return
    skip = pytest.mark.skip(reason="soak test (minutes of waiting) skipped by REINDEX_SKIP_SOAK; `make test` runs it")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_python_children_under_mutation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under mutation testing, skip a test at the moment it starts a Python process (python, reindex,
    prefect from this venv): the child imports the installed, unmutated sources, so its result would
    say nothing about the mutant (a false survivor or a false kill)."""
    if not IN_PROCESS_ONLY:
        return
    real_init = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen, args: object, *a: object, **kw: object) -> None:
        argv0 = args if isinstance(args, (str, os.PathLike)) else next(iter(args), "")  # type: ignore[call-overload]
        if Path(os.fspath(argv0)).parent == _VENV_BIN or os.fspath(argv0) == sys.executable:
            pytest.skip("starts a Python process, which would not run the mutated sources")
        real_init(self, args, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


@pytest.fixture(autouse=True)
def _checkout_untouched(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must not write plans into the checkout's ``plans/`` (the checked-in examples): a plan written
    by a command or handle run with the repository as its working directory fails the test that wrote it."""
    plans = REPO / "plans"
    before = set(plans.iterdir()) if plans.is_dir() else set()
    yield
    # make test runs four pytest processes, each with its own base temp folder: a plan names its corpus, so a
    # file is this process's when it names this process's base temp folder.
    mine = str(request.config._tmp_path_factory.getbasetemp())  # noqa: SLF001 - pytest's own factory

    def ours(p: Path) -> bool:
        try:
            return mine in p.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return False

    new = sorted(p.name for p in (set(plans.iterdir()) if plans.is_dir() else set()) - before if ours(p))
    if new:
        for name in new:
            (plans / name).unlink(missing_ok=True)
        pytest.fail(f"{request.node.nodeid} wrote into the checkout's plans/: {', '.join(new)} (give it --out or "
                    "a working directory of its own)")


@pytest.fixture(scope="session", autouse=True)
def _offline_env() -> Iterator[None]:
    """No model downloads, no telemetry, no tokenizer thread pools fighting pytest."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setenv("DO_NOT_TRACK", "1")
        mp.setenv("TOKENIZERS_PARALLELISM", "false")
        yield


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Endpoint URL of an in-process moto S3 server on 127.0.0.1, with fake credentials in the
    environment (and no AWS config files or profiles from the host)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
                mp.delenv(name, raising=False)
            mp.setenv("AWS_ACCESS_KEY_ID", "testing")
            mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
            mp.setenv("AWS_CONFIG_FILE", os.devnull)
            mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
            yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_server_process(tmp_path: Path) -> Iterator[str]:
    """Endpoint URL of a moto S3 server in a process of its own (``moto_server``), for tests during which this
    process cannot serve requests (it holds the interpreter lock, as the edge engine's index build does), with a
    bucket ``test`` and the fake credentials of :func:`s3_server`."""
    import socket
    import time

    import boto3

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([str(_VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        with pytest.MonkeyPatch.context() as mp:
            for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
                mp.delenv(name, raising=False)
            mp.setenv("AWS_ACCESS_KEY_ID", "testing")
            mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
            mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
            mp.setenv("AWS_CONFIG_FILE", os.devnull)
            mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
            deadline = time.monotonic() + 60
            while True:
                try:
                    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="test")
                    break
                except Exception:  # noqa: BLE001 - not listening yet
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            yield endpoint
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def s3_bucket(s3_server: str) -> str:
    """A fresh, empty bucket on the loopback S3 server."""
    import boto3

    name = f"test-{uuid.uuid4().hex[:16]}"
    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def shared_corpus() -> Path:
    """The team's shared corpus folder (``../shared/corpus``); skips the test when it is absent."""
    if not SHARED_CORPUS.is_dir():
        pytest.skip("shared corpus not present")
    return SHARED_CORPUS
