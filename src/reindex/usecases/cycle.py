"""One plan → approve → apply → cutover → gc cycle of an index, as one library call (``Index.sync``).

What a cycle does, under the index lock from before planning to after cutover:

* the config and every document match the live index → ``nothing-to-do``;
* a change the approval policy lets through (document-scoped or payload-only within its bounds; any kind the
  policy does not hold) → applied: in place (``applied-in-place``), or built, then cut over through the gate
  (``cut-over``, or ``gate-failed`` with the alias untouched);
* a change that needs approval → planned and left for ``reindex approve`` (``awaiting-approval``: the plan
  file is the answer). The next cycle whose inputs are the same (config, live population, corpus) finds that
  plan approved and carries it out; a rejected one is not planned again until the inputs change;
* another writer holds the index → ``skipped``, nothing touched (a cron tick beside a running apply is normal,
  not a failure).

A source that moves all the time does not stop a cycle: the plan hands what it read to its apply (the documents
it changes, as read, and the cursor its read ended at; :class:`~reindex.planner.PlanReading`), so the apply writes
what was priced and its catch-up (or the next cycle) takes what moved since. A plan whose inputs moved all the
same (the config, the live population, a build's corpus) is made again, at most ``SyncPolicy.replans`` times
(``CycleResult.replanned``), then the cycle stops with a :class:`~reindex.errors.DriftError` naming what moved.

Drivers (the CLI's ``reindex sync``, the scheduled ``reindex-sync`` flow, a cron job, a service) hold slots,
pause for approval and render; they never re-sequence these steps."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from reindex import reports
from reindex.planner.approvals import read_approval, read_rejection
from reindex.decisions.cutover import last_move_to
from reindex.domain.kinds import PopulationState
from reindex.errors import DriftError, LockHeld, ReindexError
from reindex.planner import Plan, PlanReading, read_plan, write_plan
from reindex.books.layout import Books
from reindex.usecases.apply import apply_plan, record_cursor
from reindex.context import Context
from reindex.usecases.lifecycle import cutover, gc
from reindex.usecases.plan import make_plan, plan_in_place_part

__all__ = ["CycleOutcome", "CycleResult", "SyncPolicy"]

_log = logging.getLogger("reindex")


class CycleOutcome(StrEnum):
    NOTHING_TO_DO = "nothing-to-do"
    APPLIED_IN_PLACE = "applied-in-place"
    AWAITING_APPROVAL = "awaiting-approval"
    CUT_OVER = "cut-over"
    GATE_FAILED = "gate-failed"
    REJECTED = "rejected"
    SKIPPED = "skipped"
    RETRYING = "retrying"  # the live mode only: a transient error ended the cycle; the watch tries again

    @property
    def exit_code(self) -> int:
        """``reindex sync``'s exit status: 0 done or nothing to do or skipped, 2 waits for approval, 3 the
        gate failed (as ``reindex cutover``)."""
        return {CycleOutcome.AWAITING_APPROVAL: 2, CycleOutcome.GATE_FAILED: 3, CycleOutcome.RETRYING: 1}.get(self, 0)


@dataclass(frozen=True, slots=True)
class SyncPolicy:
    """How a cycle carries out what it finds. ``plans_dir``: where plans are written and looked for (default:
    ``plans/`` beside the config); ``queries``/``k``/``force``: the cutover's (see ``reindex cutover``);
    ``gc``: delete retired populations past ``cutover.retention_days`` at the end (never a live one, never one
    inside the rollback window); ``apply_new_populations``: build and cut over a change that needs no approval
    (False: leave every population-building change for an explicit ``reindex apply``/``cutover``); ``verify``: read
    the whole source and compare content hashes instead of trusting the source's cursor (metadata can lie);
    ``replans``: how many times a plan whose inputs moved before its apply is made again before the cycle gives up."""

    plans_dir: str | Path | None = None
    queries: str | Path | None = None
    k: int | None = None
    force: bool = False
    gc: bool = True
    apply_new_populations: bool = True
    verify: bool = False  # read the whole source and compare content hashes (``reindex sync --verify``)
    replans: int = 3


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle did."""

    outcome: CycleOutcome
    index: str
    message: str
    plan_file: str | None = None
    plan_hash: str | None = None
    kind: str | None = None
    apply: dict | None = None
    cutover: dict | None = None
    gc: list = field(default_factory=list)
    in_place: dict | None = None  # the document changes of a pipeline change, applied in place first
    replanned: int = 0  # plans made again because their inputs moved before their apply
    error: str | None = None  # ``retrying``: the transient error that ended the cycle
    retry_in: float | None = None  # ``retrying``: seconds until the watch tries again

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code

    def as_dict(self) -> dict[str, Any]:
        out = {"outcome": self.outcome.value, "index": self.index, "message": self.message,
               "plan_file": self.plan_file, "plan_hash": self.plan_hash, "kind": self.kind, "apply": self.apply,
               "cutover": self.cutover, "gc": list(self.gc), "in_place": self.in_place, "replanned": self.replanned}
        if self.outcome is CycleOutcome.RETRYING:
            out.update(error=self.error, retry_in=self.retry_in)
        return out


