"""Documents, bad documents, the scan report and the Source protocol.

Every source yields :class:`Document` values (doc id, raw UTF-8 bytes, content hash) in a
deterministic order. Input that cannot become a document is a :class:`BadDocument` in the
:class:`ScanReport`: counted with its id and reason, never silently dropped, never fatal to the scan.
"""

from __future__ import annotations

import json
import itertools
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reindex.domain.identity import document_hash

__all__ = [
    "Admission", "BadDocument", "DEFAULT_MEDIA_TYPE", "Document", "ID_FIELDS", "MEDIA_TYPES", "ScanReport",
    "Source", "TEXT_FIELDS", "check_data", "encode_text", "media_type_for", "pick_field", "special_file_kind",
    "title_of",
]

# Media types a document can have, chosen from its name's suffix.
MEDIA_TYPES = {
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".rst": "text/x-rst",
    ".html": "text/html",
    ".htm": "text/html",
}
DEFAULT_MEDIA_TYPE = "text/plain"

# Default id and text keys/columns, first present wins.
ID_FIELDS = ("id", "doc_id", "_id")
TEXT_FIELDS = ("text", "content", "body")

# Bad-document kinds: the fixed start of a reason string → the kind it is counted under.
_KINDS = (
    ("binary", "binary"),
    ("not valid UTF-8", "not-utf8"),
    ("empty", "empty"),
    ("duplicate id", "duplicate-id"),
    ("unreadable", "unreadable"),
    ("outside the source", "outside-source"),
    ("missing text", "missing-text"),
    ("missing id", "missing-id"),
    ("malformed", "malformed"),
)

Metadata = tuple[tuple[str, Any], ...]


def special_file_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is (``a FIFO``, ``a socket``, …), from its
    ``st_mode``; None for regular files and folders. Sources refuse these without opening them: opening a
    FIFO for reading waits for a writer forever, and a device never ends."""
    import stat

    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "an unknown kind of file"


def media_type_for(name: str) -> str:
    """Media type from a file name or doc id suffix (``text/plain`` when unknown)."""
    return MEDIA_TYPES.get(posixpath.splitext(name)[1].lower(), DEFAULT_MEDIA_TYPE)


@dataclass(frozen=True, slots=True)
class Document:
    """One document as read from the source: raw UTF-8 bytes, not yet extracted or normalised.

    ``content_hash`` is what change detection compares: the bytes' digest, combined with the metadata's
    when the document carries any (:func:`reindex.domain.identity.document_hash`)."""

    doc_id: str
    data: bytes
    content_hash: str
    size: int
    media_type: str = DEFAULT_MEDIA_TYPE
    metadata: Metadata = ()

    @classmethod
    def of(
        cls, doc_id: str, data: bytes, media_type: str | None = None, metadata: Mapping[str, Any] | Metadata = ()
    ) -> Document:
        """A document with its hash and size computed; media type from the id's suffix by default."""
        items = metadata.items() if isinstance(metadata, Mapping) else metadata
        frozen = tuple((str(k), _freeze(v)) for k, v in items)
        return cls(
            doc_id=doc_id,
            data=data,
            content_hash=document_hash(data, frozen),
            size=len(data),
            media_type=media_type or media_type_for(doc_id),
            metadata=frozen,
        )

    def meta(self) -> dict[str, Any]:
        """Metadata as a dict."""
        return dict(self.metadata)


@dataclass(frozen=True, slots=True)
class BadDocument:
    """Input that could not become a document: its id (or ``line:N`` / ``row:N``) and why."""

    doc_id: str
    reason: str

    @property
    def kind(self) -> str:
        """A short, stable category of the reason (``binary``, ``not-utf8``, ``empty``, …)."""
        for start, kind in _KINDS:
            if self.reason.startswith(start):
                return kind
        return "other"


