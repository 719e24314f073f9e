"""The live population's documents read part by part (``reindex.planner._live_docs``): a plan that finds its
changes from a source's cursor decodes only the chunk manifest parts of the documents it touches (the others
count through each part's totals, cached under the digest of the part's bytes), and every figure it gives equals
what a full read of the same source gives (``reindex plan --verify``): kind, work, cost, charts, sensitivity,
approval. A part whose documents are not where their shard says (a foreign manifest) is read whole instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers_index import SAMPLE
from reindex import api
from reindex.planner import DocsSummary, LiveDocs
from reindex.planner._live_docs import STATE_COLUMNS, _doc_states
from reindex.books.manifests import (
    chunk_manifest_bytes,
    chunk_manifest_keys,
    chunk_manifest_part_rows,
    chunk_summary_key,
    count_chunk_manifest_rows,
    read_chunk_manifest_columns,
    read_live,
    shard_name,
    shard_of,
)
from reindex.books.layout import Books
from reindex.books.parts import write_chunk_manifest_part

SHARDS = 8
COMPARED = ("kind", "work", "cost", "charts", "sensitivity", "approval")
DOCS = sorted(SAMPLE.joinpath("corpus").glob("*.rst"))[:10]


class Log:
    """An index over a change log (8 shards, removals need no approval), plans and state under ``root``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True)
        self.log = root / "changes.jsonl"
        self.config = root / "reindex.yaml"
        self.plans = root / "plans"
        self.config.write_text(
            f"index: docs\nsource: {json.dumps({'kind': 'changelog', 'uri': str(self.log)})}\n"
            "text: {chunker: {kind: recursive, size: 150}}\nvector: {provider: hash}\n"
            f"apply: {{shards: {SHARDS}}}\napproval: {{max_removed_share: 0.5}}\n", encoding="utf-8")
        docs = {f.name: f.read_text(encoding="utf-8") for f in DOCS}
        docs.update({f"note-{i:02d}": _note(f"note-{i:02d}") for i in range(14)})
        docs["long"] = " ".join(f"word{i % 97}" for i in range(6000))  # past the 4,000-token tail
        self.upsert(docs)

    def upsert(self, docs: dict[str, str]) -> None:
        with self.log.open("a", encoding="utf-8") as f:
            for doc_id, text in docs.items():
                f.write(json.dumps({"op": "upsert", "doc_id": doc_id, "text": text}) + "\n")

    def delete(self, doc_id: str) -> None:
        with self.log.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"op": "delete", "doc_id": doc_id}) + "\n")

    def plan(self, **kw: Any):
        return api.make_plan(self.config, out=self.plans, **kw)

    def build(self) -> str:
        plan, path = self.plan()
        api.approve_plan(path, "tester")
        assert api.apply_plan(path, self.config, use_prefect=False).status == "done"
        assert api.cutover(path, self.config).report["swap"]
        return read_live(self.state(), "docs").collection

    def state(self):
        return api.state_store(api.load_resolved(self.config))


def _note(name: str) -> str:
    return f"{name.capitalize()}.\n\nA short document about {name}.\n"


def _decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The manifest parts (``shard-000k``) the live documents' reader decodes."""
    import reindex.planner._live_docs as live_docs

    parts: list[str] = []
    real = live_docs.chunk_manifest_part_columns

    def columns(data: bytes, where: str, names: list[str]) -> dict[str, list]:
        parts.append(where.rsplit("/", 1)[-1].removesuffix(".parquet"))
        return real(data, where, names)

    monkeypatch.setattr(live_docs, "chunk_manifest_part_columns", columns)
    return parts


def _home(doc_id: str) -> str:
    return shard_name(shard_of(doc_id, SHARDS))


def _same_figures(cursor: Any, full: Any) -> None:
    assert cursor.body["inputs"]["corpus"]["read"]["mode"] == "cursor"
    assert full.body["inputs"]["corpus"]["read"]["mode"] == "full"
    for section in COMPARED:
        assert cursor.body[section] == full.body[section], section


