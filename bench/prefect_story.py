"""The whole scheduled story on a real Prefect server, timed: `prefect server start`, a process worker,
`prefect deploy --all` of flows/prefect.yaml, then two `reindex-reindex` runs on the PEP snapshots, each
paused for approval and resumed with `reindex approve`:

1. snapshot_old.parquet, initial build → cutover creates the alias;
2. snapshot_new.parquet with a smaller chunk size (pipeline-scoped/text: a new population built beside
   the live one, reusing identical chunks) → cutover on the shared queries file → alias swapped → gc
   scheduled.

Embedder: the deterministic hash embedder (``vector.provider: hash``): the timings are orchestration,
chunking and the embedded store, not a model. Cutover gates are lenient (min_overlap 0, min_recall_delta
-1): hash vectors carry no meaning, so a retrieval gate would say nothing.

    PYTHONPATH=src .venv/bin/python bench/prefect_story.py
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("REINDEX_BENCH_CORPUS", "/work/shared/corpus"))
PREFECT = Path(sys.executable).with_name("prefect")

CONFIG = """\
index: pep
source: ./corpus.parquet
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash}}
apply: {{shards: 16}}
cutover: {{min_recall_delta: -1.0, min_overlap: 0.0}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def main() -> None:
    import httpx

    root = Path(tempfile.mkdtemp(prefix="reindex-story-"))
    home, ws = root / "prefect-home", root / "ws"
    home.mkdir()
    env = {**os.environ, "PREFECT_HOME": str(home), "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "HF_HUB_OFFLINE": "1", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PREFECT_API_URL", None)
    url = f"http://127.0.0.1:{_port()}/api"
    times: list[tuple[str, float]] = []
    t_all = time.monotonic()
    procs = []
    try:
        t = time.monotonic()
        procs.append(subprocess.Popen([str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port",
                                       url.split(":")[2].split("/")[0]], env=env, stdout=open(home / "server.log", "wb"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        times.append(("prefect server start → healthy", time.monotonic() - t))
        env["PREFECT_API_URL"] = url
        os.environ["PREFECT_API_URL"] = url
        procs.append(subprocess.Popen([str(PREFECT), "worker", "start", "--pool", "reindex", "--type", "process"],
                                      env={**env, "PREFECT_WORKER_QUERY_SECONDS": "2", "PREFECT_LOGGING_LEVEL": "INFO"},
                                      cwd=home, stdout=open(home / "worker.log", "wb"), stderr=subprocess.STDOUT,
                                      start_new_session=True))
        ws.mkdir()
        shutil.copytree(REPO / "flows", ws / "flows", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(CORPUS / "snapshot_old.parquet", ws / "corpus.parquet")
        shutil.copy(CORPUS / "queries.jsonl", ws / "queries.jsonl")
        (ws / "reindex.yaml").write_text(CONFIG.format(size=256), encoding="utf-8")
        # flows/prefect.yaml is written for index `docs`; the story's index is `pep`.
        y = (ws / "flows" / "prefect.yaml")
        y.write_text(y.read_text(encoding="utf-8").replace("index: docs", "index: pep").replace("- name: docs", "- name: pep")
                     .replace('"index:docs"', '"index:pep"'), encoding="utf-8")
        t = time.monotonic()
        r = subprocess.run([str(PREFECT), "--no-prompt", "deploy", "--all", "--prefect-file", "flows/prefect.yaml"],
                           cwd=ws, env={**env, "REINDEX_WORKDIR": str(ws)}, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(r.stdout[-2000:] + r.stderr[-2000:])
        times.append(("prefect deploy --all (flows/prefect.yaml)", time.monotonic() - t))

        from prefect.client.orchestration import get_client
        from prefect.deployments import run_deployment

        def one_run(label: str, params: dict) -> dict:
            t0 = time.monotonic()
            fr = run_deployment("reindex-reindex/pep", parameters={"poll_interval_s": 2, **params}, timeout=0)
            with get_client(sync_client=True) as c:
                while not (s := c.read_flow_run(fr.id).state).is_paused():
                    if s.is_final():
                        raise SystemExit(f"{label}: run ended before pausing: {s}")
                    time.sleep(1)
            times.append((f"{label}: trigger → paused for approval (worker start, plan, publish)", time.monotonic() - t0))
            plans = sorted((ws / "plans").glob("*.json"), key=lambda p: p.stat().st_mtime)
            plan = [p for p in plans if p.name.count(".") == 1][-1]
            t1 = time.monotonic()
            a = subprocess.run([sys.executable, "-m", "reindex", "approve", str(plan), "--by", "bench"], env=env,
                               capture_output=True, text=True)
            if a.returncode or "resumed flow run" not in a.stdout:
                raise SystemExit(a.stdout + a.stderr)
            times.append((f"{label}: `reindex approve` (records, finds and resumes the run)", time.monotonic() - t1))
            t2 = time.monotonic()
            with get_client(sync_client=True) as c:
                while not (s := c.read_flow_run(fr.id).state).is_final():
                    time.sleep(1)
                if not s.is_completed():
                    raise SystemExit(f"{label}: {s}")
                from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

                kids = [k for k in c.read_flow_runs(flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[fr.id])))
                    if c.read_flow(k.flow_id).name == "reindex-apply"]
            times.append((f"{label}: approve → run Completed (apply, cutover, swap, gc scheduled)", time.monotonic() - t2))
            if kids:
                k = kids[-1]
                times.append((f"{label}:   of which the reindex-apply child flow run", (k.end_time - k.start_time).total_seconds()))
            body = json.loads(plan.read_text())
            cut = plan.with_name(plan.stem + ".cutover.json")
            return {"label": label, "kind": body["kind"], "chunks_new": body["work"]["chunks_new"],
                    "reused": body["work"]["chunks_reused"], "embedded": body["work"]["chunks_to_embed"],
                    "swap": json.loads(cut.read_text())["swap"] if cut.is_file() else None,
                    "total_s": time.monotonic() - t0}

        runs = [one_run("old snapshot", {})]
        shutil.copy(CORPUS / "snapshot_new.parquet", ws / "corpus.parquet")
        (ws / "reindex.yaml").write_text(CONFIG.format(size=200), encoding="utf-8")
        runs.append(one_run("new snapshot + chunk 200", {"queries": "queries.jsonl"}))
        total = time.monotonic() - t_all
    finally:
        for p in reversed(procs):
            _stop(p)
    print("| step | wall s |\n|---|---:|")
    for name, s in times:
        print(f"| {name} | {s:.1f} |")
    print(f"| **whole story: server start → second swap** | **{total:.1f}** |")
    for r in runs:
        print(f"\n{r['label']}: {r['kind']}, {r['chunks_new']:,} chunks ({r['reused']:,} reused, {r['embedded']:,} embedded), "
              f"swap {json.dumps(r['swap'])[:160]}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
