"""A repair plan (``reindex doctor --repair``): the documents whose points are written again, priced from the live
population's chunk manifest (nothing is read or cut to price them), and the unlisted points to delete."""

from __future__ import annotations

from typing import Any

from reindex.domain.kinds import ChangeKind
from reindex.errors import PlanError
from reindex.domain.identity import Identity
from reindex.planner._baseline import Baseline
from reindex.planner._request import Repair
from reindex.planner._work import Totals

__all__ = ["repair_kind", "repair_section"]


def repair_kind(repair: Repair, baseline: Baseline, ident: Identity, kind: ChangeKind, t: Totals) -> ChangeKind:
    """The kind of a repair plan, with its work added to ``t``: document-scoped when anything is to be fixed,
    ``none`` otherwise. Refused for anything but the live population's own pipeline, and when the source changed
    as well (that change is a sync of its own; a repair plan does one thing)."""
    if baseline.kind != "live" or baseline.identity is None or baseline.identity.pipeline_id != ident.pipeline_id:
        raise PlanError("a repair is planned against the live population under its own pipeline; the index has no "
                        "live population, or the config names another pipeline")
    if kind is not ChangeKind.NONE:
        changed = len(t.affected) + len(t.removed)
        raise PlanError(f"the source changed since the live population was last synced ({changed:,} document(s), a "
                        f"{kind} change): apply that first (`reindex sync`, or `reindex plan` and `reindex apply`), then "
                        "run `reindex doctor --repair` again")
    docs = sorted(d for d in repair.documents if d in baseline.docs)
    for doc_id in docs:
        old = baseline.docs[doc_id]
        distinct = dict(zip(old.fingerprints, old.tokens))  # a text repeated in the document is embedded once
        tokens = sum(distinct.values())
        t.chunks_to_embed += len(distinct)
        t.tokens_to_embed += tokens
        t.chunks_reused -= len(old.fingerprints)
        t.embed_by_status["unchanged"] += tokens
    t.affected = docs
    return ChangeKind.DOCUMENT if docs or repair.delete_points else ChangeKind.NONE


def repair_section(repair: Repair, documents: list[str]) -> tuple[dict[str, Any], list[str]]:
    """The plan's ``repair`` section (what apply does besides syncing the documents) and its explanation lines."""
    found = ", ".join(f"{kind} {n:,}" for kind, n in repair.findings) or "nothing"
    lines = [(f"repair found by `reindex doctor` ({found}): {len(documents):,} document(s) written again (every chunk "
              f"embedded afresh), {len(repair.delete_points):,} point(s) the chunk manifest does not list deleted")]
    section = {"found_by": "reindex doctor", "documents": documents, "delete_points": sorted(repair.delete_points),
               "findings": [{"kind": k, "count": n} for k, n in repair.findings]}
    return section, lines
