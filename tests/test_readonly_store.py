"""Readers need no write access (issue 33, item 5): a workspace mounted read-only (a private mount namespace with a
read-only bind mount over it, the way a query service gets a read-only volume) serves `reindex query` and a held
`api.Querier`, which follows an in-place sync and a cutover made by a writer that has the folder read-write."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_index import REINDEX_BIN, Workspace, subprocess_env

LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"

# Mounts `$0` read-only over itself in a new mount namespace (private propagation: nothing leaks out), then runs
# the command; outside the namespace the folder stays writable for the writer.
_READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


# The same, with 64 KiB of room in /dev/shm and in $TMPDIR (a private tmpfs over each).
_CRAMPED = ('mount -t tmpfs -o size=64k tmpfs /dev/shm && mount -t tmpfs -o size=64k tmpfs "$TMPDIR" && '
            + _READ_ONLY)


def _read_only(folder: Path, *cmd: str, cramped: bool = False) -> list[str]:
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    return [*unshare, "sh", "-c", _CRAMPED if cramped else _READ_ONLY, str(folder), *cmd]


@pytest.fixture(scope="module")
def read_only_mounts(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip unless this machine lets a test mount a folder read-only in a namespace of its own."""
    if not shutil.which("unshare"):
        pytest.skip("no `unshare` command: cannot mount a folder read-only for one process")
    probe = tmp_path_factory.mktemp("ro-probe")
    r = subprocess.run(_read_only(probe, "sh", "-c", 'touch "$0/x"', str(probe)), capture_output=True, text=True)
    if "Read-only file system" not in r.stderr:
        pytest.skip(f"cannot mount a folder read-only here (unshare -m / mount --bind -o ro: {r.stderr.strip()!r})")


# A reader process on the read-only mount: one Querier, held, answering one query per line of stdin with the
# text of its best hit (the hash embedder: a chunk's own text finds that chunk first).
_READER = """
import json, sys
from pathlib import Path
from reindex import api
config = Path(sys.argv[1])
try:
    (config.parent / "probe").write_text("x")
    print(json.dumps({"writable": True}), flush=True)
except OSError as exc:
    print(json.dumps({"writable": False, "errno": exc.errno}), flush=True)
with api.Querier(config) as querier:
    for line in sys.stdin:
        print(json.dumps(querier.query(json.loads(line), k=3).results[0]["page_content"]), flush=True)
"""


