"""What a plan with ``vector.compose: units`` prices: the units apply embeds (issue 45).

Apply composes every chunk it has to embed from its units (:mod:`reindex.engine.compose`) and embeds a unit only
when its fingerprint is neither in the shard's unit part (in place: the live population's part of the same name;
beside: the live population's, when its shard count is the new one's) nor embedded earlier in the same shard's
run. The tally replays exactly that per shard over the chunks the plan says are embedded (after apply's
batching: :class:`reindex.planner._work.ApplyBatches`), so the plan's tokens to embed are the tokens of those
units in the text tokenizer — what apply counts. A chunk over the model's limit that apply embeds whole is not
known to the plan (the static model's limit is 512 tokens, above every built-in chunker's cap)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from reindex.adapters.chunkers.units import parse_unit_spec, unit_texts
from reindex.adapters.tokenizers import Tokenizer
from reindex.books.layout import shard_name
from reindex.books.manifests import shard_of
from reindex.domain.identity import fingerprint

__all__ = ["UNIT_PART_BYTES_PER_UNIT", "UnitTally"]

#: Bytes a unit part holds per unit beyond its vector: the 32-character fingerprint (ASCII) and the count.
UNIT_PART_BYTES_PER_UNIT = 32 + 8


@dataclass
class UnitTally:
    """Per shard, the distinct units of the chunks the plan embeds, those known from the unit part, and tokens."""

    spec: str
    vector_id: str
    tokenizer: Tokenizer
    shards: int
    known: Callable[[str], frozenset[str]] | None  # part name → unit fingerprints of the part apply reads
    vector_bytes: int  # bytes of one stored unit vector (dimension × 8: float64 sums of a static model; else × 4)
    chunks: int = 0  # chunk texts composed
    _seen: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))  # shard → fp → tokens
    _reused: Counter = field(default_factory=Counter)
    _units: int = 0  # units of composed chunks (with repeats)

    def add(self, doc_id: str, texts: list[str]) -> None:
        """The chunk texts of ``doc_id`` the plan embeds."""
        shard = shard_of(doc_id, self.shards)
        known = self.known(shard_name(shard)) if self.known is not None else frozenset()
        seen = self._seen[shard]
        spec = parse_unit_spec(self.spec)
        fresh: dict[str, str] = {}
        for text in texts:
            self.chunks += 1
            for u in unit_texts(text, self.tokenizer, spec):
                self._units += 1
                fp = fingerprint(self.vector_id, u)
                if fp in known:
                    self._reused[shard] += 1
                elif fp not in seen and fp not in fresh:
                    fresh[fp] = u
        if fresh:
            for (fp, _), n in zip(fresh.items(), self.tokenizer.count_batch(list(fresh.values()))):
                seen[fp] = n

    def tokens_by_shard(self) -> dict[int, int]:
        return {s: sum(v.values()) for s, v in self._seen.items()}

    def as_dict(self) -> dict:
        embed = sum(len(v) for v in self._seen.values())
        tokens = sum(self.tokens_by_shard().values())
        return {"mode": "units", "unit": self.spec, "chunks_composed": self.chunks, "units": self._units,
                "units_reused": sum(self._reused.values()), "units_to_embed": embed, "tokens_to_embed": tokens,
                "unit_part_bytes_added": embed * (self.vector_bytes + UNIT_PART_BYTES_PER_UNIT)}
