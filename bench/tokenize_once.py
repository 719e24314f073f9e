"""Tokenize once per change (issue 35, item 1): a chunker change planned and applied with the plan's chunks
carried to apply's shards, against the same change with carrying switched off (``REINDEX_CARRY_CHUNKS=0``: the
shards chunk every document again, as before), side by side in one run.

* corpus: ``--docs`` PEPs of the shared snapshot (``random.Random(0)`` draw of its sorted ids), one Parquet file;
* config: ``recursive:size=250`` counted in MiniLM tokens (the packaged tokenizer), the ``hash`` embedder, the
  embedded edge store, 16 shards; the live population is built once (not timed) and copied for every trial;
* the change: ``size 250 → 200`` (pipeline-scoped/text);
* timed: ``reindex plan -c reindex.yaml --json`` and ``reindex apply PLAN --no-progress --json``, each a fresh
  process, CPU-seconds (user + sys) of each from ``RUSAGE_CHILDREN``; ``--repeat`` trials per mode, the modes'
  order alternating, medians kept;
* counted (in this process, once per mode): characters the tokenizer encodes during the plan and during the
  apply, through the ``tokenizers`` library's object (its ``Tokenizer`` wrapped), divided by the characters of the
  corpus' normalised texts: tokenizer passes per document.

With ``--scale ROWS`` it measures the carry alone at that many chunks (synthetic documents of 3 chunks, a folder
state): the planner's writer (CPU-seconds, growth of the process's peak RSS, parts and bytes written) and one
shard's read of its rows (of 16), which is what each apply shard holds.

    nice .venv/bin/python bench/tokenize_once.py [--docs 150] [--repeat 3]
    nice .venv/bin/python bench/tokenize_once.py --scale 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
REINDEX = PY.with_name("reindex")
SNAPSHOT = REPO.parent / "shared" / "corpus" / "snapshot_new.parquet"
CONFIG = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash}}
apply: {{shards: 16}}
"""
MODES = {"carried": {}, "chunked": {"REINDEX_CARRY_CHUNKS": "0"}}


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "REINDEX_"))}
    e.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
             PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING",
             PYTHONPATH=os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    e.update(extra)
    return e


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str], cwd: Path, e: dict[str, str], ok=(0,)) -> tuple[str, float, float]:
    """stdout, CPU-seconds and wall seconds of ``cmd``."""
    c, t = cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True)
    if p.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p.stdout, cpu_children() - c, time.perf_counter() - t


def write_corpus(out: Path, n: int) -> int:
    from reindex.foundation.tables import parquet_from_columns, read_parquet

    cols = read_parquet(SNAPSHOT)
    text = dict(zip(cols["doc_id"], cols["text"]))
    ids = sorted(random.Random(0).sample(sorted(text), n))
    out.write_bytes(parquet_from_columns({"doc_id": ids, "text": [text[i] for i in ids]},
                                         {"doc_id": "string", "text": "string"}))
    return sum(len(text[i].encode()) for i in ids)


def plan_and_apply(ws: Path, e: dict[str, str]) -> dict:
    out, c_plan, w_plan = run([str(REINDEX), "plan", "-c", "reindex.yaml", "--json"], ws, e, ok=(0, 2))
    plan = json.loads(out)
    if plan["approval_required"]:
        run([str(REINDEX), "approve", plan["plan_file"], "--by", "bench"], ws, e)
    out, c_apply, w_apply = run([str(REINDEX), "apply", plan["plan_file"], "-c", "reindex.yaml", "--no-progress",
                                 "--json"], ws, e)
    rep = json.loads(out)
    assert rep["status"] == "done", rep
    return {"plan": c_plan, "apply": c_apply, "total": c_plan + c_apply, "wall": w_plan + w_apply,
            "kind": plan["kind"], "carried": rep["carried"], "points": rep["actual"]["points_in_collection"],
            "collection": rep["collection"]}


def build_live(ws: Path, docs: int) -> int:
    ws.mkdir(parents=True)
    size = write_corpus(ws / "corpus.parquet", docs)
    (ws / "reindex.yaml").write_text(CONFIG.format(size=250), encoding="utf-8")
    e = env()
    plan_and_apply(ws, e)
    plan = sorted((ws / "plans").glob("*-initial-*.json"))[0]
    run([str(REINDEX), "approve", str(plan), "--by", "bench"], ws, e)
    out, _, _ = run([str(REINDEX), "cutover", str(plan), "-c", "reindex.yaml", "--force", "--json"], ws, e)
    assert json.loads(out)["swap"], out
    (ws / "reindex.yaml").write_text(CONFIG.format(size=200), encoding="utf-8")
    return size


