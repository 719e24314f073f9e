"""The stable Python surface of reindex: the use cases the CLI and the Prefect flows call.

Re-exports only; the code lives in :mod:`reindex.usecases`. The handle first::

    from reindex.api import Index

    with Index.open("reindex.yaml") as ix:        # config resolved once; pass state=, store=, embedder=, runner=
        result = ix.sync()                         # plan → apply in place / build → cutover → gc, one cycle
        plan, path = ix.plan()                     # or each step alone: plan, approve, apply, cutover, …

The same use cases as functions over a config path (thin wrappers kept for scripts)::

    from reindex import api

    plan, path = api.make_plan("reindex.yaml")             # classify and price the change
    api.approve_plan(path, by="me")                         # if the plan needs approval
    report = api.apply_plan(path, "reindex.yaml")           # in-process unless a Prefect API is configured
    result = api.cutover(path, "reindex.yaml")              # evaluate, gate, swap the alias

Prefect deployments (``deploy``, ``serve``) live in :mod:`reindex.orchestration`, the Prefect driver."""

from __future__ import annotations

from reindex.errors import (
    ApprovalError,
    ConfigError,
    CutoverError,
    LockHeld,
    PlanError,
    ReindexError,
    RunnerError,
    TerminalError,
    TransientError,
)
from reindex.embedders import vector_config_of
from reindex.planner import Plan
from reindex.runners import ShardJob, ShardRunner, ThreadRunner
from reindex.usecases.apply import (
    ApplyReport,
    apply_plan,
    check_drift,
    corpus_digest_of,
    record_cursor,
)
from reindex.usecases.backends import (
    DEFAULT_CONFIG,
    make_embedder,
    shard_runner,
    state_store,
    vector_store_for,
)
from reindex.usecases.chunk import ChunkSummary, chunk_path, summarize_chunks
from reindex.usecases.classify import Classification, classify_change
from reindex.usecases.configure import (
    Validation,
    chunk_cap,
    config_warnings,
    init_config,
    load_resolved,
    model_input_limit,
    validate_config,
)
from reindex.usecases.lifecycle import (
    CutoverReport,
    GcAction,
    IndexStatus,
    PopulationStatus,
    RollbackRecord,
    cutover,
    gc,
    parse_age,
    rollback,
    status,
)
from reindex.usecases.measure import measure, measure_chains
from reindex.usecases.plan import (
    approval_status,
    approve_plan,
    calibrate,
    check_plan_index,
    estimate,
    make_plan,
    rates_for,
    show_plan,
)
from reindex.usecases.cycle import CycleOutcome, CycleResult, SyncPolicy
from reindex.usecases.index import Index
from reindex.usecases.query import Querier, QueryResult, parse_filters, query
from reindex.usecases.runs import approve_and_resume, reject_and_resume, waiting_runs

__all__ = [
    "Index",
    "CycleOutcome",
    "CycleResult",
    "SyncPolicy",
    "DEFAULT_CONFIG",
    "ApplyReport",
    "ApprovalError",
    "ChunkSummary",
    "Classification",
    "GcAction",
    "IndexStatus",
    "ConfigError",
    "CutoverError",
    "CutoverReport",
    "LockHeld",
    "Plan",
    "PlanError",
    "PopulationStatus",
    "Querier",
    "QueryResult",
    "ReindexError",
    "RollbackRecord",
    "RunnerError",
    "ShardJob",
    "ShardRunner",
    "TerminalError",
    "ThreadRunner",
    "TransientError",
    "Validation",
    "apply_plan",
    "approve_and_resume",
    "approval_status",
    "approve_plan",
    "calibrate",
    "check_drift",
    "check_plan_index",
    "chunk_cap",
    "chunk_path",
    "classify_change",
    "config_warnings",
    "corpus_digest_of",
    "cutover",
    "estimate",
    "gc",
    "init_config",
    "load_resolved",
    "make_embedder",
    "make_plan",
    "measure",
    "measure_chains",
    "model_input_limit",
    "parse_age",
    "parse_filters",
    "query",
    "rates_for",
    "record_cursor",
    "reject_and_resume",
    "rollback",
    "shard_runner",
    "show_plan",
    "state_store",
    "status",
    "summarize_chunks",
    "validate_config",
    "vector_config_of",
    "vector_store_for",
    "waiting_runs",
]
