"""The books' layout: every key and file name of an index's state, in one class.

An index's state lives in an object store (a local folder or an S3 prefix) under ``indexes/<index>/``, and its
plans in a plans folder. :class:`Books` is the only place that spells a key or a file name of either
(``tests/test_layers.py`` holds it so: the literal names appear in this module only). Everything else asks it:
``Books(state, index).live_key``, ``books.population_key(collection)``, ``books.shard_manifest_key(c, run, k)``.

::

    indexes/<index>/
      live.json                               the population readers are served (the alias's record)
      serving.json  serving/bridges/<id>.npz  the serving mode during a model change, and its bridges
      lock.json  intent.json  history/        the writer's lock; an alias move in flight; moves done
      runs/<plan>/done.json                   an apply's record of its run (the gate reads it)
      runs/<plan>/staging/ tokens-<t>.json results-<t>/   shard workers' staged writes, token budget, results
      carried/<id>.json  carried/parts/<digest>.parquet    a plan's exact chunking, carried to apply
      populations/<collection>/
        population.json                       the population as a value (config, identity, state)
        chunks/shard-NNNN.parquet             the chunk manifest, one part per shard
        summaries/<part>.json  summaries/<part>.fps.npz     per-part totals and fingerprint prefixes (by digest)
        rewrites/<run>/<part>.json            parts an in-place run rewrote (its own writes, for resume)
        chunk-texts/<part>.parquet            chunk texts kept for sticky re-chunking
        units/<part>.npz                      unit fingerprint → vector and count (vector.compose: units)
        cursor.json  cursors/<digest>.json|.parquet         the source's committed cursor and its history
        runs/<run>/shard-NNNN.json  progress.json  pairs/shard-NNNN.npz   shard manifests, progress, free pairs
        runs/<run>/units/shard-<k>-<attempt>-<n>.npz   units a run embedded, stored before their chunks' points
    calibration/<vector id>.json  <vector id>.apply.json  index-build/<key>.json   measured rates (every index)
    query-vectors/<side key>.npz              query vectors by text digest, per query side (every index)

    plans/<date>-<index>-<kind>-<hash8>.json (.md .html .run.json)   approvals/<stem>.json  rejections/<stem>.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["Books", "shard_name"]

# The file names. Nothing outside this module spells them.
LIVE = "live.json"
SERVING = "serving.json"
LOCK = "lock.json"
INTENT = "intent.json"
POPULATION = "population.json"
DONE = "done.json"
PROGRESS = "progress.json"
CURSOR = "cursor.json"


def shard_name(shard: int) -> str:
    """The name of shard ``shard``'s files (``shard-0007``): chunk-manifest parts, shard manifests, staging."""
    return f"shard-{shard:04d}"