def _same_inputs(a: Plan, b: Plan) -> bool:
    """Two plans made from the same config, live population and corpus (their work is the same)."""
    return (a.index == b.index and a.kind == b.kind and a.config_digest == b.config_digest
            and a.baseline == b.baseline and a.corpus.digest == b.corpus.digest)


def _earlier_plan(fresh: Plan, plans_dir: Path) -> Path | None:
    """The newest plan file in ``plans_dir`` made from the same inputs as ``fresh``, if any."""
    for path in reversed(Books.plan_files(plans_dir, fresh.index)):
        try:
            plan = read_plan(path)
        except ReindexError:
            continue
        if _same_inputs(plan, fresh):
            return path
    return None


def run_cycle(ctx: Context, policy: SyncPolicy) -> CycleResult:
    """One cycle of the context's index; see the module docstring."""
    from reindex.context.locking import holding_index_lock

    name = ctx.index
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(holding_index_lock(ctx, "sync"))
        except LockHeld as err:
            return CycleResult(CycleOutcome.SKIPPED, name, str(err))  # the outcome says "skipped" already
        replanned = 0
        while True:
            try:
                result = _cycle(ctx, policy)
                _prune_plans(ctx, policy)
                return dataclasses.replace(result, replanned=replanned)
            except DriftError as err:
                if replanned >= policy.replans:
                    moved = "; ".join(err.problems) or str(err)
                    raise DriftError(
                        f"index {name!r}: {moved} (planned {replanned + 1} times in this sync; each plan's inputs moved "
                        "before it could be applied: run `reindex sync` again, or `reindex sync --watch`, which retries "
                        "with backoff)", problems=err.problems) from None
                replanned += 1
                _log.info("reindex sync: %s; planning again (%d of at most %d)", "; ".join(err.problems) or err,
                          replanned, policy.replans)


