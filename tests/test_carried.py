"""Tokenize once per change (issue 35, item 1): apply's shards take the chunks the plan cut (``reindex.books.carried``)
instead of tokenizing every document again, and build exactly what they built before.

Every test here runs real plans and applies (sample corpus, MiniLM tokenizer, ``hash`` embedder, the embedded
edge store) twice where it compares: with carried chunks and with ``REINDEX_CARRY_CHUNKS=0`` (the shards chunk,
as before). Tokenizer work is counted through the ``tokenizers`` library's object (helpers_tokens)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from helpers_index import SAMPLE, Workspace
from helpers_tokens import tokenizer_counts  # noqa: F401 - a fixture
from reindex import api
from reindex.books.carried import (
    CARRY_COLUMNS,
    CarriedRef,
    CarryWriter,
    carried_index_key,
    carried_part_key,
    read_shard_carry,
)
from reindex.adapters.chunkers.base import Chunk
from reindex.domain.identity import canonical_json, identity_of
from reindex.adapters.pipeline import TextPipeline
from reindex.planner import read_plan, seal, write_plan
from reindex.runners import ThreadRunner
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport
from reindex.foundation.tables import columns_from_parquet, parquet_from_columns

OFF = "REINDEX_CARRY_CHUNKS"


def _exact(ws: Workspace, collection: str) -> dict[str, Any]:
    """Everything a population holds, to compare byte for byte: each point's vector bytes and payload, and
    the chunk manifest's rows."""
    with ws.store() as s:
        points = {p.id: (np.asarray(p.vector, dtype=np.float32).tobytes(), json.dumps(p.payload, sort_keys=True))
                  for p in s.scroll(collection, with_vectors=True)}
    return {"collection": collection, "points": points, "manifest": ws.manifest_rows(collection)}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["collection"] == b["collection"]
    assert a["points"].keys() == b["points"].keys(), (len(a["points"]), len(b["points"]))
    for pid, (vec, payload) in a["points"].items():
        assert (vec, payload) == b["points"][pid], f"point {pid} differs"
    assert a["manifest"] == b["manifest"]


def _applied(ws: Workspace, path: Path, **kw: Any):
    r = ws.apply(path, **kw)
    assert r.status == "done", r.report["failures"]
    return r


def _cut_over(ws: Workspace, path: Path) -> None:
    c = ws.cutover(path, force=True)  # the hash embedder's recall gate says nothing about chunking
    assert c.report["swap"] or c.report.get("already"), c.report


def _carry_keys(ws: Workspace) -> list[str]:
    return ws.state().list("indexes/docs/carried/")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sample built at 150 tokens, then its chunker change to 120 applied, with carrying switched off (every
    shard chunks its documents, as before carried chunks existed)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(OFF, "0")
    try:
        ws = Workspace(tmp_path_factory.mktemp("reference") / "ws")
        plan, path = ws.plan()
        assert "carried" not in plan.body
        ws.approve(path)
        r = _applied(ws, path)
        assert r.report["carried"] == {"id": None, "documents": 0, "chunked": 24, "problems": []}
        initial = _exact(ws, r.collection)
        _cut_over(ws, path)
        plan, path = ws.planned_change(size=120)
        assert "carried" not in plan.body
        r = _applied(ws, path)
        return {"initial": initial, "change": _exact(ws, r.collection)}
    finally:
        mp.undo()


def test_a_build_and_a_chunker_change_from_carried_chunks_are_byte_for_byte_those_without(
        tmp_path: Path, reference: dict[str, Any]) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    carried = plan.body["carried"]  # the plan names its carry: the plan hash covers it
    assert carried["documents"] == 24 and carried["chunks"] == plan.body["work"]["chunks_new"]
    assert carried["shards"] == 4 and ws.state().exists(carried_index_key("docs", carried["id"]))
    ws.approve(path)
    r = _applied(ws, path)
    assert r.report["carried"] == {"id": carried["id"], "documents": 24, "chunked": 0, "problems": []}
    _same(_exact(ws, r.collection), reference["initial"])
    assert _carry_keys(ws) == []  # done: the carry is deleted
    _cut_over(ws, path)

    plan, path = ws.planned_change(size=120)
    assert plan.kind == "pipeline-scoped/text" and plan.body["carried"]["documents"] == 24
    r = _applied(ws, path)
    assert r.report["carried"]["documents"] == 24 and r.report["carried"]["chunked"] == 0
    assert r.report["actual"]["reused_from_old"] > 0  # reuse across the chunker change still works
    _same(_exact(ws, r.collection), reference["change"])


