"""Helpers for the apply / crash / cutover tests: a workspace (a copy of the bundled 24-PEP sample
corpus, a ``reindex.yaml`` with the ``hash`` embedder and 4 shards, its own state folder and embedded
Qdrant), snapshots of collections, embed logs, and one Prefect test server shared by the session."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

import reindex

from reindex import api

SAMPLE = Path(reindex.__file__).resolve().parent / "sample"
REINDEX_BIN = Path(sys.executable).with_name("reindex")

CONFIG = """\
index: docs
source: ./corpus
text: {{chunker: {{kind: recursive, size: {size}}}}}
vector: {{provider: hash{vector_extra}}}
apply: {{shards: 4}}
{extra}"""


def config_text(size: int = 150, *, prefix: str | None = None, extra: str = "") -> str:
    vector_extra = f", prefix: {json.dumps(prefix)}" if prefix is not None else ""
    text = CONFIG.format(size=size, vector_extra=vector_extra, extra=extra)
    if "\napply:" in "\n" + extra:  # the extra's own apply section replaces the default (a duplicate key is refused)
        text = text.replace("apply: {shards: 4}\n", "", 1)
    return text


@dataclass
class Snapshot:
    """Every point of a collection: id → (vector, payload)."""

    points: dict[str, tuple[np.ndarray, dict]]

    @property
    def ids(self) -> set[str]:
        return set(self.points)

    def by_doc(self) -> Counter:
        return Counter(p["doc_id"] for _, p in self.points.values())

    def assert_same(self, other: "Snapshot") -> None:
        """Same point ids, vectors (allclose) and payloads; each (doc, ordinal) once on both sides."""
        assert self.ids == other.ids, (
            f"{len(self.ids - other.ids)} extra and {len(other.ids - self.ids)} missing point ids"
        )
        for pid, (vec, payload) in self.points.items():
            ovec, opayload = other.points[pid]
            assert np.allclose(vec, ovec, atol=1e-6), f"vector of {pid} differs"
            assert payload == opayload, f"payload of {pid} differs: {payload} != {opayload}"
        for snap in (self, other):
            slots = Counter((p["doc_id"], p["ordinal"]) for _, p in snap.points.values())
            dupes = [s for s, n in slots.items() if n > 1]
            assert not dupes, f"(doc, ordinal) stored more than once: {dupes[:3]}"


class Workspace:
    """A folder with ``corpus/``, ``reindex.yaml``, ``plans/`` and ``.reindex/`` (state + Qdrant)."""

    def __init__(self, root: Path, size: int = 150, **config: Any) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        shutil.copytree(SAMPLE / "corpus", self.corpus)
        self.write_config(size, **config)

    @property
    def corpus(self) -> Path:
        return self.root / "corpus"

    @property
    def config(self) -> Path:
        return self.root / "reindex.yaml"

    @property
    def plans(self) -> Path:
        return self.root / "plans"

    @property
    def lock_file(self) -> Path:
        return self.root / ".reindex" / "indexes" / "docs" / "lock.json"

    def write_config(self, size: int = 150, **kw: Any) -> None:
        self.config.write_text(config_text(size, **kw), encoding="utf-8")

    def cfg(self):
        return api.load_resolved(self.config)

    def state(self):
        return api.state_store(self.cfg())

    def edit_documents(self) -> list[str]:
        """Copy the sample's real edits over the corpus; returns the edited document ids."""
        names = []
        for f in sorted((SAMPLE / "edits").glob("*.rst")):
            shutil.copy(f, self.corpus / f.name)
            names.append(f.name)
        return names

    # use cases ----------------------------------------------------------------------------------

    def plan(self):
        plan, path = api.make_plan(self.config, out=self.plans)
        return plan, path

    def approve(self, path: Path) -> None:
        api.approve_plan(path, "tester", "test")

    def apply(self, path: Path, **kw: Any):
        kw.setdefault("use_prefect", False)
        return api.apply_plan(path, self.config, **kw)

    def cutover(self, path: Path, **kw: Any):
        return api.cutover(path, self.config, **kw)

    def build_live(self) -> str:
        """Plan, apply and cut over the current config; returns the live collection."""
        plan, path = self.plan()
        if plan.body["approval"]["required"]:
            self.approve(path)
        r = self.apply(path)
        assert r.status == "done", r.report
        c = self.cutover(path)
        assert c.report["swap"], c.report["rules"]
        return r.collection

    def planned_change(self, size: int = 120, **kw: Any):
        """Rewrite the config, plan the change and approve it; returns (plan, path)."""
        self.write_config(size, **kw)
        plan, path = self.plan()
        self.approve(path)
        return plan, path

    # inspection ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def store(self) -> Iterator[Any]:
        s = api.vector_store_for(self.cfg())
        try:
            yield s
        finally:
            s.close()

    def snapshot(self, collection: str) -> Snapshot:
        with self.store() as s:
            pts = {p.id: (np.asarray(p.vector, dtype=np.float32), p.payload)
                   for p in s.scroll(collection, with_vectors=True)}
            assert s.count(collection) == len(pts)
        return Snapshot(pts)

    def alias(self) -> str | None:
        with self.store() as s:
            return s.get_alias("docs")

    def manifest_rows(self, collection: str) -> list:
        from reindex.books.manifests import read_chunk_manifest

        return sorted(read_chunk_manifest(self.state(), "docs", collection), key=lambda r: (r.doc_id, r.ordinal))


