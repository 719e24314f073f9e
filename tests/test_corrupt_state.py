"""Corrupt state (issue 22): a state or store file that cannot be read is one line naming the file and the
way out, and what the state store can restore is restored."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers_index import Workspace
from reindex import api
from reindex.cli import main


def _cli(ws: Workspace, *args: str):
    out = ["--out", str(ws.plans)] if args[0] == "plan" else []  # never into the checkout's plans/
    return CliRunner().invoke(main, [*args, "-c", str(ws.config), *out])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One live index for the module; each test corrupts a copy of it."""
    ws = Workspace(tmp_path_factory.mktemp("corrupt") / "ws")
    return ws.root, ws.build_live()


@pytest.fixture
def live(built: tuple[Path, str], tmp_path: Path) -> tuple[Workspace, str]:
    root, collection = built
    shutil.copytree(root, tmp_path / "ws", symlinks=True)
    ws = object.__new__(Workspace)
    ws.root = tmp_path / "ws"
    return ws, collection


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda d: d.pop("collection"), "field 'collection' is missing"),
    (lambda d: d.update(collection=7), "field 'collection' is int, not str"),
    (lambda d: d.update(config="recursive"), "field 'config' is str, not dict"),
    (lambda d: d.update(created_at="yesterday"), "field 'created_at' is str, not a number"),
])
def test_a_population_record_with_wrong_types_is_one_line_naming_it(live, edit, problem) -> None:
    ws, collection = live
    path = ws.root / ".reindex" / "indexes" / "docs" / "populations" / collection / "population.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record))
    for command in (["status"], ["plan"]):
        r = _cli(ws, *command)
        assert r.exit_code == 1, r.output
        assert r.stderr.strip() == (f"error: folder {ws.root / '.reindex'}/indexes/docs/populations/{collection}/"
                                    f"population.json: not a valid population record ({problem}); restore it from a "
                                    "backup (the plan that built the population holds its config)"), r.stderr


def test_a_live_record_with_wrong_types_is_one_line_naming_it(live) -> None:
    ws, _ = live
    path = ws.root / ".reindex" / "indexes" / "docs" / "live.json"
    path.write_text(json.dumps({"collection": ["docs__x"]}))
    r = _cli(ws, "plan")
    assert r.exit_code == 1
    assert r.stderr.strip().startswith(f"error: folder {ws.root / '.reindex'}/indexes/docs/live.json: not a valid "
                                       "live record (field 'collection' is list, not str); delete it: the next "
                                       "`reindex plan` rebuilds it from the alias"), r.stderr
    path.unlink()  # as the message advises
    r = _cli(ws, "plan")
    assert r.exit_code == 0 and "none" in r.output, r.output  # the live population again, not an initial build


def test_a_corrupt_alias_file_stops_readers_with_one_line_and_status_rewrites_it(live, caplog) -> None:
    ws, collection = live
    aliases = ws.root / ".reindex" / "qdrant" / "aliases.json"
    aliases.write_text('{"aliases": {"docs": ')
    r = _cli(ws, "query", "packaging")
    assert r.exit_code == 1
    assert r.stderr.strip() == (f"error: `{aliases}` is not a valid alias file (Expecting value: line 1 column 22 "
                                "(char 21)); run `reindex status` to rewrite it from the state store's live records")
    caplog.set_level(logging.WARNING, logger="reindex")
    st = api.status(ws.config)
    assert st["aliases"] == {"docs": collection}
    assert json.loads(aliases.read_text()) == {"aliases": {"docs": collection}}
    assert any("rewrote it from the state store's live records: docs → " + collection in m for m in caplog.messages)
    r = _cli(ws, "query", "packaging")
    assert r.exit_code == 0, r.output
