"""Store capabilities are declared by each backend (one registry entry) and asked, never inferred from the config:
who writes a shard's points, whether readers run beside a writer, which cost model prices it, whether its disk is
checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from reindex.domain.config import config_from_dict
from reindex.planner._work import backend_of
from reindex.adapters.stores.opening import REGISTRY, backend_for
from reindex.adapters.stores.vectors import VectorStoreError
from reindex.context import backends
from reindex.context import Context


def _cfg(tmp_path: Path, store: dict):
    return config_from_dict({"index": "docs", "source": str(tmp_path), "store": store,
                             "state": {"uri": str(tmp_path / "state")}})


@pytest.mark.parametrize("store, name, writers, beside, footprint, disk", [
    ({"url": "http://127.0.0.1:6333"}, "server", "many", True, "server", False),
    ({}, "edge", "one", True, "edge", True),
    ({"backend": "local"}, "local", "one", False, "local", True),
])
def test_each_backend_declares_what_it_can_do(tmp_path, store, name, writers, beside, footprint, disk):
    b = backends.store_backend(_cfg(tmp_path, store))
    caps = b.capabilities
    assert (b.name, caps.writers, caps.readers_beside_writer, caps.local_disk) == (name, writers, beside, disk)
    assert caps is REGISTRY[name].capabilities
    assert b.footprint is REGISTRY[footprint].footprint  # the cost model comes with the entry
    assert backend_of(_cfg(tmp_path, store)) == footprint  # the planner prices what the backend declares
    assert (b.folder is None) == (name == "server")
    if name != "server":
        assert b.folder == str(tmp_path / "state" / "qdrant")


def test_a_backend_without_readers_beside_a_writer_refuses_a_reader_saying_what_to_do(tmp_path):
    cfg = _cfg(tmp_path, {"backend": "local"})
    with pytest.raises(VectorStoreError, match="admits one process per folder.*reindex.adapters.stores.migrate"):
        backends.vector_reader_for(cfg)
    with Context(cfg).read_only_store() as store:  # what status and gc --dry-run use: the writer, since it must
        assert store is not None and not hasattr(store, "_read_only")
