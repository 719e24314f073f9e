"""The text pipeline of one config: document → extract → normalise → chunk → fingerprint → point ids.

Shared by ``reindex chunk``, the planner, apply and measure, so that every part of the tool cuts and
fingerprints text identically."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reindex.adapters.chunkers import make_chunker
from reindex.adapters.chunkers.base import Chunk, Chunker
from reindex.adapters.chunkers.sticky import Rechunked, StickyConfig, rechunk_document
from reindex.domain.config import TextHalf, chunker_spec
from reindex.errors import ChunkerError
from reindex.domain.identity import fingerprint, point_ids
from reindex.adapters.sources.base import Document
from reindex.adapters.sources.extract import extract_text, normalise
from reindex.adapters.tokenizers import Tokenizer, load_tokenizer

__all__ = ["ChunkRecord", "TextPipeline"]


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
        self._tokenizer = tokenizer
        self._chunker: Chunker | None = None
        self.spec = chunker_spec(text.chunker)
        self._sticky: StickyConfig | None = None

    # The tokenizer (and the chunker that counts with it) is loaded when the first text is cut, not before: a
    # plan or sync that finds nothing changed reads no text and need not pay it (~0.06 CPU-s for MiniLM's).

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.text.tokenizer)
        return self._tokenizer

    @property
    def chunker(self) -> Chunker:
        if self._chunker is None:
            self._chunker = make_chunker(self.text.chunker, self.tokenizer)
        return self._chunker

    def document_text(self, doc: Document) -> str:
        """The normalised text of a document (what chunk offsets refer to)."""
        return normalise(extract_text(doc, self.text.extractor), self.text.normaliser)

    def chunk_text(self, doc_id: str, text: str) -> list[ChunkRecord]:
        """Chunk an already normalised text and attach fingerprints and point ids."""
        try:
            chunks = self.chunker.chunk(text)
        except ChunkerError as err:
            raise ChunkerError(f"document {doc_id!r}: {err}") from None  # name the document, not just the splitter
        return self.records(doc_id, chunks)

    @property
    def sticky(self) -> bool:
        """Whether edited documents are re-chunked against their previous chunks (``text.rechunk: sticky``)."""
        return self.text.rechunk.mode == "sticky"

    def rechunk_text(self, doc_id: str, text: str, previous: Sequence[str]) -> list[ChunkRecord]:
        """Chunk records of an edited document's normalised text given its previous version's chunk
        texts in ordinal order (see :meth:`rechunk_detail`)."""
        return self.rechunk_detail(doc_id, text, previous)[0]

    def rechunk_detail(self, doc_id: str, text: str, previous: Sequence[str]) -> tuple[list[ChunkRecord], Rechunked | None]:
        """``(records, how)`` of an edited document's normalised text given its previous version's chunk
        texts in ordinal order, taken from a population with the *same text id*. With
        ``text.rechunk.mode: sticky`` previous chunks that survive are kept and only the gaps are cut
        (:func:`reindex.adapters.chunkers.sticky.rechunk_document`, with its drift control; ``how`` says what was
        kept, re-cut and how far the result drifted); otherwise, or with no previous chunks, the same as
        :meth:`chunk_text` and ``how`` is None. Deterministic in (previous, text, config), so planning and
        apply get the same records from the same live chunk texts."""
        if not self.sticky or not previous:
            return self.chunk_text(doc_id, text), None
        if self._sticky is None:
            self._sticky = StickyConfig.of(self.text.chunker, self.text.rechunk)
        done = rechunk_document(list(previous), text, self.chunker, self.tokenizer, self._sticky)
        return self.records(doc_id, list(done.chunks)), done

    def records(self, doc_id: str, chunks: list[Chunk]) -> list[ChunkRecord]:
        """``chunks`` of document ``doc_id`` with their fingerprints and point ids (the one formula: a chunk
        cut here and one rebuilt from a plan's carried chunks get the same record)."""
        fps = [fingerprint(self.vector_id, c.text) for c in chunks]
        pids = point_ids(doc_id, fps)
        return [
            ChunkRecord(doc_id, c.ordinal, c.start, c.end, c.tokens, c.text, fp, pid)
            for c, fp, pid in zip(chunks, fps, pids)
        ]

    def chunk_document(self, doc: Document) -> list[ChunkRecord]:
        """Chunks of one document."""
        return self.chunk_text(doc.doc_id, self.document_text(doc))