class _Reader:
    def __init__(self, ws: Workspace) -> None:
        env = subprocess_env()
        env.pop("PREFECT_API_URL", None)
        self.proc = subprocess.Popen(_read_only(ws.root, sys.executable, "-c", _READER, str(ws.config)), cwd=ws.root,
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        assert first, self.proc.communicate(timeout=60)[1]
        self.mount = json.loads(first)

    def top(self, text: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(text) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, self.proc.communicate(timeout=60)[1]
        return json.loads(line)

    def close(self) -> str:
        """End the reader (end of its input); its stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        err = self.proc.stderr.read()
        assert self.proc.wait(timeout=60) == 0, err
        return err


def _texts(ws: Workspace, collection: str) -> set[str]:
    with ws.store() as s:
        return {p.payload["page_content"] for p in s.scroll(collection)}


def _published(ws: Workspace, collection: str) -> int:
    return json.loads((ws.root / ".reindex" / "qdrant" / "collections" / collection / "collection.json")
                      .read_text())["published"]


@pytest.mark.parametrize("lease_file", [True, False], ids=["lease-file", "no-lease-file"])
def test_a_read_only_mount_serves_queries_and_follows_a_sync_and_a_cutover_made_elsewhere(
        tmp_path: Path, read_only_mounts: None, lease_file: bool) -> None:
    """With the generation's lease file present (the writer makes one when it publishes) the reader locks it through
    a read-only descriptor and the writer keeps that generation while the reader holds it. Without one (a store
    published by an older writer) the reader serves unleased: the writer deletes the superseded generation and the
    reader moves on to the published one."""
    ws = Workspace(tmp_path / "ws", extra=LENIENT)
    live = ws.build_live()
    coll = ws.root / ".reindex" / "qdrant" / "collections" / live
    first = _published(ws, live)
    lease = coll / f"gen-{first:06d}.lease"
    assert lease.is_file()  # made by the writer, before any reader
    before = _texts(ws, live)
    text = sorted(before)[0]
    if not lease_file:
        lease.unlink()  # as in a store published by an older writer (the next writer's open makes one)

    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run(_read_only(ws.root, str(REINDEX_BIN), "query", text, "--k", "2", "--json", "-c", str(ws.config)),
                       cwd=ws.root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["page_content"] == text
    if lease_file:
        # The engine opens most data files for writing even to read: a reader of a read-only store copies them
        # into a private folder (sparse; the sealed vectors and HNSW graph stay links). Without room: one line.
        (tmp_path / "tmp").mkdir()
        r = subprocess.run(_read_only(ws.root, str(REINDEX_BIN), "query", text, "-c", str(ws.config), cramped=True),
                           cwd=ws.root, env={**env, "TMPDIR": str(tmp_path / "tmp")}, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert re.fullmatch(rf"error: `{ws.root}/.reindex/qdrant` is read-only, so a reader keeps a private copy "
                            rf"of the [\d.]+ MiB of its files that the engine opens for writing, and /dev/shm has "
                            rf"0.1 MiB, {tmp_path}/tmp has 0.1 MiB free: set TMPDIR to a folder with that much room\n",
                            r.stderr), r.stderr

    reader = _Reader(ws)
    try:
        assert reader.mount == {"writable": False, "errno": 30}  # EROFS: the reader cannot write into the folder
        assert reader.top(text) == text

        ws.edit_documents()  # an in-place sync by a writer with the folder read-write
        plan, path = ws.plan()
        assert plan.kind == "document-scoped", plan.kind
        ws.approve(path)
        assert ws.apply(path).status == "done"
        assert _published(ws, live) > first
        with ws.store():
            pass  # a writer's open sweeps the superseded generations that no reader holds
        # Held through a read-only descriptor: the sweep leaves it; unleased: deleted from under the reader.
        assert (coll / f"gen-{first:06d}").is_dir() is lease_file
        new = sorted(_texts(ws, live) - before)
        assert new
        assert reader.top(new[0]) == new[0]  # the reader follows the published sync

        _plan, path = ws.planned_change(size=120, extra=LENIENT)  # a new population and its cutover, elsewhere
        applied = ws.apply(path)
        assert applied.status == "done"
        assert ws.cutover(path).report["swap"]
        assert ws.alias() == applied.collection != live
        moved = sorted(_texts(ws, applied.collection) - _texts(ws, live))
        assert reader.top(moved[0]) == moved[0]
    except BaseException:
        reader.proc.kill()
        reader.proc.wait()
        raise
    err = reader.close()
    assert ("reading without a lease" in err) is not lease_file, err


def test_doctor_works_on_a_read_only_mount(tmp_path: Path, read_only_mounts: None) -> None:
    """Issue 43: `reindex doctor` failed on a read-only mount (it wrote a probe file to age the lock on the folder's
    clock); it reads only, so it works there, a held lock's age included."""
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    from reindex.books.locks import acquire_lock

    lock = acquire_lock(ws.state(), "docs", "elsewhere:1:x", purpose="apply (elsewhere)")  # held, fresh: not stale
    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    try:
        r = subprocess.run(_read_only(ws.root, str(REINDEX_BIN), "doctor", "--json", "-c", str(ws.config)),
                           cwd=ws.root, env=env, capture_output=True, text=True, timeout=180)
    finally:
        lock.release()
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["healthy"] and out["index"] == "docs", out
