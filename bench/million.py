"""A million points on one box (issue 24): the real pipeline at scale, hash embedder, edge store.

    PYTHONPATH=src nice -n 5 .venv/bin/python bench/million.py --points 1000000 --dir build/million \
        [--phases build,sync,shadow] [--log build/million/log.jsonl] [--resume]

The corpus is the shared PEP snapshot (``../shared/corpus/snapshot_new.parquet``, 703 PEPs, ~18,000 points
at ``recursive:size=250``) replicated to ``--points``: document ``i`` is PEP ``i % 703`` of copy
``i // 703``, with its own id (``<doc_id>~cNN``). Copy 0 is verbatim; in every other copy 3 % of the
space-separated words (seeded per copy and document) are replaced by another word of the same document, so
a copy reads like a lightly edited variant, almost every chunk of it differs from every other copy's
(P(a 250-token chunk untouched) = 0.97^250 ~ 5e-4), and nothing is a byte-identical duplicate that the
hash embedder would map to the same vector. The hash embedder gives each distinct text an unrelated
random unit vector: the hardest case for HNSW (bench/build_params.py), so build costs here are an upper
bound for embedding-like vectors.

Phases (each a ``reindex`` child process, ``REINDEX_SHARD_WORKERS=1``; each phase's figures are appended
to the log as one JSON line when it finishes, so a partial run leaves its results):

- build: ``plan`` → ``apply`` → ``cutover`` of the whole corpus: wall, CPU (user + sys of the child),
  peak RSS of the child (sampled every 0.5 s from /proc: total, RssAnon, RssFile), bytes written
  (``ru_oublock``), store disk (allocated blocks, hard links once).
- sync: one document's text gets a sentence appended; the document-scoped ``plan`` and its ``apply`` (as
  bench/store_writes.py measures them), disk before → after.
- shadow: the chunker changes (``recursive`` 250 → 200): ``plan`` (its footprint prediction recorded),
  ``apply`` (a shadow population), ``cutover``.

From the first cutover on, a reader process (``api.Querier(config)``, held reader) queries in a loop (a
top-10 query and a top-10 filtered by one ``doc_id``, then a 0.1 s pause) and logs each latency with a
timestamp and its RSS; each phase's line gives the reader's p50/p95 over that phase's window. ``--resume``
continues a run cut short (a step already logged is skipped; an interrupted apply resumes on its plan).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT.parent / "shared" / "corpus" / "snapshot_new.parquet"
CONFIG = """index: pep
source: ./corpus.jsonl
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash}}
state: {{uri: ./state}}
store: {{path: ./store{quant}}}
approval: {{pipeline_scoped: false, max_tokens: null, max_usd: null, max_removed_share: 1.0}}
cutover: {{probes: 20, min_recall_delta: -1.0, min_overlap: 0.0}}
"""
POINTS_PER_DOC = 18_003 / 703
SWAP = 0.03


def _log(path: Path, record: dict) -> None:
    record = {"at": time.time(), "utc": time.strftime("%H:%M:%S", time.gmtime()), **record}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)


def _perturb(text: str, copy: int, base: int) -> str:
    if copy == 0:
        return text
    words = text.split(" ")
    rng = np.random.default_rng(copy * 1_000_003 + base)
    n = len(words)
    k = max(1, int(n * SWAP))
    at = rng.integers(0, n, k)
    src = rng.integers(0, n, k)
    for a, s in zip(at.tolist(), src.tolist()):
        words[a] = words[s] if words[s] != words[a] else words[a] + "s"
    return " ".join(words)


def write_corpus(work: Path, docs: int, edit: str | None = None) -> list[str]:
    """The replicated corpus as JSONL; ``edit``: the id of a document whose text gets a sentence appended
    (kept in ``edited.txt``, so that each later sync phase keeps the earlier ones' edits: one change each)."""
    edited_file = work / "edited.txt"
    edits = set(edited_file.read_text().split()) if edited_file.exists() else set()
    if edit is not None and edit not in edits:
        edits.add(edit)
        edited_file.write_text("\n".join(sorted(edits)) + "\n")
    import pyarrow.parquet as pq

    rows = pq.read_table(SNAPSHOT, columns=["doc_id", "text"]).to_pylist()
    ids = []
    tmp = work / "corpus.jsonl.tmp"
    with tmp.open("w", encoding="utf-8") as f:
        for i in range(docs):
            copy, base = divmod(i, len(rows))
            doc_id = rows[base]["doc_id"] + (f"~c{copy:02d}" if copy else "")
            text = _perturb(rows[base]["text"], copy, base)
            if doc_id in edits:
                text += "\n\nAn edit at the end of one document, to be synced in place.\n"
            f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
            ids.append(doc_id)
    tmp.replace(work / "corpus.jsonl")
    return ids


def allocated(folder: Path) -> int:
    """Bytes allocated on disk under ``folder``, each hard-linked file once."""
    seen, total = set(), 0
    for dirpath, _, files in os.walk(folder):
        for f in files:
            try:
                st = os.lstat(os.path.join(dirpath, f))
            except FileNotFoundError:
                continue
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


class Sampler:
    """Peak RSS (total, anonymous, file-backed) of a process tree, every 0.5 s."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            tot = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
            for p in _tree(self.pid):
                for k, v in _status(p).items():
                    if k in tot:
                        tot[k] += v
            for k in tot:
                self.peak[k] = max(self.peak[k], tot[k])

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"rss_peak_mb": self.peak["VmRSS"] / 2**20, "anon_peak_mb": self.peak["RssAnon"] / 2**20,
                "file_peak_mb": self.peak["RssFile"] / 2**20}


SRC = ROOT / "src"  # the reindex the ``reindex`` children run (``--src``: another tree, for a same-run baseline)


def reindex(work: Path, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[str, dict]:
    """One ``reindex`` child: its stdout and figures (wall, CPU, peak RSS, bytes written)."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "REINDEX_SHARD_WORKERS": "1"}
    env.pop("PREFECT_API_URL", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with (work / "child.err").open("w") as err:
        p = subprocess.Popen([sys.executable, "-m", "reindex", *args, "-c", str(work / "reindex.yaml")], cwd=work,
                             env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        sampler = Sampler(p.pid)
        out, _ = p.communicate()
        mem = sampler.stop()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        raise SystemExit(f"reindex {' '.join(args)} exited {p.returncode}:\n"
                         f"{(work / 'child.err').read_text()[-3000:]}")
    return out, {"wall_s": round(wall, 2),
                 "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2),
                 "written_mb": round((after.ru_oublock - before.ru_oublock) * 512 / 1e6, 2),
                 **{k: round(v, 1) for k, v in mem.items()}}


def plan(work: Path) -> tuple[str, dict, dict]:
    out, fig = reindex(work, "plan", "--json", ok=(0, 2))
    body = json.loads(out[out.index("{"):])
    doc = json.loads((work / body["plan_file"]).read_text(encoding="utf-8"))
    return body["plan_file"], doc.get("body", doc), fig


def _plan_facts(doc: dict) -> dict:
    cost = doc.get("cost", {})
    fp = cost.get("footprint", {})
    return {"kind": doc.get("kind"), "vectors_new": cost.get("vectors_new"),
            "vectors_embedded": cost.get("vectors_embedded"),
            "footprint_peak_ram_mb": round(fp.get("peak", {}).get("ram_bytes", 0) / 2**20, 1),
            "footprint_peak_disk_mb": round(fp.get("peak", {}).get("disk_bytes", 0) / 2**20, 1),
            "footprint_new_ram_mb": round(fp.get("new", {}).get("ram_bytes", 0) / 2**20, 1)}


# the reader process ---------------------------------------------------------------------------------


def reader_main(work: Path, ids_file: Path, log: Path) -> None:
    from reindex import api

    ids = ids_file.read_text().split()
    rng = np.random.default_rng(7)
    querier = api.Querier(work / "reindex.yaml")
    stop = work / "reader.stop"
    i = 0
    with log.open("a", encoding="utf-8") as f:
        while not stop.exists():
            text = f"query {i}: how does the interpreter handle {rng.integers(1 << 30)}"
            doc = ids[int(rng.integers(len(ids)))]
            t0 = time.perf_counter()
            top = querier.query(text, k=10)
            t1 = time.perf_counter()
            filt = querier.query(text, k=10, filters={"doc_id": doc})
            t2 = time.perf_counter()
            st = _status(os.getpid())
            f.write(json.dumps({"t": time.time(), "top_ms": (t1 - t0) * 1000, "filt_ms": (t2 - t1) * 1000,
                                "n": len(top.results), "nf": len(filt.results),
                                "rss_mb": st.get("VmRSS", 0) / 2**20, "anon_mb": st.get("RssAnon", 0) / 2**20})
                    + "\n")
            f.flush()
            i += 1
            time.sleep(0.1)
    querier.close()


def start_reader(work: Path, ids: list[str], log: Path) -> subprocess.Popen:
    (work / "reader.stop").unlink(missing_ok=True)
    (work / "ids.txt").write_text("\n".join(ids))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    return subprocess.Popen([sys.executable, __file__, "--reader", str(work), str(work / "ids.txt"), str(log)],
                            env=env, stderr=(work / "reader.err").open("w"))


def stop_reader(work: Path, proc: subprocess.Popen) -> None:
    (work / "reader.stop").touch()
    proc.wait(timeout=120)


def reader_window(reader_log: Path, t0: float, t1: float) -> dict:
    if not reader_log.exists():
        return {}
    rows = [json.loads(line) for line in reader_log.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if t0 <= r["t"] <= t1]
    if not rows:
        return {}
    p = lambda xs, q: round(float(np.percentile(xs, q)), 2)  # noqa: E731
    top = [r["top_ms"] for r in rows]
    filt = [r["filt_ms"] for r in rows]
    return {"reader_queries": len(rows), "top10_p50_ms": p(top, 50), "top10_p95_ms": p(top, 95),
            "filtered_p50_ms": p(filt, 50), "filtered_p95_ms": p(filt, 95),
            "reader_rss_max_mb": round(max(r["rss_mb"] for r in rows), 1),
            "reader_anon_max_mb": round(max(r["anon_mb"] for r in rows), 1),
            "short_answers": sum(1 for r in rows if r["n"] < 10)}


# phases ---------------------------------------------------------------------------------------------


def summary(logs: list[Path]) -> None:
    """One Markdown table of the phases of each log (a column per log)."""
    runs = [{r["phase"]: r for r in map(json.loads, p.read_text().splitlines()) if r.get("phase")} for p in logs]
    rows = [("build.plan", "wall_s"), ("build.plan", "cpu_s"), ("build.plan", "vectors_new"),
            ("build.plan", "footprint_peak_ram_mb"), ("build.plan", "footprint_peak_disk_mb"),
            ("build.apply", "wall_s"), ("build.apply", "cpu_s"), ("build.apply", "rss_peak_mb"),
            ("build.apply", "anon_peak_mb"), ("build.apply", "file_peak_mb"), ("build.apply", "written_mb"),
            ("build.apply", "disk_mb"), ("build.cutover", "wall_s"),
            ("reader.idle", "top10_p50_ms"), ("reader.idle", "top10_p95_ms"), ("reader.idle", "filtered_p50_ms"),
            ("reader.idle", "reader_rss_max_mb"), ("reader.idle", "reader_anon_max_mb"),
            ("sync.plan", "wall_s"), ("sync.plan", "cpu_s"), ("sync.apply", "wall_s"), ("sync.apply", "cpu_s"),
            ("sync.apply", "written_mb"), ("sync.apply", "disk_before_mb"), ("sync.apply", "disk_after_mb"),
            ("sync.apply", "top10_p50_ms"), ("sync.apply", "top10_p95_ms"),
            ("shadow.plan", "cpu_s"), ("shadow.plan", "vectors_new"), ("shadow.plan", "vectors_embedded"),
            ("shadow.plan", "footprint_peak_ram_mb"), ("shadow.plan", "footprint_peak_disk_mb"),
            ("shadow.apply", "wall_s"), ("shadow.apply", "cpu_s"), ("shadow.apply", "rss_peak_mb"),
            ("shadow.apply", "anon_peak_mb"), ("shadow.apply", "file_peak_mb"), ("shadow.apply", "disk_mb"),
            ("shadow.apply", "top10_p50_ms"), ("shadow.apply", "top10_p95_ms"), ("shadow.apply", "filtered_p50_ms"),
            ("shadow.cutover", "wall_s"), ("shadow.cutover", "top10_p50_ms"), ("shadow.cutover", "top10_p95_ms"),
            ("reader.all", "reader_queries"), ("reader.all", "top10_p50_ms"), ("reader.all", "top10_p95_ms"),
            ("reader.all", "filtered_p50_ms"), ("reader.all", "reader_rss_max_mb"),
            ("reader.all", "reader_anon_max_mb"), ("reader.all", "short_answers")]
    print("| phase | figure | " + " | ".join(str(p.parent.name) for p in logs) + " |")
    print("| --- | --- |" + " ---: |" * len(logs))
    for phase, key in rows:
        vals = [r.get(phase, {}).get(key) for r in runs]
        if any(v is not None for v in vals):
            print(f"| {phase} | {key} | " + " | ".join("—" if v is None else f"{v:,}" for v in vals) + " |")


def configure(work: Path, size: int, quant: bool = False) -> None:
    (work / "reindex.yaml").write_text(CONFIG.format(size=size, quant=", quantization: int8" if quant else ""),
                                       encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=ROOT / "build" / "million")
    ap.add_argument("--phases", default="build,sync,shadow")
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--int8", action="store_true", help="store.quantization: int8 from the start")
    ap.add_argument("--resume", action="store_true", help="continue the run logged in --dir (see main)")
    ap.add_argument("--sync-doc", type=int, default=None,
                    help="index of the document the sync phase edits (default: the middle one); another index "
                         "repeats the sync phase on a built index (with --phases sync and a new --log)")
    ap.add_argument("--src", type=Path, default=None,
                    help="run the reindex commands from this source tree (e.g. an older commit's src/)")
    ap.add_argument("--summary", nargs="+", type=Path, help="print a table of these logs and exit")
    ap.add_argument("--reader", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.summary:
        summary(args.summary)
        return
    if args.reader:
        reader_main(Path(args.reader[0]), Path(args.reader[1]), Path(args.reader[2]))
        return
    if args.src is not None:
        global SRC
        SRC = args.src.resolve()
    work = args.dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = args.log or work / "log.jsonl"
    rlog = work / "reader.jsonl"
    phases = args.phases.split(",")
    docs = max(1, round(args.points / POINTS_PER_DOC))
    load = lambda: os.getloadavg()[0]  # noqa: E731
    # --resume: a phase step already in the log is not run again; an apply cut short is run again on the
    # same plan, which resumes it (the shards already finished are skipped by reindex itself).
    done = {}
    if args.resume and log.exists():
        done = {r["phase"]: r for r in map(json.loads, log.read_text().splitlines()) if r.get("phase")}
    _log(log, {"phase": "start", "src": str(SRC), "docs": docs, "target_points": args.points, "load": load(), "resume": bool(done)})
    reader = None
    try:
        if "build" in phases and "build.cutover" not in done:
            configure(work, 250, args.int8)
            if "corpus" not in done:
                t = time.perf_counter()
                write_corpus(work, docs)
                _log(log, {"phase": "corpus", "docs": docs, "s": round(time.perf_counter() - t, 1),
                           "corpus_mb": round((work / "corpus.jsonl").stat().st_size / 1e6, 1)})
            if "build.plan" in done:
                plan_file = done["build.plan"]["plan_file"]
            else:
                plan_file, doc, fig = plan(work)
                _log(log, {"phase": "build.plan", "plan_file": plan_file, **fig, **_plan_facts(doc), "load": load()})
            if "build.apply" not in done:
                _, fig = reindex(work, "apply", plan_file, "--no-progress")
                _log(log, {"phase": "build.apply", **fig, "disk_mb": round(allocated(work / "store") / 1e6, 1),
                           "state_mb": round(allocated(work / "state") / 1e6, 1), "load": load()})
            _, fig = reindex(work, "cutover", plan_file)
            _log(log, {"phase": "build.cutover", **fig, "load": load()})
        ids = (work / "corpus.jsonl").read_text(encoding="utf-8")
        ids = [json.loads(line)["id"] for line in ids.splitlines()]
        reader = start_reader(work, ids, rlog)
        time.sleep(20)
        t = time.time()
        time.sleep(40)
        _log(log, {"phase": "reader.idle", **reader_window(rlog, t, time.time()), "load": load()})
        if "sync" in phases and "sync.apply" not in done:
            edited = ids[len(ids) // 2 if args.sync_doc is None else args.sync_doc]
            write_corpus(work, docs, edit=edited)
            t = time.time()
            plan_file, doc, fig = plan(work)
            _log(log, {"phase": "sync.plan", "plan_file": plan_file, **fig, **_plan_facts(doc),
                       **reader_window(rlog, t, time.time()), "load": load()})
            disk_before = allocated(work / "store")
            t = time.time()
            _, fig = reindex(work, "apply", plan_file, "--no-progress")
            run = json.loads((work / (plan_file.removesuffix(".json") + ".run.json")).read_text())
            _log(log, {"phase": "sync.apply", "edited": edited, **fig, "phases_s": run.get("phases"), "disk_before_mb": round(disk_before / 1e6, 1),
                       "disk_after_mb": round(allocated(work / "store") / 1e6, 1),
                       **reader_window(rlog, t, time.time()), "load": load()})
            if doc.get("kind") not in ("document-scoped", "document_scoped"):
                _, cfig = reindex(work, "cutover", plan_file)
                _log(log, {"phase": "sync.cutover", **cfig})
        if "shadow" in phases and "shadow.cutover" not in done:
            configure(work, 200, args.int8)
            if "shadow.plan" in done:
                plan_file = done["shadow.plan"]["plan_file"]
            else:
                t = time.time()
                plan_file, doc, fig = plan(work)
                _log(log, {"phase": "shadow.plan", "plan_file": plan_file, **fig, **_plan_facts(doc),
                           **reader_window(rlog, t, time.time()), "load": load()})
            if "shadow.apply" not in done:
                t = time.time()
                _, fig = reindex(work, "apply", plan_file, "--no-progress")
                _log(log, {"phase": "shadow.apply", **fig, "disk_mb": round(allocated(work / "store") / 1e6, 1),
                           **reader_window(rlog, t, time.time()), "load": load()})
            t = time.time()
            _, fig = reindex(work, "cutover", plan_file)
            _log(log, {"phase": "shadow.cutover", **fig, **reader_window(rlog, t, time.time()), "load": load()})
            t = time.time()
            time.sleep(30)
            _log(log, {"phase": "reader.after", **reader_window(rlog, t, time.time()), "load": load()})
    finally:
        if reader is not None:
            stop_reader(work, reader)
            _log(log, {"phase": "reader.all", **reader_window(rlog, 0, time.time())})


if __name__ == "__main__":
    main()
