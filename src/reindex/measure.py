"""Recompute fraction R_c and chunker comparisons over revision pairs (seed 000).

An embedding input is reused only if it is byte-identical to an input produced for the old version
of the *same* document. For one pair and one chunker::

    R_c = tokens(distinct new inputs not among the old inputs) / tokens(all distinct new inputs)

with tokens counted by the configured tokenizer on each distinct text (``count_batch``). A new
version with no inputs (empty or whitespace-only) has R_c = 0: nothing has to be embedded.

This module holds the pairs (Parquet/JSONL or built from git history), R_c per pair, the no-edit
control, bands, paired differences with bootstrap intervals over documents, length calibration,
retrieval quality on the same chunkings, and the JSON / Markdown / HTML report.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import random
import re
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from reindex.atomic import atomic_write_text
from reindex.errors import ChunkerError, MeasureError, ReindexError
from reindex.stats import bootstrap_mean
from reindex.tables import TableError, read_parquet

BANDS = ("<=5%", "5-20%", "20-50%", ">50%")
ALL = "all"
BAND_NAMES = (*BANDS, ALL)
DEFAULT_TARGET_MEDIAN = 250
LENGTH_TOLERANCE = 0.15
PACK_BUDGET = 2048
PACK_CANDIDATES = 100
BOOTSTRAP = 2000




# --------------------------------------------------------------------------------------------
# Pairs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RevisionPair:
    """One document before and after one revision."""

    pair_id: str
    lang: str
    doc_key: str  # document identity: bootstrap resamples these, and reuse never crosses them
    doc_path: str
    old_text: str
    new_text: str
    edit_fraction: float

    @property
    def band(self) -> str:
        return band_of(self.edit_fraction)


def band_of(edit_fraction: float) -> str:
    """``<=5%``, ``5-20%``, ``20-50%`` or ``>50%`` (upper bounds inclusive, as in the corpus)."""
    if edit_fraction <= 0.05:
        return "<=5%"
    if edit_fraction <= 0.20:
        return "5-20%"
    if edit_fraction <= 0.50:
        return "20-50%"
    return ">50%"


_TOKEN = re.compile(r"[A-Za-z0-9_]+|\s+|.", re.S)


def edit_fraction(old: str, new: str) -> float:
    """Share of old+new characters not covered by a difflib alignment (the corpus README's
    definition): lines first, then each replaced block re-aligned over word/space/char tokens."""
    total = len(old) + len(new)
    if total == 0:
        return 0.0
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matched = 0
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            matched += sum(len(line) for line in a[i1:i2])
        elif tag == "replace":
            ta = _TOKEN.findall("".join(a[i1:i2]))
            tb = _TOKEN.findall("".join(b[j1:j2]))
            for t2, k1, k2, _, _ in SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
                if t2 == "equal":
                    matched += sum(len(t) for t in ta[k1:k2])
    return 1.0 - 2.0 * matched / total


def load_pairs(path: str | Path) -> list[RevisionPair]:
    """Read pairs from Parquet or JSONL with ``pair_id, lang, doc_path, old_text, new_text`` and
    optionally ``doc_key`` and ``edit_fraction`` (computed when absent)."""
    p = Path(path)
    if not p.is_file():
        raise MeasureError(f"{p}: pairs file not found (give a .parquet or .jsonl file of revision pairs)")
    if p.suffix.lower() == ".parquet":
        try:
            cols = read_parquet(p)
        except TableError as err:
            raise MeasureError(f"{p}: cannot read Parquet: {err}") from None
        rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
    else:
        rows = []
        with p.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        raise MeasureError(f"{p}:{n}: invalid JSON: {err.msg}") from None
    out = []
    for n, row in enumerate(rows, 1):
        missing = [k for k in ("old_text", "new_text") if not isinstance(row.get(k), str)]
        if missing:
            raise MeasureError(f"{p}: row {n} has no text column(s) {', '.join(missing)}; need pair_id, lang, doc_path, old_text, new_text")
        ef = row.get("edit_fraction")
        doc_path = str(row.get("doc_path") or row.get("pair_id") or n)
        out.append(
            RevisionPair(
                pair_id=str(row.get("pair_id") or f"pair-{n:05d}"),
                lang=str(row.get("lang") or "en"),
                doc_key=str(row.get("doc_key") or doc_path),
                doc_path=doc_path,
                old_text=row["old_text"],
                new_text=row["new_text"],
                edit_fraction=float(ef) if ef is not None else edit_fraction(row["old_text"], row["new_text"]),
            )
        )
    return out


def _git(repo: str | Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise MeasureError("git is not installed; --from-git needs the git command") from None
    if done.returncode != 0:
        msg = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise MeasureError(f"git {' '.join(args[:2])} in {repo} failed: {msg[0] if msg else done.returncode}")
    return done.stdout.decode("utf-8", "surrogateescape")


def pairs_from_git(repo: str | Path, paths: str, *, lang: str = "en", limit: int | None = None) -> list[RevisionPair]:
    """Adjacent revisions of the files matching ``paths`` (a git pathspec glob) in ``repo``: every
    non-merge commit that modified a file, paired with the file in that commit's parent. Newest
    first; pairs with identical texts or non-UTF-8 blobs are skipped."""
    if not Path(repo).is_dir():
        raise MeasureError(f"{repo}: not a folder (give a git repository for --from-git)")
    log = _git(repo, "log", "--no-merges", "--diff-filter=M", "--format=%x00%H", "--name-only", "--", f":(glob){paths}")
    pairs: list[RevisionPair] = []
    for block in log.split("\x00")[1:]:
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        commit, files = lines[0].strip(), lines[1:]
        for path in files:
            try:
                old = _git(repo, "show", f"{commit}^:{path}").encode("utf-8", "surrogateescape").decode("utf-8")
                new = _git(repo, "show", f"{commit}:{path}").encode("utf-8", "surrogateescape").decode("utf-8")
            except (MeasureError, UnicodeDecodeError):
                continue
            if old == new:
                continue
            pairs.append(
                RevisionPair(f"git-{len(pairs):05d}", lang, path, path, old, new, edit_fraction(old, new))
            )
            if limit is not None and len(pairs) >= limit:
                return pairs
    return pairs


def select_pairs(
    pairs: Sequence[RevisionPair], *, lang: str | None = None, bands: Sequence[str] = (), limit: int | None = None
) -> list[RevisionPair]:
    """Pairs of one language and the given bands, the first ``limit`` of them (in file order)."""
    bad = [b for b in bands if b not in BANDS]
    if bad:
        raise MeasureError(f"unknown band {bad[0]!r}; allowed: {', '.join(BANDS)}")
    out = [p for p in pairs if (lang is None or p.lang == lang) and (not bands or p.band in bands)]
    return out[:limit] if limit is not None else out


# --------------------------------------------------------------------------------------------
# R_c
# --------------------------------------------------------------------------------------------


class AnyChunker(Protocol):
    """What measure needs of a chunker: ``chunk(text)`` returning chunks (``.text``) or strings."""

    def chunk(self, text: str) -> Sequence[Any]: ...


Counter = Callable[[list[str]], list[int]]


def chunk_texts(chunker: AnyChunker, text: str) -> list[str]:
    """The embedding inputs a chunker makes of ``text``, in order."""
    return [c if isinstance(c, str) else c.text for c in chunker.chunk(text)]


def recompute(old_inputs: Iterable[str], new_inputs: Iterable[str], count: Counter) -> tuple[int, int]:
    """``(missed tokens, all tokens)`` of the distinct new inputs; a miss is a new input not
    byte-identical to any old input (of the same document: callers pass one document's inputs)."""
    old = set(old_inputs)
    distinct = list(dict.fromkeys(new_inputs))
    if not distinct:
        return 0, 0
    counts = count(distinct)
    missed = sum(c for t, c in zip(distinct, counts) if t not in old)
    return missed, sum(counts)


def recompute_fraction(old_inputs: Iterable[str], new_inputs: Iterable[str], count: Counter) -> float:
    """R_c of one document revision (0 when the new version has no inputs)."""
    missed, total = recompute(old_inputs, new_inputs, count)
    return missed / total if total else 0.0


@dataclass(frozen=True, slots=True)
class Candidate:
    """A chunker under measurement: a name (its spec) and a factory of fresh instances."""

    spec: str
    build: Callable[[], AnyChunker]
    size_param: str | None = None  # what --calibrate set, for the report


@dataclass(frozen=True, slots=True)
class PairResult:
    """R_c of one chunker on one pair (``error`` set when the chunker raised)."""

    pair_id: str
    lang: str
    doc_key: str
    band: str
    edit_fraction: float
    rc: float
    missed_tokens: int
    new_tokens: int
    no_edit_missed: int
    chunk_tokens: tuple[int, ...]  # model tokens of every new-version input, in order
    error: str | None = None


def measure_pair(chunker: AnyChunker, control: AnyChunker, pair: RevisionPair, count: Counter) -> PairResult:
    """R_c of one pair, plus the no-edit control (old version chunked by two fresh instances)."""
    try:
        old = chunk_texts(chunker, pair.old_text)
        new = chunk_texts(chunker, pair.new_text)
        again = chunk_texts(control, pair.old_text)
    except Exception as err:  # noqa: BLE001 - a chunker failing on a document is a result
        return PairResult(pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction, math.nan, 0, 0, 0, (),
                          f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200])
    distinct = list(dict.fromkeys(new))
    counts = count(distinct) if distinct else []
    by_text = dict(zip(distinct, counts))
    old_set = set(old)
    missed = sum(c for t, c in by_text.items() if t not in old_set)
    total = sum(counts)
    control_miss = [t for t in dict.fromkeys(again) if t not in old_set]
    no_edit_missed = sum(count(control_miss)) if control_miss else 0
    return PairResult(
        pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction,
        missed / total if total else 0.0, missed, total, no_edit_missed, tuple(by_text[t] for t in new),
    )


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BandStat:
    """R_c summary of one chunker on one language × band."""

    lang: str
    band: str
    pairs: int
    rc_mean: float | None
    rc_median: float | None
    rc_pooled: float | None  # missed tokens / new tokens over all pairs of the band

    def as_dict(self) -> dict:
        return {"lang": self.lang, "band": self.band, "pairs": self.pairs, "rc_mean": _r(self.rc_mean),
                "rc_median": _r(self.rc_median), "rc_pooled": _r(self.rc_pooled)}


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), nd)


