"""Baselines: what a change is measured against (nothing, the live population, or an explicit old
config over an old corpus)."""

from __future__ import annotations

import functools

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from reindex.domain.config import PipelineConfig
from reindex.books.cursors import Committed, read_committed
from reindex.domain.kinds import PopulationState
from reindex.domain.identity import (
    CorpusDigest,
    Identity,
    identity_of,
    payload_id,
)
from reindex.books.layout import Books
from reindex.books.manifests import (
    digest_json,
    chunk_texts_key,
    read_chunk_manifest_columns,
    read_chunk_texts,
    read_chunk_texts_part,
    read_live,
    shard_name,
    shard_of,
)
from reindex.books.units import unit_part_keys
from reindex.adapters.pipeline import TextPipeline
from reindex.planner._live_docs import DocState, LiveDocs
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import ScanReport
from reindex.adapters.stores.objects import ObjectStore

__all__ = ["Baseline", "DocState", "PreviousTexts", "attach_retained", "explicit_baseline", "live_baseline", "no_baseline"]


@dataclass
class Baseline:
    """What the change is measured against."""

    kind: str  # none | live | explicit
    config: PipelineConfig | None
    # doc id → state: a dict, or the live population's LiveDocs (read part by part, with totals)
    docs: Mapping[str, DocState] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    complete: bool = True  # False when only some documents were chunked (sampled explicit baseline)
    materialize: Callable[[set[str]], None] | None = None  # chunk these ids of an incomplete baseline
    # A retained (ready or retired) population built with the new pipeline: its vectors are reused too.
    retained_collection: str | None = None
    retained: dict[str, frozenset[str]] = field(default_factory=dict)  # doc id → fingerprints
    # The payload id the baseline's points were written with (None: no baseline); a live population
    # written before the payload contract has reindex.domain.identity.LEGACY_PAYLOAD_ID.
    payload_id: str | None = None
    # doc id → the baseline's chunk texts of that document in ordinal order, None when not stored: what
    # sticky re-chunking keeps chunks from (a live population built with ``text.rechunk: sticky``).
    previous_texts: Callable[[str], list[str] | None] | None = None
    # The live population's committed cursor (reindex.books.cursors): where a sync finds changes from without
    # reading unchanged content. None: no cursor (built before cursors, or a source without one).
    cursor: Committed | None = None
    # vector.compose: units — part name → the unit fingerprints of the live population's unit part of that name
    # (what a composed chunk's units are priced against); None when the live population keeps no units.
    unit_keys: Callable[[str], frozenset[str]] | None = None
    live_shards: int | None = None  # the shard count the live population's parts were written with

    @property
    def identity(self) -> Identity | None:
        return identity_of(self.config) if self.config is not None else None


class PreviousTexts:
    """The previous chunk texts of a live population's documents, from its chunk-text parts, read part
    by part on demand: a document's own part first (by the population's shard count), then, for a
    fingerprint it lacks (parts written with another shard count), every part once. A document with
    any text missing gets None, and is cut statelessly — exactly what apply decides from the same parts.
    Holds the texts of the parts the edited documents fall in."""

    def __init__(self, store: ObjectStore, index: str, collection: str, shards: int, docs: Mapping[str, DocState]) -> None:
        self._store, self._index, self._collection, self._shards, self._docs = store, index, collection, shards, docs
        self._parts: dict[str, dict[str, str]] = {}
        self._everything: dict[str, str] | None = None
        # Chunk-text parts (their full names) that exist but lack texts of a document's chunks (half-written or
        # damaged), with how many edited documents that cuts statelessly: reported by the plan.
        self.incomplete: dict[str, int] = {}

    def _part(self, doc_id: str) -> dict[str, str]:
        name = shard_name(shard_of(doc_id, self._shards))
        if name not in self._parts:
            self._parts[name] = read_chunk_texts_part(self._store, self._index, self._collection, name)
        return self._parts[name]

    def __call__(self, doc_id: str) -> list[str] | None:
        state = self._docs.get(doc_id)
        if state is None or not state.fingerprints:
            return None
        part = self._part(doc_id)
        texts = [part.get(fp) for fp in state.fingerprints]
        if any(t is None for t in texts):
            if self._everything is None:
                self._everything = read_chunk_texts(self._store, self._index, self._collection)
            texts = [self._everything.get(fp) for fp in state.fingerprints]
            if any(t is None for t in texts):
                if self._everything:  # the population stores texts, yet not these: a part is incomplete
                    name = shard_name(shard_of(doc_id, self._shards))
                    where = f"{self._store.describe()}/{chunk_texts_key(self._index, self._collection, name)}"
                    self.incomplete[where] = self.incomplete.get(where, 0) + 1
                return None
        return texts  # type: ignore[return-value]


