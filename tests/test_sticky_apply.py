"""Sticky re-chunking in the planner and apply (issue 16): an edited document of a document-scoped
change is re-chunked against its previous chunk texts (stored beside the chunk manifest), the plan's
tokens to embed equal what apply embeds, the plan reports what was kept and how far it drifted, and
a population without stored texts is cut statelessly by both.

Runs in process on the bundled 24-PEP sample (recursive:size=150, 4 shards, the ``hash`` embedder,
embedded Qdrant); the crash test runs a real ``reindex apply --no-prefect`` that SIGKILLs itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, read_log, subprocess_env
from reindex import api
from reindex.books.manifests import read_chunk_manifest, read_chunk_texts, shard_of
from reindex.adapters.pipeline import TextPipeline
from reindex.domain.identity import identity_of
from reindex.reports import plan_markdown, plan_text

STATELESS = "text: {chunker: {kind: recursive, size: 150}}"


def _workspace(root: Path, rechunk: str = "{mode: sticky}") -> Workspace:
    ws = Workspace(root)
    text = ws.config.read_text()
    assert STATELESS in text
    ws.config.write_text(text.replace(STATELESS, "text: {chunker: {kind: recursive, size: 150}, rechunk: %s}" % rechunk))
    return ws


@pytest.fixture
def embed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "embed.log"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(path))
    return path


def _texts_by_doc(ws: Workspace, collection: str) -> dict[str, list[str]]:
    """Each document's chunk texts in ordinal order, read from the points themselves."""
    snap = ws.snapshot(collection)
    docs: dict[str, list[tuple[int, str]]] = {}
    for _, p in snap.points.values():
        docs.setdefault(p["doc_id"], []).append((p["ordinal"], p["page_content"]))
    return {d: [t for _, t in sorted(v)] for d, v in docs.items()}


