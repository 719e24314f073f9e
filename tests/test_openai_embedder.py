"""The OpenAI-compatible HTTP embedder against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import numpy as np
import pytest

from reindex.config import EmbedConfig, VectorHalf
from reindex.embedders import make_embedder
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
