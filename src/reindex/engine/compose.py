"""Chunk vectors composed from unit vectors (``vector.compose: units``, issue 45).

A chunk that has to be embedded (no vector by fingerprint in the target or, for the same document, in the old
population: the usual chunk-level reuse comes first) is cut into its units
(:mod:`reindex.adapters.chunkers.units`); a unit whose fingerprint (``fingerprint(vector id, unit text)``) is in
the shard's unit part, or was embedded earlier in this shard's run, is not embedded again; the others are, and
the chunk's vector is composed:

* a static model (model2vec, exact arithmetic): each unit keeps the float64 sum of its token rows and their
  count; the chunk's vector is ``(prefix sum + Σ sums) / (prefix count + Σ counts)``, normalised — bit-identical
  to the chunk embedded whole (:class:`reindex.adapters.embedders.static.StaticEmbedder`). A chunk over the
  model's token limit is embedded whole (the whole vector is of its first tokens only);
* any other model: each unit keeps its vector and its tokens in the text tokenizer; the chunk's vector is the
  token-weighted mean of its units' vectors, normalised (an approximation the cutover's gate judges).

The shard's unit part (:func:`reindex.books.manifests.write_unit_part`) is read once — in place the target's
part of the same name, else the old population's when its shard layout is the same (the planner prices against
the same part: :func:`unit_source`) — and written back, with every unit composed in this run added, before the
shard's chunk-manifest part: whichever manifest part is current after a crash, its units are stored. Parts are
never pruned (an edited-away unit stays until the next pipeline-scoped build)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reindex.adapters.chunkers.units import parse_unit_spec, unit_texts
from reindex.books.layout import shard_name
from reindex.books.units import read_run_units, read_unit_part, write_run_units
from reindex.domain.identity import fingerprint

__all__ = ["UnitComposer", "unit_source"]


def unit_source(in_place: bool, target: str, old: str | None, shards: int, old_shards: int | None) -> str | None:
    """The population whose unit part of the same shard name a shard reads (and a plan prices against): the
    target in place, else the old population when it was written with the same shard count, else none."""
    if in_place:
        return target
    return old if old is not None and old_shards == shards else None


class UnitComposer:
    """One shard's units: what is known (its part, and what this run embedded) and the composition."""

    def __init__(self, ctx: Any, shard: int) -> None:
        self.ctx = ctx
        self.spec = parse_unit_spec(ctx.cfg.vector.compose_unit)
        self.vid = ctx.identity.vector_id
        self.exact = bool(getattr(ctx.embedder, "exact", False)) and hasattr(ctx.embedder, "token_sums")
        source = unit_source(ctx.in_place, ctx.target, ctx.old, ctx.shards, ctx.old_shards)
        part = read_unit_part(ctx.state, ctx.index, source, shard_name(shard)) if source is not None else None
        self.known: dict[str, tuple[np.ndarray, int]] = part.as_dict() if part is not None else {}
        # Units this run embedded for this shard before (an attempt that was killed): taken, not embedded again.
        self.added: dict[str, tuple[np.ndarray, int]] = read_run_units(ctx.state, ctx.index, ctx.target, ctx.run, shard)
        self.shard = shard
        self._seq = 0
        self._attempt = uuid.uuid4().hex[:12]
        self.units_embedded = 0
        self.units_reused = 0
        self._lock = threading.Lock()
        self._prefix: tuple[np.ndarray, int] | None = None
        self._cut: dict[str, list[str]] = {}

    def units_of(self, text: str) -> list[str]:
        """The units of one chunk text (kept until its batch is composed: :meth:`missing` and :meth:`compose`
        ask for the same texts)."""
        got = self._cut.get(text)
        if got is None:
            got = self._cut[text] = unit_texts(text, self.ctx.pipeline.tokenizer, self.spec)
        return got

    def _prefix_part(self) -> tuple[np.ndarray, int]:
        if self._prefix is None:
            prefix = self.ctx.cfg.vector.prefix
            if self.exact and prefix:
                sums, counts = self.ctx.embedder.token_sums([prefix])
                self._prefix = (sums[0], int(counts[0]))
            else:
                self._prefix = (np.zeros(self.ctx.embedder.dimension, dtype=np.float64), 0)
        return self._prefix

    def embed_units(self, units: list[str], call: Callable[[list[str]], Any]) -> tuple[np.ndarray, np.ndarray]:
        """Vectors and counts of ``units`` (none known): token sums (exact static) or unit vectors through
        ``call`` (the shard's timed, retried embedding call) with their tokens in the text tokenizer."""
        if self.exact:
            sums, counts = call(units)
            return sums, counts
        res = call(units)
        counts = np.asarray(self.ctx.pipeline.tokenizer.count_batch(units), dtype=np.int64)
        return np.asarray(res.vectors, dtype=np.float32), counts

    def missing(self, chunks: Sequence[str]) -> list[str]:
        """The distinct units of ``chunks`` that are neither in the part nor embedded in this run, in order."""
        out: dict[str, str] = {}
        for c in chunks:
            for u in self.units_of(c):
                fp = fingerprint(self.vid, u)
                if fp not in self.known and fp not in self.added and fp not in out:
                    out[fp] = u
        return list(out.values())

    def remember(self, units: list[str], vectors: np.ndarray, counts: np.ndarray) -> None:
        """Keep embedded units, and store them under the run before the chunks composed of them are written."""
        dtype = np.float64 if self.exact else np.float32  # exact sums need float64; a model's vector is float32
        new = {fingerprint(self.vid, u): (np.asarray(v, dtype=dtype), int(n)) for u, v, n in zip(units, vectors, counts)}
        with self._lock:
            self.added.update(new)
            self.units_embedded += len(units)
            self._seq += 1
            seq = f"{self._attempt}-{self._seq:06d}"
        if new:
            self.ctx.fence()
            write_run_units(self.ctx.state, self.ctx.index, self.ctx.target, self.ctx.run, self.shard, seq, new)

    def compose(self, chunks: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        """Composed vectors of ``chunks`` (every unit known), and the rows of chunks over the model's token
        limit (exact static only), which the caller embeds whole."""
        dim = self.ctx.embedder.dimension
        out = np.zeros((len(chunks), dim), dtype=np.float64)
        counts = np.zeros(len(chunks), dtype=np.int64)
        p_sum, p_count = self._prefix_part()
        for i, c in enumerate(chunks):
            acc = p_sum.copy()
            n = p_count
            for u in self.units_of(c):
                fp = fingerprint(self.vid, u)
                v, k = self.added[fp] if fp in self.added else self.known[fp]
                if fp in self.known and fp not in self.added:
                    self.units_reused += 1
                acc += v if self.exact else k * v.astype(np.float64)
                n += k
            out[i], counts[i] = acc, n
            self._cut.pop(c, None)
        if self.exact:
            limit = getattr(self.ctx.embedder, "max_tokens", None)
            over = [i for i in range(len(chunks)) if limit and counts[i] > limit]
            return self.ctx.embedder.vectors_of_sums(out, counts), over
        if self.ctx.cfg.vector.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
        else:
            out = np.divide(out, counts[:, None], out=np.zeros_like(out), where=counts[:, None] > 0)
        return out.astype(np.float32), []

    def part(self) -> dict[str, tuple[np.ndarray, int]]:
        """What the shard's unit part holds after this run: the part read, and every unit embedded."""
        return {**self.known, **self.added}
