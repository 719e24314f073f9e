"""Change kinds and population states as types: values unchanged on disk, the questions the code asks as
properties, and a population life cycle that refuses illegal moves."""

from __future__ import annotations

import json

import pytest

from reindex.domain.kinds import TRANSITIONS, ChangeKind, IllegalTransition, PopulationState, check_transition
from reindex.errors import StateError
from reindex.books.manifests import Population, read_population, write_population
from reindex.adapters.stores.objects import open_object_store

K, S = ChangeKind, PopulationState


def test_values_are_the_strings_on_disk() -> None:
    assert [k.value for k in K] == ["none", "initial", "document-scoped", "payload-only", "pipeline-scoped/text",
                                    "pipeline-scoped/vector"]
    assert [s.value for s in S] == ["building", "ready", "live", "retired", "deleting"]
    # a member is its value: equality, JSON and f-strings write the same bytes as the strings did
    assert K.DOCUMENT == "document-scoped" and json.dumps({"kind": K.TEXT}) == '{"kind": "pipeline-scoped/text"}'
    assert f"{K.VECTOR}" == "pipeline-scoped/vector" and f"{S.LIVE}" == "live"


@pytest.mark.parametrize("kind, in_place, builds, pipeline, mode", [
    (K.NONE, False, False, False, "in-place"),
    (K.INITIAL, False, True, False, "initial"),
    (K.DOCUMENT, True, False, False, "in-place"),
    (K.PAYLOAD, True, False, False, "in-place"),
    (K.TEXT, False, True, True, "shadow"),
    (K.VECTOR, False, True, True, "shadow"),
])
def test_kind_properties(kind: ChangeKind, in_place: bool, builds: bool, pipeline: bool, mode: str) -> None:
    assert kind.in_place is in_place
    assert kind.builds_population is builds and kind.needs_cutover is builds
    assert kind.pipeline_scoped is pipeline
    assert kind.footprint_mode == mode
    assert kind.does_work is (kind is not K.NONE)


def test_unknown_values_are_one_clear_error() -> None:
    with pytest.raises(StateError, match="unknown change kind 'rebuild'"):
        K.of("rebuild")
    with pytest.raises(StateError, match="unknown population state 'half'"):
        S.of("half")


def test_servable_states() -> None:
    assert {s for s in S if s.servable} == {S.READY, S.LIVE, S.RETIRED}


@pytest.mark.parametrize("old, new", [
    (None, S.BUILDING), (S.BUILDING, S.READY), (S.READY, S.LIVE), (S.LIVE, S.RETIRED), (S.RETIRED, S.LIVE),
    (S.RETIRED, S.DELETING), (S.READY, S.DELETING), (S.BUILDING, S.DELETING), (S.RETIRED, S.BUILDING),
    (S.LIVE, S.LIVE), (S.DELETING, S.DELETING),
])
def test_allowed_moves(old, new) -> None:
    assert check_transition("c", old, new) is new


@pytest.mark.parametrize("old, new", [
    (None, S.LIVE),  # a population is never served without being built
    (None, S.READY),
    (S.BUILDING, S.LIVE),  # a half-built population never goes live
    (S.BUILDING, S.RETIRED),
    (S.LIVE, S.DELETING),  # the population an alias points at is never deleted
    (S.LIVE, S.BUILDING),
    (S.DELETING, S.LIVE),  # deleting is terminal
    (S.DELETING, S.READY),
    (S.DELETING, S.BUILDING),
])
def test_refused_moves(old, new) -> None:
    with pytest.raises(IllegalTransition, match=f"cannot go from {old.value if old else 'no record'} to {new.value}"):
        check_transition("c", old, new)


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == {None, *S}
    assert TRANSITIONS[S.DELETING] == frozenset()


def test_write_population_enforces_the_life_cycle(tmp_path) -> None:
    state = open_object_store(str(tmp_path / "state"))

    def rec(s: PopulationState) -> Population:
        return Population("docs", "docs__abc", {}, {}, s, 1.0, 2.0)

    with pytest.raises(IllegalTransition):
        write_population(state, rec(S.LIVE))  # no record yet: only building
    write_population(state, rec(S.BUILDING))
    write_population(state, rec(S.READY))
    write_population(state, rec(S.LIVE))
    with pytest.raises(IllegalTransition, match="from live to deleting"):
        write_population(state, rec(S.DELETING))
    assert read_population(state, "docs", "docs__abc").state is S.LIVE  # the refused write changed nothing
    on_disk = json.loads((tmp_path / "state/indexes/docs/populations/docs__abc/population.json").read_text())
    assert on_disk["state"] == "live"
