"""``vector.compose: units`` (issue 45): a chunk's vector composed from its units' vectors, through plan and
apply. An edit of one sentence embeds only its unit (the hash embedder's embed log counts every text
embedded); the plan prices the units apply embeds; a static model's composed vectors equal the chunks
embedded whole; a killed apply resumes to the uninterrupted build, unit parts included."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers_index import REINDEX_BIN, Workspace, config_text, read_log, subprocess_env
from reindex.adapters.stores.payload import payload_text
from reindex.books.layout import shard_name
from reindex.books.units import read_unit_part
from reindex.domain.config import VectorHalf
from reindex.domain.identity import vector_id

UNITS = "vector: {provider: hash, compose: units}"
EDIT = ("pep-0212.rst", "this are unintuitive.", "this are counterintuitive.")


def _compose_ws(root: Path, vector: str = UNITS, shards: int = 4) -> Workspace:
    ws = Workspace(root)
    text = config_text(150).replace("vector: {provider: hash}", vector)
    ws.config.write_text(text.replace("apply: {shards: 4}", f"apply: {{shards: {shards}}}"), encoding="utf-8")
    return ws


def _edit(ws: Workspace) -> str:
    name, old, new = EDIT
    doc = ws.corpus / name
    text = doc.read_text(encoding="utf-8")
    assert text.count(old) == 1
    doc.write_text(text.replace(old, new), encoding="utf-8")
    return new


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _unit_parts(ws: Workspace, collection: str, shards: int = 4) -> dict:
    out = {}
    for k in range(shards):
        part = read_unit_part(ws.state(), "docs", collection, shard_name(k))
        out[k] = part.as_dict() if part is not None else {}
    return out


def test_compose_is_in_the_vector_id_only_when_on() -> None:
    base = VectorHalf(provider="hash")
    assert vector_id(base) == vector_id(VectorHalf(provider="hash", compose="none", compose_unit="sentence:min=3"))
    units = VectorHalf(provider="hash", compose="units")
    assert vector_id(units) != vector_id(base)
    assert vector_id(units) != vector_id(VectorHalf(provider="hash", compose="units", compose_unit="sentence:min=3"))
    with pytest.raises(ValueError, match="compose_unit 'words'"):
        VectorHalf(provider="hash", compose="units", compose_unit="words")


def test_switching_compose_on_is_a_pipeline_scoped_vector_change(tmp_path: Path) -> None:
    ws = _compose_ws(tmp_path / "ws", vector="vector: {provider: hash}")
    ws.build_live()
    ws.config.write_text(ws.config.read_text().replace("vector: {provider: hash}", UNITS), encoding="utf-8")
    plan, _ = ws.plan()
    assert plan.body["kind"] == "pipeline-scoped/vector"
    units = plan.body["work"]["units"]
    assert units["units_to_embed"] > units["chunks_composed"] > 0 and units["units_reused"] == 0
    assert plan.body["work"]["tokens_to_embed"] == units["tokens_to_embed"]


def test_an_edit_of_one_sentence_embeds_only_its_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = _compose_ws(tmp_path / "ws")
    live = ws.build_live()
    before = _unit_parts(ws, live)
    assert sum(len(p) for p in before.values()) > 1000
    new = _edit(ws)
    plan, path = ws.plan()
    units = plan.body["work"]["units"]
    # The edited sentence is a unit with the sentence after it (it is under 8 tokens): one unit to embed.
    assert plan.body["kind"] == "document-scoped"
    assert units["chunks_composed"] == 1 and units["units_to_embed"] == 1
    assert units["units_reused"] == units["units"] - 1
    assert plan.body["work"]["tokens_to_embed"] == units["tokens_to_embed"] < 40
    log = tmp_path / "embed.log"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(log))
    if plan.body["approval"]["required"]:
        ws.approve(path)
    r = ws.apply(path)
    assert r.status == "done"
    embedded = read_log(log)
    assert sum(embedded.values()) == 1  # one text embedded: the changed unit
    text = (ws.corpus / EDIT[0]).read_text(encoding="utf-8")
    unit = text[text.index("The common idioms used"):text.index("This\nPEP proposes two")]
    assert new in unit and embedded == {_digest(unit): 1}
    assert r.report["actual"]["tokens_embedded"] == units["tokens_to_embed"]
    # The unit part of the edited document's shard gained that unit; nothing else changed.
    after = _unit_parts(ws, live)
    assert sum(len(p) for p in after.values()) == sum(len(p) for p in before.values()) + 1
    # The composed vector is the token-weighted mean of its units' vectors: the same as a fresh build's.
    fresh = _compose_ws(tmp_path / "fresh")
    _edit(fresh)
    other = fresh.build_live()
    assert other == live
    ws.snapshot(live).assert_same(fresh.snapshot(other))


@pytest.fixture(scope="module")
def tiny_static(tmp_path_factory: pytest.TempPathFactory):
    import torch

    from helpers_models import build_tiny_model

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("compose-static")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(root / "cache"))
        yield build_tiny_model(root / "tiny")


def test_a_static_models_composed_vectors_are_its_whole_chunk_vectors(tmp_path: Path, tiny_static: Path) -> None:
    from helpers_models import TINY_HIDDEN
    from reindex.adapters.embedders.static import StaticEmbedder

    vector = f"vector: {{provider: model2vec, model: {tiny_static}, dimension: {TINY_HIDDEN}, compose: units}}"
    ws = _compose_ws(tmp_path / "ws", vector=vector)
    live = ws.build_live()
    snap = ws.snapshot(live)
    texts = [payload_text(p, None) for _, p in snap.points.values()]
    whole = StaticEmbedder(VectorHalf(provider="model2vec", model=str(tiny_static), dimension=TINY_HIDDEN,
                                      compose="units")).embed(texts).vectors
    got = np.stack([v for v, _ in snap.points.values()])
    assert len(texts) > 300 and np.abs(got - whole).max() <= 1e-6
    # An edit composes the edited chunk from one new unit's token sum and the stored ones: still exact.
    _edit(ws)
    plan, path = ws.plan()
    if plan.body["approval"]["required"]:
        ws.approve(path)
    assert plan.body["work"]["units"]["units_to_embed"] == 1
    assert ws.apply(path).status == "done"
    snap = ws.snapshot(live)
    texts = [payload_text(p, None) for _, p in snap.points.values()]
    got = np.stack([v for v, _ in snap.points.values()])
    assert np.abs(got - StaticEmbedder(VectorHalf(provider="model2vec", model=str(tiny_static), dimension=TINY_HIDDEN,
                                                  compose="units")).embed(texts).vectors).max() <= 1e-6


def _cli_apply(ws: Workspace, path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-prefect", "--no-progress"],
                          cwd=ws.root, env=subprocess_env(REINDEX_SHARD_WORKERS="1", **env), capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The compose: units build of the sample and the edit synced in place, without interruption."""
    ws = _compose_ws(tmp_path_factory.mktemp("reference") / "ws", vector="vector: {provider: hash, compose: units}\n"
                     "apply: {shards: 4, embed_batch_size: 8}")
    ws.config.write_text(ws.config.read_text().replace("apply: {shards: 4}\n", ""), encoding="utf-8")
    plan, path = ws.plan()
    ws.approve(path)
    log = ws.root / "embed.log"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_EMBED_LOG", str(log))
        r = ws.apply(path)
    assert r.status == "done"
    assert sum(read_log(log).values()) == plan.body["work"]["units"]["units_to_embed"]  # plan = apply
    return {"collection": r.collection, "snapshot": ws.snapshot(r.collection), "rows": ws.manifest_rows(r.collection),
            "units": _unit_parts(ws, r.collection), "log": read_log(log)}