def test_a_cursor_plan_decodes_only_the_parts_it_touches_and_counts_what_a_full_read_counts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ix = Log(tmp_path / "ix")
    ix.build()
    ix.plan()  # the first plan after the build sums each part once and caches its totals
    edited, removed, added = DOCS[0].name, "note-03", "a-new-note"
    touched = {_home(edited), _home(removed), _home(added)}
    # The new note repeats, word for word, a note of a part the plan does not decode: its one chunk is counted
    # as cross-document reuse from that part's cached fingerprint prefixes.
    twin = next(f"note-{i:02d}" for i in range(14) if _home(f"note-{i:02d}") not in touched)
    ix.upsert({edited: DOCS[0].read_text(encoding="utf-8") + "\nAn edited ending.\n", added: _note(twin)})
    ix.delete(removed)
    decoded = _decoded(monkeypatch)
    cursor, path = ix.plan()
    assert len(touched) < SHARDS and sorted(set(decoded)) == sorted(touched)
    w = cursor.body["work"]["documents"]
    assert (w["edited"], w["added"], w["removed"], w["unchanged"]) == (1, 1, 1, len(DOCS) + 15 - 2)
    assert cursor.body["sensitivity"]["tail_documents"] >= 1
    assert cursor.body["work"]["cross_document"]["chunks"] == 1
    full, _ = ix.plan(verify=True)
    _same_figures(cursor, full)

    # Applied: the parts it rewrote are summed again once (their cached totals name the old bytes), by the
    # apply's catch-up, which looks the documents up the same way; the next plan decodes the part it touches.
    decoded.clear()
    assert api.apply_plan(path, ix.config, use_prefect=False).status == "done"
    assert set(decoded) <= touched
    later = DOCS[5].name
    ix.upsert({later: DOCS[5].read_text(encoding="utf-8") + "\nAnother ending.\n"})
    decoded.clear()
    cursor, _ = ix.plan()
    assert sorted(set(decoded)) == [_home(later)]
    assert cursor.body["work"]["documents"]["edited"] == 1
    _same_figures(cursor, ix.plan(verify=True)[0])
    # The cached totals are those of the manifest as it is now, summed from every row.
    state, live = ix.state(), read_live(ix.state(), "docs").collection
    whole = DocsSummary.of(_doc_states(read_chunk_manifest_columns(state, "docs", live, STATE_COLUMNS), lambda: []).values())
    assert LiveDocs(state, "docs", live, SHARDS).summary.as_json() == whole.as_json()


def _edit_and_plan_as_a_full_read(ix: Log, live: str, doc: Path) -> None:
    """Edit ``doc`` and plan: found edited (not added), every chunk of the population counted once, the figures
    those of a full read."""
    ix.upsert({doc.name: doc.read_text(encoding="utf-8") + "\nEdited.\n"})
    plan, _ = ix.plan()
    w = plan.body["work"]
    assert (w["documents"]["edited"], w["documents"]["added"]) == (1, 0)
    assert w["chunks_old"] == count_chunk_manifest_rows(ix.state(), "docs", live)
    _same_figures(plan, ix.plan(verify=True)[0])


def _move_rows(ix: Log, live: str, doc_id: str, keep: int | None) -> list:
    """Move ``doc_id``'s manifest rows from its shard's part to another part, keeping its first ``keep`` rows at
    home (None: half of them, at least two rows needed); returns its rows as they were."""
    state = ix.state()
    keys = chunk_manifest_keys(state, "docs", live)
    home = next(k for k in keys if k.endswith(f"/{_home(doc_id)}.parquet"))
    other = next(k for k in keys if k != home)
    rows = {k: chunk_manifest_part_rows(state.get(k), k) for k in (home, other)}
    mine = [r for r in rows[home] if r.doc_id == doc_id]
    if keep is None:
        assert len(mine) >= 2
        keep = len(mine) // 2
    name = lambda key: key.rsplit("/", 1)[-1].removesuffix(".parquet")  # noqa: E731
    write_chunk_manifest_part(state, "docs", live, name(other), rows[other] + mine[keep:])
    write_chunk_manifest_part(state, "docs", live, name(home), [r for r in rows[home] if r.doc_id != doc_id] + mine[:keep])
    return mine


def test_a_document_outside_its_shards_part_is_found_by_reading_every_part(tmp_path: Path) -> None:
    """A foreign or hand-edited manifest: a document's rows moved from its shard's part into another part. The
    plan cannot look it up by its shard; it reads every part, finds the document edited (not added), and counts
    every chunk of the population once."""
    ix = Log(tmp_path / "ix")
    live = ix.build()
    _move_rows(ix, live, DOCS[2].name, keep=0)
    _edit_and_plan_as_a_full_read(ix, live, DOCS[2])


