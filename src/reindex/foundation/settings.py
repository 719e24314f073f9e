"""Environment defaults: the one place that reads ``REINDEX_*`` variables and decides whether a Prefect API
is configured. Operational only: nothing here changes what is built (DESIGN invariant 10)."""

from __future__ import annotations

import os
from pathlib import Path

from reindex.errors import ConfigError

__all__ = [
    "DEFAULT_SHARD_WORKERS",
    "EPHEMERAL_STARTUP_TIMEOUT_S",
    "OFFLINE_DEFAULTS",
    "apply_offline_defaults",
    "carry_chunks",
    "crash_at",
    "crash_once",
    "demo_dir",
    "embed_log",
    "index_lease_seconds",
    "pause_at",
    "model_cache_dir",
    "pool_start_timeout_s",
    "prefect_api_url",
    "shard_workers",
    "task_runner_spec",
    "temporary_server_failure",
]

DEFAULT_SHARD_WORKERS = 4

# Set before any model, tokenizer or Prefect import: nothing may download weights or phone home.
OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}
# Prefect's temporary API server (no PREFECT_API_URL) gets this long to start instead of Prefect's 20 s, which a
# loaded 2-core machine exceeds. Prefect reads its settings once, when it is imported: this default reaches it
# only from a module that sets it before its first `import prefect` (every reindex module that imports Prefect
# calls apply_offline_defaults first); a script that imported Prefect earlier keeps Prefect's own limit.
EPHEMERAL_STARTUP_TIMEOUT_S = 120


def apply_offline_defaults() -> None:
    """Set :data:`OFFLINE_DEFAULTS` and the temporary server's start-up limit where the user has not set them."""
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(EPHEMERAL_STARTUP_TIMEOUT_S))


def shard_workers() -> int:
    """``REINDEX_SHARD_WORKERS``: shards run at once by the in-process and Prefect thread runners (default 4)."""
    raw = os.environ.get("REINDEX_SHARD_WORKERS", "").strip()
    if not raw:
        return DEFAULT_SHARD_WORKERS
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"REINDEX_SHARD_WORKERS={raw!r}: expected a whole number ≥ 1")
    return n


DEFAULT_INDEX_LEASE_S = 300
MIN_INDEX_LEASE_S = 60  # Prefect's API refuses concurrency leases shorter than a minute


def index_lease_seconds() -> float:
    """``REINDEX_INDEX_LEASE_S``: lease of a flow run's hold on its index (Prefect global concurrency limit
    ``reindex-index-<index>``); the flow process renews it every ¾ of this while it runs, pauses included,
    and the server frees it this long after the process died (default 300, at least 60)."""
    raw = os.environ.get("REINDEX_INDEX_LEASE_S", "").strip()
    if not raw:
        return float(DEFAULT_INDEX_LEASE_S)
    try:
        v = float(raw)
    except ValueError:
        v = 0.0
    if v < MIN_INDEX_LEASE_S:
        raise ConfigError(f"REINDEX_INDEX_LEASE_S={raw!r}: expected seconds ≥ {MIN_INDEX_LEASE_S} (Prefect's minimum lease)")
    return v


DEFAULT_POOL_START_TIMEOUT_S = 600


def pool_start_timeout_s() -> float:
    """``REINDEX_POOL_START_TIMEOUT_S``: how long a shard flow run may wait for a work-pool worker to pick it
    up before the apply cancels it and reports its shards failed (default 600)."""
    raw = os.environ.get("REINDEX_POOL_START_TIMEOUT_S", "").strip()
    if not raw:
        return float(DEFAULT_POOL_START_TIMEOUT_S)
    try:
        v = float(raw)
    except ValueError:
        v = 0.0
    if v <= 0:
        raise ConfigError(f"REINDEX_POOL_START_TIMEOUT_S={raw!r}: expected seconds > 0")
    return v