def band_stats(results: Sequence[PairResult], langs: Sequence[str]) -> list[BandStat]:
    """Mean, median and pooled R_c per language (and ``all`` languages when there are several) × band."""
    ok = [r for r in results if r.error is None]
    out = []
    for lang in [*langs, *([ALL] if len(langs) > 1 else [])]:
        for band in BAND_NAMES:
            sel = [r for r in ok if (lang == ALL or r.lang == lang) and (band == ALL or r.band == band)]
            rcs = [r.rc for r in sel]
            tot = sum(r.new_tokens for r in sel)
            out.append(BandStat(
                lang, band, len(sel),
                statistics.fmean(rcs) if rcs else None,
                statistics.median(rcs) if rcs else None,
                sum(r.missed_tokens for r in sel) / tot if tot else None,
            ))
    return out


def paired_differences(
    specs: Sequence[str], results: Sequence[Sequence[PairResult]], langs: Sequence[str], *, seed: int = 0,
    reps: int = BOOTSTRAP, all_pairs: bool = True,
) -> list[dict]:
    """Mean per-pair R_c difference (b − a, in points) per language × band for every pair of
    chunkers (or each against the first), over pairs both measured, with 95 % intervals from a
    bootstrap over documents."""
    out = []
    combos = [(i, j) for i in range(len(specs)) for j in range(i + 1, len(specs))] if all_pairs else [
        (0, j) for j in range(1, len(specs))]
    for i, j in combos:
        a = {r.pair_id: r for r in results[i] if r.error is None}
        b = {r.pair_id: r for r in results[j] if r.error is None}
        both = [pid for pid in a if pid in b]
        for lang in [*langs, *([ALL] if len(langs) > 1 else [])]:
            for band in BAND_NAMES:
                sel = [pid for pid in both if (lang == ALL or a[pid].lang == lang) and (band == ALL or a[pid].band == band)]
                if not sel:
                    continue
                diffs = [100.0 * (b[p].rc - a[p].rc) for p in sel]
                mean, low, high = bootstrap_mean(diffs, [a[p].doc_key for p in sel], reps=reps, seed=seed)
                out.append({"a": specs[i], "b": specs[j], "lang": lang, "band": band, "pairs": len(sel),
                            "documents": len({a[p].doc_key for p in sel}), "diff_points": _r(mean, 3),
                            "low": _r(low, 3), "high": _r(high, 3)})
    return out


