"""Hand-computed R_c contracts (seed 000): every expected value is worked out in the comment above it.

Conventions used in the arithmetic:
* ``WS`` counts whitespace-separated words, ``CHAR`` counts non-space characters.
* ``fixed:size=2`` cuts before every 2nd token; the whitespace after a token belongs to the chunk it
  ends, so ``"a b c d"`` → ``"a b "``, ``"c d"`` (the last chunk runs to the end of the text).
* ``paragraph:size=2`` keeps whole paragraphs (blank line included in the paragraph before it)
  and merges neighbours only while the group stays ≤ 2 tokens.
* R_c = tokens(distinct new inputs not among the old inputs) / tokens(distinct new inputs); 0 when
  the new version has no inputs.
"""

from __future__ import annotations

import pytest

from reindex import measure as m
from reindex.adapters.chunkers import make_chunker
from reindex.adapters.tokenizers import load_tokenizer

WS = load_tokenizer("whitespace")
CHAR = load_tokenizer("char")


def rc(spec: str, old: str, new: str, tok=WS) -> float:
    chunker = make_chunker(spec, tok)
    return m.recompute_fraction(m.chunk_texts(chunker, old), m.chunk_texts(chunker, new), tok.count_batch)


def test_identical_versions_cost_nothing() -> None:
    # old = new = "a b c d" → chunks {"a b ", "c d"} both reused: 0 / 4.
    assert rc("fixed:size=2", "a b c d", "a b c d") == 0.0


def test_substitution_in_first_window() -> None:
    # new "x b c d" → "x b " (2, miss), "c d" (2, hit): 2 / 4.
    assert rc("fixed:size=2", "a b c d", "x b c d") == pytest.approx(0.5)


def test_append_changes_the_old_last_chunk_bytes() -> None:
    # old → "a b ", "c d";  new "a b c d e f" → "a b " (hit), "c d " (miss: old "c d" had no
    # trailing space, byte identity is strict), "e f" (miss): (2 + 2) / 6.
    assert rc("fixed:size=2", "a b c d", "a b c d e f") == pytest.approx(4 / 6)


def test_insert_at_front_shifts_every_fixed_window() -> None:
    # new "z a b c d" → "z a ", "b c ", "d": none is an old chunk: 5 / 5.
    assert rc("fixed:size=2", "a b c d", "z a b c d") == 1.0


def test_delete_at_front_shifts_every_fixed_window() -> None:
    # old "z a b c d" → "z a ", "b c ", "d";  new "a b c d" → "a b ", "c d": both miss: 4 / 4.
    assert rc("fixed:size=2", "z a b c d", "a b c d") == 1.0


def test_paragraph_move_costs_nothing() -> None:
    # old → "a b\n\n", "c d\n\n", "e f";  new "c d\n\na b\n\ne f" → "c d\n\n", "a b\n\n", "e f":
    # all three were old inputs of this document: 0 / 6.
    assert rc("paragraph:size=2", "a b\n\nc d\n\ne f", "c d\n\na b\n\ne f") == 0.0


def test_moving_the_last_paragraph_changes_its_bytes() -> None:
    # new "e f\n\na b\n\nc d" → "e f\n\n" (miss: old "e f" had no blank line), "a b\n\n" (hit),
    # "c d" (miss: old "c d\n\n" had one): (2 + 2) / 6.
    assert rc("paragraph:size=2", "a b\n\nc d\n\ne f", "e f\n\na b\n\nc d") == pytest.approx(4 / 6)


def test_deleting_a_whole_paragraph_costs_nothing() -> None:
    # new "a b\n\ne f" → "a b\n\n" (hit), "e f" (hit): 0 / 4.
    assert rc("paragraph:size=2", "a b\n\nc d\n\ne f", "a b\n\ne f") == 0.0


def test_inserting_a_paragraph_costs_only_itself() -> None:
    # new "a b\n\nx y\n\nc d\n\ne f" → "a b\n\n", "x y\n\n" (miss, 2), "c d\n\n", "e f": 2 / 8.
    assert rc("paragraph:size=2", "a b\n\nc d\n\ne f", "a b\n\nx y\n\nc d\n\ne f") == pytest.approx(0.25)


def test_unequal_chunks_are_weighted_by_tokens() -> None:
    # paragraph:size=3: old "a\n\nb c d" → "a\n\n" (1), "b c d" (3; 1 + 3 > 3 so not merged).
    # new "z\n\nb c d" → "z\n\n" (1, miss), "b c d" (3, hit): 1 / 4.
    assert rc("paragraph:size=3", "a\n\nb c d", "z\n\nb c d") == pytest.approx(0.25)


def test_repeated_text_is_counted_once() -> None:
    # old "a b a b" → "a b ", "a b";  new "a b a b a b" → "a b ", "a b ", "a b": distinct new
    # inputs {"a b ", "a b"} are both old: 0 / 4 (4, not 6: distinct inputs only).
    assert rc("fixed:size=2", "a b a b", "a b a b a b") == 0.0


def test_repeated_missing_text_is_embedded_once() -> None:
    # old "c d" → "c d";  new "a b a b c d" → "a b ", "a b ", "c d": distinct {"a b " (2, miss),
    # "c d" (2, hit)}: 2 / 4 (with duplicates it would have been 4 / 6).
    assert rc("fixed:size=2", "c d", "a b a b c d") == pytest.approx(0.5)


