"""The Python face of reindex: the :class:`Index` handle, its result types and its errors.

::

    from reindex.api import Index

    with Index.open("reindex.yaml") as ix:        # config resolved once; pass state=, store=, embedder=, runner=
        result = ix.sync()                         # plan → apply in place / build → cutover → gc, one cycle
        plan, path = ix.plan()                     # or each step alone: plan, approve, apply, cutover, …
        hits = ix.query("how are modules found?")  # embedded with the served population's own model

Readers that ask many questions hold a :class:`Querier` (or the LangChain / LlamaIndex retrievers in
:mod:`reindex.retrievers`). Commands that need no index (a config to write or check, a plan file to show, a
histogram to price, a fixture to classify, revision pairs to measure) are functions in ``__all__``.

The use cases behind the handle stay importable from here as thin wrappers over a config path, for scripts
written against earlier versions (``api.make_plan``, ``api.apply_plan``, ``api.cutover``, …); they are not part
of ``__all__`` and new code uses the handle. Prefect deployments (``deploy``, ``serve``) live in
:mod:`reindex.orchestration`, the Prefect driver."""

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
from reindex.usecases.index import Index
from reindex.usecases.cycle import CycleOutcome, CycleResult, SyncPolicy
from reindex.planner import Plan
from reindex.manifests import Population
from reindex.usecases.apply import ApplyReport
from reindex.usecases.lifecycle import CutoverReport, GcAction, IndexStatus, PopulationStatus, RollbackRecord
from reindex.usecases.query import Querier, QueryResult, parse_filters
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.chunk import ChunkSummary, chunk_path, summarize_chunks
from reindex.usecases.classify import Classification, classify_change
from reindex.usecases.configure import Validation, init_config, load_resolved, validate_config
from reindex.usecases.measure import measure, measure_chains
from reindex.usecases.plan import estimate, show_plan
from reindex.usecases.runs import approve_and_resume, reject_and_resume, waiting_runs

# Thin wrappers kept for scripts (not in __all__): each is what an Index method calls.
from reindex.embedders import vector_config_of  # noqa: F401
from reindex.runners import ShardJob, ShardRunner, ThreadRunner  # noqa: F401
from reindex.usecases.apply import apply_plan, check_drift, corpus_digest_of  # noqa: F401
from reindex.usecases.backends import make_embedder, state_store, vector_store_for  # noqa: F401
from reindex.usecases.lifecycle import cutover, gc, rollback, status  # noqa: F401
from reindex.usecases.plan import approval_status, approve_plan, calibrate, make_plan  # noqa: F401
from reindex.usecases.query import query  # noqa: F401

__all__ = [
    # the handle, its results and its errors
    "Index",
    "SyncPolicy",
    "CycleOutcome",
    "CycleResult",
    "Plan",
    "Population",
    "ApplyReport",
    "CutoverReport",
    "RollbackRecord",
    "GcAction",
    "IndexStatus",
    "PopulationStatus",
    "Querier",
    "QueryResult",
    "ReindexError",
    "ConfigError",
    "PlanError",
    "ApprovalError",
    "LockHeld",
    "CutoverError",
    "RunnerError",
    "TransientError",
    "TerminalError",
    # commands that need no index
    "DEFAULT_CONFIG",
    "init_config",
    "validate_config",
    "Validation",
    "load_resolved",
    "show_plan",
    "estimate",
    "classify_change",
    "Classification",
    "chunk_path",
    "summarize_chunks",
    "ChunkSummary",
    "measure",
    "measure_chains",
    "parse_filters",
    "waiting_runs",
    "approve_and_resume",
    "reject_and_resume",
]
