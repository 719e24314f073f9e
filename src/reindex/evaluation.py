"""Old vs new on identical queries: overlap@k, rank-biased overlap, recall@k, nDCG@k, MRR, evidence
recall in a token budget, latency; paired bootstrap intervals for every new − old difference.

The metric functions are pure; :func:`evaluate` runs queries against two collections of a store."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from reindex.config import PayloadConfig
from reindex.errors import EvaluationError
from reindex.stats import paired_bootstrap, percentile
from reindex.stores.payload import payload_text

BUDGET_TOKENS = 2048
MAX_CANDIDATES = 100
RBO_P = 0.9




# --------------------------------------------------------------------------------------------
# Pure metrics
# --------------------------------------------------------------------------------------------


def dedupe(ids: Iterable[str]) -> list[str]:
    """First occurrence of each id, in order (chunk hits → document ranking)."""
    seen: set[str] = set()
    out = []
    for i in ids:
        if i not in seen:
            seen.add(i)
            out.append(i)
    return out


def overlap_at_k(a: Sequence[str], b: Sequence[str], k: int) -> float:
    """|top-k(a) ∩ top-k(b)| / depth, where depth = min(k, the longer list): identical rankings
    shorter than k (a small index) agree fully."""
    depth = min(k, max(len(a[:k]), len(b[:k])))
    return len(set(a[:k]) & set(b[:k])) / depth if depth else 0.0


def rbo(a: Sequence[str], b: Sequence[str], p: float = RBO_P, depth: int | None = None) -> float:
    """Extrapolated rank-biased overlap (Webber, Moffat & Zobel 2010, eq. 32) at ``depth`` (default:
    the longer list): ``(X_k/k)·p^k + (1−p)/p · Σ_{d=1..k} (X_d/d)·p^d``. 1 for identical lists."""
    k = depth or max(len(a), len(b))
    if k == 0:
        return 1.0
    total, x = 0.0, 0
    for d in range(1, k + 1):
        x = len(set(a[:d]) & set(b[:d]))  # agreement at depth d (k <= 100: quadratic is fine)
        total += (x / d) * p**d
    return (x / k) * p**k + (1 - p) / p * total


def recall_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(set(ranked[:k]) & relevant) / len(relevant) if relevant else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Binary-relevance nDCG@k: Σ rel_i / log2(i+1) over the ideal."""
    dcg = sum(1.0 / math.log2(i + 2) for i, d in enumerate(ranked[:k]) if d in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal if ideal else 0.0


def mrr(ranked: Sequence[str], relevant: set[str]) -> float:
    for i, d in enumerate(ranked):
        if d in relevant:
            return 1.0 / (i + 1)
    return 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A retrieved chunk: its document, position in the document, token count and text."""

    doc_id: str
    start: int
    end: int
    tokens: int
    text: str


def pack(candidates: Sequence[Candidate], budget: int = BUDGET_TOKENS, limit: int = MAX_CANDIDATES) -> list[Candidate]:
    """Whole chunks in rank order into a token budget, from at most ``limit`` candidates (seed 000):
    a chunk that does not fit is skipped and later, smaller ones may still fit."""
    used, out = 0, []
    for c in candidates[:limit]:
        if used + c.tokens <= budget:
            out.append(c)
            used += c.tokens
    return out


def evidence_recalled(packed: Sequence[Candidate], evidence: str) -> bool:
    """Whether ``evidence`` is fully contained in the packed text. Packed chunks of one document
    that are adjacent in it are joined first, so evidence across a chunk boundary counts when both
    chunks were packed."""
    by_doc: dict[str, list[Candidate]] = {}
    for c in packed:
        by_doc.setdefault(c.doc_id, []).append(c)
    for chunks in by_doc.values():
        chunks.sort(key=lambda c: c.start)
        span = chunks[0].text
        end = chunks[0].end
        spans = []
        for c in chunks[1:]:
            if c.start == end:
                span += c.text
            elif c.start < end:  # overlapping windows: append the part not yet covered
                span += c.text[end - c.start:]
            else:
                spans.append(span)
                span = c.text
            end = max(end, c.end)
        spans.append(span)
        if any(evidence in s for s in spans):
            return True
    return False


# --------------------------------------------------------------------------------------------
# Queries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    """A labelled query (the cutover's, the forecast's and ``reindex measure``'s): its text, the relevant
    document ids, verbatim evidence, where it came from and, when the file says, its language."""

    query_id: str
    text: str
    relevant: frozenset[str] = frozenset()  # relevant document ids
    evidence: tuple[str, ...] = ()
    source: str = "file"  # file | probe
    lang: str | None = None

    @property
    def doc_path(self) -> str | None:
        """The one relevant document of a known-item query (None when it has none or several)."""
        return next(iter(self.relevant)) if len(self.relevant) == 1 else None


def read_queries(path: str | Path) -> list[Query]:
    """JSONL: ``query`` (or ``text``), optional ``query_id``, ``doc_path``/``doc_id``/``relevant`` and ``evidence``.
    Every malformed line is an :class:`EvaluationError` naming the file, the line and what is wrong."""
    p = Path(path)
    if not p.is_file():
        raise EvaluationError(f"{p}: queries file not found")
    try:
        text_all = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise EvaluationError(f"{p}: not UTF-8 text (byte {err.start}); save the queries file as UTF-8 JSONL") from None
    except OSError as err:
        raise EvaluationError(f"{p}: cannot read the queries file ({err.strerror or err})") from None
    out = []
    for n, line in enumerate(text_all.splitlines(), 1):
        if line.strip():
            out.append(_query_of(p, n, line))
    if not out:
        raise EvaluationError(f"{p}: no queries")
    return out


def _query_of(p: Path, n: int, line: str) -> Query:
    try:
        d = json.loads(line)
    except ValueError as err:
        raise EvaluationError(f"{p}:{n}: invalid JSON ({err})") from None
    if not isinstance(d, dict):
        raise EvaluationError(f"{p}:{n}: expected a JSON object per line, got {type(d).__name__}")
    text = d.get("query") or d.get("text")
    if not text:
        raise EvaluationError(f"{p}:{n}: a query needs a 'query' field")
    if not isinstance(text, str):
        raise EvaluationError(f"{p}:{n}: 'query' must be a string, got {type(text).__name__}")
    relevant = d.get("relevant") or []
    if not isinstance(relevant, list) or not all(isinstance(r, str) for r in relevant):
        raise EvaluationError(f"{p}:{n}: 'relevant' must be a list of document ids (strings)")
    rel = set(relevant)
    for key in ("doc_path", "doc_id"):
        if d.get(key):
            if not isinstance(d[key], str):
                raise EvaluationError(f"{p}:{n}: {key!r} must be a string, got {type(d[key]).__name__}")
            rel.add(d[key])
    ev = d.get("evidence")
    evidence = tuple(ev) if isinstance(ev, list) else ((ev,) if ev else ())
    if not all(isinstance(e, str) for e in evidence):
        raise EvaluationError(f"{p}:{n}: 'evidence' must be a string or a list of strings")
    lang = d.get("lang")
    return Query(str(d.get("query_id", f"q{n}")), text, frozenset(rel), evidence,
                 lang=lang if isinstance(lang, str) and lang else None)


_SENTENCE = re.compile(r"[^\n.!?。！？]{40,240}[.!?。！？]")


# A sentence as _SENTENCE finds them: the last 40–240 characters of a run of non-terminators (no newline)
# that ends in a terminator. One pass over runs instead of _SENTENCE's retries at every position (it tries
# up to 240 characters from each start: 68 CPU-s over a million points' text).
_RUN = re.compile(r"([^\n.!?。！？]*)([.!?。！？]|\n|$)")


def sentences(text: str) -> list[str]:
    """``[m.group(0).strip() for m in _SENTENCE.finditer(text)]``, in linear time."""
    out = []
    for m in _RUN.finditer(text):
        run, end = m.group(1), m.group(2)
        if len(run) >= 40 and end not in ("", "\n"):
            out.append((run[-240:] + end).strip())
    return out


def probe_queries(docs: Iterable[tuple[str, Any]], n: int, seed: int, text: Callable[[Any], str] = lambda t: t,
                  again: Callable[[set[str]], Iterable[tuple[str, Any]]] | None = None) -> list[Query]:
    """Known-item probes: one sentence of a document (seeded choice), labelled with that document. The
    documents holding a sentence are shuffled with ``random.Random(seed)`` and the first ``n`` taken, each
    with a sentence chosen by the same generator. ``docs`` yields (doc id, item), ``text(item)`` is its text;
    only the documents' ids and sentence counts are kept, and the chosen documents are read again through
    ``again(ids)`` (default: ``docs`` once more) for their sentences: memory per document, not per sentence."""
    pool = []  # (doc id, number of sentences)
    for doc_id, item in docs:
        count = len(sentences(text(item)))
        if count:
            pool.append((doc_id, count))
    rng = random.Random(seed)
    rng.shuffle(pool)
    picks = {doc_id: rng.choice(range(count)) for doc_id, count in pool[:n]}  # the same draws as choice(list)
    chosen: dict[str, str] = {}
    for doc_id, item in (again(set(picks)) if again is not None else docs):
        if doc_id in picks and doc_id not in chosen:
            chosen[doc_id] = sentences(text(item))[picks[doc_id]]
    out = []
    for doc_id, _ in pool[:n]:
        if doc_id in chosen:  # (a document gone between the two reads has no probe)
            out.append(Query(f"probe-{len(out) + 1}", chosen[doc_id], frozenset({doc_id}), (), "probe"))
    return out


# --------------------------------------------------------------------------------------------
# Running queries on two sides
# --------------------------------------------------------------------------------------------


@dataclass
class SideResult:
    docs: list[str]
    candidates: list[Candidate]
    seconds: float
    collections: set[str] = field(default_factory=set)  # pipeline ids seen in payloads


def run_side(store: Any, collection: str, vector: Any, k: int, payload: PayloadConfig | None = None) -> SideResult:
    """One side's top candidates; chunk texts are read under ``payload``'s content key (or the default,
    or the ``text`` key of a population written before the payload contract)."""
    t = time.perf_counter()
    hits = store.query(collection, vector, limit=max(k, MAX_CANDIDATES))
    seconds = time.perf_counter() - t
    cands = [Candidate(h.payload.get("doc_id", ""), int(h.payload.get("start", 0)), int(h.payload.get("end", 0)),
                       int(h.payload.get("tokens", 0)), payload_text(h.payload, payload)) for h in hits]
    return SideResult(dedupe(c.doc_id for c in cands), cands, seconds,
                      {h.payload.get("pipeline_id", "") for h in hits})


def score_query(q: Query, old: SideResult, new: SideResult, k: int) -> dict:
    row: dict[str, Any] = {
        "query_id": q.query_id,
        "query": q.text,
        f"overlap_at_{k}": overlap_at_k(old.docs, new.docs, k),
        "rbo": rbo(old.docs[:k], new.docs[:k], depth=min(k, max(len(old.docs[:k]), len(new.docs[:k]))) or None),
        "latency_old_ms": old.seconds * 1000,
        "latency_new_ms": new.seconds * 1000,
    }
    if q.relevant:
        for side, res in (("old", old), ("new", new)):
            row[f"recall_at_{k}_{side}"] = recall_at_k(res.docs, set(q.relevant), k)
            row[f"ndcg_at_{k}_{side}"] = ndcg_at_k(res.docs, set(q.relevant), k)
            row[f"mrr_{side}"] = mrr(res.docs, set(q.relevant))
    if q.evidence:
        for side, res in (("old", old), ("new", new)):
            packed = pack(res.candidates)
            row[f"evidence_recall_{side}"] = sum(evidence_recalled(packed, e) for e in q.evidence) / len(q.evidence)
    return row


def aggregate(rows: list[dict], k: int, seed: int = 0) -> dict:
    """Means per side and paired bootstrap intervals for new − old."""
    agg: dict[str, Any] = {"queries": len(rows)}
    if not rows:
        return agg
    for key in (f"overlap_at_{k}", "rbo"):
        agg[key] = statistics.fmean(r[key] for r in rows)
    for side in ("old", "new"):
        lat = [r[f"latency_{side}_ms"] for r in rows]
        agg[f"latency_{side}_p50_ms"] = percentile(lat, 0.5)
        agg[f"latency_{side}_p95_ms"] = percentile(lat, 0.95)
    for metric in (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", "evidence_recall"):
        labelled = [r for r in rows if f"{metric}_old" in r]
        if not labelled:
            continue
        agg[f"{metric}_old"] = statistics.fmean(r[f"{metric}_old"] for r in labelled)
        agg[f"{metric}_new"] = statistics.fmean(r[f"{metric}_new"] for r in labelled)
        agg[f"{metric}_diff"] = paired_bootstrap([r[f"{metric}_new"] - r[f"{metric}_old"] for r in labelled], seed=seed)
    return agg


def evaluate(store: Any, old: str, new: str, queries: list[Query], embed_old: Callable[[list[str]], Any],
             embed_new: Callable[[list[str]], Any], *, k: int = 10, seed: int = 0,
             payload_old: PayloadConfig | None = None, payload_new: PayloadConfig | None = None) -> dict:
    """Run every query against ``old`` (e.g. the alias) and ``new`` with each side's query vectors (and
    each side's payload layout)."""
    texts = [q.text for q in queries]
    v_old = embed_old(texts)
    v_new = v_old if embed_new is embed_old else embed_new(texts)
    rows = []
    pipelines: dict[str, set[str]] = {"old": set(), "new": set()}
    for i, q in enumerate(queries):
        o = run_side(store, old, v_old[i], k, payload_old)
        n = run_side(store, new, v_new[i], k, payload_new)
        pipelines["old"] |= o.collections
        pipelines["new"] |= n.collections
        rows.append(score_query(q, o, n, k))
    return {"k": k, "rows": rows, "aggregate": aggregate(rows, k, seed),
            "pipelines_seen": {s: sorted(v) for s, v in pipelines.items()}}
