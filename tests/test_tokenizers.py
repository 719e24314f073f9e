"""Tokenizers: offsets, counts and loading (the real MiniLM tokenizer, whitespace, char)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reindex.errors import ReindexError, TokenizerError
from reindex.adapters.tokenizers import CharTokenizer, Tokenizer, WhitespaceTokenizer, code_points, is_space, load_tokenizer

MINILM = "all-MiniLM-L6-v2"

# Mixed scripts, combining marks, Hangul (several BERT tokens per character), Unicode whitespace.
_ALPHABET = st.sampled_from(
    list("ab Z9.,!?\n\t") + ["é", "naïve", "你", "好", "。", "한", "\u3000", "\u00a0", "\u2028", "\x1c", "🙂", "\u0301"]
)
texts = st.one_of(st.lists(_ALPHABET, max_size=60).map("".join), st.text(max_size=80))


@pytest.fixture(scope="module")
def minilm() -> Tokenizer:
    return load_tokenizer(MINILM)


def test_whitespace_tokens_are_non_whitespace_runs() -> None:
    tok = load_tokenizer("whitespace")
    text = "  Hello,\tworld!\n\n你好。 a"
    assert tok.offsets(text).tolist() == [[2, 8], [9, 15], [17, 20], [21, 22]]
    assert tok.count(text) == 4
    assert tok.count_batch([text, "", "   "]) == [4, 0, 0]
    assert tok.offsets("").shape == (0, 2)


def test_char_tokens_are_non_whitespace_characters() -> None:
    tok = load_tokenizer("char")
    text = "a b\u3000你好"
    assert tok.offsets(text).tolist() == [[0, 1], [2, 3], [4, 5], [5, 6]]
    assert tok.count(text) == 4
    assert tok.count_batch(["ab", " "]) == [2, 0]


def test_is_space_agrees_with_str_isspace_on_every_code_point() -> None:
    every = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    expected = np.array([ch.isspace() for ch in every])
    assert np.array_equal(is_space(code_points(every)), expected)


def test_minilm_has_no_truncation_no_padding_no_special_tokens(minilm: Tokenizer) -> None:
    assert minilm.count("hello") == 1
    assert minilm.count("") == 0
    long = " ".join(["word"] * 1000)
    assert minilm.count(long) == 1000  # the packaged tokenizer.json truncates to 128 unless told not to
    assert minilm.offsets(long).shape == (1000, 2)
    assert minilm.count_batch(["hello", long, "hello world"]) == [1, 1000, 2]
    assert minilm.count_batch([]) == []


def test_minilm_offsets_index_characters_of_the_original_string(minilm: Tokenizer) -> None:
    text = "Ünïcode naïve 你好。 world"
    pieces = [text[s:e] for s, e in minilm.offsets(text).tolist()]
    assert pieces == ["Ünïcode", "naïve", "你", "好", "。", "world"]


def test_load_tokenizer_is_cached_and_satisfies_the_protocol(minilm: Tokenizer) -> None:
    assert load_tokenizer(MINILM) is minilm
    assert minilm.name == MINILM
    for tok in (minilm, load_tokenizer("whitespace"), load_tokenizer("char")):
        assert isinstance(tok, Tokenizer)


def test_load_tokenizer_from_a_tokenizer_json_path(minilm: Tokenizer, tmp_path) -> None:
    from reindex.domain.models import find_tokenizer_file, resolve_model_path

    path = find_tokenizer_file(resolve_model_path(MINILM))
    tok = load_tokenizer(str(path))
    assert tok.count(" ".join(["word"] * 300)) == 300


def test_unknown_tokenizer_is_a_one_line_tokenizer_error() -> None:
    with pytest.raises(TokenizerError) as info:
        load_tokenizer("/nonexistent/model-folder")
    assert isinstance(info.value, ReindexError)
    assert "\n" not in str(info.value)
    assert "/nonexistent/model-folder" in str(info.value)


def test_corrupt_tokenizer_json_is_a_tokenizer_error(tmp_path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError) as info:
        load_tokenizer(str(bad))
    assert "\n" not in str(info.value)


@settings(deadline=None, max_examples=150)
@given(texts)
def test_simple_tokenizers_offsets_and_counts_agree(text: str) -> None:
    for tok in (WhitespaceTokenizer(), CharTokenizer()):
        offs = tok.offsets(text)
        assert tok.count(text) == offs.shape[0]
        assert tok.count_batch([text, text]) == [offs.shape[0]] * 2
        covered = np.zeros(len(text), dtype=bool)
        for s, e in offs.tolist():
            assert 0 <= s < e <= len(text)
            assert not any(ch.isspace() for ch in text[s:e])
            covered[s:e] = True
        # Whatever no token covers is whitespace.
        assert all(ch.isspace() for ch, c in zip(text, covered) if not c)
    assert text.split() == [text[s:e] for s, e in WhitespaceTokenizer().offsets(text).tolist()]


@settings(deadline=None, max_examples=100)
@given(texts)
def test_minilm_offsets_are_sorted_in_range_and_match_counts(minilm: Tokenizer, text: str) -> None:
    offs = minilm.offsets(text)
    assert offs.dtype == np.int64 and offs.ndim == 2 and offs.shape[1] == 2
    assert minilm.count(text) == offs.shape[0]
    assert minilm.count_batch([text, "x"]) == [offs.shape[0], 1]
    if offs.shape[0]:
        assert np.all(np.diff(offs[:, 0]) >= 0)
        assert offs[:, 0].min() >= 0 and offs[:, 1].max() <= len(text)
        assert np.all(offs[:, 1] > offs[:, 0])
        # BERT never makes a token of whitespace.
        assert not any(text[s].isspace() for s in offs[:, 0].tolist())


# --------------------------------------------------------------------------------------------
# Long documents: encoded window by window (memory per document bounded), with the same tokens
# --------------------------------------------------------------------------------------------


def test_windowed_encoding_gives_the_tokens_of_one_whole_encode() -> None:
    import random

    import numpy as np

    from reindex.adapters.tokenizers import HFTokenizer, load_tokenizer

    tok = load_tokenizer("all-MiniLM-L6-v2")
    rng = random.Random(1)
    alphabet = list("abcdefghij KLMNO,.;!?-\n\t") + ["中文", "café", "naïve", "e\u0301", "😀", "\r\n", "  "]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        small = HFTokenizer(tok.name, tok.backend, window_chars=rng.randint(3, 40))
        assert np.array_equal(tok.offsets(text), small.offsets(text)), repr(text)
        assert tok.count(text) == small.count(text) == small.count_batch([text])[0]


class _Spy:
    """A tokenizer backend that records the length of every string it encodes."""

    def __init__(self, inner) -> None:
        self.inner, self.pre_tokenizer, self.lengths = inner, inner.pre_tokenizer, []

    def encode(self, text: str, **kw):
        self.lengths.append(len(text))
        return self.inner.encode(text, **kw)

    def encode_batch(self, texts, **kw):
        self.lengths += [len(t) for t in texts]
        return self.inner.encode_batch(texts, **kw)


def test_a_long_document_is_never_encoded_whole() -> None:
    from reindex.adapters.tokenizers import HFTokenizer, load_tokenizer

    tok = load_tokenizer("all-MiniLM-L6-v2")
    spy = _Spy(tok.backend)
    long = HFTokenizer(tok.name, spy, window_chars=4096)
    text = "A sentence of several words, repeated to make a long document.\n\n" * 2000  # ~130 K characters
    n = long.count(text)
    assert n == tok.count(text) and max(spy.lengths) <= 4096 and len(spy.lengths) > 30
    spy.lengths.clear()
    assert len(long.offsets(text)) == n and max(spy.lengths) <= 4096
