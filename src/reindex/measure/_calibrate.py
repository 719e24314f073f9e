"""Length calibration (``--calibrate``): a held-out split of the pairs, the size whose median chunk
length hits a target, and scaling a configured chunker to a size."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from reindex.errors import ChunkerError
from reindex.measure._pairs import RevisionPair
from reindex.measure._rc import AnyChunker, Counter, chunk_texts

__all__ = ["DEFAULT_CHUNKERS", "DEFAULT_TARGET_MEDIAN", "calibrate_size", "calibration_split", "median_chunk_tokens",
           "scale_chunker", "size_of"]

DEFAULT_TARGET_MEDIAN = 250

DEFAULT_CHUNKERS = ("fixed", "recursive", "cdc", "paragraph", "anchored")



def calibration_split(pairs: Sequence[RevisionPair], share: float = 0.10) -> tuple[list[RevisionPair], list[RevisionPair]]:
    """(held-out calibration pairs, evaluation pairs): a deterministic ``share`` of documents chosen
    by a hash of their doc key, so a document is never on both sides."""
    def held(p: RevisionPair) -> bool:
        h = int.from_bytes(hashlib.blake2b(p.doc_key.encode(), digest_size=8).digest(), "little")
        return (h % 10_000) < share * 10_000

    cal = [p for p in pairs if held(p)]
    return cal, [p for p in pairs if not held(p)]


def median_chunk_tokens(chunker: AnyChunker, texts: Sequence[str], count: Counter) -> float:
    """Median model-token length of the inputs ``chunker`` makes of ``texts``."""
    lengths: list[int] = []
    for t in texts:
        pieces = chunk_texts(chunker, t)
        if pieces:
            lengths.extend(count(pieces))
    return float(statistics.median(lengths)) if lengths else 0.0


def calibrate_size(
    build: Callable[[int], AnyChunker], texts: Sequence[str], count: Counter, *, target: float = DEFAULT_TARGET_MEDIAN,
    lo: int = 8, hi: int = 4096, tolerance: float = 0.02,
) -> tuple[int, float]:
    """The size whose chunks have a median length closest to ``target`` on ``texts`` (binary search,
    assuming the median grows with the size); returns (size, median)."""
    best: tuple[float, int, float] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        med = median_chunk_tokens(build(mid), texts, count)
        gap = abs(med - target) / target
        if best is None or gap < best[0]:
            best = (gap, mid, med)
        if gap <= tolerance:
            break
        if med < target:
            lo = mid + 1
        else:
            hi = mid - 1
    assert best is not None
    return best[1], best[2]


def scale_chunker(cfg: Any, size: int) -> Any:
    """``cfg`` with its size parameter set to ``size``: ``size`` for the token-window kinds (and
    anchored's explicit ``cap`` scaled along), ``min``/``max``/``cap`` scaled together for cdc."""
    from reindex.domain.config import CHUNKER_KINDS

    model = type(cfg)
    data = cfg.model_dump()
    if cfg.kind == "cdc":
        f = size / cfg.max
        data.update(min=max(1, round(cfg.min * f)), max=size, cap=max(size, round(cfg.cap * f)))
    elif "size" in model.model_fields and cfg.kind != "sentence":
        if getattr(cfg, "cap", None) is not None:
            data["cap"] = max(size, round(cfg.cap * size / cfg.size))
        data["size"] = size
    else:
        raise ChunkerError(
            f"--calibrate cannot scale {cfg.kind} chunkers (no size parameter); calibratable kinds: "
            f"{', '.join(k for k, m in sorted(CHUNKER_KINDS.items()) if k == 'cdc' or ('size' in m.model_fields and k != 'sentence'))}"
        )
    return model.model_validate(data)


def size_of(cfg: Any) -> int:
    """The value --calibrate searches over (``max`` for cdc, ``size`` otherwise)."""
    return int(cfg.max if cfg.kind == "cdc" else cfg.size)
