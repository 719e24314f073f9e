"""Chunk a file or summarise a whole source with the configured (or a given) chunker."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from reindex.domain.config import (
    PipelineConfig,
    SourceConfig,
    load_config,
    parse_chunker_spec,
    with_chunker,
)
from reindex.errors import SourceError
from reindex.domain.identity import resolve_config, vector_id
from reindex.adapters.pipeline import ChunkRecord, TextPipeline
from reindex.adapters.sources import open_source
from reindex.adapters.sources.base import Document, ScanReport




from reindex.context import backends
from reindex.usecases.configure import model_input_limit

__all__ = ["ChunkSummary", "chunk_path", "documents_of", "summarize_chunks"]


_SINGLE_FILE_SUFFIXES = {".txt", ".md", ".rst", ".html", ".htm", ".markdown", ".text"}


@dataclass(frozen=True, slots=True)
class ChunkSummary:
    """Chunk-length summary of one chunker over a set of documents."""

    chunker: str
    documents: int
    chunks: int
    tokens: int
    median_tokens: float
    p10_tokens: float
    p90_tokens: float
    max_tokens: int
    over_model_limit: int
    bad_documents: int
    bad_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "chunker": self.chunker,
            "documents": self.documents,
            "chunks": self.chunks,
            "tokens": self.tokens,
            "median_tokens": self.median_tokens,
            "p10_tokens": self.p10_tokens,
            "p90_tokens": self.p90_tokens,
            "max_tokens": self.max_tokens,
            "over_model_limit": self.over_model_limit,
            "bad_documents": self.bad_documents,
            "bad_reasons": dict(self.bad_reasons),
        }


def _pipeline_config(config_path: str | Path | None, chunker: str | None) -> PipelineConfig:
    if config_path is not None:
        cfg = load_config(config_path)
    else:
        cfg = PipelineConfig(index="adhoc", source=SourceConfig(uri="."))
    if chunker:
        cfg = with_chunker(cfg, parse_chunker_spec(chunker))
    return resolve_config(cfg, backends.model_files)


def documents_of(path: str | Path, cfg: PipelineConfig, report: ScanReport) -> Iterator[Document]:
    p = Path(str(path))
    if not str(path).startswith("s3://") and p.is_file() and p.suffix.lower() in _SINGLE_FILE_SUFFIXES:
        from reindex.adapters.sources.base import BadDocument, check_data

        data = p.read_bytes()
        problem = check_data(data)
        if problem:
            report.add_bad(BadDocument(p.name, problem))
            return
        doc = Document.of(p.name, data)
        report.add(doc)
        yield doc
        return
    if not str(path).startswith("s3://") and not p.exists():
        raise SourceError(f"{path}: no such file or directory")
    src = open_source(cfg.source.model_copy(update={"uri": str(path)}))
    yield from src.scan(report)


def chunk_path(
    path: str | Path, *, config_path: str | Path | None = None, chunker: str | None = None
) -> tuple[list[ChunkRecord], ScanReport, PipelineConfig]:
    """Chunk one file, or every document of a source, with the config's (or ``chunker``'s) text half."""
    cfg = _pipeline_config(config_path, chunker)
    pipe = TextPipeline(cfg.text, vector_id(cfg.vector))
    report = ScanReport()
    records: list[ChunkRecord] = []
    for doc in documents_of(path, cfg, report):
        records.extend(pipe.chunk_document(doc))
    return records, report, cfg


def summarize_chunks(
    path: str | Path, *, config_path: str | Path | None = None, chunker: str | None = None
) -> ChunkSummary:
    """Chunk a whole source and summarise chunk lengths (streaming: keeps only token counts)."""
    cfg = _pipeline_config(config_path, chunker)
    pipe = TextPipeline(cfg.text, vector_id(cfg.vector))
    report = ScanReport()
    lengths: list[int] = []
    docs = 0
    for doc in documents_of(path, cfg, report):
        docs += 1
        lengths.extend(c.tokens for c in pipe.chunker.chunk(pipe.document_text(doc)))
    limit = model_input_limit(cfg.vector)
    qs = statistics.quantiles(lengths, n=10, method="inclusive") if len(lengths) >= 2 else [float(sum(lengths))] * 9
    return ChunkSummary(
        chunker=pipe.spec,
        documents=docs,
        chunks=len(lengths),
        tokens=sum(lengths),
        median_tokens=float(statistics.median(lengths)) if lengths else 0.0,
        p10_tokens=float(qs[0]),
        p90_tokens=float(qs[-1]),
        max_tokens=max(lengths, default=0),
        over_model_limit=sum(1 for n in lengths if limit and n > limit),
        bad_documents=len(report.bad),
        bad_reasons=dict(sorted(report.by_reason.items())),
    )
