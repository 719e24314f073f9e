"""The inputs of a plan (:class:`PlanRequest`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from reindex import cost as costmod
from reindex.domain.config import PipelineConfig
from reindex.planner._baseline import Baseline
from reindex.planner._work import Rates

__all__ = ["PlanRequest", "Repair"]


@dataclass(frozen=True, slots=True)
class Repair:
    """What ``reindex doctor --repair`` asks a plan to fix in the live population, in place: ``documents`` whose
    points are written again (every chunk embedded afresh: a missing point, another model's vector or an edited
    payload is not reused), ``delete_points``: point ids the chunk manifest does not list. ``findings``: the kinds
    and counts the doctor found (for the plan's explanation)."""

    documents: frozenset[str] = frozenset()
    delete_points: frozenset[str] = frozenset()
    findings: tuple[tuple[str, int], ...] = ()


@dataclass
class PlanRequest:
    """Everything a plan is computed from."""

    config: PipelineConfig  # resolved
    config_path: str
    baseline: Baseline
    rates: Rates
    sample: int | None = None
    seed: int = 0
    cross_document: bool = True
    tail_tokens: int = costmod.TAIL_TOKENS
    corpus_uri: str | None = None  # default: config.source.uri
    progress: Callable[[str, int, int | None], None] | None = None
    # Tokens the embedding model reads per input (vector.max_tokens, else the model's own), None if unknown:
    # the plan counts the chunks longer than this, which the model truncates.
    model_limit: int | None = None
    # The embedding model's own token counter (texts → tokens, without special tokens) when the chunker counts in
    # other units (whitespace words, characters, another tokenizer): the model limit is checked in the model's tokens.
    # None: the chunker's tokenizer is the model's, its counts are the model's.
    model_tokens: Callable[[list[str]], list[int]] | None = None
    model_tokenizer: str | None = None  # the name of what counts model_limit's tokens (for the plan)
    # Read the whole source and compare content hashes even where a cursor would find the changes
    # (``reindex sync --verify``): metadata can lie.
    verify: bool = False
    # A pipeline-scoped change planned beside document changes: the summary of the in-place part (the same
    # document changes applied now to the live population under its own config; see usecases.plan).
    in_place_part: dict[str, Any] | None = None
    # The forecast of a pipeline-scoped change (``plan --forecast N``): what it buys, measured on a sample of both
    # sides (see reindex.decisions.forecast); None when none was asked for or there is nothing to compare.
    forecast: dict[str, Any] | None = None
    # A repair of the live population found by ``reindex doctor`` (see Repair): the plan is document-scoped, in
    # place, and does nothing else (a source that changed as well is refused: sync first).
    repair: Repair | None = None
    # The state store the plan's exact chunks are written to for apply (reindex.books.carried: its shards read them
    # instead of chunking again); None: nothing is carried (what-if plans, classify, tests of the planner).
    carry_to: Any = None
    # Filled with what the plan read (reindex.planner._reading.PlanReading), for its apply in this process; None:
    # nothing is kept.
    reading: Any = None
