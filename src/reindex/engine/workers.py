"""A shard as plain data, and what a shard worker process does with it.

A :class:`ShardSpec` is everything one shard needs, as plain values (the plan's hash, its resolved
config as canonical JSON, the state URI, the collections, the shard number and, in place, its document
subsets, the coordinator's fencing token, the unapproved token budget, the id of the plan's carried chunks,
which the worker reads from the state store). Any process on any machine runs
it with :func:`run_shard_spec`: :func:`open_shard_context` rebuilds the context — state opened by URI,
the embedder made once per worker process and kept, the text pipeline — and nothing is looked up in the
memory of another process.

Writes. Every write a worker makes is first checked against the coordinator's lease
(:class:`reindex.books.locks.Fence`: one read of the lock), so when the coordinator loses its lock every
worker stops before its next write.

* A Qdrant server (``store.url``) takes writes from any process: the worker writes its shard's points
  and manifests itself.
* The embedded store admits one writer process per folder, the coordinator's. A worker there chunks,
  reuses and embeds, and *stages* its writes in the state store (:class:`StagedWrites`: one object per
  embedding batch, then a commit record with the shard's manifest rows); the coordinator applies them
  in order (:func:`commit_staged`) and writes the shard's manifests. Staged batches outlive a killed
  worker: the shard's next attempt takes their vectors by point id, so a killed worker costs at most the
  batch it was embedding. The staging of a shard is deleted once its manifest is written.

Reuse lookups in a worker go through a read-only reader of the embedded store (``open_vector_reader``:
``stores.edge.open_reader``), opened once per worker process; it serves the published old population
(and, in place, the live target). A shadow target is not readable from other processes before its swap,
so in a shadow build a worker's lookups in the target are its shard's staged writes only (a shadow
begun by the in-process runner and resumed on workers re-embeds its unfinished shards' points).

Budget. ``approval.max_tokens`` of an unapproved run is one counter object in the state store per apply
(:class:`SharedTokenCounter`), changed by compare-and-swap before each embedding batch, by the
coordinator and every worker alike: the budget holds across all of them together.

In the coordinator's own process (a thread task runner) a spec resolves to the coordinator's context
(:func:`hosting`): the same store, the same lease, no staging.

Results. A runner that hands back return values (Dask) returns a shard's result dict. A runner that only
starts work elsewhere (flow runs on a Prefect work pool) has the worker publish it instead
(:func:`publish_result`: one fenced object per shard in the state store, under :func:`results_prefix`),
and the coordinator collects and deletes them (:func:`collect_results`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from reindex.engine import execution
from reindex.books.carried import CarriedRef
from reindex.domain.config import PipelineConfig, config_from_dict
from reindex.adapters.embedders import Embedder, make_embedder
from reindex.errors import LockLost, RunnerError, StateError, TransientError
from reindex.engine.execution import ApplyContext
from reindex.domain.identity import identity_of
from reindex.books.locks import Fence
from reindex.books.layout import Books
from reindex.books.manifests import ManifestRow, shard_of
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.stores.objects import ObjectStore, open_object_store
from reindex.adapters.stores.opening import backend_for
from reindex.adapters.stores.vectors import Point, VectorStore

__all__ = [
    "ShardSpec",
    "SharedTokenCounter",
    "StagedWrites",
    "budget_key",
    "commit_staged",
    "host_key",
    "hosted_context",
    "hosting",
    "collect_results",
    "open_shard_context",
    "publish_result",
    "report_remote",
    "results_prefix",
    "run_shard_spec",
    "run_shard_unit",
    "shard_specs",
    "staging_prefix",
]


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """One shard of one apply, as plain data (picklable, JSON-able through ``as_dict``)."""

    index: str
    config: str  # the plan's resolved config, canonical JSON
    run: str  # the plan hash
    target: str
    old: str | None
    old_shards: int | None
    shards: int
    in_place: bool
    shard: int
    only: tuple[str, ...] | None  # in place: this shard's documents to sync
    removed: tuple[str, ...]  # in place: this shard's documents gone from the source
    state_uri: str
    state_endpoint: str | None
    store_path: str | None  # the embedded store's folder (resolved by the coordinator)
    fence_token: int
    fence_nonce: str
    token_budget: int | None
    coordinator: str  # host:pid of the coordinator
    planned_seconds: float = 0.0  # the plan's embedding work for this shard at its rate (units are sized by it)
    unit_seconds: float = 0.0  # target work per unit of shards a remote runner hands a worker (apply.unit_seconds)
    fresh: tuple[str, ...] = ()  # in place: this shard's documents written afresh (a repair; ApplyContext.fresh)
    carried: str | None = None  # the plan's carried chunks (reindex.books.carried), read from the state store

    @property
    def key(self) -> str:
        """The apply attempt this shard belongs to (one lease of one plan)."""
        return _key(self.run, self.fence)

    @property
    def fence(self) -> Fence:
        return Fence(self.index, self.fence_token, self.fence_nonce)

    def as_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["only"] = list(self.only) if self.only is not None else None
        d["removed"] = list(self.removed)
        d["fresh"] = list(self.fresh)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardSpec:
        d = dict(d)
        d["only"] = tuple(d["only"]) if d.get("only") is not None else None
        d["removed"] = tuple(d.get("removed") or ())
        d["fresh"] = tuple(d.get("fresh") or ())
        return cls(**d)


def _key(run: str, fence: Fence) -> str:
    return f"{run}:{fence.token}:{fence.nonce}"


def shard_specs(ctx: ApplyContext, shards: tuple[int, ...], only: frozenset[str] | None,
                removed: frozenset[str], *, seconds: float | Sequence[float] = 0.0,
                unit_seconds: float = 0.0) -> list[ShardSpec]:
    """The specs of ``shards`` of the apply ``ctx`` coordinates (it must hold the index lock); ``seconds``: each
    shard's planned work (same order as ``shards``) or one figure for all."""
    if ctx.lease is None:
        raise RunnerError("shards can run in other processes only under the index lock (apply_plan holds it); "
                          "run them with the in-process runner")
    config = json.dumps(ctx.cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    mine = lambda docs, k: tuple(sorted(d for d in docs if shard_of(d, ctx.shards) == k))  # noqa: E731
    planned = [float(seconds)] * len(shards) if isinstance(seconds, (int, float)) else [float(x) for x in seconds]
    return [ShardSpec(
        index=ctx.index, config=config, run=ctx.run, target=ctx.target, old=ctx.old, old_shards=ctx.old_shards,
        shards=ctx.shards, in_place=ctx.in_place, shard=k, only=mine(only, k) if only is not None else None,
        removed=mine(removed, k), state_uri=ctx.cfg.state.uri, state_endpoint=ctx.cfg.state.endpoint_url,
        store_path=ctx.store_path, fence_token=ctx.lease.token, fence_nonce=ctx.lease.nonce,
        token_budget=ctx.token_budget, coordinator=execution.worker_name(), planned_seconds=planned[i],
        unit_seconds=unit_seconds, fresh=mine(ctx.fresh, k),
        carried=ctx.carried.id if ctx.carried is not None else None,
    ) for i, k in enumerate(shards)]


# --------------------------------------------------------------------------------------------
# The context of a spec, in whatever process runs it
# --------------------------------------------------------------------------------------------

_HOSTED: dict[str, ApplyContext] = {}
_CACHE_LOCK = threading.Lock()
_EMBEDDERS: dict[str, Embedder] = {}
_READERS: dict[str, VectorStore] = {}


def host_key(ctx: ApplyContext) -> str:
    """The key of the apply attempt ``ctx`` coordinates (as ``ShardSpec.key``)."""
    if ctx.lease is None:
        raise RunnerError("this apply holds no index lock; its shards cannot be handed to other processes")
    return _key(ctx.run, ctx.lease)


@contextlib.contextmanager
def hosting(ctx: ApplyContext) -> Iterator[None]:
    """While the block runs, specs of this apply run in this process use ``ctx`` itself."""
    if ctx.lease is None:
        yield
        return
    key = host_key(ctx)
    with _CACHE_LOCK:
        _HOSTED[key] = ctx
    try:
        yield
    finally:
        with _CACHE_LOCK:
            _HOSTED.pop(key, None)


def hosted_context(key: str) -> ApplyContext:
    """The coordinator's context of apply ``key``, for code that runs in the coordinator's process
    (the Prefect flow body and its catch-up task): RunnerError anywhere else."""
    with _CACHE_LOCK:
        ctx = _HOSTED.get(key)
    if ctx is None:
        raise RunnerError(f"apply {key.split(':')[0][:12]} is not coordinated by this process ({execution.worker_name()}); "
                          "the reindex-apply flow runs where `reindex apply` (or the flow calling it) runs")
    return ctx


def _embedder(cfg: PipelineConfig) -> Embedder:
    """The embedder of a vector half, made once per process (a model load takes seconds)."""
    key = json.dumps([cfg.vector.model_dump(mode="json"), cfg.apply.embed_batch_size,
                      cfg.embed.model_dump(mode="json")], sort_keys=True)
    with _CACHE_LOCK:
        if key not in _EMBEDDERS:
            _EMBEDDERS[key] = make_embedder(cfg.vector, batch_size=cfg.apply.embed_batch_size, options=cfg.embed)
        return _EMBEDDERS[key]


def _reader(cfg: PipelineConfig, path: str | None) -> VectorStore:
    """A read-only view of the embedded store, opened once per process (it follows the published state)."""
    key = f"{cfg.store.backend}:{path}"
    with _CACHE_LOCK:
        if key not in _READERS:
            _READERS[key] = backend_for(cfg.store, path).open_reader()
        return _READERS[key]


def open_shard_context(spec: ShardSpec, *, store: VectorStore | None = None,
                       embedder: Embedder | None = None) -> ApplyContext:
    """The context of ``spec`` in this process: the coordinator's own when this is its process, else
    rebuilt from the spec (``store``/``embedder``: use these instead of opening them). Writes go to the
    store itself with a server (``store.url``) or a given ``store``, and are staged for the coordinator
    with the embedded store."""
    with _CACHE_LOCK:
        hosted = _HOSTED.get(spec.key)
    if hosted is not None and store is None and embedder is None:
        return hosted
    cfg = config_from_dict(json.loads(spec.config), recorded=True)  # validated by the coordinator (maybe a record)
    state = open_object_store(spec.state_uri, spec.state_endpoint)
    fence = spec.fence
    check = lambda: fence.check(state)  # noqa: E731
    staging: StagedWrites | None = None
    if store is None:
        backend = backend_for(cfg.store, spec.store_path)
        if backend.capabilities.writers == "many":
            store = backend.open()
        else:
            staging = StagedWrites(state, spec, check, lambda: _reader(cfg, spec.store_path))
            store = staging
    ident = identity_of(cfg)
    counter = None
    if spec.token_budget is not None:
        counter = SharedTokenCounter(state, budget_key(spec.index, spec.run, fence), spec.token_budget, check)
    return ApplyContext(
        index=spec.index, cfg=cfg, identity=ident, target=spec.target, old=spec.old, old_shards=spec.old_shards,
        run=spec.run, shards=spec.shards, state=state, store=store, embedder=embedder or _embedder(cfg),
        pipeline=TextPipeline(cfg.text, ident.vector_id), in_place=spec.in_place, fence=check,
        token_budget=spec.token_budget, budget_counter=counter, lease=fence, store_path=spec.store_path,
        staging=staging, fresh=frozenset(spec.fresh),
        carried=CarriedRef(spec.index, spec.carried) if spec.carried else None,
    )


def run_shard_unit(specs: list[ShardSpec | dict[str, Any]]) -> list[dict]:
    """Run a unit of shards one after the other in this process (one model, one context); a shard that raises
    is returned as ``{"shard": k, "error": …}`` and the unit goes on, except when the lock is lost."""
    out = []
    for spec in specs:
        k = spec.shard if isinstance(spec, ShardSpec) else spec["shard"]
        try:
            out.append(run_shard_spec(spec))
        except LockLost:
            raise
        except Exception as err:  # noqa: BLE001 - one failed shard; the unit's others still run
            out.append({"shard": k, "error": f"{type(err).__name__}: {err}".splitlines()[0][:500]})
    return out


def run_shard_spec(spec: ShardSpec | dict[str, Any]) -> dict:
    """Run one shard from plain data, in any process; returns its ShardResult as a dict."""
    if isinstance(spec, dict):
        spec = ShardSpec.from_dict(spec)
    with _CACHE_LOCK:
        hosted = _HOSTED.get(spec.key)
    ctx = open_shard_context(spec)
    try:
        return execution.run_shard(ctx, spec.shard, only=set(spec.only) if spec.only is not None else None,
                                   removed=set(spec.removed)).as_dict()
    finally:
        if ctx is not hosted:
            ctx.store.close()  # a server client this call opened (staged writes keep the process's reader)


# --------------------------------------------------------------------------------------------
# Staged writes (embedded store): the worker stages, the coordinator commits
# --------------------------------------------------------------------------------------------


def staging_prefix(index: str, run: str, shard: int) -> str:
    """Where the staged writes of one shard of one plan live in the state store."""
    return Books(None, index).staging_prefix(run, shard)


def budget_key(index: str, run: str, fence: Fence) -> str:
    """The shared token counter of one apply attempt (one lease of one plan)."""
    return Books(None, index).tokens_key(run, fence.token)


def results_prefix(index: str, run: str, fence: Fence) -> str:
    """Where the workers of one apply attempt (one lease of one plan) publish their shards' results."""
    return Books(None, index).results_prefix(run, fence.token)


def publish_result(spec: ShardSpec, result: dict) -> str:
    """In a worker: publish one shard's result (a ShardResult dict, or ``{"shard", "error"}`` for a shard
    that raised) for the coordinator, checked against its fence first; returns the object's key."""
    state = open_object_store(spec.state_uri, spec.state_endpoint)
    key = Books(None, spec.index).result_key(spec.run, spec.fence.token, spec.shard)
    spec.fence.check(state)
    state.put(key, json.dumps({**result, "shard": spec.shard}, ensure_ascii=False).encode())
    return key


def collect_results(ctx: ApplyContext, shards: set[int]) -> dict[int, dict]:
    """In the coordinator: the published results of ``shards`` so far (one listing), deleted as read."""
    if ctx.lease is None:
        return {}
    out: dict[int, dict] = {}
    for key in sorted(ctx.state.list(results_prefix(ctx.index, ctx.run, ctx.lease))):
        raw = ctx.state.get(key)
        if raw is None:
            continue
        result = json.loads(raw)
        if result["shard"] in shards:
            out[result["shard"]] = result
            ctx.state.delete(key)
    return out


def _encode_points(points: list[Point]) -> bytes:
    """A JSON header line (ids, payloads, dimension) then the vectors as little-endian float32."""
    vectors = np.asarray([np.asarray(p.vector, dtype="<f4") for p in points], dtype="<f4")
    header = {"ids": [p.id for p in points], "payloads": [p.payload for p in points],
              "dim": int(vectors.shape[1]) if points else 0}
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + vectors.tobytes()


def _decode_points(data: bytes) -> list[Point]:
    head, _, body = data.partition(b"\n")
    header = json.loads(head)
    n, dim = len(header["ids"]), header["dim"]
    vectors = np.frombuffer(body, dtype="<f4").reshape(n, dim) if n else np.zeros((0, 0), dtype="<f4")
    return [Point(i, vectors[k].copy(), payload) for k, (i, payload) in enumerate(zip(header["ids"], header["payloads"]))]


class StagedWrites:
    """The target as a shard worker sees it when it may not write the store: writes become objects in
    the state store (fenced, in order); lookups in the target find this shard's staged points (of any
    attempt) and, in place, the published target; lookups elsewhere go to the read-only reader."""

    embedded = True

    def __init__(self, state: ObjectStore, spec: ShardSpec, fence: Callable[[], None],
                 reader: Callable[[], VectorStore]) -> None:
        self.state = state
        self.spec = spec
        self.prefix = staging_prefix(spec.index, spec.run, spec.shard)
        self.attempt = uuid.uuid4().hex[:12]
        self._fence = fence
        self._reader = reader
        self._ops: list[str] = []
        self._staged: dict[str, Point] | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Point]:
        if self._staged is None:
            staged: dict[str, Point] = {}
            for key in sorted(self.state.list(self.prefix)):
                if key.endswith(".upsert"):
                    data = self.state.get(key)
                    if data is not None:
                        staged.update((p.id, p) for p in _decode_points(data))
            self._staged = staged
        return self._staged

    def retrieve(self, name: str, ids: list[str], *, with_vectors: bool = True) -> list[Point]:
        if name != self.spec.target:
            return self._reader().retrieve(name, ids, with_vectors=with_vectors)
        with self._lock:
            staged = self._load()
            out = [staged[i] for i in ids if i in staged]
        rest = [i for i in ids if i not in staged]
        if self.spec.in_place and rest:  # the live target is published: read what it holds
            out += self._reader().retrieve(name, rest, with_vectors=with_vectors)
        return out

    def prepare_writes(self, name: str) -> None:
        """Nothing to prepare: writes are staged, the coordinator writes the store."""
        self._check_target(name)

    def _put(self, op: str, data: bytes) -> None:
        with self._lock:
            key = f"{self.prefix}{self.attempt}/{len(self._ops):06d}.{op}"
            self._fence()
            self.state.put(key, data)
            self._ops.append(key)

    def upsert(self, name: str, points: list[Point]) -> None:
        self._check_target(name)
        self._put("upsert", _encode_points(points))
        with self._lock:
            self._load().update((p.id, p) for p in points)

    def delete_points(self, name: str, ids: list[str]) -> None:
        self._check_target(name)
        self._put("delete", json.dumps(list(ids)).encode())

    def overwrite_payload(self, name: str, payloads: dict[str, dict[str, Any]]) -> None:
        self._check_target(name)
        self._put("payload", json.dumps(payloads, ensure_ascii=False).encode())

    def _check_target(self, name: str) -> None:
        if name != self.spec.target:
            raise RunnerError(f"a shard worker writes only its target {self.spec.target}, not {name}")

    def finish(self, shard: int, rows: list[ManifestRow], texts: dict[str, str] | None, manifest: dict) -> str:
        """Stage the shard's outputs after its writes; returns the commit record's key."""
        record = {"v": 1, "shard": shard, "attempt": self.attempt, "ops": list(self._ops),
                  "rows": [asdict(r) for r in rows], "texts": texts, "manifest": manifest}
        key = f"{self.prefix}{self.attempt}/commit.json"
        self._fence()
        self.state.put(key, json.dumps(record, ensure_ascii=False).encode())
        return key

    def close(self) -> None:
        pass  # the reader is kept for the process's next shard