# --------------------------------------------------------------------------------------------
# Length calibration
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Retrieval on the same chunkings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    query_id: str
    lang: str
    query: str
    doc_path: str
    evidence: str


def load_queries(path: str | Path) -> list[Query]:
    """Queries in the corpus's ``queries.jsonl`` format."""
    p = Path(path)
    if not p.is_file():
        raise MeasureError(f"{p}: queries file not found")
    out = []
    with p.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                out.append(Query(str(row["query_id"]), str(row.get("lang", "en")), row["query"], row["doc_path"], row["evidence"]))
            except (json.JSONDecodeError, KeyError) as err:
                raise MeasureError(f"{p}:{n}: not a query (need query_id, query, doc_path, evidence): {err}") from None
    return out


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
                "evidence_recall": _r(self.evidence_recall), "hit_at_5": _r(self.hit_at_5), "mrr": _r(self.mrr),
                "ndcg_at_5": _r(self.ndcg_at_5), "embedded": self.embedded, "note": self.note}


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
    qfps = ["query\0" + fingerprint(q.query) for q in qs]
    qmat, _ = embed_cached([q.query for q in qs], qfps, embed, cache, dim)
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
        if any(q.evidence in t for t in _packed_texts(corpus[q.doc_path], mine)):
            recall += 1
        ranked_docs = list(dict.fromkeys(owners_arr[order].tolist()))
        rank = ranked_docs.index(q.doc_path) + 1 if q.doc_path in ranked_docs else None
        if rank is not None:
            rr += 1.0 / rank
            if rank <= 5:
                hits += 1
                ndcg += 1.0 / math.log2(rank + 1)
    n = len(qs) or 1
    return RetrievalResult(lang, len(qs), len(doc_paths), len(spans), recall / n, hits / n, rr / n, ndcg / n, embedded, note)