def carry_chunks() -> bool:
    """``REINDEX_CARRY_CHUNKS``: ``0`` (or ``off``, ``false``, ``no``) plans without writing the chunks it cut for
    apply, and applies without reading a plan's carried chunks (every shard chunks its documents, as before
    :mod:`reindex.books.carried`); for benchmarks and comparisons. Anything else, or unset: carried."""
    return os.environ.get("REINDEX_CARRY_CHUNKS", "").strip().lower() not in ("0", "off", "false", "no")


def task_runner_spec() -> str | None:
    """``REINDEX_TASK_RUNNER``: the Prefect task runner for apply (threads | dask | …), or None."""
    return os.environ.get("REINDEX_TASK_RUNNER") or None


def crash_at() -> str | None:
    """``REINDEX_CRASH_AT``: test hook naming a crash point (``name[:n]``)."""
    return os.environ.get("REINDEX_CRASH_AT") or None


def pause_at() -> str | None:
    """``REINDEX_PAUSE_AT``: test hook naming a crash point (``name[:n]``) where the process stops itself
    (SIGSTOP) instead of dying, holding its locks, so a test can look at a running apply from outside."""
    return os.environ.get("REINDEX_PAUSE_AT") or None


def crash_once() -> str | None:
    """``REINDEX_CRASH_ONCE``: test hook, a file path; with REINDEX_CRASH_AT only the one process that
    creates this file crashes (once across all the processes of a run, e.g. one of several workers)."""
    return os.environ.get("REINDEX_CRASH_ONCE") or None


def embed_log() -> str | None:
    """``REINDEX_EMBED_LOG``: file the hash embedder appends each embedded text's digest to."""
    return os.environ.get("REINDEX_EMBED_LOG") or None


def model_cache_dir() -> Path:
    """``REINDEX_CACHE_DIR``: where derived model files (ONNX exports) are kept, in content-addressed folders
    (default ``$XDG_CACHE_HOME/reindex``, else ``~/.cache/reindex``)."""
    raw = os.environ.get("REINDEX_CACHE_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "reindex"


def demo_dir() -> Path:
    """``REINDEX_DEMO_DIR``: where ``make demo`` works (default ``.demo``)."""
    return Path(os.environ.get("REINDEX_DEMO_DIR", ".demo")).resolve()


def _profiles_file() -> Path:
    if os.environ.get("PREFECT_PROFILES_PATH"):
        return Path(os.environ["PREFECT_PROFILES_PATH"]).expanduser()
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    return home / "profiles.toml"


def prefect_api_url() -> str | None:
    """The Prefect API this process would talk to: ``PREFECT_API_URL``, else the active Prefect profile's
    ``PREFECT_API_URL`` (read from the profiles file without importing Prefect), else None."""
    url = os.environ.get("PREFECT_API_URL", "").strip()
    if url:
        return url
    path = _profiles_file()
    try:
        import tomllib

        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = os.environ.get("PREFECT_PROFILE") or data.get("active")
    profile = (data.get("profiles") or {}).get(name or "", {})
    value = profile.get("PREFECT_API_URL") if isinstance(profile, dict) else None
    return str(value).strip() or None if value else None


def temporary_server_failure(err: BaseException, limit_s: float | None = None) -> str | None:
    """One line for Prefect's "Timed out while attempting to connect to ephemeral Prefect API server" (the
    temporary server Prefect starts when no API is configured, slow on a busy machine): the cause and the two
    ways out, without the server output Prefect appends. None for any other error. ``limit_s``: the start-up
    limit Prefect applied (its setting, which the caller that owns Prefect reads); else the environment's."""
    if not isinstance(err, RuntimeError) or "ephemeral Prefect API server" not in str(err):
        return None
    limit = (f"{limit_s:g}" if limit_s is not None
             else os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "20"))
    return (f"Prefect's temporary API server (started because no PREFECT_API_URL is set) did not answer within "
            f"{limit} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS; a busy machine starts it slowly): start "
            "a Prefect server (`prefect server start`) and set PREFECT_API_URL to it, or run without Prefect "
            "(`reindex apply --no-prefect PLAN`; from Python, runner=api.ThreadRunner())")