def test_the_shards_tokenize_only_what_the_plan_did_not_carry(tmp_path: Path, reference: dict[str, Any],
                                                               tokenizer_counts: Counter) -> None:
    """One pass of the tokenizer per document for a pipeline change (plan), none at apply; a document edited
    after the plan (between the drift check and its shard) is chunked again, alone, and built as it now reads."""
    ws = Workspace(tmp_path / "ws")
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    texts = {d.doc_id: pipe.document_text(d) for d in open_source(cfg.source).scan(ScanReport())}
    tokenizer_counts.clear()
    plan, path = ws.plan()
    assert tokenizer_counts["chars"] == sum(len(t) for t in texts.values())  # one pass over every document
    ws.approve(path)
    tokenizer_counts.clear()
    r = _applied(ws, path)
    assert tokenizer_counts["calls"] == 0 and r.report["carried"]["documents"] == 24
    _cut_over(ws, path)

    plan, path = ws.planned_change(size=120)
    edited = "pep-0218.rst"
    assert edited in texts
    # Appended: every carried chunk of the document still lies in its text at its offsets and hashes to its
    # fingerprint, so only the content hash can tell that the document moved (and gained a tail).
    new_bytes = (ws.corpus / edited).read_bytes() + b"\n\nA paragraph written after the plan was made.\n"

    class EditFirst(ThreadRunner):
        """The in-process runner, after someone edits a document: the drift check has passed, the shards
        read the new bytes."""

        def run(self, ctx, job):
            (ws.corpus / edited).write_bytes(new_bytes)
            return super().run(ctx, job)

    tokenizer_counts.clear()
    r = _applied(ws, path, runner=EditFirst())
    assert r.report["carried"] == {"id": plan.body["carried"]["id"], "documents": 23, "chunked": 1, "problems": []}
    now = pipe.document_text(next(d for d in open_source(cfg.source).scan(ScanReport()) if d.doc_id == edited))
    assert tokenizer_counts["chars"] == len(now)  # that document only, once
    assert r.report["catch_up"]["documents"] == 0  # the shard built it as it now reads: nothing to catch up

    # The population is the one a build of the edited corpus makes without carrying.
    other = Workspace(tmp_path / "edited", size=120)
    (other.corpus / edited).write_bytes(new_bytes)
    plan, opath = other.plan()
    other.approve(opath)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(OFF, "0")
        o = _applied(other, opath)
    assert o.report["carried"]["documents"] == 0
    mine, theirs = _exact(ws, r.collection), _exact(other, o.collection)
    assert mine["points"] != reference["change"]["points"]
    _same(mine, theirs)


def _forge_offsets(ws: Workspace, path: Path) -> Path:
    """A carry that is consistent (every digest matches) but wrong: each carried chunk of one part starts one
    character late. The plan is re-sealed around it and approved again, as an edited and re-hashed plan would be."""
    plan = read_plan(path)
    state = ws.state()
    ref = plan.body["carried"]["id"]
    index = json.loads(state.get(carried_index_key("docs", ref)))
    shard, digest, rows, _ = index["parts"][0]
    cols, _ = columns_from_parquet(state.get(carried_part_key("docs", digest)), list(CARRY_COLUMNS))
    cols["start"] = [s + 1 for s in cols["start"]]
    data = parquet_from_columns(cols, CARRY_COLUMNS)
    forged = hashlib.blake2b(data, digest_size=16).hexdigest()
    state.put(carried_part_key("docs", forged), data)
    index["parts"][0] = [shard, forged, rows, len(data)]
    body = canonical_json(index).encode()
    new_id = hashlib.blake2b(body, digest_size=16).hexdigest()
    state.put(carried_index_key("docs", new_id), body)
    sealed = seal({k: v for k, v in plan.body.items() if k != "plan_hash"} | {"carried": {**plan.body["carried"], "id": new_id}})
    return write_plan(sealed, path.parent)


def _corrupt_part(ws: Workspace, path: Path) -> Path:
    state = ws.state()
    index = json.loads(state.get(carried_index_key("docs", read_plan(path).body["carried"]["id"])))
    state.put(carried_part_key("docs", index["parts"][0][1]), b"PAR1 not parquet at all")
    return path


def _delete_index(ws: Workspace, path: Path) -> Path:
    ws.state().delete(carried_index_key("docs", read_plan(path).body["carried"]["id"]))
    return path


