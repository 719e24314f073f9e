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
from typing import Any, Callable, Iterable, Mapping, Sequence

from reindex.domain.config import PayloadConfig
from reindex.errors import EvaluationError
from reindex.foundation.stats import holm_bootstrap, paired_bootstrap, percentile
from reindex.adapters.stores.payload import payload_metadata, payload_text

__all__ = [
    "BUDGET_TOKENS", "Candidate", "LATENCY_REPEATS", "MAX_CANDIDATES", "NO_SEGMENT", "Query", "RBO_P", "SideResult",
    "VERDICTS", "aggregate", "dedupe", "evaluate", "evaluate_alone", "evidence_recalled", "first_rank",
    "gate_metrics", "metadata_lookup", "metric_verdict", "mrr", "ndcg_at_k", "overlap_at_k", "pack", "passage_rank",
    "probe_queries", "rank_changes", "rbo", "read_queries", "recall_at_k", "run_side", "score_query", "segment_of",
    "segment_results", "sentences", "verdict",
]

BUDGET_TOKENS = 2048
MAX_CANDIDATES = 100
#: Each query's search timed this many more times per side (interleaved, old then new, in passes over all the
#: queries), its latency the fastest: a burst of load on a shared machine then cannot make one side look slow
#: (invariant 19: latency is a gate rule).
LATENCY_REPEATS = 4
RBO_P = 0.9
NO_SEGMENT = "(none)"  # a query whose segment value neither the queries file nor the labelled document gives


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
    document ids, verbatim evidence, where it came from, when the file says, its language, and the file's
    other plain fields (``fields``: what a segment of ``cutover.segments`` is read from first)."""

    query_id: str
    text: str
    relevant: frozenset[str] = frozenset()  # relevant document ids
    evidence: tuple[str, ...] = ()
    source: str = "file"  # file | probe
    lang: str | None = None
    fields: tuple[tuple[str, str], ...] = ()  # (name, value) of the file's other string, number and bool fields

    @property
    def doc_path(self) -> str | None:
        """The one relevant document of a known-item query (None when it has none or several)."""
        return next(iter(self.relevant)) if len(self.relevant) == 1 else None

    def value_of(self, name: str) -> str | None:
        """The queries file's own value of field ``name`` for this query (``lang`` included), None when absent."""
        if name == "lang" and self.lang:
            return self.lang
        return next((v for k, v in self.fields if k == name), None)


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
    except RecursionError:
        raise EvaluationError(f"{p}:{n}: invalid JSON (nested deeper than a query needs: Python's JSON reader stops "
                              "at about 1,000 levels); a query is one flat object per line") from None
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
    own = ("query", "text", "query_id", "relevant", "doc_path", "doc_id", "evidence", "lang")
    fields = tuple((key, str(value)) for key, value in sorted(d.items())
                   if key not in own and isinstance(value, (str, int, float, bool)) and value != "")
    return Query(str(d.get("query_id", f"q{n}")), text, frozenset(rel), evidence,
                 lang=lang if isinstance(lang, str) and lang else None, fields=fields)


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
            out.append(Query(f"probe-{len(out) + 1}", chosen[doc_id], frozenset({doc_id}), (chosen[doc_id],), "probe"))
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
    return side_of_hits(hits, time.perf_counter() - t, payload)


def side_of_hits(hits: Sequence[Any], seconds: float, payload: PayloadConfig | None = None) -> SideResult:
    """One side's result from its ranked hits (however they were ranked) and the seconds they took."""
    cands = [Candidate(h.payload.get("doc_id", ""), int(h.payload.get("start", 0)), int(h.payload.get("end", 0)),
                       int(h.payload.get("tokens", 0)), payload_text(h.payload, payload)) for h in hits]
    return SideResult(dedupe(c.doc_id for c in cands), cands, seconds,
                      {h.payload.get("pipeline_id", "") for h in hits})


