"""The OpenAI-compatible HTTP embedder against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import numpy as np
import pytest

from reindex.domain.config import EmbedConfig, VectorHalf
from reindex.adapters.embedders import make_embedder
from reindex.errors import ConfigError, ModelError

KEY = "sk-test-very-secret-123"
DIM = 8


class _Handler(BaseHTTPRequestHandler):
    fail_next: list[int] = []  # status codes to answer before succeeding
    seen_auth: list[str] = []
    calls = 0

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        type(self).calls += 1
        type(self).seen_auth.append(self.headers.get("Authorization", ""))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/embeddings":
            self._send(404, {"error": {"message": "no such route"}})
            return
        if type(self).fail_next:
            self._send(type(self).fail_next.pop(0), {"error": {"message": "try later"}})
            return
        if body["model"] == "bad-model":
            self._send(400, {"error": {"message": "model not found"}})
            return
        data = []
        for i, text in enumerate(body["input"]):
            seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
            data.append({"index": i, "embedding": np.random.default_rng(seed).standard_normal(DIM).tolist()})
        data.reverse()  # servers may answer out of order; the client sorts by index
        self._send(200, {"data": data, "usage": {"prompt_tokens": sum(len(t.split()) for t in body["input"])}})

    def _send(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def api_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    _Handler.fail_next, _Handler.seen_auth, _Handler.calls = [], [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def _embedder(url: str, model: str = "text-embedding-test", **opts: object):
    vector = VectorHalf(provider="openai", model=model, revision="2026-01", dimension=DIM, backend="api", prefix="passage: ")
    return make_embedder(vector, options=EmbedConfig(base_url=url, api_key_env="TEST_EMBED_KEY", **opts))


def test_embeds_in_order_with_prefix_normalised_and_key_from_env(api_server: str) -> None:
    emb = _embedder(api_server)
    res = emb.embed(["alpha beta", "gamma"])
    assert res.vectors.shape == (2, DIM)
    assert np.allclose(np.linalg.norm(res.vectors, axis=1), 1.0)
    again = emb.embed(["gamma"])
    assert np.allclose(again.vectors[0], res.vectors[1])  # order restored from `index`
    assert res.tokens == 5  # the server's usage: "passage: alpha beta" (3 words) + "passage: gamma" (2)
    assert _Handler.seen_auth == [f"Bearer {KEY}"] * 2


def test_transient_errors_are_retried(api_server: str) -> None:
    _Handler.fail_next = [429, 503]
    res = _embedder(api_server, max_retries=3).embed(["x"])
    assert res.vectors.shape == (1, DIM) and _Handler.calls == 3


def test_retries_are_bounded_and_then_the_error_is_terminal(api_server: str) -> None:
    # The client is the only retry layer for API calls: once spent, nothing above may retry again.
    _Handler.fail_next = [503] * 10
    with pytest.raises(ModelError, match="HTTP 503.*after 2 attempts") as info:
        _embedder(api_server, max_retries=1).embed(["x"])
    assert _Handler.calls == 2 and KEY not in str(info.value)


def test_client_errors_fail_at_once_with_the_server_message(api_server: str) -> None:
    with pytest.raises(ModelError, match="HTTP 400 model not found") as info:
        _embedder(api_server, model="bad-model").embed(["x"])
    assert _Handler.calls == 1 and KEY not in str(info.value)


def test_missing_key_is_a_config_error(api_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_EMBED_KEY")
    with pytest.raises(ConfigError, match="environment variable TEST_EMBED_KEY is not set"):
        _embedder(api_server)


def test_unreachable_server_is_reported_after_the_bounded_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    with pytest.raises(ModelError, match="ConnectError.*after 1 attempts"):
        _embedder("http://127.0.0.1:9/v1", max_retries=0, timeout_s=2).embed(["x"])


def test_the_configured_bearer_key_is_sent_even_with_user_info_in_the_url(api_server: str) -> None:
    """Issue 22: httpx turned ``user:password@`` in base_url into ``Authorization: Basic …``, replacing the
    configured Bearer key silently. The config refuses such a URL; the client sends the key regardless."""
    from pydantic import ValidationError

    url = api_server.replace("http://", "http://user:pa55word@")
    with pytest.raises(ValidationError, match="holds credentials"):
        EmbedConfig(base_url=url, api_key_env="TEST_EMBED_KEY")
    vector = VectorHalf(provider="openai", model="m", revision="2026-01", dimension=DIM, backend="api")
    options = EmbedConfig.model_construct(**{**EmbedConfig().model_dump(), "base_url": url, "api_key_env": "TEST_EMBED_KEY"})
    make_embedder(vector, options=options).embed(["x"])
    assert _Handler.seen_auth == [f"Bearer {KEY}"]
# ---------------------------------------------------------------------------------------------
# Throughput: concurrent requests paced to both limits, Retry-After, adaptive back-off (issue 25)
# ---------------------------------------------------------------------------------------------

from tests.helpers_api import Limits, LimitedServer, sustained_tokens_per_minute  # noqa: E402


def _limited(url: str, monkeypatch: pytest.MonkeyPatch, **opts: object):
    monkeypatch.setenv("TEST_EMBED_KEY", KEY)
    return _embedder(url, **opts)


def test_requests_run_concurrently_and_stay_under_both_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    # 60 texts of 6 tokens ("passage: " + 5 words) in requests of 4: 15 requests, 360 tokens. The limits
    # allow 120 tokens/s (5 requests/s) and 10 requests/s; each answer takes 0.5 s, so keeping to the
    # limit needs about 3 requests in flight. A client that did not pace would be refused (429).
    limits = Limits(requests_per_minute=600, tokens_per_minute=7200, latency_s=0.5, burst_s=1.0)
    texts = [f"w{i} x y z v" for i in range(60)]
    with LimitedServer(limits) as server:
        emb = _limited(server.url, monkeypatch, request_texts=4, concurrency=6,
                       max_requests_per_minute=600, max_tokens_per_minute=7200)
        t0 = time.monotonic()
        res = emb.embed(texts)
        wall = time.monotonic() - t0
        alone = emb.embed([texts[7]]).vectors[0]
    assert res.vectors.shape == (60, DIM) and res.tokens == 360
    assert np.allclose(res.vectors[7], alone)  # in order across requests
    assert server.log.refused == []
    assert server.log.max_in_flight >= 2
    assert wall >= (360 - 120) / 120  # no faster than the limit allows (120 tokens of burst)
    assert sustained_tokens_per_minute(server.log) <= 7200 * 1.05


def test_without_pacing_the_same_load_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The control for the test above: the server's limits do refuse a client that does not pace.
    limits = Limits(requests_per_minute=600, tokens_per_minute=7200, latency_s=0.5, retry_after_s=0.2)
    with LimitedServer(limits) as server:
        emb = _limited(server.url, monkeypatch, request_texts=4, concurrency=6, max_retries=8)
        emb.embed([f"w{i} x y z v" for i in range(60)])
    assert len(server.log.refused) > 0


def test_retry_after_pauses_every_request_of_the_shared_client(monkeypatch: pytest.MonkeyPatch) -> None:
    # Back-off alone would wait at most 1.5 s before the first retry; Retry-After says 2.5 s, and a request
    # another thread starts on the same client during the pause waits for it too.
    limits = Limits(forced_429=1, retry_after_s=2.5)
    with LimitedServer(limits) as server:
        emb = _limited(server.url, monkeypatch, max_tokens_per_minute=6_000_000)
        first = threading.Thread(target=emb.embed, args=(["a b"],))
        first.start()
        # Wait until the client has read the 429 (its pause is set), not only until the server sent it: a
        # request started in between is not "during the pause" (failed 3 of 7 at load 11-17 that way).
        deadline = time.monotonic() + 60
        while emb._pacer.throttled == 0:
            assert time.monotonic() < deadline, "the client never read the 429"
            time.sleep(0.01)
        second = emb.embed(["c d"])
        first.join()
    refused_at = server.log.refused[0]
    later = sorted(a for a in server.log.arrivals if a > refused_at)
    assert second.vectors.shape == (1, DIM) and len(later) == 2
    assert later[0] - refused_at >= 2.4, later[0] - refused_at
    assert emb._pacer.throttled == 1


def test_a_429_slows_the_pace_and_successes_restore_it() -> None:
    from reindex.adapters.embedders.openai import _Pacer

    pacer = _Pacer(requests_per_minute=6000, tokens_per_minute=None)  # 100 requests/s
    pacer.throttle(None)
    assert pacer.factor == pytest.approx(0.7)
    start = time.monotonic()
    pacer.requests.tat = start
    assert pacer.requests.due(1, start, pacer.factor) - start == pytest.approx(1 / (100 * 0.7))
    for _ in range(5):
        pacer.throttle(None)
    assert pacer.factor == pytest.approx(_Pacer.FLOOR)  # never below the floor
    for _ in range(100):
        pacer.succeeded()
    assert pacer.factor == 1.0


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    from email.utils import formatdate

    from reindex.adapters.embedders.openai import _retry_after

    assert _retry_after("3") == 3.0 and _retry_after("0.5") == 0.5
    assert 8 <= _retry_after(formatdate(time.time() + 10, usegmt=True)) <= 10
    assert _retry_after(None) is None and _retry_after("soon") is None


def test_the_shards_of_an_apply_share_one_client_concurrently(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex import api

    (tmp_path / "corpus").mkdir()
    for i in range(8):
        (tmp_path / "corpus" / f"d{i}.md").write_text(f"document {i} about things\n", encoding="utf-8")
    with LimitedServer(Limits(latency_s=0.3)) as server:
        monkeypatch.setenv("TEST_EMBED_KEY", KEY)
        cfg = tmp_path / "reindex.yaml"
        cfg.write_text(
            "index: docs\nsource: ./corpus\napply: {shards: 4}\n"
            f"vector: {{provider: openai, model: m, revision: r1, dimension: {DIM}, backend: api}}\n"
            f"embed: {{base_url: '{server.url}', api_key_env: TEST_EMBED_KEY}}\n", encoding="utf-8")
        _, path = api.make_plan(cfg, out=tmp_path / "plans")
        run = api.apply_plan(path, cfg, prefect=False)
    assert run.status == "done" and run.report["actual"]["embedded"] == 8
    assert server.log.max_in_flight >= 2  # one request per shard batch: only shards in parallel give 2+