@pytest.mark.parametrize("damage, says, chunked", [
    (_corrupt_part, "is corrupt", lambda n_part, n: n_part),
    (_delete_index, "are gone", lambda n_part, n: n),
    (_forge_offsets, "do not match its text", lambda n_part, n: n_part),
], ids=["corrupt-part", "missing-index", "forged-offsets"])
def test_a_damaged_carry_is_chunked_again_and_never_builds_wrong_text(
        tmp_path: Path, reference: dict[str, Any], damage: Callable[[Workspace, Path], Path], says: str,
        chunked: Callable[[int, int], int]) -> None:
    """Chosen: fall back to chunking, never refuse: what a shard cannot verify (the part's digest, the index's,
    every rebuilt text against its fingerprint) it cuts from the source, as apply did before; the run report says
    why, and the population is the reference's."""
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    state = ws.state()
    first = json.loads(state.get(carried_index_key("docs", plan.body["carried"]["id"])))["parts"][0]
    n_part = len(set(columns_from_parquet(state.get(carried_part_key("docs", first[1])), ["doc_id"])[0]["doc_id"]))
    path = damage(ws, path)
    ws.approve(path)
    r = _applied(ws, path)
    got = r.report["carried"]
    assert got["chunked"] == chunked(n_part, 24) and got["documents"] == 24 - got["chunked"]
    assert got["problems"] and all(says in p for p in got["problems"]), got["problems"]
    _same(_exact(ws, r.collection), reference["initial"])


def test_a_sampled_plan_carries_its_sample_and_apply_chunks_the_rest(tmp_path: Path, reference: dict[str, Any],
                                                                     tokenizer_counts: Counter) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = api.make_plan(ws.config, out=ws.plans, sample=8)
    assert plan.body["projection"] is not None
    sampled = plan.body["carried"]["documents"]
    assert 0 < sampled < 24
    ws.approve(path)
    tokenizer_counts.clear()
    r = _applied(ws, path)
    assert r.report["carried"] == {"id": plan.body["carried"]["id"], "documents": sampled, "chunked": 24 - sampled,
                                   "problems": []}
    assert tokenizer_counts["calls"] == 24 - sampled  # one encode per unsampled document (recursive chunker)
    _same(_exact(ws, r.collection), reference["initial"])


def test_an_apply_with_another_shard_count_than_planned_still_reads_the_carry(tmp_path: Path,
                                                                               reference: dict[str, Any]) -> None:
    """``apply.shards`` is operational (invariant 10): planned with 4, applied with 3, every shard filters the
    carried parts for its own documents."""
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    assert plan.body["carried"]["shards"] == 4
    ws.approve(path)
    ws.write_config(extra="apply: {shards: 3}")
    r = _applied(ws, path)
    assert len(r.report["shards"]) == 3
    assert r.report["carried"]["documents"] == 24 and r.report["carried"]["chunked"] == 0
    _same(_exact(ws, r.collection), reference["initial"])


@pytest.mark.parametrize("rechunk", [None, "{mode: sticky}"], ids=["stateless", "sticky"])
def test_an_in_place_sync_from_carried_chunks_equals_one_without(tmp_path: Path, rechunk: str | None) -> None:
    """Document-scoped: the plan carries the edited documents (re-chunked against their previous chunks when
    sticky, as apply does it), apply syncs them in place from the carry; same points, manifest and chunk texts
    as the same sync with every shard chunking."""
    results = []
    for name, env in (("carried", None), ("chunked", "0")):
        ws = Workspace(tmp_path / name)
        if rechunk:
            text = ws.config.read_text().replace("text: {chunker: {kind: recursive, size: 150}}",
                                                 "text: {chunker: {kind: recursive, size: 150}, rechunk: %s}" % rechunk)
            ws.config.write_text(text)
        with pytest.MonkeyPatch.context() as mp:
            if env:
                mp.setenv(OFF, env)
            live = ws.build_live()
            edited = ws.edit_documents()
            plan, path = ws.plan()
            assert plan.kind == "document-scoped"
            assert plan.body.get("carried", {}).get("documents", 0) == (0 if env else len(edited))
            if plan.body["approval"]["required"]:
                ws.approve(path)
            r = _applied(ws, path)
        assert r.collection == live and r.report["actual"]["deleted"] > 0
        assert r.report["carried"]["documents"] == (0 if env else len(edited))
        assert r.report["carried"]["chunked"] == (len(edited) if env else 0)
        from reindex.books.manifests import read_chunk_texts

        results.append((_exact(ws, live), read_chunk_texts(ws.state(), "docs", live)))
    (a, ta), (b, tb) = results
    _same(a, b)
    assert ta == tb


