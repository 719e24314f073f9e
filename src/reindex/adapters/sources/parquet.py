"""A Parquet file, read in batches of ``batch_rows`` rows and only the needed columns."""

from __future__ import annotations

from collections.abc import Callable

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.foundation.tables import ParquetReader, TableError
from reindex.adapters.sources.base import ID_FIELDS, TEXT_FIELDS, Admission, Document, ScanReport, pick_field
from reindex.adapters.sources.cursors import Changes, Cursor
from reindex.adapters.sources.marks import decode_mark, encode_mark, ids_digest

__all__ = ["ParquetSource"]


class ParquetSource:
    """Rows with an id column (``id_field`` or the first of id, doc_id, _id), a text column
    (``text_field`` or the first of text, content, body; string or binary) and optional metadata
    columns. Columns are resolved when the source is opened; a row with a null id or text is a
    bad document."""

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("id_field", "text_field", "metadata_fields", "batch_rows", "cursor", "deleted_field")

    def __init__(self, cfg: SourceConfig, path: Path) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        self.path = path
        pf = self._open()
        names = pf.names
        self.num_rows = pf.num_rows
        pf.close()
        self.id_column = _column(path, names, cfg.id_field, ID_FIELDS, "id", "id_field")
        self.text_column = _column(path, names, cfg.text_field, TEXT_FIELDS, "text", "text_field")
        missing = [c for c in cfg.metadata_fields if c not in names]
        if missing:
            raise SourceError(
                f"{path}: metadata column(s) {', '.join(map(repr, missing))} not found; columns are {', '.join(names)}"
            )
        for option in ("cursor", "deleted_field"):
            column = getattr(cfg, option)
            if column is not None and column not in names:
                raise SourceError(f"{path}: source.{option} column {column!r} not found; columns are {', '.join(names)}")
        self.cursor_kind = "mark" if cfg.cursor else None

    def _open(self) -> ParquetReader:
        try:
            return ParquetReader(self.path)
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path}: {err}") from None

    def describe(self) -> str:
        return f"Parquet file {self.path} (id: {self.id_column}, text: {self.text_column}, {self.num_rows} rows)"

    def no_cursor_reason(self) -> str:
        return (f"Parquet file {self.path} has no source.cursor: every sync reads all {self.num_rows:,} rows "
                "(name a monotonic column, e.g. updated_at, to read only the rows past it)")

    def _columns(self) -> list[str]:
        meta_cols = [c for c in self.cfg.metadata_fields if c not in (self.id_column, self.text_column)]
        return list(dict.fromkeys([self.id_column, self.text_column, *meta_cols]))

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="row", keep=keep)
        tomb = self.cfg.deleted_field
        columns = self._columns() + ([tomb] if tomb and tomb not in self._columns() else [])
        pf = self._open()
        row = 0
        try:
            # A shard's scan (``keep``) makes Python strings of its own rows' texts only.
            for batch in pf.batches(columns, self.cfg.batch_rows, key=self.id_column,
                                    wanted=None if keep is None else lambda d: keep(_id_text(d))):
                ids = batch[self.id_column]
                texts = batch[self.text_column]
                metas = {c: batch[c] for c in self.cfg.metadata_fields}
                dead = batch[tomb] if tomb else None
                del batch
                for i, (doc_id, text) in enumerate(zip(ids, texts)):
                    row += 1
                    if dead is not None and dead[i]:
                        continue  # a tombstone: the document was removed
                    doc = self._row(admission, row, doc_id, text, {c: v[i] for c, v in metas.items()})
                    if doc is not None:
                        yield doc
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path} after row {row}: {err}") from None
        finally:
            pf.close()

    def _row(self, admission: Admission, row: int, doc_id: object, text: object, meta: dict[str, Any]) -> Document | None:
        # A row not wanted by ``keep`` arrives with text None: Admission.skip drops it before its text is looked at.
        if doc_id is None:
            admission.reject(f"row:{row}", f"missing id (null {self.id_column!r})")
            return None
        doc_id = _id_text(doc_id)
        if not doc_id.strip():
            admission.reject(f"row:{row}", f"malformed: id column {self.id_column!r} is empty ({doc_id!r}); every document needs a non-empty id")
            return None
        if admission.skip(doc_id, row):
            return None
        if text is None:
            admission.reject(doc_id, f"missing text (null {self.text_column!r})")
            return None
        data = admission.column_text(doc_id, text, self.text_column)
        if data is None:
            return None
        return admission.admit(doc_id, data, row, metadata=meta)


    # -- the cursor: the highest value of source.cursor; row groups whose statistics end below it are skipped

    def position(self) -> Cursor:
        """The cursor column's maximum, from the row groups' statistics (a group without them is read)."""
        pf = self._open()
        try:
            top = None
            for g in range(pf.row_groups):
                rng = pf.column_range(g, self.cfg.cursor)
                values = [rng[1]] if rng is not None else pf.read_group(g, [self.cfg.cursor])[self.cfg.cursor]
                top = _max(top, values)
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path}: {err}") from None
        finally:
            pf.close()
        return Cursor.of("mark", {"mark": encode_mark(top)})

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """Rows whose cursor is at or past ``since``'s mark (a row group whose maximum is below it is not
        read); removals from the tombstone column among them, else from the id column read alone."""
        mark = decode_mark(since.position.get("mark"))
        col, tomb = self.cfg.cursor, self.cfg.deleted_field
        admission = Admission(report, unit="row")
        docs: list[Document] = []
        deleted: set[str] = set()
        listed: list[str] | None = None if tomb else []
        top, size, groups_read, row0 = mark, 0, 0, 0
        pf = self._open()
        groups = pf.row_groups
        try:
            for g in range(groups):
                n = pf.group_rows(g)
                if listed is not None:  # removals: every id, and nothing else, of every group
                    listed += [str(v) for v in pf.read_group(g, [self.id_column])[self.id_column] if v is not None]
                    size += pf.chunk_bytes(g, [self.id_column])
                rng = pf.column_range(g, col)
                if mark is not None and rng is not None and rng[1] < mark:
                    row0 += n
                    continue
                marks = pf.read_group(g, [col])[col]
                size += pf.chunk_bytes(g, [col])
                rows = [i for i, v in enumerate(marks) if v is None or mark is None or v >= mark]
                if not rows:
                    row0 += n
                    continue
                groups_read += 1
                columns = self._columns() + ([tomb] if tomb and tomb not in self._columns() else [])
                data = pf.read_group(g, columns)
                size += pf.chunk_bytes(g, columns)
                for i in rows:
                    top = _max(top, [marks[i]])
                    if tomb and data[tomb][i]:
                        if data[self.id_column][i] is not None:
                            deleted.add(str(data[self.id_column][i]))
                        continue
                    doc = self._row(admission, row0 + i + 1, data[self.id_column][i], data[self.text_column][i],
                                    {c: data[c][i] for c in self.cfg.metadata_fields})
                    if doc is not None:
                        docs.append(doc)
                row0 += n
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path}: {err}") from None
        finally:
            pf.close()
        how = (f"read {groups_read:,} of {groups:,} row groups at or past {col} {since.position.get('mark')} "
               f"({len(docs):,} rows)" + (f", the id column for removals ({len(listed):,} ids)" if listed is not None else ""))
        return Changes.of(docs, listed, deleted, Cursor.of("mark", {"mark": encode_mark(top)}), size, how,
                          ids_digest(listed) if listed is not None else "")


def _max(top: Any, values: list) -> Any:
    for v in values:
        if v is not None and (top is None or v > top):
            top = v
    return top


def _column(path: Path, names: list[str], configured: str | None, defaults: tuple[str, ...], what: str, option: str) -> str:
    found = pick_field(names, configured, defaults)
    if found is not None:
        return found
    if configured is not None:
        raise SourceError(f"{path}: {what} column {configured!r} not found; columns are {', '.join(names)}")
    raise SourceError(
        f"{path}: no {what} column (looked for {', '.join(defaults)}); columns are {', '.join(names)}; "
        f"set source.{option}"
    )


def _id_text(doc_id: object) -> str:
    """A document id as text (a bytes id decoded, anything else as ``str``)."""
    return doc_id.decode("utf-8", "replace") if isinstance(doc_id, bytes) else str(doc_id)
