"""What a plan read of the source, handed to its own apply in the same process (:class:`PlanReading`).

An in-place plan prices the documents it changes as it read them. Its apply must write exactly those: a drift
check made later, in another process, reads them again and refuses the plan when one of them moved (the plan's
scope, :func:`reindex.domain.identity.touched_digest`). Within one process — ``reindex sync``, the live mode,
one cycle under one lock — nothing needs reading twice: the plan keeps the documents it changes as it read them
(up to :data:`READING_CAP_BYTES`) and the cursor its read ended at, and hands both to its apply. The shards then
write the very bytes the plan priced, and whatever moved in the source since is found from that cursor by the
apply's catch-up, or by the next cycle: a source that changes every second no longer refuses the plan made a
second ago (docs/design-notes.md, "What a plan's corpus digest means").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from reindex.adapters.sources.base import Document
from reindex.books.cursors import Tracking
from reindex.domain.identity import TOUCHED_REMOVED, TOUCHED_UNMOVED, touched_digest

__all__ = ["READING_CAP_BYTES", "PlanReading", "touched_states"]

#: At most this many bytes of documents are kept by a plan's reading or a drift check for the shards: an in-place
#: sync of more is read again by its drift check (a reading over the cap cannot be handed over).
READING_CAP_BYTES = 64 * 2**20


@dataclass
class PlanReading:
    """Filled by :func:`~reindex.planner.plan_change` when the request carries one: the digest of the corpus as
    read, the documents the plan changes as read (source order, while they fit :data:`READING_CAP_BYTES`), and
    the source's cursor after the read (a cursor read), or taken just before it (a full read of a source with a
    cursor; ``full``). Given to the apply of the same plan in the same process (``apply_plan(reading=…)``)."""

    corpus_digest: str = ""
    documents: dict[str, Document] = field(default_factory=dict)
    tracking: Tracking | None = None
    size: int = 0
    overflow: bool = False  # a document was dropped for the cap: the reading cannot vouch for the plan

    def keep(self, doc: Document) -> None:
        """Keep ``doc`` (a document the plan changes) unless the cap is passed."""
        if self.overflow:
            return
        self.size += doc.size
        if self.size > READING_CAP_BYTES:
            self.overflow = True
            self.documents.clear()
            return
        self.documents[doc.doc_id] = doc

    def vouches_for(self, body: Mapping) -> bool:
        """Whether this reading is the read of the plan ``body``: the same corpus digest, and exactly the documents
        it changes, with the hashes it priced (its ``inputs.corpus.touched`` digest)."""
        corpus = body["inputs"]["corpus"]
        touched = corpus.get("touched")
        if self.overflow or touched is None or corpus["digest"] != self.corpus_digest:
            return False
        w = body["work"]
        states = touched_states(w["affected_documents"], w["removed_documents"],
                                {d: doc.content_hash for d, doc in self.documents.items()})
        return touched_digest(states) == touched["digest"]


def touched_states(affected: Iterable[str], removed: Iterable[str], hashes: Mapping[str, str]) -> dict[str, str]:
    """doc id → what :func:`~reindex.domain.identity.touched_digest` records for it: the content hash of an
    affected document as ``hashes`` has it (absent: not read, so it cannot match), removed for a removed one."""
    states = {d: hashes.get(d, TOUCHED_UNMOVED) for d in affected}
    states.update((d, TOUCHED_REMOVED) for d in removed)
    return states
