"""Planner on the shared PEP corpus: a real document-scoped change, a real chunker change verified
independently, and the sampled projection against the exact figures (skips without ../shared/corpus)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from reindex import api

pytestmark = pytest.mark.corpus


def _cfg(tmp: Path, name: str, corpus: Path, chunker: str) -> Path:
    p = tmp / name
    p.write_text(f"index: peps\nsource: {corpus}\ntext: {{chunker: {chunker}}}\nstate: {{uri: {tmp / 'state'}}}\n"
                 "cost: {usd_per_mtok: 0.02, tokens_per_minute: 3500000}\n")
    return p


@pytest.fixture(scope="module")
def pep(shared_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("pep")
    new = shared_corpus / "snapshot_new.parquet"
    old_cfg = _cfg(tmp, "512.yaml", new, "{kind: sliding, size: 512, overlap: 0.1}")
    new_cfg = _cfg(tmp, "256.yaml", new, "{kind: sliding, size: 256, overlap: 0.2}")
    exact, _ = api.make_plan(new_cfg, baseline_config=old_cfg, out=None)
    return {"tmp": tmp, "old_cfg": old_cfg, "new_cfg": new_cfg, "exact": exact, "corpus": shared_corpus}


def test_snapshot_change_is_document_scoped(pep: dict) -> None:
    plan, _ = api.make_plan(pep["old_cfg"], baseline_corpus=str(pep["corpus"] / "snapshot_old.parquet"), out=None)
    d = plan.body["work"]["documents"]
    assert plan.kind == "document-scoped"
    # The corpus README: 37 edited, 10 added, 0 removed, 656 unchanged.
    assert (d["edited"], d["added"], d["removed"], d["unchanged"]) == (37, 10, 0, 656)
    assert len(plan.body["work"]["affected_documents"]) == 47


def test_chunker_change_reuses_exactly_the_identical_texts(pep: dict) -> None:
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.tokenizers import load_tokenizer

    plan = pep["exact"]
    assert plan.kind == "pipeline-scoped/text" and not plan.body["documents_changed"]
    tok = load_tokenizer("all-MiniLM-L6-v2")
    old_c = make_chunker("sliding:size=512,overlap=0.1", tok)
    new_c = make_chunker("sliding:size=256,overlap=0.2", tok)
    texts = pq.read_table(pep["corpus"] / "snapshot_new.parquet", columns=["text"]).column("text").to_pylist()
    identical = 0
    for text in texts:
        old_texts = {c.text for c in old_c.chunk(text)}
        identical += sum(1 for c in new_c.chunk(text) if c.text in old_texts)
    assert plan.body["work"]["chunks_reused"] == identical
    assert plan.body["work"]["chunks_new"] == 18733 and plan.body["work"]["chunks_old"] == 8521


def test_sampled_projection_covers_the_exact_figures(pep: dict) -> None:
    exact = pep["exact"].body["work"]
    plan, _ = api.make_plan(pep["new_cfg"], baseline_config=pep["old_cfg"], out=None, sample=200, seed=7)
    proj = plan.body["projection"]
    assert proj["sample"] == 200 and proj["seed"] == 7
    for field in ("chunks_new", "tokens_to_embed", "chunks_old"):
        iv = proj["intervals"][field]
        want = exact[field]
        assert iv["low"] <= want <= iv["high"], (field, iv, want)
        assert abs(iv["estimate"] - want) / want <= 0.02, (field, iv["estimate"], want)
