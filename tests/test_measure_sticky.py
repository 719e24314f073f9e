"""measure_sticky: R_c of sticky mode on pairs (hand-computed), the no-edit control, the report shape
the CLI prints, chains from a real git repository, tokens over a chain, and the retrieval adapter."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from reindex import measure as m
from reindex.measure import sticky as ms
from reindex.adapters.chunkers import make_chunker
from reindex.adapters.chunkers.sticky import StickyConfig
from reindex.domain.config import RechunkConfig
from reindex.adapters.tokenizers import load_tokenizer

WS = load_tokenizer("whitespace")


def _pair(pid: str, old: str, new: str, lang: str = "en", doc: str | None = None) -> m.RevisionPair:
    return m.RevisionPair(pid, lang, doc or pid, doc or pid, old, new, m.edit_fraction(old, new))


OLD = "a b c d e f g h i"


def test_sticky_pair_rc_by_hand() -> None:
    """fixed:size=3 over 9 words: ["a b c ", "d e f ", "g h i"]. One word inserted in front shifts
    every stateless window (R_c = 1); sticky keeps the three chunks and embeds only "X " (1 of 10)."""
    chunker, control = make_chunker("fixed:size=3", WS), make_chunker("fixed:size=3", WS)
    cfg = StickyConfig.of("fixed:size=3", RechunkConfig(mode="sticky"))
    pair = _pair("p1", OLD, "X " + OLD)
    got, recut = ms.sticky_pair(chunker, control, WS, cfg, pair, WS.count_batch)
    assert (got.missed_tokens, got.new_tokens, got.rc) == (1, 10, pytest.approx(0.1))
    assert got.chunk_tokens == (1, 3, 3, 3) and got.no_edit_missed == 0 and not recut
    stateless = m.measure_pair(chunker, control, pair, WS.count_batch)
    assert stateless.rc == 1.0


def test_measure_sticky_report_has_the_cli_shape_and_a_zero_control() -> None:
    pairs = [
        _pair("p1", OLD, "X " + OLD),
        _pair("p2", "one two three four\n\nfive six seven\n\neight nine", "one two three four\n\nfive SIX seven\n\neight nine",
              lang="zh"),
        _pair("p3", OLD, OLD.replace("e", "E")),
    ]
    report = ms.measure_sticky(["fixed:size=3"], pairs, WS, source="hand", with_stateless=True)
    d = json.loads(json.dumps(report.as_dict()))
    specs = [c["spec"] for c in d["chunkers"]]
    assert specs == ["fixed:size=3", "fixed:size=3+sticky"]
    sticky = d["chunkers"][1]
    assert {"spec", "no_edit_rc", "median_chunk_tokens", "failures", "bands"} <= set(sticky)
    assert sticky["no_edit_rc"] == 0 and sticky["failures"] == 0
    band = {(b["lang"], b["band"]): b for b in sticky["bands"]}
    assert all({"lang", "band", "pairs", "rc_mean", "rc_median"} <= set(b) for b in sticky["bands"])
    en_all = band[("en", "all")]
    # p1: 1/10; p3: "d e f " -> "d E f " misses 3 of 9 tokens.
    assert en_all["pairs"] == 2 and en_all["rc_mean"] == pytest.approx((0.1 + 3 / 9) / 2, abs=1e-6)
    # Paired difference sticky − stateless exists and is negative for English.
    diff = next(x for x in d["paired_differences"] if x["lang"] == "en" and x["band"] == "all")
    assert diff["b"] == "fixed:size=3+sticky" and diff["diff_points"] < 0
    assert any("re-cut 0 of 3" in w for w in d["warnings"])


def test_measure_sticky_flags_a_nondeterministic_control(monkeypatch) -> None:
    """The control re-chunks the old version against its own chunks; if it ever missed, the report
    would say so (checked by breaking rechunk_document for the control call only)."""
    real = ms.rechunk_document
    calls = {"n": 0}

    def flaky(previous, text, chunker, tokenizer, config):
        calls["n"] += 1
        done = real(previous, text, chunker, tokenizer, config)
        if calls["n"] % 2 == 0:  # every second call is the control
            return real([], text + " extra", chunker, tokenizer, config)
        return done

    monkeypatch.setattr(ms, "rechunk_document", flaky)
    report = ms.measure_sticky(["fixed:size=3"], [_pair("p1", OLD, "X " + OLD)], WS, source="hand")
    assert report.chunkers[0].no_edit_rc > 0
    assert any("no-edit control" in w for w in report.warnings)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_chains_from_git_and_tokens_over_a_chain(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    versions = [OLD, "X " + OLD, "X " + OLD, "X " + OLD + " j", "Y X " + OLD + " j"]
    for k, text in enumerate(versions):
        (repo / "doc.txt").write_text(text, encoding="utf-8")
        (repo / "other.txt").write_text(str(k), encoding="utf-8")  # commits that leave doc.txt alone
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"v{k}")
    [chain] = ms.chains_from_git(repo / ".git", ["doc.txt"], lang="en", last=10)
    assert chain.texts == (OLD, "X " + OLD, "X " + OLD + " j", "Y X " + OLD + " j")
    assert len(chain.commits) == 4
    [short] = ms.chains_from_git(repo / ".git", ["doc.txt"], lang="en", last=2)
    assert short.texts == chain.texts[-2:]

    chunker = make_chunker("fixed:size=3", WS)
    cfg = StickyConfig.of("fixed:size=3", RechunkConfig(mode="sticky", max_drift=10.0))
    sticky = ms.run_chain(chain, chunker, WS, cfg)
    stateless = ms.run_chain(chain, chunker, WS, None)
    # Sticky: "X " (1); then " j" appended: "g h i" now ends inside a token run ("g h i j"), so it is
    # not a valid cut and not kept; the gap "g h i j" is cut by the chunker into "g h i " and "j"
    # (3 + 1); then "Y " (1).
    assert [s.missed_tokens for s in sticky.steps] == [9, 1, 4, 1]
    assert [s.new_tokens for s in sticky.steps] == [9, 10, 11, 12]
    assert sticky.embedded_after_initial == 6
    # Stateless windows: every window shifts (10), "i" -> "i j" (2), every window shifts (12).
    assert [s.missed_tokens for s in stateless.steps] == [9, 10, 2, 12]
    summary = ms.chain_summary([sticky], [stateless])
    en = summary["en"]
    assert en["tokens_sticky"] == 6 and en["tokens_stateless"] == 24 and en["tokens_whole_documents"] == 33
    assert en["ratio_sticky_stateless"][0] == pytest.approx(6 / 24, abs=1e-4)
    assert en["revisions"] == 3 and en["recuts"] == 0
    # With the default threshold the last revision (lengths 1,1,3,3,3,1 against a fresh 3,3,3,3:
    # W1 = 1, / median 3 = 0.33 > 0.25) is re-cut freshly: all 12 tokens embedded, drift reset.
    controlled = ms.run_chain(chain, chunker, WS, StickyConfig.of("fixed:size=3", RechunkConfig(mode="sticky")))
    assert [s.recut for s in controlled.steps] == [False, False, False, True]
    assert [s.missed_tokens for s in controlled.steps] == [9, 1, 4, 12]
    assert controlled.steps[-1].drift.distance == 0
    assert sticky.steps[-1].drift.distance == pytest.approx(1 / 3)


def test_fixed_chunks_serves_final_chunks_and_falls_back() -> None:
    chunker = make_chunker("fixed:size=3", WS)
    cfg = StickyConfig.of("fixed:size=3", RechunkConfig(mode="sticky"))
    chain = ms.Chain("c", "en", "d", (OLD, "X " + OLD), ("a", "b"))
    run = ms.run_chain(chain, chunker, WS, cfg)
    fixed = ms.FixedChunks({chain.texts[-1]: run.final}, chunker)
    assert [c.text for c in fixed.chunk("X " + OLD)] == ["X ", "a b c ", "d e f ", "g h i"]
    assert [c.text for c in fixed.chunk("X " + OLD)] != [c.text for c in chunker.chunk("X " + OLD)]
    assert fixed.chunk("p q r s") == chunker.chunk("p q r s")
    # It plugs into measure's retrieval evaluation unchanged.
    corpus = {"d": "X " + OLD}
    q = m.Query("q1", "g h i", frozenset({"d"}), ("g h i",), lang="en")

    def embed(texts):
        return np.asarray([[1.0, float(len(t))] for t in texts], dtype=np.float32)

    res = m.evaluate_retrieval(fixed, corpus, ["d"], [q], embed=embed, dim=2, fingerprint=lambda t: t,
                               count=WS.count_batch, cache=None, lang="en")
    assert res.chunks == 4 and res.evidence_recall == 1.0


def test_chains_follow_renames(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    for k, text in enumerate([OLD, "X " + OLD]):
        (repo / "old.txt").write_text(text, encoding="utf-8")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"v{k}")
    _git(repo, "mv", "old.txt", "new.txt")
    _git(repo, "commit", "-q", "-m", "rename")
    (repo / "new.txt").write_text("Y X " + OLD, encoding="utf-8")
    _git(repo, "commit", "-q", "-am", "v3")
    [plain] = ms.chains_from_git(repo / ".git", ["new.txt"], lang="en")
    [followed] = ms.chains_from_git(repo / ".git", ["new.txt"], lang="en", follow=True)
    assert plain.texts == ("X " + OLD, "Y X " + OLD)
    assert followed.texts == (OLD, "X " + OLD, "Y X " + OLD)


def test_cli_measure_rechunk_sticky_prints_the_same_json_shape(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from reindex.cli import main

    old = "\n\n".join(f"Paragraph {i} says something about topic {i} in a few words." for i in range(40))
    new = old.replace("Paragraph 7 says", "Paragraph 7 now says")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"pair_id": "p1", "lang": "en", "doc_path": "a.md", "old_text": old,
                                 "new_text": new}) + "\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["measure", "--pairs", str(pairs), "--chunker", "recursive:size=40",
                                  "--rechunk", "sticky", "--json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    [c] = body["chunkers"]
    assert c["spec"].endswith("+sticky") and c["no_edit_rc"] == 0
    assert {"median_chunk_tokens", "failures", "bands"} <= set(c)
    [band] = [b for b in c["bands"] if b["band"] == "all" and b["lang"] == "en"] or c["bands"][:1]
    assert 0 < band["rc_mean"] < 1


def test_reuse_floor_is_the_oracle_below_the_lower_bound_merge() -> None:
    """The floor keeps every reusable old chunk and embeds only the rest; sticky with lo = 3 merges
    the 1-token insertion into "f g" (3 of 13 tokens), the floor embeds the insertion alone (1 of 13)."""
    chunker, control = make_chunker("recursive:size=6", WS), make_chunker("recursive:size=6", WS)
    old = "a b c d e\n\nf g\n\nh i j k l\n\n"
    assert [c.text for c in chunker.chunk(old)] == ["a b c d e\n\n", "f g\n\n", "h i j k l\n\n"]
    pair = _pair("p1", old, "a b c d e\n\nNEW\n\nf g\n\nh i j k l\n\n")
    cfg = StickyConfig(lo=3, hi=6, max_drift=10, max_out_of_bounds=1)
    got, _ = ms.sticky_pair(chunker, control, WS, cfg, pair, WS.count_batch)
    assert got.rc == pytest.approx(3 / 13)
    assert ms.floor_pair(chunker, WS, cfg, pair) == pytest.approx(1 / 13)
    # A moved section costs nothing at the floor (and in sticky mode: the alignment is order-free).
    moved = _pair("p2", old, "h i j k l\n\na b c d e\n\nf g\n\n")
    assert ms.floor_pair(chunker, WS, cfg, moved) == 0
    assert ms.sticky_pair(chunker, control, WS, cfg, moved, WS.count_batch)[0].rc == 0
    # measure_sticky names the floor per language in its warnings (the JSON keys stay as they were).
    report = ms.measure_sticky(["recursive:size=6"], [pair, moved], WS, source="hand",
                               rechunk=RechunkConfig(mode="sticky", min_share=0.5))
    assert any("reuse floor" in w and "en 3.8 %" in w for w in report.warnings)