# --------------------------------------------------------------------------------------------
# The whole measurement
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChunkerReport:
    """Everything measured for one chunker."""

    spec: str
    results: tuple[PairResult, ...]
    no_edit_rc: float
    median_chunk_tokens: float
    median_by_lang: dict[str, float]
    failures: int
    bands: tuple[BandStat, ...]
    seconds: float
    calibrated: dict | None = None
    retrieval: tuple[RetrievalResult, ...] = ()

    def as_dict(self) -> dict:
        fails = [{"pair_id": r.pair_id, "error": r.error} for r in self.results if r.error]
        d = {
            "spec": self.spec,
            "no_edit_rc": self.no_edit_rc,
            "median_chunk_tokens": self.median_chunk_tokens,
            "median_chunk_tokens_by_lang": self.median_by_lang,
            "failures": self.failures,
            "failed_pairs": fails[:20],
            "pairs": len(self.results),
            "seconds": round(self.seconds, 2),
            "calibration": self.calibrated,
            "bands": [b.as_dict() for b in self.bands],
        }
        if self.retrieval:
            d["retrieval"] = [r.as_dict() for r in self.retrieval]
            d["evidence_recall"] = {r.lang: _r(r.evidence_recall) for r in self.retrieval}
            d["ndcg_at_5"] = {r.lang: _r(r.ndcg_at_5) for r in self.retrieval}
        return d


@dataclass(frozen=True, slots=True)
class MeasureReport:
    """R_c of several chunkers on the same pairs, their paired differences, and (optionally)
    retrieval quality on the same chunkings."""

    source: str
    tokenizer: str
    pairs: int
    langs: tuple[str, ...]
    chunkers: tuple[ChunkerReport, ...]
    paired: tuple[dict, ...]
    warnings: tuple[str, ...]
    target_median: float | None
    calibration: dict | None
    retrieval: dict | None
    seed: int
    seconds: float

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "pairs": self.pairs,
            "languages": list(self.langs),
            "definition": "R_c = tokens of distinct new-version inputs not byte-identical to an old-version input of "
                          "the same document / tokens of all distinct new-version inputs (0 when the new version has none)",
            "target_median": self.target_median,
            "calibration": self.calibration,
            "chunkers": [c.as_dict() for c in self.chunkers],
            "paired_differences": list(self.paired),
            "retrieval": self.retrieval,
            "warnings": list(self.warnings),
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
        }