def commit_staged(ctx: ApplyContext, key: str) -> float:
    """In the coordinator (the store's one writer): apply a shard's staged writes in order, then write
    its manifests, then drop its staging. Every step can be repeated. Returns the seconds it took."""
    t0 = time.perf_counter()
    if ctx.lease is not None:
        ctx.lease.check(ctx.state)  # confirmed against the stored lock: nothing is written after a takeover
    raw = ctx.state.get(key)
    if raw is None:
        raise StateError(f"the staged writes {key} are gone (another apply committed or removed them); "
                         "run the apply again")
    record = json.loads(raw)
    for op_key in record["ops"]:
        data = ctx.state.get(op_key)
        if data is None:
            raise StateError(f"the staged write {op_key} is gone; run the apply again")
        op = op_key.rsplit(".", 1)[1]
        ctx.fence()
        if op == "upsert":
            execution.retry_transient(ctx.store.upsert, ctx.target, _decode_points(data))
        elif op == "delete":
            execution.retry_transient(ctx.store.delete_points, ctx.target, json.loads(data))
        elif op == "payload":
            execution.retry_transient(ctx.store.overwrite_payload, ctx.target, json.loads(data))
        else:
            raise StateError(f"unknown staged write {op_key}")
    rows = [ManifestRow(**r) for r in record["rows"]]
    execution.write_shard_outputs(ctx, record["shard"], rows, record["texts"], record["manifest"])
    if not record["manifest"]["failures"]:
        for k in ctx.state.list(staging_prefix(ctx.index, ctx.run, record["shard"])):
            ctx.state.delete(k)
    return time.perf_counter() - t0


