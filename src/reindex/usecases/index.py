"""The ``Index`` handle: one object owns an index's config and backends and has the use cases as methods.

::

    from reindex.api import Index

    with Index.open("reindex.yaml") as ix:          # the config is read and resolved once
        plan, path = ix.plan()                       # classify and price the change
        ix.approve(path, by="me")                    # if it needs approval
        ix.apply(path)                               # build or sync in place
        ix.cutover(path)                             # gate, swap the alias
        result = ix.sync()                           # or all of it as one cycle (what `reindex sync` runs)
        print(ix.status()["aliases"], ix.query("how are sockets closed?", k=3).results[0])
        assert ix.doctor().healthy                   # the store holds what the books say
        ix.serving(evaluate=True)                    # during a model change: bridge / cascade / old, gated

A caller passes what it has (``state``, ``store``, ``reader``, ``embedder``, ``runner``, ``clock``: a service's own
clients, a test's fakes, a shard worker's cached model) and everything else has defaults. The handle's inside is
its :class:`~reindex.context.Context` (:attr:`Index.context`): every method is one use case called with it.
What the handle was given it never closes; what it opens (the state store at once, an embedder on first use, kept
for every later call) it keeps until :meth:`Index.close`. The vector store is opened by each use case unless one
is given: the embedded store allows one writer per folder, so a handle must not hold it between calls
(``reindex status`` beside a running apply reads through a reader of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from reindex.domain.config import PipelineConfig
from reindex.errors import ReindexError
from reindex.context.backends import DEFAULT_CONFIG
from reindex.usecases.configure import load_resolved
from reindex.context import Clock, Context

if TYPE_CHECKING:
    from reindex.usecases.cycle import CycleResult, SyncPolicy

__all__ = ["Index"]


class Index:
    """An index and its backends (see the module docstring). Make one with :meth:`Index.open`."""

    def __init__(self, config_path: str, cfg: PipelineConfig, *, state: Any = None, store: Any = None,
                 reader: Any = None, embedder: Any = None, runner: Any = None, clock: Clock | None = None) -> None:
        self._ctx = Context(cfg, config_path=config_path, state=state, store=store, reader=reader, embedder=embedder,
                            runner=runner, clock=clock)
        self._closed = False

    @classmethod
    def open(cls, config: str | Path | PipelineConfig = DEFAULT_CONFIG, *, state: Any = None, store: Any = None,
             reader: Any = None, embedder: Any = None, runner: Any = None, clock: Clock | None = None) -> "Index":
        """The handle of the index a config describes (a path to ``reindex.yaml``, or a config object).

        ``state``: the object store for plans' state, manifests and locks (default: ``state.uri``);
        ``store``: the vector store writers use (and readers, unless ``reader`` is given); ``embedder``: the
        embedder of the config's vector half, for passages and queries; ``runner``: the shard runner for
        apply (default: in-process threads, or Prefect when an API is configured); ``clock``: the time."""
        if isinstance(config, PipelineConfig):
            path, cfg = Context.CONFIG_OBJECT, config
        else:
            path, cfg = str(config), load_resolved(config)
        return cls(path, cfg, state=state, store=store, reader=reader, embedder=embedder, runner=runner, clock=clock)

    # -- what the handle holds ------------------------------------------------------------------------

    @property
    def context(self) -> Context:
        """The handle's inside: what every use case is given (config, books, backends, clock)."""
        if self._closed:
            raise ReindexError(f"the Index handle of {self.name!r} is closed; open a new one")
        return self._ctx

    @property
    def config(self) -> PipelineConfig:
        """The resolved config (read once, at open). It describes the next population; a population that exists is
        described by its own record (:meth:`Context.side`)."""
        return self._ctx.config

    @property
    def name(self) -> str:
        """The index (the alias readers query)."""
        return self._ctx.config.index

    @property
    def state(self) -> Any:
        return self._ctx.state

    @property
    def books(self) -> Any:
        """The index's state and its layout (:class:`reindex.books.layout.Books`)."""
        return self._ctx.books

    @property
    def plans_dir(self) -> Path:
        """Where plans are written and looked for: ``plans/`` in the working directory, as ``reindex plan``."""
        return Path("plans")

    # -- the use cases --------------------------------------------------------------------------------

    def plan(self, *, out: str | Path | None = ..., **kwargs: Any):  # type: ignore[assignment]
        """Classify and price the change (:func:`reindex.usecases.plan.make_plan`); ``out=None`` writes no file."""
        from reindex.usecases.plan import make_plan

        return make_plan(self.context, out=self.plans_dir if out is ... else out, **kwargs)

    def record_cursor(self, plan: Any) -> bool:
        """Record the source's cursor a plan with nothing to do moved (:func:`reindex.usecases.apply.record_cursor`)."""
        from reindex.usecases.apply import record_cursor

        return record_cursor(self.context, plan)

    def plan_in_place_part(self, *, out: str | Path | None = ..., **kwargs: Any):  # type: ignore[assignment]
        """The document changes of a pipeline change, as a plan applied in place under the live population's own
        config (:func:`reindex.usecases.plan.plan_in_place_part`); None when there is no such part."""
        from reindex.usecases.plan import plan_in_place_part

        return plan_in_place_part(self.context, out=self.plans_dir if out is ... else out, **kwargs)

    def approve(self, plan_path: str | Path, by: str, note: str = "", *, reject: bool = False):
        """Record an approval (or, with ``reject``, a rejection) of a plan; resumes runs paused on it."""
        from reindex.usecases.runs import approve_and_resume, reject_and_resume

        fn = reject_and_resume if reject else approve_and_resume
        return fn(plan_path, by, note, config_path=self.context.config)

    def apply(self, plan_path: str | Path, **kwargs: Any):
        """Carry out a plan (:func:`reindex.usecases.apply.apply_plan`)."""
        from reindex.usecases.apply import apply_plan

        return apply_plan(self.context, plan_path, **kwargs)

    def cutover(self, plan_path: str | Path | None = None, **kwargs: Any):
        """Evaluate, gate and swap the alias (:func:`reindex.usecases.lifecycle.cutover`)."""
        from reindex.usecases.lifecycle import cutover

        return cutover(self.context, plan_path, **kwargs)

    def rollback(self, to: str | None = None):
        from reindex.usecases.lifecycle import rollback

        return rollback(self.context, to=to)

    def gc(self, **kwargs: Any):
        """Delete retired populations past retention (:func:`reindex.usecases.lifecycle.gc`)."""
        from reindex.usecases.lifecycle import gc

        return gc(self.context, **kwargs)

    def status(self):
        """What ``reindex status --json`` prints."""
        from reindex.usecases.lifecycle import status

        return status(self.context)

    def doctor(self, *, full: bool = False, sample: int = 256, embed_sample: int = 32, repair: bool = False,
               seed: int = 0, out: str | Path | None = ...):  # type: ignore[assignment]
        """The store against the books (:func:`reindex.usecases.doctor.doctor`): a :class:`DoctorReport`; with
        ``repair``, the plan that fixes the live population is written to ``out`` (default :attr:`plans_dir`)."""
        from reindex.usecases.doctor import doctor

        return doctor(self.context, full=full, sample=sample, embed_sample=embed_sample, repair=repair,
                      out=self.plans_dir if out is ... else out, seed=seed)

    def serving(self, *, evaluate: bool = False, queries: str | Path | None = None):
        """What readers are served while a model change builds (``old``, ``bridge`` or ``cascade``) and why; with
        ``evaluate``, the modes are evaluated again on the cutover's queries and gated first
        (:func:`reindex.usecases.serve.serving`; ``reindex serving [--evaluate]``)."""
        from reindex.usecases.serve import serving

        return serving(self.context, evaluate=evaluate, queries=queries)

    def query(self, text: str, *, k: int = 10, filters: dict[str, str] | None = None, collection: str | None = None):
        """Top ``k`` chunks for ``text`` from the live alias (:func:`reindex.usecases.query.query`)."""
        from reindex.usecases.query import query

        return query(self.context, text, k=k, filters=filters, collection=collection)

    def calibrate(self, **kwargs: Any) -> dict:
        """Time the configured embedder on sampled chunks and record the rate plans use (``reindex calibrate``)."""
        from reindex.usecases.plan import calibrate

        return calibrate(self.context, **kwargs)

    def sync(self, policy: SyncPolicy | None = None) -> CycleResult:
        """One plan → approve → apply → cutover → gc cycle (:mod:`reindex.usecases.cycle`)."""
        from reindex.usecases.cycle import SyncPolicy, run_cycle

        return run_cycle(self.context, policy or SyncPolicy())

    def watch(self, policy: SyncPolicy | None = None, **kwargs: Any):
        """The live mode (``reindex sync --watch``): cycles under one lock and one writer until stopped
        (:func:`reindex.usecases.watch.watch`: ``interval``, ``stop``, ``ticks``, ``on_cycle``)."""
        from reindex.usecases.cycle import SyncPolicy
        from reindex.usecases.watch import watch

        return watch(self.context, policy or SyncPolicy(), **kwargs)

    # -- lifetime -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close what the handle opened itself (never what it was given)."""
        if self._closed:
            return
        self._closed = True
        self._ctx.close()

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Index({self.name!r}, config={self._ctx.config_path!r})"
