"""Property tests (hypothesis) of every chunker: exact partition, size bounds, token counts in
document context, determinism, and locality of the content-aware chunkers under a paragraph edit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from reindex.adapters.chunkers import Chunk, make_chunker, sliding_count
from reindex.adapters.chunkers.cdc import rolling_hash, word_hashes
from reindex.adapters.chunkers.markdown import heading_positions
from reindex.domain.config import (
    CdcChunkerConfig,
    FixedCharsChunkerConfig,
    FixedChunkerConfig,
    MarkdownChunkerConfig,
    ParagraphChunkerConfig,
    RecursiveChunkerConfig,
    SentenceChunkerConfig,
    SlidingChunkerConfig,
)
from reindex.adapters.tokenizers import CharTokenizer, Tokenizer, WhitespaceTokenizer, load_tokenizer

TOKENIZERS = ["whitespace", "char", "all-MiniLM-L6-v2"]
SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])

# -- documents -------------------------------------------------------------------------------------

_WORDS = st.sampled_from(
    ["alpha", "beta", "Gamma", "x", "y2", "naïve", "e.g.", "3.14", "日本", "你好世界", "한국어", "🙂", "a\u0301", "long-word-here"]
)
_ENDS = st.sampled_from([".", "!", "?", "?!", "。", "！", "？", "；", ",", "", ")."])
_sentence = st.builds(lambda ws, end: " ".join(ws) + end, st.lists(_WORDS, min_size=1, max_size=10), _ENDS)
_paragraph = st.builds(
    lambda ss, joins: "".join(s + j for s, j in zip(ss, joins)).rstrip(),
    st.lists(_sentence, min_size=1, max_size=5),
    st.lists(st.sampled_from([" ", "\n", "", "  "]), min_size=5, max_size=5),
)
_heading = st.one_of(
    st.builds(lambda w, ch: f"{w}\n{ch * max(3, len(w))}", _WORDS, st.sampled_from("=-~^*#")),
    st.builds(lambda w, n: "#" * n + " " + w, _WORDS, st.integers(1, 3)),
    st.builds(lambda w: f"=====\n{w}\n=====", _WORDS),
)
_SEPS = st.sampled_from(["\n\n", "\n", " ", "\n\n\n", " \n\t\n", "\u3000", ""])
structured = st.builds(
    lambda lead, blocks: lead + "".join(b + s for b, s in blocks),
    st.sampled_from(["", " ", "\n\n", "\t "]),
    st.lists(st.tuples(st.one_of(_paragraph, _paragraph, _heading), _SEPS), max_size=14),
)
documents = st.one_of(structured, structured, st.text(max_size=200))


def _spec(kind: str) -> st.SearchStrategy:
    """Small parameters, so that every document is cut many times and every level is reached."""
    if kind == "fixed":
        return st.builds(FixedChunkerConfig, size=st.integers(1, 12))
    if kind == "sliding":
        return st.builds(SlidingChunkerConfig, size=st.integers(1, 12), overlap=st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9]))
    if kind == "fixed_chars":
        return st.builds(FixedCharsChunkerConfig, size=st.integers(1, 40), overlap=st.sampled_from([0.0, 0.3]))
    if kind == "sentence":
        return st.integers(1, 4).flatmap(
            lambda n: st.builds(SentenceChunkerConfig, sentences=st.just(n), overlap=st.integers(0, n - 1), size=st.integers(1, 20))
        )
    if kind == "paragraph":
        return st.builds(ParagraphChunkerConfig, size=st.integers(1, 20))
    if kind == "recursive":
        return st.builds(RecursiveChunkerConfig, size=st.integers(1, 20))
    if kind == "markdown":
        return st.builds(MarkdownChunkerConfig, size=st.integers(1, 20))
    if kind == "cdc":
        return st.tuples(st.integers(1, 8), st.integers(0, 8), st.integers(0, 8), st.integers(1, 5)).map(
            lambda t: CdcChunkerConfig(min=t[0], max=t[0] + t[1], cap=t[0] + t[1] + t[2], window=t[3])
        )
    raise AssertionError(kind)


TOKEN_LIMITED = ["fixed", "sentence", "paragraph", "recursive", "markdown", "cdc"]


def _cap(cfg) -> int:
    return cfg.cap if isinstance(cfg, CdcChunkerConfig) else cfg.size


def _starts(tok: Tokenizer, text: str) -> np.ndarray:
    return tok.offsets(text)[:, 0]


def _max_shared_start(starts: np.ndarray) -> int:
    """Most tokens that start at one character (BERT splits a Hangul syllable into several)."""
    if starts.shape[0] == 0:
        return 0
    _, counts = np.unique(starts, return_counts=True)
    return int(counts.max())


def _tokens_in(starts: np.ndarray, a: int, b: int) -> int:
    return int(np.searchsorted(starts, b, "left") - np.searchsorted(starts, a, "left"))


def check_chunks_are_slices(text: str, chunks: list[Chunk], starts: np.ndarray) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert 0 <= c.start < c.end <= len(text)
        assert c.text == text[c.start : c.end]
        assert c.tokens == _tokens_in(starts, c.start, c.end)


def check_partition(text: str, chunks: list[Chunk]) -> None:
    if not text.strip():
        assert chunks == []
        return
    assert "".join(c.text for c in chunks) == text
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:]))


# -- partition, bounds, counts -------------------------------------------------------------------


@pytest.mark.parametrize("kind", TOKEN_LIMITED)
@pytest.mark.parametrize("tok_name", TOKENIZERS)
@SETTINGS
@given(data=st.data(), text=documents)
def test_token_limited_chunkers_partition_and_respect_the_cap(kind: str, tok_name: str, data, text: str) -> None:
    cfg = data.draw(_spec(kind).filter(lambda c: not getattr(c, "overlap", 0)), label="config")
    tok = load_tokenizer(tok_name)
    chunks = make_chunker(cfg, tok).chunk(text)
    starts = _starts(tok, text)
    check_partition(text, chunks)
    check_chunks_are_slices(text, chunks, starts)
    if not chunks:
        return
    assert sum(c.tokens for c in chunks) == starts.shape[0]
    # The cap holds unless one character alone has more tokens than the cap.
    assert max(c.tokens for c in chunks) <= max(_cap(cfg), _max_shared_start(starts))
    if starts.shape[0]:
        assert all(c.tokens >= 1 for c in chunks)
    # Whitespace between pieces ends the preceding chunk.
    assert not any(c.text[0].isspace() for c in chunks[1:])


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@SETTINGS
@given(data=st.data(), text=documents)
def test_sliding_windows_cover_the_document_with_the_seed_count(tok_name: str, data, text: str) -> None:
    cfg = data.draw(_spec("sliding"), label="config")
    tok = load_tokenizer(tok_name)
    chunks = make_chunker(cfg, tok).chunk(text)
    starts = _starts(tok, text)
    if not text.strip():
        assert chunks == []
        return
    check_chunks_are_slices(text, chunks, starts)
    n = starts.shape[0]
    assert len(chunks) == sliding_count(n, cfg.size, cfg.overlap)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    # Consecutive windows touch or overlap: no text is left out.
    assert all(b.start <= a.end for a, b in zip(chunks, chunks[1:]))
    shared = _max_shared_start(starts)
    # Windows advance, except that a stride smaller than one character's tokens can repeat one.
    assert all(a.start < b.start or (shared > 1 and a.start == b.start) for a, b in zip(chunks, chunks[1:]))
    assert max(c.tokens for c in chunks) <= cfg.size + max(0, shared - 1)
    if cfg.overlap == 0:
        assert chunks == make_chunker(FixedChunkerConfig(size=cfg.size), tok).chunk(text) or shared > 1


@SETTINGS
@given(data=st.data(), text=documents)
def test_fixed_chars_windows(data, text: str) -> None:
    cfg = data.draw(_spec("fixed_chars"), label="config")
    chunks = make_chunker(cfg, WhitespaceTokenizer()).chunk(text)
    check_chunks_are_slices(text, chunks, _starts(WhitespaceTokenizer(), text))
    if cfg.overlap == 0:
        check_partition(text, chunks)
    assert all(len(c.text) <= cfg.size for c in chunks)


@pytest.mark.parametrize("tok_name", ["whitespace", "all-MiniLM-L6-v2"])
@SETTINGS
@given(data=st.data(), text=documents)
def test_overlapping_sentence_groups_cover_the_document(tok_name: str, data, text: str) -> None:
    cfg = data.draw(_spec("sentence").filter(lambda c: c.overlap > 0), label="config")
    tok = load_tokenizer(tok_name)
    chunks = make_chunker(cfg, tok).chunk(text)
    starts = _starts(tok, text)
    if not text.strip():
        assert chunks == []
        return
    check_chunks_are_slices(text, chunks, starts)
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    assert all(b.start <= a.end for a, b in zip(chunks, chunks[1:]))
    assert max(c.tokens for c in chunks) <= max(cfg.size, _max_shared_start(starts))


# -- determinism ---------------------------------------------------------------------------------

ALL_KINDS = [*TOKEN_LIMITED, "sliding", "fixed_chars"]


@pytest.mark.parametrize("kind", ALL_KINDS)
@settings(deadline=None, max_examples=25)
@given(data=st.data(), text=documents)
def test_chunkers_are_deterministic(kind: str, data, text: str) -> None:
    cfg = data.draw(_spec(kind), label="config")
    first = make_chunker(cfg, WhitespaceTokenizer())
    again = first.chunk(text)
    assert again == first.chunk(text)
    # A fresh chunker with a fresh tokenizer, built from the spec string, agrees too.
    assert make_chunker(first.spec, WhitespaceTokenizer()).chunk(text) == again
    assert make_chunker(cfg, CharTokenizer()).chunk(text) == make_chunker(first.spec, "char").chunk(text)


# -- locality ------------------------------------------------------------------------------------

_plain_words = st.lists(st.sampled_from(["lorem", "ipsum", "dolor", "sit", "amet", "中文", "句子"]), min_size=1, max_size=12)
_small_paragraph = st.builds(lambda ws, end: " ".join(ws) + end, _plain_words, st.sampled_from([".", "。", "", "!"]))


@st.composite
def edited_documents(draw, with_headings: bool):
    """(old, new, edit start, start of the edited unit): many small paragraphs (some of them
    section titles when ``with_headings``), one paragraph in the middle replaced by another."""
    count = draw(st.integers(8, 30))
    paragraphs = []
    for _ in range(count):
        if with_headings and draw(st.integers(0, 4)) == 0:
            title = draw(st.sampled_from(["Intro", "Motivation", "Spec"]))
            paragraphs.append(f"{title}\n{'=' * len(title)}")
        else:
            paragraphs.append(draw(_small_paragraph))
    k = draw(st.integers(count // 3, count - 1))
    assume(not paragraphs[k].endswith("="))
    replacement = draw(_small_paragraph.filter(lambda p: p != paragraphs[k]))
    sep = "\n\n"
    old = sep.join(paragraphs)
    new = sep.join(paragraphs[:k] + [replacement] + paragraphs[k + 1 :])
    edit = len(sep.join(paragraphs[:k])) + len(sep)
    unit = edit
    if with_headings:
        # The edited paragraph's section starts at the last heading before it.
        unit = max([0, *(p for p in heading_positions(old) if p <= edit)])
    return old, new, edit, unit


@pytest.mark.parametrize("kind", ["recursive", "paragraph", "markdown"])
@pytest.mark.parametrize("tok_name", ["whitespace", "all-MiniLM-L6-v2"])
@SETTINGS
@given(data=st.data())
def test_an_edit_leaves_earlier_chunks_unchanged(kind: str, tok_name: str, data) -> None:
    old, new, edit, unit = data.draw(edited_documents(with_headings=kind == "markdown"), label="docs")
    # Every paragraph is well under the size (at most 13 words, 26 tokens with BERT on CJK).
    model = {"recursive": RecursiveChunkerConfig, "paragraph": ParagraphChunkerConfig, "markdown": MarkdownChunkerConfig}[kind]
    cfg = data.draw(st.builds(model, size=st.integers(30, 80)), label="config")
    chunker = make_chunker(cfg, tok_name)
    before, after = chunker.chunk(old), chunker.chunk(new)
    # The chunk that ends where the edited unit starts may change (whether the unit still fits
    # into it depends on its size); every chunk ending before that is identical.
    kept = [c for c in before if c.end < unit]
    assert after[: len(kept)] == kept


@pytest.mark.parametrize("tok_name", ["whitespace", "char", "all-MiniLM-L6-v2"])
@SETTINGS
@given(data=st.data())
def test_cdc_boundaries_depend_only_on_content_before_them(tok_name: str, data) -> None:
    old, new, edit, _ = data.draw(edited_documents(with_headings=False), label="docs")
    cfg = data.draw(_spec("cdc"), label="config")
    tok = load_tokenizer(tok_name)
    before, after = make_chunker(cfg, tok).chunk(old), make_chunker(cfg, tok).chunk(new)
    edit_token = _tokens_in(_starts(tok, old), 0, edit)
    # A cut is decided by the words before it and, when forced, by at most `cap` tokens after the
    # chunk's start: a chunk that starts more than `cap` tokens before the edit is kept.
    token_start = 0
    kept = []
    for c in before:
        if token_start + cfg.cap + 1 >= edit_token:
            break
        kept.append(c)
        token_start += c.tokens
    assert after[: len(kept)] == kept


@settings(deadline=None, max_examples=100)
@given(
    hashes=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
    window=st.integers(1, 70),
    data=st.data(),
)
def test_rolling_hash_depends_on_exactly_the_last_window_words(hashes: list[int], window: int, data) -> None:
    arr = np.asarray(hashes, dtype=np.uint64)
    i = data.draw(st.integers(0, len(hashes) - 1), label="changed word")
    changed = arr.copy()
    changed[i] ^= np.uint64(data.draw(st.integers(1, 2**64 - 1), label="flip"))
    before, after = rolling_hash(arr, window), rolling_hash(changed, window)
    differs = before != after
    # Word i enters the hashes of words i .. i + window - 1 and no other.
    expected = np.zeros(len(hashes), dtype=bool)
    expected[i : i + window] = True
    assert differs.tolist() == expected.tolist()


@settings(deadline=None, max_examples=100)
@given(prefix=documents, suffix=documents)
def test_word_hashes_of_a_prefix_do_not_depend_on_what_follows(prefix: str, suffix: str) -> None:
    prefix = prefix + " "
    h1, e1 = word_hashes(prefix)
    h2, e2 = word_hashes(prefix + suffix)
    assert h2[: h1.shape[0]].tolist() == h1.tolist() and e2[: e1.shape[0]].tolist() == e1.tolist()