def test_the_planner_holds_a_bounded_number_of_rows_and_a_shard_reads_back_exactly_its_own(tmp_path: Path) -> None:
    """Rows leave the writer as parts once it holds ``held_rows`` (the largest shard's) or a shard holds
    ``part_rows``; each shard reads back exactly its documents' chunks, whichever parts they went to."""
    from reindex.books.manifests import shard_of
    from reindex.adapters.stores.objects import open_object_store

    state = open_object_store(str(tmp_path / "state"))
    cfg = Workspace(tmp_path / "ws").cfg()
    ident = identity_of(cfg)
    pipe = TextPipeline(cfg.text, ident.vector_id)
    writer = CarryWriter(state, "docs", 3, ident.pipeline_id, part_rows=40, held_rows=60)
    docs = list(open_source(cfg.source).scan(ScanReport()))
    most, cut = 0, {}
    for doc in docs:
        text = pipe.document_text(doc)
        cut[doc.doc_id] = (doc, text, pipe.chunk_text(doc.doc_id, text))
        writer.add(doc, text, cut[doc.doc_id][2])
        most = max(most, writer._rows_held)
    biggest = max(len(recs) for _, _, recs in cut.values())
    assert most <= 60 + biggest  # never more than the bound and one document
    summary = writer.finish()
    assert summary["parts"] > 3 and summary["chunks"] == sum(len(r) for _, _, r in cut.values())
    ref = CarriedRef("docs", summary["id"])
    for k in range(3):
        carry = read_shard_carry(state, ref, k, 3, ident.pipeline_id)
        assert set(carry.docs) == {d for d in cut if shard_of(d, 3) == k} and not carry.problems
        for doc_id in list(carry.docs):
            doc, text, recs = cut[doc_id]
            assert carry.records(pipe, doc, text) == recs
    # Read with another shard count (apply.shards changed since the plan), a shard keeps only its own documents.
    for k in range(2):
        assert set(read_shard_carry(state, ref, k, 2, ident.pipeline_id).docs) == {d for d in cut if shard_of(d, 2) == k}
    # A chunk whose text is not the slice of the document it points into (a chunker may trim) travels with it.
    doc, text, _ = cut[docs[0].doc_id]
    trimmed = pipe.records(doc.doc_id, [Chunk(0, 0, 40, 9, text[:40].strip().upper()), Chunk(1, 40, 80, 9, text[40:80])])
    w2 = CarryWriter(state, "docs", 1, ident.pipeline_id)
    w2.add(doc, text, trimmed)
    back = read_shard_carry(state, CarriedRef("docs", w2.finish()["id"]), 0, 1, ident.pipeline_id)
    assert back.records(pipe, doc, text) == trimmed
    # A chunk text Parquet cannot hold (a lone surrogate) is not carried, nor its document: it is cut at apply.
    w3 = CarryWriter(state, "docs", 1, ident.pipeline_id)
    w3.add(doc, text, pipe.records(doc.doc_id, [Chunk(0, 0, 4, 1, "te\udce9")]))
    assert w3.finish() is None and w3.failed is None and w3.documents == 0
    # Another pipeline's shard never takes them.
    other = read_shard_carry(state, ref, 0, 3, "another-pipeline")
    assert not other.docs and "another pipeline" in other.problems[0]


def test_a_carry_that_cannot_be_written_plans_without_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A state store that refuses the parts (read-only, full): the plan is made without ``carried``, with one
    warning, and its apply chunks as before. The state store is lent to the handle (the backends seam)."""
    from reindex.errors import StateError

    class RefusesCarried:
        """The real state store, refusing every write under ``carried/``."""

        def __init__(self, real: Any) -> None:
            self._real = real

        def put(self, key: str, data: bytes) -> None:
            if "/carried/" in key:
                raise StateError(f"cannot write {key}: read-only file system")
            self._real.put(key, data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

    ws = Workspace(tmp_path / "ws")
    with api.Index.open(ws.config, state=RefusesCarried(ws.state())) as ix:
        plan, path = ix.plan(out=ws.plans)
    assert "carried" not in plan.body
    assert sum("not carried to apply" in r.getMessage() for r in caplog.records) == 1
    assert _carry_keys(ws) == []
    ws.approve(path)
    r = _applied(ws, path)
    assert r.report["carried"]["chunked"] == 24


def test_the_sample_corpus_is_what_these_tests_count_on() -> None:
    assert len(list((SAMPLE / "corpus").glob("*.rst"))) == 24


def test_gc_deletes_what_plans_carried_once_older_than_the_retention(tmp_path: Path, reference: dict[str, Any]) -> None:
    """A plan nobody applied leaves its carry; gc deletes it once it is older than ``cutover.retention_days`` (and
    parts no index names, left by a plan that stopped half-way); the plan, applied after all, chunks."""
    ws = Workspace(tmp_path / "ws", extra="cutover: {retention_days: 0.5}")
    plan, path = ws.plan()
    state = ws.state()
    stray = carried_part_key("docs", "0" * 32)
    state.put(stray, b"a part of a plan that never finished")
    keys = _carry_keys(ws)
    assert len(keys) == 1 + 4 + 1
    api.gc(ws.config)
    assert _carry_keys(ws) == keys  # younger than the retention: kept
    import os
    import time

    old = time.time() - 0.6 * 86400
    for key in keys:
        os.utime(ws.root / ".reindex" / key, (old, old))
    api.gc(ws.config)
    assert _carry_keys(ws) == []
    ws.approve(path)
    r = _applied(ws, path)
    assert r.report["carried"]["chunked"] == 24 and "are gone" in r.report["carried"]["problems"][0]
    _same(_exact(ws, r.collection), reference["initial"])
