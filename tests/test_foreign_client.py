"""A stock qdrant-client (local mode, what langchain-qdrant opens for ``path=``) pointed at the default edge
store folder: it sees no collection and leaves ``.lock`` and ``meta.json`` behind, which reindex ignores;
once it has created collections there, reindex's writer refuses the folder and readers keep answering."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from qdrant_client import QdrantClient, models

from helpers_index import Workspace
from reindex import api
from reindex.cli import main


def test_a_stock_client_footprint_is_ignored_and_its_collections_refused(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    folder = ws.root / ".reindex" / "qdrant"

    stock = QdrantClient(path=str(folder))
    try:
        assert stock.get_collections().collections == []  # the README's point: a stock client cannot read it
        with pytest.raises(ValueError, match="Collection docs not found"):
            stock.get_collection("docs")
    finally:
        stock.close()
    assert (folder / ".lock").exists() and (folder / "meta.json").exists()

    # Its empty footprint changes nothing: the writer opens the folder, readers read it.
    with ws.store() as writer:
        assert writer.get_alias("docs") == live
    assert api.status(ws.config)["aliases"] == {"docs": live}

    stock = QdrantClient(path=str(folder))
    try:
        stock.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    finally:
        stock.close()
    r = CliRunner().invoke(main, ["gc", "-c", str(ws.config), "--yes"])  # any command that writes
    assert r.exit_code == 1
    assert r.stderr == (
        f"error: `{folder}` also holds collections a stock qdrant-client wrote into it (docs; meta.json, collection/): "
        "reindex never reads them and a stock client cannot read reindex's store. Move meta.json, .lock and "
        "collection/ out of the folder (give qdrant-client a folder of its own) and run again; readers of this index "
        "use reindex's retrievers (reindex.retrievers).\n")
    q = CliRunner().invoke(main, ["query", "style guide", "-c", str(ws.config), "--k", "2"])
    lines = q.stdout.splitlines()  # readers keep answering from the alias: the population line, then two hits
    assert q.exit_code == 0 and len(lines) == 3 and lines[0].startswith("docs__"), q.stdout
    assert [line.split()[0] for line in lines[1:]] == ["1.", "2."]
