"""A disk too full for a writing command is one line and an exit code, never a SIGBUS (issue 33, item 2).

On a small tmpfs (the file system that allocates the engine's preallocated files when they are mapped) each of
cutover, rollback, `reindex sync` (in place), apply and gc refuses with one line naming the folder, what it
needs and what is free, exits non-zero with the index lock released (the same command succeeds at once once
there is room), and the live index keeps answering queries. Below those guards the store checks again, exactly:
a load on a full tmpfs, a write on a full ext4 (where writes through mappings die of SIGBUS, measured) and a
reader of a store copied onto a full tmpfs each fail with one line. Mounting needs root: skipped without it.
"""

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

LENIENT = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass, retention_days: 0}"
SIZE = 256 << 20


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


class Tmpfs:
    """A tmpfs mounted at ``path`` whose free space the test sets."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def leave(self, free: int) -> None:
        """Shrink it to what it holds and ``free`` bytes more."""
        r = _mount("-o", f"remount,size={(self.used() + free) // 1024}k", str(self.path))
        assert r.returncode == 0, r.stderr

    def grow(self) -> None:
        r = _mount("-o", f"remount,size={SIZE // 1024}k", str(self.path))
        assert r.returncode == 0, r.stderr


@pytest.fixture
def tmpfs(tmp_path: Path):
    """A private tmpfs of 256 MiB (unmounted at the end)."""
    path = tmp_path / "tmpfs"
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    r = _mount("-t", "tmpfs", "-o", f"size={SIZE // 1024}k", "tmpfs", str(path))
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield Tmpfs(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _cli(ws: Workspace, *args: str) -> subprocess.CompletedProcess:
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    return subprocess.run([str(REINDEX_BIN), *args, "-c", str(ws.config)], cwd=ws.root, env=env, capture_output=True,
                          text=True, timeout=300)


def _one_line(r: subprocess.CompletedProcess, pattern: str) -> None:
    """Exit 1 and exactly one line on stderr, matching ``pattern`` (no traceback, no SIGBUS's exit 135)."""
    assert r.returncode == 1 and r.stderr.count("\n") == 1, (r.returncode, r.stderr)
    assert re.fullmatch(pattern + r"\n", r.stderr), r.stderr


def _released(ws: Workspace) -> None:
    lock = json.loads(ws.lock_file.read_text())
    assert lock.get("released"), lock


def _serves(ws: Workspace, text: str) -> None:
    r = _cli(ws, "query", text, "--k", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["page_content"] == text


def _texts(ws: Workspace, collection: str) -> set[str]:
    with ws.store() as s:
        return {p.payload["page_content"] for p in s.scroll(collection)}


def _a_text(ws: Workspace, collection: str) -> str:
    return sorted(_texts(ws, collection))[0]


def _need(guard: str, store: Path, command: str) -> str:
    return (rf"error: not enough free disk for {guard}: it adds about [\d.,]+ MiB to the store in "
            rf"{re.escape(str(store))} \([^)]+\) but [\d.]+ MiB is free there; free some space \(or move "
            rf"store.path\) and run `{command}` again")


def test_each_writing_command_on_a_nearly_full_tmpfs_is_one_line_and_leaves_the_index_serving(tmpfs: Tmpfs) -> None:
    ws = Workspace(tmpfs.path / "ws", extra=LENIENT)
    store = ws.root / ".reindex" / "qdrant"
    old = ws.build_live()
    text = _a_text(ws, old)
    _plan, path = ws.planned_change(size=120, extra=LENIENT)
    shadow = ws.apply(path).collection
    # Never loaded since its index build: on tmpfs its first load fills ~36 MiB of preallocated files.

    tmpfs.leave(2 << 20)
    _one_line(_cli(ws, "cutover", str(path)), _need(f"the cutover to {shadow}", store, "reindex cutover"))
    _released(ws)
    _serves(ws, text)
    tmpfs.grow()
    assert _cli(ws, "cutover", str(path)).returncode == 0  # at once: the lock was released
    assert ws.alias() == shadow

    tmpfs.leave(256 << 10)
    _one_line(_cli(ws, "rollback"), _need(f"the rollback to {old}", store, "reindex rollback"))
    _serves(ws, _a_text(ws, shadow))
    tmpfs.grow()
    assert _cli(ws, "rollback").returncode == 0
    assert ws.alias() == old

    ws.write_config(150, extra=LENIENT)  # the live population's config: the edits sync in place
    before = _texts(ws, old)
    ws.edit_documents()
    tmpfs.leave(20 << 20)  # the delta generation fills ~40 MiB when it is loaded (~10 MiB on ext4)
    r = _cli(ws, "sync", "--no-gc")
    _one_line(r, _need(r"plan \w{12}", store, "reindex apply"))
    _released(ws)
    _serves(ws, text)
    tmpfs.grow()
    assert _cli(ws, "sync", "--no-gc").returncode == 0
    fresh = sorted(_texts(ws, old) - before)
    _serves(ws, fresh[0])  # the sync's own edit

    ws.write_config(100, extra=LENIENT)  # a new population
    plan, path = ws.plan()
    ws.approve(path)
    tmpfs.leave(256 << 10)
    _one_line(_cli(ws, "apply", str(path), "--no-progress"), _need(rf"plan {plan.plan_hash[:12]}", store,
                                                                    "reindex apply"))
    _serves(ws, fresh[0])

    tmpfs.leave(256 << 10)
    _one_line(_cli(ws, "gc", "--force", "--yes"), _need("gc", store, "reindex gc"))
    _serves(ws, fresh[0])
    tmpfs.grow()
    r = _cli(ws, "gc", "--force", "--yes", "--json")
    deleted = {a["collection"] for a in json.loads(r.stdout)["actions"] if a["action"] == "deleted"}
    assert r.returncode == 0 and shadow in deleted, r.stdout


# The store's own checks, each in a child process: without them the child dies of SIGBUS (exit -7).
_STORE = """
import sys, uuid
import numpy as np
from reindex.errors import ReindexError
from reindex.adapters.stores.edge import open_edge_store, open_reader
from reindex.adapters.stores.vectors import Point
folder, action = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(1)
try:
    if action == "build":
        store = open_edge_store(folder)
        store.create_collection("c", dimension=384, distance="cosine")
        store.create_payload_index("c", "doc_id")
        store.upsert("c", [Point(str(uuid.uuid4()), rng.standard_normal(384), {"doc_id": f"d{i}"}) for i in range(300)])
        store.swap_alias("idx", "c", None)
        store.close()
    elif action == "write":
        store = open_edge_store(folder)
        for batch in range(100):
            store.upsert("c", [Point(str(uuid.uuid4()), rng.standard_normal(384),
                                     {"doc_id": f"e{batch}", "text": "x" * 300}) for _ in range(500)])
    elif action == "open":
        print(open_edge_store(folder).count("c"))
    else:
        print(open_reader(folder).count("idx"))
except ReindexError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(1)
"""


def _store(folder: Path, action: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _STORE, str(folder), action], capture_output=True, text=True,
                          timeout=300)


def test_a_load_on_a_full_tmpfs_is_one_line_for_the_writer_and_a_reader(tmp_path: Path, tmpfs: Tmpfs) -> None:
    """A store copied onto a tmpfs keeps its preallocated files sparse; the first load would fill them through the
    engine's mappings (SIGBUS on a full tmpfs). The store allocates them first, and says so when it cannot."""
    built = tmp_path / "built"
    assert _store(built, "build").returncode == 0
    store = tmpfs.path / "store"
    subprocess.run(["cp", "-a", "--sparse=always", str(built), str(store)], check=True)
    tmpfs.leave(2 << 20)
    gen = store / "collections" / "c" / "gen-000001"
    for action, what in (("open", "open collection `c`"), ("read", "open collection `c`")):
        r = _store(store, action)
        _one_line(r, rf"error: not enough free space in `{re.escape(str(gen))}` to {re.escape(what)}: the engine "
                     r"maps [\d.]+ MiB of preallocated files there, which tmpfs allocates when they are mapped, and "
                     r"[\d.]+ MiB is free; free some space \(or put store.path on a disk file system\) and run the "
                     r"command again")
    tmpfs.grow()
    assert _store(store, "read").stdout.strip() == "300"
    assert _store(store, "open").stdout.strip() == "300"


def test_a_write_on_a_nearly_full_ext4_is_one_line_not_a_sigbus(tmp_path: Path) -> None:
    """ext4 allocates a preallocated file's blocks when they are written; a write through the engine's mapping
    on a full disk is a SIGBUS (measured). Every write checks the free space first."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        pytest.skip("needs root and mkfs.ext4 to mount a small ext4 image")
    image, mount = tmp_path / "ext4.img", tmp_path / "ext4"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(48 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    r = _mount("-o", "loop", str(image), str(mount))
    if r.returncode != 0:
        pytest.skip(f"cannot mount an ext4 image here: {r.stderr.strip()}")
    try:
        store = mount / "store"
        assert _store(store, "build").returncode == 0
        r = _store(store, "write")  # 100 batches of ~0.9 MiB: the disk fills on the way
        _one_line(r, rf"error: not enough free space in `{re.escape(str(store))}` to upsert 500 points into `c`: it "
                     r"needs about [\d.]+ MiB and [\d.]+ MiB is free; free some space and run the command again "
                     r"\(finished work is kept\)")
        assert _store(store, "read").returncode == 0  # what was written before stays readable
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_plan_and_apply_warn_before_the_build_when_its_cutover_will_not_fit(tmpfs: Tmpfs) -> None:
    """Room for the build, not for its cutover: the cutover's first load of the new population (~36 MiB of
    preallocated files on tmpfs) will not fit once it is built. The plan and the apply say so before the build (the
    user used to learn it after); the apply still builds, the cutover refuses in one line, and fits once there is
    room."""
    ws = Workspace(tmpfs.path / "ws", extra=LENIENT)
    store = ws.root / ".reindex" / "qdrant"
    ws.build_live()
    ws.write_config(120, extra=LENIENT)
    tmpfs.leave(24 << 20)
    warning = (rf"warning: the cutover of this plan will not fit in {re.escape(str(store))}: its first load of the new "
               r"population and the live one needs about [\d.,]+ MiB, and after the build about [\d.,]+ MiB will be "
               r"free there; free some space \(or move store.path\) before `reindex cutover`")
    r = _cli(ws, "plan", "--out", str(ws.plans), "--json")
    assert r.returncode == 2 and re.search(warning, r.stderr), r.stderr
    path = json.loads(r.stdout)["plan_file"]
    assert _cli(ws, "approve", path, "--by", "tester").returncode == 0
    r = _cli(ws, "apply", path, "--no-progress", "--no-prefect")
    assert r.returncode == 0 and re.search(warning, r.stderr), r.stderr
    _one_line(_cli(ws, "cutover", path), _need(r"the cutover to \w+", store, "reindex cutover"))
    tmpfs.grow()
    assert _cli(ws, "cutover", path).returncode == 0
