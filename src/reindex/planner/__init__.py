"""Classify a change and compute its exact work (or a sampled projection); pure over its inputs.

Inputs: the proposed (resolved) config, the corpus, and a baseline — the live population (its
recorded config and chunk manifest), an explicit old config + old corpus, or nothing (initial build).
Output: a :class:`Plan`, an immutable JSON document with a hash over its contents.

Private modules by role: ``_baseline`` (baselines), ``_classify`` (kind, explanation, approval
policy), ``_work`` (per-document work, totals, pricing, what-if), ``_plan`` (the plan document and
its files), ``_request`` (``PlanRequest``, ``Repair``), ``_sampled`` (sampled projection), ``_change``
(``plan_change``), ``_repair`` (a repair plan's work), ``_reading`` (what a plan read, handed to its apply in the
same process), ``_live_docs`` (the live population's documents read
part by part, with each part's totals).
"""

from reindex.errors import PlanError
from reindex.planner._baseline import (
    attach_retained,
    Baseline,
    DocState,
    explicit_baseline,
    live_baseline,
    no_baseline,
)
from reindex.planner._change import plan_change
from reindex.planner._live_docs import DocsSummary, LiveDocs
from reindex.planner._classify import IN_PLACE_KINDS, KINDS, approval_counts, approval_needed, approval_of_plan, classify, explain_changes, forecast_refusal, queries_changed, truncation_refusal
from reindex.planner._numbers import KeyNumbers, forecast_line, key_numbers
from reindex.planner._plan import (
    PLAN_SCHEMA,
    Plan,
    PlanBaseline,
    PlanCorpus,
    PlanRepair,
    check_plan_index,
    config_in_force,
    hash_body,
    plan_filename,
    prune_plans,
    read_plan,
    seal,
    write_plan,
)
from reindex.planner._reading import READING_CAP_BYTES, PlanReading, touched_states
from reindex.planner._request import PlanRequest, Repair
from reindex.planner._sampled import SAMPLE_STRATA, SAMPLED_FIELDS, StratifiedDraw, draw_stratified
from reindex.planner._work import (
    DEFAULT_TOKENS_PER_MINUTE,
    LENGTH_EDGES,
    BuildRate,
    DocWork,
    Rates,
    build_rate_name,
    doc_work,
)

__all__ = [
    "attach_retained",
    "DEFAULT_TOKENS_PER_MINUTE",
    "IN_PLACE_KINDS",
    "KINDS",
    "KeyNumbers",
    "LENGTH_EDGES",
    "PLAN_SCHEMA",
    "SAMPLED_FIELDS",
    "StratifiedDraw",
    "draw_stratified",
    "SAMPLE_STRATA",
    "Baseline",
    "BuildRate",
    "DocState",
    "DocWork",
    "DocsSummary",
    "LiveDocs",
    "Plan",
    "PlanError",
    "PlanReading",
    "PlanRequest",
    "READING_CAP_BYTES",
    "Repair",
    "Rates",
    "approval_counts",
    "build_rate_name",
    "approval_needed",
    "approval_of_plan",
    "classify",
    "forecast_line",
    "forecast_refusal",
    "truncation_refusal",
    "queries_changed",
    "doc_work",
    "explain_changes",
    "explicit_baseline",
    "hash_body",
    "key_numbers",
    "live_baseline",
    "no_baseline",
    "plan_change",
    "plan_filename",
    "prune_plans",
    "read_plan",
    "seal",
    "touched_states",
    "write_plan",
    "check_plan_index",
    "config_in_force",
    "PlanBaseline",
    "PlanCorpus",
    "PlanRepair",
]