def test_a_damaged_summary_is_summed_again(tmp_path: Path) -> None:
    ix = Log(tmp_path / "ix")
    live = ix.build()
    first, _ = ix.plan()
    state = ix.state()
    key = chunk_summary_key("docs", live, _home(DOCS[1].name))
    assert json.loads(state.get(key))["digest"]  # the plan cached it
    totals = Books(state, "docs").part_totals_key(live)
    assert json.loads(state.get(totals))["digest"]  # and every part's totals together, for this manifest
    state.put(totals, b'{"version": "reindex/part-totals/v1", "parts"')  # damaged: the parts' summaries are read
    state.put(key, b'{"version": "reindex/part-summary/v1", "digest"')  # and this one is damaged too
    again, _ = ix.plan()
    assert again.body["work"] == first.body["work"] and again.body["charts"] == first.body["charts"]
    assert json.loads(state.get(key))["routed"] is True  # written again
    assert json.loads(state.get(totals))["version"] == "reindex/part-totals/v1"  # written again


def test_a_document_split_over_two_parts_is_read_from_every_row(tmp_path: Path) -> None:
    """A manifest whose document's rows are in two parts (half in its shard's, half in another): the column pass
    meets the document twice, so the states are grouped from every row; the plan finds it edited with all its
    old chunks, as a full read does."""
    ix = Log(tmp_path / "ix")
    live = ix.build()
    state = ix.state()
    split = DOCS[3].name
    mine = _move_rows(ix, live, split, keep=None)
    keys = chunk_manifest_keys(state, "docs", live)
    states = LiveDocs(state, "docs", live, SHARDS)
    assert not states.routed
    assert len(states[split].fingerprints) == len(mine)
    assert states.get("no-such", 7) == 7 and "no-such" not in states
    assert states.ids() == {r.doc_id for k in keys for r in chunk_manifest_part_rows(state.get(k), k)}
    assert len(states) == len(states.ids())
    _edit_and_plan_as_a_full_read(ix, live, DOCS[3])


def test_fingerprint_prefixes_find_hex_and_foreign_fingerprints() -> None:
    from reindex.planner._live_docs import _PrefixSet, _prefixes

    import hashlib

    hexes = [hashlib.sha256(x).hexdigest() for x in (b"one", b"two", b"three")]  # the first 16 digits are compared
    foreign = ["not-hex-at-all-but-long-enough", "short"]
    found = _PrefixSet(lambda: [_prefixes(hexes[:2]), _prefixes(foreign)])
    assert all(fp in found for fp in hexes[:2] + foreign)
    assert hexes[2] not in found and "another-foreign-fingerprint" not in found and "shorter" not in found
    assert None not in found


def test_the_live_documents_answer_ids_states_and_fingerprints_from_the_parts_they_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    from reindex.errors import StateError

    ix = Log(tmp_path / "ix")
    live = ix.build()
    state = ix.state()
    keys = chunk_manifest_keys(state, "docs", live)
    rows = [r for k in keys for r in chunk_manifest_part_rows(state.get(k), k)]
    ids = {r.doc_id for r in rows}
    docs = LiveDocs(state, "docs", live, SHARDS)
    assert docs.routed
    assert LiveDocs(state, "docs", live, SHARDS).ids() == ids  # from the id columns, nothing decoded
    first = DOCS[0].name
    assert docs[first].fingerprints == tuple(r.fingerprint for r in sorted(rows, key=lambda r: r.ordinal)
                                             if r.doc_id == first)
    assert docs.ids() == ids  # one part decoded, the others' id columns
    assert first in docs and docs.get(first) is docs[first]
    assert "no-such" not in docs and docs.get("no-such") is None and docs.get("no-such", 7) == 7
    with pytest.raises(KeyError, match="no-such"):
        docs["no-such"]

    # Fingerprints: membership through each part's 64-bit prefixes, cached for the digest of the part's bytes.
    fps = sorted({r.fingerprint for r in rows})
    npz = lambda: sorted(k for k in state.list(f"indexes/docs/populations/{live}/") if k.endswith(".fps.npz"))  # noqa: E731
    for key in npz():  # the build's catch-up cached them: start without
        state.delete(key)
    decoded = _decoded(monkeypatch)
    found = LiveDocs(state, "docs", live, SHARDS).fingerprints()
    assert all(fp in found for fp in fps) and "0" * 32 not in found
    assert len(decoded) == SHARDS  # read from each part's fingerprint column
    cached = npz()
    assert len(cached) == SHARDS  # and cached
    decoded.clear()
    again = LiveDocs(state, "docs", live, SHARDS).fingerprints()
    assert all(fp in again for fp in fps) and "0" * 32 not in again
    assert decoded == []  # every part's prefixes from the cache
    state.put(cached[0], b"not an npz")
    third = LiveDocs(state, "docs", live, SHARDS).fingerprints()
    assert all(fp in third for fp in fps)
    assert len(decoded) == 1  # the damaged cache's part read again
    assert state.get(cached[0]) != b"not an npz"  # and cached again

    # A damaged part is named in the error, whichever way it is read.
    home = next(k for k in keys if k.endswith(f"/{_home(first)}.parquet"))
    state.put(home, state.get(home)[:40])
    for read in (lambda d: d[first], lambda d: d.ids(), lambda d: list(d.fingerprints().__contains__(fp) for fp in fps)):
        with pytest.raises(StateError, match=re.escape(home)):
            read(LiveDocs(state, "docs", live, SHARDS))


