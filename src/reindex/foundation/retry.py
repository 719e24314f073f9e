"""Bounded retries with backoff: the one module that imports tenacity.

One retry layer per call, chosen on purpose: the vector-store and embedder calls of a shard are retried
here (``execution.retry_transient``), an S3 state call inside the S3 object store, nothing at the shard or
Prefect-task level (a shard retry would repeat every call of the shard, and nested layers multiplied
attempts to 90 for one embedding batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["RetriesExhausted", "call_with_retries"]

T = TypeVar("T")


class RetriesExhausted(Exception):
    """Every attempt failed with a retryable error; ``last`` is the final one."""

    def __init__(self, last: BaseException | None, attempts: int) -> None:
        super().__init__(f"{attempts} attempts failed: {last}")
        self.last, self.attempts = last, attempts


def call_with_retries(fn: Callable[[], T], *, attempts: int, retry_if: Callable[[BaseException], bool],
                      initial_s: float, max_s: float, full_jitter: bool = False, reraise: bool = True) -> T:
    """Call ``fn`` at most ``attempts`` times while it raises an error ``retry_if`` accepts, waiting an
    exponentially growing time (with jitter) between attempts. Other errors pass at once. When every
    attempt failed: re-raise the last error (``reraise``) or raise :class:`RetriesExhausted`. tenacity is
    imported here, on the first retried call (a command that retries nothing does not pay its import)."""
    from tenacity import (
        RetryError,
        Retrying,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential_jitter,
        wait_random_exponential,
    )

    wait = (wait_random_exponential(multiplier=initial_s, max=max_s) if full_jitter
            else wait_exponential_jitter(initial=initial_s, max=max_s))
    retrying = Retrying(retry=retry_if_exception(retry_if), stop=stop_after_attempt(attempts), wait=wait,
                        reraise=reraise)
    try:
        return retrying(fn)
    except RetryError as err:
        raise RetriesExhausted(err.last_attempt.exception(), attempts) from None
