"""The text pipeline of one config: document → extract → normalise → chunk → fingerprint → point ids.

Shared by ``reindex chunk``, the planner, apply and measure, so that every part of the tool cuts and
fingerprints text identically."""

from __future__ import annotations

from dataclasses import dataclass

from reindex.chunkers import make_chunker
from reindex.chunkers.base import Chunk, Chunker
from reindex.config import PipelineConfig, TextHalf, chunker_spec
from reindex.identity import fingerprint, point_ids
from reindex.sources.base import Document
from reindex.sources.extract import extract_text, normalise
from reindex.tokenizers import Tokenizer, load_tokenizer


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A chunk of one document with its identity."""

    doc_id: str
    ordinal: int
    start: int
    end: int
    tokens: int
    text: str
    fingerprint: str
    point_id: str

    def as_dict(self) -> dict:
        return {
            "doc_id": self.doc_id,
            "ordinal": self.ordinal,
            "start": self.start,
            "end": self.end,
            "tokens": self.tokens,
            "fingerprint": self.fingerprint,
            "point_id": self.point_id,
            "text": self.text,
        }


class TextPipeline:
    """Extract, normalise, chunk and fingerprint documents for one (resolved) text half + vector id."""

    def __init__(self, text: TextHalf, vector_id: str, tokenizer: Tokenizer | None = None) -> None:
        self.text = text
        self.vector_id = vector_id
        self.tokenizer = tokenizer or load_tokenizer(text.tokenizer)
        self.chunker: Chunker = make_chunker(text.chunker, self.tokenizer)
        self.spec = chunker_spec(text.chunker)

    @classmethod
    def for_config(cls, cfg: PipelineConfig, vector_id: str) -> "TextPipeline":
        return cls(cfg.text, vector_id)

    def document_text(self, doc: Document) -> str:
        """The normalised text of a document (what chunk offsets refer to)."""
        return normalise(extract_text(doc, self.text.extractor), self.text.normaliser)

    def chunk_text(self, doc_id: str, text: str) -> list[ChunkRecord]:
        """Chunk an already normalised text and attach fingerprints and point ids."""
        chunks: list[Chunk] = self.chunker.chunk(text)
        fps = [fingerprint(self.vector_id, c.text) for c in chunks]
        pids = point_ids(doc_id, fps)
        return [
            ChunkRecord(doc_id, c.ordinal, c.start, c.end, c.tokens, c.text, fp, pid)
            for c, fp, pid in zip(chunks, fps, pids)
        ]

    def chunk_document(self, doc: Document) -> list[ChunkRecord]:
        """Chunks of one document."""
        return self.chunk_text(doc.doc_id, self.document_text(doc))