def first_rank(ids: Sequence[str], relevant: set[str]) -> int | None:
    """1-based rank of the first relevant id, None when none is in ``ids``."""
    return next((i + 1 for i, d in enumerate(ids) if d in relevant), None)


def passage_rank(candidates: Sequence[Candidate], evidence: Sequence[str]) -> int | None:
    """1-based rank of the first retrieved chunk that holds a piece of ``evidence`` verbatim (the passage, not
    just its document: a known-item probe's sentence, a labelled query's evidence), None when none does."""
    return next((i + 1 for i, c in enumerate(candidates) if any(e in c.text for e in evidence)), None)


def score_query(q: Query, old: SideResult, new: SideResult, k: int,
                text_old: Callable[[str], str] | None = None, text_new: Callable[[str], str] | None = None) -> dict:
    """One query's row. ``text_old``/``text_new``: how each side's pipeline normalises text; a query's evidence is
    looked for in that side's chunks as that side would hold it (NFKC turns a quoted "，" into ","), not verbatim."""
    row: dict[str, Any] = {
        "query_id": q.query_id,
        "query": q.text,
        f"overlap_at_{k}": overlap_at_k(old.docs, new.docs, k),
        "rbo": rbo(old.docs[:k], new.docs[:k], depth=min(k, max(len(old.docs[:k]), len(new.docs[:k]))) or None),
        "latency_old_ms": old.seconds * 1000,
        "latency_new_ms": new.seconds * 1000,
    }
    if q.lang:
        row["lang"] = q.lang
    if q.relevant:
        for side, res in (("old", old), ("new", new)):
            row[f"recall_at_{k}_{side}"] = recall_at_k(res.docs, set(q.relevant), k)
            row[f"ndcg_at_{k}_{side}"] = ndcg_at_k(res.docs, set(q.relevant), k)
            row[f"mrr_{side}"] = mrr(res.docs, set(q.relevant))
            row[f"rank_{side}"] = first_rank(res.docs, set(q.relevant))  # the labelled document's rank
    if q.evidence:
        for side, res, norm in (("old", old, text_old), ("new", new, text_new)):
            evidence = tuple(norm(e) for e in q.evidence) if norm is not None else q.evidence
            packed = pack(res.candidates)
            row[f"evidence_recall_{side}"] = sum(evidence_recalled(packed, e) for e in evidence) / len(evidence)
            rank = passage_rank(res.candidates, evidence)
            row[f"passage_rank_{side}"] = rank
            row[f"passage_mrr_{side}"] = 1.0 / rank if rank else 0.0
            row[f"passage_hit_at_{k}_{side}"] = 1.0 if rank is not None and rank <= k else 0.0
    return row