def test_a_part_whose_document_rows_are_interleaved_is_grouped_from_its_rows(tmp_path: Path) -> None:
    """Within one part, a document's rows apart (another document's row between them, ordinals reversed): the
    column pass cannot take them as one run, so that part is grouped from its rows, in ordinal order."""
    ix = Log(tmp_path / "ix")
    live = ix.build()
    state = ix.state()
    keys = chunk_manifest_keys(state, "docs", live)
    key, a, b = next((k, a, b) for k in keys for rows in [chunk_manifest_part_rows(state.get(k), k)]
                     for a in sorted({r.doc_id for r in rows}) for b in sorted({r.doc_id for r in rows})
                     if a != b and sum(r.doc_id == a for r in rows) >= 2)
    rows = chunk_manifest_part_rows(state.get(key), key)
    mine = sorted((r for r in rows if r.doc_id == a), key=lambda r: r.ordinal)
    rest = [r for r in rows if r.doc_id != a]
    write_chunk_manifest_part(state, "docs", live, key.rsplit("/", 1)[-1].removesuffix(".parquet"),
                              [mine[-1]] + rest + mine[-2::-1])
    states = LiveDocs(state, "docs", live, SHARDS)
    assert states.routed
    assert states[a].fingerprints == tuple(r.fingerprint for r in mine)
    assert states[a].content_hash == mine[0].content_hash
    assert states[b].fingerprints == tuple(r.fingerprint for r in sorted(rest, key=lambda r: r.ordinal) if r.doc_id == b)


# -- state read in proportion to the change (issue 43) ----------------------------------------------------------


