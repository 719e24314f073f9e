"""The anchored (boundary-stable) chunker: partition, determinism, limits, locality of edits, and
its behaviour on the real tokenizer and the shared corpus."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from reindex import measure as m
from reindex.adapters.chunkers import AnchoredChunker, make_chunker
from reindex.adapters.chunkers.anchored import local_maxima
from reindex.domain.config import AnchoredChunkerConfig, chunker_spec, parse_chunker_spec
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import load_tokenizer

WS = load_tokenizer("whitespace")
CHAR = load_tokenizer("char")
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def _doc(seed: int, paragraphs: int = 40) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(paragraphs):
        if i % 7 == 0:
            out.append(f"Section {i}\n" + "=" * 10)
        lines = []
        for _ in range(rng.randint(1, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
            lines.append(" ".join(words) + rng.choice([".", "", ","]))
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def test_spec_and_validation() -> None:
    assert chunker_spec(AnchoredChunkerConfig()) == "anchored:size=250"
    assert chunker_spec(parse_chunker_spec("anchored:size=100,cap=300")) == "anchored:size=100,cap=300"
    with pytest.raises(ChunkerError, match="cap"):
        parse_chunker_spec("anchored:size=100,cap=50")
    assert isinstance(make_chunker("anchored", WS), AnchoredChunker)


@pytest.mark.parametrize("seed", range(6))
def test_partitions_and_respects_cap(seed: int) -> None:
    text = _doc(seed)
    c = make_chunker("anchored:size=30", WS)
    chunks = c.chunk(text)
    assert "".join(ch.text for ch in chunks) == text
    assert [ch.start for ch in chunks[1:]] == [ch.end for ch in chunks[:-1]]
    assert all(0 < ch.tokens <= c.cap for ch in chunks)
    assert all(ch.tokens == WS.count(ch.text) for ch in chunks)


def test_deterministic_across_instances() -> None:
    text = _doc(11)
    a = [ch.text for ch in make_chunker("anchored:size=25", WS).chunk(text)]
    b = [ch.text for ch in make_chunker("anchored:size=25", WS).chunk(text)]
    assert a == b


def test_empty_short_and_single_chunk_documents() -> None:
    c = make_chunker("anchored:size=20", WS)
    assert c.chunk("") == [] and c.chunk(" \n\t ") == []
    short = "one two three.\n\nfour five."
    assert [ch.text for ch in c.chunk(short)] == [short]


def test_edit_moves_only_nearby_boundaries() -> None:
    # An edit can change decisions only within one window of itself, so chunks that end more than
    # window + cap tokens before it, or start that far after it, are byte-identical.
    text = _doc(3, paragraphs=80)
    c = make_chunker("anchored:size=30", WS)
    offs = WS.offsets(text)
    mid = int(offs[offs.shape[0] // 2, 0])
    edited = text[:mid] + "inserted words here and more " + text[mid:]
    old, new = c.chunk(text), c.chunk(edited)
    margin = c.window + c.cap
    tok_mid = offs.shape[0] // 2

    def far(chunks, shift: int) -> set[str]:
        out = set()
        for ch in chunks:
            a = WS.count(text[: ch.start]) if shift == 0 else WS.count(edited[: ch.start])
            b = a + ch.tokens
            if b < tok_mid - margin or a > tok_mid + shift + margin:
                out.add(ch.text)
        return out

    assert far(old, 0) == far(new, 5)
    assert len(far(old, 0)) > 10
    reused = sum(ch.tokens for ch in new if ch.text in {o.text for o in old})
    assert reused / sum(ch.tokens for ch in new) > 0.8


def test_prefers_headings_and_paragraph_ends() -> None:
    text = _doc(5, paragraphs=60)
    chunks = make_chunker("anchored:size=40", WS).chunk(text)
    # Every cut is at a structural candidate: after a blank line, a line break or a sentence end.
    for prev in chunks[:-1]:
        tail = prev.text.rstrip(" ")
        assert tail.endswith("\n") or tail.rstrip().endswith((".", ",")) or prev.tokens == make_chunker(
            "anchored:size=40", WS).cap
    starts_after_blank = sum(1 for p in chunks[:-1] if p.text.endswith("\n\n"))
    assert starts_after_blank >= len(chunks) // 2


def test_cjk_without_spaces_cuts_at_sentence_ends() -> None:
    sentence = "我们在这里测试中文分句的效果"
    text = "。".join(sentence for _ in range(60)) + "。"
    chunks = make_chunker("anchored:size=40", CHAR).chunk(text)
    assert "".join(ch.text for ch in chunks) == text
    assert len(chunks) > 5
    assert all(ch.text.endswith("。") for ch in chunks)
    assert all(ch.tokens <= 80 for ch in chunks)


def test_one_long_word_falls_back_to_windows() -> None:
    text = "x" * 500
    chunks = make_chunker("anchored:size=50", CHAR).chunk(text)
    assert "".join(ch.text for ch in chunks) == text
    assert all(ch.tokens <= 100 for ch in chunks) and len(chunks) >= 5


def test_local_maxima_rule() -> None:
    pos = np.array([10, 20, 30, 40, 50, 60], dtype=np.int64)
    rank = np.array([5, 1, 4, 0, 3, 2], dtype=np.int64)
    # w=15: 10 beats 20 (rank 5 > 1); 30 (4) beats 20 and 40 but must be >= 15 from lo=0: yes.
    # 10 is only 10 from lo with end=15: excluded. 50 (3) beats 40 and 60; 60 is 10 from hi=70.
    assert local_maxima(pos, rank, 0, 70, 15).tolist() == [30, 50]
    assert local_maxima(pos, rank, 0, 70, 15, end=5).tolist() == [10, 30, 50]


def test_real_tokenizer_on_the_shared_corpus(shared_corpus) -> None:
    tok = load_tokenizer("all-MiniLM-L6-v2")
    pairs = m.load_pairs(shared_corpus / "revisions.parquet")
    rng = random.Random(0)
    sample = rng.sample(pairs, 24)
    c = make_chunker("anchored:size=250", tok)
    lengths = []
    for p in sample:
        chunks = c.chunk(p.new_text)
        assert "".join(ch.text for ch in chunks) == p.new_text
        assert all(ch.tokens <= c.cap for ch in chunks)
        lengths.extend(tok.count_batch([ch.text for ch in chunks]))
    # size is about the median chunk length (within 15 %).
    assert abs(statistics.median(lengths) - 250) <= 0.15 * 250


def test_cheaper_than_fixed_windows_on_small_edits(shared_corpus) -> None:
    tok = load_tokenizer("all-MiniLM-L6-v2")
    pairs = [p for p in m.load_pairs(shared_corpus / "revisions.parquet") if p.band == "<=5%"][::10]
    cands = [m.Candidate(s, lambda s=s: make_chunker(s, tok)) for s in ("fixed:size=250", "anchored:size=250")]
    rep = m.run_measure(cands, pairs, tok.count_batch, tokenizer="all-MiniLM-L6-v2", source="dev")
    fixed, anchored = (next(b for b in c.bands if b.lang == "all" and b.band == "all") for c in rep.chunkers)
    assert anchored.rc_mean < 0.5 * fixed.rc_mean
    assert [c.no_edit_rc for c in rep.chunkers] == [0.0, 0.0]