def _cycle(ctx: Context, policy: SyncPolicy) -> CycleResult:
    name = ctx.index
    plans_dir = Path(policy.plans_dir) if policy.plans_dir else Path("plans")
    reading = PlanReading()  # what the plan reads, handed to its apply: nothing is read twice, nothing drifts
    fresh, _ = make_plan(ctx, out=None, verify=policy.verify, reading=reading)
    if not fresh.kind.does_work:
        # metadata that moved without content, or a full read: start there next time
        record_cursor(ctx, fresh, reading=reading)
        return CycleResult(CycleOutcome.NOTHING_TO_DO, name, f"nothing to do: index {name!r} matches its config and "
                           "corpus", plan_hash=fresh.plan_hash, kind=fresh.kind)
    in_place = None
    if fresh.numbers.in_place_part:
        # Seed 001's two tickets: the document changes reach the live population now, under its own config;
        # the pipeline change is planned again against the population they leave, and waits or goes on.
        done = _carry_out_in_place_part(ctx, plans_dir)
        if isinstance(done, CycleResult):
            return done
        in_place = done
        reading = PlanReading()
        fresh, _ = make_plan(ctx, out=None, reading=reading)
        if not fresh.kind.does_work:  # cannot happen while the config names another pipeline; kept honest
            return CycleResult(CycleOutcome.APPLIED_IN_PLACE, name, "applied the document changes in place",
                               in_place=in_place)
    path, plan = _plan_file(fresh, plans_dir)
    base = dict(plan_file=str(path), plan_hash=plan.plan_hash, kind=plan.kind, in_place=in_place)
    said = (f"applied the document changes in place (plan {in_place['plan_hash'][:12]}); " if in_place else "")
    approval, rejection = read_approval(path), read_rejection(path)
    if rejection is not None and rejection.plan_hash == plan.plan_hash:
        return CycleResult(CycleOutcome.REJECTED, name, f"{said}plan {plan.plan_hash[:12]} ({plan.kind}) was rejected "
                           f"by {rejection.by}; nothing changes until the config or the corpus does", **base)
    if _rolled_back(ctx, plan):
        # Carried out and cut over before, and the live index is back where that plan started: someone rolled
        # back. Going forward again is a person's decision, never a cron tick's (with --force again if the cutover
        # that went forward was forced past its gate).
        moved = last_move_to(ctx.state, name, plan.new_collection) if \
            plan.kind.builds_population else None
        forced = f" --force (the cutover was forced by {moved['forced_by']} past a failed gate)" if \
            moved and moved.get("forced_by") else ""
        return CycleResult(CycleOutcome.AWAITING_APPROVAL, name, f"{said}plan {plan.plan_hash[:12]} ({plan.kind}) was "
                           "carried out before and the index has moved back since (a rollback?): nothing is done "
                           f"automatically; run `reindex cutover {path}{forced}` to go forward again, or change the "
                           "config", **base)
    approved = approval is not None and approval.plan_hash == plan.plan_hash
    needs = plan.numbers.approval_required
    if needs and not approved:
        approved = _carried_approval(ctx, plan, path, plans_dir) is not None
    if needs and not approved:
        return CycleResult(CycleOutcome.AWAITING_APPROVAL, name, f"{said}plan {plan.plan_hash[:12]} ({plan.kind}) needs "
                           f"approval: run `reindex approve {path} --by NAME`, then `reindex sync` again", **base)
    if plan.kind.builds_population and not (approved or policy.apply_new_populations):
        return CycleResult(CycleOutcome.AWAITING_APPROVAL, name, f"{said}plan {plan.plan_hash[:12]} ({plan.kind}) builds "
                           f"a new population: run `reindex apply {path}`", **base)
    applied = apply_plan(ctx, path, reading=reading)
    if applied.status == "failed":
        raise ReindexError(f"apply of {path} failed: {len(applied.report['failures'])} failures (see "
                           f"{applied.report_path}); run `reindex sync` again to resume")
    if plan.kind.in_place:
        return CycleResult(CycleOutcome.APPLIED_IN_PLACE, name, f"applied {plan.kind} plan {plan.plan_hash[:12]} in "
                           f"place ({applied.status})", apply=applied.as_dict(),
                           gc=_gc(ctx, policy), **base)
    cut = cutover(ctx, path, queries=policy.queries, k=policy.k, force=policy.force and approved)
    outcome = CycleOutcome.CUT_OVER if cut.report.get("swap") or cut.report.get("already") else CycleOutcome.GATE_FAILED
    msg = (f"alias {name} now serves {cut.report['shadow']}" if outcome is CycleOutcome.CUT_OVER else
           f"the cutover gate failed for {cut.report['shadow']}: the alias was not moved (report: {cut.report_path})")
    return CycleResult(outcome, name, said + msg, apply=applied.as_dict(), cutover=cut.as_dict(),
                       gc=_gc(ctx, policy) if outcome is CycleOutcome.CUT_OVER else [], **base)


def _plan_file(fresh: Plan, plans_dir: Path) -> tuple[Path, Plan]:
    """The plan file of ``fresh``'s inputs: an earlier one made from the same inputs, else ``fresh`` written now
    (with its reports). A change that needs approval is thus planned once per inputs."""
    path = _earlier_plan(fresh, plans_dir)
    if path is not None:
        return path, read_plan(path)
    path = write_plan(fresh, plans_dir)
    if fresh.numbers.approval_required or fresh.kind.builds_population:
        # A person reads these (an approval, a new population's cutover). A change the cycle applies in place on
        # its own keeps its plan file and run record; `reindex show PLAN` renders it.
        reports.write_reports(fresh, path)
    return path, fresh