def no_baseline() -> Baseline:
    """An initial build: nothing exists yet."""
    return Baseline("none", None, inputs={"kind": "none"})


def live_baseline(store: ObjectStore, index: str) -> Baseline:
    """The live population recorded in the state store, or ``no_baseline()`` before any cutover."""
    rec = read_live(store, index)
    if rec is None:
        return no_baseline()
    cfg = rec.config
    # Read part by part on demand, with every part's totals (planner/_live_docs.py): a plan that finds its changes
    # from a cursor decodes the parts of the documents it touches only.
    states = LiveDocs(store, index, rec.collection, cfg.apply.shards)
    inputs = {
        "kind": "live",
        "collection": rec.collection,
        "pipeline_id": rec.identity["pipeline_id"],
        "config_digest": digest_json(rec.config_json),
        "manifest_digest": states.digest,
    }
    texts = PreviousTexts(store, index, rec.collection, cfg.apply.shards, states) if cfg.text.rechunk.mode == "sticky" else None
    committed = read_committed(store, index, rec.collection)
    if committed is not None:
        inputs["cursor"] = committed.cursor.digest
    units = None
    if cfg.vector.compose == "units":
        units = functools.lru_cache(maxsize=None)(lambda part: unit_part_keys(store, index, rec.collection, part))
    return Baseline("live", cfg, states, inputs, payload_id=rec.payload_id, previous_texts=texts, cursor=committed,
                    unit_keys=units, live_shards=cfg.apply.shards)


def explicit_baseline(
    cfg: PipelineConfig, corpus_uri: str, *, only: set[str] | None = None, progress: Callable[[int], None] | None = None
) -> Baseline:
    """Recompute the old chunking: ``cfg`` over the corpus at ``corpus_uri`` (all documents, or
    just the ids in ``only`` — then the baseline is incomplete and ``materialize`` chunks more)."""
    source = open_source(cfg.source.model_copy(update={"uri": corpus_uri}))
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    report = ScanReport()
    docs: dict[str, DocState] = {}
    digest = CorpusDigest()
    # With sticky re-chunking, an edited document is re-chunked against the old chunk texts: keep them.
    texts: dict[str, list[str]] | None = {} if pipe.sticky else None
    for n, doc in enumerate(source.scan(report), 1):
        digest.add(doc.doc_id, doc.content_hash)
        if only is None or doc.doc_id in only:
            recs = pipe.chunk_document(doc)
            docs[doc.doc_id] = DocState(doc.content_hash, tuple(r.fingerprint for r in recs), tuple(r.tokens for r in recs))
            if texts is not None:
                texts[doc.doc_id] = [r.text for r in recs]
        else:
            docs[doc.doc_id] = DocState(doc.content_hash, (), ())
        if progress:
            progress(n)
    inputs = {
        "kind": "explicit",
        "corpus": source.describe(),
        "corpus_digest": digest.hexdigest(),
        "config_digest": digest_json(cfg.model_dump(mode="json")),
        "pipeline_id": identity_of(cfg).pipeline_id,
        "documents": report.documents,
        "bad_documents": len(report.bad),
    }
    base = Baseline("explicit", cfg, docs, inputs, complete=only is None, payload_id=payload_id(cfg),
                    previous_texts=texts.get if texts is not None else None)

    def materialize(ids: set[str]) -> None:
        for doc in source.scan(ScanReport()):
            if doc.doc_id in ids:
                recs = pipe.chunk_document(doc)
                docs[doc.doc_id] = DocState(
                    doc.content_hash, tuple(r.fingerprint for r in recs), tuple(r.tokens for r in recs)
                )
                if texts is not None:
                    texts[doc.doc_id] = [r.text for r in recs]

    base.materialize = materialize
    return base


def attach_retained(baseline: Baseline, store: ObjectStore, index: str, pipeline_id: str) -> Baseline:
    """Let ``baseline`` reuse a retained population of ``pipeline_id`` (one not live, fully built: ready
    or retired), e.g. the population a rollback left: its fingerprints per document count as reusable."""
    from reindex.books.manifests import read_population

    live = baseline.inputs.get("collection")
    for collection in Books(store, index).collections():
        rec = read_population(store, index, collection)
        if rec is None or rec.collection == live or rec.state not in (PopulationState.READY, PopulationState.RETIRED):
            continue
        if rec.identity.get("pipeline_id") != pipeline_id:
            continue
        fps: dict[str, set[str]] = {}
        for cols in read_chunk_manifest_columns(store, index, rec.collection, ["doc_id", "fingerprint"]):
            for doc_id, fingerprint in zip(cols["doc_id"], cols["fingerprint"]):
                fps.setdefault(doc_id, set()).add(fingerprint)
        baseline.retained_collection = rec.collection
        baseline.retained = {d: frozenset(f) for d, f in fps.items()}
        break
    return baseline
