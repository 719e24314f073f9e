"""Results per language on the shared corpus with the real model (issue 32, item 4): a text-half change that helps
English passages and hurts Chinese passes the overall recall floor and fails the per-language rule (on nDCG@10 since
issue 41), naming Chinese; a change that hurts neither passes.

The index (tests/helpers_langs.py): 84 English PEP excerpts and 8 Chinese JavaGuide excerpts that the corpus's
labelled queries point at, plus 20 and 24 unlabelled ones, with a ``lang`` column; queries.jsonl's own ``lang``.

1. live: chunk sizes in characters, 100 a chunk (tuned for Chinese);
2. shadow: sizes in whitespace words, 200 a chunk (tuned for English). English answers fit in a chunk again
   (passage hit@10 rises), Chinese chunks become whole excerpts of which the model reads the first 256 characters
   (documents rank lower or drop out). recall@10 overall stays within the configured tolerance (−0.10: Chinese is 8
   of 92 queries); the Chinese segment's corrected lower bound does not;
3. shadow: the live text half with NFKC normalisation (Chinese full-width punctuation becomes ASCII): no segment is
   hurt, the gate passes and the alias moves.

Embeds ~190,000 characters three times with all-MiniLM-L6-v2 (the third mostly reused): minutes of CPU."""

from __future__ import annotations

import pytest

from helpers_langs import CHARS_100, CHARS_100_NFKC, WORDS_200, gate_table, lang_config, lang_corpus
from reindex import api

pytestmark = [pytest.mark.slow, pytest.mark.corpus]


def _plan_apply(cfg, plans):
    _, path = api.make_plan(cfg, out=plans)
    api.approve_plan(path, "tester", "test")
    assert api.apply_plan(path, cfg, use_prefect=False).status == "done"
    return path


def test_a_change_that_helps_english_passages_and_hurts_chinese_fails_naming_chinese(shared_corpus, tmp_path) -> None:
    import torch

    torch.set_num_threads(2)
    _, queries = lang_corpus(shared_corpus, tmp_path)
    plans = tmp_path / "plans"
    cfg = lang_config(tmp_path / "reindex.yaml", CHARS_100)
    first = _plan_apply(cfg, plans)
    assert api.cutover(first, cfg).report["swap"]

    cfg = lang_config(tmp_path / "reindex.yaml", WORDS_200)
    hurt = api.cutover(_plan_apply(cfg, plans), cfg, queries=queries).report
    print("\n".join(gate_table(hurt)))
    rules = {r["rule"]: r for r in hurt["rules"]}
    assert rules["recall@10"]["passed"], rules["recall@10"]["detail"]
    assert not rules["nDCG@10 per lang"]["passed"]
    # Judged on nDCG@10 (issue 41), English documents also rank a little lower (−0.028 [−0.058, −0.004] when
    # measured), though English passages now fit in a chunk: the rule names both segments, Chinese far below.
    assert "lang=zh" in rules["nDCG@10 per lang"]["detail"].split(" (intervals")[0]
    segs = hurt["segments"]["lang"]
    assert segs["zh"]["ndcg_at_10"]["diff"] < segs["en"]["ndcg_at_10"]["diff"] - 0.2
    assert hurt["swap"] is None
    en, zh = hurt["segments"]["lang"]["en"], hurt["segments"]["lang"]["zh"]
    assert (en["queries"], zh["queries"]) == (84, 8)
    assert zh["recall_at_10"]["low"] < -0.10 <= en["recall_at_10"]["low"]
    assert zh["recall_at_10"]["diff"] < 0 and zh["mrr"]["verdict"] == "worse"  # Chinese documents rank lower
    assert zh["ranks"]["worse"] > zh["ranks"]["better"]
    assert en["passage_hit_at_10"]["verdict"] == "better"  # English answers fit in one chunk again

    cfg = lang_config(tmp_path / "reindex.yaml", CHARS_100_NFKC)
    fine = api.cutover(_plan_apply(cfg, plans), cfg, queries=queries).report
    print("\n".join(gate_table(fine)))
    rules = {r["rule"]: r for r in fine["rules"]}
    assert rules["nDCG@10 per lang"]["passed"], rules["nDCG@10 per lang"]["detail"]
    assert fine["passed"] and fine["swap"], fine["rules"]
    # The queries file quotes the evidence with full-width punctuation; NFKC chunks hold it as ASCII: found all the
    # same, because each side's evidence is normalised as its text is (verbatim, every Chinese passage was "lost").
    assert fine["segments"]["lang"]["zh"]["passage_hit_at_10"]["new"] >= 0.25
