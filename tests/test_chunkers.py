"""Chunkers: construction, each family's rules on hand-made documents, and the real tokenizer on the
shared corpus."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from reindex.adapters.chunkers import Chunk, Chunker, is_partitioning, make_chunker, sliding_count
from reindex.adapters.chunkers.cdc import rolling_hash, word_hashes
from reindex.adapters.chunkers.markdown import heading_positions
from reindex.domain.config import (
    CdcChunkerConfig,
    FixedChunkerConfig,
    SentenceChunkerConfig,
    SlidingChunkerConfig,
    chunker_spec,
)
from reindex.errors import ChunkerError
from reindex.adapters.tokenizers import load_tokenizer

WS = load_tokenizer("whitespace")
CHAR = load_tokenizer("char")

ALL_SPECS = [
    "fixed:size=8",
    "sliding:size=8,overlap=0.25",
    "fixed_chars:size=20",
    "sentence:sentences=2",
    "paragraph:size=8",
    "recursive:size=8",
    "cdc:min=2,max=6,cap=10",
    "markdown:size=8",
]


def texts(chunks: list[Chunk]) -> list[str]:
    return [c.text for c in chunks]


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_make_chunker_from_spec_or_config_gives_the_canonical_spec(spec: str) -> None:
    from reindex.domain.config import parse_chunker_spec

    cfg = parse_chunker_spec(spec)
    by_spec = make_chunker(spec, WS)
    by_cfg = make_chunker(cfg, "whitespace")
    assert isinstance(by_spec, Chunker)
    assert by_spec.spec == by_cfg.spec == chunker_spec(cfg)
    assert by_spec.chunk("a b. c d\n\ne f") == by_cfg.chunk("a b. c d\n\ne f")


@pytest.mark.parametrize("spec", ALL_SPECS)
@pytest.mark.parametrize("text", ["", " ", "\n\n \t\u3000"])
def test_empty_and_blank_documents_have_no_chunks(spec: str, text: str) -> None:
    assert make_chunker(spec, WS).chunk(text) == []


def test_bad_specs_and_configs_are_chunker_errors() -> None:
    with pytest.raises(ChunkerError, match="unknown chunker kind"):
        make_chunker("nonsense:size=3", WS)
    with pytest.raises(ChunkerError, match="size"):
        make_chunker("fixed:size=0", WS)
    with pytest.raises(ChunkerError, match="cannot build a chunker"):
        make_chunker(42, WS)


def test_is_partitioning() -> None:
    assert is_partitioning(FixedChunkerConfig())
    assert not is_partitioning(SlidingChunkerConfig(overlap=0.2))
    assert is_partitioning(SlidingChunkerConfig(overlap=0.0))
    assert not is_partitioning(SentenceChunkerConfig(sentences=3, overlap=1))
    assert is_partitioning(CdcChunkerConfig())


def test_a_document_without_tokens_is_one_chunk() -> None:
    # BERT drops control characters: the document has content but no tokens.
    minilm = load_tokenizer("all-MiniLM-L6-v2")
    chunks = make_chunker("recursive:size=4", minilm).chunk("\x01\x02 \x03")
    assert [(c.start, c.end, c.tokens) for c in chunks] == [(0, 4, 0)]


# -- fixed and sliding ---------------------------------------------------------------------------


def test_fixed_windows_cut_before_every_size_th_token_and_keep_whitespace_behind() -> None:
    chunks = make_chunker("fixed:size=4", WS).chunk("  " + words(10) + "\n")
    assert texts(chunks) == ["  w0 w1 w2 w3 ", "w4 w5 w6 w7 ", "w8 w9\n"]
    assert [c.tokens for c in chunks] == [4, 4, 2]
    assert [c.ordinal for c in chunks] == [0, 1, 2]
    assert [(c.start, c.end) for c in chunks] == [(0, 14), (14, 26), (26, 32)]


@pytest.mark.parametrize("n", [1, 7, 8, 9, 16, 17, 100, 257])
@pytest.mark.parametrize(("size", "overlap"), [(8, 0.25), (8, 0.0), (5, 0.5), (10, 0.1), (3, 0.6), (256, 0.2)])
def test_sliding_chunk_count_is_seed_001s_formula(n: int, size: int, overlap: float) -> None:
    chunks = make_chunker(SlidingChunkerConfig(size=size, overlap=overlap), WS).chunk(words(n))
    stride = int(size * (1 - overlap))
    expected = 1 if n <= size else 1 + math.ceil((n - size) / stride)
    assert len(chunks) == expected == sliding_count(n, size, overlap)
    # The total of chunk tokens is seed 001's billed_tokens.
    assert sum(c.tokens for c in chunks) == n + (expected - 1) * (size - stride)
    assert chunks[-1].end == len(words(n))
    assert all(c.tokens <= size for c in chunks)


def test_sliding_stride_is_at_least_one_token() -> None:
    chunks = make_chunker("sliding:size=2,overlap=0.9", WS).chunk(words(5))
    assert [c.text.split() for c in chunks] == [["w0", "w1"], ["w1", "w2"], ["w2", "w3"], ["w3", "w4"]]


def test_sliding_windows_repeat_the_overlap() -> None:
    chunks = make_chunker("sliding:size=4,overlap=0.5", WS).chunk(words(8))
    assert [c.text.split() for c in chunks] == [
        ["w0", "w1", "w2", "w3"],
        ["w2", "w3", "w4", "w5"],
        ["w4", "w5", "w6", "w7"],
    ]


def test_sliding_without_overlap_equals_fixed() -> None:
    text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 20
    minilm = load_tokenizer("all-MiniLM-L6-v2")
    assert make_chunker("sliding:size=13,overlap=0", minilm).chunk(text) == make_chunker("fixed:size=13", minilm).chunk(text)


def test_fixed_chars_windows_and_token_counts_in_document_context() -> None:
    chunks = make_chunker("fixed_chars:size=4", WS).chunk("abcdefgh ij")
    assert texts(chunks) == ["abcd", "efgh", " ij"]
    # "abcdefgh" is one token that starts in the first window.
    assert [c.tokens for c in chunks] == [1, 0, 1]
    overlapping = make_chunker("fixed_chars:size=4,overlap=0.5", WS).chunk("abcdefgh")
    assert texts(overlapping) == ["abcd", "cdef", "efgh"]


# -- sentence ------------------------------------------------------------------------------------


def test_chinese_sentences_end_without_whitespace() -> None:
    chunks = make_chunker("sentence:sentences=1", CHAR).chunk("第一句。第二句！第三句？第四句")
    assert texts(chunks) == ["第一句。", "第二句！", "第三句？", "第四句"]


def test_latin_sentences_need_whitespace_after_the_terminator() -> None:
    text = "Pi is 3.14 today. Really?! Yes (see e.g.this).\nNext line\n\nNew paragraph"
    chunks = make_chunker("sentence:sentences=1", WS).chunk(text)
    assert texts(chunks) == [
        "Pi is 3.14 today. ",
        "Really?! ",
        "Yes (see e.g.this).\n",
        "Next line\n\n",
        "New paragraph",
    ]


def test_sentence_groups_with_overlap() -> None:
    text = "S1. S2. S3. S4. S5."
    chunks = make_chunker("sentence:sentences=3,overlap=1", WS).chunk(text)
    assert [c.text.strip() for c in chunks] == ["S1. S2. S3.", "S3. S4. S5."]
    chunks = make_chunker("sentence:sentences=2", WS).chunk(text)
    assert texts(chunks) == ["S1. S2. ", "S3. S4. ", "S5."]


def test_sentence_groups_over_the_cap_are_split() -> None:
    text = "a b. c d e f g h i j. k."
    chunks = make_chunker("sentence:sentences=3,size=4", WS).chunk(text)
    assert texts(chunks) == ["a b. ", "c d e f ", "g h i j. ", "k."]
    assert all(c.tokens <= 4 for c in chunks)


# -- recursive and paragraph ---------------------------------------------------------------------


def test_recursive_prefers_blank_lines_then_lines_then_sentences() -> None:
    para = lambda k: " ".join(f"p{k}w{i}" for i in range(3)) + "."  # noqa: E731  (3 tokens)
    doc = "\n\n".join(para(k) for k in range(4))
    chunks = make_chunker("recursive:size=7", WS).chunk(doc)
    assert texts(chunks) == [para(0) + "\n\n" + para(1) + "\n\n", para(2) + "\n\n" + para(3)]
    lines = "one two three\nfour five six\nseven eight"
    assert texts(make_chunker("recursive:size=6", WS).chunk(lines)) == ["one two three\nfour five six\n", "seven eight"]
    sentences = "One two three. Four five six. Seven."
    assert texts(make_chunker("recursive:size=4", WS).chunk(sentences)) == ["One two three. ", "Four five six. Seven."]


def test_recursive_splits_chinese_at_terminators_without_whitespace() -> None:
    doc = "这是第一句话。这是第二句话！这是第三句话；这是第四句"
    chunks = make_chunker("recursive:size=8", CHAR).chunk(doc)
    assert texts(chunks) == ["这是第一句话。", "这是第二句话！", "这是第三句话；", "这是第四句"]


def test_recursive_falls_back_to_fixed_windows() -> None:
    chunks = make_chunker("recursive:size=3", WS).chunk(words(7))
    assert texts(chunks) == ["w0 w1 w2 ", "w3 w4 w5 ", "w6"]


def test_paragraph_never_mixes_a_split_paragraph_with_its_neighbours() -> None:
    small, big = "a b.", "c d. e f. g h. i j."
    doc = f"{small}\n\n{big}\n\n{small}"
    para = make_chunker("paragraph:size=4", WS).chunk(doc)
    assert texts(para) == [f"{small}\n\n", "c d. e f. ", "g h. i j.\n\n", small]
    rec = make_chunker("recursive:size=4", WS).chunk(doc)
    # The recursive chunker packs pieces across paragraphs.
    assert texts(rec) == [f"{small}\n\nc d. ", "e f. g h. ", f"i j.\n\n{small}"]


def test_paragraph_splits_a_long_paragraph_at_lines_before_sentences() -> None:
    chunks = make_chunker("paragraph:size=4", WS).chunk("a b c\nd e f. g h")
    assert texts(chunks) == ["a b c\n", "d e f. ", "g h"]


def test_a_piece_of_exactly_size_tokens_is_kept_whole() -> None:
    doc = "a b c\n\nd e\nf"
    assert texts(make_chunker("recursive:size=3", WS).chunk(doc)) == ["a b c\n\n", "d e\nf"]
    assert texts(make_chunker("paragraph:size=3", WS).chunk(doc)) == ["a b c\n\n", "d e\nf"]


# -- markdown ------------------------------------------------------------------------------------

RST = """PEP: 9999
Title: Example

