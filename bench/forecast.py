"""Is the forecast honest? `reindex plan --forecast N` next to what the full cutover then measured, for three real
changes of a real-model index on the shared corpus, and what the forecast cost beside the full build.

Workspace: the PEPs of ``snapshot_new.parquet`` that the English queries of ``queries.jsonl`` point at, plus
``--others`` more drawn at random (seed 0), as a Parquet source; the English queries as the labelled queries file
(``doc_path`` → the relevant document, ``evidence`` → the verbatim passage) for both the forecast and the cutover.
The live population is all-MiniLM-L6-v2 (float32 torch, recursive chunks of 256 tokens). Then, for each change:

* ``chunker``: recursive 256 → 128 tokens (pipeline-scoped/text);
* ``static``: MiniLM → a static model2vec model distilled from it (pipeline-scoped/vector, 256 dimensions);
* ``int8``: float32 torch → int8 ONNX of MiniLM (pipeline-scoped/vector, same space);

``reindex plan --forecast N --queries Q --json`` for each N in ``--n`` (one fresh process each, timed: wall and
CPU-seconds of the process tree), then ``reindex apply`` and ``reindex cutover --queries Q --json`` (timed), then
``reindex rollback`` to the MiniLM population for the next change. Every command is the real CLI. Prints one table
per change — per metric, the forecast's [low, high] for each N beside the full cutover's difference and interval,
whether the forecast's interval holds the full figure, and the verdicts — and the forecast's cost as a fraction of
the full build's (tokens embedded and CPU-seconds).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/forecast.py [--others 216] [--n 50 100 200] [--work build/forecast]
        [--changes chunker static int8] [--json-out bench/out/forecast.json]

``--cost 300 3000`` (issue 41, item 5) measures instead what a forecast costs beside the build it forecasts, at each
size: documents cut from the PEPs of ``snapshot_new.parquet`` (paragraphs grouped to ~600 characters, drawn with seed
0), the cutover's 50 default probes as queries, gates opened. Live: MiniLM (initial build and cutover). Then MiniLM →
the static model: ``reindex plan --forecast --json`` (no N: the default share of the corpus) and ``reindex apply``
(the build), each one process; the cutover; then back, static → MiniLM (a retained MiniLM population: the rollback
case), forecast and build again. Prints per change and size the forecast's own CPU (its process CPU, measured inside
``plan``), what it projected before it ran, the build's CPU (the whole ``reindex apply`` process tree) and the ratio.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/forecast.py --cost 300 3000 [--work build/forecast-cost]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
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
text: {{chunker: {{kind: recursive, size: {size}}}}}
embed: {{device: cpu}}
cutover: {{min_recall_delta: -1.0, cannot_tell: pass, k: 10}}
approval: {{max_tokens: null, max_usd: null}}
{vector}"""

CHANGES = {
    "chunker": dict(size=128, vector="vector: {model: all-MiniLM-L6-v2}"),
    "static": dict(size=256, vector="vector: {provider: model2vec, model: all-MiniLM-L6-v2, dimension: 256}"),
    "int8": dict(size=256, vector="vector: {model: all-MiniLM-L6-v2, backend: onnx, precision: int8}"),
}
LIVE = dict(size=256, vector="vector: {model: all-MiniLM-L6-v2}")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> tuple[str, float, float]:
    """One reindex command: (stdout, wall seconds, CPU-seconds of the process and its children)."""
    print("$", " ".join(cmd), flush=True)
    c0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=os.environ.copy())
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    print(f"  exit {p.returncode} after {wall:.1f} s ({cpu:.1f} CPU-s)", flush=True)
    return p.stdout, wall, cpu