@dataclass
class ScanReport:
    """Filled while a source is scanned: what was read, what was bad and why."""

    documents: int = 0
    bytes: int = 0
    skipped: int = 0  # files or objects whose names match no include pattern
    bad: list[BadDocument] = field(default_factory=list)
    by_reason: Counter[str] = field(default_factory=Counter)

    def add(self, doc: Document) -> None:
        self.documents += 1
        self.bytes += doc.size

    def add_bad(self, bad: BadDocument) -> None:
        self.bad.append(bad)
        self.by_reason[bad.kind] += 1

    def summary(self) -> str:
        """One line: ``693 documents (4.1 MB), 2 bad (binary: 1, empty: 1)``."""
        line = f"{self.documents} documents ({_human_bytes(self.bytes)}), {len(self.bad)} bad"
        if self.by_reason:
            line += " (" + ", ".join(f"{k}: {n}" for k, n in sorted(self.by_reason.items())) + ")"
        if self.skipped:
            line += f", {self.skipped} skipped by include patterns"
        return line

    def as_dict(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "bytes": self.bytes,
            "skipped": self.skipped,
            "bad": [{"doc_id": b.doc_id, "reason": b.reason} for b in self.bad],
            "by_reason": dict(sorted(self.by_reason.items())),
        }


@runtime_checkable
class Source(Protocol):
    """A corpus: yields documents in a deterministic order."""

    uri: str

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        """Documents in a stable order; bad input goes into ``report`` and the scan goes on. With
        ``keep``, only documents whose id it accepts are read (others are skipped unread)."""
        ...

    def describe(self) -> str:
        """What and where the source is, for messages and reports (never credentials)."""
        ...


def check_data(data: bytes) -> str | None:
    """Why ``data`` cannot be a text document, or None if it can."""
    if not data:
        return "empty"
    nul = data.find(b"\0")
    if nul >= 0:
        return f"binary (NUL bytes, first at byte {nul})"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"not valid UTF-8 at byte {err.start}"
    if not text.strip():
        return "empty (whitespace only)"
    return None


def encode_text(text: str) -> tuple[bytes | None, str | None]:
    """UTF-8 bytes of a text field, or the reason it has none (lone surrogates from JSON escapes)."""
    try:
        return text.encode("utf-8"), None
    except UnicodeEncodeError as err:
        return None, f"not valid UTF-8: unpaired surrogate at character {err.start}"


def pick_field(names: Sequence[str], configured: str | None, defaults: Sequence[str]) -> str | None:
    """The configured field if present, else the first default present, else None."""
    if configured is not None:
        return configured if configured in names else None
    return next((f for f in defaults if f in names), None)


