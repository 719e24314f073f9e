"""Error hierarchy. Every error the user can cause is a ReindexError with a one-line message
that says what happened and what to do."""

from __future__ import annotations

__all__ = ["ApprovalError", "ChunkerError", "ConfigError", "CutoverError", "DriftError", "EvaluationError", "LockHeld",
           "LockLost", "MeasureError", "ModelError", "PlanError", "ReindexError", "RunnerError", "SourceError",
           "StateError", "TerminalError", "TokenizerError", "TransientError", "VectorStoreError"]


class ReindexError(Exception):
    """Root of every expected failure; the CLI prints ``str(err)`` on one line and exits 1."""

    exit_code = 1


class TerminalError(ReindexError):
    """Retrying will not help (bad input, missing file, refused operation)."""


class TransientError(ReindexError):
    """May succeed if retried (connection reset, timeout, 429/5xx)."""


class ConfigError(TerminalError):
    """The pipeline config is missing, unreadable or invalid."""


class SourceError(TerminalError):
    """The corpus source cannot be opened at all (individual bad documents are not errors)."""


class ChunkerError(TerminalError):
    """A chunker spec is invalid, or a chunker cannot be built."""


class TokenizerError(TerminalError):
    """A tokenizer cannot be loaded."""


class ModelError(TerminalError):
    """An embedding model cannot be resolved or loaded (nothing is ever downloaded)."""


class StateError(TerminalError):
    """The state store (plans, manifests, locks) is inconsistent or unreachable."""


class PlanError(TerminalError):
    """A plan cannot be made, read or trusted."""


class DriftError(PlanError):
    """A plan's inputs moved since it was made (the config, the live population, or the documents it changes):
    planning again is the fix, which ``reindex sync`` and the live mode do themselves (a bounded number of
    times). ``problems``: what moved, one phrase each."""

    def __init__(self, message: str, *, problems: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)


class ApprovalError(TerminalError):
    """A plan needs an approval it does not have."""


class LockHeld(StateError):
    """Another command holds the index lock."""


class LockLost(TerminalError):
    """This process no longer holds the index lock it took; it must not write again."""


class VectorStoreError(StateError):
    """A vector-store operation failed and retrying will not help (missing collection, refused request)."""


class EvaluationError(TerminalError):
    """Queries cannot be read or run."""


class CutoverError(TerminalError):
    """A cutover, rollback or gc step is refused."""


class MeasureError(TerminalError):
    """Pairs, queries or a corpus cannot be read, or the options do not fit together."""


class RunnerError(TerminalError):
    """The chosen shard runner cannot run (e.g. the Prefect API is unreachable)."""
