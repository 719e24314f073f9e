"""Unit parts (``vector.compose: units``, issue 45): what each unit of a population's chunks contributes to a
chunk's vector, kept in the state beside the chunk manifest, one part per manifest part, and the units a run
embedded for a batch of a shard (stored before that batch's points, so a resumed shard takes them). Keys are
:class:`reindex.books.layout.Books`'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reindex.adapters.stores.objects import ObjectStore
from reindex.books.layout import Books
from reindex.errors import StateError

__all__ = ["UnitPart", "read_run_units", "read_unit_part", "run_units_key", "unit_part_key", "unit_part_keys",
           "unit_parts_bytes", "write_run_units", "write_unit_part"]


@dataclass(frozen=True)
class UnitPart:
    """A unit part: per unit fingerprint (``fingerprint(vector id, unit text)``) a vector — a static model's
    float64 token sum, or a model's float32 unit vector — and a count: the tokens summed (static) or the unit's
    tokens in the text tokenizer (the weight of a token-weighted mean)."""

    keys: tuple[str, ...]
    vectors: Any  # numpy array (n, dimension)
    counts: Any  # numpy int64 array (n,)

    def as_dict(self) -> dict[str, tuple[Any, int]]:
        return {k: (self.vectors[i], int(self.counts[i])) for i, k in enumerate(self.keys)}


def unit_part_key(index: str, collection: str, part: str) -> str:
    return Books(None, index).unit_part_key(collection, part)


def _unit_bytes(units: dict[str, tuple[Any, int]]) -> bytes:
    import io

    import numpy as np

    keys = sorted(units)
    dim = len(next(iter(units.values()))[0]) if units else 0
    vecs = np.stack([np.asarray(units[k][0]) for k in keys]) if keys else np.zeros((0, dim))
    buf = io.BytesIO()
    np.savez(buf, keys=np.asarray(keys, dtype="S32"), vectors=vecs,
             counts=np.asarray([units[k][1] for k in keys], dtype=np.int64))
    return buf.getvalue()


def _unit_of_bytes(store: ObjectStore, key: str, data: bytes) -> UnitPart:
    import io

    import numpy as np

    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return UnitPart(tuple(k.decode("ascii") for k in z["keys"].tolist()), z["vectors"], z["counts"])
    except (OSError, ValueError, KeyError) as err:
        raise StateError(f"{store.describe()}/{key}: not a readable unit part ({err}); delete it and re-run the apply "
                         "(the units of its chunks are then embedded again once)") from None


def write_unit_part(store: ObjectStore, index: str, collection: str, part: str,
                    units: dict[str, tuple[Any, int]]) -> str:
    """Write the unit part ``part`` (sorted by fingerprint; float64 vectors stay float64)."""
    key = unit_part_key(index, collection, part)
    store.put(key, _unit_bytes(units))
    return key


def read_unit_part(store: ObjectStore, index: str, collection: str, part: str) -> UnitPart | None:
    """One unit part, None when the population has none under that name."""
    key = unit_part_key(index, collection, part)
    data = store.get(key)
    return None if data is None else _unit_of_bytes(store, key, data)


def run_units_key(index: str, collection: str, run: str, shard: int, seq: str) -> str:
    """Units a run embedded for one batch of a shard, stored before that batch's points (a resumed shard
    takes them instead of embedding them again, so its unit part equals an uninterrupted run's)."""
    return Books(None, index).run_units_key(collection, run, shard, seq)


def write_run_units(store: ObjectStore, index: str, collection: str, run: str, shard: int, seq: str,
                    units: dict[str, tuple[Any, int]]) -> None:
    store.put(run_units_key(index, collection, run, shard, seq), _unit_bytes(units))


def read_run_units(store: ObjectStore, index: str, collection: str, run: str, shard: int) -> dict[str, tuple[Any, int]]:
    """Every unit a run stored for ``shard`` (any attempt)."""
    out: dict[str, tuple[Any, int]] = {}
    prefix = Books(None, index).run_units_prefix(collection, run, shard)
    for key in sorted(store.list(prefix)):
        data = store.get(key)
        if data is not None:
            out.update(_unit_of_bytes(store, key, data).as_dict())
    return out


def unit_part_keys(store: ObjectStore, index: str, collection: str, part: str) -> frozenset[str]:
    """The unit fingerprints of one unit part (empty when there is none): what a plan prices against."""
    got = read_unit_part(store, index, collection, part)
    return frozenset(got.keys) if got is not None else frozenset()


def unit_parts_bytes(store: ObjectStore, index: str, collection: str) -> int:
    """Bytes of a population's unit parts."""
    total = 0
    for key in store.list(Books(None, index).units_prefix(collection)):
        data = store.get(key)
        total += len(data) if data is not None else 0
    return total