def switched_workspace(root: Path) -> dict:
    """A workspace with A live and B built beside it from an approved chunker change (150 → 120 tokens,
    not cut over yet; lenient cutover gates): ``{"ws", "a", "b", "path", "plan"}``."""
    lenient = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"
    ws = Workspace(root, extra=lenient)
    a = ws.build_live()
    plan, path = ws.planned_change(size=120, extra=lenient)
    b = ws.apply(path).collection
    return {"ws": ws, "a": a, "b": b, "path": path, "plan": plan}


def read_log(path: Path) -> Counter:
    """Embed-log digests (one line per embedded text) as a multiset."""
    if not path.exists():
        return Counter()
    return Counter(line for line in path.read_text().splitlines() if line)


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REINDEX_CRASH_AT", "REINDEX_PAUSE_AT", "REINDEX_EMBED_LOG"))}
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false",
        PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING",
    )
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------
# One Prefect test server per pytest session (starting one costs ~10-20 s)
# --------------------------------------------------------------------------------------------

_PREFECT: dict[str, Any] = {}


def prefect_api_url(config: Any) -> str:
    """Start ``prefect_test_harness`` once for the session (closed at session end) and return the
    URL of its API, which subprocesses reach through ``PREFECT_API_URL``."""
    if "url" not in _PREFECT:
        from prefect.testing.utilities import prefect_test_harness
        import prefect.settings

        stack = contextlib.ExitStack()
        stack.enter_context(prefect_test_harness(server_startup_timeout=120))
        _PREFECT["url"] = prefect.settings.PREFECT_API_URL.value()
        _PREFECT["stack"] = stack
        config.add_cleanup(stack.close)
    return _PREFECT["url"]


def stop_group(proc, timeout: float = 20) -> None:
    """SIGTERM a child started in a session of its own (and what it started), SIGKILL if it lingers."""
    import os
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def online_workers(url: str, pool: str) -> list[dict]:
    """The workers of ``pool`` that the Prefect server at ``url`` counts as ONLINE (a heartbeat seen)."""
    import httpx

    try:
        r = httpx.post(f"{url}/work_pools/{pool}/workers/filter", json={}, timeout=5)
    except httpx.HTTPError:
        return []
    return [w for w in r.json() if w.get("status") == "ONLINE"] if r.status_code == 200 else []


def wait_for_workers(url: str, pool: str, procs: list, log: Path, n: int = 1, timeout: float = 150) -> None:
    """Wait until ``n`` workers of ``pool`` are online (the worker creates its pool when it starts, so a
    deployment made before that is refused: "references work pool ... which does not exist"). Fails with the
    worker's log when a worker process ended or the deadline passed."""
    import time

    deadline = time.monotonic() + timeout
    while len(online_workers(url, pool)) < n:
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            import pytest

            text = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
            pytest.fail(f"{n} prefect worker(s) of pool {pool!r} not online within {timeout:.0f} s:\n{text}")
        time.sleep(0.5)

