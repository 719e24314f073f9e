"""One-document syncs per source kind (issue 34): what a sync reads when it finds changes from the source's
cursor, against a JSON Lines file that is read whole, at two corpus sizes.

    PYTHONPATH=src .venv/bin/python bench/cursors.py --docs 10000 --dir build/cur10k \
        [--kinds folder,s3,parquet,changelog,postgres,postgres-tombstone,jsonl,folder-verify] [--log FILE] [--reuse]

The corpus: ``--docs`` documents, each a ~1.5 KB slice of the bundled sample PEPs with its own id
(``d000123``), written once in every form: a folder of ``.txt`` files, a JSON Lines file, a change log of
upserts, a Parquet file with an integer ``updated_at`` (row groups of 1,000, in ``updated_at`` order), a
PostgreSQL table on a private server (when ``initdb``/``pg_ctl`` are installed) and an S3 prefix on a loopback
moto server. The index (hash embedder, ``recursive:size=250``, edge store) is built once from the folder.

Then, for each kind: the config's source becomes that kind and one ``reindex sync`` records its cursor (a
full read: the population already holds these documents); one document gets a sentence appended in every
form at once (the files stay equal, so the next kind starts in step); then ``reindex plan --json`` and
``reindex apply PLAN --no-progress`` run as child processes; then another document is edited and one
``reindex sync --json`` (plan and apply in one process, as a schedule runs it) is measured too. Each line of the log: wall and CPU seconds
(user + sys of the child) of the plan, the apply and the sync, the bytes of source each read, counted in the
child through the same seams the tests wrap (a folder source's ``_read``, the JSONL file's lines, every byte read
from the change log's file, the Parquet column chunks read (compressed, as on disk), PostgreSQL's text and id
values, S3 object bodies) — content and id listings, not metadata listings — and apart, the bytes of state (the
books, in the ``state`` folder) read through the object store (``state_bytes``; the vector store's own files are
the engine's, not counted). ``folder-verify``: the folder with
``reindex plan --verify`` (every file read and hashed, as every folder sync did before cursors).
``--reuse``: measure more kinds on the index a finished run left in ``--dir``.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "src" / "reindex" / "sample" / "corpus"
KINDS = ("folder", "s3", "parquet", "changelog", "postgres", "postgres-tombstone", "jsonl")
CONFIG = """index: bench
source: {source}
text: {{chunker: {{kind: recursive, size: 250}}}}
vector: {{provider: hash}}
state: {{uri: ./state}}
approval: {{pipeline_scoped: false, max_tokens: null, max_usd: null, max_removed_share: 1.0}}
cutover: {{probes: 10, min_recall_delta: -1.0, min_overlap: 0.0}}
"""


def texts(n: int) -> list[str]:
    base = [p.read_text(encoding="utf-8") for p in sorted(SAMPLE.glob("*.rst"))]
    out = []
    for i in range(n):
        t = base[i % len(base)]
        start = (i * 97) % max(1, len(t) - 1600)
        out.append(f"Document {i}.\n\n" + t[start: start + 1500])
    return out


# -- the sources --------------------------------------------------------------------------------------


class Corpus:
    """Every form of the same documents under ``work``."""

    def __init__(self, work: Path, docs: list[str], s3: str | None, pg: str | None) -> None:
        self.work, self.docs, self.s3, self.pg = work, docs, s3, pg
        self.ids = [f"d{i:06d}" for i in range(len(docs))]
        self.stamp = list(range(1, len(docs) + 1))

    @classmethod
    def reload(cls, work: Path, s3: str | None, pg: str | None) -> "Corpus":
        """The corpus a finished run left in ``work`` (texts from the folder, ``updated_at`` from the Parquet file)."""
        import pyarrow.parquet as pq

        files = sorted((work / "corpus").glob("*.txt"))
        corpus = cls(work, [f.read_text(encoding="utf-8") for f in files], s3, pg)
        table = pq.read_table(work / "corpus.parquet", columns=["id", "updated_at"]).to_pydict()
        stamp = dict(zip(table["id"], table["updated_at"]))
        corpus.stamp = [stamp[f"{i}.txt"] for i in corpus.ids]
        return corpus

    def write_all(self) -> None:
        folder = self.work / "corpus"
        folder.mkdir(parents=True, exist_ok=True)
        for i, t in zip(self.ids, self.docs):
            (folder / f"{i}.txt").write_text(t, encoding="utf-8")
        self._jsonl()
        with (self.work / "changes.jsonl").open("w", encoding="utf-8") as f:
            for i, t in zip(self.ids, self.docs):
                f.write(json.dumps({"op": "upsert", "doc_id": f"{i}.txt", "text": t}) + "\n")
        self._parquet()
        if self.pg:
            self.write_pg()
        if self.s3:
            self._s3_put(range(len(self.docs)))

    def write_pg(self) -> None:
        import psycopg

        with psycopg.connect(self.pg, autocommit=True) as c:
            c.execute("DROP TABLE IF EXISTS docs")
            c.execute("CREATE TABLE docs (id text PRIMARY KEY, text text, updated_at bigint NOT NULL, "
                      "deleted boolean NOT NULL DEFAULT false)")
            c.execute("CREATE INDEX ON docs (updated_at)")
            with c.cursor().copy("COPY docs (id, text, updated_at) FROM STDIN") as cp:
                for i, t, s in zip(self.ids, self.docs, self.stamp):
                    cp.write_row((f"{i}.txt", t, s))

    def _jsonl(self) -> None:
        with (self.work / "corpus.jsonl").open("w", encoding="utf-8") as f:
            for i, t in zip(self.ids, self.docs):
                f.write(json.dumps({"id": f"{i}.txt", "text": t}) + "\n")

    def _parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        order = sorted(range(len(self.docs)), key=lambda k: self.stamp[k])
        table = pa.table({"id": [f"{self.ids[k]}.txt" for k in order], "text": [self.docs[k] for k in order],
                          "updated_at": [self.stamp[k] for k in order]})
        pq.write_table(table, self.work / "corpus.parquet", row_group_size=1000)

    def _s3_put(self, which) -> None:
        import boto3

        client = boto3.client("s3", endpoint_url=self.s3)
        for k in which:
            client.put_object(Bucket="bench", Key=f"corpus/{self.ids[k]}.txt", Body=self.docs[k].encode())

    def edit(self, k: int) -> None:
        """Append a sentence to document ``k`` in every form."""
        self.docs[k] += f"\nEdited at {time.time():.6f}.\n"
        self.stamp[k] = max(self.stamp) + 1
        (self.work / "corpus" / f"{self.ids[k]}.txt").write_text(self.docs[k], encoding="utf-8")
        self._jsonl()
        with (self.work / "changes.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps({"op": "upsert", "doc_id": f"{self.ids[k]}.txt", "text": self.docs[k]}) + "\n")
        self._parquet()
        if self.pg:
            import psycopg

            with psycopg.connect(self.pg, autocommit=True) as c:
                c.execute("UPDATE docs SET text = %s, updated_at = %s WHERE id = %s",
                          (self.docs[k], self.stamp[k], f"{self.ids[k]}.txt"))
        if self.s3:
            self._s3_put([k])

    def source(self, kind: str) -> dict:
        w = self.work
        return {"folder": {"uri": str(w / "corpus")},
                "jsonl": {"uri": str(w / "corpus.jsonl")},
                "changelog": {"kind": "changelog", "uri": str(w / "changes.jsonl")},
                "parquet": {"uri": str(w / "corpus.parquet"), "cursor": "updated_at"},
                "postgres": {"uri": f"{self.pg}&table=docs" if self.pg else "", "cursor": "updated_at"},
                "postgres-tombstone": {"uri": f"{self.pg}&table=docs" if self.pg else "", "cursor": "updated_at",
                                       "deleted_field": "deleted"},
                "s3": {"uri": "s3://bench/corpus", "endpoint_url": self.s3}}[kind]


def start_postgres() -> tuple[str, callable] | None:
    bins = [shutil.which("initdb"), shutil.which("pg_ctl")]
    if not all(bins):
        return None
    folder = Path(tempfile.mkdtemp(prefix="rxbpg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*run_as, bins[0], "-D", str(folder / "data"), "-U", "postgres", "--auth=trust"], check=True,
                   capture_output=True)
    subprocess.run([*run_as, bins[1], "-D", str(folder / "data"), "-o",
                    f"-k {folder} -p {port} -c listen_addresses=127.0.0.1", "-w", "-l", str(folder / "log"), "start"],
                   check=True, capture_output=True)

    def stop() -> None:
        subprocess.run([*run_as, bins[1], "-D", str(folder / "data"), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)

    return f"postgresql://127.0.0.1:{port}/postgres?user=postgres", stop


# -- child processes -----------------------------------------------------------------------------------


def child(counts_file: str, corpus_dir: str, argv: list[str]) -> None:
    """Run ``reindex ARGV`` in this process, counting the bytes of source read through the sources' seams."""
    from reindex.adapters.sources.jsonl import JsonlSource
    from reindex.foundation.tables import ParquetReader

    try:
        from reindex.adapters.sources.changelog import ChangelogSource
    except ImportError:  # a tree before cursors (--src of a same-run baseline)
        ChangelogSource = type("NoChangelog", (), {"_lines": None, "_document": None})

    read = {"bytes": 0}
    folder = Path(corpus_dir)

    from reindex.adapters.sources.directory import DirectorySource

    real_read = DirectorySource._read

    def read_file(self, path: Path) -> bytes:
        data = real_read(self, path)
        if path.is_relative_to(folder):
            read["bytes"] += len(data)
        return data

    DirectorySource._read = read_file  # type: ignore[method-assign]

    class Counting:
        def __init__(self, f) -> None:
            self.f = f

        def __iter__(self):
            for line in self.f:
                read["bytes"] += len(line)
                yield line

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

    real_open = JsonlSource._open
    JsonlSource._open = lambda self: Counting(real_open(self))  # type: ignore[method-assign]

    class CountingFile:
        """The change log's file, every byte read from it counted (lines, its end, the tail digests)."""

        def __init__(self, f) -> None:
            self.f = f

        def read(self, *a):
            data = self.f.read(*a)
            read["bytes"] += len(data)
            return data

        def readline(self, *a):
            data = self.f.readline(*a)
            read["bytes"] += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.f.close()

    real_log_open = getattr(ChangelogSource, "_open", None)
    if real_log_open is not None:
        ChangelogSource._open = lambda self: CountingFile(real_log_open(self))  # type: ignore[method-assign]

    real_group = getattr(ParquetReader, "read_group", None)

    def read_group(self, group, columns):
        read["bytes"] += self.chunk_bytes(group, columns)
        return real_group(self, group, columns)

    ParquetReader.read_group = read_group  # type: ignore[method-assign]
    real_batches = ParquetReader.batches

    def batches(self, columns, batch_rows):
        read["bytes"] += sum(self.chunk_bytes(g, columns) for g in range(self.row_groups))
        yield from real_batches(self, columns, batch_rows)

    ParquetReader.batches = batches  # type: ignore[method-assign]

    try:
        from reindex.adapters.sources.postgres import PostgresSource

        real_rows = PostgresSource._rows

        def rows(self, conn, query, params=None):
            for row in real_rows(self, conn, query, params):
                read["bytes"] += sum(len(v) for v in row if isinstance(v, (str, bytes)))
                yield row

        PostgresSource._rows = rows  # type: ignore[method-assign]
    except ImportError:
        pass
    from reindex.adapters.stores.objects import S3ObjectStore

    real_get = S3ObjectStore._get_object

    def get_object(self, key):
        got = real_get(self, key)
        if got is not None:
            read["bytes"] += len(got[0])
        return got

    S3ObjectStore._get_object = get_object  # type: ignore[method-assign]
    # The state (the books: a folder here): every byte read through the object store, apart from the source's.
    from reindex.adapters.stores.objects import LocalObjectStore

    state_root = (Path.cwd() / "state").resolve()
    read["state_bytes"] = 0
    for name in ("get", "get_signed", "get_versioned", "get_versioned_aged"):
        real = getattr(LocalObjectStore, name, None)
        if real is None:
            continue

        def counted(self, key, _real=real):
            got = _real(self, key)
            if got is not None and Path(self.root).resolve() == state_root:
                read["state_bytes"] += len(got if isinstance(got, bytes) else got[0])
            return got

        setattr(LocalObjectStore, name, counted)
    atexit.register(lambda: Path(counts_file).write_text(json.dumps(read)))
    from reindex.cli import main as cli

    sys.argv = ["reindex", *argv]
    cli()


