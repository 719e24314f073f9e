"""Chunking throughput on the PEP corpus: our chunkers against the raw tokenizer (their ceiling) and
against public token-limited chunkers using the same tokenizer as their length function.

    .venv/bin/python bench/chunking_throughput.py [--corpus PATH] [--limit-mb 2] [--repeat 2]

MB/s is UTF-8 megabytes of input per CPU second (``time.process_time``, all threads); wall seconds
are printed too. "ratio" is throughput relative to tokenising every document once with the same
tokenizer (HF ``encode_batch``, offsets read). Public chunkers that fail to import are skipped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# One thread everywhere: the comparison is per CPU second, and the box has two noisy cores.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from reindex.adapters.chunkers import make_chunker  # noqa: E402
from reindex.adapters.tokenizers import HFTokenizer, load_tokenizer  # noqa: E402

SIZE = 256
OURS = [
    "fixed:size=256",
    "sliding:size=256,overlap=0.2",
    "fixed_chars:size=1000",
    "sentence:sentences=5,size=256",
    "paragraph:size=256",
    "recursive:size=256",
    "markdown:size=256",
    "cdc:min=128,max=256,cap=384",
]


@dataclass(frozen=True, slots=True)
class Row:
    """One measured chunker."""

    name: str
    cpu_s: float
    wall_s: float
    chunks: int
    median_tokens: float


def _time(make: Callable[[], Callable[[str], list]], docs: list[str], repeat: int) -> tuple[float, float, list]:
    """Best CPU and wall seconds over ``repeat`` runs; a fresh chunker each run, so no library's
    memo of token counts carries over from one run to the next."""
    make()(docs[0])  # warm-up: lazy imports, regex compilation
    best_cpu, best_wall, out = float("inf"), float("inf"), []
    for _ in range(repeat):
        fn = make()
        c0, w0 = time.process_time(), time.perf_counter()
        out = [fn(d) for d in docs]
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        best_cpu, best_wall = min(best_cpu, cpu), min(best_wall, wall)
    return best_cpu, best_wall, out


def public_chunkers(hf) -> dict[str, Callable[[], Callable[[str], list[str]]]]:
    """Factories of public token-limited chunkers with the same HF tokenizer as length function."""

    def count(text: str) -> int:
        return len(hf.encode(text, add_special_tokens=False).ids)

    found: dict[str, Callable[[], Callable[[str], list[str]]]] = {}
    try:
        import semchunk

        def semchunk_chunker() -> Callable[[str], list[str]]:
            # semchunk memoises token counts per counter function: a new counter per run keeps
            # its memo from one run out of the next (within a run the memo is fair game).
            return semchunk.chunkerify(lambda text: count(text), SIZE)

        found["semchunk (chunkerify)"] = semchunk_chunker
    except Exception as err:  # noqa: BLE001 — any import/setup failure means "skip it"
        print(f"skip semchunk: {err}", file=sys.stderr)
    try:
        from chonkie import RecursiveChunker, TokenChunker

        def chonkie_recursive() -> Callable[[str], list[str]]:
            chunker = RecursiveChunker(tokenizer=hf, chunk_size=SIZE)
            return lambda t: [c.text for c in chunker.chunk(t)]

        def chonkie_token() -> Callable[[str], list[str]]:
            chunker = TokenChunker(tokenizer=hf, chunk_size=SIZE, chunk_overlap=0)
            return lambda t: [c.text for c in chunker.chunk(t)]

        found["chonkie RecursiveChunker"] = chonkie_recursive
        found["chonkie TokenChunker"] = chonkie_token
    except Exception as err:  # noqa: BLE001
        print(f"skip chonkie: {err}", file=sys.stderr)
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        found["langchain RecursiveCharacterTextSplitter"] = lambda: RecursiveCharacterTextSplitter(
            chunk_size=SIZE, chunk_overlap=0, length_function=count
        ).split_text
    except Exception as err:  # noqa: BLE001
        print(f"skip langchain-text-splitters: {err}", file=sys.stderr)
    try:
        from semantic_text_splitter import MarkdownSplitter, TextSplitter

        found["semantic-text-splitter TextSplitter"] = lambda: TextSplitter.from_huggingface_tokenizer(hf, SIZE).chunks
        found["semantic-text-splitter MarkdownSplitter"] = lambda: MarkdownSplitter.from_huggingface_tokenizer(hf, SIZE).chunks
    except Exception as err:  # noqa: BLE001
        print(f"skip semantic-text-splitter: {err}", file=sys.stderr)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "corpus" / "snapshot_new.parquet"))
    parser.add_argument("--limit-mb", type=float, default=2.0, help="Use the first documents up to this many MB.")
    parser.add_argument("--repeat", type=int, default=2, help="Runs per chunker; the fastest counts.")
    parser.add_argument("--tokenizer", default="all-MiniLM-L6-v2")
    parser.add_argument("--no-public", action="store_true", help="Only the raw tokenizer and our chunkers.")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    docs: list[str] = []
    total = 0
    for text in pq.read_table(args.corpus, columns=["text"]).column("text").to_pylist():
        if total >= args.limit_mb * 1e6:
            break
        docs.append(text)
        total += len(text.encode("utf-8"))
    mb = total / 1e6
    tok = load_tokenizer(args.tokenizer)
    if not isinstance(tok, HFTokenizer):
        parser.error("--tokenizer must name a Hugging Face tokenizer (the public chunkers need one)")
    hf = tok.backend
    print(f"{len(docs)} documents, {mb:.2f} MB, tokenizer {args.tokenizer}, chunk size {SIZE} tokens", flush=True)

    rows: list[Row] = []

    def raw(batch: list[str]) -> list:
        return [e.offsets for e in hf.encode_batch(batch, add_special_tokens=False)]

    raw_cpu, raw_wall = float("inf"), float("inf")
    for _ in range(args.repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        n_tokens = sum(len(o) for o in raw(docs))
        raw_cpu, raw_wall = min(raw_cpu, time.process_time() - c0), min(raw_wall, time.perf_counter() - w0)
    rows.append(Row("raw tokenizer (encode_batch + offsets)", raw_cpu, raw_wall, 0, float("nan")))
    print(f"  raw tokenizer: {n_tokens} tokens", flush=True)

    for spec in OURS:
        cpu, wall, out = _time(lambda spec=spec: make_chunker(spec, tok).chunk, docs, args.repeat)
        toks = [c.tokens for chunks in out for c in chunks]
        rows.append(Row(f"reindex {spec}", cpu, wall, len(toks), statistics.median(toks)))
        print(f"  {rows[-1].name}: {mb / cpu:.2f} MB/s", flush=True)

    if not args.no_public:
        for name, make in public_chunkers(hf).items():
            try:
                cpu, wall, out = _time(make, docs, args.repeat)
            except Exception as err:  # noqa: BLE001
                print(f"skip {name}: {type(err).__name__}: {err}", file=sys.stderr)
                continue
            texts = [t for chunks in out for t in chunks]
            toks = tok.count_batch(texts)  # counted outside the timed region
            rows.append(Row(name, cpu, wall, len(texts), statistics.median(toks) if toks else float("nan")))
            print(f"  {name}: {mb / cpu:.2f} MB/s", flush=True)

    print()
    print("| chunker | MB/s (CPU) | wall s | ratio to raw tokenizer | chunks | median tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        med = "" if r.median_tokens != r.median_tokens else f"{r.median_tokens:.0f}"
        chunks = "" if r.chunks == 0 else str(r.chunks)
        print(f"| {r.name} | {mb / r.cpu_s:.2f} | {r.wall_s:.2f} | {raw_cpu / r.cpu_s:.2f} | {chunks} | {med} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
