"""What embedding costs beyond the model (issue 44): every embedded text is tokenized once, for its count and its
vector alike, by every provider; and a reader embeds its queries on one intra-op thread while the process's (a
build's) torch threads stay as they were.

Tokenizer work is counted through the ``tokenizers`` library's object (helpers_tokens); the model's own
preprocessing (sentence-transformers' ``preprocess``, model2vec's tokenizer) is wrapped to count as well. The
models are the tiny ones of ``helpers_models`` (a second to build, a second to distil)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

from helpers_models import SAMPLE, TINY_HIDDEN, build_tiny_model
from helpers_tokens import _Counted, tokenizer_counts  # noqa: F401 - a fixture
from reindex.adapters.embedders import for_queries, make_embedder, model_files
from reindex.adapters.embedders.queries import QueryEmbedder
from reindex.adapters.embedders.sentence_transformers import one_intra_op_thread
from reindex.domain.config import EmbedConfig, VectorHalf

CPU = EmbedConfig(device="cpu")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tiny sentence-transformers folder, and a distillation cache private to this module."""
    root = tmp_path_factory.mktemp("embed-cost")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(root / "cache"))
        folder = build_tiny_model(root / "tiny")
        model_files(VectorHalf(provider="model2vec", model=str(folder), dimension=TINY_HIDDEN))  # distilled here, once
        yield folder


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Tests beside other processes run torch on one thread (ENVIRONMENT.md); the setting is put back after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _texts(limit_tokens: int) -> list[str]:
    """Real prose of several lengths, one text far past ``limit_tokens`` (the model truncates it)."""
    docs = [p.read_text(encoding="utf-8") for p in sorted(SAMPLE.iterdir()) if p.is_file()][:3]
    return [d[i * 300:(i + 1) * 300] for d in docs for i in range(3)] + ["x", " ".join(["word"] * (limit_tokens + 40))]