def _carry_out_in_place_part(ctx: Context, plans_dir: Path) -> dict | CycleResult:
    """Apply the document changes of a pipeline change in place under the live population's own config (the
    approval policy applies to them as to any in-place change). The apply's result, or the cycle's answer
    when the part waits for approval or was rejected."""
    reading = PlanReading()
    got = plan_in_place_part(ctx, out=None, reading=reading)
    if got is None:
        return {}
    path, part = _plan_file(got[0], plans_dir)
    base = dict(plan_file=str(path), plan_hash=part.plan_hash, kind=part.kind)
    approval, rejection = read_approval(path), read_rejection(path)
    if rejection is not None and rejection.plan_hash == part.plan_hash:
        return CycleResult(CycleOutcome.REJECTED, ctx.index, f"the document changes (plan {part.plan_hash[:12]} "
                           f"({part.kind})) were rejected by {rejection.by}; nothing changes until the corpus does",
                           **base)
    if part.numbers.approval_required and not (approval is not None and approval.plan_hash == part.plan_hash):
        return CycleResult(CycleOutcome.AWAITING_APPROVAL, ctx.index, f"plan {part.plan_hash[:12]} ({part.kind}) "
                           f"needs approval: run `reindex approve {path} --by NAME`, then `reindex sync` again "
                           "(the document changes of a pipeline change, applied in place first)", **base)
    applied = apply_plan(ctx, path, reading=reading)
    if applied.status == "failed":
        raise ReindexError(f"apply of {path} failed: {len(applied.report['failures'])} failures (see "
                           f"{applied.report_path}); run `reindex sync` again to resume")
    return {"plan_file": str(path), "plan_hash": part.plan_hash, "kind": part.kind.value, **applied.as_dict()}


def _carried_approval(ctx: Context, plan: Plan, path: Path, plans_dir: Path):
    """An approval of an earlier plan of the same pipeline change, carried over to ``plan`` when its numbers
    stayed within ``approval.carry_over`` (written beside ``plan``); None when there is none to carry."""
    from reindex.planner.approvals import carry_over, same_change, signing_key

    pol = ctx.config.approval
    for other in reversed(Books.plan_files(plans_dir, plan.index)):
        if other == path:
            continue
        try:
            earlier = read_plan(other)
            approval = read_approval(other)
        except ReindexError:
            continue
        if approval is None or not same_change(plan, earlier):
            continue
        carried = carry_over(plan, path, earlier, approval, pol.carry_over, signing_key(pol.hmac_key_env))
        if carried is not None:
            return carried
    return None


def _rolled_back(ctx: Context, plan: Plan) -> bool:
    """Whether ``plan`` was carried out and then undone: applied in place while the live index now matches the
    state before it, or built and cut over (its population retired since) or deleted. A population built by
    an apply and never cut over (``ready``) is not: the cycle goes on to its cutover."""
    from reindex.books.manifests import read_apply_record, read_population

    done = read_apply_record(ctx.state, ctx.index, plan.plan_hash)
    if done is None:
        return False
    if not plan.kind.builds_population:
        return True
    rec = read_population(ctx.state, ctx.index, plan.new_collection)
    return rec is None or rec.state is not PopulationState.READY


def _prune_plans(ctx: Context, policy: SyncPolicy) -> None:
    """The plans folder's retention (``plans.keep``): older plans carried out in place are deleted."""
    from reindex.books.manifests import read_apply_record
    from reindex.planner import prune_plans

    plans_dir = Path(policy.plans_dir) if policy.plans_dir else Path("plans")
    gone = prune_plans(plans_dir, ctx.index, ctx.config.plans.keep,
                       lambda plan_hash: read_apply_record(ctx.state, ctx.index, plan_hash) is not None)
    if gone:
        _log.info("reindex sync: deleted %d plan(s) carried out in place, past plans.keep %s", len(gone),
                  ctx.config.plans.keep)


def _gc(ctx: Context, policy: SyncPolicy) -> list:
    """Retired populations past retention, deleted (the automatic path: never live, never in the window)."""
    if not policy.gc:
        return []
    return [a for a in gc(ctx) if a["action"] == "deleted"]