def gate_metrics(k: int) -> tuple[str, ...]:
    """The per-query metrics compared new − old with an interval, most saturating first: document-level
    recall@k, nDCG@k and MRR (labelled queries and probes), then passage-level hit@k and MRR (the chunk that
    holds the evidence ranked, not only its document) and evidence recall in the token budget."""
    return (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", f"passage_hit_at_{k}", "passage_mrr", "evidence_recall")


VERDICTS = ("better", "worse", "no measurable difference", "cannot tell")


def metric_verdict(diff: dict, ceiling: bool) -> str:
    """One metric's verdict from its paired interval: ``cannot tell`` when every query scored the maximum on
    both sides (the ceiling) or the interval is degenerate (a single point: no spread to measure), ``better``
    when its lower bound is above 0, ``worse`` when its upper bound is below 0, else ``no measurable
    difference``."""
    if ceiling or diff["n"] == 0 or diff["low"] == diff["high"]:
        return "cannot tell"
    if diff["low"] > 0:
        return "better"
    if diff["high"] < 0:
        return "worse"
    return "no measurable difference"


def verdict(agg: dict, k: int) -> dict:
    """What the evidence says overall (``verdict``) and per metric (``metrics``): ``worse`` if any metric is
    worse, else ``better`` if any is better, else ``no measurable difference`` if any metric could measure,
    else ``cannot tell`` (every metric at the ceiling or degenerate: the queries cannot see a difference)."""
    per = {m: metric_verdict(agg[f"{m}_diff"], agg.get(f"{m}_ceiling", False))
           for m in gate_metrics(k) if f"{m}_diff" in agg}
    found = set(per.values())
    overall = next((v for v in ("worse", "better", "no measurable difference") if v in found), "cannot tell")
    return {"verdict": overall, "metrics": per}


def rank_changes(rows: Sequence[dict]) -> dict[str, int]:
    """How many queries' labelled document ranks better (higher), worse or the same on the new side (a miss
    counted past the deepest candidate)."""
    miss = MAX_CANDIDATES + 1
    out = {"better": 0, "worse": 0, "same": 0}
    for r in rows:
        if "rank_old" in r:
            old, new = r["rank_old"] or miss, r["rank_new"] or miss
            out["better" if new < old else "worse" if new > old else "same"] += 1
    return out


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
    for metric in gate_metrics(k):
        labelled = [r for r in rows if f"{metric}_old" in r]
        if not labelled:
            continue
        agg[f"{metric}_old"] = statistics.fmean(r[f"{metric}_old"] for r in labelled)
        agg[f"{metric}_new"] = statistics.fmean(r[f"{metric}_new"] for r in labelled)
        agg[f"{metric}_diff"] = paired_bootstrap([r[f"{metric}_new"] - r[f"{metric}_old"] for r in labelled], seed=seed)
        agg[f"{metric}_ceiling"] = all(r[f"{metric}_old"] >= 1.0 and r[f"{metric}_new"] >= 1.0 for r in labelled)
    for what in ("rank", "passage_rank"):
        ranked = [r for r in rows if f"{what}_old" in r]
        if ranked:  # median rank, a miss counted past the deepest candidate
            miss = MAX_CANDIDATES + 1
            for side in ("old", "new"):
                agg[f"{what}_{side}_median"] = statistics.median(r[f"{what}_{side}"] or miss for r in ranked)
            agg[f"{what}_changed"] = sum(r[f"{what}_old"] != r[f"{what}_new"] for r in ranked)
    if any("rank_old" in r for r in rows):
        agg["rank_changes"] = rank_changes(rows)
    agg.update(verdict(agg, k))
    return agg


# --------------------------------------------------------------------------------------------
# Segments (cutover.segments): the same evidence per value of a field, corrected for their number
# --------------------------------------------------------------------------------------------


def segment_of(q: Query, fields: Sequence[str], metadata: Callable[[str], Mapping[str, Any]]) -> dict[str, str]:
    """A query's value of each segment field: the queries file's own field of that name, else the labelled
    document's metadata value as the store holds it (``metadata(doc id)``; of several labelled documents the
    first, in id order, that has one), else ``(none)``."""
    out = {}
    for name in fields:
        value = q.value_of(name)
        for doc in ([] if value is not None else sorted(q.relevant)):
            found = metadata(doc).get(name)
            if found is not None and found != "":
                value = found if isinstance(found, str) else json.dumps(found, sort_keys=True)
                break
        out[name] = value if value is not None else NO_SEGMENT
    return out


def segment_results(rows: Sequence[dict], fields: Sequence[str], k: int, *,
                    bound: float | Mapping[str, float], seed: int = 0) -> dict:
    """``{field: {value: {metric: {old, new, diff, low, high, n, level, p_below_bound, verdict}, "queries": n,
    "verdict": v, "ranks": {better, worse, same}}}}`` from rows carrying ``segments``. Every metric's intervals
    are corrected for the number of segments (all values of all fields: one family) by Holm's step-down method
    on the claim "new − old is at least ``bound``" (one for all, or per metric: :func:`gate_bounds`;
    :func:`reindex.foundation.stats.holm_bootstrap`); the verdicts are :func:`metric_verdict`'s and :func:`verdict`'s,
    on the corrected intervals."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        for name, value in r.get("segments", {}).items():
            groups.setdefault((name, value), []).append(r)
    intervals = {m: holm_bootstrap({g: [r[f"{m}_new"] - r[f"{m}_old"] for r in rs if f"{m}_old" in r]
                                    for g, rs in groups.items()},
                                   bound[m] if isinstance(bound, Mapping) else bound, seed=seed)
                 for m in gate_metrics(k)}
    out: dict[str, dict] = {name: {} for name in fields}
    for (name, value), rs in sorted(groups.items()):
        seg: dict[str, Any] = {"queries": len(rs)}
        agg: dict[str, Any] = {}
        for m in gate_metrics(k):
            iv = intervals[m].get((name, value))
            if iv is None:
                continue
            labelled = [r for r in rs if f"{m}_old" in r]
            agg[f"{m}_diff"] = iv
            agg[f"{m}_ceiling"] = all(r[f"{m}_old"] >= 1.0 and r[f"{m}_new"] >= 1.0 for r in labelled)
            seg[m] = {"old": statistics.fmean(r[f"{m}_old"] for r in labelled),
                      "new": statistics.fmean(r[f"{m}_new"] for r in labelled),
                      "diff": iv["mean"], "low": iv["low"], "high": iv["high"], "n": iv["n"],
                      "level": iv["level"], "p_below_bound": iv["p"]}
        said = verdict(agg, k)
        for m, v in said["metrics"].items():
            seg[m]["verdict"] = v
        seg["verdict"] = said["verdict"]
        seg["ranks"] = rank_changes(rs)
        out[name][value] = seg
    return out


def metadata_lookup(store: Any, collection: str, payload: PayloadConfig | None) -> Callable[[str, Any], dict]:
    """``lookup(doc id, vector)``: the metadata object of one of that document's points in ``collection`` (a
    query filtered by ``doc_id``, limit 1), ``{}`` when it has none; one store call per document."""
    seen: dict[str, dict] = {}

    def lookup(doc_id: str, vector: Any) -> dict:
        if doc_id not in seen:
            hits = store.query(collection, vector, limit=1, doc_id=doc_id)
            seen[doc_id] = payload_metadata(hits[0].payload, payload) if hits else {}
        return seen[doc_id]

    return lookup


def evaluate(store: Any, old: str, new: str, queries: list[Query], embed_old: Callable[[list[str]], Any],
             embed_new: Callable[[list[str]], Any], *, k: int = 10, seed: int = 0,
             payload_old: PayloadConfig | None = None, payload_new: PayloadConfig | None = None,
             segments: Sequence[str] = (), bound: float | Mapping[str, float] = 0.0, text_old: Callable[[str], str] | None = None,
             text_new: Callable[[str], str] | None = None,
             search_new: Callable[[Any, Any], SideResult] | None = None,
             latency_repeats: int = LATENCY_REPEATS) -> dict:
    """Run every query against ``old`` (e.g. the alias) and ``new`` with each side's query vectors (and
    each side's payload layout). With ``segments`` (field names) each row names its segment values
    (:func:`segment_of`, the labelled document's metadata read from ``new``) and ``segments`` holds
    :func:`segment_results` for the lower ``bound`` the gate will hold every segment to. ``text_old``/``text_new``:
    each side's text normaliser, applied to a query's evidence (:func:`score_query`). ``search_new(old vector,
    new vector)``: how the new side answers one query when it is not a search of ``new`` (a serving mode that
    reranks the old side's candidates: :mod:`reindex.decisions.serving`); every other step is the same. Each side's
    latency of a query is the fastest of its search and ``latency_repeats`` more, interleaved, each repeat a pass
    over all the queries (a plain search of both sides only; a ``search_new`` is timed once on both sides)."""
    texts = [q.text for q in queries]
    v_old = embed_old(texts)
    v_new = v_old if embed_new is embed_old else embed_new(texts)
    rows = []
    pipelines: dict[str, set[str]] = {"old": set(), "new": set()}
    lookup = metadata_lookup(store, new, payload_new)
    for i, q in enumerate(queries):
        o = run_side(store, old, v_old[i], k, payload_old)
        n = run_side(store, new, v_new[i], k, payload_new) if search_new is None else search_new(v_old[i], v_new[i])
        pipelines["old"] |= o.collections
        pipelines["new"] |= n.collections
        row = score_query(q, o, n, k, text_old, text_new)
        if segments:
            # (``new`` in ``v_new``'s space; a reranking new side searches ``new`` with the old side's vectors)
            at = v_new[i] if search_new is None else v_old[i]
            row["segments"] = segment_of(q, segments, lambda doc, v=at: lookup(doc, v))
        rows.append(row)
    if search_new is None:
        # The repeats run as passes over every query, not back to back per query: a burst of load on a shared
        # machine covers a stretch of time, and each query's fastest search then comes from another stretch.
        for _ in range(latency_repeats):
            for i, row in enumerate(rows):
                row["latency_old_ms"] = min(row["latency_old_ms"], _search_ms(store, old, v_old[i], k))
                row["latency_new_ms"] = min(row["latency_new_ms"], _search_ms(store, new, v_new[i], k))
    out = {"k": k, "rows": rows, "aggregate": aggregate(rows, k, seed),
           "pipelines_seen": {s: sorted(v) for s, v in pipelines.items()}}
    if segments:
        out["segments"] = segment_results(rows, segments, k, bound=bound, seed=seed)
        out["segment_bound"] = bound
    return out


def _search_ms(store: Any, collection: str, vector: Any, k: int) -> float:
    t = time.perf_counter()
    store.query(collection, vector, limit=max(k, MAX_CANDIDATES))
    return (time.perf_counter() - t) * 1000


def evaluate_alone(store: Any, collection: str, queries: list[Query], embed: Callable[[list[str]], Any], *,
                   k: int = 10, payload: PayloadConfig | None = None) -> dict:
    """Every query against one population, for a first build (nothing to compare with): its own recall@k,
    nDCG@k, MRR and evidence recall over the queries that carry labels, and latency. Later cutovers compare
    old and new on the same queries; this gives the first population its figure."""
    vectors = embed([q.text for q in queries])
    rows = []
    for i, q in enumerate(queries):
        res = run_side(store, collection, vectors[i], k, payload)
        row: dict[str, Any] = {"query_id": q.query_id, "query": q.text, "latency_ms": res.seconds * 1000}
        if q.relevant:
            row[f"recall_at_{k}"] = recall_at_k(res.docs, set(q.relevant), k)
            row[f"ndcg_at_{k}"] = ndcg_at_k(res.docs, set(q.relevant), k)
            row["mrr"] = mrr(res.docs, set(q.relevant))
        if q.evidence:
            row["evidence_recall"] = sum(evidence_recalled(pack(res.candidates), e) for e in q.evidence) / len(q.evidence)
        rows.append(row)
    agg: dict[str, Any] = {"queries": len(rows)}
    if rows:
        lat = [r["latency_ms"] for r in rows]
        agg["latency_p50_ms"], agg["latency_p95_ms"] = percentile(lat, 0.5), percentile(lat, 0.95)
    for metric in (f"recall_at_{k}", f"ndcg_at_{k}", "mrr", "evidence_recall"):
        labelled = [r[metric] for r in rows if metric in r]
        if labelled:
            agg[metric] = statistics.fmean(labelled)
            agg[f"{metric}_queries"] = len(labelled)
    return {"k": k, "collection": collection, "rows": rows, "aggregate": agg}
