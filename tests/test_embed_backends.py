"""Devices and backends of local models, without running a model: ``embed.device`` is operational (never in an
id), resolved to a device this machine has or refused in one line; ``vector.backend: onnx`` is refused at
validate when it cannot run, its export lives in a content-addressed cache, and the export's files are the
revision (so the vector id). The real ONNX model end to end: tests/test_onnx_model.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from reindex import api
from reindex.cli import main
from reindex.domain.config import EmbedConfig, VectorHalf, config_from_dict
from reindex.adapters.embedders import sentence_transformers as st
from reindex.errors import ConfigError
from reindex.domain.identity import config_digest, identity_of, resolve_config


def _cfg(**sections: object):
    return config_from_dict({"index": "docs", "source": "./corpus", **sections})


def _workspace(tmp_path: Path, extra: str) -> Path:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.md").write_text("Honey bees dance to show the way to flowers.\n", encoding="utf-8")
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text(f"index: docs\nsource: ./corpus\n{extra}", encoding="utf-8")
    return cfg


# ---------------------------------------------------------------------------------------------
# embed.device
# ---------------------------------------------------------------------------------------------


def test_the_device_is_operational_it_changes_no_id_and_no_plan_digest() -> None:
    ids = {identity_of(resolve_config(_cfg(vector={"provider": "hash"}, embed={"device": d})))
           for d in ("cpu", "auto", "cuda", "cuda:1", "mps")}
    assert len(ids) == 1
    digests = {config_digest(_cfg(vector={"provider": "hash"}, embed={"device": d})) for d in ("cpu", "cuda:3")}
    assert len(digests) == 1
    assert EmbedConfig().device == "auto"


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "CUDA", "cpu:0"])
def test_a_device_name_outside_the_list_is_refused_with_the_choices(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(embed={"device": bad})
    assert str(err.value) == (f"<config>: embed.device: Value error, got {bad!r}; expected cpu, cuda, cuda:N "
                              "(a device number), mps or auto")


def test_cpu_needs_no_torch_and_auto_is_the_cpu_on_a_machine_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert st.resolve_device("cpu") == "cpu"
    assert st.resolve_device("auto") == "cpu"


def test_auto_takes_the_first_gpu_and_a_missing_gpu_number_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert st.resolve_device("auto") == "cuda:0"
    assert st.resolve_device("cuda") == "cuda:0"
    assert st.resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ConfigError) as err:
        st.resolve_device("cuda:2")
    assert str(err.value) == ("embed.device: cuda:2 is not available: this machine has 2 CUDA devices (cuda:0 to "
                              "cuda:1); set embed.device to one of them")


def test_mps_falls_back_only_under_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert st.resolve_device("auto") == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"^embed.device: mps is not available: torch sees no Apple GPU"):
        st.resolve_device("mps")


def test_an_absent_cuda_device_is_one_line_from_validate_and_from_the_embedder(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    want = (f"embed.device: cuda is not available: this machine has no CUDA device (torch {torch.__version__} is a "
            "CPU-only build); set embed.device: cpu, or auto to use a GPU where there is one")
    cfg = _workspace(tmp_path, "embed: {device: cuda}\n")
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 1 and want in result.output, result.output
    # The option reaches the sentence-transformers embedder (refused before any model is loaded).
    with pytest.raises(ConfigError) as err:
        api.make_embedder(VectorHalf(), options=EmbedConfig(device="cuda"))
    assert str(err.value) == want


def test_onnx_runs_on_the_cpu_and_says_so_for_a_gpu_device() -> None:
    assert st.onnx_device("auto") == st.onnx_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match=r"^embed.device: cuda:0: vector.backend: onnx runs on the CPU in this version"):
        st.onnx_device("cuda:0")


def test_the_run_report_says_where_the_embedder_ran(tmp_path: Path) -> None:
    cfg = _workspace(tmp_path, "vector: {provider: hash}\napply: {shards: 1}\n")
    _, path = api.make_plan(cfg, out=tmp_path / "plans")
    run = api.apply_plan(path, cfg, prefect=False)
    assert run.report["embedder"] == {"provider": "hash", "backend": "torch", "precision": "float32", "device": "cpu",
                                      "threads": 1}
    on_disk = json.loads(run.report_path.read_text(encoding="utf-8"))
    assert on_disk["embedder"]["device"] == "cpu"


# ---------------------------------------------------------------------------------------------
# vector.backend / vector.precision
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("vector", "message"), [
    ({"precision": "int8"}, "precision int8 needs backend: onnx (dynamic quantisation of a local ONNX export)"),
    ({"backend": "onnx", "precision": "float16"},
     "precision float16 is not available with backend: onnx (use float32 or int8, or backend: torch)"),
    ({"backend": "api"}, "backend api is for HTTP providers; a sentence-transformers model runs on torch or onnx"),
])
def test_backend_and_precision_that_cannot_run_are_refused_when_the_config_loads(vector: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg(vector=vector)
    assert str(err.value) == f"<config>: vector: Value error, {message}"


def test_validate_fails_in_one_line_when_onnxruntime_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REINDEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    cfg = _workspace(tmp_path, "vector: {backend: onnx, precision: int8}\n")
    result = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert result.exit_code == 1
    assert result.output.strip() == ("error: vector.backend: onnx needs the package onnxruntime, which is not installed; "
                                     "run `pip install 'vector-reindex[onnx]'` (or set vector.backend: torch)")
    result = CliRunner().invoke(main, ["plan", "-c", str(cfg)])
    assert result.exit_code == 1 and "onnx needs the package onnxruntime" in result.output
    assert not (tmp_path / "cache").exists()


def test_an_onnx_config_cannot_be_resolved_without_the_export() -> None:
    with pytest.raises(ConfigError, match="the revision is the digest of the ONNX export"):
        resolve_config(_cfg(vector={"backend": "onnx"}))


def _fake_export(calls: list):
    def export(source: Path, precision: str, out: Path) -> None:
        calls.append((source, precision))
        (out / "model.onnx").write_bytes(f"weights of {source.name} at {precision}".encode())

    return export


def test_the_export_is_cached_by_source_digest_and_precision_and_is_the_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REINDEX_CACHE_DIR", str(tmp_path / "cache"))
    calls: list = []
    monkeypatch.setattr(st, "_export", _fake_export(calls))
    source = st.resolve_model_path("all-MiniLM-L6-v2")
    int8 = st.onnx_export(source, "int8")
    assert int8.parent == tmp_path / "cache" / "onnx"
    assert int8.name == st.onnx_cache_key(st.digest_path(source), "int8")
    assert st.onnx_export(source, "int8") == int8 and len(calls) == 1  # second call: from the cache
    f32 = st.onnx_export(source, "float32")
    assert f32 != int8 and len(calls) == 2
    record = json.loads((int8 / "export.json").read_text(encoding="utf-8"))
    assert record == {"recipe": st.ONNX_RECIPE, "source_digest": st.digest_path(source), "precision": "int8",
                      "opset": st.ONNX_OPSET}
    assert not [p for p in int8.parent.iterdir() if p.name.startswith(".")]  # no temp folder left behind

    from reindex.usecases.configure import resolve

    torch_cfg = resolve(_cfg())
    onnx_cfg = resolve(_cfg(vector={"backend": "onnx", "precision": "int8"}))
    assert onnx_cfg.vector.revision == st.digest_path(int8) != torch_cfg.vector.revision
    assert identity_of(onnx_cfg).vector_id != identity_of(torch_cfg).vector_id
    # Other export bytes (another exporter version, say) are another revision, so another vector id.
    (int8 / "model.onnx").write_bytes(b"other bytes")
    assert resolve(_cfg(vector={"backend": "onnx", "precision": "int8"})).vector.revision != onnx_cfg.vector.revision


def test_a_failed_export_leaves_no_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REINDEX_CACHE_DIR", str(tmp_path / "cache"))

    def broken(source: Path, precision: str, out: Path) -> None:
        (out / "model.onnx").write_bytes(b"half")
        raise RuntimeError("exporter crashed\nsecond line")

    monkeypatch.setattr(st, "_export", broken)
    source = st.resolve_model_path("all-MiniLM-L6-v2")
    with pytest.raises(st.ModelError) as err:
        st.onnx_export(source, "int8")
    assert str(err.value) == f"cannot export {source} to ONNX (int8): exporter crashed"
    assert list((tmp_path / "cache" / "onnx").iterdir()) == []


def test_the_embedder_refuses_an_export_whose_digest_is_not_the_plans_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REINDEX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(st, "_export", _fake_export([]))
    vector = VectorHalf(backend="onnx", precision="int8", revision="sha256:" + "0" * 32)
    with pytest.raises(st.ModelError, match=r"^the ONNX export in .* has digest sha256:\w+ but vector.revision is "
                                            r"sha256:0{32} \(exported by another torch/onnxruntime version\?\)"):
        st.SentenceTransformerEmbedder(vector, device="cpu")
