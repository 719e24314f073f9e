"""How right is the ETA of a build? (issue 34, item 6): what ``reindex status`` says at 25 %, 50 % and 75 % of the
tokens, against when the build's shards (and the whole apply) really ended.

    PYTHONPATH=src nice -n 5 .venv/bin/python bench/eta.py --docs 40 --dir build/eta [--embedder model|throttled]

The corpus is the first ``--docs`` PEPs of the shared snapshot (``../shared/corpus/snapshot_new.parquet``) as JSONL,
``recursive:size=200``, 4 shards, the in-process runner. ``--embedder model``: the real all-MiniLM-L6-v2 on the CPU
(the default); ``throttled``: the hash embedder held to ``--rate`` tokens per second of the plan's tokenizer (a
rate that does not vary, so what is left of the error is apply's own work around the embedding).

An initial build is planned and applied in this process; a second thread polls what ``reindex status`` shows of
the building population every 0.5 s (``reindex.usecases.lifecycle.build_progress``: the progress record the apply
writes every 2 s and at each shard, its ETA less the record's age). At the first poll past each fraction of the
planned tokens, the ETA shown is compared with the seconds that were actually left to the end of the shards (the
last shard's ``shard-done`` event: what the ETA estimates) and to the end of the apply (the index build and the
records after the shards, which the ETA does not include). Error = (ETA − actual) / actual.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
SNAPSHOT = ROOT.parent / "shared" / "corpus" / "snapshot_new.parquet"
CONFIG = """index: eta
source: ./corpus.jsonl
text: {{chunker: {{kind: recursive, size: 200}}}}
vector: {vector}
state: {{uri: ./state}}
store: {{path: ./store}}
apply: {{shards: 4}}
approval: {{pipeline_scoped: false, max_tokens: null, max_usd: null}}
"""


class Throttled:
    """The hash embedder at a fixed rate of tokens per second, counted by the plan's tokenizer (it sleeps what the
    batch would take at that rate)."""

    def __init__(self, inner, rate: float, count) -> None:
        self.inner, self.rate, self.count = inner, rate, count

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def embed(self, texts):
        t0 = time.perf_counter()
        out = self.inner.embed(texts)
        time.sleep(max(0.0, sum(self.count(texts)) / self.rate - (time.perf_counter() - t0)))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--dir", type=Path, default=ROOT / "build" / "eta")
    ap.add_argument("--embedder", choices=("model", "throttled"), default="model")
    ap.add_argument("--rate", type=float, default=2_000.0, help="throttled: tokens per second")
    args = ap.parse_args()
    args.dir = args.dir.resolve()
    import pyarrow.parquet as pq

    from reindex import api
    from reindex.books.locks import read_lock
    from reindex.books.manifests import read_population
    from reindex.usecases.lifecycle import build_progress

    work = args.dir / args.embedder
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = pq.read_table(SNAPSHOT, columns=["doc_id", "text"]).to_pylist()[: args.docs]
    with (work / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({"id": r["doc_id"], "text": r["text"]}) + "\n")
    vector = "{provider: hash}" if args.embedder == "throttled" else "{model: all-MiniLM-L6-v2, dimension: 384}"
    (work / "reindex.yaml").write_text(CONFIG.format(vector=vector), encoding="utf-8")
    os.chdir(work)
    cfg = api.load_resolved("reindex.yaml")
    embedder = None
    if args.embedder == "throttled":
        from reindex.domain.identity import identity_of
        from reindex.adapters.pipeline import TextPipeline

        tokenizer = TextPipeline(cfg.text, identity_of(cfg).vector_id).tokenizer
        embedder = Throttled(api.make_embedder(cfg.vector), args.rate, tokenizer.count_batch)
    polls: list[dict] = []
    events: list[tuple[float, dict]] = []
    stop = threading.Event()

    with api.Index.open("reindex.yaml", embedder=embedder) as ix:
        plan, path = ix.plan()
        target = plan.body["identity"]["new"]["collection"]
        state = ix.state

        def poll() -> None:
            while not stop.is_set():
                rec = read_population(state, "eta", target)
                if rec is not None and rec.state == "building":
                    p = build_progress(state, "eta", rec, read_lock(state, "eta").as_status())
                    polls.append({"t": time.perf_counter(), **p})
                stop.wait(0.5)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        t0 = time.perf_counter()
        r = ix.apply(path, prefect=False, progress=lambda e: events.append((time.perf_counter(), e)))
        t_end = time.perf_counter()
        stop.set()
        poller.join()
    assert r.status == "done", r.report["failures"]
    with (work / "events.jsonl").open("w") as f:  # for a look at other estimators
        for t, e in events:
            f.write(json.dumps({"t": t - t0, **{k: v for k, v in e.items() if k != "result"}}) + "\n")
        for p in polls:
            f.write(json.dumps({"poll": True, **p, "t": p["t"] - t0}) + "\n")
    t_shards = max(t for t, e in events if e["kind"] == "shard-done")
    planned = plan.body["work"]["tokens_to_embed"]
    out = {"embedder": args.embedder, "docs": args.docs, "chunks": plan.body["work"]["chunks_to_embed"],
           "tokens_planned": planned, "tokens_embedded": r.report["actual"]["tokens_embedded"],
           "shards_s": round(t_shards - t0, 1), "apply_s": round(t_end - t0, 1), "at": []}
    for frac in (0.25, 0.5, 0.75):
        p = next((p for p in polls if p["tokens_done"] and p["eta_seconds"] is not None
                  and p["tokens_done"] >= frac * planned), None)
        if p is None:
            out["at"].append({"fraction": frac, "eta_s": None})
            continue
        left_shards, left_apply = t_shards - p["t"], t_end - p["t"]
        out["at"].append({"fraction": frac, "tokens_done": p["tokens_done"], "elapsed_s": round(p["t"] - t0, 1),
                          "eta_s": p["eta_seconds"], "left_to_shards_end_s": round(left_shards, 1),
                          "left_to_apply_end_s": round(left_apply, 1),
                          "error_vs_shards": round((p["eta_seconds"] - left_shards) / left_shards, 3),
                          "error_vs_apply": round((p["eta_seconds"] - left_apply) / left_apply, 3)})
    print(json.dumps(out))
    print("| tokens done | at (s) | ETA shown (s) | left to the shards' end (s) | error | left to the apply's end (s) | error |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for a in out["at"]:
        if a["eta_s"] is None:
            print(f"| {a['fraction']:.0%} | no ETA shown | | | | | |")
            continue
        print(f"| {a['fraction']:.0%} ({a['tokens_done']:,}) | {a['elapsed_s']} | {a['eta_s']} | {a['left_to_shards_end_s']} | "
              f"{a['error_vs_shards']:+.1%} | {a['left_to_apply_end_s']} | {a['error_vs_apply']:+.1%} |")


if __name__ == "__main__":
    main()