def _counting(obj: Any, name: str, counts: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    real = getattr(obj, name)

    def counted(texts, *args, **kwargs):
        counts["model"] += len(texts)
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(obj, name, counted)


def test_sentence_transformers_tokenizes_each_embedded_text_once(tiny: Path, one_torch_thread: None,
                                                                 tokenizer_counts: Counter,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    emb = make_embedder(VectorHalf(model=str(tiny), dimension=TINY_HIDDEN, prefix="passage: "), options=CPU)
    assert emb.describe()["tokenized"] == "once"
    texts = _texts(emb.max_tokens)
    want = emb.raw(texts)  # the library's own call on the same inputs
    for name in ("preprocess", "tokenize"):
        _counting(emb.model, name, tokenizer_counts, monkeypatch)
    tokenizer_counts.clear()
    got = emb.embed(texts)
    inputs = ["passage: " + t for t in texts]
    assert tokenizer_counts["model"] == 0  # the model never tokenized
    assert tokenizer_counts["calls"] == len(texts) and tokenizer_counts["chars"] == sum(map(len, inputs))
    assert np.allclose(got.vectors, want, atol=1e-6)
    tokenizer_counts.clear()
    counted = emb._tok.count_batch(inputs)
    assert got.tokens == sum(counted) and got.truncated == sum(n > emb.max_tokens for n in counted) == 1


def test_the_static_model_tokenizes_each_embedded_text_once(tiny: Path, tokenizer_counts: Counter,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    emb = make_embedder(VectorHalf(provider="model2vec", model=str(tiny), dimension=TINY_HIDDEN))
    assert emb.describe()["tokenized"] == "once"
    cut = emb.max_tokens * emb.model.median_token_length
    texts = _texts(emb.max_tokens) + ["y" * (cut + 7) + " tail words"]  # longer than model2vec's character cut
    want = emb.raw(texts)
    monkeypatch.setattr(emb.model, "tokenizer", _Counted(emb.model.tokenizer, tokenizer_counts))
    tokenizer_counts.clear()
    got = emb.embed(texts)
    # Every character once: a text past the cut is its head (what the model reads) and its tail (counted only).
    assert tokenizer_counts["chars"] == sum(map(len, texts))
    assert tokenizer_counts["calls"] == len(texts) + sum(len(t) > cut for t in texts)
    assert np.array_equal(got.vectors, np.asarray(want, dtype=np.float32))
    assert got.truncated == 2  # the long run of words (tokens) and the long text (characters)


def test_the_static_models_exact_path_tokenizes_each_embedded_text_once(tiny: Path) -> None:
    """``vector.compose: units`` embeds from float64 token sums: the same ids give the count and the sums."""
    from reindex.adapters.embedders.static import StaticEmbedder

    emb = StaticEmbedder(VectorHalf(provider="model2vec", model=str(tiny), dimension=TINY_HIDDEN), exact=True)
    texts = _texts(emb.max_tokens)
    want_sums, want_counts = emb.token_sums(texts, emb.max_tokens)
    counts: Counter = Counter()
    emb._ids = _Counted(emb._ids, counts)  # the model's own tokenizer, as the exact path runs it
    got = emb.embed(texts)
    assert counts["calls"] == len(texts) and counts["chars"] == sum(map(len, texts))
    assert np.array_equal(got.vectors, emb.vectors_of_sums(want_sums, want_counts))
    assert got.tokens == sum(len(r) for r in emb._model_ids(texts)) and got.truncated == 1


@pytest.mark.parametrize("vector", [
    {"provider": "hash", "dimension": 8},
    {"provider": "langchain", "model": "langchain_core.embeddings.DeterministicFakeEmbedding", "params": {"size": 8},
     "dimension": 8},
], ids=["hash", "langchain"])
def test_providers_that_tokenize_nothing_here_call_no_tokenizer(vector: dict, tokenizer_counts: Counter) -> None:
    pytest.importorskip("langchain_core") if vector["provider"] == "langchain" else None
    emb = make_embedder(VectorHalf(**vector))
    tokenizer_counts.clear()
    got = emb.embed(["alpha beta", "gamma"])
    assert tokenizer_counts["calls"] == 0 and got.tokens == 3  # whitespace words: str.split, no tokenizer


class _Spy:
    """An embedder that records the torch intra-op threads each call ran with, and on which thread."""

    dimension, max_tokens = 4, None

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def embed(self, texts: list[str]):
        import torch

        from reindex.adapters.embedders.base import EmbedResult

        self.seen.append((torch.get_num_threads(), threading.current_thread().name))
        return EmbedResult(np.zeros((len(texts), 4), np.float32), 0, 0)


def _threads_of_a_new_thread() -> int:
    import torch

    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(torch.get_num_threads()))
    t.start()
    t.join()
    return got[0]


def test_a_reader_embeds_queries_on_one_intra_op_thread_and_the_builds_setting_is_unchanged(tiny: Path) -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the build's setting (torch's default on a 2-core box)
    try:
        spy = _Spy()
        q = QueryEmbedder(spy, one_intra_op_thread)
        q.embed(["what is a shard"])
        q.embed(["and a population"])
        assert [n for n, _ in spy.seen] == [1, 1] and all(name.startswith("reindex-query") for _, name in spy.seen)
        # The build's thread, and a thread started after (a shard worker), still run two intra-op threads.
        assert torch.get_num_threads() == 2 and _threads_of_a_new_thread() == 2
        spy.embed(["a passage embedded by the build"])
        assert spy.seen[-1][0] == 2
        # A real model: the reader's embedder says so, shares the build's weights and gives the same vectors.
        build = make_embedder(VectorHalf(model=str(tiny), dimension=TINY_HIDDEN), options=CPU)
        reader = for_queries(build)
        assert reader.describe()["threads"] == 1 and reader.inner is build
        assert np.allclose(reader.embed(["a query"]).vectors, build.embed(["a query"]).vectors, atol=1e-6)
        assert torch.get_num_threads() == 2 and _threads_of_a_new_thread() == 2
    finally:
        torch.set_num_threads(before)


def test_an_embedder_without_intra_op_threads_is_its_own_query_embedder() -> None:
    emb = make_embedder(VectorHalf(provider="hash", dimension=8))
    assert for_queries(emb) is emb


def test_a_command_that_embedded_a_query_exits_at_once() -> None:
    """The query threads never hold a process's exit (``reindex``'s exit joins every non-daemon thread first)."""
    import subprocess
    import sys

    code = ("from reindex.adapters.embedders import make_embedder\n"
            "from reindex.adapters.embedders.queries import QueryEmbedder\n"
            "from reindex.domain.config import VectorHalf\n"
            "from reindex.foundation.exiting import exit_now\n"
            "QueryEmbedder(make_embedder(VectorHalf(provider='hash', dimension=8))).embed(['a query'])\n"
            "exit_now(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr


def test_a_distillation_says_what_it_does_why_what_it_costs_and_how_far_it_got(tiny: Path, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from reindex.cli import main

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("hello", encoding="utf-8")
    config = tmp_path / "reindex.yaml"
    config.write_text(f"index: docs\nsource: {tmp_path / 'corpus'}\nstate: {{uri: {tmp_path / 'state'}}}\n"
                      f"vector: {{provider: model2vec, model: {tiny}, dimension: {TINY_HIDDEN}}}\n", encoding="utf-8")
    monkeypatch.setenv("REINDEX_CACHE_DIR", str(tmp_path / "empty-cache"))  # nothing distilled yet
    r = CliRunner().invoke(main, ["validate", "-c", str(config), "--json"])
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if line.startswith("reindex: distilling a static model")]
    assert "no static model distilled from it is cached yet" in said[0] and "Expected about" in said[0]
    assert any("100% (" in line for line in said) and "done in" in said[-1] and "empty-cache" in said[-1]
    r = CliRunner().invoke(main, ["validate", "-c", str(config), "--json"])
    assert r.exit_code == 0 and "distilling" not in r.stderr  # cached: nothing to say


def test_every_query_side_of_a_context_embeds_on_one_intra_op_thread(tiny: Path, tmp_path: Path) -> None:
    """Readers, cutover, serving and the forecast get their query embedders from Context.side: all sized for one
    query; the passage embedder (a build's) is the plain one, shared, and closing the context leaves a given one."""
    import torch

    from reindex.context import Context
    from reindex.domain.config import config_from_dict

    cfg = config_from_dict({"index": "docs", "source": str(tmp_path), "state": {"uri": str(tmp_path / "state")},
                            "vector": {"model": str(tiny), "dimension": TINY_HIDDEN, "query_prefix": "query: "},
                            "embed": {"device": "cpu"}})
    given = make_embedder(cfg.vector, options=CPU)
    closed: list = []
    given.close = lambda: closed.append(True)  # type: ignore[attr-defined]
    ctx = Context(cfg, embedder=given)
    before = torch.get_num_threads()
    queries = ctx.side(None).query_embedder()
    assert isinstance(queries, QueryEmbedder) and queries.describe()["threads"] == 1
    assert queries is ctx.side(None).query_embedder()  # made once per context
    assert ctx.embedder(cfg.vector) is given  # the build's passage embedder, unwrapped
    queries.embed(["a query"])
    assert torch.get_num_threads() == before
    ctx.close()
    assert not closed  # what the caller gave is the caller's
