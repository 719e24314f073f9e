"""Parquet reads decode on the calling thread (reindex.foundation.tables.USE_THREADS): a threaded read starts Arrow's CPU
thread pool, and a process exiting with it aborted now and then at interpreter exit (``terminate called without
an active exception``, exit 134): 7 of 60 refused ``reindex apply`` runs of the demo's chunker change with two busy
loops beside them, 0 of 60 with single-threaded reads (apache/arrow#34314). Measuring the abort needs dozens of
runs on a loaded box; what this pins is that no read of ``reindex.foundation.tables`` asks Arrow for its pool."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from reindex.foundation import tables


def test_every_parquet_read_decodes_on_the_calling_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, object]] = []

    def recording(name: str, real):
        def read(*args, **kwargs):
            asked.append((name, kwargs.get("use_threads", "default (threads)")))
            return real(*args, **kwargs)
        return read

    for name in ("read", "iter_batches", "read_row_group"):
        monkeypatch.setattr(pq.ParquetFile, name, recording(name, getattr(pq.ParquetFile, name)))
    monkeypatch.setattr(pq, "read_table", recording("read_table", pq.read_table))

    data = tables.parquet_from_columns({"a": list(range(3000)), "b": [str(i) for i in range(3000)]},
                                       {"a": "int64", "b": "string"})
    path = tmp_path / "t.parquet"
    path.write_bytes(data)
    columns, rows = tables.columns_from_parquet(data, ["a", "b"])
    assert rows == 3000 and columns["b"][2999] == "2999"
    assert tables.read_parquet(path)["a"][:3] == [0, 1, 2]
    reader = tables.ParquetReader(path)
    assert sum(len(b["a"]) for b in reader.batches(["a"], 1000)) == 3000
    assert reader.read_group(0, ["b"])["b"][0] == "0"
    assert {name for name, _ in asked} == {"read", "read_table", "iter_batches", "read_row_group"}
    assert all(threads is False for _, threads in asked), asked