def workspace(work: Path, others: int, labelled_max: int | None = None) -> tuple[Path, int]:
    """The corpus (labelled PEPs + ``others`` random ones) and the English queries file; (queries, documents)."""
    work.mkdir(parents=True, exist_ok=True)
    t = pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pydict()
    queries = [json.loads(line) for line in (CORPUS / "queries.jsonl").read_text().splitlines() if line.strip()]
    en = [q for q in queries if q["lang"] == "en"][:labelled_max]
    labelled = {q["doc_path"] for q in en}
    rest = sorted(set(t["doc_id"]) - labelled)
    keep = labelled | set(random.Random(0).sample(rest, min(others, len(rest))))
    rows = [(d, x) for d, x in zip(t["doc_id"], t["text"]) if d in keep]
    pq.write_table(pa.table({"id": [d for d, _ in rows], "text": [x for _, x in rows]}), work / "corpus.parquet")
    qfile = work / "queries_en.jsonl"
    qfile.write_text("".join(json.dumps({"query_id": q["query_id"], "query": q["query"], "doc_path": q["doc_path"],
                                         "evidence": q["evidence"], "lang": "en"}) + "\n" for q in en))
    return qfile, len(rows)


def write_config(work: Path, spec: dict) -> None:
    (work / "reindex.yaml").write_text(BASE.format(**spec), encoding="utf-8")


def plan(work: Path, *extra: str) -> tuple[dict, float, float]:
    out, wall, cpu = run([str(REINDEX), "plan", "--json", *extra], work, ok=(0, 2))
    return json.loads(out), wall, cpu


def build_live(work: Path) -> dict:
    write_config(work, LIVE)
    p, wall, cpu = plan(work)
    if p.get("approval_required"):
        run([str(REINDEX), "approve", p["plan_file"], "--by", "bench"], work)
    _, aw, ac = run([str(REINDEX), "apply", p["plan_file"], "--no-progress", "--no-prefect"], work)
    run([str(REINDEX), "cutover", p["plan_file"]], work)
    return {"plan_s": wall, "apply_s": aw, "apply_cpu_s": ac, "tokens": p["tokens_to_embed"]}


def one_change(work: Path, name: str, queries: Path, ns: list[int]) -> dict:
    write_config(work, CHANGES[name])
    forecasts = {}
    for n in ns:
        p, wall, cpu = plan(work, "--forecast", str(n), "--queries", str(queries))
        f = p["forecast"]
        forecasts[n] = {"forecast": f, "plan_wall_s": wall, "plan_cpu_s": cpu}
        print(f"  forecast N={n}: {f['verdict']}, {f['cost']}", flush=True)
    p, _, plan_cpu = plan(work)  # the plan the build carries out (no forecast: its own cost apart)
    for n in ns:
        forecasts[n]["forecast_cpu_s"] = max(forecasts[n]["plan_cpu_s"] - plan_cpu, 0.0)
    run([str(REINDEX), "approve", p["plan_file"], "--by", "bench"], work)
    _, aw, ac = run([str(REINDEX), "apply", p["plan_file"], "--no-progress", "--no-prefect"], work)
    out, cw, cc = run([str(REINDEX), "cutover", p["plan_file"], "--queries", str(queries), "--json"], work, ok=(0, 3))
    cut = json.loads(out)
    run([str(REINDEX), "rollback"], work)
    agg = cut["evaluation"]["aggregate"]
    return {"kind": p["kind"], "forecasts": forecasts, "tokens_to_embed": p["tokens_to_embed"],
            "apply_wall_s": aw, "apply_cpu_s": ac, "cutover_wall_s": cw, "cutover_cpu_s": cc,
            "full": {m: {"old": agg[f"{m}_old"], "new": agg[f"{m}_new"], **agg[f"{m}_diff"]}
                     for m in ("recall_at_10", "ndcg_at_10", "mrr", "passage_mrr", "passage_hit_at_10")
                     if f"{m}_diff" in agg},
            "full_verdict": agg.get("verdict"), "full_metrics_verdicts": agg.get("metrics"),
            "agreement": cut["evaluation"].get("agreement")}


