"""A change log (``source: {kind: changelog, uri: log.jsonl}``): an append-only JSON Lines file of upserts and
deletes, ``{"op": "upsert", "doc_id": …, "text": …, <metadata>…}`` / ``{"op": "delete", "doc_id": …}``.

The corpus is the fold of the log: each id's last entry wins, an upsert holds the document, a delete removes
it. A sync reads the log from the byte offset the population holds (its cursor) to the last complete line;
a partly written last line waits for the next sync. The cursor keeps a digest of the bytes just before its
offset: a log rewritten or truncated under it is refused with a way out (``reindex sync --verify``), never
read from a wrong place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.adapters.sources.base import ID_FIELDS, TEXT_FIELDS, Admission, Document, ScanReport, encode_text, pick_field
from reindex.adapters.sources.cursors import Changes, Cursor

__all__ = ["ChangelogSource"]

TAIL_BYTES = 4096  # the bytes before the offset whose digest the cursor keeps
OPS = ("upsert", "delete")


class ChangelogSource:
    """An append-only log of upserts and deletes; documents are the fold of the log (see the module)."""

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("id_field", "text_field", "metadata_fields")

    cursor_kind = "offset"

    def __init__(self, cfg: SourceConfig, path: Path) -> None:
        if path.name.lower().endswith(".gz"):
            raise SourceError(f"change log {path}: a gzipped log cannot be read from an offset; keep it uncompressed")
        self.cfg = cfg
        self.uri = cfg.uri
        self.path = path

    def describe(self) -> str:
        return f"change log {self.path} (id: {self.cfg.id_field or '/'.join(ID_FIELDS)}, text: " \
               f"{self.cfg.text_field or '/'.join(TEXT_FIELDS)})"

    def _open(self) -> IO[bytes]:
        try:
            return self.path.open("rb")
        except OSError as err:
            raise SourceError(f"cannot read change log {self.path}: {err.strerror or err}") from None

    def _end(self, f: IO[bytes]) -> int:
        """The offset just past the last complete line (a line still being written is left for later). Read
        backwards in blocks from 4 KB, doubling up to 64 KB: the last line is usually short (a sync read 64 KB
        for it, beside the few KB it applied)."""
        size = f.seek(0, 2)
        pos, step = size, 4096
        while pos > 0:
            step = min(step, pos)
            f.seek(pos - step)
            block = f.read(step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                return pos - step + nl + 1
            pos -= step
            step = min(step * 2, 65536)
        return 0

    @staticmethod
    def _tail(f: IO[bytes], offset: int) -> str:
        f.seek(max(0, offset - TAIL_BYTES))
        return hashlib.blake2b(f.read(min(offset, TAIL_BYTES)), digest_size=16).hexdigest()

    def _lines(self, f: IO[bytes], start: int, end: int) -> Iterator[tuple[int, bytes]]:
        """(offset, line) of the complete lines in [start, end)."""
        f.seek(start)
        pos = start
        while pos < end:
            raw = f.readline()
            if not raw:
                break
            yield pos, raw
            pos += len(raw)

    def position(self) -> Cursor:
        """The log's end (its last complete line) and the digest of the bytes before it."""
        with self._open() as f:
            end = self._end(f)
            return Cursor.of("offset", {"offset": end, "tail": self._tail(f, end)})

    # -- the fold -----------------------------------------------------------------------------------------

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        """The documents of the whole log's fold, in the order of their last entries (two passes: the last
        entry of each id, then those entries read again by offset)."""
        admission = Admission(report, unit="byte")
        with self._open() as f:
            end = self._end(f)
            last = self._fold(f, 0, end, admission, keep)
            for offset in sorted(o for o, op in last.values() if op == "upsert"):
                f.seek(offset)
                doc = self._document(admission, offset, f.readline())
                if doc is not None:
                    yield doc

    def _fold(self, f: IO[bytes], start: int, end: int, admission: Admission,
              keep: Callable[[str], bool] | None = None) -> dict[str, tuple[int, str]]:
        """doc id → (offset, op) of its last valid entry in [start, end); malformed entries are reported."""
        last: dict[str, tuple[int, str]] = {}
        for offset, raw in self._lines(f, start, end):
            if not raw.strip():
                continue
            entry = self._entry(admission, offset, raw)
            if entry is None:
                continue
            doc_id, op, _ = entry
            if keep is not None and not keep(doc_id):
                continue
            last.pop(doc_id, None)  # insertion order = order of last entries
            last[doc_id] = (offset, op)
        return last

    def _entry(self, admission: Admission, offset: int, raw: bytes) -> tuple[str, str, dict] | None:
        """(doc id, op, object) of one line, or None after reporting why it is not an entry."""
        where = f"byte:{offset}"
        obj = admission.json_object(where, raw, "entry")
        if obj is None:
            return None
        op = obj.get("op", "upsert")
        if op not in OPS:
            admission.reject(where, f"malformed: op {op!r}; expected upsert or delete")
            return None
        id_key = pick_field(list(obj), self.cfg.id_field, ID_FIELDS)
        doc_id = obj.get(id_key) if id_key is not None else None
        if doc_id is None or isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
            admission.reject(where, f"missing id field (looked for {self.cfg.id_field or ', '.join(ID_FIELDS)})")
            return None
        return str(doc_id), op, obj

    def _document(self, admission: Admission, offset: int, raw: bytes) -> Document | None:
        entry = self._entry(admission, offset, raw)
        if entry is None:
            return None
        doc_id, _, obj = entry
        text_key = pick_field(list(obj), self.cfg.text_field, TEXT_FIELDS)
        text = obj.get(text_key) if text_key is not None else None
        if not isinstance(text, str):
            looked = self.cfg.text_field or ", ".join(TEXT_FIELDS)
            admission.reject(doc_id, f"missing text field (looked for {looked})" if text is None else
                             f"malformed: text field {text_key!r} must be a string, got {type(text).__name__}")
            return None
        data, problem = encode_text(text)
        if data is None:
            admission.reject(doc_id, problem or "not valid UTF-8")
            return None
        metadata = tuple((k, obj.get(k)) for k in self.cfg.metadata_fields)
        return admission.admit(doc_id, data, offset, metadata=metadata)

    # -- the cursor: the offset the population holds ------------------------------------------------------

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """The entries from ``since``'s offset to the log's last complete line, folded: each id's last upsert
        is read, each id whose last entry is a delete is removed."""
        start = int(since.position.get("offset", 0))
        admission = Admission(report, unit="byte")
        with self._open() as f:
            size = f.seek(0, 2)
            if size < start or self._tail(f, start) != since.position.get("tail"):
                raise SourceError(
                    f"change log {self.path} was rewritten or truncated before offset {start:,}, where the population's "
                    "cursor stands (a log is only appended to); run `reindex sync --verify` to read it whole and "
                    "record a new cursor")
            end = self._end(f)
            last = self._fold(f, start, end, admission)
            docs, deleted = [], set()
            for doc_id, (offset, op) in last.items():
                if op == "delete":
                    deleted.add(doc_id)
                    continue
                f.seek(offset)
                doc = self._document(admission, offset, f.readline())
                if doc is not None:
                    docs.append(doc)
            cursor = Cursor.of("offset", {"offset": end, "tail": self._tail(f, end)})
        how = f"read the log from offset {start:,} to {end:,} ({end - start:,} bytes, {len(last):,} documents changed)"
        return Changes.of(docs, None, deleted, cursor, end - start, how)
