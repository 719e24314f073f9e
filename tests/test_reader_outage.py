"""Readers ride out a state-store outage (issue 43, item 2; DESIGN.md invariant 20): with the state on S3, a held
reader keeps answering from the last good records while S3 does not answer, fails fast instead of retrying on the
read path, says so once, and follows the store again when it answers."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest
from helpers_index import Workspace

from reindex import api
from reindex.adapters.stores.objects import open_object_store
from reindex.adapters.stores.reading import ReaderStore
from reindex.errors import StateError, TransientError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Moto:
    """A loopback S3 server that can be stopped and started again on the same port (its buckets live in this
    process's moto backends, so they outlive a restart)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.server = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def moto(s3_server: str) -> _Moto:  # s3_server: the fake credentials in the environment
    m = _Moto()
    yield m
    m.stop()


def test_a_held_reader_answers_from_its_last_good_records_while_s3_is_down_and_follows_it_again(
        tmp_path: Path, moto: _Moto, caplog: pytest.LogCaptureFixture) -> None:
    import boto3

    boto3.client("s3", endpoint_url=moto.endpoint).create_bucket(Bucket="books")
    state = f"{{uri: 's3://books/state', endpoint_url: '{moto.endpoint}'}}"
    ws = Workspace(tmp_path / "ws", extra=f"state: {state}\nstore: {{path: {tmp_path / 'qdrant'}}}\n")
    live = ws.build_live()
    with api.Querier(ws.config) as q:
        before = q.query("how are sockets closed?", k=5)
        assert before.population == live and len(before.results) == 5
        moto.stop()  # S3 does not answer: connections are refused
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="reindex"):
            for _ in range(4):
                time.sleep(1.05)  # past the reader's 1 s refresh of a remote record: each query reads the store
                t0 = time.perf_counter()
                got = q.query("how are sockets closed?", k=5)
                took = time.perf_counter() - t0
                assert took <= 1.0, f"a query took {took:.2f} s while S3 was down"
                assert got.population == live and got.results == before.results
            warned = [r for r in caplog.records if r.levelno == logging.WARNING and "does not answer" in r.getMessage()]
            assert len(warned) == 1, [r.getMessage() for r in caplog.records]
            assert "s3://books/state" in warned[0].getMessage()
            moto.start()
            deadline = time.monotonic() + 30
            while not any("answers again" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the reader never asked S3 again"
                time.sleep(0.5)
                assert q.query("how are sockets closed?", k=5).results == before.results
        assert len([r for r in caplog.records if "does not answer" in r.getMessage()]) == 1


class _Refusing:
    """A store that raises TransientError while ``down`` is True, counting the calls that reached it."""

    def __init__(self, inner) -> None:
        self.inner, self.down, self.calls = inner, False, 0
        self.remote = True

    def describe(self) -> str:
        return "s3://somewhere/state"

    def get(self, key: str):
        self.calls += 1
        if self.down:
            raise TransientError("get: connection refused")
        return self.inner.get(key)

    def list(self, prefix: str = ""):
        self.calls += 1
        if self.down:
            raise TransientError("list: connection refused")
        return self.inner.list(prefix)


def test_a_reader_store_asks_a_store_that_is_down_once_per_quiet_period(tmp_path: Path) -> None:
    inner = open_object_store(str(tmp_path / "state"))
    inner.put("a.json", b"A")
    now = [0.0]
    refusing = _Refusing(inner)
    reader = ReaderStore(refusing, quiet_s=5.0, clock=lambda: now[0])
    assert reader.get("a.json") == b"A" and reader.get("absent.json") is None and reader.list("") == ["a.json"]
    refusing.down = True
    calls = refusing.calls
    for _ in range(10):
        assert reader.get("a.json") == b"A" and reader.get("absent.json") is None  # the last good answers
    assert refusing.calls == calls + 1 and reader.down  # one try, then it rests
    with pytest.raises(TransientError, match=r"does not answer .* has not read never\.json before"):
        reader.get("never.json")
    assert refusing.calls == calls + 1  # refused at once, without asking
    now[0] = 5.1
    assert reader.get("a.json") == b"A" and refusing.calls == calls + 2  # one probe per quiet period
    refusing.down = False
    inner.put("a.json", b"B")
    now[0] = 10.3
    assert reader.get("a.json") == b"B" and not reader.down  # it answers again: followed at once
    with pytest.raises(StateError, match="read-only"):
        reader.put("a.json", b"C")
