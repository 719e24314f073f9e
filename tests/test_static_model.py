"""vector.provider: model2vec — a static model given as a folder, or distilled offline from a local
sentence-transformers folder into the content-addressed cache; identified by its files; a model change to it
plans, applies, cuts over and rolls back like any vector-half change.

Most tests distil the tiny model of ``helpers_models`` (a second); one ``slow`` test distils the packaged
all-MiniLM-L6-v2 (~40–90 CPU-s), once per session."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from click.testing import CliRunner

from helpers_models import TINY_HIDDEN, build_tiny_model
from reindex import api
from reindex.cli import main
from reindex.domain.config import VectorHalf
from reindex.adapters.embedders import make_embedder, model_files
from reindex.domain.identity import vector_id
from reindex.usecases.configure import resolve
from reindex.domain.models import digest_path, is_static_folder

SAMPLE = Path(api.__file__).resolve().parent / "sample" / "corpus"


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tiny sentence-transformers folder, and a distillation cache private to this session."""
    import torch

    torch.set_num_threads(1)  # ENVIRONMENT.md: torch's default threads beside other processes are 10-17x slower
    root = tmp_path_factory.mktemp("static")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(root / "cache"))
        yield build_tiny_model(root / "tiny")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every attempt to open a connection is recorded and refused."""
    attempts: list = []

    def refuse(self, address, *a, **kw):  # noqa: ANN001
        attempts.append(address)
        raise OSError(f"network refused in this test: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **kw: refuse(None, address))
    return attempts


def _static(model: Path | str, dimension: int = TINY_HIDDEN) -> VectorHalf:
    return VectorHalf(provider="model2vec", model=str(model), dimension=dimension)


def test_a_sentence_transformers_folder_is_distilled_offline_once_and_identified_by_its_files(
    tiny: Path, no_network: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reindex.adapters.embedders import static

    runs: list[Path] = []
    real = static._distill_quietly
    monkeypatch.setattr(static, "_distill_quietly", lambda source, out: runs.append(source) or real(source, out))
    folder = model_files(_static(tiny))
    assert is_static_folder(folder) and (folder / "distill.json").is_file() and no_network == []
    # Kept in the cache: asking again distils nothing (same folder, same files, untouched).
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert model_files(_static(tiny)) == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert len(runs) <= 1  # 0 when an earlier test of this session distilled it
    # The files do not name where the source was installed: the same weights elsewhere give the same digest.
    assert str(tiny) not in (folder / "config.json").read_text(encoding="utf-8")
    # The vector id is the files' digest: the distilled folder given directly is the same model.
    resolved = resolve(_config(tiny.parent, _static(tiny))).vector
    assert resolved.revision == digest_path(folder)
    direct = resolve(_config(tiny.parent, _static(folder))).vector
    assert vector_id(direct) == vector_id(resolved)
    # ...and not the id of the source model under sentence-transformers.
    st = resolve(_config(tiny.parent, VectorHalf(model=str(tiny), dimension=TINY_HIDDEN))).vector
    assert vector_id(st) != vector_id(resolved)


def test_an_edited_source_is_another_distillation_and_another_vector_id(tiny: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    same = resolve(_config(tmp_path, _static(copy))).vector
    assert vector_id(same) == vector_id(resolve(_config(tmp_path, _static(tiny))).vector)
    conf = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**conf, "hidden_act": "relu"}))
    other = resolve(_config(tmp_path, _static(copy))).vector
    assert other.revision != same.revision and vector_id(other) != vector_id(same)


def test_vectors_do_not_depend_on_the_batch_and_tokens_are_the_models_own(tiny: Path) -> None:
    emb = make_embedder(_static(tiny))
    texts = [p.read_text(encoding="utf-8")[i * 400:(i + 1) * 400] for p in sorted(SAMPLE.iterdir())[:4] for i in range(3)]
    whole = emb.embed(texts)
    alone = np.stack([emb.embed([t]).vectors[0] for t in texts])
    assert whole.vectors.shape == (len(texts), TINY_HIDDEN) and whole.vectors.dtype == np.float32
    assert np.array_equal(whole.vectors, alone)
    assert np.allclose(np.linalg.norm(whole.vectors, axis=1), 1.0, atol=1e-3)
    assert whole.tokens == sum(len(ids) for ids in emb.model.tokenize(texts)) and whole.truncated == 0
    assert emb.describe()["backend"] == "static"


def test_validate_reads_the_dimension_without_distilling(tiny: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _corpus(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(_yaml(f"{{provider: model2vec, model: {tiny}, dimension: 384}}"), encoding="utf-8")
    with monkeypatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(tmp_path / "empty-cache"))
        r = CliRunner().invoke(main, ["validate", "-c", str(bad)])
    assert r.exit_code == 1
    assert r.stderr.strip().endswith(f"makes {TINY_HIDDEN}-dimensional vectors; set vector.dimension: {TINY_HIDDEN}")
    assert not (tmp_path / "empty-cache").exists()  # said before any distillation
    good = tmp_path / "good.yaml"
    good.write_text(_yaml(f"{{provider: model2vec, model: {tiny}, dimension: {TINY_HIDDEN}}}"), encoding="utf-8")
    r = CliRunner().invoke(main, ["validate", "-c", str(good), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["model_revision"] == digest_path(model_files(_static(tiny)))
    # A backend or precision would enter the vector id without changing a vector: refused.
    r = CliRunner().invoke(main, ["validate", "-c", str(_write(tmp_path / "onnx.yaml", _yaml(
        f"{{provider: model2vec, model: {tiny}, dimension: {TINY_HIDDEN}, backend: onnx}}")))])
    assert r.exit_code == 1 and "leave vector.backend and vector.precision unset" in r.stderr


def test_a_change_to_a_static_model_plans_pipeline_scoped_vector_applies_cuts_over_and_rolls_back(
    tiny: Path, tmp_path: Path
) -> None:
    _corpus(tmp_path)
    cfg = tmp_path / "reindex.yaml"
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n"  # two random-weight models: the gate is not the point
    cfg.write_text(_yaml(f"{{model: {tiny}, dimension: {TINY_HIDDEN}}}", lenient), encoding="utf-8")
    old = _cycle(cfg, tmp_path / "plans")
    assert old["plan"].kind.value != "pipeline-scoped/vector"
    cfg.write_text(_yaml(f"{{provider: model2vec, model: {tiny}, dimension: {TINY_HIDDEN}}}", lenient), encoding="utf-8")
    new = _cycle(cfg, tmp_path / "plans")
    assert new["plan"].kind.value == "pipeline-scoped/vector"
    assert new["plan"].body["work"]["chunks_reused"] == 0
    assert new["apply"].report["actual"]["embedded"] == new["plan"].body["work"]["chunks_to_embed"] > 0
    assert new["cutover"].report["swap"] and new["apply"].collection != old["apply"].collection
    assert new["apply"].report["embedder"]["provider"] == "model2vec"
    # The reader follows the alias and embeds with the live population's (static) vector half.
    hits = api.query("Python enhancement proposal process", cfg, k=3)
    assert hits and _alias(cfg) == new["apply"].collection
    api.rollback(cfg)
    assert _alias(cfg) == old["apply"].collection
    assert api.query("Python enhancement proposal process", cfg, k=3)


# helpers -----------------------------------------------------------------------------------------


def _cycle(cfg: Path, plans: Path) -> dict:
    plan, path = api.make_plan(cfg, out=plans)
    if plan.body["approval"]["required"]:
        api.approve_plan(path, "tester", "test")
    applied = api.apply_plan(path, cfg, use_prefect=False)
    assert applied.status == "done", applied.report
    return {"plan": plan, "apply": applied, "cutover": api.cutover(path, cfg)}


def _alias(cfg: Path) -> str | None:
    store = api.vector_store_for(api.load_resolved(cfg))
    try:
        return store.get_alias("docs")
    finally:
        store.close()


def _corpus(root: Path) -> None:
    if not (root / "corpus").exists():
        shutil.copytree(SAMPLE, root / "corpus")


def _yaml(vector: str, extra: str = "") -> str:
    return ("index: docs\nsource: ./corpus\ntext: {chunker: {kind: recursive, size: 150}}\n"
            f"vector: {vector}\napply: {{shards: 4}}\n{extra}")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _config(root: Path, vector: VectorHalf):
    from reindex.domain.config import PipelineConfig

    return PipelineConfig(index="docs", source=str(root), vector=vector)


@pytest.mark.slow
def test_the_packaged_minilm_distils_into_a_static_256_dimension_model_that_finds_documents(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The one test that distils all-MiniLM-L6-v2 (~40-90 CPU-s), into the user's model cache: once per machine."""
    monkeypatch.delenv("REINDEX_CACHE_DIR", raising=False)
    _corpus(tmp_path)
    r = CliRunner().invoke(main, ["validate", "-c", str(_write(tmp_path / "r.yaml", _yaml("{provider: model2vec}")))])
    assert r.exit_code == 1 and r.stderr.strip().endswith("set vector.dimension: 256"), r.output
    half = VectorHalf(provider="model2vec", model="all-MiniLM-L6-v2", dimension=256)
    folder = model_files(half)
    assert json.loads((folder / "config.json").read_text())["hidden_dim"] == 256
    emb = make_embedder(half)
    docs = {p.name: p.read_text(encoding="utf-8") for p in sorted(SAMPLE.iterdir())}
    windows = [(name, text[i:i + 1200]) for name, text in docs.items() for i in range(0, len(text), 1200)]
    vectors = emb.embed([w for _, w in windows]).vectors
    # A known-item probe per document: a line from its middle, found among every document's windows.
    probes = {name: max(text[len(text) // 3: 2 * len(text) // 3].splitlines(), key=len) for name, text in docs.items()}
    queries = emb.embed(list(probes.values())).vectors
    best = [windows[int(np.argmax(vectors @ q))][0] for q in queries]
    hits = sum(b == name for b, name in zip(best, probes))
    assert hits >= 0.6 * len(probes), (hits, len(probes))
