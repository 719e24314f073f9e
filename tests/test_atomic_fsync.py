"""The files reindex keeps survive a power loss: written through the real code paths (a plan, an approval,
state records of a folder store), each file's data is fsynced before it gets its name, and its folder is
fsynced after (and a folder made for it, in its parent). kill -9 cannot show a missing fsync; recording the
system calls can (issue 33: deleting the fsync from atomic.py survived every test before this one)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers_index import Workspace

from reindex import api
from reindex.planner.approvals import approval_path
from reindex.adapters.stores.objects import LocalObjectStore


@dataclass
class Syscalls:
    """os.fsync, os.replace, os.link and os.mkdir as they were called, in order: ("fsync", is a folder,
    (device, inode)), ("name", path given, (device, inode) of the file named), ("mkdir", path)."""

    events: list[tuple] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_fsync, real_replace, real_link, real_mkdir = os.fsync, os.replace, os.link, os.mkdir

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            self.events.append(("fsync", stat.S_ISDIR(st.st_mode), (st.st_dev, st.st_ino)))
            real_fsync(fd)

        def replace(src, dst, *a, **kw):  # type: ignore[no-untyped-def]
            st = os.stat(src)
            real_replace(src, dst, *a, **kw)
            self.events.append(("name", Path(dst), (st.st_dev, st.st_ino)))

        def link(src, dst, *a, **kw):  # type: ignore[no-untyped-def]
            st = os.stat(src)
            real_link(src, dst, *a, **kw)
            self.events.append(("name", Path(dst), (st.st_dev, st.st_ino)))

        def mkdir(path, *a, **kw):  # type: ignore[no-untyped-def]
            real_mkdir(path, *a, **kw)
            self.events.append(("mkdir", Path(path)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "link", link)
        monkeypatch.setattr(os, "mkdir", mkdir)

    def assert_durable(self, path: Path) -> None:
        """``path`` got its name by a rename or link of a file whose data was fsynced before, and its folder
        was fsynced after; every folder made on the way was fsynced in its parent."""
        path = path.resolve()
        named = [i for i, e in enumerate(self.events) if e[0] == "name" and e[1].resolve() == path]
        assert named, f"{path} was not written by a rename or a link"
        j = named[-1]
        inode = self.events[j][2]
        assert any(e == ("fsync", False, inode) for e in self.events[:j]), f"the data of {path} was not fsynced before its rename"
        parent = path.parent.stat()
        assert ("fsync", True, (parent.st_dev, parent.st_ino)) in self.events[j + 1:], \
            f"the folder of {path} was not fsynced after the rename"
        for i, e in enumerate(self.events):
            if e[0] == "mkdir" and e[1].resolve() in path.parents:
                up = e[1].resolve().parent.stat()
                assert ("fsync", True, (up.st_dev, up.st_ino)) in self.events[i + 1:], \
                    f"the new folder {e[1]} was not fsynced in its parent"


@pytest.fixture
def syscalls(monkeypatch: pytest.MonkeyPatch) -> Syscalls:
    s = Syscalls()
    s.install(monkeypatch)
    return s


def test_a_plan_file_and_its_approval_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ws = Workspace(tmp_path / "ws")
    calls = Syscalls()
    calls.install(monkeypatch)
    _plan, path = api.make_plan(ws.config, out=ws.plans)  # plans/ is made by this first plan
    calls.assert_durable(path)
    assert any(e[0] == "mkdir" and e[1].name == "plans" for e in calls.events)
    api.approve_plan(path, "alice", "ok")  # plans/approvals/ too
    calls.assert_durable(approval_path(path))
    assert any(e[0] == "mkdir" and e[1].name == "approvals" for e in calls.events)


def test_folder_state_records_are_fsynced(tmp_path: Path, syscalls: Syscalls) -> None:
    store = LocalObjectStore(str(tmp_path / "state"))
    store.put("indexes/docs/populations/p/population.json", b'{"state": "building"}')
    syscalls.assert_durable(tmp_path / "state" / "indexes/docs/populations/p/population.json")
    assert store.put_if_absent("indexes/docs/runs/r/done.json", b"{}")  # the hard-link path
    syscalls.assert_durable(tmp_path / "state" / "indexes/docs/runs/r/done.json")
    version = store.put_if_version("indexes/docs/lock.json", b'{"token": 1}', None)
    assert store.put_if_version("indexes/docs/lock.json", b'{"token": 2}', version)  # compare-and-swap: a rename
    syscalls.assert_durable(tmp_path / "state" / "indexes/docs/lock.json")