def table(name: str, r: dict) -> str:
    ns = sorted(r["forecasts"])
    head = "| metric | full cutover: new − old [95 % CI] | " + " | ".join(f"forecast N={n}" for n in ns) + " |"
    lines = [f"### {name} ({r['kind']})", "", head, "|---|---|" + "---|" * len(ns)]
    for m, full in r["full"].items():
        cells = []
        for n in ns:
            fm = r["forecasts"][n]["forecast"]["metrics"].get(m)
            if fm is None:
                cells.append("–")
                continue
            holds = "✓" if fm["low"] <= full["mean"] <= fm["high"] else "✗"
            cells.append(f"{fm['diff']:+.3f} [{fm['low']:+.3f}, {fm['high']:+.3f}] {holds}")
        lines.append(f"| {m} | {full['mean']:+.3f} [{full['low']:+.3f}, {full['high']:+.3f}] | " + " | ".join(cells) + " |")
    verdicts = " | ".join(r["forecasts"][n]["forecast"]["verdict"] for n in ns)
    lines.append(f"| verdict | {r['full_verdict']} | {verdicts} |")
    costs = []
    for n in ns:
        c = r["forecasts"][n]["forecast"]["cost"]
        tok = c["tokens"] / r["tokens_to_embed"] if r["tokens_to_embed"] else 0.0
        cpu = r["forecasts"][n]["forecast_cpu_s"]
        costs.append(f"{c['tokens']:,} tokens ({tok:.0%}), {cpu:.0f} CPU-s ({cpu / max(r['apply_cpu_s'], 1e-9):.0%})")
    lines.append(f"| cost (÷ full build: {r['tokens_to_embed']:,} tokens, {r['apply_cpu_s']:.0f} CPU-s) | | "
                 + " | ".join(costs) + " |")
    return "\n".join(lines)