def report_remote(ctx: ApplyContext, result: dict) -> None:
    """Progress events for a shard another process ran (its own events stayed there)."""
    if result.get("worker") == execution.worker_name():
        return
    if result["skipped"]:
        return  # its shard-skipped event was emitted where it ran; nothing to add here
    ctx.emit(kind="embedded", chunks=result["embedded"], tokens=result["tokens_embedded"])
    ctx.emit(kind="documents", documents=result["documents"], chunks=result["chunks"],
             reused=max(0, result["chunks"] - result["embedded"]), embedded=result["embedded"])
    ctx.emit(kind="shard-done", shard=result["shard"], result=result)


@dataclass
class SharedTokenCounter:
    """``approval.max_tokens`` across every process of one apply: one object in the state store,
    changed by compare-and-swap (a fenced write) before each embedding batch."""

    state: ObjectStore
    key: str
    limit: int
    fence: Callable[[], None]
    attempts: int = 200

    def spent(self) -> int:
        cur = self.state.get_versioned(self.key)
        return int(json.loads(cur[0])["spent"]) if cur is not None else 0

    def __call__(self, tokens: int) -> None:
        for _ in range(self.attempts):
            cur = self.state.get_versioned(self.key)
            spent = int(json.loads(cur[0])["spent"]) if cur is not None else 0
            if spent + tokens > self.limit:
                raise execution.over_budget(self.limit)
            self.fence()
            if self.state.put_if_version(self.key, json.dumps({"spent": spent + tokens}).encode(),
                                         cur[1] if cur is not None else None) is not None:
                return
        raise TransientError(f"the shared token counter {self.key} kept changing under {self.attempts} attempts; "
                             "run the apply again")
