"""The decisions of the domain as types: what kind a change is, and where a population is in its life cycle.

Both are ``StrEnum``s whose values are the strings every file on disk already holds (plans, population
records, run reports), so a member *is* its value: ``ChangeKind.DOCUMENT == "document-scoped"``, JSON
writes it unchanged, and reading a file back gives a member with :meth:`ChangeKind.of`.

The questions the code asks of a kind or a state are properties here, asked nowhere else:
``kind.in_place``, ``kind.builds_population``, ``kind.needs_cutover``, ``state.servable``. A new change
kind is one member here plus one branch of :func:`reindex.planner.classify`.

A population record's state moves only along :data:`TRANSITIONS`; :func:`check_transition` refuses any
other move (``reindex.books.manifests.write_population`` calls it on every write)."""

from __future__ import annotations

from enum import StrEnum

from reindex.errors import StateError

__all__ = ["ChangeKind", "HNSW_DEFAULTS", "HNSW_LIMITS", "IllegalTransition", "PopulationState", "QDRANT_HNSW",
           "TRANSITIONS", "check_transition", "hnsw_problem"]

#: Qdrant's own HNSW graph (its server and qdrant-edge alike): what a collection created without graph parameters
#: is built with, and searched with (its search ef defaults to the graph's ef_construct).
QDRANT_HNSW = {"m": 16, "ef_construct": 100}
#: The HNSW parameters of the populations reindex creates and searches when nothing says otherwise (``store.hnsw``):
#: the graph's ``m`` and ``ef_construct``, and ``ef``, the candidates a search considers. Measured against Qdrant's
#: graph searched as Qdrant searches it (m 16, ef_construct 100, ef = ef_construct; reindex's until issue 35) on
#: embedding-like vectors at 25 k, 100 k and 400 k points: recall@10 within 0.006 of it for 0.45-0.51× the build's
#: CPU (bench/RESULTS.md, "The index build at the engine's floor").
HNSW_DEFAULTS: dict[str, int] = {"m": 24, "ef_construct": 48, "ef": 100}
#: The values each parameter may take, (lowest, highest): below, a graph is not navigable (m under 4 links a point
#: to too few neighbours; Qdrant itself refuses ef_construct under 4) or a search sees too few candidates; above, a
#: build or a search costs more than any index here should pay (both grow about linearly with each).
HNSW_LIMITS = {"m": (4, 128), "ef_construct": (4, 4096), "ef": (4, 4096)}


def hnsw_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the HNSW parameter ``name`` (``m``, ``ef_construct`` or ``ef``), or None."""
    low, high = HNSW_LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, int):
        return f"got {value!r}; expected a whole number from {low} to {high}"
    if not low <= value <= high:
        return f"got {value}; expected a whole number from {low} to {high}"
    return None


def _member(cls: type[StrEnum], value: str, what: str):
    try:
        return cls(value)
    except ValueError:
        raise StateError(f"unknown {what} {value!r} (known: {', '.join(m.value for m in cls)})") from None


class ChangeKind(StrEnum):
    """What a change to an index is (DESIGN.md, "change kinds")."""

    NONE = "none"
    INITIAL = "initial"
    DOCUMENT = "document-scoped"
    PAYLOAD = "payload-only"
    TEXT = "pipeline-scoped/text"
    VECTOR = "pipeline-scoped/vector"

    @classmethod
    def of(cls, value: str) -> "ChangeKind":
        """The member for a kind read from a file; a clear error for anything else."""
        return _member(cls, value, "change kind")

    @property
    def in_place(self) -> bool:
        """Applied to the live population itself: no new collection, nothing to cut over."""
        return self in (ChangeKind.DOCUMENT, ChangeKind.PAYLOAD)

    @property
    def builds_population(self) -> bool:
        """Apply builds a new collection (a shadow, or the first population)."""
        return self in (ChangeKind.INITIAL, ChangeKind.TEXT, ChangeKind.VECTOR)

    @property
    def needs_cutover(self) -> bool:
        """Readers see the result only after a cutover moves the alias (same as ``builds_population``)."""
        return self.builds_population

    @property
    def pipeline_scoped(self) -> bool:
        """The pipeline config changed: every document is recut (text) or re-embedded (vector)."""
        return self in (ChangeKind.TEXT, ChangeKind.VECTOR)

    @property
    def does_work(self) -> bool:
        """Anything to apply at all."""
        return self is not ChangeKind.NONE

    @property
    def footprint_mode(self) -> str:
        """How the cost model prices the footprint: ``initial``, ``in-place`` (nothing new beside the live
        population: in-place kinds and ``none``) or ``shadow`` (two populations coexist until cutover)."""
        if self is ChangeKind.INITIAL:
            return "initial"
        return "shadow" if self.pipeline_scoped else "in-place"


class PopulationState(StrEnum):
    """Where a population (one collection of an index) is in its life cycle."""

    BUILDING = "building"  # apply is writing it; never served
    READY = "ready"  # built completely, not yet served
    LIVE = "live"  # the alias points at it
    RETIRED = "retired"  # was live; kept for rollback until gc
    DELETING = "deleting"  # gc started deleting it; it can never be served again

    @classmethod
    def of(cls, value: str) -> "PopulationState":
        """The member for a state read from a record; a clear error for anything else."""
        return _member(cls, value, "population state")

    @property
    def servable(self) -> bool:
        """Complete, so an alias may point at it (after verification)."""
        return self in (PopulationState.READY, PopulationState.LIVE, PopulationState.RETIRED)


_S = PopulationState
#: Allowed moves of a population record, from → to (``None``: no record yet). Rewriting a record in the same
#: state (a payload-layout update, a resumed build) is always allowed.
TRANSITIONS: dict[PopulationState | None, frozenset[PopulationState]] = {
    None: frozenset({_S.BUILDING}),
    # a build finishes, or is abandoned and deleted
    _S.BUILDING: frozenset({_S.READY, _S.DELETING}),
    # cut over; rebuilt for reuse by a later plan; deleted unserved; retired by a bookkeeping completion
    _S.READY: frozenset({_S.LIVE, _S.BUILDING, _S.DELETING, _S.RETIRED}),
    # an alias moved away from it
    _S.LIVE: frozenset({_S.RETIRED}),
    # rolled back to; rebuilt for reuse (a config went back to it); deleted by gc
    _S.RETIRED: frozenset({_S.LIVE, _S.BUILDING, _S.DELETING}),
    # terminal: only the deletion finishes
    _S.DELETING: frozenset(),
}


class IllegalTransition(StateError):
    """A population record was asked to move along an edge :data:`TRANSITIONS` does not have."""


def check_transition(collection: str, old: PopulationState | str | None, new: PopulationState | str) -> PopulationState:
    """Refuse a move of ``collection``'s record that the life cycle does not allow; returns the new state."""
    to = PopulationState.of(new)
    frm = PopulationState.of(old) if old is not None else None
    if frm == to or to in TRANSITIONS[frm]:
        return to
    allowed = ", ".join(sorted(s.value for s in TRANSITIONS[frm])) or "nothing (terminal)"
    raise IllegalTransition(
        f"population {collection} cannot go from {frm.value if frm else 'no record'} to {to.value} "
        f"(allowed from there: {allowed}); this is a bug or a concurrent writer: run `reindex status`")
