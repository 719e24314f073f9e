"""Free-space guards of the commands that write an embedded store (apply, cutover, rollback, gc; ``reindex sync``
runs them): one formula, checked before the command starts, so that a disk too full for it is one line and
an exit code, never a process killed by SIGBUS half way with its lock held.

What a command adds to the store's file system: its records (:data:`RECORDS_BYTES`); what it builds (apply:
the plan's peak footprint less the old population, plus what the backend's disk guard says a build adds — the
edge engine's preallocated files, and in place its delta generation); and the first loads of the populations it
opens, as the backend's guard counts them (on a memory file system the edge engine's preallocated files are
allocated when they are mapped; 0 on a disk file system). The guards are declared with each backend's registry
entry (:class:`reindex.adapters.stores.opening.DiskGuard`); the store checks again, exactly, before each load and
write; this refuses before any work is done. A Qdrant server's disk is not checked.
"""

from __future__ import annotations

from reindex.domain.config import PipelineConfig
from reindex.errors import StateError
from reindex.books.manifests import read_live_record
from reindex.planner import Plan
from reindex.context import backends

__all__ = ["RECORDS_BYTES", "check_free_disk", "cutover_room_warning", "need_for_cutover", "need_for_plan",
           "need_for_rollback", "require_free_disk", "require_free_for_cutover", "require_free_for_gc",
           "require_free_for_rollback"]

# State records, reports and the lock a command writes (each a few KiB), with room to spare.
RECORDS_BYTES = 2**20


def _folder(cfg: PipelineConfig) -> str | None:
    """The store's local folder when its backend keeps one (its capabilities say ``local_disk``), else None."""
    b = backends.store_backend(cfg)
    return b.folder if b.capabilities.local_disk else None


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def require_free_disk(cfg: PipelineConfig, need: int, what: str, why: str, command: str) -> None:
    """Refuse (one line naming the folder, the bytes needed and free) unless the embedded store's file system
    has ``need`` bytes free for ``what``."""
    folder = _folder(cfg)
    if folder is None:
        return
    free = backends.free_disk_bytes(folder)
    if need > free:
        raise StateError(f"not enough free disk for {what}: it adds about {_mib(need)} to the store in {folder} "
                         f"({why}) but {_mib(free)} is free there; free some space (or move store.path) and run "
                         f"`{command}` again")


def _loads(cfg: PipelineConfig, *collections: str | None) -> int:
    """What first loads of ``collections`` allocate on the store's file system (tmpfs; 0 on disk file systems)."""
    b = backends.store_backend(cfg)
    if b.disk is None or b.folder is None:
        return 0
    return b.disk.first_loads(b.folder, [c for c in collections if c])


def need_for_plan(plan: Plan, cfg: PipelineConfig) -> int:
    """What apply adds: the plan's peak footprint less the old population (plus the edge engine's preallocated
    files; in place on edge plus the files the delta generation copies, and on tmpfs fills when it loads it: the
    backend's :class:`~reindex.adapters.stores.opening.DiskGuard`). A resumed apply is checked for the whole footprint again
    (what it already wrote is not subtracted), so it may ask for more than it needs."""
    footprint = plan.footprint
    b = backends.store_backend(cfg)
    folder = _folder(cfg)
    if folder is None or not footprint:
        return 0
    need = int(footprint["peak"]["disk_bytes"]) - int(footprint["old"]["disk_bytes"])
    if b.disk is not None:
        in_place = plan.baseline.collection if plan.kind.in_place else None
        need += b.disk.build_overhead(folder, in_place)
    return need


def check_free_disk(plan: Plan, cfg: PipelineConfig) -> None:
    """Apply's guard (:func:`need_for_plan`)."""
    require_free_disk(cfg, need_for_plan(plan, cfg), f"plan {plan.plan_hash[:12]}", "its peak footprint",
                      "reindex apply")


def cutover_room_warning(plan: Plan, cfg: PipelineConfig) -> str | None:
    """Why the cutover of the population ``plan`` builds will not fit once it is built (None when it will, or the
    plan builds nothing, or the store's disk is not checked): the cutover's first loads (the new population, as the
    backend's guard estimates a fresh one, and the live one as its files stand) against what will be free after the
    apply (free now less :func:`need_for_plan`). Apply and the plan say it before the build, not after."""
    b = backends.store_backend(cfg)
    folder = _folder(cfg)
    if folder is None or not plan.kind.needs_cutover or b.disk is None or b.disk.new_population_load is None:
        return None
    live = plan.baseline.collection
    need = RECORDS_BYTES + b.disk.new_population_load(folder) + _loads(cfg, live)
    left = backends.free_disk_bytes(folder) - need_for_plan(plan, cfg)
    if need <= left:
        return None
    return (f"the cutover of this plan will not fit in {folder}: its first load of the new population"
            + (" and the live one" if live else "") + f" needs about {_mib(need)}, and after the build about "
            f"{_mib(max(left, 0))} will be free there; free some space (or move store.path) before `reindex cutover`")


def need_for_cutover(cfg: PipelineConfig, shadow: str, live: str | None) -> int:
    """What a cutover adds: its records, and the first loads of the shadow and the live population (the
    catch-up writes into the shadow, the comparison reads both)."""
    return RECORDS_BYTES + _loads(cfg, shadow, live)


def require_free_for_cutover(cfg: PipelineConfig, shadow: str, live: str | None) -> None:
    """Cutover's guard (:func:`need_for_cutover`)."""
    require_free_disk(cfg, need_for_cutover(cfg, shadow, live), f"the cutover to {shadow}",
                      "its records, and loading both populations", "reindex cutover")


def _rollback_target(state, index: str, to: str | None) -> tuple[str | None, str | None]:
    live = read_live_record(state, index) or {}
    return to or live.get("previous"), live.get("collection")


def need_for_rollback(cfg: PipelineConfig, state, to: str | None) -> int:
    """What a rollback adds: its records, and the first loads of the population it goes back to and the live one."""
    return RECORDS_BYTES + _loads(cfg, *_rollback_target(state, cfg.index, to))


def require_free_for_rollback(cfg: PipelineConfig, state, to: str | None) -> None:
    """Rollback's guard (:func:`need_for_rollback`); none when there is nothing to roll back to (that error is
    the one to see)."""
    target, _live = _rollback_target(state, cfg.index, to)
    if target:
        require_free_disk(cfg, need_for_rollback(cfg, state, to), f"the rollback to {target}",
                          "its records, and loading the population it serves again", "reindex rollback")


def require_free_for_gc(cfg: PipelineConfig) -> None:
    """gc's guard: the records it writes before it deletes (it frees space, but marks each population first)."""
    require_free_disk(cfg, RECORDS_BYTES, "gc", "the records it writes before it deletes anything", "reindex gc")
