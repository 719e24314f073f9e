"""Retrieval quality on the same chunkings: queries and corpus, an on-disk embedding cache, chunk
spans, packing into a token budget, and evidence recall / Hit@5 / MRR / nDCG@5."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reindex.errors import EvaluationError, MeasureError
from reindex.decisions.evaluation import Query, dedupe, mrr, ndcg_at_k, read_queries, recall_at_k
from reindex.measure._rc import AnyChunker, Counter
from reindex.measure._stats import rounded
from reindex.foundation.tables import TableError, read_parquet

__all__ = ["PACK_BUDGET", "PACK_CANDIDATES", "EmbeddingCache", "Query", "RetrievalResult", "chunk_spans",
           "embed_cached", "evaluate_retrieval", "load_corpus", "load_queries", "retrieval_pool"]

PACK_BUDGET = 2048
PACK_CANDIDATES = 100



def load_queries(path: str | Path) -> list[Query]:
    """Queries in the corpus's ``queries.jsonl`` format: :func:`reindex.decisions.evaluation.read_queries`, the one
    reader (the cutover's), as a :class:`MeasureError` naming the file and line."""
    try:
        return read_queries(path)
    except EvaluationError as err:
        raise MeasureError(str(err)) from None


def load_corpus(path: str | Path) -> dict[str, str]:
    """``doc_path → text`` of a snapshot Parquet (``doc_path``/``doc_id`` and ``text`` columns)."""
    p = Path(path)
    if not p.is_file():
        raise MeasureError(f"{p}: corpus file not found (give the snapshot .parquet the queries refer to)")
    try:
        t = read_parquet(p)
    except TableError as err:
        raise MeasureError(f"{p}: cannot read Parquet: {err}") from None
    key = "doc_path" if "doc_path" in t else "doc_id"
    if key not in t or "text" not in t:
        raise MeasureError(f"{p}: need a doc_path (or doc_id) and a text column")
    return dict(zip(t[key], t["text"]))


class EmbeddingCache:
    """Vectors by fingerprint on disk: ``DIR/<vector id prefix>/part-*.npz`` (keys + float32
    vectors), appended atomically (write temp, rename); loaded whole at start."""

    def __init__(self, root: str | Path, vector_id: str) -> None:
        self.dir = Path(root) / vector_id[:16]
        self.vectors: dict[str, np.ndarray] = {}
        if self.dir.is_dir():
            for part in sorted(self.dir.glob("part-*.npz")):
                with np.load(part, allow_pickle=False) as z:
                    for k, v in zip(z["keys"].tolist(), z["vectors"]):
                        self.vectors[k] = v

    def put(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        if not keys:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".tmp-{uuid.uuid4().hex}.npz"
        np.savez(tmp, keys=np.asarray(keys), vectors=np.asarray(vectors, dtype=np.float32))
        tmp.rename(self.dir / f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.npz")
        for k, v in zip(keys, vectors):
            self.vectors[k] = v


def embed_cached(texts: Sequence[str], fingerprints: Sequence[str], embed: Callable[[list[str]], np.ndarray],
                 cache: EmbeddingCache | None, dim: int) -> tuple[np.ndarray, int]:
    """Vectors of ``texts`` (cached by fingerprint); returns (matrix, texts actually embedded)."""
    have = cache.vectors if cache is not None else {}
    todo: dict[str, str] = {}
    for t, fp in zip(texts, fingerprints):
        if fp not in have and fp not in todo:
            todo[fp] = t
    fresh: dict[str, np.ndarray] = {}
    if todo:
        vecs = embed(list(todo.values()))
        fresh = dict(zip(todo.keys(), vecs))
        if cache is not None:
            cache.put(list(todo.keys()), np.asarray(vecs))
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for i, fp in enumerate(fingerprints):
        out[i] = fresh[fp] if fp in fresh else have[fp]
    return out, len(todo)


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """Retrieval quality of one chunker on one language's queries."""

    lang: str
    queries: int
    pool_docs: int
    chunks: int
    evidence_recall: float
    hit_at_5: float
    mrr: float
    ndcg_at_5: float
    embedded: int
    note: str = ""

    def as_dict(self) -> dict:
        return {"lang": self.lang, "queries": self.queries, "pool_docs": self.pool_docs, "chunks": self.chunks,
                "evidence_recall": rounded(self.evidence_recall), "hit_at_5": rounded(self.hit_at_5), "mrr": rounded(self.mrr),
                "ndcg_at_5": rounded(self.ndcg_at_5), "embedded": self.embedded, "note": self.note}


def chunk_spans(chunker: AnyChunker, text: str) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` of every input; strings are located in ``text`` in order."""
    out = []
    cursor = 0
    for c in chunker.chunk(text):
        if isinstance(c, str):
            at = text.find(c, cursor)
            if at < 0:
                at = text.find(c)
            start, end = (at, at + len(c)) if at >= 0 else (-1, -1)
            if at >= 0:
                cursor = at + len(c)
            out.append((start, end, c))
        else:
            out.append((c.start, c.end, c.text))
    return out


def _packed_texts(doc_text: str, spans: list[tuple[int, int, str]]) -> list[str]:
    """The packed inputs of one document, adjacent ones joined through the document text between them."""
    located = sorted((s, e) for s, e, _ in spans if s >= 0)
    out = [t for s, _, t in spans if s < 0]
    run: list[int] | None = None
    for s, e in located:
        if run is not None and (s <= run[1] or doc_text[run[1]:s].isspace()):
            run[1] = max(run[1], e)
        else:
            if run is not None:
                out.append(doc_text[run[0]:run[1]])
            run = [s, e]
    if run is not None:
        out.append(doc_text[run[0]:run[1]])
    return out


def retrieval_pool(corpus: dict[str, str], queries: Sequence[Query], pool: int | None, seed: int = 0) -> list[str]:
    """Doc paths of the pool: every query's document, plus a seeded random sample of the others up to
    ``pool`` documents in all (every document when ``pool`` is None)."""
    qdocs = sorted({q.doc_path for q in queries if q.doc_path in corpus})
    if pool is None or pool >= len(corpus):
        return sorted(corpus)
    others = sorted(set(corpus) - set(qdocs))
    k = max(0, pool - len(qdocs))
    return sorted([*qdocs, *random.Random(seed).sample(others, min(k, len(others)))])


def evaluate_retrieval(
    chunker: AnyChunker, corpus: dict[str, str], doc_paths: Sequence[str], queries: Sequence[Query], *,
    embed: Callable[[list[str]], np.ndarray], dim: int, fingerprint: Callable[[str], str], count: Counter,
    cache: EmbeddingCache | None, lang: str, budget: int = PACK_BUDGET, candidates: int = PACK_CANDIDATES,
    note: str = "",
) -> RetrievalResult:
    """Chunk the pool, embed (cached by fingerprint), rank every chunk by exact dot product, pack
    whole chunks (first fit in rank order) into ``budget`` tokens from the top ``candidates``; a
    query's evidence is recalled when it lies inside the packed text of its document. Hit@5, MRR and
    nDCG@5 are at document level (a document ranks where its best chunk ranks; binary relevance)."""
    spans: list[tuple[int, int, str]] = []
    owners: list[str] = []
    for path in doc_paths:
        for s in chunk_spans(chunker, corpus[path]):
            spans.append(s)
            owners.append(path)
    texts = [t for _, _, t in spans]
    fps = [fingerprint(t) for t in texts]
    matrix, embedded = embed_cached(texts, fps, embed, cache, dim)
    distinct = list(dict.fromkeys(texts))
    tok = dict(zip(distinct, count(distinct))) if distinct else {}
    qs = [q for q in queries if q.doc_path in set(doc_paths)]
    qfps = ["query\0" + fingerprint(q.text) for q in qs]
    qmat, _ = embed_cached([q.text for q in qs], qfps, embed, cache, dim)
    owners_arr = np.asarray(owners, dtype=object)
    recall = hits = rr = ndcg = 0.0
    for qi, q in enumerate(qs):
        scores = matrix @ qmat[qi] if matrix.shape[0] else np.zeros(0)
        order = np.argsort(-scores, kind="stable")
        used = 0
        packed: list[int] = []
        for i in order[:candidates].tolist():
            n = tok[texts[i]]
            if used + n <= budget:
                packed.append(i)
                used += n
        mine = [spans[i] for i in packed if owners[i] == q.doc_path]
        if any(e in t for e in q.evidence for t in _packed_texts(corpus[q.doc_path], mine)):
            recall += 1
        ranked_docs = dedupe(owners_arr[order].tolist())  # a document ranks where its best chunk ranks
        hits += recall_at_k(ranked_docs, set(q.relevant), 5)
        rr += mrr(ranked_docs, set(q.relevant))
        ndcg += ndcg_at_k(ranked_docs, set(q.relevant), 5)
    n = len(qs) or 1
    return RetrievalResult(lang, len(qs), len(doc_paths), len(spans), recall / n, hits / n, rr / n, ndcg / n, embedded, note)
