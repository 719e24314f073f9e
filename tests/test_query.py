"""`reindex query`: the live alias as a reader sees it, from another process, also while apply and cutover run."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from helpers_index import REINDEX_BIN, Workspace, subprocess_env


def _query(ws: Workspace, *args: str) -> subprocess.CompletedProcess:
    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([str(REINDEX_BIN), "query", *args, "-c", str(ws.config)], cwd=ws.root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_query_returns_chunks_of_the_live_alias_and_filters_by_document(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    first = ws.manifest_rows(live)[0]
    with ws.store() as s:
        [p] = s.retrieve(live, [first.point_id], with_vectors=False)
    text = p.payload["page_content"]
    r = _query(ws, text, "--k", "3", "--json")
    assert r.returncode == 0, r.stderr
    results = json.loads(r.stdout)["results"]
    assert len(results) == 3 and set(results[0]) >= {"doc_id", "score", "page_content", "metadata"}
    assert results[0]["page_content"] == text and results[0]["doc_id"] == first.doc_id  # the hash embedder: exact
    other = next(r.doc_id for r in ws.manifest_rows(live) if r.doc_id != first.doc_id)
    f = _query(ws, text, "--k", "5", "--filter", f"doc_id={other}", "--json")
    assert f.returncode == 0 and {x["doc_id"] for x in json.loads(f.stdout)["results"]} == {other}
    bad = _query(ws, text, "--filter", "title=x")
    assert bad.returncode == 1 and bad.stderr.strip() == (
        "error: --filter title: can filter on doc_id only (add metadata keys to source.metadata_fields)")


def test_query_works_from_another_process_while_apply_and_cutover_run(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws", extra="cutover: {min_recall_delta: -1.0, min_overlap: 0.0}")
    ws.build_live()
    plan, path = ws.planned_change(size=120, extra="cutover: {min_recall_delta: -1.0, min_overlap: 0.0}")
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    for step in (["apply", str(path), "--no-progress"], ["cutover", str(path)]):
        writer = subprocess.Popen([str(REINDEX_BIN), *step, "-c", str(ws.config)], cwd=ws.root, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        answers = 0
        while writer.poll() is None or answers == 0:
            r = _query(ws, "the module search path", "--k", "2", "--json")
            assert r.returncode == 0, r.stderr
            assert len(json.loads(r.stdout)["results"]) == 2
            answers += 1
            time.sleep(0.2)
        out, err = writer.communicate()
        assert writer.returncode == 0, err
        assert answers >= 1