Abstract
========

Short abstract here.

Motivation
==========

Why this matters, in a few words.

Sub part
--------

Details.

::

    code block
    ----------

=========
Overlined
=========

End.
"""


def test_rst_and_markdown_headings_are_found() -> None:
    found = [RST[p:].split("\n")[0] for p in heading_positions(RST)]
    assert found == ["Abstract", "Motivation", "Sub part", "========="]
    md = "# Title\n\ntext\n\n```\n# not a heading\n```\n\n## Real\n\nSetext\n------\n\n    # indented\n"
    assert [md[p:].split("\n")[0] for p in heading_positions(md)] == ["# Title", "## Real", "Setext"]
    # Not titles: an underline with text after it, an indented title, a title without a blank line before.
    assert heading_positions("Title\n=====text\n") == []
    assert heading_positions("x\n\n  Title\n  =====\n") == []
    assert heading_positions("para line\nTitle\n=====\n") == []
    assert heading_positions("#hashtag\n\n#### four\n") == [10]


def test_markdown_chunks_start_at_section_titles() -> None:
    # Section tokens: 4, 5, 9, 8, 4.
    chunks = make_chunker("markdown:size=10", WS).chunk(RST)
    assert "".join(texts(chunks)) == RST
    firsts = [c.text.split("\n")[0] for c in chunks]
    assert firsts == ["PEP: 9999", "Motivation", "Sub part", "========="]
    # A larger size merges small adjacent sections.
    merged = make_chunker("markdown:size=60", WS).chunk(RST)
    assert len(merged) == 1


def test_markdown_splits_a_long_section_recursively() -> None:
    body = "\n\n".join(words(5) for _ in range(6))
    doc = f"Title\n=====\n\n{body}\n\nNext\n====\n\nshort"
    chunks = make_chunker("markdown:size=12", WS).chunk(doc)
    assert "".join(texts(chunks)) == doc
    assert chunks[-1].text == "Next\n====\n\nshort"
    assert all(c.tokens <= 12 for c in chunks)


# -- cdc -----------------------------------------------------------------------------------------


def test_cdc_word_hashes_are_deterministic_and_cjk_characters_are_words() -> None:
    hashes, ends = word_hashes("ab cd 你好 ab")
    assert ends.tolist() == [2, 5, 7, 8, 11]
    assert hashes[0] == hashes[4] and len(set(hashes.tolist())) == 4
    # Pinned values: boundaries must not change between processes or releases.
    assert hashes[0] == word_hashes("ab")[0][0]
    assert word_hashes("ab")[0].tolist() == word_hashes("ab")[0].tolist()
    assert word_hashes("ab")[0][0] != word_hashes("ba")[0][0]
    assert rolling_hash(hashes, 1).tolist() == hashes.tolist()


def test_cdc_lengths_center_on_the_target_and_respect_the_cap() -> None:
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(500)]
    doc = " ".join(rng.choice(vocab, size=60_000).tolist())
    cfg = CdcChunkerConfig(min=40, max=120, cap=200)
    chunks = make_chunker(cfg, WS).chunk(doc)
    lengths = [c.tokens for c in chunks[:-1]]
    assert max(lengths) <= 200 and min(lengths) >= 40
    assert 70 <= statistics.mean(lengths) <= 90  # target (40 + 120) / 2 = 80
    assert sum(x > 120 for x in lengths) / len(lengths) < 0.1


def test_cdc_resynchronises_after_an_edit() -> None:
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(300)]
    original = rng.choice(vocab, size=20_000).tolist()
    edited = original[:10_000] + ["INSERTED", "WORDS"] + original[10_000:]
    ch = make_chunker("cdc:min=20,max=60,cap=100", WS)
    old = set(texts(ch.chunk(" ".join(original))))
    new = texts(ch.chunk(" ".join(edited)))
    changed = [t for t in new if t not in old]
    assert 1 <= len(changed) <= 4  # only the chunks around the edit are new


# -- the real tokenizer on the corpus --------------------------------------------------------------


@pytest.mark.corpus
@pytest.mark.parametrize(
    "spec",
    [
        "fixed:size=256",
        "recursive:size=256",
        "paragraph:size=256",
        "markdown:size=256",
        "cdc:min=128,max=256,cap=384",
        "sentence:sentences=5,size=256",
        "fixed_chars:size=1000",
    ],
)
def test_real_tokenizer_on_peps(spec: str, shared_corpus) -> None:
    import pyarrow.parquet as pq

    docs = pq.read_table(shared_corpus / "snapshot_new.parquet", columns=["text"]).column("text").to_pylist()[:12]
    minilm = load_tokenizer("all-MiniLM-L6-v2")
    chunker = make_chunker(spec, minilm)
    cap = int(spec.split("cap=")[1]) if "cap=" in spec else 256
    for doc in docs:
        chunks = chunker.chunk(doc)
        assert "".join(texts(chunks)) == doc
        assert sum(c.tokens for c in chunks) == minilm.count(doc)
        if not spec.startswith("fixed_chars"):
            assert all(1 <= c.tokens <= cap for c in chunks)
    if spec.startswith(("recursive", "paragraph", "markdown")):
        # Cuts fall between words, so a chunk alone has exactly the tokens counted in context.
        sample = chunker.chunk(docs[0])
        assert [c.tokens for c in sample] == minilm.count_batch(texts(sample))
