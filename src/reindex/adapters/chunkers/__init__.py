"""Chunkers: one module per family behind the :class:`Chunker` protocol. All are pure, stateless and
deterministic, tokenise each document once, and (except overlapping ones) partition it exactly."""

from __future__ import annotations

from reindex.adapters.chunkers.anchored import AnchoredChunker
from reindex.adapters.chunkers.base import Chunk, Chunker
from reindex.adapters.chunkers.cdc import CdcChunker
from reindex.adapters.chunkers.external import CallableChunker, LangchainChunker
from reindex.adapters.chunkers.fixed import FixedChunker
from reindex.adapters.chunkers.fixed_chars import FixedCharsChunker
from reindex.adapters.chunkers.markdown import MarkdownChunker
from reindex.adapters.chunkers.paragraph import ParagraphChunker
from reindex.adapters.chunkers.recursive import RecursiveChunker
from reindex.adapters.chunkers.sentence import SentenceChunker
from reindex.adapters.chunkers.sliding import SlidingChunker, sliding_count
from reindex.domain.config import (
    AnchoredChunkerConfig,
    CallableChunkerConfig,
    CdcChunkerConfig,
    FixedCharsChunkerConfig,
    FixedChunkerConfig,
    LangchainChunkerConfig,
    MarkdownChunkerConfig,
    ParagraphChunkerConfig,
    RecursiveChunkerConfig,
    SentenceChunkerConfig,
    SlidingChunkerConfig,
    parse_chunker_spec,
)
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import Tokenizer, load_tokenizer

__all__ = [
    "AnchoredChunker",
    "CallableChunker",
    "CdcChunker",
    "Chunk",
    "Chunker",
    "FixedCharsChunker",
    "FixedChunker",
    "LangchainChunker",
    "MarkdownChunker",
    "ParagraphChunker",
    "RecursiveChunker",
    "SentenceChunker",
    "SlidingChunker",
    "is_partitioning",
    "make_chunker",
    "sliding_count",
]

_CHUNKERS: dict[type, type] = {
    FixedChunkerConfig: FixedChunker,
    SlidingChunkerConfig: SlidingChunker,
    FixedCharsChunkerConfig: FixedCharsChunker,
    SentenceChunkerConfig: SentenceChunker,
    ParagraphChunkerConfig: ParagraphChunker,
    RecursiveChunkerConfig: RecursiveChunker,
    CdcChunkerConfig: CdcChunker,
    MarkdownChunkerConfig: MarkdownChunker,
    AnchoredChunkerConfig: AnchoredChunker,
    LangchainChunkerConfig: LangchainChunker,
    CallableChunkerConfig: CallableChunker,
}


def make_chunker(cfg_or_spec: object, tokenizer: Tokenizer | str) -> Chunker:
    """A chunker for a config model (``RecursiveChunkerConfig(size=256)``) or a spec string
    (``"recursive:size=256"``), counting tokens with ``tokenizer`` (a Tokenizer or its name)."""
    cfg = parse_chunker_spec(cfg_or_spec) if isinstance(cfg_or_spec, str) else cfg_or_spec
    cls = _CHUNKERS.get(type(cfg))
    if cls is None:
        raise ChunkerError(
            f"cannot build a chunker from {type(cfg_or_spec).__name__}; give a chunker config or a spec like 'recursive:size=400'"
        )
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
    return cls(config=cfg, tokenizer=tok)


def is_partitioning(cfg: object) -> bool:
    """Whether a chunker config's chunks partition every non-blank document (no overlap)."""
    if isinstance(cfg, (LangchainChunkerConfig, CallableChunkerConfig)):
        return False  # an external splitter may overlap, strip or drop text: nothing is promised
    overlap = getattr(cfg, "overlap", 0)
    return not overlap
