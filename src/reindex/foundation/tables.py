"""Parquet in and out: the one module that imports pyarrow.

Columns travel as plain Python lists keyed by column name; pyarrow's many exception types become
:class:`TableError` with a one-line message."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


class _Pyarrow:
    """``pyarrow``, imported on first use: commands that read no Parquet (``reindex status``, ``query``) do not
    pay its import (~0.13 CPU-s)."""

    def __getattr__(self, name: str):
        import pyarrow

        return getattr(pyarrow, name)


class _Parquet:
    """``pyarrow.parquet``, imported on first use."""

    def __getattr__(self, name: str):
        import pyarrow.parquet

        return getattr(pyarrow.parquet, name)


pa = _Pyarrow()
pq = _Parquet()

#: Every read here decodes on the calling thread (``use_threads=False``). A threaded read starts Arrow's CPU thread
#: pool, whose threads outlive the read, and a process that exits with them aborted at interpreter exit now and then
#: (``terminate called without an active exception``, exit 134): 7 of 60 refused `reindex apply` runs with two busy
#: loops beside them, 0 of 60 with single-threaded reads (apache/arrow#34314). The files read here are manifests,
#: carries and source row groups, decoded batch by batch and turned into Python lists on this thread anyway: the pool
#: saved nothing measurable (bench/parquet_threads.py: single-threaded within 0.64–1.16× of its wall at 10 k and 100 k
#: rows, bench/RESULTS.md).
USE_THREADS = False

__all__ = ["ParquetReader", "TableError", "columns_from_parquet", "parquet_from_columns", "read_parquet"]


def _type(kind: str):
    return {"string": pa.string, "int32": pa.int32, "int64": pa.int64, "float64": pa.float64}[kind]()


class TableError(Exception):
    """A Parquet file or buffer cannot be read or written (the message is one line)."""


def _one_line(err: BaseException) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0]


def parquet_from_columns(columns: Mapping[str, Sequence], types: Mapping[str, str]) -> bytes:
    """A zstd-compressed Parquet file of ``columns`` typed by ``types`` (string, int32, int64, float64)."""
    schema = pa.schema([(name, _type(kind)) for name, kind in types.items()])
    table = pa.table({name: list(columns[name]) for name in types}, schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def columns_from_parquet(data: bytes, names: Sequence[str]) -> tuple[dict[str, list], int]:
    """The named columns of a Parquet buffer as lists, and its row count."""
    try:
        # ParquetFile, not read_table: read_table goes through pyarrow.dataset (~0.1 CPU-s more to import).
        file = pq.ParquetFile(io.BytesIO(data))
        missing = [name for name in names if name not in file.schema_arrow.names]
        if missing:
            raise TableError(f"no column {', '.join(missing)} in the Parquet file")
        table = file.read(columns=list(names), use_threads=USE_THREADS)
    except (OSError, pa.ArrowException) as err:
        raise TableError(_one_line(err)) from None
    return {name: table.column(name).to_pylist() for name in names}, table.num_rows


def read_parquet(path: str | Path) -> dict[str, list]:
    """Every column of a Parquet file as lists."""
    try:
        table = pq.read_table(path, use_threads=USE_THREADS)
    except (OSError, pa.ArrowException) as err:
        raise TableError(_one_line(err)) from None
    return {name: table.column(name).to_pylist() for name in table.column_names}


class ParquetReader:
    """A Parquet file read in batches of rows."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._file = pq.ParquetFile(path)
        except (OSError, pa.ArrowException) as err:
            raise TableError(_one_line(err)) from None

    @property
    def names(self) -> list[str]:
        return list(self._file.schema_arrow.names)

    @property
    def num_rows(self) -> int:
        return self._file.metadata.num_rows

    def batches(self, columns: Sequence[str], batch_rows: int, *, key: str | None = None,
                wanted: Callable[[Any], bool] | None = None) -> Iterator[dict[str, list]]:
        """Batches of at most ``batch_rows`` rows, each as ``{column: values}``. With ``key`` and ``wanted``, the other
        columns' values become Python objects only in the rows whose ``key`` value is wanted (None in the others):
        a shard reading its documents out of a file of all of them converts its own texts, not every shard's."""
        try:
            for batch in self._file.iter_batches(batch_size=batch_rows, columns=list(columns),
                                                 use_threads=USE_THREADS):
                if key is None or wanted is None:
                    yield {c: batch.column(c).to_pylist() for c in columns}
                    continue
                keys = batch.column(key).to_pylist()
                mask = [k is not None and wanted(k) for k in keys]
                if all(mask):
                    yield {c: keys if c == key else batch.column(c).to_pylist() for c in columns}
                    continue
                at = [i for i, m in enumerate(mask) if m]
                out: dict[str, list] = {key: keys}
                for c in columns:
                    if c != key:
                        values: list = [None] * len(keys)
                        for i, v in zip(at, batch.column(c).filter(pa.array(mask)).to_pylist()):
                            values[i] = v
                        out[c] = values
                yield out
        except (OSError, pa.ArrowException) as err:
            raise TableError(_one_line(err)) from None

    @property
    def row_groups(self) -> int:
        return self._file.metadata.num_row_groups

    def group_rows(self, group: int) -> int:
        return self._file.metadata.row_group(group).num_rows

    def column_range(self, group: int, column: str) -> tuple[object, object] | None:
        """(min, max) of ``column`` in row group ``group`` from the file's statistics, None when the file has
        none for it (or they include nulls: a null cursor is read every time)."""
        try:
            chunk = self._file.metadata.row_group(group).column(self._file.schema_arrow.get_field_index(column))
            stats = chunk.statistics
            if stats is None or not stats.has_min_max or (stats.has_null_count and stats.null_count):
                return None
            return stats.min, stats.max
        except (OSError, pa.ArrowException, ValueError, IndexError):
            return None

    def chunk_bytes(self, group: int, columns: Sequence[str]) -> int:
        """Bytes on disk (compressed) of ``columns`` in row group ``group``: what reading them costs."""
        meta = self._file.metadata.row_group(group)
        index = {meta.column(i).path_in_schema: i for i in range(meta.num_columns)}
        return sum(meta.column(index[c]).total_compressed_size for c in columns if c in index)

    def read_group(self, group: int, columns: Sequence[str]) -> dict[str, list]:
        """Row group ``group``, only ``columns``, as ``{column: values}``."""
        try:
            table = self._file.read_row_group(group, columns=list(columns), use_threads=USE_THREADS)
        except (OSError, pa.ArrowException) as err:
            raise TableError(_one_line(err)) from None
        return {c: table.column(c).to_pylist() for c in columns}

    def close(self) -> None:
        self._file.close()