class Admission:
    """Turns candidate records into documents or bad documents, once per scan: validates bytes,
    keeps the first occurrence of an id and reports later ones. Memory grows with the number of
    ids only (an id and the position it was first seen at)."""

    def __init__(self, report: ScanReport | None, unit: str = "item",
                 keep: Callable[[str], bool] | None = None) -> None:
        self.report = report if report is not None else ScanReport()
        self.unit = unit  # what positions count: "line", "row", "item"
        self.keep = keep
        self._first_seen: dict[str, int] = {}

    def skip(self, doc_id: str, position: int) -> bool:
        """True when the scan does not want ``doc_id`` (``keep`` says no): its bytes need not be read,
        decoded or hashed. The id still counts for duplicate detection, so a duplicate is reported
        whichever scan holds its first occurrence."""
        if self.keep is None or self.keep(doc_id):
            return False
        first = self._first_seen.get(doc_id)
        if first is not None:
            self.reject(doc_id, f"duplicate id (first seen at {self.unit} {first}, again at {self.unit} {position})")
        else:
            self._first_seen[doc_id] = position
        return True

    def reject(self, doc_id: str, reason: str) -> None:
        self.report.add_bad(BadDocument(doc_id, reason))

    def json_object(self, where: str, raw: bytes, what: str = "line") -> dict | None:
        """One JSON object of a line-oriented source (a JSON Lines row, a change-log entry), or None after
        reporting at ``where`` why ``raw`` is not one (``what``: how the message names the unit)."""
        try:
            obj: Any = json.loads(raw)
        except UnicodeDecodeError as err:
            self.reject(where, f"not valid UTF-8 at byte {err.start} of the {what}")
            return None
        except ValueError as err:
            self.reject(where, f"malformed JSON: {err}")
            return None
        except RecursionError:
            self.reject(where, "malformed JSON: nested deeper than Python's JSON reader reads (about 1,000 levels)")
            return None
        if not isinstance(obj, dict):
            self.reject(where, f"malformed: expected a JSON object, got {type(obj).__name__}")
            return None
        return obj

    def column_text(self, doc_id: str, value: Any, column: str) -> bytes | None:
        """The UTF-8 bytes of a table source's text cell (bytes as they are, text encoded), or None after
        reporting why ``doc_id``'s cell in ``column`` holds no text."""
        if isinstance(value, (bytes, memoryview)):
            return bytes(value)
        if isinstance(value, str):
            data, problem = encode_text(value)
            if data is None:
                self.reject(doc_id, problem or "not valid UTF-8")
            return data
        self.reject(doc_id, f"malformed: text column {column!r} holds {type(value).__name__}, not text")
        return None

    def admit(
        self,
        doc_id: str,
        data: bytes,
        position: int,
        media_type: str | None = None,
        metadata: Mapping[str, Any] | Metadata = (),
    ) -> Document | None:
        """The document, or None after reporting why it is bad. ``position`` (1-based line, row or
        item number) locates it in duplicate messages."""
        first = self._first_seen.get(doc_id)
        if first is not None:
            self.reject(doc_id, f"duplicate id (first seen at {self.unit} {first}, again at {self.unit} {position})")
            return None
        self._first_seen[doc_id] = position
        problem = check_data(data)
        if problem is not None:
            self.reject(doc_id, problem)
            return None
        doc = Document.of(doc_id, data, media_type, metadata)
        self.report.add(doc)
        return doc


_RST_UNDERLINE = re.compile(r"^([=\-~^*#+`:.'\"_])\1+\s*$")
_HTML_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_RST_TITLE_FIELD = re.compile(r"^:?Title:\s*(\S.*?)\s*$")  # PEP headers (``Title: …``), docinfo (``:Title: …``)


def title_of(name: str, data: bytes) -> str:
    """A document's title, by one rule per media type: HTML ``<title>``; Markdown the first ``# `` heading;
    reStructuredText a ``Title:`` (or ``:Title:``) field in the header block before the first blank line
    (PEPs, docinfo), else the first line underlined with a repeated punctuation character (at least as
    long); otherwise, or when none is found, the file name without its suffix."""
    media = media_type_for(name)
    stem = posixpath.splitext(posixpath.basename(name))[0]
    head = data[:65536]
    if media == "text/html":
        m = _HTML_TITLE.search(head)
        title = " ".join(m.group(1).decode("utf-8", "replace").split()) if m else ""
        return title or stem
    lines = head.decode("utf-8", "replace").splitlines()
    if media == "text/markdown":
        for line in lines:
            if line.startswith("# "):
                return line[2:].strip().rstrip("#").strip() or stem
    elif media == "text/x-rst":
        for line in itertools.takewhile(lambda s: s.strip(), lines):
            if m := _RST_TITLE_FIELD.match(line):
                return m.group(1)
        for line, under in itertools.pairwise(lines):
            text = line.strip()
            if text and not _RST_UNDERLINE.match(line) and _RST_UNDERLINE.match(under) and len(under.strip()) >= len(text):
                return text
    return stem


def _freeze(value: Any) -> Any:
    """Hashable form of a metadata value (lists → tuples, mappings → sorted item tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")
