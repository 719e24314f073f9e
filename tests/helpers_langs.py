"""A two-language index from the shared corpus, small enough for the real model (tests/test_segments_corpus.py and
bench/segments_lang.py): English PEPs and Chinese JavaGuide pages with a ``lang`` column, the labelled queries, and
three text halves whose change helps one language and hurts the other, or hurts neither.

Documents are excerpts: each labelled document is cut to its evidence with ``window`` characters either side (at
line ends when one is near), so its passage is where it was relative to its neighbourhood, and a few unlabelled
documents of each language (their first ``other_chars`` characters) are distractors. The queries are the corpus's
own (``lang``, ``doc_path`` as the labelled document, ``evidence``), unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Chunk sizes counted in characters, 100 a chunk: a setting tuned for Chinese (a sentence or two of it), too small
# for an English answer (the evidence no longer fits in one chunk).
CHARS_100 = "{chunker: {kind: recursive, size: 100}, tokenizer: char}"
# Chunk sizes counted in whitespace-separated words, 200 a chunk: a setting tuned for English (about 260 model
# tokens); Chinese has no spaces between words, so a "word" is a line and a chunk holds thousands of characters, of
# which the model reads the first 256 tokens (each CJK character is one).
WORDS_200 = "{chunker: {kind: recursive, size: 200}, tokenizer: whitespace}"
# CHARS_100 with NFKC normalisation: full-width CJK punctuation becomes ASCII; English text is unchanged.
CHARS_100_NFKC = "{chunker: {kind: recursive, size: 100}, tokenizer: char, normaliser: {unicode: NFKC}}"


def _excerpt(text: str, start: int, end: int, window: int, slack: int = 200) -> str:
    """``text[start - window : end + window]``, widened to the nearest line ends within ``slack`` characters."""
    a, b = max(0, start - window), min(len(text), end + window)
    nl = text.rfind("\n", max(0, a - slack), a)
    a = nl + 1 if nl >= 0 else a
    nl = text.find("\n", b, b + slack)
    b = nl if nl >= 0 else b
    return text[a:b]


def lang_corpus(corpus: Path, out: Path, *, en_queries: int = 84, zh_queries: int = 8, en_others: int = 20,
                zh_others: int = 24, windows: dict[str, int] | None = None, other_chars: int = 1200,
                seed: int = 0) -> tuple[Path, Path]:
    """Write ``out/corpus.parquet`` (doc_id, text, lang) and ``out/queries.jsonl``; return their paths."""
    windows = windows or {"en": 500, "zh": 800}
    pools = {"en": {r["doc_id"]: r["text"] for r in pq.read_table(corpus / "snapshot_new.parquet",
                                                                   columns=["doc_id", "text"]).to_pylist()},
             "zh": {r["doc_id"]: r["text"] for r in pq.read_table(corpus / "zh_snapshot.parquet",
                                                                   columns=["doc_id", "text"]).to_pylist()}}
    queries = [json.loads(line) for line in (corpus / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line]
    labelled = {q["doc_path"] for q in queries}
    rng = random.Random(seed)
    rows, kept = [], []
    for lang, n_q, n_o in (("en", en_queries, en_others), ("zh", zh_queries, zh_others)):
        pool = pools[lang]
        for q in [q for q in queries if q["lang"] == lang][:n_q]:
            text = pool[q["doc_path"]]
            start = q["evidence_start"]
            assert text[start:start + len(q["evidence"])] == q["evidence"], q["query_id"]
            rows.append((q["doc_path"], _excerpt(text, start, start + len(q["evidence"]), windows[lang]), lang))
            kept.append(q)
        others = sorted(set(pool) - labelled)
        rng.shuffle(others)
        rows += [(d, pool[d][:other_chars], lang) for d in others[:n_o]]
    out.mkdir(parents=True, exist_ok=True)
    table = pa.table({"doc_id": [r[0] for r in rows], "text": [r[1] for r in rows], "lang": [r[2] for r in rows]})
    pq.write_table(table, out / "corpus.parquet")
    (out / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in kept),
                                       encoding="utf-8")
    return out / "corpus.parquet", out / "queries.jsonl"


def lang_config(path: Path, text: str, *, min_recall_delta: float = -0.10) -> Path:
    """A config over ``corpus.parquet`` beside it with the real model, ``text`` as the text half and the cutover
    broken down by ``lang``."""
    path.write_text(f"""index: langs
source: {{uri: ./corpus.parquet, metadata_fields: [lang]}}
text: {text}
embed: {{device: cpu}}
apply: {{shards: 2}}
cutover: {{segments: [lang], min_recall_delta: {min_recall_delta}}}
""", encoding="utf-8")
    return path


def gate_table(report: dict) -> list[str]:
    """The per-language gate table of a cutover report, as Markdown lines (bench/RESULTS.md)."""
    k = report["k"]
    lines = ["| segment | queries | recall@%d old → new | new − old [Holm-corrected interval] | level | "
             "passage hit@%d old → new | verdict |" % (k, k), "|---|---|---|---|---|---|---|"]
    agg = report["evaluation"]["aggregate"]
    d = agg[f"recall_at_{k}_diff"]
    ph = f"passage_hit_at_{k}"
    lines.append(f"| all | {agg['queries']} | {agg[f'recall_at_{k}_old']:.3f} → {agg[f'recall_at_{k}_new']:.3f} | "
                 f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] | 0.025 | "
                 f"{agg.get(f'{ph}_old', 0):.3f} → {agg.get(f'{ph}_new', 0):.3f} | {agg['verdict']} |")
    for value, seg in report["segments"]["lang"].items():
        r, p = seg[f"recall_at_{k}"], seg.get(ph, {"old": 0.0, "new": 0.0})
        lines.append(f"| lang={value} | {seg['queries']} | {r['old']:.3f} → {r['new']:.3f} | {r['diff']:+.3f} "
                     f"[{r['low']:+.3f}, {r['high']:+.3f}] | {r['level']:.4f} | {p['old']:.3f} → {p['new']:.3f} | "
                     f"{seg['verdict']} |")
    return lines