def _part_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The manifest parts whose bytes are read from the (folder) state store, by any path."""
    from reindex.adapters.stores.objects import LocalObjectStore

    reads: list[str] = []
    for name in ("get", "get_signed"):
        real = getattr(LocalObjectStore, name)

        def counted(self: Any, key: str, _real: Any = real) -> Any:
            if "/chunks/" in key:
                reads.append(key.rsplit("/", 1)[-1].removesuffix(".parquet"))
            return _real(self, key)

        monkeypatch.setattr(LocalObjectStore, name, counted)
    return reads


def test_a_manifest_digest_reads_only_the_parts_that_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reindex.books.layout import Books
    from reindex.books.parts import manifest_digest, part_digest

    ix = Log(tmp_path / "ix")
    live = ix.build()
    state = ix.state()
    keys = chunk_manifest_keys(state, "docs", live)
    by_reading = _digest_of_every_part(state, keys)
    reads = _part_reads(monkeypatch)
    assert manifest_digest(ix.state(), "docs", live) == by_reading and reads == []  # recorded when written
    # A part changed by someone else (a plain put: no digest recorded) is read, alone, and the digest moves.
    rows = chunk_manifest_part_rows(state.get(keys[1]), keys[1])
    state.put(keys[1], chunk_manifest_bytes(rows[:-1]))
    reads.clear()
    moved = manifest_digest(ix.state(), "docs", live)
    assert moved != by_reading and reads == [keys[1].rsplit("/", 1)[-1].removesuffix(".parquet")]
    assert moved == _digest_of_every_part(state, keys)
    reads.clear()
    assert manifest_digest(ix.state(), "docs", live) == moved and reads == []  # and recorded
    # A damaged record is a cache: every part read again, the same digest.
    state.put(Books(state, "docs").part_digests_key(live), b"{not json")
    reads.clear()
    assert manifest_digest(ix.state(), "docs", live) == moved and len(reads) == len(keys)
    assert part_digest(b"") != moved


def _digest_of_every_part(state: Any, keys: list[str]) -> str:
    from reindex.books.parts import digest_of_parts, part_digest

    return digest_of_parts((k, part_digest(state.get(k) or b"")) for k in keys)


def test_a_one_document_sync_reads_the_part_it_touches_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan decodes the edited document's part, the shard rewrites it: one read between them (the store keeps
    what it read by signature), none for the digests of parts that did not move, none of what was just written."""
    ix = Log(tmp_path / "ix")
    ix.build()
    ix.plan()  # sums each part once after the build (its cache)
    ix.upsert({DOCS[0].name: DOCS[0].read_text(encoding="utf-8") + "\nOne more line.\n"})
    reads = _part_reads(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with api.Index.open(ix.config) as handle:
        r = handle.sync(api.SyncPolicy(plans_dir=ix.plans))
    assert r.outcome == "applied-in-place" and r.replanned == 0
    assert reads == [_home(DOCS[0].name)], reads


def test_a_cursor_plan_counts_cross_document_reuse_only_in_proportion_to_the_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reindex.planner._change as change

    ix = Log(tmp_path / "ix")
    ix.build()
    twin = "note-05"
    ix.upsert({"a-new-note": _note(twin)})
    counted, _ = ix.plan()
    assert counted.body["work"]["cross_document"] == {"chunks": 1, "tokens": counted.body["work"]["cross_document"]["tokens"]}
    monkeypatch.setattr(change, "CROSS_LOOKUP_BYTES", 0)
    monkeypatch.setattr(change, "CROSS_LOOKUP_FACTOR", 0)  # every population is too big for this change now
    from reindex.adapters.stores.objects import LocalObjectStore

    npz: list[str] = []
    real = LocalObjectStore.get_signed

    def get_signed(self: Any, key: str) -> Any:
        if key.endswith(".fps.npz"):
            npz.append(key)
        return real(self, key)

    monkeypatch.setattr(LocalObjectStore, "get_signed", get_signed)
    skipped, _ = ix.plan()
    cross = skipped.body["work"]["cross_document"]
    assert (cross["chunks"], cross["counted"]) == (0, False) and "not counted" in cross["why"] and npz == []
    assert skipped.body["work"]["tokens_to_embed"] == counted.body["work"]["tokens_to_embed"]


def test_the_totals_after_a_sync_are_the_record_less_and_plus_the_parts_it_rewrote(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After syncs that rewrote parts, a plan takes every part's totals from one record, less the moved parts' totals
    before and plus theirs now, and reads no other part's summary; its figures are a full read's."""
    ix = Log(tmp_path / "ix")
    ix.build()
    ix.plan()
    monkeypatch.chdir(tmp_path)
    for n in range(2):  # each sync rewrites the edited document's part
        ix.upsert({DOCS[n].name: DOCS[n].read_text(encoding="utf-8") + f"\nEdit {n}.\n"})
        with api.Index.open(ix.config) as handle:
            assert handle.sync(api.SyncPolicy(plans_dir=ix.plans)).outcome == "applied-in-place"
    ix.upsert({DOCS[5].name: DOCS[5].read_text(encoding="utf-8") + "\nAnother edit.\n", "a-note": _note("note-03")})
    from reindex.adapters.stores.objects import LocalObjectStore

    summaries: list[str] = []
    real = LocalObjectStore.get_signed

    def get_signed(self: Any, key: str) -> Any:
        if "/summaries/shard-" in key and key.endswith(".json"):
            summaries.append(key)
        return real(self, key)

    monkeypatch.setattr(LocalObjectStore, "get_signed", get_signed)
    cursor, _ = ix.plan()
    assert summaries == []  # the record of every part's totals was made by the last sync's catch-up
    monkeypatch.undo()
    full, _ = ix.plan(verify=True)
    _same_figures(cursor, full)
