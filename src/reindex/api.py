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

Scripts written against earlier versions call ``api.make_plan(config)``, ``api.apply_plan(plan, config)``,
``api.cutover(plan, config)``, …: each is one line, the handle's method on a handle opened for that call (not part
of ``__all__``; new code holds the handle). Prefect deployments (``deploy``, ``serve``) live in
:mod:`reindex.orchestration`, the Prefect driver."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Where each name lives. Imported on first use (PEP 562): `reindex status` loads the handle and what status
# needs, not the planner, the cycle or pyarrow (a command imports only what it uses: DESIGN.md invariant 13).
_HOMES = {
    "reindex.errors": ("ApprovalError", "ConfigError", "CutoverError", "LockHeld", "PlanError", "ReindexError",
                       "RunnerError", "TerminalError", "TransientError"),
    "reindex.usecases.index": ("Index",),
    "reindex.usecases.cycle": ("CycleOutcome", "CycleResult", "SyncPolicy"),
    "reindex.planner": ("Plan",),
    "reindex.books.manifests": ("Population",),
    "reindex.usecases.apply": ("ApplyReport", "check_drift", "corpus_digest_of"),
    "reindex.usecases.lifecycle": ("CutoverReport", "GcAction", "IndexStatus", "PopulationStatus", "RollbackRecord"),
    "reindex.usecases.doctor": ("DoctorReport",),
    "reindex.decisions.drift": ("Finding",),
    "reindex.usecases.query": ("Querier", "QueryResult", "parse_filters"),
    "reindex.usecases.serve": ("ServingReport",),
    "reindex.context.backends": ("DEFAULT_CONFIG", "make_embedder", "state_store", "vector_store_for"),
    "reindex.usecases.chunk": ("ChunkSummary", "chunk_path", "summarize_chunks"),
    "reindex.usecases.classify": ("Classification", "classify_change"),
    "reindex.usecases.configure": ("Validation", "init_config", "load_resolved", "validate_config"),
    "reindex.usecases.measure": ("measure", "measure_chains", "measure_units"),
    "reindex.usecases.plan": ("estimate", "show_plan", "approval_status", "approve_plan"),
    "reindex.usecases.runs": ("approve_and_resume", "reject_and_resume", "waiting_runs"),
    # thin wrappers kept for scripts (not in __all__)
    "reindex.adapters.embedders": ("vector_config_of",),
    "reindex.runners": ("ShardJob", "ShardRunner", "ThreadRunner"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

if TYPE_CHECKING:  # what a type checker and an IDE see
    from reindex.errors import (ApprovalError, ConfigError, CutoverError, LockHeld, PlanError, ReindexError,
                                RunnerError, TerminalError, TransientError)
    from reindex.books.manifests import Population
    from reindex.planner import Plan
    from reindex.usecases.apply import ApplyReport
    from reindex.usecases.chunk import ChunkSummary, chunk_path, summarize_chunks
    from reindex.usecases.classify import Classification, classify_change
    from reindex.usecases.configure import Validation, init_config, load_resolved, validate_config
    from reindex.decisions.drift import Finding
    from reindex.usecases.cycle import CycleOutcome, CycleResult, SyncPolicy
    from reindex.usecases.doctor import DoctorReport
    from reindex.usecases.index import Index
    from reindex.usecases.lifecycle import CutoverReport, GcAction, IndexStatus, PopulationStatus, RollbackRecord
    from reindex.usecases.measure import measure, measure_chains, measure_units
    from reindex.usecases.plan import estimate, show_plan
    from reindex.usecases.query import Querier, QueryResult, parse_filters
    from reindex.usecases.runs import approve_and_resume, reject_and_resume, waiting_runs
    from reindex.usecases.serve import ServingReport


# -- one-line wrappers for scripts of earlier versions: the handle's method on a handle opened for the call --------

def make_plan(config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).plan(**kwargs)``."""
    with _index(config_path) as ix: return ix.plan(**kwargs)  # noqa: E701


def apply_plan(plan_path: Any, config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).apply(plan_path, **kwargs)`` (conflicting runner options refused first)."""
    from reindex.usecases.apply import check_runner_options

    check_runner_options(kwargs.get("runner"), kwargs.get("task_runner"))
    with _index(config_path) as ix: return ix.apply(plan_path, **kwargs)  # noqa: E701


def cutover(plan_path: Any = None, config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).cutover(plan_path, **kwargs)``."""
    with _index(config_path) as ix: return ix.cutover(plan_path, **kwargs)  # noqa: E701


def rollback(config_path: Any = "reindex.yaml", *, to: str | None = None) -> Any:
    """``Index.open(config_path).rollback(to)``."""
    with _index(config_path) as ix: return ix.rollback(to)  # noqa: E701


def gc(config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).gc(**kwargs)``."""
    with _index(config_path) as ix: return ix.gc(**kwargs)  # noqa: E701


def status(config_path: Any = "reindex.yaml") -> Any:
    """``Index.open(config_path).status()``."""
    with _index(config_path) as ix: return ix.status()  # noqa: E701


def query(text: str, config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).query(text, **kwargs)``."""
    with _index(config_path) as ix: return ix.query(text, **kwargs)  # noqa: E701


def serving(config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).serving(**kwargs)``."""
    with _index(config_path) as ix: return ix.serving(**kwargs)  # noqa: E701


def calibrate(config_path: Any = "reindex.yaml", **kwargs: Any) -> Any:
    """``Index.open(config_path).calibrate(**kwargs)``."""
    with _index(config_path) as ix: return ix.calibrate(**kwargs)  # noqa: E701


def record_cursor(plan: Any, config_path: Any = "reindex.yaml") -> Any:
    """``Index.open(config_path).record_cursor(plan)``."""
    with _index(config_path) as ix: return ix.record_cursor(plan)  # noqa: E701


def _index(config_path: Any) -> Any:
    from reindex.usecases.index import Index

    return Index.open(config_path)


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'reindex.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once per process
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME_OF))


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
    "DoctorReport",
    "Finding",
    "Querier",
    "QueryResult",
    "ServingReport",
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
    "measure_units",
    "parse_filters",
    "waiting_runs",
    "approve_and_resume",
    "reject_and_resume",
]
