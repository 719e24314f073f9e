"""The critical checks, each with a test that fails when the check is removed or loosened: the gate's
lower bound, the overlap rule, config and live-population drift, in-place deletion of removed documents,
and the query that verifies an alias swap."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers_index import Workspace
from reindex.decisions.cutover import CutoverError
from reindex.decisions.gate import gate
from reindex.errors import PlanError
from reindex.books.manifests import Population, read_population, write_population

POLICY = SimpleNamespace(require_exact_count=True, min_recall_delta=-0.02, min_overlap=0.5)


def _rules(evaluation: dict | None, *, points: int = 10, planned: int = 10, failures: int = 0) -> dict[str, bool]:
    return {r.name: r.passed for r in gate(POLICY, evaluation, shadow_points=points, planned_chunks=planned,
                                           failures=failures, k=10)}


def test_the_gate_uses_the_lower_bound_of_the_recall_difference() -> None:
    # mean and upper bound above the threshold, lower bound below it: the gate must fail
    mixed = {"aggregate": {"recall_at_10_diff": {"mean": 0.05, "low": -0.05, "high": 0.15}}}
    assert _rules(mixed)["recall@10"] is False
    at_bound = {"aggregate": {"recall_at_10_diff": {"mean": 0.05, "low": -0.02, "high": 0.15}}}
    assert _rules(at_bound)["recall@10"] is True


def test_without_labels_the_overlap_rule_decides() -> None:
    assert _rules({"aggregate": {"overlap_at_10": 0.3}})["overlap@10"] is False
    assert _rules({"aggregate": {"overlap_at_10": 0.5}})["overlap@10"] is True


def test_point_count_and_failures_rules() -> None:
    assert _rules(None, points=9, planned=10)["point-count"] is False
    assert _rules(None, failures=1)["no-failed-shards"] is False
    assert all(_rules(None).values())


def test_a_plan_whose_config_changed_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    _, path = ws.plan()
    ws.write_config(140)  # the text half changed after planning
    with pytest.raises(PlanError, match="the config changed since the plan"):
        ws.apply(path)


def test_a_plan_whose_live_population_changed_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    docs = sorted(p.name for p in ws.corpus.iterdir())
    (ws.corpus / docs[0]).write_bytes((ws.corpus / docs[0]).read_bytes() + b"\nFirst edit.\n")
    _, first = ws.plan()
    (ws.corpus / docs[0]).write_bytes((ws.corpus / docs[0]).read_bytes().replace(b"\nFirst edit.\n", b""))
    (ws.corpus / docs[1]).write_bytes((ws.corpus / docs[1]).read_bytes() + b"\nAnother edit.\n")
    _, second = ws.plan()
    assert ws.apply(second).status == "done"  # the live population moved on under the first plan
    (ws.corpus / docs[1]).write_bytes((ws.corpus / docs[1]).read_bytes().replace(b"\nAnother edit.\n", b""))
    (ws.corpus / docs[0]).write_bytes((ws.corpus / docs[0]).read_bytes() + b"\nFirst edit.\n")
    with pytest.raises(PlanError, match="changed since the plan"):
        ws.apply(first)


def test_an_in_place_sync_deletes_every_point_of_a_removed_document(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="approval: {max_removed_share: 0.5}")
    live = ws.build_live()
    gone = sorted(p.name for p in ws.corpus.iterdir())[3]
    with ws.store() as s:
        assert s.count(live, doc_id=gone) > 0
    (ws.corpus / gone).unlink()
    plan, path = ws.plan()
    assert plan.body["work"]["removed_documents"] == [gone]
    r = ws.apply(path)
    assert r.status == "done" and r.report["actual"]["deleted"] > 0
    with ws.store() as s:
        assert s.count(live, doc_id=gone) == 0
    assert gone not in {x.doc_id for x in ws.manifest_rows(live)}


def test_a_swap_whose_verifying_query_answers_from_elsewhere_is_moved_back(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    a = ws.build_live()
    _, path = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")
    b = ws.apply(path).collection
    state = ws.state()
    rec = read_population(state, "docs", b)
    wrong = {**rec.identity, "pipeline_id": "0" * 32}  # the record no longer matches what B's points say
    write_population(state, Population(rec.index, rec.collection, rec.config_json, wrong, rec.state,
                                             rec.created_at, rec.updated_at))
    with pytest.raises(CutoverError, match="did not answer from"):
        ws.cutover(path)
    assert ws.alias() == a


def test_a_plan_whose_live_population_moved_to_another_collection_is_refused(tmp_path: Path) -> None:
    """The alias moved (a cutover) after planning: refused for that reason, not only for a changed digest."""
    from helpers_index import switched_workspace

    sw = switched_workspace(tmp_path / "ws")
    ws, a, b = sw["ws"], sw["a"], sw["b"]
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    ws.write_config(150, extra=lenient)
    ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped" and plan.body["inputs"]["baseline"]["collection"] == a
    ws.write_config(120, extra=lenient)
    assert ws.cutover(sw["path"]).report["swap"]
    ws.write_config(150, extra=lenient)
    with pytest.raises(PlanError, match=f"the live population was {a} at planning but is now {b}"):
        ws.apply(path)


class _GapWatchingStore:
    """A real store that, each time points are deleted, records the points left behind (by document), so
    a test can check that every document's new points were already there when its stale ones went."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.left: list[tuple[set[str], dict[str, set[str]]]] = []

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def close(self) -> None:
        pass

    def delete_points(self, collection: str, ids: list[str]) -> None:
        gone = set(ids)
        docs: dict[str, set[str]] = {}
        for p in self._inner.scroll(collection):
            docs.setdefault(p.payload["doc_id"], set()).add(p.id)
        touched = {d for d, pids in docs.items() if pids & gone}
        self.left.append((touched, {d: docs[d] - gone for d in touched}))
        self._inner.delete_points(collection, ids)


def test_an_in_place_sync_adds_a_documents_new_points_before_deleting_its_stale_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Invariant 5 with a reader inside the gap: at the moment stale points are deleted, the document's
    new points are all already in the live population (a reader never sees a document missing chunks)."""
    from reindex.context import backends

    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    edited = ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped"
    watch = _GapWatchingStore(backends.vector_store_for(ws.cfg()))
    monkeypatch.setattr(backends, "vector_store_for", lambda cfg: watch)
    assert ws.apply(path).status == "done"
    assert watch.left, "the sync deleted stale points"
    final: dict[str, set[str]] = {}
    for p in watch._inner.scroll(live):
        final.setdefault(p.payload["doc_id"], set()).add(p.id)
    watch._inner.close()
    seen = set()
    for touched, left in watch.left:
        for doc in touched:
            seen.add(doc)
            missing = final.get(doc, set()) - left[doc]
            assert not missing, f"{doc}: {len(missing)} of its new points were not there yet when its stale ones were deleted"
    assert seen == set(edited)
