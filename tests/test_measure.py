"""reindex measure: pairs (file and git), edit fraction, statistics, calibration, failures,
retrieval, reports and the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from reindex import measure as m
from reindex.adapters.chunkers import make_chunker
from reindex.cli import main
from reindex.domain.config import chunker_spec, parse_chunker_spec
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import load_tokenizer

WS = load_tokenizer("whitespace")


def _cand(spec: str, tok=WS) -> m.Candidate:
    return m.Candidate(spec, lambda: make_chunker(spec, tok))


# -- pairs ------------------------------------------------------------------------------------


def test_band_boundaries() -> None:
    assert [m.band_of(x) for x in (0.0, 0.05, 0.0500001, 0.2, 0.21, 0.5, 0.51, 1.0)] == [
        "<=5%", "<=5%", "5-20%", "5-20%", "20-50%", "20-50%", ">50%", ">50%"]


def test_edit_fraction_by_hand() -> None:
    # Identical → 0; disjoint → 1; "ab\n" vs "ab\ncd\n": 3 matched chars of 3 + 6 → 1 - 6/9.
    assert m.edit_fraction("same\n", "same\n") == 0.0
    assert m.edit_fraction("", "") == 0.0
    assert m.edit_fraction("abc", "xyz") == 1.0
    assert m.edit_fraction("ab\n", "ab\ncd\n") == pytest.approx(1 - 6 / 9)
    # A replaced line re-aligned over tokens: "the cat sat\n" vs "the dog sat\n": tokens the, ' ',
    # ' ', sat, '\n' match (3 + 1 + 1 + 3 + 1 = 9 chars) of 12 + 12 → 1 - 18/24.
    assert m.edit_fraction("the cat sat\n", "the dog sat\n") == pytest.approx(1 - 18 / 24)


def test_edit_fraction_matches_the_corpus(shared_corpus) -> None:
    pairs = m.load_pairs(shared_corpus / "revisions.parquet")
    small = sorted(pairs, key=lambda p: len(p.old_text) + len(p.new_text))[:12:2]
    for p in small:
        assert m.edit_fraction(p.old_text, p.new_text) == pytest.approx(p.edit_fraction, abs=1e-6), p.pair_id  # the corpus rounds to 6 places


def test_load_pairs_jsonl_computes_missing_edit_fraction(tmp_path: Path) -> None:
    f = tmp_path / "pairs.jsonl"
    f.write_text(json.dumps({"pair_id": "x1", "lang": "en", "doc_path": "a.md", "old_text": "abc", "new_text": "xyz"}) + "\n")
    [p] = m.load_pairs(f)
    assert (p.pair_id, p.doc_key, p.edit_fraction, p.band) == ("x1", "a.md", 1.0, ">50%")
    with pytest.raises(m.MeasureError, match="pairs file not found"):
        m.load_pairs(tmp_path / "nope.parquet")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"pair_id": "x"}\n')
    with pytest.raises(m.MeasureError, match="no text column"):
        m.load_pairs(bad)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin", "HOME": str(repo)})


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    _git(repo, "init", "-q")
    versions = ["one\n\ntwo\n", "one\n\ntwo\n\nthree\n", "ONE\n\ntwo\n\nthree\n"]
    for i, text in enumerate(versions):
        (repo / "docs" / "a.md").write_text(text)
        (repo / "notes.txt").write_text(f"note {i}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"v{i}")
    return repo


def test_pairs_from_git(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    pairs = m.pairs_from_git(repo, "docs/**/*.md", lang="en")
    # Two modifying commits of docs/a.md (the first commit adds it); notes.txt does not match.
    assert [(p.doc_path, p.old_text, p.new_text) for p in pairs] == [
        ("docs/a.md", "one\n\ntwo\n\nthree\n", "ONE\n\ntwo\n\nthree\n"),
        ("docs/a.md", "one\n\ntwo\n", "one\n\ntwo\n\nthree\n"),
    ]
    assert pairs[1].edit_fraction == pytest.approx(m.edit_fraction("one\n\ntwo\n", "one\n\ntwo\n\nthree\n"))
    assert len(m.pairs_from_git(repo, "docs/**/*.md", limit=1)) == 1
    with pytest.raises(m.MeasureError, match="not a folder"):
        m.pairs_from_git(tmp_path / "missing", "*.md")


# -- statistics -------------------------------------------------------------------------------


def test_bootstrap_resamples_documents_not_pairs() -> None:
    # All pairs of one document: every resample draws that document, the interval collapses.
    mean, lo, hi = m.bootstrap_mean([0.1, 0.3, 0.5], ["d", "d", "d"], seed=1)
    assert (mean, lo, hi) == pytest.approx((0.3, 0.3, 0.3))
    # Two documents, one with 3 equal pairs: resampling documents gives only 3 distinct means.
    vals, groups = [1.0, 1.0, 1.0, 0.0], ["a", "a", "a", "b"]
    _, lo, hi = m.bootstrap_mean(vals, groups, seed=1)
    assert lo == 0.0 and hi == 1.0
    assert m.bootstrap_mean(vals, groups, seed=7) == m.bootstrap_mean(vals, groups, seed=7)


def test_paired_differences_and_bands() -> None:
    pairs = [
        m.RevisionPair("p1", "en", "d1", "d1", "a b c d", "x b c d", 0.01),
        m.RevisionPair("p2", "en", "d2", "d2", "a b c d", "z a b c d", 0.1),
    ]
    rep = m.run_measure([_cand("fixed:size=2"), _cand("paragraph:size=2")], pairs, WS.count_batch,
                        tokenizer="whitespace", source="t")
    fixed = {(b.lang, b.band): b for b in rep.chunkers[0].bands}
    # fixed: p1 = 2/4, p2 = 5/5 (hand-computed in test_measure_contracts).
    assert fixed["en", "<=5%"].rc_mean == 0.5 and fixed["en", "5-20%"].rc_mean == 1.0
    assert fixed["en", "all"].pairs == 2 and fixed["en", ">50%"].pairs == 0
    assert {b.band for b in rep.chunkers[0].bands} == set(m.BAND_NAMES)
    d = next(x for x in rep.paired if x["band"] == "all")
    assert d["a"] == "fixed:size=2" and d["b"] == "paragraph:size=2" and d["pairs"] == 2


def test_failures_are_counted_not_raised() -> None:
    class Flaky:
        def chunk(self, text: str) -> list[str]:
            if "boom" in text:
                raise ValueError("cannot chunk this")
            return text.split()

    pairs = [m.RevisionPair("ok", "en", "d1", "d1", "a b", "a c", 0.3),
             m.RevisionPair("bad", "en", "d2", "d2", "boom", "boom x", 0.3)]
    rep = m.run_measure([m.Candidate("flaky", Flaky)], pairs, WS.count_batch, tokenizer="whitespace", source="t")
    c = rep.chunkers[0]
    assert c.failures == 1
    assert c.as_dict()["failed_pairs"] == [{"pair_id": "bad", "error": "ValueError: cannot chunk this"}]
    assert next(b for b in c.bands if b.band == "all").pairs == 1
    assert any("failed on 1 of 2" in w for w in rep.warnings)


def test_length_warning() -> None:
    pairs = [m.RevisionPair("p", "en", "d", "d", "a " * 40, "b " * 40, 1.0)]
    rep = m.run_measure([_cand("fixed:size=4"), _cand("fixed:size=10")], pairs, WS.count_batch, tokenizer="w", source="t")
    assert any("not matched" in w for w in rep.warnings)


# -- calibration ------------------------------------------------------------------------------


def test_calibrate_size_finds_the_target() -> None:
    texts = [" ".join(f"w{i}" for i in range(400))] * 3
    size, med = m.calibrate_size(lambda v: make_chunker(f"fixed:size={v}", WS), texts, WS.count_batch, target=25)
    assert (size, med) == (25, 25.0)


def test_scale_chunker() -> None:
    cdc = m.scale_chunker(parse_chunker_spec("cdc:min=176,max=352,cap=512"), 176)
    assert chunker_spec(cdc) == "cdc:min=88,max=176,cap=256,window=8"
    assert chunker_spec(m.scale_chunker(parse_chunker_spec("anchored:size=100,cap=300"), 50)) == "anchored:size=50,cap=150"
    with pytest.raises(ChunkerError, match="cannot scale sentence"):
        m.scale_chunker(parse_chunker_spec("sentence"), 10)


def test_calibration_split_is_by_document_and_deterministic() -> None:
    pairs = [m.RevisionPair(f"p{i}", "en", f"d{i % 50}", "x", "a", "b", 0.1) for i in range(200)]
    held, rest = m.calibration_split(pairs)
    assert not {p.doc_key for p in held} & {p.doc_key for p in rest}
    assert 0 < len({p.doc_key for p in held}) < 15
    assert m.calibration_split(pairs) == (held, rest)


# -- retrieval ----------------------------------------------------------------------------------


def _bow(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, sum(map(ord, w)) % 64] += 1
    n = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(n == 0, 1, n)


def test_retrieval_metrics_and_cache(tmp_path: Path) -> None:
    corpus = {"a.md": "apples grow on trees.\n\nred apples are sweet.", "b.md": "cars drive on roads.\n\nfast cars are loud."}
    qs = [m.Query("q1", "sweet red apples", frozenset({"a.md"}), ("red apples are sweet.",), lang="en"),
          m.Query("q2", "loud fast cars", frozenset({"b.md"}), ("roads.\n\nfast cars",), lang="en")]
    calls = []

    def embed(texts):
        calls.append(len(texts))
        return _bow(texts)

    chunker = make_chunker("paragraph:size=4", WS)
    cache = m.EmbeddingCache(tmp_path, "v" * 32)
    kw = dict(embed=embed, dim=64, fingerprint=lambda t: "fp-" + t, count=WS.count_batch, lang="en")
    r = m.evaluate_retrieval(chunker, corpus, sorted(corpus), qs, cache=cache, **kw)
    assert (r.queries, r.pool_docs, r.chunks) == (2, 2, 4)
    # Budget 2048 packs everything; q2's evidence spans two adjacent chunks of b.md, joined.
    assert r.evidence_recall == 1.0 and r.hit_at_5 == 1.0 and r.mrr == 1.0 and r.ndcg_at_5 == 1.0
    assert r.embedded == 4
    again = m.evaluate_retrieval(chunker, corpus, sorted(corpus), qs, cache=m.EmbeddingCache(tmp_path, "v" * 32), **kw)
    assert again.embedded == 0 and again.evidence_recall == 1.0
    tight = m.evaluate_retrieval(chunker, corpus, sorted(corpus), qs, cache=cache, budget=4, **kw)
    assert tight.evidence_recall == 0.5  # only the best chunk per query fits: q2's evidence spans two


def test_retrieval_pool_keeps_query_documents() -> None:
    corpus = {f"d{i}": "x" for i in range(30)}
    qs = [m.Query("q", "x", frozenset({"d7"}), ("x",), lang="en")]
    pool = m.retrieval_pool(corpus, qs, 10, seed=3)
    assert len(pool) == 10 and "d7" in pool and pool == m.retrieval_pool(corpus, qs, 10, seed=3)
    assert len(m.retrieval_pool(corpus, qs, None)) == 30


# -- CLI ------------------------------------------------------------------------------------------


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text("version: 1\nindex: t\nsource: .\ntext:\n  tokenizer: whitespace\n")
    return cfg


def _pairs_file(tmp_path: Path) -> Path:
    f = tmp_path / "pairs.jsonl"
    rows = [
        {"pair_id": "p1", "lang": "en", "doc_path": "a", "old_text": "a b c d", "new_text": "x b c d", "edit_fraction": 0.01},
        {"pair_id": "p2", "lang": "zh", "doc_path": "b", "old_text": "a b c d", "new_text": "a b c d e f", "edit_fraction": 0.3},
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_cli_json(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["measure", "--pairs", str(_pairs_file(tmp_path)), "-c", str(_config(tmp_path)),
                                    "--chunker", "fixed:size=2", "--chunker", "paragraph:size=2", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [c["spec"] for c in data["chunkers"]] == ["fixed:size=2", "paragraph:size=2"]
    fixed = data["chunkers"][0]
    assert fixed["no_edit_rc"] == 0 and fixed["failures"] == 0 and fixed["median_chunk_tokens"] == 2
    bands = {(b["lang"], b["band"]): b for b in fixed["bands"]}
    assert bands["en", "<=5%"]["rc_mean"] == 0.5 and bands["zh", "20-50%"]["rc_mean"] == pytest.approx(4 / 6, abs=1e-6)
    assert {b["band"] for b in fixed["bands"]} == {"<=5%", "5-20%", "20-50%", ">50%", "all"}
    assert data["paired_differences"]


def test_cli_report_files(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    res = CliRunner().invoke(main, ["measure", "--pairs", str(_pairs_file(tmp_path)), "-c", str(_config(tmp_path)),
                                    "--chunker", "fixed:size=2", "--chunker", "anchored:size=2", "--report", str(out)])
    assert res.exit_code == 0, res.output
    assert "fixed:size=2" in res.output
    html = (out / "measure.html").read_text()
    assert "<svg" in html and "<script" not in html and "anchored:size=2" in html
    md = (out / "measure.md").read_text()
    assert "| chunker | lang | band |" in md
    assert json.loads((out / "measure.json").read_text())["pairs"] == 2


def test_cli_from_git(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    res = CliRunner().invoke(main, ["measure", "--from-git", str(repo), "--paths", "docs/*.md", "-c", str(_config(tmp_path)),
                                    "--chunker", "paragraph:size=1", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["pairs"] == 2
    # v1→v2: "one\n\n" → "ONE\n\n" (1 miss of 3 distinct tokens); v0→v1: "two\n" → "two\n\n" and
    # "three\n" are new (2 of 3). Mean (1/3 + 2/3) / 2.
    all_band = next(b for b in data["chunkers"][0]["bands"] if b["band"] == "all")
    assert all_band["rc_mean"] == pytest.approx(0.5, abs=1e-6)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pairs", "x.jsonl", "--from-git", "."], "error: give exactly one of --pairs FILE or --from-git REPO\n"),
        ([], "error: give exactly one of --pairs FILE or --from-git REPO\n"),
        (["--from-git", "."], "error: --from-git needs --paths GLOB (e.g. --paths 'docs/**/*.md')\n"),
        (["--pairs", "x.jsonl", "--queries", "q.jsonl"],
         "error: --queries and --corpus go together: give the queries file and the snapshot they refer to\n"),
        (["--pairs", "missing.jsonl"],
         "error: missing.jsonl: pairs file not found (give a .parquet or .jsonl file of revision pairs)\n"),
        (["--pairs", "x.jsonl", "--chunker", "fancy"],
         "error: unknown chunker kind 'fancy' in spec 'fancy'; allowed: anchored, callable, cdc, fixed, fixed_chars, "
         "langchain, markdown, paragraph, recursive, sentence, sliding\n"),
        (["--pairs", "x.jsonl", "--chunker", "sentence", "--calibrate"],
         "error: --calibrate cannot scale sentence chunkers (no size parameter); calibratable kinds: anchored, cdc, "
         "fixed, fixed_chars, markdown, paragraph, recursive, sliding\n"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str) -> None:
    res = CliRunner().invoke(main, ["measure", *args])
    assert res.exit_code == 1
    assert res.output == message


def test_default_chunkers_on_shared_pairs(shared_corpus) -> None:
    res = CliRunner().invoke(main, ["measure", "--pairs", str(shared_corpus / "revisions.parquet"), "--limit", "6",
                                    "--band", "<=5%", "--lang", "zh", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [c["spec"].split(":")[0] for c in data["chunkers"]] == list(m.DEFAULT_CHUNKERS)
    assert all(c["no_edit_rc"] == 0 for c in data["chunkers"])
    assert data["pairs"] == 6 and data["languages"] == ["zh"]


def test_retrieval_metrics_golden_numbers() -> None:
    """Pinned before the metrics moved to one home (evaluation.py): measure's document-level Hit@5, MRR and
    nDCG@5 and evidence recall on a corpus where rankings are not all first place."""
    words = ["apples", "trees", "cars", "roads", "ships", "seas", "birds", "skies", "fish", "rivers", "stone",
             "walls", "clocks", "towers", "bread", "ovens"]
    corpus = {f"d{i}.md": "\n\n".join(" ".join(words[(i * 3 + j * 5 + n) % 16] for n in range(6)) + "."
                                      for j in range(3)) for i in range(12)}
    qs = [m.Query(f"q{i}", " ".join(words[(i * 7 + n) % 16] for n in range(3)), frozenset({f"d{i}.md"}),
                  (corpus[f"d{i}.md"].split("\n\n")[1],), lang="en") for i in range(12)]
    chunker = make_chunker("paragraph:size=8", WS)
    r = m.evaluate_retrieval(chunker, corpus, sorted(corpus), qs, embed=_bow, dim=64, fingerprint=lambda t: "fp-" + t,
                             count=WS.count_batch, cache=None, lang="en", budget=120)
    assert (r.queries, r.chunks) == (12, 36)
    assert (round(r.evidence_recall, 6), round(r.hit_at_5, 6), round(r.mrr, 6), round(r.ndcg_at_5, 6)) == GOLDEN_RETRIEVAL


GOLDEN_RETRIEVAL = (0.583333, 0.333333, 0.245406, 0.20769)
