"""Sticky re-chunking through the real planner and apply on a real document-scoped change (issue 16).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/sticky_plan.py [--chunker recursive:size=250] [--dir FOLDER]

The two PEP snapshots of the shared corpus (``snapshot_old.parquet`` → ``snapshot_new.parquet``, a few
months apart: 37 edited, 10 added, 656 unchanged documents). For each re-chunking mode (stateless, sticky),
side by side in one run, in its own folder with the ``hash`` embedder (so chunking and reuse are measured,
not a model) and the default embedded store:

1. the old snapshot: ``plan`` → ``apply`` → ``cutover`` (the live population, built statelessly either way);
2. the source switched to the new snapshot: ``plan`` (document-scoped) → ``apply`` in place.

Printed per mode: the plan's tokens to embed (all, and of the edited documents), what apply embedded
(must be equal), the tokens of the edited documents' new versions (re-embedding each edited document
whole), what sticky kept and drift control re-cut; then sticky ÷ stateless.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from reindex import api  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"


def _config(folder: Path, corpus: Path, chunker: str, mode: str) -> Path:
    kind, _, params = chunker.partition(":")
    fields = ", ".join(f"{k}: {v}" for k, v in (p.split("=") for p in params.split(",") if p))
    p = folder / "reindex.yaml"
    p.write_text(
        f"index: peps\nsource: {corpus}\n"
        f"text: {{chunker: {{kind: {kind}{', ' + fields if fields else ''}}}, rechunk: {{mode: {mode}}}}}\n"
        f"vector: {{provider: hash}}\nstate: {{uri: {folder / 'state'}}}\nstore: {{path: {folder / 'qdrant'}}}\n",
        encoding="utf-8",
    )
    return p


def run_mode(folder: Path, chunker: str, mode: str) -> dict:
    folder.mkdir(parents=True)
    cfg = _config(folder, CORPUS / "snapshot_old.parquet", chunker, mode)
    plans = folder / "plans"
    t0 = time.perf_counter()
    plan, path = api.make_plan(cfg, out=plans)
    if plan.body["approval"]["required"]:
        api.approve_plan(path, "bench", "initial build")
    built = api.apply_plan(path, cfg, use_prefect=False)
    assert built.status == "done", built.report
    api.cutover(path, cfg)
    build_s = time.perf_counter() - t0

    cfg = _config(folder, CORPUS / "snapshot_new.parquet", chunker, mode)
    t0 = time.perf_counter()
    plan, path = api.make_plan(cfg, out=plans)
    plan_s = time.perf_counter() - t0
    if plan.body["approval"]["required"]:
        api.approve_plan(path, "bench", "document-scoped change")
    t0 = time.perf_counter()
    done = api.apply_plan(path, cfg, use_prefect=False)
    apply_s = time.perf_counter() - t0
    assert done.status == "done", done.report
    w, a = plan.body["work"], done.report["actual"]
    return {
        "mode": mode,
        "kind": plan.kind,
        "documents": w["documents"],
        "plan_tokens_to_embed": w["tokens_to_embed"],
        "plan_tokens_edited": plan.body["charts"]["tokens_to_embed_by_status"]["edited"],
        "plan_tokens_added": plan.body["charts"]["tokens_to_embed_by_status"]["added"],
        "plan_chunks_to_embed": w["chunks_to_embed"],
        "apply_tokens_embedded": a["tokens_embedded"],
        "apply_embedded": a["embedded"],
        "rechunk": w["rechunk"],
        "seconds": {"initial_build": round(build_s, 1), "plan": round(plan_s, 1), "apply": round(apply_s, 1)},
    }


def edited_whole_tokens(chunker: str) -> int:
    """Tokens of the edited documents' new versions, cut statelessly: re-embedding every edited document whole."""
    import pyarrow.parquet as pq

    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.tokenizers import load_tokenizer

    old = pq.read_table(CORPUS / "snapshot_old.parquet").to_pylist()
    new = pq.read_table(CORPUS / "snapshot_new.parquet").to_pylist()
    key = next(k for k in ("doc_id", "id", "path") if k in new[0])
    before = {r[key]: r["text"] for r in old}
    tok = load_tokenizer("all-MiniLM-L6-v2")
    chunker_ = make_chunker(chunker, tok)
    return sum(c.tokens for r in new if r[key] in before and before[r[key]] != r["text"] for c in chunker_.chunk(r["text"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunker", default="recursive:size=250")
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed after)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not (CORPUS / "snapshot_new.parquet").exists():
        print(f"needs the shared corpus at {CORPUS}", file=sys.stderr)
        return 2
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sticky-plan-"))
    try:
        rows = [run_mode(work / mode, args.chunker, mode) for mode in ("stateless", "sticky")]
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    whole = edited_whole_tokens(args.chunker)
    print(f"chunker {args.chunker}; edited documents re-embedded whole: {whole:,} tokens")
    print("| mode | plan: tokens to embed (edited + added) | apply: tokens embedded | equal | edited ÷ whole | kept / previous chunks | re-cut |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        rc = r["rechunk"]
        kept = f"{rc['kept_chunks']:,} / {rc['previous_chunks']:,}" if rc["mode"] == "sticky" else "—"
        print(f"| {r['mode']} | {r['plan_tokens_to_embed']:,} ({r['plan_tokens_edited']:,} + {r['plan_tokens_added']:,}) | "
              f"{r['apply_tokens_embedded']:,} | {r['plan_tokens_to_embed'] == r['apply_tokens_embedded']} | "
              f"{r['plan_tokens_edited'] / whole:.3f} | {kept} | {rc.get('recut_documents', '—')} |")
    s, f = rows[1], rows[0]
    print(f"sticky ÷ stateless, edited documents' tokens: {s['plan_tokens_edited'] / f['plan_tokens_edited']:.3f}; "
          f"all tokens: {s['plan_tokens_to_embed'] / f['plan_tokens_to_embed']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"chunker": args.chunker, "edited_whole_tokens": whole, "modes": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
