"""A JSON Lines file (``.jsonl``, ``.ndjson``, optionally gzipped): one object per line, read
line by line."""

from __future__ import annotations

from collections.abc import Callable

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.adapters.sources.base import ID_FIELDS, TEXT_FIELDS, Admission, Document, ScanReport, encode_text, pick_field

__all__ = ["JsonlSource"]


class JsonlSource:
    """Each line is an object with an id key (``id_field`` or the first of id, doc_id, _id), a text
    key (``text_field`` or the first of text, content, body) and optional metadata keys. Blank
    lines are ignored; a line that is not a JSON object is a bad document with id ``line:N``."""

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("id_field", "text_field", "metadata_fields")

    def __init__(self, cfg: SourceConfig, path: Path) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        self.path = path

    def describe(self) -> str:
        id_f = self.cfg.id_field or "/".join(ID_FIELDS)
        text_f = self.cfg.text_field or "/".join(TEXT_FIELDS)
        return f"JSONL file {self.path} (id: {id_f}, text: {text_f})"

    def no_cursor_reason(self) -> str:
        try:
            size = f" ({self.path.stat().st_size / 1e6:,.1f} MB)"
        except OSError:
            size = ""
        return (f"a JSON Lines file has no cursor: every sync reads all of {self.path.name}{size}; a folder, a change "
                "log (source.kind: changelog), or Parquet/PostgreSQL with source.cursor read only what changed")

    def _open(self) -> IO[bytes]:
        try:
            if self.path.name.endswith(".gz"):
                return gzip.open(self.path, "rb")
            return self.path.open("rb")
        except OSError as err:
            raise SourceError(f"cannot read source {self.path}: {err.strerror or err}") from None

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        admission = Admission(report, unit="line", keep=keep)
        with self._open() as f:
            try:
                for n, raw in enumerate(f, 1):
                    if not raw.strip():
                        continue
                    doc = self._row(admission, n, raw)
                    if doc is not None:
                        yield doc
            except (OSError, EOFError) as err:
                raise SourceError(f"cannot read source {self.path}: {err}") from None

    def _row(self, admission: Admission, n: int, raw: bytes) -> Document | None:
        where = f"line:{n}"
        obj = admission.json_object(where, raw, "line")
        if obj is None:
            return None

        id_key = pick_field(list(obj), self.cfg.id_field, ID_FIELDS)
        doc_id = obj.get(id_key) if id_key is not None else None
        if doc_id is None:
            looked = self.cfg.id_field or ", ".join(ID_FIELDS)
            admission.reject(where, f"missing id field (looked for {looked})")
            return None
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
            admission.reject(where, f"malformed: id field {id_key!r} must be a string or integer, got {type(doc_id).__name__}")
            return None
        doc_id = str(doc_id)
        if not doc_id.strip():
            admission.reject(where, f"malformed: id field {id_key!r} is empty ({doc_id!r}); every document needs a non-empty id")
            return None
        if admission.skip(doc_id, n):
            return None

        text_key = pick_field(list(obj), self.cfg.text_field, TEXT_FIELDS)
        text = obj.get(text_key) if text_key is not None else None
        if text is None:
            looked = self.cfg.text_field or ", ".join(TEXT_FIELDS)
            admission.reject(doc_id, f"missing text field (looked for {looked})")
            return None
        if not isinstance(text, str):
            admission.reject(doc_id, f"malformed: text field {text_key!r} must be a string, got {type(text).__name__}")
            return None
        data, problem = encode_text(text)
        if data is None:
            admission.reject(doc_id, problem or "not valid UTF-8")
            return None
        metadata = tuple((k, obj.get(k)) for k in self.cfg.metadata_fields)
        return admission.admit(doc_id, data, n, metadata=metadata)
