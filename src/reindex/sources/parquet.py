"""A Parquet file, read in batches of ``batch_rows`` rows and only the needed columns."""

from __future__ import annotations

from collections.abc import Callable

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reindex.config import SourceConfig
from reindex.errors import SourceError
from reindex.tables import ParquetReader, TableError
from reindex.sources.base import ID_FIELDS, TEXT_FIELDS, Admission, Document, ScanReport, encode_text, pick_field


class ParquetSource:
    """Rows with an id column (``id_field`` or the first of id, doc_id, _id), a text column
    (``text_field`` or the first of text, content, body; string or binary) and optional metadata
    columns. Columns are resolved when the source is opened; a row with a null id or text is a
    bad document."""

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

    def _open(self) -> ParquetReader:
        try:
            return ParquetReader(self.path)
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path}: {err}") from None

    def describe(self) -> str:
        return f"Parquet file {self.path} (id: {self.id_column}, text: {self.text_column}, {self.num_rows} rows)"

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="row", keep=keep)
        meta_cols = [c for c in self.cfg.metadata_fields if c not in (self.id_column, self.text_column)]
        columns = [self.id_column, self.text_column, *meta_cols]
        pf = self._open()
        row = 0
        try:
            for batch in pf.batches(list(dict.fromkeys(columns)), self.cfg.batch_rows):
                ids = batch[self.id_column]
                texts = batch[self.text_column]
                metas = {c: batch[c] for c in self.cfg.metadata_fields}
                del batch
                for i, (doc_id, text) in enumerate(zip(ids, texts)):
                    row += 1
                    doc = self._row(admission, row, doc_id, text, {c: v[i] for c, v in metas.items()})
                    if doc is not None:
                        yield doc
        except TableError as err:
            raise SourceError(f"cannot read Parquet source {self.path} after row {row}: {err}") from None
        finally:
            pf.close()

    def _row(self, admission: Admission, row: int, doc_id: object, text: object, meta: dict[str, Any]) -> Document | None:
        if doc_id is None:
            admission.reject(f"row:{row}", f"missing id (null {self.id_column!r})")
            return None
        doc_id = doc_id.decode("utf-8", "replace") if isinstance(doc_id, bytes) else str(doc_id)
        if not doc_id.strip():
            admission.reject(f"row:{row}", f"malformed: id column {self.id_column!r} is empty ({doc_id!r}); every document needs a non-empty id")
            return None
        if admission.skip(doc_id, row):
            return None
        if text is None:
            admission.reject(doc_id, f"missing text (null {self.text_column!r})")
            return None
        if isinstance(text, bytes):
            data: bytes | None = text
        elif isinstance(text, str):
            data, problem = encode_text(text)
            if data is None:
                admission.reject(doc_id, problem or "not valid UTF-8")
                return None
        else:
            admission.reject(doc_id, f"malformed: text column {self.text_column!r} holds {type(text).__name__}, not text")
            return None
        return admission.admit(doc_id, data, row, metadata=meta)


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
