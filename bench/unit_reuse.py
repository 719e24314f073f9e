"""Chunk-level R_c beside unit-level R_c (issue 45) for reindex's chunkers and the public ones, length-matched
as in ``bench/measure_dev.py`` (each size binary-searched on the held-out 10 % of documents to a median of 250
MiniLM word pieces, then frozen; the held-out pairs are not measured), on the same pairs.

Units are the sentences inside each chunk (``reindex.adapters.chunkers.units``, ``--unit``); R_c at both levels
follows seed 000's definition (``reindex.measure.units``). Prints a Markdown table and the check of the target:
unit-level R_c on small edits (<= 5 %) at most 0.5x the best public chunker's chunk-level R_c, per language.

    .venv/bin/pip install semchunk semantic-text-splitter langchain-text-splitters chonkie
    HF_HUB_OFFLINE=1 .venv/bin/python bench/unit_reuse.py --band '<=5%' --unit sentence:min=8 --json bench/out/unit-reuse-le05.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from reindex import measure as m  # noqa: E402
from reindex.adapters.chunkers import make_chunker  # noqa: E402
from reindex.adapters.chunkers.units import parse_unit_spec, unit_texts  # noqa: E402
from reindex.adapters.tokenizers import load_tokenizer  # noqa: E402
from reindex.domain.config import chunker_spec, parse_chunker_spec  # noqa: E402
from reindex.measure.units import run_units, units_markdown  # noqa: E402

HERE = Path(__file__).resolve().parent
PAIRS = HERE.parents[1] / "shared" / "corpus" / "revisions.parquet"
OURS = ("fixed", "recursive", "cdc", "paragraph", "anchored")


def _measure_dev():
    spec = importlib.util.spec_from_file_location("measure_dev", HERE / "measure_dev.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=str(PAIRS))
    ap.add_argument("--target", type=float, default=250)
    ap.add_argument("--unit", default="sentence")
    ap.add_argument("--ours", nargs="*", default=list(OURS))
    ap.add_argument("--public", nargs="*", default=None, help="public chunkers (default: all installed)")
    ap.add_argument("--band", action="append", default=[])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    tok = load_tokenizer("all-MiniLM-L6-v2")
    count = tok.count_batch
    unit = parse_unit_spec(args.unit)
    pairs = m.select_pairs(m.load_pairs(args.pairs), bands=args.band)
    held, pairs = m.calibration_split(pairs)
    texts = list(dict.fromkeys(p.old_text for p in held))
    print(f"calibration: {len(held)} held-out pairs; measuring {len(pairs)} pairs", file=sys.stderr)
    cands: list[m.Candidate] = []
    public_specs: list[str] = []
    for spec in args.ours:
        cfg = parse_chunker_spec(spec)
        size, med = m.calibrate_size(lambda v, c=cfg: make_chunker(m.scale_chunker(c, v), tok), texts, count, target=args.target)
        final = m.scale_chunker(cfg, size)
        cands.append(m.Candidate(chunker_spec(final), lambda c=final: make_chunker(c, tok)))
        print(f"  {chunker_spec(final)}: median {med:.0f}", file=sys.stderr)
    factories = _measure_dev().public_chunkers(tok)
    for name in args.public if args.public is not None else list(factories):
        build = factories[name]
        size, med = m.calibrate_size(build, texts, count, target=args.target, lo=16, hi=2048)
        s = build(size).spec
        cands.append(m.Candidate(s, lambda b=build, v=size: b(v)))
        public_specs.append(s)
        print(f"  {s}: median {med:.0f}", file=sys.stderr)
    t0 = time.process_time()
    report = run_units(cands, pairs, count, lambda t: unit_texts(t, tok, unit), unit=str(unit),
                       tokenizer="all-MiniLM-L6-v2", source=Path(args.pairs).name,
                       progress=lambda line: print("  " + line, file=sys.stderr))
    report["public"] = public_specs
    report["cpu_seconds"] = round(time.process_time() - t0, 1)
    band = args.band[0] if len(args.band) == 1 else "all"
    checks = {}
    for lang in report["languages"]:
        pub = [(c["rc_chunk"][lang][band]["mean"], c["spec"]) for c in report["chunkers"] if c["spec"] in public_specs]
        if not pub:
            continue
        best, best_spec = min(pub)
        units = sorted((c["rc_unit"][lang][band]["mean"], c["spec"]) for c in report["chunkers"])
        checks[lang] = {"best_public": best_spec, "best_public_rc_chunk": best, "target_rc_unit": 0.5 * best,
                        "rc_unit": {s: v for v, s in units}, "met_by": [s for v, s in units if v <= 0.5 * best]}
    report["target"] = checks
    print(units_markdown(report, band=band))
    print(json.dumps(checks, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