class Books:
    """One index's state in one object store, and its layout (see the module docstring).

    ``store`` is the object store (:class:`reindex.adapters.stores.objects.ObjectStore`); a Books made with
    ``store=None`` only spells keys. The key methods are pure; the few readers here (:meth:`get`,
    :meth:`exists`, :meth:`collections`) only list and fetch bytes — records are parsed by
    :mod:`reindex.books.manifests`."""

    __slots__ = ("index", "store")

    def __init__(self, store: Any, index: str) -> None:
        self.store, self.index = store, index

    def __repr__(self) -> str:
        return f"Books({self.index!r}, {self.store.describe() if self.store is not None else None})"

    # -- the index ------------------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """``indexes/<index>``: everything of this index."""
        return f"indexes/{self.index}"

    @property
    def live_key(self) -> str:
        return f"{self.prefix}/{LIVE}"

    @property
    def serving_key(self) -> str:
        return f"{self.prefix}/{SERVING}"

    @property
    def lock_key(self) -> str:
        return f"{self.prefix}/{LOCK}"

    @property
    def intent_key(self) -> str:
        return f"{self.prefix}/{INTENT}"

    @property
    def history_prefix(self) -> str:
        return f"{self.prefix}/history/"

    def history_key(self, at_ms: int, op: str) -> str:
        return f"{self.history_prefix}{at_ms}-{op}.json"

    @property
    def bridges_prefix(self) -> str:
        """``indexes/<index>/serving/bridges/``: every fitted bridge (``bridge_key``)."""
        return f"{self.prefix}/serving/bridges/"

    def bridge_key(self, bridge_id: str) -> str:
        return f"{self.bridges_prefix}{bridge_id}.npz"

    def bridge_of(self, key: str) -> str | None:
        """The bridge id a key under :attr:`bridges_prefix` names (None: not a bridge's key)."""
        if not key.startswith(self.bridges_prefix) or not key.endswith(".npz"):
            return None
        return key[len(self.bridges_prefix):-len(".npz")] or None

    @property
    def runs_prefix(self) -> str:
        """``indexes/<index>/runs/``: apply records and shard workers' exchange, per plan hash."""
        return f"{self.prefix}/runs/"

    def run_prefix(self, run: str) -> str:
        """Everything of one run (plan hash) that is not a population's: its record, staged writes, results."""
        return f"{self.runs_prefix}{run}/"

    def staged_prefixes(self, run: str) -> str:
        """The staged writes and published results of a run, as a message names them."""
        return f"{self.run_prefix(run)}staging/ and {self.run_prefix(run)}results-*/"

    def apply_record_key(self, plan_hash: str) -> str:
        """An apply's record of its run, written when it ended clean (what the gate and a re-run read)."""
        return f"{self.runs_prefix}{plan_hash}/{DONE}"

    def run_of(self, key: str) -> tuple[str, str] | None:
        """(run, the rest) of a key under :attr:`runs_prefix`, or None."""
        if not key.startswith(self.runs_prefix):
            return None
        run, _, rest = key[len(self.runs_prefix):].partition("/")
        return run, rest

    def is_apply_record(self, rest: str) -> bool:
        """Whether the rest of a run key (:meth:`run_of`) is an apply record."""
        return rest == DONE

    def is_staged(self, rest: str) -> bool:
        """Whether the rest of a run key (:meth:`run_of`) is a shard worker's staged write or published result."""
        return rest.startswith(("staging/", "results-"))

    def staging_prefix(self, run: str, shard: int) -> str:
        return f"{self.runs_prefix}{run}/staging/{shard_name(shard)}/"

    def tokens_key(self, run: str, token: int) -> str:
        return f"{self.runs_prefix}{run}/tokens-{token}.json"

    def results_prefix(self, run: str, token: int) -> str:
        return f"{self.runs_prefix}{run}/results-{token}/"

    def result_key(self, run: str, token: int, shard: int) -> str:
        return f"{self.results_prefix(run, token)}{shard_name(shard)}.json"

    @property
    def carried_prefix(self) -> str:
        return f"{self.prefix}/carried/"

    def carried_key(self, carry_id: str) -> str:
        return f"{self.carried_prefix}{carry_id}.json"

    def carried_part_key(self, digest: str) -> str:
        return f"{self.carried_prefix}parts/{digest}.parquet"

    def carried_of(self, key: str) -> tuple[str, str] | None:
        """(``index`` | ``part``, id or digest) of a key under :attr:`carried_prefix`, or None."""
        if not key.startswith(self.carried_prefix):
            return None
        rest = key[len(self.carried_prefix):]
        if rest.startswith("parts/") and rest.endswith(".parquet"):
            return "part", rest[len("parts/"):-len(".parquet")]
        if "/" not in rest and rest.endswith(".json"):
            return "index", rest[:-len(".json")]
        return None

    # -- one population -------------------------------------------------------------------------------

    @property
    def populations_prefix(self) -> str:
        return f"{self.prefix}/populations/"

    def population_prefix(self, collection: str) -> str:
        return f"{self.populations_prefix}{collection}"

    def population_key(self, collection: str) -> str:
        """The population's record (``population.json``)."""
        return f"{self.population_prefix(collection)}/{POPULATION}"

    def collection_of_record(self, key: str) -> str | None:
        """The collection whose population record ``key`` is, or None (another key)."""
        if key.startswith(self.populations_prefix) and key.endswith("/" + POPULATION):
            name = key[len(self.populations_prefix):-len(POPULATION) - 1]
            return name if "/" not in name else None
        return None

    def chunks_prefix(self, collection: str) -> str:
        return f"{self.population_prefix(collection)}/chunks/"

    def chunk_part_key(self, collection: str, part: str) -> str:
        """One part of the chunk manifest (``part`` is a shard's name)."""
        return f"{self.chunks_prefix(collection)}{part}.parquet"

    def part_of(self, key: str) -> str | None:
        """The part name of a chunk-manifest, chunk-text or carried-part key (its file name less ``.parquet``)."""
        name = key.rsplit("/", 1)[-1]
        return name[:-len(".parquet")] if name.endswith(".parquet") else None

    def summary_key(self, collection: str, part: str) -> str:
        """A part's cached totals (keyed inside by the digest of the part's bytes)."""
        return f"{self.population_prefix(collection)}/summaries/{part}.json"

    def part_digests_key(self, collection: str) -> str:
        """The digests of the manifest parts, each recorded with the part's signature (its listing metadata)."""
        return f"{self.population_prefix(collection)}/summaries/digests.json"

    def part_totals_key(self, collection: str) -> str:
        """The totals of every part together, for one digest of the whole manifest (and each part's routing)."""
        return f"{self.population_prefix(collection)}/summaries/totals.json"

    def fingerprints_key(self, collection: str, part: str) -> str:
        """A part's cached fingerprint prefixes."""
        return f"{self.population_prefix(collection)}/summaries/{part}.fps.npz"

    def rewrites_prefix(self, collection: str, run: str) -> str:
        return f"{self.population_prefix(collection)}/rewrites/{run}/"

    def rewrite_key(self, collection: str, run: str, part: str) -> str:
        return f"{self.rewrites_prefix(collection, run)}{part}.json"

    def chunk_texts_prefix(self, collection: str) -> str:
        return f"{self.population_prefix(collection)}/chunk-texts/"

    def chunk_texts_key(self, collection: str, part: str) -> str:
        return f"{self.chunk_texts_prefix(collection)}{part}.parquet"

    def units_prefix(self, collection: str) -> str:
        return f"{self.population_prefix(collection)}/units/"

    def unit_part_key(self, collection: str, part: str) -> str:
        """A population's unit part (vector.compose: units), beside the chunk-manifest part of the same name."""
        return f"{self.units_prefix(collection)}{part}.npz"

    def run_units_prefix(self, collection: str, run: str, shard: int) -> str:
        return f"{self.population_runs_prefix(collection)}{run}/units/shard-{shard}-"

    def run_units_key(self, collection: str, run: str, shard: int, seq: str) -> str:
        """Units a run embedded for one batch of a shard, stored before that batch's points."""
        return f"{self.run_units_prefix(collection, run, shard)}{seq}.npz"

    def cursor_key(self, collection: str) -> str:
        """The population's committed cursor."""
        return f"{self.population_prefix(collection)}/{CURSOR}"

    def cursors_prefix(self, collection: str) -> str:
        return f"{self.population_prefix(collection)}/cursors/"

    def cursor_head_key(self, collection: str, digest: str) -> str:
        return f"{self.cursors_prefix(collection)}{digest}.json"

    def cursor_body_key(self, collection: str, digest: str) -> str:
        return f"{self.cursors_prefix(collection)}{digest}.parquet"

    def cursor_digest_of(self, key: str) -> str:
        """The cursor digest a key under :meth:`cursors_prefix` names."""
        return key.rsplit("/", 1)[-1].split(".", 1)[0]

    def population_runs_prefix(self, collection: str) -> str:
        return f"{self.population_prefix(collection)}/runs/"

    def shard_manifest_key(self, collection: str, run: str, shard: int) -> str:
        return f"{self.population_runs_prefix(collection)}{run}/{shard_name(shard)}.json"

    def progress_key(self, collection: str, run: str) -> str:
        return f"{self.population_runs_prefix(collection)}{run}/{PROGRESS}"

    def pairs_key(self, collection: str, run: str, shard: int) -> str:
        return f"{self.population_runs_prefix(collection)}{run}/pairs/{shard_name(shard)}.npz"

    def pairs_prefix(self, collection: str, run: str) -> str:
        return f"{self.population_runs_prefix(collection)}{run}/pairs/"

    def population_run_file(self, collection: str, key: str) -> tuple[str, str] | None:
        """(run, kind) of a key under the population's runs: kind ``shard`` (a shard manifest), ``progress``,
        ``pairs`` or ``other``; None for a key elsewhere."""
        prefix = self.population_runs_prefix(collection)
        if not key.startswith(prefix):
            return None
        run, _, name = key[len(prefix):].partition("/")
        if name.startswith("shard-") and name.endswith(".json"):
            return run, "shard"
        if name == PROGRESS:
            return run, "progress"
        if name.startswith("pairs/"):
            return run, "pairs"
        return run, "other"

    def shard_manifest_of(self, key: str) -> tuple[str, str] | None:
        """(collection, run) of a shard manifest key of any population of this index, or None."""
        if not key.startswith(self.populations_prefix):
            return None
        parts = key[len(self.populations_prefix):].split("/")
        if len(parts) == 4 and parts[1] == "runs" and parts[3].startswith("shard-") and parts[3].endswith(".json"):
            return parts[0], parts[2]
        return None

    # -- every index of a state -----------------------------------------------------------------------

    @staticmethod
    def indexes_with_live_record(store: Any) -> list[str]:
        """The indexes whose live record this state holds (``indexes/<index>/live.json``)."""
        out = []
        for key in store.list("indexes/"):
            parts = key.split("/")
            if len(parts) == 3 and parts[2] == LIVE:
                out.append(parts[1])
        return out

    @staticmethod
    def calibration_key(vector_id: str) -> str:
        """A calibration (``reindex calibrate``) of a vector half, shared by every index of the state."""
        return f"calibration/{vector_id}.json"

    @staticmethod
    def measured_rate_key(vector_id: str) -> str:
        """The embedding rate the last apply of a vector half measured."""
        return f"calibration/{vector_id}.apply.json"

    QUERY_VECTORS_PREFIX = "query-vectors/"

    @staticmethod
    def query_vectors_key(side_key: str) -> str:
        """The query vectors one query side (a vector half with its query prefix: ``side_key``) gave, by text
        digest, shared by every index of the state: a cutover and a forecast of the same queries embed them once."""
        return f"{Books.QUERY_VECTORS_PREFIX}{side_key}.npz"

    @staticmethod
    def build_rate_key(name: str) -> str:
        """The index-build rate measured for one set of build parameters."""
        return f"calibration/index-build/{name}.json"

    # -- reading ---------------------------------------------------------------------------------------

    def describe(self, key: str) -> str:
        """The file or object holding ``key``, for a message."""
        describe_key = getattr(self.store, "describe_key", None)
        return describe_key(key) if describe_key is not None else f"{self.store.describe()}/{key}"

    def get(self, key: str) -> bytes | None:
        return self.store.get(key)

    def exists(self, key: str) -> bool:
        return self.store.exists(key)

    def collections(self) -> list[str]:
        """The collections this index has population records for."""
        return [c for c in (self.collection_of_record(k) for k in self.store.list(self.populations_prefix))
                if c is not None]

    # -- the plans folder ------------------------------------------------------------------------------

    @staticmethod
    def plan_file_name(date: str, index: str, kind: str, plan_hash: str) -> str:
        """``<date>-<index>-<kind>-<hash8>.json``: a plan file (its reports share the stem)."""
        return f"{date}-{index}-{kind.replace('/', '-')}-{plan_hash[:8]}.json"

    @staticmethod
    def plan_files(plans_dir: str | Path, index: str) -> list[Path]:
        """The plan files of ``index`` in ``plans_dir``, oldest first (reports and run records left out)."""
        return sorted(p for p in Path(plans_dir).glob(f"*-{index}-*.json") if p.name.count(".") == 1)

    @staticmethod
    def plan_files_of_run(plans_dir: str | Path, run: str) -> list[Path]:
        """The plan files whose hash starts with ``run``'s first 8 characters."""
        return sorted(Path(plans_dir).glob(f"*-{run[:8]}.json"))

    @staticmethod
    def run_report_path(plan_path: str | Path) -> Path:
        """The run report an apply writes beside its plan (``<plan>.run.json``)."""
        p = Path(plan_path)
        return p.with_name(p.name.removesuffix(".json") + ".run.json")

    @staticmethod
    def plan_of_run_report(report_path: str | Path) -> Path:
        """The plan a run report was written beside (the inverse of :meth:`run_report_path`)."""
        p = Path(report_path)
        return p.with_name(p.name.removesuffix(".run.json") + ".json")

    @staticmethod
    def report_path(plan_path: str | Path, suffix: str) -> Path:
        """A report beside a plan: ``<plan stem><suffix>`` (``.md``, ``.html``, ``.cutover.md``, …)."""
        p = Path(plan_path)
        return p.with_name(p.name.removesuffix(".json") + suffix)

    @staticmethod
    def approval_path(plan_path: str | Path) -> Path:
        p = Path(plan_path)
        return p.parent / "approvals" / p.name

    @staticmethod
    def rejection_path(plan_path: str | Path) -> Path:
        p = Path(plan_path)
        return p.parent / "rejections" / p.name

    @staticmethod
    def decision_records(plans_dir: str | Path) -> list[Path]:
        """Every approval and rejection record in a plans folder (their folders, and beside the plans as earlier
        versions wrote them): what a plan waiting for approval waits on."""
        p = Path(plans_dir)
        found = [*p.glob("approvals/*.json"), *p.glob("rejections/*.json"), *p.glob("*.approval.json"),
                 *p.glob("*.rejection.json")]
        return sorted(found)

    @staticmethod
    def legacy_approval_path(plan_path: str | Path, what: str) -> Path:
        """Where records of earlier versions lay: beside the plan (``<plan>.approval.json``)."""
        p = Path(plan_path)
        return p.with_name(p.name.removesuffix(".json") + f".{what}.json")
