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

``--inspect`` (on a workspace a previous run left) builds nothing and checks two things in-process: MRR from
exact search over each population's stored vectors against the store's own search (is the gate's ranking
exact here?), and how far an int8 vector moves with the batch it is embedded in (48 stored chunks: each of
8 embedded alone vs all 48 in one call, and the stored vectors vs that call).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/gate_onnx.py [--work build/gate_onnx] [--json-out FILE] [--inspect]
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


def inspect(work: Path) -> dict:
    """Exact vs store-search MRR per population, and the int8 vectors' dependence on their batch."""
    import numpy as np

    from reindex import api
    from reindex.context import backends

    os.chdir(work)
    qs = [json.loads(line) for line in Path("queries_en.jsonl").read_text(encoding="utf-8").splitlines()]
    out: dict = {}
    for name in ("torch", "onnx"):
        cfg = api.load_resolved(f"{name}.yaml")
        store = api.vector_store_for(cfg)
        try:
            coll = store.get_alias(cfg.index) if name == "onnx" else None
            coll = coll or next(c for c in store.list_collections() if c != store.get_alias(cfg.index))
            pts = list(store.scroll(coll, with_vectors=True))
            emb = backends.make_embedder(cfg.vector.for_queries(), options=cfg.embed)
            qv = np.asarray(emb.embed([q["query"] for q in qs]).vectors, dtype=np.float32)
            vecs = np.asarray([p.vector for p in pts], dtype=np.float32)
            owners = np.asarray([p.payload["doc_id"] for p in pts], dtype=object)
            scores = qv @ vecs.T
            exact, searched = [], []
            for i, q in enumerate(qs):
                ranked = list(dict.fromkeys(owners[np.argsort(-scores[i], kind="stable")].tolist()))
                exact.append(1 / (ranked.index(q["doc_path"]) + 1))
                docs = list(dict.fromkeys(h.payload["doc_id"] for h in store.query(coll, qv[i], limit=100)))
                searched.append(1 / (docs.index(q["doc_path"]) + 1) if q["doc_path"] in docs else 0.0)
            out[name] = {"collection": coll, "points": len(pts), "mrr_exact": round(float(np.mean(exact)), 4),
                         "mrr_store_search": round(float(np.mean(searched)), 4)}
            if name == "onnx":
                texts = [p.payload["page_content"] for p in pts[:48]]
                doc_emb = backends.make_embedder(cfg.vector, options=cfg.embed)
                alone = np.asarray([doc_emb.embed([t]).vectors[0] for t in texts[:8]], dtype=np.float32)
                batch = np.asarray(doc_emb.embed(texts).vectors, dtype=np.float32)
                out["int8_batch_dependence"] = {
                    "alone_vs_batch48_min_cosine": round(float(np.sum(alone * batch[:8], axis=1).min()), 5),
                    "alone_vs_batch48_max_abs": round(float(np.abs(alone - batch[:8]).max()), 5),
                    "stored_vs_batch48_min_cosine": round(float(np.sum(vecs[:48] * batch, axis=1).min()), 5),
                    "stored_vs_batch48_max_abs": round(float(np.abs(vecs[:48] - batch).max()), 5)}
        finally:
            store.close()
        print(name, json.dumps(out[name]), flush=True)
    print(json.dumps(out.get("int8_batch_dependence")), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=REPO / "build" / "gate_onnx")
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--inspect", action="store_true", help="check a previous run's workspace (see above)")
    args = ap.parse_args()
    work = args.work.resolve()
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
                      PREFECT_SERVER_ANALYTICS_ENABLED="false")
    os.environ.pop("PREFECT_API_URL", None)
    if args.inspect:
        out = args.json_out.resolve() if args.json_out else None
        found = inspect(work)
        if out:
            out.write_text(json.dumps(found, indent=2))
        return
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
