"""R_c of reindex's chunkers and public chunkers side by side on the dev revision pairs.

Every chunker is length-matched first: its size parameter is binary-searched so that the median
chunk length (all-MiniLM-L6-v2 word pieces) on the held-out 10 % of documents (old texts) is within
15 % of the target (default 250), then frozen; the held-out pairs are not measured. Public chunkers
(the ``bench`` extra: semchunk, semantic-text-splitter, langchain-text-splitters, chonkie) use the
same HF tokenizer as their length function. Then ``reindex.measure.run_measure`` measures all of them
on the same pairs (no-edit control, bands, paired differences over documents).

    .venv/bin/pip install semchunk semantic-text-splitter langchain-text-splitters chonkie
    HF_HUB_OFFLINE=1 .venv/bin/python bench/measure_dev.py --report bench/out/measure-dev
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from reindex import measure as m  # noqa: E402
from reindex.adapters.chunkers import make_chunker  # noqa: E402
from reindex.domain.config import chunker_spec, parse_chunker_spec  # noqa: E402
from reindex.adapters.tokenizers import load_tokenizer  # noqa: E402

PAIRS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "revisions.parquet"
OURS = ("fixed", "recursive", "cdc", "paragraph", "anchored")


class _Strings:
    """Adapts a ``text -> list[str]`` splitter to the measure protocol."""

    def __init__(self, spec: str, split: Callable[[str], list[str]]) -> None:
        self.spec = spec
        self._split = split

    def chunk(self, text: str) -> list[str]:
        return [c for c in self._split(text) if c]


def public_chunkers(tok) -> dict[str, Callable[[int], _Strings]]:
    """Factories ``size -> chunker`` of the installed public chunkers (missing ones are skipped)."""
    hf = tok.backend

    def count(text: str) -> int:
        return len(hf.encode(text, add_special_tokens=False).ids)

    out: dict[str, Callable[[int], _Strings]] = {}
    try:
        import semchunk

        def semchunk_build(size: int) -> _Strings:
            ch = semchunk.chunkerify(count, size)
            return _Strings(f"semchunk:size={size}", lambda t: ch(t))

        out["semchunk"] = semchunk_build
    except ImportError:
        print("semchunk not installed; skipped", file=sys.stderr)
    try:
        from semantic_text_splitter import TextSplitter

        def sts_build(size: int) -> _Strings:
            sp = TextSplitter.from_huggingface_tokenizer(hf, size)
            return _Strings(f"semantic-text-splitter:size={size}", lambda t: sp.chunks(t))

        out["semantic-text-splitter"] = sts_build
    except ImportError:
        print("semantic-text-splitter not installed; skipped", file=sys.stderr)
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        def lc_build(size: int) -> _Strings:
            sp = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=0, length_function=count)
            return _Strings(f"langchain-recursive:size={size}", lambda t: sp.split_text(t))

        out["langchain-recursive"] = lc_build
    except ImportError:
        print("langchain-text-splitters not installed; skipped", file=sys.stderr)
    try:
        from chonkie import RecursiveChunker

        def chonkie_build(size: int) -> _Strings:
            ch = RecursiveChunker(tokenizer=hf, chunk_size=size)
            return _Strings(f"chonkie-recursive:size={size}", lambda t: [c.text for c in ch.chunk(t)])

        out["chonkie-recursive"] = chonkie_build
    except ImportError:
        print("chonkie not installed; skipped", file=sys.stderr)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=str(PAIRS))
    ap.add_argument("--target", type=float, default=250)
    ap.add_argument("--ours", nargs="*", default=list(OURS), help="reindex chunker specs")
    ap.add_argument("--public", nargs="*", default=None, help="public chunkers (default: all installed)")
    ap.add_argument("--lang", default=None)
    ap.add_argument("--band", action="append", default=[])
    ap.add_argument("--report", default=None, help="folder for measure.json/.md/.html")
    ap.add_argument("--json", default=None, help="also write the JSON report here")
    args = ap.parse_args()

    tok = load_tokenizer("all-MiniLM-L6-v2")
    count = tok.count_batch
    pairs = m.select_pairs(m.load_pairs(args.pairs), lang=args.lang, bands=args.band)
    held, pairs = m.calibration_split(pairs)
    texts = list(dict.fromkeys(p.old_text for p in held))
    print(f"calibration: {len(held)} held-out pairs ({len({p.doc_key for p in held})} documents); "
          f"measuring {len(pairs)} pairs", file=sys.stderr)

    cands: list[m.Candidate] = []
    info: dict[str, dict] = {}
    for spec in args.ours:
        cfg = parse_chunker_spec(spec)
        t0 = time.perf_counter()
        size, med = m.calibrate_size(lambda v, c=cfg: make_chunker(m.scale_chunker(c, v), tok), texts, count, target=args.target)
        final = m.scale_chunker(cfg, size)
        s = chunker_spec(final)
        info[s] = {"from": spec, "value": size, "median": med, "seconds": round(time.perf_counter() - t0, 1)}
        cands.append(m.Candidate(s, lambda c=final: make_chunker(c, tok)))
        print(f"  {s}: median {med:.0f} on the calibration split", file=sys.stderr)
    factories = public_chunkers(tok)
    for name in args.public if args.public is not None else list(factories):
        build = factories[name]
        t0 = time.perf_counter()
        size, med = m.calibrate_size(build, texts, count, target=args.target, lo=16, hi=2048)
        s = build(size).spec
        info[s] = {"from": name, "value": size, "median": med, "seconds": round(time.perf_counter() - t0, 1)}
        cands.append(m.Candidate(s, lambda b=build, v=size: b(v)))
        print(f"  {s}: median {med:.0f} on the calibration split", file=sys.stderr)

    calibration = {"target": args.target, "pairs": len(held), "documents": len({p.doc_key for p in held}), "chunkers": info}
    report = m.run_measure(cands, pairs, count, tokenizer="all-MiniLM-L6-v2", source=Path(args.pairs).name,
                           target_median=args.target, calibration=calibration,
                           progress=lambda line: print("  " + line, file=sys.stderr))
    print(m.measure_markdown(report))
    if args.report:
        for p in m.write_measure_reports(report, args.report):
            print(f"wrote {p}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