@pytest.mark.parametrize("crash_at", ["before-unit-batch:3", "after-upsert:2", "before-unit-part:2",
                                      "before-manifest:3"])
def test_a_killed_compose_apply_resumes_to_the_uninterrupted_build(crash_at: str, tmp_path: Path,
                                                                    reference: dict) -> None:
    ws = _compose_ws(tmp_path / "ws", vector="vector: {provider: hash, compose: units}\n"
                     "apply: {shards: 4, embed_batch_size: 8}")
    ws.config.write_text(ws.config.read_text().replace("apply: {shards: 4}\n", ""), encoding="utf-8")
    plan, path = ws.plan()
    ws.approve(path)
    crash_log, resume_log = tmp_path / "crash.log", tmp_path / "resume.log"
    killed = _cli_apply(ws, path, REINDEX_CRASH_AT=crash_at, REINDEX_EMBED_LOG=str(crash_log))
    assert killed.returncode == -signal.SIGKILL, f"exit {killed.returncode}\n{killed.stdout}\n{killed.stderr[-3000:]}"
    resumed = _cli_apply(ws, path, REINDEX_EMBED_LOG=str(resume_log))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    target = reference["collection"]
    ws.snapshot(target).assert_same(reference["snapshot"])
    assert ws.manifest_rows(target) == reference["rows"]
    units = _unit_parts(ws, target)
    assert {k: sorted(p) for k, p in units.items()} == {k: sorted(p) for k, p in reference["units"].items()}
    for k, part in units.items():
        for fp, (vec, n) in part.items():
            ref_vec, ref_n = reference["units"][k][fp]
            assert n == ref_n and np.array_equal(vec, ref_vec)
    # Units the killed run stored were not embedded again: the two runs embedded what the uninterrupted one did,
    # and at most the batch in flight at the kill (8 units) more.
    extra = (read_log(crash_log) + read_log(resume_log)) - reference["log"]
    assert sum(extra.values()) <= 8, json.dumps(dict(extra))[:500]
    assert not reference["log"] - (read_log(crash_log) + read_log(resume_log))