def measure_chunker(candidate: Candidate, pairs: Sequence[RevisionPair], count: Counter, langs: Sequence[str]) -> ChunkerReport:
    """R_c of every pair, the no-edit control and the length summary for one chunker."""
    t0 = time.perf_counter()
    try:
        chunker, control = candidate.build(), candidate.build()
    except ReindexError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ChunkerError(f"cannot build chunker {candidate.spec}: {err}".splitlines()[0]) from None
    results = tuple(measure_pair(chunker, control, p, count) for p in pairs)
    ok = [r for r in results if r.error is None]
    ctrl_missed = sum(r.no_edit_missed for r in ok)
    lengths = [n for r in ok for n in r.chunk_tokens]
    by_lang = {}
    for lang in langs:
        ls = [n for r in ok if r.lang == lang for n in r.chunk_tokens]
        by_lang[lang] = float(statistics.median(ls)) if ls else 0.0
    # The control's denominator is the old versions' tokens; any miss at all makes it non-zero.
    ctrl_total = sum(r.new_tokens for r in ok) or 1
    return ChunkerReport(
        candidate.spec, results, ctrl_missed / ctrl_total if ctrl_missed else 0.0,
        float(statistics.median(lengths)) if lengths else 0.0, by_lang, sum(1 for r in results if r.error),
        tuple(band_stats(results, langs)), time.perf_counter() - t0,
    )


def length_warnings(reports: Sequence[ChunkerReport], tolerance: float = LENGTH_TOLERANCE) -> list[str]:
    """A warning when the chunkers' median chunk lengths differ by more than ``tolerance``."""
    meds = [(c.spec, c.median_chunk_tokens) for c in reports if c.median_chunk_tokens > 0]
    if len(meds) < 2:
        return []
    lo, hi = min(meds, key=lambda x: x[1]), max(meds, key=lambda x: x[1])
    if hi[1] > lo[1] * (1 + tolerance):
        return [f"chunk lengths are not matched: median {hi[1]:.0f} tokens ({hi[0]}) vs {lo[1]:.0f} ({lo[0]}), "
                f"more than {tolerance:.0%} apart; R_c depends on chunk length, so compare with --calibrate"]
    return []


def run_measure(
    candidates: Sequence[Candidate], pairs: Sequence[RevisionPair], count: Counter, *, tokenizer: str, source: str,
    seed: int = 0, target_median: float | None = None, calibration: dict | None = None,
    progress: Callable[[str], None] | None = None,
) -> MeasureReport:
    """Measure every candidate on the same pairs; paired differences between all of them."""
    if not pairs:
        raise MeasureError(f"{source}: no revision pairs to measure (check --lang, --band and --limit)")
    t0 = time.perf_counter()
    langs = tuple(sorted({p.lang for p in pairs}))
    reports = []
    for cand in candidates:
        rep = measure_chunker(cand, pairs, count, langs)
        if calibration and cand.spec in calibration.get("chunkers", {}):
            rep = _replace(rep, calibrated=calibration["chunkers"][cand.spec])
        reports.append(rep)
        if progress:
            progress(f"{cand.spec}: {len(pairs)} pairs in {rep.seconds:.1f} s")
    paired = paired_differences([c.spec for c in reports], [c.results for c in reports], langs, seed=seed)
    warnings = length_warnings(reports)
    for c in reports:
        if c.no_edit_rc != 0:
            warnings.append(f"{c.spec}: the no-edit control gave R_c = {c.no_edit_rc:.4g}, not 0: the chunker is not deterministic")
        if c.failures:
            warnings.append(f"{c.spec}: failed on {c.failures} of {len(pairs)} pairs (excluded from its statistics)")
    return MeasureReport(source, tokenizer, len(pairs), langs, tuple(reports), tuple(paired), tuple(warnings),
                         target_median, calibration, None, seed, time.perf_counter() - t0)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def with_retrieval(report: MeasureReport, per_chunker: Sequence[Sequence[RetrievalResult]], info: dict) -> MeasureReport:
    """The report with retrieval results attached to each chunker."""
    chunkers = tuple(_replace(c, retrieval=tuple(r)) for c, r in zip(report.chunkers, per_chunker))
    return _replace(report, chunkers=chunkers, retrieval=info)


# --------------------------------------------------------------------------------------------
# Reports: Markdown and self-contained HTML (inline SVG)
# --------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _band_rows(report: MeasureReport) -> list[list[str]]:
    rows = []
    first = report.chunkers[0].spec if report.chunkers else ""
    diffs = {(d["b"], d["lang"], d["band"]): d for d in report.paired if d["a"] == first}
    for c in report.chunkers:
        for b in c.bands:
            if not b.pairs:
                continue
            d = diffs.get((c.spec, b.lang, b.band))
            diff = f"{d['diff_points']:+.1f} [{d['low']:+.1f}, {d['high']:+.1f}]" if d else "–"
            rows.append([c.spec, b.lang, b.band, str(b.pairs), _pct(b.rc_median), _pct(b.rc_mean), _pct(b.rc_pooled), diff])
    return rows