def test_every_chunk_text_is_stored_beside_the_manifest(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    rows = ws.manifest_rows(live)
    texts = read_chunk_texts(ws.state(), "docs", live)
    by_point = {pid: p["page_content"] for pid, (_, p) in ws.snapshot(live).points.items()}
    assert rows and all(texts[r.fingerprint] == by_point[r.point_id] for r in rows)
    # One text part per manifest part, under the same name.
    keys = ws.state().list(f"indexes/docs/populations/{live}/")
    parts = sorted(k.rsplit("/", 1)[-1] for k in keys if "/chunks/" in k)
    assert parts == sorted(k.rsplit("/", 1)[-1] for k in keys if "/chunk-texts/" in k)


def test_stateless_populations_store_no_chunk_texts(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    assert not [k for k in ws.state().list(f"indexes/docs/populations/{live}/") if "/chunk-texts/" in k]


def test_sticky_plan_equals_apply_and_keeps_the_previous_chunks(tmp_path: Path, embed_log: Path) -> None:
    stateless = Workspace(tmp_path / "stateless")
    stateless.build_live()
    stateless.edit_documents()
    stateless_plan, _ = stateless.plan()

    ws = _workspace(tmp_path / "sticky")
    live = ws.build_live()
    before = _texts_by_doc(ws, live)
    edited = ws.edit_documents()
    plan, path = ws.plan()
    w = plan.body["work"]
    assert plan.kind == "document-scoped" and w["documents"]["edited"] == len(edited) == 2
    assert sorted(w["affected_documents"]) == sorted(edited)
    rc = w["rechunk"]
    assert rc["mode"] == "sticky" and rc["documents"] == 2 and rc["without_previous_texts"] == 0
    assert rc["previous_chunks"] == sum(len(before[d]) for d in edited)
    assert 0 < rc["kept_chunks"] < rc["previous_chunks"] and rc["recut_documents"] == 0
    assert rc["drift"]["checked_documents"] == 2 and rc["drift"]["distance_max"] < rc["drift"]["max_drift"]
    # Sticky embeds less than re-cutting the same edits statelessly (sample edits: 579 vs 678 tokens).
    assert 0 < w["tokens_to_embed"] < stateless_plan.body["work"]["tokens_to_embed"]

    logged = sum(read_log(embed_log).values())
    r = ws.apply(path)
    a = r.report["actual"]
    assert r.status == "done" and r.collection == live
    assert a["tokens_embedded"] == w["tokens_to_embed"]
    assert a["embedded"] == w["chunks_to_embed"] == sum(read_log(embed_log).values()) - logged

    # The live chunks of each edited document are sticky: every previous chunk the plan kept is still there,
    # and they are exactly what the pipeline re-chunks from the previous texts.
    after = _texts_by_doc(ws, live)
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    kept, not_fresh = 0, 0
    for doc_id in after:
        if after[doc_id] == before.get(doc_id):
            continue
        text = "".join(after[doc_id])
        assert [c.text for c in pipe.rechunk_text(doc_id, text, before[doc_id])] == after[doc_id]
        not_fresh += [c.text for c in pipe.chunk_text(doc_id, text)] != after[doc_id]
        kept += len(set(after[doc_id]) & set(before[doc_id]))
    assert kept == rc["kept_chunks"] and not_fresh >= 1  # at least one edited document is not a fresh cut
    # The stored texts now describe the new chunks, so the next edit is sticky against them.
    texts = read_chunk_texts(ws.state(), "docs", live)
    assert all(r.fingerprint in texts for r in ws.manifest_rows(live))
    replan, _ = ws.plan()
    assert replan.kind == "none"


def test_missing_chunk_texts_mean_a_stateless_cut_in_plan_and_apply(tmp_path: Path, embed_log: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    state = ws.state()
    for k in state.list(f"indexes/docs/populations/{live}/chunk-texts/"):
        state.delete(k)
    ws.edit_documents()
    plan, path = ws.plan()
    w = plan.body["work"]
    assert w["rechunk"]["documents"] == 0 and w["rechunk"]["without_previous_texts"] == 2
    r = ws.apply(path)
    assert r.report["actual"]["tokens_embedded"] == w["tokens_to_embed"]
    # Same work as the stateless pipeline would plan for the same edits.
    stateless = Workspace(tmp_path / "stateless")
    stateless.build_live()
    stateless.edit_documents()
    assert stateless.plan()[0].body["work"]["tokens_to_embed"] == w["tokens_to_embed"]


def test_a_half_written_chunk_text_part_is_reported_by_the_plan(tmp_path: Path) -> None:
    """Issue 22: a chunk-text part that exists but lacks texts of its documents' chunks (a valid Parquet
    file, half its rows) was tolerated silently; the plan now names the part and what it costs."""
    from reindex.books.manifests import read_chunk_texts_part, shard_name, write_chunk_texts_part

    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    state = ws.state()
    edited = ws.edit_documents()
    parts = {shard_name(shard_of(d, 4)) for d in edited}
    lost = {r.fingerprint for r in read_chunk_manifest(state, "docs", live) if r.doc_id in edited}
    for part in parts:
        texts = read_chunk_texts_part(state, "docs", live, part)
        write_chunk_texts_part(state, "docs", live, part, {f: t for f, t in texts.items() if f not in lost})
    plan, _ = ws.plan()
    assert plan.body["work"]["rechunk"]["without_previous_texts"] == len(edited)
    lines = [x for x in plan.body["explanation"] if x.startswith("chunk-text part ")]
    assert lines == [f"chunk-text part {state.describe()}/indexes/docs/populations/{live}/chunk-texts/{part}.parquet "
                     f"lacks the previous chunk texts of {sum(1 for d in edited if shard_name(shard_of(d, 4)) == part)} "
                     "edited document(s) (half-written or damaged): they are cut statelessly, which re-embeds more; "
                     "this apply stores their new texts" for part in sorted(parts)]


def test_drift_control_recut_is_planned_and_applied_alike(tmp_path: Path, embed_log: Path) -> None:
    ws = _workspace(tmp_path / "ws", "{mode: sticky, max_drift: 0.0}")
    ws.build_live()
    ws.edit_documents()
    plan, path = ws.plan()
    w = plan.body["work"]
    # Every edited document whose sticky cut drifts at all from a fresh cut is re-cut (max_drift 0).
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    from reindex.planner import live_baseline

    base = live_baseline(ws.state(), "docs")
    recut = 0
    for doc_id in w["affected_documents"]:
        text = pipe.document_text(next(d for d in _documents(ws) if d.doc_id == doc_id))
        recut += pipe.rechunk_detail(doc_id, text, base.previous_texts(doc_id))[1].recut
    assert w["rechunk"]["recut_documents"] == recut >= 1
    assert w["rechunk"]["kept_chunks"] < w["rechunk"]["previous_chunks"]
    r = ws.apply(path)
    assert r.report["actual"]["tokens_embedded"] == w["tokens_to_embed"]
    line = f"drift control re-cut {w['rechunk']['recut_documents']}"
    assert line in plan_text(plan, path) and line in plan_markdown(plan)


def _documents(ws: Workspace) -> list:
    from reindex.adapters.sources import open_source
    from reindex.adapters.sources.base import ScanReport

    return list(open_source(ws.cfg().source).scan(ScanReport()))


def test_the_planner_reads_a_documents_own_text_part_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reindex.planner._baseline as baseline_module

    ws = _workspace(tmp_path / "ws")
    ws.build_live()
    ws.edit_documents()

    def no_scan(*a, **k):
        raise AssertionError("read every chunk-text part although each document's own part has its texts")

    monkeypatch.setattr(baseline_module, "read_chunk_texts", no_scan)
    plan, _ = ws.plan()
    assert plan.body["work"]["rechunk"]["documents"] == 2 and plan.body["work"]["rechunk"]["kept_chunks"] > 0


def test_a_sticky_apply_killed_between_texts_and_manifest_resumes_to_the_plan(tmp_path: Path) -> None:
    """Killed after a shard's chunk-text part is written but before its manifest part: the resumed run
    finds the previous texts (the part holds old and new), re-chunks identically and ends where an
    uninterrupted apply ends."""
    ref = _workspace(tmp_path / "ref")
    ref_live = ref.build_live()
    ref.edit_documents()
    ref_plan, ref_path = ref.plan()
    assert ref.apply(ref_path).status == "done"
    want = ref.snapshot(ref_live)

    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    assert live == ref_live
    ws.edit_documents()
    plan, path = ws.plan()
    assert plan.body["work"]["tokens_to_embed"] == ref_plan.body["work"]["tokens_to_embed"]
    # The shards the plan touches, in the order apply runs them: kill at the first one's manifest write.
    cmd = [str(REINDEX_BIN), "apply", str(path), "-c", str(ws.config), "--no-prefect", "--no-progress"]
    killed = subprocess.run(cmd, cwd=ws.root, env=subprocess_env(REINDEX_CRASH_AT="before-manifest", REINDEX_SHARD_WORKERS="1"),
                            capture_output=True, text=True, timeout=240)
    assert killed.returncode == -9, killed.stderr[-2000:]
    # The killed shard's manifest part is still the old one, and its text part already holds old and new.
    first = min(shard_of(d, 4) for d in plan.body["work"]["affected_documents"])
    old_rows = {r.fingerprint for r in read_chunk_manifest(ws.state(), "docs", live) if shard_of(r.doc_id, 4) == first}
    new_rows = {r.fingerprint for r in ref.manifest_rows(ref_live) if shard_of(r.doc_id, 4) == first}
    assert old_rows != new_rows
    texts = read_chunk_texts(ws.state(), "docs", live)
    assert old_rows | new_rows <= set(texts)
    log = tmp_path / "resume.log"
    done = subprocess.run(cmd, cwd=ws.root, env=subprocess_env(REINDEX_EMBED_LOG=str(log)), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    ws.snapshot(live).assert_same(want)
    assert ws.manifest_rows(live) == ref.manifest_rows(ref_live)
    # Vectors written before the kill are found again: the resumed run embeds less than the whole plan.
    assert sum(read_log(log).values()) < plan.body["work"]["chunks_to_embed"]


def test_an_explicit_baseline_plans_sticky_work_like_the_live_one(tmp_path: Path) -> None:
    """``--baseline-config/--baseline-corpus`` keeps the old chunk texts, so a what-if plan of a sticky
    config against an old snapshot prices the same work as the live population would."""
    import shutil

    ws = _workspace(tmp_path / "ws")
    ws.build_live()
    old_corpus = tmp_path / "old-corpus"
    shutil.copytree(ws.corpus, old_corpus)
    ws.edit_documents()
    live_plan, _ = ws.plan()
    what_if, _ = api.make_plan(ws.config, baseline_config=ws.config, baseline_corpus=str(old_corpus), out=None)
    assert what_if.kind == live_plan.kind == "document-scoped"
    for key in ("tokens_to_embed", "chunks_to_embed", "chunks_new"):
        assert what_if.body["work"][key] == live_plan.body["work"][key], key
    rc_live, rc_what_if = live_plan.body["work"]["rechunk"], what_if.body["work"]["rechunk"]
    assert rc_what_if == rc_live and rc_live["documents"] == 2


def _text_parts(ws: Workspace, collection: str) -> dict[str, set[str]]:
    from reindex.books.manifests import read_chunk_texts_part

    state = ws.state()
    names = [k.rsplit("/", 1)[-1].removesuffix(".parquet") for k in state.list(f"indexes/docs/populations/{collection}/chunk-texts/")]
    return {n: set(read_chunk_texts_part(state, "docs", collection, n)) for n in names}


def _manifest_parts(ws: Workspace, collection: str) -> dict[str, set[str]]:
    from reindex.books.manifests import shard_name

    out: dict[str, set[str]] = {}
    for r in ws.manifest_rows(collection):
        out.setdefault(shard_name(shard_of(r.doc_id, 4)), set()).add(r.fingerprint)
    return out


def test_text_parts_hold_the_current_and_the_replaced_manifest_and_nothing_older(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reindex.engine.execution as execution

    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    first = _manifest_parts(ws, live)
    assert _text_parts(ws, live) == first
    # Same shard count: each shard's previous texts come from its own part, never from a scan of every part.
    def no_scan(*a, **k):
        raise AssertionError("read every chunk-text part although the shard's own part has its texts")

    monkeypatch.setattr(execution, "read_chunk_texts", no_scan)
    ws.edit_documents()
    _, path = ws.plan()
    assert ws.apply(path).status == "done"
    second = _manifest_parts(ws, live)
    touched = {n for n in second if second[n] != first[n]}
    assert touched
    parts = _text_parts(ws, live)
    for name in second:
        assert parts[name] == (second[name] | first[name] if name in touched else second[name]), name

    # A second edit of one of the same documents: the texts only the first manifest had are pruned.
    doc = sorted(ws.edit_documents())[0]
    with open(ws.corpus / doc, "a", encoding="utf-8") as f:
        f.write("\nA closing paragraph added by a later revision of this document.\n")
    _, path = ws.plan()
    assert ws.apply(path).status == "done"
    third = _manifest_parts(ws, live)
    parts = _text_parts(ws, live)
    for name in third:
        want = third[name] | second[name] if third[name] != second[name] else third[name]
        assert parts[name] == want, name
    name = shard_name_of(doc)
    assert first[name] - second[name] - third[name], "the test needs texts that only the first manifest named"
    assert not (first[name] - second[name] - third[name]) & parts[name]


def shard_name_of(doc_id: str) -> str:
    from reindex.books.manifests import shard_name

    return shard_name(shard_of(doc_id, 4))


def test_read_chunk_texts_returns_only_the_wanted_fingerprints(tmp_path: Path) -> None:
    from reindex.books.manifests import write_chunk_texts_part
    from reindex.adapters.stores.objects import open_object_store

    store = open_object_store(str(tmp_path / "state"))
    write_chunk_texts_part(store, "docs", "c1", "shard-0000", {"a": "alpha", "b": "beta"})
    write_chunk_texts_part(store, "docs", "c1", "shard-0001", {"c": "gamma"})
    store.put("indexes/docs/populations/c1/chunk-texts/README.txt", b"not a part")
    assert read_chunk_texts(store, "docs", "c1") == {"a": "alpha", "b": "beta", "c": "gamma"}
    assert read_chunk_texts(store, "docs", "c1", {"b", "c", "zz"}) == {"b": "beta", "c": "gamma"}
    assert read_chunk_texts(store, "docs", "other") == {}


def test_a_stateless_pipeline_ignores_previous_chunks(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    cfg = ws.cfg()
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    text = (ws.corpus / "pep-0687.rst").read_text(encoding="utf-8")
    previous = [text[:500], text[500:]]  # chunks a sticky cut would keep
    assert not pipe.sticky
    records, how = pipe.rechunk_detail("d", text, previous)
    assert how is None and [r.text for r in records] == [r.text for r in pipe.chunk_text("d", text)]


def test_texts_found_only_under_another_part_name_are_used_by_plan_and_apply_alike(tmp_path: Path) -> None:
    """A part written under another name (another shard count) still serves its texts: the planner and
    apply both fall back to every part, and the rewritten part keeps only the texts its manifest names."""
    ws = _workspace(tmp_path / "ws")
    live = ws.build_live()
    edited = ws.edit_documents()
    name = shard_name_of(edited[0])
    state = ws.state()
    prefix = f"indexes/docs/populations/{live}/chunk-texts/"
    state.put(prefix + "shard-9999.parquet", state.get(prefix + name + ".parquet"))
    state.delete(prefix + name + ".parquet")
    before = _manifest_parts(ws, live)
    plan, path = ws.plan()
    w = plan.body["work"]
    assert w["rechunk"]["documents"] == 2 and w["rechunk"]["without_previous_texts"] == 0
    r = ws.apply(path)
    assert r.report["actual"]["tokens_embedded"] == w["tokens_to_embed"]
    after = _manifest_parts(ws, live)
    assert _text_parts(ws, live)[name] == after[name] | before[name]


def test_the_rechunk_tally_adds_up_documents() -> None:
    from reindex.adapters.chunkers.sticky import Drift, Rechunked
    from reindex.domain.config import RechunkConfig
    from reindex.planner._work import RechunkTally

    tally = RechunkTally()
    drift = Drift(4, 4, 0.25, 0.0, 0.5)
    tally.add(["a", "b"], Rechunked((), 0, True, drift))
    tally.add(["c", "d", "e"], Rechunked((), 2, True, Drift(3, 3, 0.0, 0.0, 0.1)))
    tally.add(["f"], Rechunked((), 1, False, None))
    tally.add(None, None)
    tally.add([], None)
    d = tally.as_dict(RechunkConfig(mode="sticky"))
    assert (d["documents"], d["without_previous_texts"], d["previous_chunks"], d["kept_chunks"], d["recut_documents"]) == (3, 2, 6, 3, 2)
    assert d["drift"]["checked_documents"] == 2 and d["drift"]["distance_max"] == 0.5 and d["drift"]["distance_mean"] == 0.3
    assert d["drift"]["out_of_bounds_mean"] == 0.125 and d["drift"]["out_of_bounds_max"] == 0.25
    assert (d["drift"]["max_drift"], d["drift"]["max_out_of_bounds"]) == (0.25, 0.15)  # the thresholds in force
    assert tally.as_dict(RechunkConfig()) == {"mode": "stateless"}
