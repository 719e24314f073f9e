"""Bring your own embedder: a LangChain ``Embeddings`` or LlamaIndex ``BaseEmbedding`` class by import path
(or an instance turned into config) is the embedder; its class, parameters and library version are in the
vector id. Uses the libraries' own fake models (deterministic, no network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from reindex import api
from reindex.cli import main
from reindex.domain.config import VectorHalf, config_from_dict
from reindex.errors import ConfigError
from reindex.domain.identity import identity_of, resolve_config

LC = "langchain_core.embeddings.DeterministicFakeEmbedding"
LI = "llama_index.core.embeddings.MockEmbedding"


def _vector(**fields: object) -> VectorHalf:
    return config_from_dict({"index": "docs", "source": ".", "vector": fields}).vector


def _resolved_id(**fields: object) -> str:
    cfg = resolve_config(config_from_dict({"index": "docs", "source": ".", "vector": fields}))
    return identity_of(cfg).vector_id


def test_a_langchain_class_by_path_embeds_like_the_class_itself() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    emb = api.make_embedder(_vector(provider="langchain", model=LC, params={"size": 8}, dimension=8, prefix="p: "))
    res = emb.embed(["alpha", "beta gamma"])
    want = np.asarray(DeterministicFakeEmbedding(size=8).embed_documents(["p: alpha", "p: beta gamma"]), dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.allclose(res.vectors, want, atol=1e-6) and res.tokens == 5
    assert emb.describe()["provider"] == "langchain"


def test_a_llamaindex_class_by_path_embeds() -> None:
    emb = api.make_embedder(_vector(provider="llamaindex", model=LI, params={"embed_dim": 4}, dimension=4,
                                    normalize=False))
    assert np.allclose(emb.embed(["x", "y"]).vectors, 0.5)


def test_class_params_and_library_version_are_in_the_vector_id() -> None:
    from importlib import metadata

    base = dict(provider="langchain", model=LC, params={"size": 8}, dimension=8)
    cfg = resolve_config(config_from_dict({"index": "docs", "source": ".", "vector": base}))
    assert cfg.vector.revision == f"langchain-core=={metadata.version('langchain-core')}"
    ids = {_resolved_id(**base), _resolved_id(**{**base, "params": {"size": 8, "seed": 1}}),
           _resolved_id(**{**base, "model": "langchain_core.embeddings.FakeEmbeddings"}),
           _resolved_id(**{**base, "revision": "langchain-core==0.0.1"})}
    assert len(ids) == 4
    # An empty params keeps the ids of every population built before the field existed.
    from reindex.domain.identity import vector_id

    assert vector_id(VectorHalf()) == vector_id(VectorHalf(params={}))
    assert vector_id(VectorHalf(params={"a": 1})) != vector_id(VectorHalf())


def test_an_instance_becomes_config_without_its_secrets() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from llama_index.core.embeddings import MockEmbedding

    assert api.vector_config_of(DeterministicFakeEmbedding(size=8)) == {"provider": "langchain", "model": LC.replace(
        "embeddings.", "embeddings.fake."), "params": {"size": 8}}
    li = api.vector_config_of(MockEmbedding(embed_dim=4))
    assert li["provider"] == "llamaindex" and li["params"]["embed_dim"] == 4 and "callback_manager" not in li["params"]
    assert li["params"]["model_name"] == MockEmbedding(embed_dim=4).model_name

    class Keyed(DeterministicFakeEmbedding):
        api_key: str = "sk-never-in-a-plan"
        model: str = "m-1"

    got = api.vector_config_of(Keyed(size=3, api_key="sk-never-in-a-plan-2"))
    assert got["params"] == {"size": 3, "model": "m-1"}
    # The config rebuilds an embedder that gives the instance's vectors.
    again = api.make_embedder(_vector(**api.vector_config_of(DeterministicFakeEmbedding(size=8)), dimension=8,
                                      normalize=False))
    assert np.allclose(again.embed(["q"]).vectors[0], DeterministicFakeEmbedding(size=8).embed_documents(["q"])[0])


@pytest.mark.parametrize(("fields", "message"), [
    (dict(provider="langchain", model="no_such_pkg.Embed"),
     "vector.model: cannot import 'no_such_pkg' (No module named 'no_such_pkg'); is it installed?"),
    (dict(provider="langchain", model="langchain_core.embeddings.Nope"),
     "vector.model: module 'langchain_core.embeddings' has no 'Nope'"),
    (dict(provider="langchain", model=LI, params={"embed_dim": 4}),
     f"vector.model: {LI} has no embed_documents() method, so it is not a langchain embeddings class; it looks like "
     "a llamaindex class: set vector.provider: llamaindex"),
    (dict(provider="langchain", model=LC, params={"sise": 8}),
     f"vector.params: {LC}(**params) failed: ValidationError:"),
    (dict(provider="langchain", model=LC, params={"size": 5}, dimension=8),
     f"vector.dimension is 8 but {LC} makes 5-dimensional vectors; set vector.dimension: 5"),
])
def test_mistakes_are_one_clear_line(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        api.make_embedder(_vector(**fields)).embed(["x"])
    assert str(err.value).startswith(message), str(err.value)


def test_plan_apply_and_query_with_a_langchain_embedder(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    for i in range(3):
        (tmp_path / "corpus" / f"d{i}.md").write_text(f"document number {i}", encoding="utf-8")
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text(f"index: docs\nsource: ./corpus\ntext: {{tokenizer: whitespace}}\n"
                   f"vector: {{provider: langchain, model: {LC}, params: {{size: 8}}, dimension: 8}}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 0, result.output
    _, path = api.make_plan(cfg, out=tmp_path / "plans")
    run = api.apply_plan(path, cfg, prefect=False)
    assert run.status == "done" and run.report["actual"]["embedded"] == 3
    assert run.report["embedder"]["backend"] == "DeterministicFakeEmbedding"
    assert api.cutover(path, cfg).report["swap"] is not None
    hit = api.query("document number 1", cfg, k=1).results[0]
    assert hit["doc_id"] == "d1.md"  # the fake model is deterministic: the same text, the same vector