def _summary_rows(report: MeasureReport) -> list[list[str]]:
    rows = []
    for c in report.chunkers:
        le05 = {b.lang: b for b in c.bands if b.band == "<=5%"}
        rec = {r.lang: r for r in c.retrieval}
        meds = " / ".join(f"{k} {v:.0f}" for k, v in c.median_by_lang.items())
        row = [c.spec, f"{c.median_chunk_tokens:.0f} ({meds})", f"{c.no_edit_rc:g}", str(c.failures)]
        row += [_pct(le05[lang].rc_mean) if lang in le05 else "–" for lang in report.langs]
        if report.retrieval:
            row += [f"{_pct(rec[lang].evidence_recall)} / {rec[lang].ndcg_at_5:.3f}" if lang in rec else "–"
                    for lang in report.langs]
        rows.append(row)
    return rows


def _summary_head(report: MeasureReport) -> list[str]:
    head = ["chunker", "median tokens (by lang)", "no-edit R_c", "failures"]
    head += [f"R_c ≤5% mean ({lang}) %" for lang in report.langs]
    if report.retrieval:
        head += [f"recall % / nDCG@5 ({lang})" for lang in report.langs]
    return head


BAND_HEAD = ["chunker", "lang", "band", "pairs", "R_c median %", "R_c mean %", "R_c pooled %", "mean diff vs first, points [95 % CI]"]


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(map(esc, r)) + " |" for r in rows)]


def measure_markdown(report: MeasureReport) -> str:
    """The report as Markdown."""
    lines = [f"# Recompute fraction R_c — {report.source}", "",
             f"{report.pairs} revision pairs ({', '.join(report.langs)}), tokens of `{report.tokenizer}`. "
             "R_c = tokens of distinct new-version inputs that are not byte-identical to an old-version input of the "
             "same document / tokens of all distinct new-version inputs (0 for an empty new version). "
             f"Paired differences: mean per-pair difference in points, 95 % bootstrap intervals over documents "
             f"({BOOTSTRAP} resamples, seed {report.seed}).", ""]
    if report.calibration:
        cal = report.calibration
        lines += [f"Calibrated on {cal['pairs']} held-out pairs ({cal['documents']} documents, old texts) to a median of "
                  f"{cal['target']} tokens; those pairs are excluded below.", ""]
    for w in report.warnings:
        lines.append(f"> **warning:** {w}")
    if report.warnings:
        lines.append("")
    lines += ["## Summary", "", *_md_table(_summary_head(report), _summary_rows(report)), ""]
    lines += ["## R_c by language and edit band", "", *_md_table(BAND_HEAD, _band_rows(report)), ""]
    if report.retrieval:
        r = report.retrieval
        lines += ["## Retrieval", "", f"{r.get('description', '')}", ""]
        rows = [[c.spec, x.lang, str(x.queries), str(x.pool_docs), str(x.chunks), _pct(x.evidence_recall),
                 _pct(x.hit_at_5), f"{x.mrr:.3f}", f"{x.ndcg_at_5:.3f}", x.note] for c in report.chunkers for x in c.retrieval]
        lines += _md_table(["chunker", "lang", "queries", "pool docs", "chunks", "evidence recall %", "Hit@5 %", "MRR",
                            "nDCG@5", "note"], rows)
        lines.append("")
    return "\n".join(lines)


_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1", "#edc948", "#9c755f", "#ff9da7", "#bab0ac"]


