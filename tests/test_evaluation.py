"""Evaluation metrics against values computed by hand (in the comments), the evidence packer, the
paired bootstrap, query scoring and ``evaluate`` over a fake two-collection store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reindex.decisions.evaluation import (
    Candidate,
    EvaluationError,
    Query,
    SideResult,
    aggregate,
    dedupe,
    evaluate,
    evidence_recalled,
    mrr,
    ndcg_at_k,
    overlap_at_k,
    pack,
    paired_bootstrap,
    percentile,
    rbo,
    read_queries,
    recall_at_k,
    score_query,
)
from reindex.adapters.stores.qdrant import Hit

RANKED = ["d1", "d2", "d3", "d4", "d5"]
RELEVANT = {"d2", "d5", "d9"}  # d9 is never retrieved


# --------------------------------------------------------------------------------------------
# Ranking metrics
# --------------------------------------------------------------------------------------------


def test_recall_at_k() -> None:
    # top-3 = {d1, d2, d3}: one of three relevant (d2) → 1/3; top-5 adds d5 → 2/3.
    assert recall_at_k(RANKED, RELEVANT, 3) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, RELEVANT, 5) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, RELEVANT, 1) == 0.0
    assert recall_at_k(RANKED, set(), 5) == 0.0  # no labels: defined as 0, never a division by zero


def test_ndcg_at_k() -> None:
    # k=3: DCG = 1/log2(2+1) (d2 at rank 2) = 0.6309298;
    #      IDCG = three relevant documents could fill ranks 1-3 = 1 + 0.6309298 + 1/log2(4)=0.5 = 2.1309298
    #      nDCG@3 = 0.6309298 / 2.1309298 = 0.2960819
    assert ndcg_at_k(RANKED, RELEVANT, 3) == pytest.approx(0.2960819, abs=1e-7)
    # k=5: DCG adds d5 at rank 5: 1/log2(6) = 0.3868528 → 1.0177826; IDCG unchanged (3 relevant) →
    #      1.0177826 / 2.1309298 = 0.4776237
    assert ndcg_at_k(RANKED, RELEVANT, 5) == pytest.approx(0.4776237, abs=1e-7)
    # Ideal ranking → 1; relevant set larger than k: IDCG counts only k slots.
    assert ndcg_at_k(["d2", "d5", "x"], RELEVANT, 2) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "b"], set(), 2) == 0.0


def test_mrr() -> None:
    assert mrr(RANKED, RELEVANT) == 0.5  # first relevant at rank 2
    assert mrr(["d5"], RELEVANT) == 1.0
    assert mrr(["x", "y", "z", "d9"], RELEVANT) == 0.25
    assert mrr(["x"], RELEVANT) == 0.0


def test_overlap_at_k() -> None:
    a, b = ["A", "B", "C", "D"], ["B", "A", "E", "F"]
    assert overlap_at_k(a, b, 2) == 1.0  # {A,B} = {B,A}: order inside the top-k does not matter
    assert overlap_at_k(a, b, 3) == pytest.approx(2 / 3)  # {A,B,C} ∩ {B,A,E} = {A,B}
    assert overlap_at_k(a, b, 4) == 0.5
    assert overlap_at_k(a, ["X", "Y"], 2) == 0.0
    assert overlap_at_k(a, b, 0) == 0.0


def test_rbo_identical_disjoint_and_a_worked_example() -> None:
    assert rbo(["A", "B", "C"], ["A", "B", "C"]) == pytest.approx(1.0)
    assert rbo(list("ABCDEFGHIJ"), list("ABCDEFGHIJ"), p=0.5) == pytest.approx(1.0)
    assert rbo(["A", "B", "C"], ["D", "E", "F"]) == 0.0
    assert rbo([], []) == 1.0
    # a = [A, B, C], b = [A, C, D], p = 0.9, depth k = 3 (extrapolated RBO, Webber et al. eq. 32):
    #   agreement A_d = X_d / d:  d=1 {A}∩{A} → 1/1;  d=2 {A,B}∩{A,C} → 1/2;  d=3 {A,B,C}∩{A,C,D} → 2/3
    #   Σ A_d p^d = 1·0.9 + 0.5·0.81 + (2/3)·0.729 = 0.9 + 0.405 + 0.486 = 1.791
    #   (1-p)/p · Σ = 1.791 / 9 = 0.199;   extrapolation (X_3/3)·p^3 = (2/3)·0.729 = 0.486
    #   RBO = 0.486 + 0.199 = 0.685
    assert rbo(["A", "B", "C"], ["A", "C", "D"], p=0.9, depth=3) == pytest.approx(0.685, abs=1e-12)
    # Swapping the top two costs more than disturbing rank 3: a = [A,B,C], b = [B,A,D]:
    #   A_1 = 0, A_2 = 1, A_3 = 2/3 → Σ = 0.81 + 0.486 = 1.296 → /9 = 0.144; + 0.486 → 0.630
    assert rbo(["A", "B", "C"], ["B", "A", "D"], depth=3) == pytest.approx(0.630, abs=1e-12)
    # Symmetric.
    assert rbo(["A", "C", "D"], ["A", "B", "C"], depth=3) == pytest.approx(0.685, abs=1e-12)


def test_dedupe_turns_chunk_hits_into_a_document_ranking() -> None:
    assert dedupe(["x", "y", "x", "z", "y"]) == ["x", "y", "z"]


def test_identical_rankings_shorter_than_k_score_full_agreement() -> None:
    side = SideResult(["A", "B", "C"], [], 0.001)
    row = score_query(Query("q", "text"), side, side, 10)
    assert row["overlap_at_10"] == 1.0
    assert row["rbo"] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# Evidence in a token budget
# --------------------------------------------------------------------------------------------

TEXT = "The quick brown fox jumps over the lazy dog."
C1 = Candidate("d", 0, 16, 4, TEXT[0:16])  # "The quick brown "
C2 = Candidate("d", 16, 44, 6, TEXT[16:44])  # "fox jumps over the lazy dog."
BIG = Candidate("big", 0, 100, 9, "x" * 100)


def test_pack_fills_the_budget_in_rank_order_and_skips_what_does_not_fit() -> None:
    cands = [Candidate("a", 0, 1, 5, "a"), Candidate("b", 0, 1, 10, "b"), Candidate("c", 0, 1, 3, "c"),
             Candidate("e", 0, 1, 2, "e")]
    # 5 fits (5); 10 would make 15 > 10: skipped; 3 fits (8); 2 fits exactly (10).
    assert [c.doc_id for c in pack(cands, budget=10)] == ["a", "c", "e"]
    assert [c.doc_id for c in pack(cands, budget=4)] == ["c"]  # 5 and 10 skipped, 3 fits, 3+2 > 4
    assert [c.doc_id for c in pack(cands, budget=100, limit=2)] == ["a", "b"]  # only the first 2 considered
    assert pack([], budget=10) == []


def test_evidence_across_two_adjacent_packed_chunks() -> None:
    assert C1.text + C2.text == TEXT
    evidence = "brown fox jumps"  # crosses the C1|C2 boundary
    # Budget 10: C1 (4) fits; BIG (9) would make 13: skipped; C2 (6) fits exactly → joined → recalled.
    packed = pack([C1, BIG, C2], budget=10)
    assert packed == [C1, C2]
    assert evidence_recalled(packed, evidence)
    # Budget 9: C1 fits, BIG skipped, C2 would make 10 > 9: skipped → half the evidence is not enough.
    packed = pack([C1, BIG, C2], budget=9)
    assert packed == [C1]
    assert not evidence_recalled(packed, evidence)
    assert evidence_recalled(packed, "quick brown")
    # Rank order does not matter for joining: chunks are ordered by their position in the document.
    assert evidence_recalled([C2, C1], evidence)


def test_evidence_joins_only_adjacent_or_overlapping_chunks_of_one_document() -> None:
    # Overlapping windows: [0,20) "The quick brown fox " and [16,44) "fox jumps…": the overlap counts once.
    w1, w2 = Candidate("d", 0, 20, 5, TEXT[0:20]), Candidate("d", 16, 44, 6, TEXT[16:44])
    assert evidence_recalled([w1, w2], "brown fox jumps over")
    assert not evidence_recalled([w1, w2], "fox fox")
    # A gap between chunks: [0,10) "The quick " and [16,44): "quick fox" must not appear.
    gap = Candidate("d", 0, 10, 2, TEXT[0:10])
    assert not evidence_recalled([gap, C2], "quick fox")
    assert not evidence_recalled([gap, C2], "quick brown")
    # Same offsets in two documents are not adjacent text.
    other = Candidate("e", 16, 44, 6, TEXT[16:44])
    assert not evidence_recalled([C1, other], "brown fox")
    assert evidence_recalled([C1, other], "lazy dog")


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------


def test_percentile_interpolates() -> None:
    assert percentile([4, 1, 3, 2], 0.5) == 2.5  # position 1.5 between 2 and 3
    assert percentile([1, 2, 3, 4], 0.0) == 1 and percentile([1, 2, 3, 4], 1.0) == 4
    assert percentile([1, 2, 3, 4], 0.95) == pytest.approx(3.85)  # position 2.85
    assert percentile([], 0.5) == 0.0


def test_paired_bootstrap_interval() -> None:
    # Constant differences: every resample has the same mean.
    assert paired_bootstrap([0.2] * 5) == {"mean": pytest.approx(0.2), "low": pytest.approx(0.2),
                                           "high": pytest.approx(0.2), "n": 5}
    # Two queries, differences 0 and 1: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2,
    # 1/4, so the 2.5 % and 97.5 % quantiles of 2,000 resamples are 0 and 1.
    assert paired_bootstrap([0.0, 1.0]) == {"mean": 0.5, "low": 0.0, "high": 1.0, "n": 2}
    diffs = [0.1, 0.4, -0.2, 0.3, 0.0, 0.5, -0.1, 0.2]
    iv = paired_bootstrap(diffs, seed=7)
    assert iv["mean"] == pytest.approx(sum(diffs) / len(diffs)) and iv["n"] == 8
    assert iv["low"] < iv["mean"] < iv["high"]
    assert min(diffs) <= iv["low"] and iv["high"] <= max(diffs)
    assert paired_bootstrap(diffs, seed=7) == iv  # seeded: reproducible
    narrow = paired_bootstrap(diffs, seed=7, confidence=0.5)
    assert iv["low"] <= narrow["low"] <= narrow["high"] <= iv["high"]
    assert paired_bootstrap([]) == {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 0}


# --------------------------------------------------------------------------------------------
# Scoring queries, aggregating, running both sides
# --------------------------------------------------------------------------------------------


def test_score_query_by_hand() -> None:
    old = SideResult(["A", "B", "C"], [], 0.002)
    new = SideResult(["B", "A", "D"], [], 0.004)
    row = score_query(Query("q1", "text", frozenset({"A"})), old, new, 3)
    assert row["overlap_at_3"] == pytest.approx(2 / 3)
    assert row["rbo"] == pytest.approx(0.630)  # worked above
    assert (row["recall_at_3_old"], row["recall_at_3_new"]) == (1.0, 1.0)
    assert row["ndcg_at_3_old"] == 1.0
    assert row["ndcg_at_3_new"] == pytest.approx(1 / math.log2(3))  # A at rank 2 of 1 relevant
    assert (row["mrr_old"], row["mrr_new"]) == (1.0, 0.5)
    assert (row["latency_old_ms"], row["latency_new_ms"]) == pytest.approx((2.0, 4.0))
    assert "evidence_recall_old" not in row
    unlabelled = score_query(Query("q2", "text"), old, new, 3)
    assert "recall_at_3_old" not in unlabelled and "mrr_new" not in unlabelled


def test_aggregate_means_and_paired_differences() -> None:
    rows = [
        {"overlap_at_2": 1.0, "rbo": 1.0, "latency_old_ms": 1.0, "latency_new_ms": 2.0,
         "recall_at_2_old": 1.0, "recall_at_2_new": 1.0, "ndcg_at_2_old": 1.0, "ndcg_at_2_new": 1.0,
         "mrr_old": 1.0, "mrr_new": 1.0},
        {"overlap_at_2": 0.0, "rbo": 0.0, "latency_old_ms": 3.0, "latency_new_ms": 4.0,
         "recall_at_2_old": 1.0, "recall_at_2_new": 0.0, "ndcg_at_2_old": 1.0, "ndcg_at_2_new": 0.0,
         "mrr_old": 1.0, "mrr_new": 0.5},
        {"overlap_at_2": 0.5, "rbo": 0.5, "latency_old_ms": 5.0, "latency_new_ms": 6.0},  # unlabelled
    ]
    agg = aggregate(rows, 2)
    assert agg["queries"] == 3
    assert agg["overlap_at_2"] == pytest.approx(0.5) and agg["rbo"] == pytest.approx(0.5)
    assert agg["latency_old_p50_ms"] == 3.0 and agg["latency_new_p95_ms"] == pytest.approx(5.8)  # [2,4,6] at position 1.9
    # Only the two labelled rows: recall old 1, new 0.5; differences 0 and −1.
    assert (agg["recall_at_2_old"], agg["recall_at_2_new"]) == (1.0, 0.5)
    assert agg["recall_at_2_diff"] == {"mean": -0.5, "low": -1.0, "high": 0.0, "n": 2}
    assert agg["mrr_diff"]["mean"] == pytest.approx(-0.25)
    assert "evidence_recall_diff" not in agg


class _FakeStore:
    """Answers a query by collection name from a fixed table of (doc_id, pipeline) chunk hits."""

    def __init__(self, table: dict[str, list[tuple[str, str]]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def query(self, name: str, vector, *, limit: int = 10) -> list[Hit]:
        self.calls.append(name)
        return [Hit(f"{name}-{i}", 1.0 - i / 100, {"doc_id": d, "pipeline_id": p, "start": 0, "end": 4,
                                                   "tokens": 1, "text": d})
                for i, (d, p) in enumerate(self.table[name][:limit])]


def test_evaluate_runs_each_query_on_both_sides() -> None:
    # Chunk hits: old repeats A (two chunks), new ranks B first.
    store = _FakeStore({"docs": [("A", "p-old"), ("A", "p-old"), ("B", "p-old")],
                        "docs__new": [("B", "p-new"), ("A", "p-new"), ("C", "p-new")]})
    embedded: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        embedded.append(texts)
        return [[0.0]] * len(texts)

    queries = [Query("q1", "first", frozenset({"A"})), Query("q2", "second", frozenset({"C"}))]
    out = evaluate(store, "docs", "docs__new", queries, embed, embed, k=2)
    assert embedded == [["first", "second"]], "one vector call per side, reused when the vector half is equal"
    # Each query on both sides, then timed four more times on both, interleaved (its latency the fastest of five).
    assert store.calls == (["docs", "docs__new"] * 5) * 2
    assert evaluate(store, "docs", "docs__new", queries, embed, embed, k=2, latency_repeats=0) and \
        store.calls[20:] == ["docs", "docs__new"] * 2
    assert out["pipelines_seen"] == {"old": ["p-old"], "new": ["p-new"]}
    r1, r2 = out["rows"]
    # Old documents [A, B], new [B, A] (k=2): same set, swapped.
    assert r1["overlap_at_2"] == 1.0
    assert (r1["mrr_old"], r1["mrr_new"]) == (1.0, 0.5)
    # q2: C is at new rank 3, outside k=2; old never has it.
    assert (r2["recall_at_2_old"], r2["recall_at_2_new"]) == (0.0, 0.0)
    assert (r2["mrr_old"], r2["mrr_new"]) == (0.0, pytest.approx(1 / 3))
    assert out["aggregate"]["mrr_diff"]["mean"] == pytest.approx(((0.5 - 1.0) + (1 / 3 - 0.0)) / 2)


def test_read_queries(tmp_path: Path) -> None:
    p = tmp_path / "q.jsonl"
    p.write_text("\n".join([
        json.dumps({"query": "what is PEP 8", "doc_path": "pep-0008.rst", "relevant": ["pep-0007.rst"],
                    "evidence": "Style Guide"}),
        "",
        json.dumps({"text": "unlabelled", "query_id": "u1", "evidence": ["a", "b"]}),
    ]) + "\n", encoding="utf-8")
    q1, q2 = read_queries(p)
    assert (q1.query_id, q1.text, q1.relevant, q1.evidence) == (
        "q1", "what is PEP 8", frozenset({"pep-0008.rst", "pep-0007.rst"}), ("Style Guide",))
    assert (q2.query_id, q2.relevant, q2.evidence) == ("u1", frozenset(), ("a", "b"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "ok"}\n{"doc_id": "x"}\n', encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"bad.jsonl:2: a query needs a 'query' field"):
        read_queries(bad)
    with pytest.raises(EvaluationError, match="queries file not found"):
        read_queries(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("content, message", [
    (b'["a list", "not an object"]\n', "expected a JSON object per line, got list"),
    (b'"just a string"\n', "expected a JSON object per line, got str"),
    (b'{"query": 42}\n', "'query' must be a string, got int"),
    (b'{"query": "q", "relevant": "doc-a"}\n', "'relevant' must be a list of document ids"),
    (b'{"query": "q", "doc_path": 7}\n', "'doc_path' must be a string, got int"),
    (b'{"query": "q", "evidence": [1, 2]}\n', "'evidence' must be a string or a list of strings"),
    (b'{"query": "caf\xe9"}\n', "not UTF-8 text"),
    (b'{"query": "q", "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b'}\n',
     r"q.jsonl:1: invalid JSON \(nested deeper than a query needs"),
])
def test_a_malformed_queries_file_is_one_error_naming_the_line(tmp_path, content: bytes, message: str) -> None:
    from reindex.decisions.evaluation import EvaluationError, read_queries

    path = tmp_path / "q.jsonl"
    path.write_bytes(content)
    with pytest.raises(EvaluationError, match=message):
        read_queries(path)


def _probes_before(docs: list[tuple[str, str]], n: int, seed: int) -> list:
    """The probe sampling as it was (every sentence of every document held, found by _SENTENCE)."""
    import random as _random

    from reindex.decisions.evaluation import _SENTENCE, Query

    rng = _random.Random(seed)
    pool = []
    for doc_id, text in docs:
        found = [m.group(0).strip() for m in _SENTENCE.finditer(text)]
        if found:
            pool.append((doc_id, found))
    rng.shuffle(pool)
    out = []
    for doc_id, found in pool[:n]:
        sentence = rng.choice(found)  # the same draws; a probe now also carries its sentence as evidence
        out.append(Query(f"probe-{len(out) + 1}", sentence, frozenset({doc_id}), (sentence,), "probe"))
    return out


def _sample_texts() -> list[tuple[str, str]]:
    corpus = Path(__file__).resolve().parents[1] / "src" / "reindex" / "sample" / "corpus"
    return [(p.name, p.read_text(encoding="utf-8")) for p in sorted(corpus.iterdir())]


def test_sentences_are_the_ones_the_sentence_pattern_finds() -> None:
    from reindex.decisions.evaluation import _SENTENCE, sentences

    texts = [t for _, t in _sample_texts()]
    texts += ["x" * 39 + ".", "x" * 40 + ".", "y" * 300 + "!", "a\n" + "b" * 50 + "?\n" + "c" * 60, "",
              "短句。" + "很长的中文句子" * 10 + "。", "z" * 50 + "\n" + "w" * 45 + ". " + "v" * 41 + ".\n"]
    snapshot = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "snapshot_new.parquet"
    if snapshot.exists():  # the real PEP snapshot, when ../shared is there
        import pyarrow.parquet as pq

        texts += pq.read_table(snapshot, columns=["text"]).column("text").to_pylist()
    for t in texts:
        assert sentences(t) == [m.group(0).strip() for m in _SENTENCE.finditer(t)]


def test_probes_are_the_ones_sampled_before_and_hold_only_counts() -> None:
    from reindex.decisions.evaluation import probe_queries

    docs = _sample_texts() + [("empty.rst", "no sentence here")]
    for n, seed in ((5, 0), (24, 0), (50, 3)):
        assert probe_queries(iter(docs), n, seed, again=lambda ids: iter(docs)) == _probes_before(docs, n, seed)
    assert probe_queries(list(docs), 5, 0) == _probes_before(docs, 5, 0)  # again defaults to docs once more
    asked: list[set[str]] = []

    def again(ids: set[str]):
        asked.append(ids)
        return ((d, t) for d, t in docs if d in ids)

    qs = probe_queries(iter(docs), 5, 0, again=again)
    assert asked == [{next(iter(q.relevant)) for q in qs}] and len(qs) == 5  # only the chosen are read again
    assert probe_queries(iter(docs), 0, 0, again=again) == []
