"""The payload contract: chunk text and document metadata under configurable keys (LangChain's layout by
default), metadata from every source, payload-only changes applied in place, payload indexes and filters."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers_index import read_log

from reindex import api
from reindex.books.manifests import read_live

DOCS = [
    {"id": "a", "text": "Alpha documents talk about apples and orchards. " * 6, "lang": "en", "author": "ann"},
    {"id": "b", "text": "Bravo documents talk about boats and harbours. " * 6, "lang": "de", "author": "bob"},
    {"id": "c", "text": "Charlie documents talk about cheese and cellars. " * 6, "lang": "en", "author": "cat"},
]


def _write_corpus(root: Path, docs: list[dict]) -> None:
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def _write_config(root: Path, fields: list[str], *, backend: str = "edge", size: int = 40, extra: str = "") -> None:
    (root / "reindex.yaml").write_text(
        "index: docs\n"
        f"source: {{uri: ./docs.jsonl, metadata_fields: {json.dumps(fields)}}}\n"
        f"text: {{chunker: {{kind: recursive, size: {size}}}}}\n"
        "vector: {provider: hash}\n"
        f"store: {{backend: {backend}}}\n"
        "apply: {shards: 2}\n"
        "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n" + extra,
        encoding="utf-8")


def _plan(root: Path):
    return api.make_plan(root / "reindex.yaml", out=root / "plans")


def _apply(root: Path, path: Path):
    r = api.apply_plan(path, root / "reindex.yaml", use_prefect=False)
    assert r.status == "done", r.report
    return r


def _build(root: Path) -> str:
    plan, path = _plan(root)
    if plan.body["approval"]["required"]:
        api.approve_plan(path, "tester", "test")
    r = _apply(root, path)
    c = api.cutover(path, root / "reindex.yaml")
    assert c.report["swap"], c.report["rules"]
    return r.collection


def _points(root: Path, collection: str) -> dict[str, tuple[np.ndarray, dict]]:
    cfg = api.load_resolved(root / "reindex.yaml")
    store = api.vector_store_for(cfg)
    try:
        return {p.id: (np.asarray(p.vector, dtype=np.float32), p.payload) for p in store.scroll(collection, with_vectors=True)}
    finally:
        store.close()


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(tmp_path / "embed.log"))
    _write_corpus(tmp_path, DOCS)
    return tmp_path


def test_points_carry_page_content_and_metadata_from_jsonl_fields(ws: Path) -> None:
    _write_config(ws, ["lang", "author"])
    live = _build(ws)
    points = _points(ws, live)
    assert points
    texts = {d["id"]: d["text"] for d in DOCS}
    by_doc = {d["id"]: d for d in DOCS}
    for _, payload in points.values():
        doc = by_doc[payload["doc_id"]]
        assert payload["metadata"] == {"lang": doc["lang"], "author": doc["author"], "doc_id": doc["id"]}
        assert payload["page_content"] and payload["page_content"] in texts[doc["id"]]
        assert "text" not in payload  # the chunk text lives under the content key only
        assert {"ordinal", "fingerprint", "tokens", "start", "end", "pipeline_id"} <= set(payload)


def test_configured_payload_keys_are_used_and_read_back_by_query(ws: Path) -> None:
    _write_config(ws, ["lang"], extra="payload: {content_key: body, metadata_key: meta}\n")
    live = _build(ws)
    payloads = [p for _, p in _points(ws, live).values()]
    assert all("body" in p and p["meta"]["lang"] in ("en", "de") for p in payloads)
    assert not any("page_content" in p or "metadata" in p for p in payloads)
    text = payloads[0]["body"]
    r = api.query(text, ws / "reindex.yaml", k=1)
    assert r.results[0]["page_content"] == text
    assert r.results[0]["metadata"] == payloads[0]["meta"]


def test_adding_a_metadata_field_is_payload_only_with_no_embedding_and_vectors_untouched(ws: Path) -> None:
    _write_config(ws, ["lang"])
    live = _build(ws)
    before = _points(ws, live)
    embedded_before = sum(read_log(ws / "embed.log").values())
    _write_config(ws, ["lang", "author"])
    plan, path = _plan(ws)
    assert plan.kind == "payload-only"
    assert plan.body["work"]["tokens_to_embed"] == 0 and plan.body["work"]["chunks_to_embed"] == 0
    assert sorted(plan.body["work"]["affected_documents"]) == ["a", "b", "c"]
    assert not plan.body["approval"]["required"]
    assert any("payload" in line for line in plan.body["explanation"])
    r = _apply(ws, path)
    assert r.collection == live  # in place
    assert r.report["actual"]["embedded"] == 0 and r.report["actual"]["payload_updated"] == len(before)
    assert sum(read_log(ws / "embed.log").values()) == embedded_before
    after = _points(ws, live)
    assert set(after) == set(before)
    by_doc = {d["id"]: d for d in DOCS}
    for pid, (vec, payload) in after.items():
        assert np.array_equal(vec, before[pid][0])
        assert payload["metadata"]["author"] == by_doc[payload["doc_id"]]["author"]
        assert {k: v for k, v in payload.items() if k != "metadata"} == \
            {k: v for k, v in before[pid][1].items() if k != "metadata"}
    again, _ = _plan(ws)
    assert again.kind == "none"
    state = api.state_store(api.load_resolved(ws / "reindex.yaml"))
    assert read_live(state, "docs").config_json["source"]["metadata_fields"] == ["lang", "author"]


def test_plan_json_of_a_new_metadata_field_shows_zero_tokens_to_embed(ws: Path) -> None:
    from click.testing import CliRunner

    from reindex.cli import main

    _write_config(ws, [])
    _build(ws)
    _write_config(ws, ["lang"])
    r = CliRunner().invoke(main, ["plan", "-c", str(ws / "reindex.yaml"), "--out", str(ws / "plans"), "--json"])
    assert r.exit_code in (0, 2), r.output
    summary = json.loads(r.output)
    assert summary["kind"] == "payload-only" and summary["tokens_to_embed"] == 0


def test_a_metadata_value_edit_reaches_the_payload_without_an_embed(ws: Path) -> None:
    _write_config(ws, ["lang"])
    live = _build(ws)
    before = _points(ws, live)
    log_before = read_log(ws / "embed.log")
    edited = [dict(d, lang="fr") if d["id"] == "b" else d for d in DOCS]
    _write_corpus(ws, edited)
    plan, path = _plan(ws)
    assert plan.kind == "payload-only"
    assert plan.body["work"]["affected_documents"] == ["b"] and plan.body["work"]["tokens_to_embed"] == 0
    _apply(ws, path)
    assert read_log(ws / "embed.log") == log_before
    after = _points(ws, live)
    assert set(after) == set(before)
    for pid, (vec, payload) in after.items():
        assert np.array_equal(vec, before[pid][0])
        assert payload["metadata"]["lang"] == ("fr" if payload["doc_id"] == "b" else before[pid][1]["metadata"]["lang"])
    assert _plan(ws)[0].kind == "none"


def test_a_text_edit_with_a_metadata_change_embeds_only_the_new_text(ws: Path) -> None:
    _write_config(ws, ["lang"])
    live = _build(ws)
    log_before = read_log(ws / "embed.log")
    edited = [dict(d, lang="fr") if d["id"] == "b" else d for d in DOCS]
    edited[0] = dict(edited[0], text=edited[0]["text"] + "A brand new closing sentence about pears.")
    _write_corpus(ws, edited)
    plan, path = _plan(ws)
    assert plan.kind == "document-scoped" and sorted(plan.body["work"]["affected_documents"]) == ["a", "b"]
    _apply(ws, path)
    new_embeds = read_log(ws / "embed.log") - log_before
    assert 0 < sum(new_embeds.values()) <= 2  # the new tail of `a` only; nothing of `b`
    langs = {p["doc_id"]: p["metadata"]["lang"] for _, p in _points(ws, live).values()}
    assert langs == {"a": "en", "b": "fr", "c": "en"}


def test_a_population_written_with_the_text_key_is_read_and_upgraded_in_place(ws: Path) -> None:
    """A live population from before the payload contract (text under ``text``, a record without a payload
    section) is still read by query and cutover, and the next plan rewrites its payloads in place."""
    from reindex.books.manifests import write_population

    _write_config(ws, [])
    live = _build(ws)
    cfg = api.load_resolved(ws / "reindex.yaml")
    store = api.vector_store_for(cfg)
    try:
        legacy = {}
        for p in store.scroll(live):
            payload = {k: v for k, v in p.payload.items() if k not in ("page_content", "metadata")}
            legacy[p.id] = {**payload, "text": p.payload["page_content"]}
        store.overwrite_payload(live, legacy)
    finally:
        store.close()
    state = api.state_store(cfg)
    rec = read_live(state, "docs")
    old_config = {k: v for k, v in rec.config_json.items() if k != "payload"}
    write_population(state, type(rec)(rec.index, rec.collection, old_config, rec.identity, rec.state,
                                      rec.created_at, rec.updated_at))
    some = next(iter(legacy.values()))
    assert api.query(some["text"], ws / "reindex.yaml", k=1).results[0]["page_content"] == some["text"]
    plan, path = _plan(ws)
    assert plan.kind == "payload-only" and plan.body["work"]["tokens_to_embed"] == 0
    assert any("predate the payload contract" in line for line in plan.body["explanation"])
    _apply(ws, path)
    for _, payload in _points(ws, live).values():
        assert "text" not in payload and payload["page_content"] and payload["metadata"]["doc_id"] == payload["doc_id"]


@pytest.mark.parametrize("backend", ["edge", "local"])
def test_filters_on_doc_id_and_metadata_fields(ws: Path, backend: str) -> None:
    _write_config(ws, ["lang", "author"], backend=backend, extra="payload: {indexes: [lang]}\n")
    live = _build(ws)
    cfg = api.load_resolved(ws / "reindex.yaml")
    vector = api.make_embedder(cfg.vector).embed(["apples and orchards"]).vectors[0]
    store = api.vector_store_for(cfg)
    try:
        docs = lambda **kw: {h.payload["doc_id"] for h in store.query("docs", vector, limit=50, **kw)}
        assert docs() == {"a", "b", "c"}
        assert docs(where={"metadata.lang": "en"}) == {"a", "c"}
        assert docs(where={"metadata.lang": "en", "metadata.author": "cat"}) == {"c"}
        assert docs(doc_id="a", where={"metadata.lang": "de"}) == set()
        assert docs(doc_id="b") == {"b"}
        if backend == "edge":
            assert store.collection_info(live)["payload_indexes"] == ["doc_id", "metadata.lang"]
    finally:
        store.close()
    if backend == "edge":  # `reindex query` reads through the edge reader (local mode admits one process)
        r = api.query("apples", ws / "reindex.yaml", k=10, filters={"lang": "de"})
        assert {x["doc_id"] for x in r.results} == {"b"} and r.results[0]["metadata"]["lang"] == "de"
        with pytest.raises(api.ConfigError, match="can filter on doc_id, lang, author only"):
            api.query("apples", ws / "reindex.yaml", filters={"title": "x"})


def test_a_stock_langchain_qdrant_store_reads_the_alias_before_and_after_a_cutover(ws: Path) -> None:
    """LangChain's ``QdrantVectorStore`` with its default keys (``page_content``, ``metadata``) over the
    alias of a ``store.backend: local`` store: the right chunk text and metadata, and after a cutover the
    new population's."""
    from langchain_core.embeddings import Embeddings
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    _write_config(ws, ["lang", "author"], backend="local")
    first = _build(ws)
    cfg = api.load_resolved(ws / "reindex.yaml")
    embedder = api.make_embedder(cfg.vector)

    class HashEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [list(map(float, v)) for v in embedder.embed(texts).vectors]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    def read_alias(collection: str) -> None:
        expected = {p["page_content"]: p for _, p in _points(ws, collection).values()}
        client = QdrantClient(path=str(ws / ".reindex" / "qdrant"))
        try:
            lc = QdrantVectorStore(client=client, collection_name="docs", embedding=HashEmbeddings())
            for text, payload in list(expected.items())[:4]:
                [doc] = lc.similarity_search(text, k=1)
                assert doc.page_content == text  # the hash embedder: a chunk's own text is its nearest
                assert {k: v for k, v in doc.metadata.items() if not k.startswith("_")} == payload["metadata"]
                assert doc.metadata["doc_id"] == payload["doc_id"]
        finally:
            client.close()

    read_alias(first)
    _write_config(ws, ["lang", "author"], backend="local", size=25)
    plan, path = _plan(ws)
    assert plan.kind == "pipeline-scoped/text"
    api.approve_plan(path, "tester", "test")
    second = _apply(ws, path).collection
    assert api.cutover(path, ws / "reindex.yaml").report["swap"]
    assert second != first
    read_alias(second)