def rc_chart_svg(report: MeasureReport, lang: str) -> str:
    """Grouped bars: mean R_c per edit band (x) for every chunker (colour), one language."""
    W, H, left, bottom, top = 720, 300, 48, 40, 16
    groups = list(BAND_NAMES)
    series = []
    for c in report.chunkers:
        vals = {b.band: b.rc_mean for b in c.bands if b.lang == lang}
        series.append((c.spec, [vals.get(g) or 0.0 for g in groups]))
    plot_w, plot_h = W - left - 10, H - bottom - top
    gw = plot_w / len(groups)
    bw = gw * 0.8 / max(1, len(series))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H + 18 * len(series)}" role="img" '
             f'aria-label="Mean R_c by edit band, {html.escape(lang)}" style="max-width:{W}px;font:12px sans-serif">']
    for k in range(0, 11, 2):
        y = top + plot_h * (1 - k / 10)
        parts.append(f'<line x1="{left}" x2="{W - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{k * 10}%</text>')
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        for si, (_, vals) in enumerate(series):
            v = max(0.0, min(1.0, vals[gi]))
            h = plot_h * v
            parts.append(f'<rect x="{x0 + si * bw:.1f}" y="{top + plot_h - h:.1f}" width="{bw * 0.92:.1f}" height="{h:.1f}" '
                         f'fill="{_COLORS[si % len(_COLORS)]}"><title>{html.escape(series[si][0])} {g}: {100 * v:.1f}%</title></rect>')
        parts.append(f'<text x="{left + gi * gw + gw / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{html.escape(g)}</text>')
    for si, (name, _) in enumerate(series):
        y = H + 4 + 18 * si
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{_COLORS[si % len(_COLORS)]}"/>'
                     f'<text x="{left + 18}" y="{y}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def measure_html(report: MeasureReport) -> str:
    """The report as one self-contained HTML page (inline CSS and SVG, no scripts)."""
    md = measure_markdown(report).split("\n\n", 2)
    intro = html.escape(md[1]) if len(md) > 1 else ""
    parts = ["<!doctype html><html lang=en><meta charset=utf-8>",
             f"<title>R_c — {html.escape(report.source)}</title>",
             "<style>body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             "th{background:#f4f4f4}.warn{background:#fff4d6;padding:.5em 1em;border-left:4px solid #e0a800}</style>",
             f"<h1>Recompute fraction R<sub>c</sub> — {html.escape(report.source)}</h1><p>{intro}</p>"]
    for w in report.warnings:
        parts.append(f'<p class="warn">warning: {html.escape(w)}</p>')
    parts += ["<h2>Summary</h2>", _html_table(_summary_head(report), _summary_rows(report))]
    for lang in report.langs:
        parts += [f"<h2>Mean R<sub>c</sub> by edit band ({html.escape(lang)})</h2>", rc_chart_svg(report, lang)]
    parts += ["<h2>R<sub>c</sub> by language and edit band</h2>", _html_table(BAND_HEAD, _band_rows(report))]
    if report.retrieval:
        rows = [[c.spec, x.lang, x.queries, x.pool_docs, x.chunks, _pct(x.evidence_recall), _pct(x.hit_at_5),
                 f"{x.mrr:.3f}", f"{x.ndcg_at_5:.3f}", x.note] for c in report.chunkers for x in c.retrieval]
        parts += ["<h2>Retrieval</h2>", f"<p>{html.escape(report.retrieval.get('description', ''))}</p>",
                  _html_table(["chunker", "lang", "queries", "pool docs", "chunks", "evidence recall %", "Hit@5 %", "MRR",
                               "nDCG@5", "note"], rows)]
    parts.append("</html>")
    return "\n".join(parts)


def write_measure_reports(report: MeasureReport, out_dir: str | Path) -> tuple[Path, Path, Path]:
    """Write ``measure.json``, ``measure.md`` and ``measure.html`` into ``out_dir``."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = (d / "measure.json", d / "measure.md", d / "measure.html")
    atomic_write_text(paths[0], json.dumps(report.as_dict(), indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(paths[1], measure_markdown(report))
    atomic_write_text(paths[2], measure_html(report))
    return paths


# --------------------------------------------------------------------------------------------
# Configured chunkers: scaling for --calibrate
# --------------------------------------------------------------------------------------------

DEFAULT_CHUNKERS = ("fixed", "recursive", "cdc", "paragraph", "anchored")


def scale_chunker(cfg: Any, size: int) -> Any:
    """``cfg`` with its size parameter set to ``size``: ``size`` for the token-window kinds (and
    anchored's explicit ``cap`` scaled along), ``min``/``max``/``cap`` scaled together for cdc."""
    from reindex.config import CHUNKER_KINDS

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
            f"{', '.join(k for k in sorted(CHUNKER_KINDS) if k != 'sentence')}"
        )
    return model.model_validate(data)


def size_of(cfg: Any) -> int:
    """The value --calibrate searches over (``max`` for cdc, ``size`` otherwise)."""
    return int(cfg.max if cfg.kind == "cdc" else cfg.size)
