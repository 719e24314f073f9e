"""Reuse below whole chunks (issue 45): units inside chunks, unit-level R_c beside chunk-level R_c, exact
composition for a static model, and ``reindex measure --unit``.

The static model is the tiny one of ``helpers_models`` distilled here (a second): its 2,000-piece vocabulary
splits most words into ``##`` pieces and maps many characters to ``[UNK]``, which is where a unit boundary
that is not a pre-tokenizer boundary would show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from click.testing import CliRunner

from helpers_models import SAMPLE, TINY_HIDDEN, build_tiny_model
from reindex.adapters.chunkers import make_chunker
from reindex.adapters.chunkers.units import UnitSpec, parse_unit_spec, unit_spans, unit_texts
from reindex.adapters.tokenizers import load_tokenizer
from reindex.cli import main
from reindex.domain.config import RecursiveChunkerConfig, VectorHalf, parse_chunker_spec
from reindex.errors import ConfigError
from reindex.measure import Candidate, RevisionPair
from reindex.measure.units import StaticCompose, measure_unit_pair, run_units

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpus"
WS = load_tokenizer("whitespace")


def _count(texts: list[str]) -> list[int]:
    return [len(t.split()) for t in texts]


class Lines:
    """A chunker whose chunks are the blank-line-separated paragraphs (their trailing blank line included)."""

    def chunk(self, text: str) -> list[str]:
        out, cur = [], ""
        for line in text.splitlines(keepends=True):
            cur += line
            if not line.strip():
                out.append(cur)
                cur = ""
        return [*out, cur] if cur else out


def _pair(old: str, new: str, pid: str = "p1", doc: str = "d1") -> RevisionPair:
    return RevisionPair(pid, "en", doc, doc, old, new, 0.01)


# -- units ---------------------------------------------------------------------------------------------


def test_units_partition_a_chunk_at_sentence_ends_and_line_breaks() -> None:
    text = "Title\n=====\n\nThis is one sentence. And here, another one! Is it?\n* item\n中文第一句。第二句！"
    ones = unit_texts(text, load_tokenizer("all-MiniLM-L6-v2"), UnitSpec("sentence", 1))
    assert ones == ["Title\n", "=====\n\n", "This is one sentence. ", "And here, another one! ", "Is it?\n", "* item\n",
                    "中文第一句。", "第二句！"]
    # Pieces under min_tokens join the ones after them; a short rest joins the group before.
    grouped = unit_texts(text, WS, UnitSpec("sentence", 4))
    assert "".join(grouped) == text
    assert grouped[0] == "Title\n=====\n\nThis is one sentence. "
    assert all(len(u.split()) >= 4 for u in grouped[:-1])
    assert unit_texts(text, WS, UnitSpec("chunk", 0)) == [text]
    assert unit_spans("", WS, UnitSpec()) == [(0, 0)] and unit_spans("  \n", WS, UnitSpec()) == [(0, 3)]
    # "3.14" and "e.g.x" are no sentence ends (Latin ends need whitespace after them).
    assert unit_texts("Pi is 3.14 and e.g.x stays one unit here", WS, UnitSpec("sentence", 1)) == [
        "Pi is 3.14 and e.g.x stays one unit here"]


def test_unit_specs_parse_and_refuse_with_the_forms() -> None:
    assert parse_unit_spec("sentence") == UnitSpec("sentence", 8)
    assert parse_unit_spec("sentence:min=1") == UnitSpec("sentence", 1)
    assert parse_unit_spec("chunk") == UnitSpec("chunk", 0) and str(parse_unit_spec("chunk")) == "chunk"
    for bad in ("word", "chunk:min=3", "sentence:min=x"):
        with pytest.raises(ConfigError, match="expected sentence, sentence:min=N"):
            parse_unit_spec(bad)


# -- R_c at unit level: hand-computed contracts ----------------------------------------------------------

OLD = "Alpha beta gamma. Delta epsilon zeta. Eta theta iota.\n\nKappa lambda mu. Nu xi omicron.\n\n"


def _split(spec: UnitSpec = UnitSpec("sentence", 1)):
    return lambda text: unit_texts(text, WS, spec)


def test_one_edited_sentence_misses_only_its_own_unit() -> None:
    new = OLD.replace("Delta epsilon zeta.", "Delta EPSILON zeta.")
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, new), _count, _split())
    # Chunk level: the first paragraph (9 tokens) of 15 is embedded again.
    assert (r.chunk.missed_tokens, r.chunk.new_tokens) == (9, 15)
    # Unit level: only "Delta EPSILON zeta. " (3 tokens).
    assert (r.missed_unit_tokens, r.new_unit_tokens, r.rc_unit) == (3, 15, 3 / 15)
    assert r.no_edit_unit_missed == 0 and r.chunk.no_edit_missed == 0


def test_inserts_deletes_moves_repeats_and_empty_documents() -> None:
    split = _split()
    # Insert a sentence: its tokens only.
    ins = OLD.replace("Nu xi omicron.", "Nu xi omicron. Pi rho.")
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, ins), _count, split)
    # "Nu xi omicron. " now has a trailing space before "Pi": a new unit text (3) + "Pi rho.\n\n" (2).
    assert (r.missed_unit_tokens, r.new_unit_tokens) == (5, 17)
    # Delete a sentence: nothing new to embed at unit level, though its paragraph is a new chunk.
    dele = OLD.replace("Delta epsilon zeta. ", "")
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, dele), _count, split)
    assert r.missed_unit_tokens == 0 and r.chunk.missed_tokens == 6
    # Move the paragraphs: every unit is reused.
    a, b = OLD.split("\n\n")[:2]
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, f"{b}\n\n{a}\n\n"), _count, split)
    assert r.rc_unit == 0.0 and r.chunk.rc == 0.0
    # A repeated new sentence is one input, counted once.
    rep = OLD + "Rho sigma. Rho sigma. "
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, rep), _count, split)
    assert r.missed_unit_tokens == 2  # "Rho sigma. " once
    # An empty new version has nothing to embed.
    r = measure_unit_pair(Lines(), Lines(), _pair(OLD, ""), _count, split)
    assert (r.rc_unit, r.new_unit_tokens) == (0.0, 0)
    # Reuse never crosses documents: run_units measures each pair against its own old version only.
    other = _pair("Completely different text here.\n\n", OLD, "p2", "d2")
    rep = run_units([Candidate("lines", Lines)], [_pair(OLD, OLD), other], _count, split, unit="sentence:min=1",
                    tokenizer="whitespace", source="test")
    per = rep["chunkers"][0]
    assert per["rc_unit"]["en"]["all"]["pooled"] == 15 / 30  # d2's 15 tokens all miss, d1's none
    assert per["no_edit"] == {"rc_chunk": 0.0, "rc_unit": 0.0}


def test_unit_chunk_is_chunk_level_reuse_on_real_pairs() -> None:
    """``--unit chunk``: every chunk is its own unit, so rc_unit equals today's R_c pair by pair; with sentences
    rc_unit is never above it on these pairs and the no-edit control is 0 at both levels."""
    from reindex.measure import load_pairs, select_pairs

    if not (SHARED / "revisions.parquet").is_file():
        pytest.skip("the shared corpus is not beside this checkout")
    tok = load_tokenizer("all-MiniLM-L6-v2")
    pairs = select_pairs(load_pairs(SHARED / "revisions.parquet"), bands=["<=5%"])
    pairs = pairs[::25]  # 13 pairs, both languages
    chunker = make_chunker(parse_chunker_spec("recursive:size=278"), tok)
    for spec in (UnitSpec("chunk", 0), UnitSpec("sentence", 8)):
        for p in pairs:
            r = measure_unit_pair(chunker, chunker, p, tok.count_batch, lambda t: unit_texts(t, tok, spec))
            assert r.no_edit_unit_missed == 0 and r.chunk.no_edit_missed == 0
            if spec.kind == "chunk":
                assert (r.rc_unit, r.missed_unit_tokens, r.new_unit_tokens) == (
                    r.chunk.rc, r.chunk.missed_tokens, r.chunk.new_tokens)
            else:
                assert r.missed_unit_tokens <= r.chunk.missed_tokens


# -- exact composition for a static model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def static_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """Today's static embedder (model2vec's encode) and the exact one, over the tiny model distilled here."""
    import torch

    from reindex.adapters.embedders.static import StaticEmbedder

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("units-static")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REINDEX_CACHE_DIR", str(root / "cache"))
        tiny = build_tiny_model(root / "tiny")
        vector = VectorHalf(provider="model2vec", model=str(tiny), dimension=TINY_HIDDEN)
        yield StaticEmbedder(vector, exact=False), StaticEmbedder(vector, exact=True)


def _corpus_texts() -> list[str]:
    texts = [p.read_text(encoding="utf-8") for p in sorted(SAMPLE.iterdir()) if p.is_file()]
    if (SHARED / "zh_snapshot.parquet").is_file():
        from reindex.measure import load_corpus

        zh = load_corpus(SHARED / "zh_snapshot.parquet")
        texts += [zh[k] for k in sorted(zh)[:12]]  # Chinese: CJK ends without whitespace, many [UNK]
    return texts


@pytest.mark.parametrize("min_tokens", [1, 8])
def test_composition_is_exact_for_a_static_model_over_every_chunk_of_a_corpus(static_pair: tuple,
                                                                               min_tokens: int) -> None:
    native, exact = static_pair
    tok = load_tokenizer("all-MiniLM-L6-v2")
    chunker = make_chunker(RecursiveChunkerConfig(size=100), tok)  # within the tiny model's 128-token limit
    chunks = list(dict.fromkeys(c.text for t in _corpus_texts() for c in chunker.chunk(t)))
    assert len(chunks) > 400  # the bundled sample alone has 477 distinct chunks; ../shared adds Chinese ones
    spec = UnitSpec("sentence", min_tokens)
    units = [unit_texts(c, tok, spec) for c in chunks]
    assert all("".join(us) == c for us, c in zip(units, chunks))
    assert sum(len(us) > 1 for us in units) > len(chunks) // 2
    # The tokens of a chunk are the tokens of its units one after the other (no boundary effect).
    ids = exact.token_ids(chunks)
    for c, us, whole in zip(chunks, units, ids):
        assert [i for u in exact.token_ids(us) for i in u] == whole, c[:80]
    vecs, info = StaticCompose("static", native, exact).composed(chunks, units)
    whole_exact = exact.embed(chunks).vectors
    assert info["chunks_over_limit_embedded_whole"] == 0
    assert np.abs(vecs - whole_exact).max() <= 1e-6
    assert info["bit_identical_chunks"] == len(chunks) and info["max_abs_diff_vs_whole_exact"] == 0.0
    # Today's vectors (model2vec's float16 means) differ by the float16 rounding only.
    assert 0 < info["max_abs_diff_vs_native"] < 5e-3


def test_the_exact_static_path_is_the_models_mean_in_float64(static_pair: tuple) -> None:
    native, exact = static_pair
    texts = ["Hello world. This is a test!", "", "The encoding declaration. Python source files.", "x " * 700]
    sums, counts = exact.token_sums(texts)
    ids = native.model.tokenize(texts[:3])
    assert list(counts[:3]) == [len(i) for i in ids] and counts[1] == 0
    v = exact.embed(texts).vectors
    assert v.dtype == np.float32 and np.allclose(np.linalg.norm(v[[0, 2, 3]], axis=1), 1.0, atol=1e-6)
    assert not v[1].any()  # no tokens: a zero vector, as model2vec gives
    assert np.abs(v[:3] - native.embed(texts[:3]).vectors).max() < 5e-3
    # Truncation at the model's limit counts tokens, not characters.
    limit = exact.max_tokens
    assert limit and exact.token_sums([texts[3]], limit)[1][0] == limit


# -- the command ---------------------------------------------------------------------------------------------


def test_measure_unit_json_reports_rc_chunk_and_rc_unit_per_chunker(tmp_path: Path) -> None:
    rows = [{"pair_id": "a", "lang": "en", "doc_path": "d.md", "old_text": OLD * 3,
             "new_text": (OLD * 3).replace("Kappa lambda mu.", "Kappa LAMBDA mu.", 1), "edit_fraction": 0.01},
            {"pair_id": "b", "lang": "en", "doc_path": "e.md", "old_text": OLD, "new_text": OLD + "New line here.\n",
             "edit_fraction": 0.02}]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    r = CliRunner().invoke(main, ["measure", "--pairs", str(pairs), "--chunker", "recursive:size=16",
                                  "--chunker", "fixed:size=16", "--unit", "sentence:min=1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["unit"] == "sentence:min=1" and [c["spec"] for c in out["chunkers"]] == ["recursive:size=16",
                                                                                        "fixed:size=16"]
    for c in out["chunkers"]:
        assert {"rc_chunk", "rc_unit", "quality", "no_edit", "unit_minus_chunk"} <= set(c)
        assert c["no_edit"] == {"rc_chunk": 0.0, "rc_unit": 0.0}
        assert 0 < c["rc_unit"]["en"]["<=5%"]["mean"] < c["rc_chunk"]["en"]["<=5%"]["mean"]
    text = CliRunner().invoke(main, ["measure", "--pairs", str(pairs), "--chunker", "fixed:size=16", "--unit", "chunk"])
    assert text.exit_code == 0 and "| fixed:size=16 | en | <=5% | 2 |" in text.output
    bad = CliRunner().invoke(main, ["measure", "--pairs", str(pairs), "--unit", "word"])
    assert bad.exit_code != 0 and "expected sentence, sentence:min=N" in bad.output
    bad = CliRunner().invoke(main, ["measure", "--pairs", str(pairs), "--model", "static"])
    assert bad.exit_code != 0 and "--model applies with --unit" in bad.output