def count_passes(base: Path, work: Path) -> dict[str, dict[str, float]]:
    """Tokenizer passes per document of the plan and of the apply, per mode, counted in this process."""
    sys.path.insert(0, str(REPO / "src"))
    import tokenizers

    from reindex import api
    from reindex.domain.identity import identity_of
    from reindex.adapters.pipeline import TextPipeline
    from reindex.adapters.sources import open_source
    from reindex.adapters.sources.base import ScanReport
    from reindex.adapters.tokenizers import load_tokenizer

    counts: Counter = Counter()
    real = tokenizers.Tokenizer

    class Counted:
        def __init__(self, t): self._t = t  # noqa: E704

        def encode(self, text, *a, **k):
            counts["chars"] += len(text)
            return self._t.encode(text, *a, **k)

        def encode_batch(self, texts, *a, **k):
            counts["chars"] += sum(len(t) for t in texts)
            return self._t.encode_batch(texts, *a, **k)

        def __getattr__(self, name):
            return getattr(self._t, name)

    class Counting:
        @staticmethod
        def from_file(path):
            return Counted(real.from_file(path))

    tokenizers.Tokenizer = Counting
    load_tokenizer.cache_clear()
    out = {}
    cwd = os.getcwd()
    try:
        for mode, extra in MODES.items():
            ws = work / f"count-{mode}"
            shutil.rmtree(ws, ignore_errors=True)
            shutil.copytree(base, ws)
            os.chdir(ws)
            os.environ.pop("REINDEX_CARRY_CHUNKS", None)
            os.environ.update(extra)
            cfg = api.load_resolved("reindex.yaml")
            pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
            docs = list(open_source(cfg.source).scan(ScanReport()))
            chars = sum(len(pipe.document_text(d)) for d in docs)
            counts.clear()
            plan, path = api.make_plan("reindex.yaml", out="plans")
            planned = counts["chars"]
            api.approve_plan(path, "bench", "")
            counts.clear()
            r = api.apply_plan(path, "reindex.yaml", use_prefect=False)
            assert r.status == "done", r.report
            out[mode] = {"plan": planned / chars, "apply": counts["chars"] / chars, "documents": len(docs),
                         "chars": chars}
    finally:
        os.chdir(cwd)
        os.environ.pop("REINDEX_CARRY_CHUNKS", None)
        tokenizers.Tokenizer = real
        load_tokenizer.cache_clear()
    return out


