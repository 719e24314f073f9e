"""``vector.compose: none`` vs ``units`` through plan and apply (issue 45): the 24-PEP sample built, then the
sample's real edits (2 documents) plus one sentence edited in 6 more documents synced in place, side by side in
one process for each model. Reports per mode: the edit's planned and embedded tokens, texts embedded, CPU
seconds of the sync's apply, the unit parts' bytes, and the build's CPU seconds.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/compose_apply.py --model static --model minilm --json bench/out/compose-apply.json

``static``: model2vec distilled from the packaged all-MiniLM-L6-v2 (cached under ~/.cache/reindex; distilled on
first use, ~90 CPU-s); ``minilm``: the packaged all-MiniLM-L6-v2 (sentence-transformers, torch)."""

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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers_index import SAMPLE, Workspace, config_text  # noqa: E402
from reindex.books.units import unit_parts_bytes  # noqa: E402

VECTORS = {"static": "{{provider: model2vec, model: all-MiniLM-L6-v2, dimension: 256{compose}}}",
           "minilm": "{{provider: sentence-transformers, model: all-MiniLM-L6-v2, dimension: 384{compose}}}"}


def _edit(ws: Workspace) -> int:
    """The sample's real edits, and one word of the first long sentence of six more documents."""
    ws.edit_documents()
    edited = {f.name for f in (SAMPLE / "edits").glob("*.rst")}
    n = 0
    for f in sorted(ws.corpus.iterdir()):
        if f.name in edited or n >= 6:
            continue
        text = f.read_text(encoding="utf-8")
        at = text.find(" the ", len(text) // 2)
        if at > 0:
            f.write_text(text[:at] + " this " + text[at + 5:], encoding="utf-8")
            n += 1
    return n + len(edited)


def run(model: str, compose: str, root: Path) -> dict:
    vector = VECTORS[model].format(compose=", compose: units" if compose == "units" else "")
    ws = Workspace(root)
    ws.config.write_text(config_text(150).replace("vector: {provider: hash}", f"vector: {vector}"), encoding="utf-8")
    t0 = time.process_time()
    live = ws.build_live()
    build_cpu = time.process_time() - t0
    edited = _edit(ws)
    plan, path = ws.plan()
    if plan.body["approval"]["required"]:
        ws.approve(path)
    t1 = time.process_time()
    r = ws.apply(path)
    apply_cpu = time.process_time() - t1
    actual = r.report["actual"]
    return {"model": model, "compose": compose, "documents_edited": edited, "build_cpu_s": round(build_cpu, 2),
            "sync_apply_cpu_s": round(apply_cpu, 2), "planned_tokens": plan.body["work"]["tokens_to_embed"],
            "planned_chunks": plan.body["work"].get("chunks_to_embed"), "units": plan.body["work"].get("units"),
            "embedded_texts": actual.get("embedded"), "embedded_tokens": actual.get("tokens_embedded"),
            "unit_parts_bytes": unit_parts_bytes(ws.state(), "docs", live)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", choices=sorted(VECTORS), default=[])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = []
    for model in args.model or ["static"]:
        for compose in ("none", "units"):
            root = Path(tempfile.mkdtemp(prefix=f"compose-{model}-{compose}-"))
            try:
                res = run(model, compose, root / "ws")
            finally:
                shutil.rmtree(root, ignore_errors=True)
            res["load"] = os.getloadavg()[0]
            out.append(res)
            print(json.dumps(res), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