def test_empty_old_version_embeds_everything() -> None:
    # new "a b c" → "a b " (2), "c" (1): nothing to reuse: 3 / 3.
    assert rc("fixed:size=2", "", "a b c") == 1.0


def test_empty_new_version_is_zero_by_definition() -> None:
    # new version has no inputs: nothing to embed, R_c := 0.
    assert rc("fixed:size=2", "a b c d", "") == 0.0


def test_both_empty_is_zero() -> None:
    assert rc("fixed:size=2", "", "") == 0.0


def test_whitespace_only_new_version_has_no_inputs() -> None:
    # "  \n \t" has no tokens: chunkers return no inputs, R_c := 0.
    assert rc("fixed:size=2", "a b", "  \n \t") == 0.0


def test_whitespace_only_edit_is_an_edit() -> None:
    # new "a  b c d" (double space) → "a  b " (2, miss: different bytes), "c d" (2, hit): 2 / 4.
    assert rc("fixed:size=2", "a b c d", "a  b c d") == pytest.approx(0.5)


def test_trailing_newline_edit_misses_the_last_chunk() -> None:
    # new "a b c d\n" → "a b " (hit), "c d\n" (miss): 2 / 4.
    assert rc("fixed:size=2", "a b c d", "a b c d\n") == pytest.approx(0.5)


def test_cjk_substitution_with_char_tokens() -> None:
    # CHAR, fixed:size=2: old "我爱北京" → "我爱", "北京";  new "你爱北京" → "你爱" (2, miss),
    # "北京" (2, hit): 2 / 4.
    assert rc("fixed:size=2", "我爱北京", "你爱北京", CHAR) == pytest.approx(0.5)


def test_cjk_insert_at_front_shifts_windows() -> None:
    # new "我我爱北京" → "我我", "爱北", "京": none old: 5 / 5.
    assert rc("fixed:size=2", "我爱北京", "我我爱北京", CHAR) == 1.0


def test_cjk_sentence_move_with_paragraph_chunks() -> None:
    # CHAR, paragraph:size=4: old "今天下雨。\n\n明天晴。" → "今天下雨。\n\n" (5 chars > 4: split
    # alone, at the sentence end → itself, then windows: "今天下雨" + "。\n\n"), "明天晴。" (4).
    # The swap keeps "明天晴。" but now followed by "\n\n": new inputs "明天晴。\n\n" (4, miss),
    # "今天下雨" (4, hit), "。" (1, miss: old "。\n\n" had the blank line): 5 / 9.
    assert rc("paragraph:size=4", "今天下雨。\n\n明天晴。", "明天晴。\n\n今天下雨。", CHAR) == pytest.approx(5 / 9)


def test_document_that_becomes_one_chunk() -> None:
    # recursive:size=10, 12 words without separators → fixed windows "a … j " + "k l";
    # new has 8 words → a single chunk "a b c d e f g h", not an old input: 8 / 8.
    old = "a b c d e f g h i j k l"
    assert rc("recursive:size=10", old, "a b c d e f g h") == 1.0


def test_one_chunk_document_grows() -> None:
    # size 10: old "a b c" is one chunk; new "a b c d" is one (different) chunk: 4 / 4.
    assert rc("recursive:size=10", "a b c", "a b c d") == 1.0


def test_reuse_never_crosses_documents() -> None:
    # Pair 2's new text "a b" equals pair 1's old text, but reuse is per document: pair 1 costs
    # 0 / 2 (unchanged), pair 2 costs 2 / 2.
    pairs = [
        m.RevisionPair("p1", "en", "doc1", "doc1", "a b", "a b", 0.0),
        m.RevisionPair("p2", "en", "doc2", "doc2", "x y", "a b", 1.0),
    ]
    rep = m.run_measure([m.Candidate("fixed:size=2", lambda: make_chunker("fixed:size=2", WS))], pairs,
                        WS.count_batch, tokenizer="whitespace", source="contract")
    by = {r.pair_id: r.rc for r in rep.chunkers[0].results}
    assert by == {"p1": 0.0, "p2": 1.0}


def test_no_edit_control_is_exactly_zero_for_contract_pairs() -> None:
    pairs = [
        m.RevisionPair("p1", "en", "d1", "d1", "a b\n\nc d\n\ne f", "c d\n\na b\n\ne f", 0.5),
        m.RevisionPair("p2", "zh", "d2", "d2", "今天下雨。\n\n明天晴。", "明天晴。\n\n今天下雨。", 0.5),
        m.RevisionPair("p3", "en", "d3", "d3", "", "a b", 1.0),
    ]
    specs = ["fixed:size=2", "paragraph:size=2", "recursive:size=3", "cdc:min=1,max=2,cap=3", "anchored:size=2"]
    rep = m.run_measure([m.Candidate(s, lambda s=s: make_chunker(s, CHAR)) for s in specs], pairs, CHAR.count_batch,
                        tokenizer="char", source="contract")
    assert [c.no_edit_rc for c in rep.chunkers] == [0.0] * len(specs)
    assert all(c.failures == 0 for c in rep.chunkers)


def test_recompute_counts_missed_and_total_tokens() -> None:
    # Inputs are given directly: new {"a b", "c"} (3 tokens), "a b" is old: (1 missed, 3 total).
    assert m.recompute(["a b", "z"], ["a b", "c", "c"], WS.count_batch) == (1, 3)