def scale(rows: int, work: Path) -> None:
    """The carry alone at ``rows`` chunks: writer and one shard's read."""
    sys.path.insert(0, str(REPO / "src"))
    from reindex.books.carried import CarriedRef, CarryWriter, read_shard_carry
    from reindex.domain.identity import fingerprint, point_ids
    from reindex.adapters.pipeline import ChunkRecord
    from reindex.adapters.sources.base import Document
    from reindex.adapters.stores.objects import open_object_store

    def peak_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    shutil.rmtree(work, ignore_errors=True)
    state = open_object_store(str(work / "state"))
    text = ("lorem ipsum dolor sit amet " * 40)[:900]
    per_doc, shards = 3, 16
    from reindex.foundation.tables import parquet_from_columns

    parquet_from_columns({"a": ["x"]}, {"a": "string"})  # pyarrow loaded before the baseline: its import is not the carry
    base, t0, c0 = peak_mb(), time.perf_counter(), time.process_time()
    writer = CarryWriter(state, "docs", shards, "p" * 64)
    for d in range(rows // per_doc):
        doc_id = f"doc-{d:08d}"
        doc = Document.of(doc_id, f"{doc_id} {text}".encode())
        fps = [fingerprint("v", f"{d}:{i}") for i in range(per_doc)]
        recs = [ChunkRecord(doc_id, i, i * 300, i * 300 + 300, 60, text[i * 300:i * 300 + 300], fp, pid)
                for i, (fp, pid) in enumerate(zip(fps, point_ids(doc_id, fps)))]
        writer.add(doc, text, recs)
    summary = writer.finish()
    write_cpu, write_wall, write_peak = time.process_time() - c0, time.perf_counter() - t0, peak_mb() - base
    # What building the records themselves costs (the planner does it anyway), to take out of the writer's CPU.
    c0 = time.process_time()
    for d in range(rows // per_doc):
        doc_id = f"doc-{d:08d}"
        Document.of(doc_id, f"{doc_id} {text}".encode())
        fps = [fingerprint("v", f"{d}:{i}") for i in range(per_doc)]
        [ChunkRecord(doc_id, i, i * 300, i * 300 + 300, 60, text[i * 300:i * 300 + 300], fp, pid)
         for i, (fp, pid) in enumerate(zip(fps, point_ids(doc_id, fps)))]
    making = time.process_time() - c0
    print(f"writer: {summary['chunks']:,} chunks of {summary['documents']:,} documents in {summary['parts']} parts, "
          f"{summary['bytes'] / 2**20:.1f} MiB; {write_cpu - making:.2f} CPU-s beyond making the records "
          f"({write_cpu:.2f} with them, {write_wall:.1f} s wall); peak RSS grew {write_peak:.0f} MiB", flush=True)
    base, c0 = peak_mb(), time.process_time()
    carry = read_shard_carry(state, CarriedRef("docs", summary["id"]), 0, shards, "p" * 64)
    got = sum(len(r) for _, r in carry.docs.values())
    print(f"one shard's read (1 of {shards}): {got:,} rows of {len(carry.docs):,} documents, "
          f"{time.process_time() - c0:.2f} CPU-s, peak RSS grew {peak_mb() - base:.0f} MiB; problems: {carry.problems}")
    c0 = time.process_time()
    carry = read_shard_carry(state, CarriedRef("docs", summary["id"]), 0, shards - 1, "p" * 64)
    print(f"the same shard read with another shard count (every part, filtered): "
          f"{sum(len(r) for _, r in carry.docs.values()):,} rows, {time.process_time() - c0:.2f} CPU-s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=REPO / "build" / "bench_tokenize_once")
    ap.add_argument("--scale", type=int, default=0, help="measure the carry alone at this many chunks")
    args = ap.parse_args()
    if args.scale:
        scale(args.scale, args.work / "scale")
        return
    shutil.rmtree(args.work, ignore_errors=True)
    base = args.work / "live"
    t = time.perf_counter()
    size = build_live(base, args.docs)
    print(f"live population: {args.docs} PEPs ({size / 1e6:.2f} MB), recursive:size=250, built in "
          f"{time.perf_counter() - t:.0f} s; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)

    passes = count_passes(base, args.work)
    for mode, p in passes.items():
        print(f"tokenizer passes per document ({mode}): plan {p['plan']:.2f}, apply {p['apply']:.2f}, "
              f"plan + apply {p['plan'] + p['apply']:.2f}", flush=True)

    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    collections = set()
    for i in range(args.repeat):
        order = list(MODES) if i % 2 == 0 else list(reversed(MODES))
        for mode in order:
            ws = args.work / f"trial-{i}-{mode}"
            shutil.copytree(base, ws)
            r = plan_and_apply(ws, env(**MODES[mode]))
            collections.add((r["collection"], r["points"]))
            runs[mode].append(r)
            print(f"trial {i + 1} {mode:8s}: plan {r['plan']:.2f} + apply {r['apply']:.2f} = {r['total']:.2f} CPU-s "
                  f"({r['wall']:.1f} s wall, load {os.getloadavg()[0]:.1f}); carried {r['carried']['documents']}, "
                  f"chunked {r['carried']['chunked']}", flush=True)
            shutil.rmtree(ws)
    assert len(collections) == 1, collections  # the same population both ways
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("plan", "apply", "total")} for m, rs in runs.items()}
    a, b = med["carried"], med["chunked"]
    print(f"\nmedian of {args.repeat} (CPU-s)   plan   apply   plan + apply")
    for m in MODES:
        print(f"{m:24s} {med[m]['plan']:6.2f} {med[m]['apply']:7.2f} {med[m]['total']:9.2f}")
    print(f"ratio carried / chunked  {a['plan'] / b['plan']:6.2f} {a['apply'] / b['apply']:7.2f} "
          f"{a['total'] / b['total']:9.2f}")
    print(f"points: {collections.pop()[1]}")


if __name__ == "__main__":
    main()