COST_BASE = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: 256}}}}
embed: {{device: cpu}}
cutover: {{min_recall_delta: -1.0, min_delta: -1.0, cannot_tell: pass, k: 10}}
approval: {{max_tokens: null, max_usd: null, pipeline_scoped: false}}
{vector}"""
MINILM = "vector: {model: all-MiniLM-L6-v2}"
STATIC = "vector: {provider: model2vec, model: all-MiniLM-L6-v2, dimension: 256}"


def cost_corpus(work: Path, documents: int) -> int:
    """``documents`` documents of ~600 characters: consecutive paragraphs of the PEPs grouped, drawn with seed 0."""
    import re

    work.mkdir(parents=True, exist_ok=True)
    t = pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pydict()
    pieces = []
    for doc, text in zip(t["doc_id"], t["text"]):
        group, n = [], 0
        for para in (p.strip() for p in re.split(r"\n\s*\n", text)):
            if not para:
                continue
            group.append(para)
            if sum(len(g) for g in group) >= 600:
                pieces.append((f"{doc}#{n}", "\n\n".join(group)))
                group, n = [], n + 1
    chosen = sorted(random.Random(0).sample(pieces, documents))
    pq.write_table(pa.table({"id": [d for d, _ in chosen], "text": [x for _, x in chosen]}), work / "corpus.parquet")
    return len(chosen)


def cost_step(work: Path, vector: str) -> dict:
    """One change to ``vector``: the forecast (inside ``plan``), the build (``apply``) and the cutover."""
    (work / "reindex.yaml").write_text(COST_BASE.format(vector=vector), encoding="utf-8")
    p, plan_wall, plan_cpu = plan(work, "--forecast")
    f = p["forecast"]
    _, apply_wall, apply_cpu = run([str(REINDEX), "apply", p["plan_file"], "--no-progress", "--no-prefect"], work)
    # The bench needs the new population live for the way back, whatever the gate says (MiniLM → static is worse).
    run([str(REINDEX), "approve", p["plan_file"], "--by", "bench"], work)
    run([str(REINDEX), "cutover", p["plan_file"], "--force"], work, ok=(0, 3))
    c = f["cost"]
    return {"kind": p["kind"], "sample": f["sample_documents"], "chunks": c["chunks"],
            "embedded_chunks": c["embedded_chunks"], "forecast_cpu_s": c["cpu_seconds"],
            "projected_cpu_s": c.get("projected_cpu_seconds"), "embed_cpu_s": c.get("embed_cpu_seconds"),
            "retained": c.get("retained_populations"), "plan_cpu_s": plan_cpu, "build_cpu_s": apply_cpu,
            "build_wall_s": apply_wall, "tokens_to_embed": p["tokens_to_embed"], "verdict": f["verdict"]}


def cost_run(root: Path, sizes: list[int]) -> dict:
    out = {}
    for n in sizes:
        work = root / f"n{n}"
        if work.exists():
            shutil.rmtree(work)
        docs = cost_corpus(work, n)
        (work / "reindex.yaml").write_text(COST_BASE.format(vector=MINILM), encoding="utf-8")
        p, _, _ = plan(work)
        _, live_wall, live_cpu = run([str(REINDEX), "apply", p["plan_file"], "--no-progress", "--no-prefect"], work)
        run([str(REINDEX), "cutover", p["plan_file"]], work)
        out[n] = {"documents": docs, "live_build_cpu_s": live_cpu, "load_start": os.getloadavg()[0],
                  "minilm_to_static": cost_step(work, STATIC), "static_to_minilm": cost_step(work, MINILM),
                  "load_end": os.getloadavg()[0]}
        print(cost_table(out), flush=True)
    return out


def cost_table(out: dict) -> str:
    lines = ["| documents | change | forecast sample | chunks embedded by the forecast | forecast CPU-s (projected) | "
             "build CPU-s | forecast ÷ build | load |", "|---|---|---|---|---|---|---|---|"]
    for n, r in out.items():
        for name in ("minilm_to_static", "static_to_minilm"):
            s = r[name]
            label = "MiniLM → static" if name == "minilm_to_static" else "static → MiniLM"
            lines.append(f"| {r['documents']:,} | {label} | {s['sample']:,} docs | {s['embedded_chunks']:,} of "
                         f"{s['chunks']:,} | {s['forecast_cpu_s']:.1f} ({s['projected_cpu_s']:.1f}) | "
                         f"{s['build_cpu_s']:.1f} | {s['forecast_cpu_s'] / max(s['build_cpu_s'], 1e-9):.0%} | "
                         f"{r['load_start']:.0f}–{r['load_end']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="build/forecast")
    ap.add_argument("--others", type=int, default=216)
    ap.add_argument("--labelled", type=int, default=None, help="only the first K English queries (a quick run)")
    ap.add_argument("--n", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--changes", nargs="+", default=list(CHANGES), choices=list(CHANGES))
    ap.add_argument("--json-out", default=None)
    ap.add_argument("--keep", action="store_true", help="reuse a workspace a previous run left (skip the live build)")
    ap.add_argument("--cost", type=int, nargs="+", default=None, metavar="DOCUMENTS",
                    help="measure the forecast's CPU beside the build's at these corpus sizes instead")
    args = ap.parse_args()
    if not (CORPUS / "queries.jsonl").exists():
        raise SystemExit(f"{CORPUS} is absent: this bench needs the shared corpus")
    if args.cost:
        out = cost_run(REPO / (args.work if args.work != "build/forecast" else "build/forecast-cost"), args.cost)
        if args.json_out:
            Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json_out).write_text(json.dumps(out, indent=2) + "\n")
        print(cost_table(out))
        return
    work = REPO / args.work
    if work.exists() and not args.keep:
        shutil.rmtree(work)
    queries, docs = workspace(work, args.others, args.labelled)
    print(f"corpus: {docs} PEPs; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    result: dict = {"documents": docs, "load_start": os.getloadavg()[0]}
    if not args.keep:
        result["live"] = build_live(work)
    for name in args.changes:
        result[name] = one_change(work, name, queries, args.n)
        print(table(name, result[name]), flush=True)
    result["load_end"] = os.getloadavg()[0]
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    print("\n\n".join(table(n, result[n]) for n in args.changes))


if __name__ == "__main__":
    main()