def test_a_payload_only_apply_killed_mid_way_resumes_to_the_same_result(ws: Path) -> None:
    """A real ``reindex apply`` SIGKILLed right after its first payload overwrite: the rerun finishes, every
    point has the new metadata, vectors are untouched, nothing was embedded, and the next plan is none."""
    import signal
    import subprocess

    from helpers_index import REINDEX_BIN, subprocess_env

    _write_config(ws, ["lang"])
    live = _build(ws)
    before = _points(ws, live)
    _write_config(ws, ["lang", "author"])
    plan, path = _plan(ws)
    assert plan.kind == "payload-only"
    log = ws / "embed.log"
    embedded_before = sum(read_log(log).values())
    env = subprocess_env(REINDEX_SHARD_WORKERS="1", REINDEX_EMBED_LOG=str(log))
    env.pop("PREFECT_API_URL", None)
    cmd = [str(REINDEX_BIN), "apply", str(path), "-c", str(ws / "reindex.yaml"), "--no-progress"]
    killed = subprocess.run(cmd, cwd=ws, env={**env, "REINDEX_CRASH_AT": "after-payload:1"},
                            capture_output=True, text=True, timeout=240, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    half = _points(ws, live)
    assert any("author" in p["metadata"] for _, p in half.values())  # the first batch is durable
    assert not all("author" in p["metadata"] for _, p in half.values())  # … and the kill came before the rest
    done = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    after = _points(ws, live)
    assert set(after) == set(before)
    by_doc = {d["id"]: d for d in DOCS}
    for pid, (vec, payload) in after.items():
        assert np.array_equal(vec, before[pid][0])
        assert payload["metadata"]["author"] == by_doc[payload["doc_id"]]["author"]
    assert sum(read_log(log).values()) == embedded_before
    assert _plan(ws)[0].kind == "none"


def test_apply_refuses_a_plan_claiming_none_when_the_payload_settings_changed(ws: Path) -> None:
    """The kind apply re-derives from the live record and the config in force: a changed payload id is an
    in-place kind, so a plan file that says `none` (edited, hash recomputed) is refused."""
    from reindex.errors import PlanError
    from reindex.planner import Plan
    from reindex.usecases.apply import kind_in_force

    _write_config(ws, ["lang"])
    _build(ws)
    _write_config(ws, ["lang", "author"])
    plan, _ = _plan(ws)
    cfg = api.load_resolved(ws / "reindex.yaml")
    state = api.state_store(cfg)
    assert kind_in_force(plan, cfg, state) == "payload-only"
    with pytest.raises(PlanError, match="the plan says none but the live index and the config make it payload-only"):
        kind_in_force(Plan({**plan.body, "kind": "none"}), cfg, state)