def run(work: Path, corpus_dir: Path, *argv: str, ok: tuple[int, ...] = (0,)) -> tuple[str, dict]:
    counts = work / "counts.json"
    counts.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--child", str(counts), str(corpus_dir), *argv], cwd=work,
                       capture_output=True, text=True, env={**os.environ, "REINDEX_SHARD_WORKERS": "1"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in ok:
        raise SystemExit(f"reindex {' '.join(argv)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    got = json.loads(counts.read_text()) if counts.exists() else {"bytes": None}
    return p.stdout, {"wall_s": round(wall, 2),
                      "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2),
                      "source_bytes": got["bytes"], "state_bytes": got.get("state_bytes")}


# -- the bench -----------------------------------------------------------------------------------------


def configure(work: Path, source: dict) -> None:
    (work / "reindex.yaml").write_text(CONFIG.format(source=json.dumps(source)), encoding="utf-8")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, required=True)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--log", type=Path, default=None)
    ap.add_argument("--reuse", action="store_true",
                    help="Keep the corpus and index a finished run left in --dir (the PostgreSQL table is loaded again) "
                         "and measure --kinds on it.")
    args = ap.parse_args()
    work = args.dir.resolve()
    if work.exists() and not args.reuse:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    log = args.log or work / "log.jsonl"
    kinds = [k for k in args.kinds.split(",") if k]
    wants_pg = [k for k in kinds if k.startswith("postgres")]
    pg = start_postgres() if wants_pg else None
    if wants_pg and pg is None:
        print("PostgreSQL binaries not found: postgres skipped", file=sys.stderr)
        kinds = [k for k in kinds if not k.startswith("postgres")]
    s3 = None
    if "s3" in kinds:
        import logging

        from moto.server import ThreadedMotoServer
        import boto3

        logging.getLogger("werkzeug").setLevel(logging.ERROR)

        for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                            ("AWS_DEFAULT_REGION", "us-east-1")):
            os.environ[name] = value
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        s3 = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=s3).create_bucket(Bucket="bench")
    try:
        t0 = time.perf_counter()
        folder = work / "corpus"
        from reindex.books.manifests import count_chunk_manifest_rows, read_live
        from reindex.adapters.stores.objects import LocalObjectStore

        if args.reuse:
            corpus = Corpus.reload(work, s3, pg[0] if pg else None)
            if pg:
                corpus.write_pg()
            if s3:
                corpus._s3_put(range(len(corpus.docs)))
            print(f"corpus of {len(corpus.docs):,} documents reloaded in {time.perf_counter() - t0:.1f} s", flush=True)
        else:
            corpus = Corpus(work, texts(args.docs), s3, pg[0] if pg else None)
            corpus.write_all()
            print(f"corpus of {args.docs:,} documents written in {time.perf_counter() - t0:.1f} s", flush=True)
            configure(work, corpus.source("folder"))
            out, plan_fig = run(work, folder, "plan", "--json", ok=(2,))
            plan_file = json.loads(out)["plan_file"]
            _, apply_fig = run(work, folder, "apply", plan_file, "--no-progress")
            run(work, folder, "cutover", plan_file)
            print(f"built: plan {plan_fig}, apply {apply_fig}", flush=True)
        state = LocalObjectStore(work / "state")
        points = count_chunk_manifest_rows(state, "bench", read_live(state, "bench").collection)
        print(f"{points:,} points", flush=True)
        offset = 50 if args.reuse else 0  # other documents than a first run edited
        for n, kind in enumerate(kinds):
            base, verify = kind.removesuffix("-verify"), kind.endswith("-verify")  # folder-verify: plan --verify
            configure(work, corpus.source(base))
            out, first = run(work, folder, "sync", "--json", "--plans", "plans", ok=(0,))
            corpus.edit(offset + n * 7 + 3)
            out, p = run(work, folder, "plan", "--json", *(["--verify"] if verify else []), ok=(2,))
            summary = json.loads(out)
            plan_file = summary["plan_file"]
            body = json.loads((work / plan_file).read_text())
            _, a = run(work, folder, "apply", plan_file, "--no-progress")
            read = body["inputs"]["corpus"]["read"]
            # The same change as users schedule it: one `reindex sync` (plan and apply in one process).
            corpus.edit(offset + n * 7 + 5)
            out, sy = run(work, folder, "sync", "--json", "--plans", "plans", *(["--verify"] if verify else []), ok=(0,))
            assert json.loads(out)["outcome"] == "applied-in-place", out
            rec = {"docs": args.docs, "points": points, "kind": kind, "plan": p, "apply": a, "sync": sy,
                   "total_wall_s": round(p["wall_s"] + a["wall_s"], 2), "total_cpu_s": round(p["cpu_s"] + a["cpu_s"], 2),
                   "source_bytes": (p["source_bytes"] or 0) + (a["source_bytes"] or 0),
                   "read_mode": read["mode"], "how": read.get("how") or read.get("why"),
                   "first_sync": first, "load": os.getloadavg()[0], "at": time.time()}
            with log.open("a") as f:
                f.write(json.dumps(rec) + "\n")
            print(json.dumps({k: rec[k] for k in ("kind", "total_wall_s", "total_cpu_s", "source_bytes", "read_mode")}
                             | {"plan": p, "apply": a, "sync": sy, "load": rec["load"]}), flush=True)
    finally:
        if pg:
            pg[1]()


if __name__ == "__main__":
    main()
