"""A backend is its module plus one registry entry (issue 40): the toy store of ``tests/toy_backend.py``, registered
here and nowhere else, runs plan → apply → cutover → query → status → doctor through the handle, and a plan prices
its footprint with the toy's own cost model. Nothing under ``src/reindex`` names it."""

from __future__ import annotations

from pathlib import Path

import pytest

import toy_backend
from helpers_index import Workspace

from reindex.adapters.stores import opening
from reindex.api import Index
from reindex.errors import ReindexError

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def toy():
    opening.register_backend("toy", toy_backend.entry())
    try:
        yield
    finally:
        opening.REGISTRY.pop("toy", None)
        toy_backend.SERVERS.clear()


def _workspace(tmp_path: Path, url: str = "toy://one", options: str = "") -> Workspace:
    return Workspace(tmp_path / "ws", extra=f"store: {{url: '{url}'{options}}}\n"
                                            "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}")


def test_a_registered_backend_runs_the_whole_cycle_with_no_other_file(tmp_path: Path, toy) -> None:
    ws = _workspace(tmp_path)
    with Index.open(ws.config) as ix:
        assert ix.context.backend().name == "toy" and ix.context.backend().folder is None
        plan, path = ix.plan(out=ws.plans)
        fp = plan.body["cost"]["footprint"]
        assert fp["backend"] == "toy" and plan.body["cost"]["formula"] == toy_backend.ToyFootprint.formula
        assert fp["new"]["disk_bytes"] == 0 and fp["new"]["ram_bytes"] > 2 * plan.body["work"]["chunks_new"] * 384 * 4
        applied = ix.apply(path, prefect=False)
        assert applied.status == "done", applied.report
        assert ix.cutover(path).passed
        live = ix.status()["aliases"]["docs"]
        assert toy_backend.SERVERS["toy://one"].aliases == {"docs": live}
        hits = ix.query("module", k=3)
        assert hits.population == live and len(hits.results) == 3
        assert ix.doctor(embed_sample=4).healthy
        # A document edit goes in place through the same entry.
        ws.edit_documents()
        plan2, path2 = ix.plan(out=ws.plans)
        assert plan2.kind == "document-scoped"
        assert ix.apply(path2, prefect=False).status == "done"
        assert ix.doctor().healthy
    assert not any("toy" in p.read_text(encoding="utf-8") for p in (SRC / "reindex").rglob("*.py"))


def test_the_url_scheme_picks_the_backend_and_its_options_are_checked(tmp_path: Path, toy) -> None:
    ws = _workspace(tmp_path, options=", options: {colour: blue}")
    with pytest.raises(ReindexError, match="store.options: the toy store takes only `note`, not colour"):
        with Index.open(ws.config) as ix:
            ix.plan(out=None)
    ws2 = _workspace(tmp_path / "b", url="nope://x")
    with pytest.raises(ReindexError, match=r"no store backend claims the scheme `nope`.*toy:// \(toy\)"):
        with Index.open(ws2.config) as ix:
            ix.status()


def test_a_scheme_belongs_to_one_backend(toy) -> None:
    with pytest.raises(ValueError, match="belong to backend 'toy'"):
        opening.register_backend("toy2", toy_backend.entry())
    with pytest.raises(ValueError, match="registered already"):
        opening.register_backend("toy", toy_backend.entry())
