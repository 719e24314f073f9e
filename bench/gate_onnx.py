"""A real model change through reindex's own cutover gate: float32 torch → int8 ONNX of all-MiniLM-L6-v2,
gated on the shared corpus's labelled English queries.

Workspace: the 84 PEPs of ``snapshot_new.parquet`` that the 84 English queries of ``queries.jsonl`` point at
(``doc_path`` = the document id), and those queries as the cutover's queries file (``doc_path`` becomes the
relevant document, ``evidence`` the verbatim passage). Each step is one fresh ``reindex`` process:

1. ``torch.yaml`` (the default vector half, float32 torch on the CPU): ``plan`` → ``apply`` → ``cutover``
   (an initial build: nothing to compare, the gate checks counts only);
2. ``onnx.yaml`` (``vector: {backend: onnx, precision: int8}``): ``plan`` (must be ``pipeline-scoped/vector``
   with nothing reused) → ``approve`` (when required) → ``apply`` → ``cutover --queries queries_en.jsonl
   --json``: old and new each embed the queries with their own model; the gate's rules and the evaluation's
   aggregate are printed and saved.

Embeds ~2,000 chunks twice with the real model: minutes of CPU.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/gate_onnx.py [--work build/gate_onnx] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
REINDEX = Path(sys.executable).with_name("reindex")
CORPUS = REPO.parent / "shared" / "corpus"

BASE = """\
index: peps
source: ./corpus.parquet
embed: {{device: cpu}}
{vector}"""


def run(cmd: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> tuple[int, str, float]:
    """Run one reindex command; return its exit code, stdout and wall seconds."""
    print("$", " ".join(cmd), flush=True)
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=os.environ.copy())
    dt = time.perf_counter() - t
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    print(f"  exit {p.returncode} after {dt:.1f} s", flush=True)
    return p.returncode, p.stdout, dt


def prepare(work: Path) -> dict:
    """The 84-PEP corpus, the English queries file and the two configs."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    qs = [json.loads(line) for line in (CORPUS / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    snap = pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pydict()
    texts = dict(zip(snap["doc_id"], snap["text"]))
    qs = [q for q in qs if q["lang"] == "en" and q["doc_path"] in texts]
    pool = sorted({q["doc_path"] for q in qs})
    pq.write_table(pa.table({"doc_id": pool, "text": [texts[d] for d in pool]}), work / "corpus.parquet")
    with open(work / "queries_en.jsonl", "w", encoding="utf-8") as fh:
        for q in qs:
            fh.write(json.dumps({k: q[k] for k in ("query_id", "query", "doc_path", "evidence")}) + "\n")
    (work / "torch.yaml").write_text(BASE.format(vector=""), encoding="utf-8")
    (work / "onnx.yaml").write_text(BASE.format(vector="vector: {backend: onnx, precision: int8}\n"), encoding="utf-8")
    return {"queries": len(qs), "documents": len(pool)}


def cycle(work: Path, config: str, queries: str | None) -> dict:
    """plan (+ approve) → apply → cutover with ``config``; the plan's numbers, apply's report, cutover's report."""
    _, out, t_plan = run([str(REINDEX), "plan", "-c", config, "--json"], work, ok=(0, 2))
    plan = json.loads(out)
    t_appr = 0.0
    if plan.get("approval_required"):
        _, _, t_appr = run([str(REINDEX), "approve", plan["plan_file"], "--by", "bench"], work)
    _, out, t_apply = run([str(REINDEX), "apply", plan["plan_file"], "-c", config, "--no-progress", "--json"], work)
    applied = json.loads(out)
    cmd = [str(REINDEX), "cutover", plan["plan_file"], "-c", config, "--json"]
    if queries:
        cmd += ["--queries", queries]
    rc, out, t_cut = run(cmd, work, ok=(0, 3))
    cut = json.loads(out)
    return {"plan": plan, "apply": applied, "cutover": cut, "cutover_exit": rc,
            "seconds": {"plan": round(t_plan, 1), "approve": round(t_appr, 1), "apply": round(t_apply, 1),
                        "cutover": round(t_cut, 1)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=REPO / "build" / "gate_onnx")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    work = args.work.resolve()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
                      PREFECT_SERVER_ANALYTICS_ENABLED="false")
    os.environ.pop("PREFECT_API_URL", None)
    sizes = prepare(work)
    print(json.dumps(sizes), flush=True)

    base = cycle(work, "torch.yaml", None)
    print(json.dumps({"torch": {"kind": base["plan"]["kind"], "status": base["apply"]["status"],
                                "embedded": base["apply"].get("actual", {}).get("embedded"),
                                "swap": bool(base["cutover"]["swap"]), "seconds": base["seconds"]}}), flush=True)

    new = cycle(work, "onnx.yaml", "queries_en.jsonl")
    cut = new["cutover"]
    summary = {
        **sizes,
        "plan_kind": new["plan"]["kind"],
        "plan": {k: new["plan"].get(k) for k in ("chunks_new", "chunks_reused", "chunks_to_embed", "tokens_to_embed",
                                                  "approval_required")},
        "apply": {"status": new["apply"]["status"], "embedder": new["apply"].get("embedder"),
                  "actual": new["apply"].get("actual")},
        "cutover_exit": new["cutover_exit"], "passed": cut["passed"], "swapped": bool(cut["swap"]),
        "queries_source": cut.get("queries_source"), "query_vectors": cut.get("query_vectors"),
        "rules": cut["rules"], "aggregate": (cut.get("evaluation") or {}).get("aggregate"),
        "seconds": {"torch": base["seconds"], "onnx": new["seconds"]},
    }
    print(json.dumps(summary, indent=2), flush=True)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"summary": summary, "torch": base, "onnx": new}, indent=2, default=str))


if __name__ == "__main__":
    main()
