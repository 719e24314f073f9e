"""A PostgreSQL table (``source: postgresql://HOST:PORT/DB?table=docs`` or ``{uri: postgresql://…, table: docs,
cursor: updated_at}``): the one module that imports psycopg.

Rows have an id column, a text column (text or bytea), optional metadata columns and, for syncs that read
only what changed, a monotonic cursor column (``source.cursor``, e.g. ``updated_at`` set by the writer or a
trigger). A sync reads the rows whose cursor is at or past the highest value the population holds (``>=``:
rows that tie with the mark are read again and told apart by their content hash); removals come from a
tombstone column (``source.deleted_field``) or an id-only scan.

No credential is ever in the config: the user comes from ``?user=`` or ``PGUSER``, the password from the
environment (``PGPASSWORD``, or the variable ``source.password_env`` names); a password in the URL is refused
when the config is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from reindex.domain.config import SourceConfig
from reindex.errors import SourceError
from reindex.adapters.sources.base import ID_FIELDS, TEXT_FIELDS, Admission, Document, ScanReport, pick_field
from reindex.adapters.sources.cursors import Changes, Cursor
from reindex.adapters.sources.marks import ids_digest

__all__ = ["PostgresSource", "is_postgres_uri"]

SCHEMES = ("postgresql", "postgres")
FETCH_IDS = 1000  # ids per query when a scan reads the texts of some ids only


def is_postgres_uri(uri: str) -> bool:
    return uri.split("://", 1)[0].lower() in SCHEMES and "://" in uri


class PostgresSource:
    """A table of documents in PostgreSQL (see the module docstring)."""

    #: The SourceConfig fields this kind reads besides uri and kind (``reindex validate`` refuses any other set).
    reads_fields = ("id_field", "text_field", "metadata_fields", "batch_rows", "cursor", "deleted_field", "table",
                     "password_env")

    def __init__(self, cfg: SourceConfig) -> None:
        self.cfg = cfg
        self.uri = cfg.uri
        parts = urlsplit(cfg.uri)
        params = parse_qsl(parts.query, keep_blank_values=True)
        table = next((v for k, v in params if k == "table"), None) or cfg.table
        if not table:
            raise SourceError(f"source {self._where(parts)}: no table; add ?table=NAME to the uri or set source.table")
        self.table = table
        self._conninfo = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in params if k != "table"])))
        self._place = self._where(parts)
        columns = self._column_types()
        names = list(columns)
        self.id_column = self._pick(names, cfg.id_field, ID_FIELDS, "id", "id_field")
        self.text_column = self._pick(names, cfg.text_field, TEXT_FIELDS, "text", "text_field")
        for option in ("cursor", "deleted_field"):
            column = getattr(cfg, option)
            if column is not None and column not in names:
                raise SourceError(f"{self.describe()}: source.{option} column {column!r} not found; columns are "
                                  f"{', '.join(names)}")
        missing = [c for c in cfg.metadata_fields if c not in names]
        if missing:
            raise SourceError(f"{self.describe()}: metadata column(s) {', '.join(map(repr, missing))} not found; "
                              f"columns are {', '.join(names)}")
        self.cursor_kind = "mark" if cfg.cursor else None

    @staticmethod
    def _where(parts) -> str:
        host = parts.hostname or "localhost"
        return f"postgresql://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"

    def describe(self) -> str:
        more = f", cursor: {self.cfg.cursor}" if self.cfg.cursor else ""
        return f"PostgreSQL table {self.table} at {self._place} (id: {getattr(self, 'id_column', '?')}, " \
               f"text: {getattr(self, 'text_column', '?')}{more})"

    def no_cursor_reason(self) -> str:
        return (f"PostgreSQL table {self.table} has no source.cursor: every sync reads the whole table (name a "
                "monotonic column, e.g. updated_at, to read only the rows past it)")

    # -- connection and queries -------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection:
        kwargs: dict[str, Any] = {"connect_timeout": 10}
        if self.cfg.password_env:
            password = os.environ.get(self.cfg.password_env)
            if password is None:
                raise SourceError(f"{self._place}: source.password_env names {self.cfg.password_env}, which is not set; "
                                  "export it with the database password")
            kwargs["password"] = password
        try:
            conn = psycopg.connect(self._conninfo, **kwargs)
            conn.read_only = True
            conn.execute("SET TIME ZONE 'UTC'")
            return conn
        except psycopg.Error as err:
            raise SourceError(f"cannot connect to {self._place}: {_one_line(err)}; check that the server is reachable, "
                              "the user (?user= or PGUSER) and the password (PGPASSWORD or source.password_env)") from None

    def _table(self) -> sql.Composable:
        return sql.Identifier(*self.table.split(".", 1))

    def _run(self, what: str, fn: Callable[[psycopg.Connection], Any]) -> Any:
        conn = self._connect()
        try:
            return fn(conn)
        except psycopg.Error as err:
            raise SourceError(f"{what} of {self.describe()} failed: {_one_line(err)}") from None
        finally:
            conn.close()

    def _column_types(self) -> dict[str, str]:
        def op(conn: psycopg.Connection) -> dict[str, str]:
            rows = conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                [self.table]).fetchall()
            return {name: kind for name, kind in rows}

        return self._run("reading the columns", op)

    def _pick(self, names: list[str], configured: str | None, defaults: tuple[str, ...], what: str, option: str) -> str:
        found = pick_field(names, configured, defaults)
        if found is not None:
            return found
        looked = repr(configured) if configured else ", ".join(defaults)
        raise SourceError(f"PostgreSQL table {self.table} at {self._place}: no {what} column ({looked}); columns are "
                          f"{', '.join(names)}; set source.{option}")

    def _select_columns(self, extra: list[str]) -> list[str]:
        meta = [c for c in self.cfg.metadata_fields if c not in (self.id_column, self.text_column)]
        return list(dict.fromkeys([self.id_column, self.text_column, *meta, *extra]))

    def _rows(self, conn: psycopg.Connection, query: sql.Composable, params: Any = None) -> Iterator[tuple]:
        """Rows of ``query`` through a server-side cursor, ``batch_rows`` at a time (what a sync reads)."""
        with conn.cursor(name="reindex_read") as cur:
            cur.itersize = self.cfg.batch_rows
            cur.execute(query, params)
            yield from cur

    def _document(self, admission: Admission, n: int, row: dict[str, Any]) -> Document | None:
        doc_id = row[self.id_column]
        if doc_id is None:
            admission.reject(f"row:{n}", f"missing id (null {self.id_column!r})")
            return None
        doc_id = str(doc_id)
        if not doc_id.strip():
            admission.reject(f"row:{n}", f"malformed: id column {self.id_column!r} is empty ({doc_id!r})")
            return None
        if admission.skip(doc_id, n):
            return None
        text = row[self.text_column]
        if text is None:
            admission.reject(doc_id, f"missing text (null {self.text_column!r})")
            return None
        data = admission.column_text(doc_id, text, self.text_column)
        if data is None:
            return None
        return admission.admit(doc_id, data, n, metadata=tuple((c, row[c]) for c in self.cfg.metadata_fields))

    def _live(self) -> sql.Composable:
        """The condition of rows that are documents (not tombstones)."""
        tomb = self.cfg.deleted_field
        return sql.SQL("NOT COALESCE({}, false)").format(sql.Identifier(tomb)) if tomb else sql.SQL("true")

    # -- the full read ---------------------------------------------------------------------------------

    def scan(self, report: ScanReport | None = None, keep: Callable[[str], bool] | None = None) -> Iterator[Document]:
        """Every row in id order; with ``keep``, the ids are read first and only the kept rows' texts."""
        admission = Admission(report, unit="row", keep=keep)
        cols = self._select_columns([])
        query = sql.SQL("SELECT {} FROM {}").format(_select_list(cols), self._table())
        id_col = sql.Identifier(self.id_column)
        conn = self._connect()
        try:
            if keep is None:
                rows = self._rows(conn, sql.SQL("{} WHERE {} ORDER BY {}").format(query, self._live(), id_col))
                for n, values in enumerate(rows, 1):
                    doc = self._document(admission, n, dict(zip(cols, values)))
                    if doc is not None:
                        yield doc
                return
            ids = [v for (v,) in self._rows(conn, sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {}").format(
                id_col, self._table(), self._live(), id_col))]
            wanted = [v for v in ids if v is None or keep(str(v))]
            for i in range(0, len(wanted), FETCH_IDS):
                some = [v for v in wanted[i : i + FETCH_IDS] if v is not None]
                for n, values in enumerate(self._rows(conn, sql.SQL("{} WHERE {} = ANY(%s) ORDER BY {}").format(
                        query, id_col, id_col), [some]), i + 1):
                    doc = self._document(admission, n, dict(zip(cols, values)))
                    if doc is not None:
                        yield doc
        except psycopg.Error as err:
            raise SourceError(f"cannot read {self.describe()}: {_one_line(err)}") from None
        finally:
            conn.close()

    # -- the cursor: the highest value of source.cursor the population holds ---------------------------

    def position(self) -> Cursor:
        """The cursor column's maximum (one aggregate; an index on the column makes it one lookup)."""
        col = sql.Identifier(self.cfg.cursor)

        def op(conn: psycopg.Connection) -> str | None:
            return conn.execute(sql.SQL("SELECT max({})::text FROM {}").format(col, self._table())).fetchone()[0]

        return Cursor.of("mark", {"mark": self._run("reading the cursor's maximum", op)})

    def changes(self, since: Cursor, report: ScanReport) -> Changes:
        """Rows whose cursor is at or past ``since``'s mark (and rows whose cursor is null), in cursor order;
        removals from the tombstone column among them, else from an id-only scan."""
        mark = since.position.get("mark")
        col, tomb = sql.Identifier(self.cfg.cursor), self.cfg.deleted_field
        admission = Admission(report, unit="row")
        cols = self._select_columns([tomb] if tomb else [])
        where = sql.SQL("{} >= %s OR {} IS NULL").format(col, col) if mark is not None else sql.SQL("true")
        # The mark travels as text (in the session's UTC) and PostgreSQL compares it in the column's own type.
        query = sql.SQL("SELECT {}, {}::text FROM {} WHERE {} ORDER BY {}, {}").format(
            _select_list(cols), col, self._table(), where, col, sql.Identifier(self.id_column))
        docs: list[Document] = []
        deleted: set[str] = set()
        listed: list[str] | None = None
        top, size = mark, 0
        conn = self._connect()
        try:
            rows = self._rows(conn, query, [mark] if mark is not None else None)
            for n, values in enumerate(rows, 1):
                row = dict(zip(cols, values))
                top = values[-1] if values[-1] is not None else top
                if tomb and row[tomb]:
                    if row[self.id_column] is not None:
                        deleted.add(str(row[self.id_column]))
                    continue
                doc = self._document(admission, n, row)
                if doc is not None:
                    docs.append(doc)
                    size += doc.size
            if not tomb:
                id_col = sql.Identifier(self.id_column)
                listed = [str(v) for (v,) in self._rows(conn, sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                    id_col, self._table(), id_col)) if v is not None]
                size += sum(len(i) for i in listed)
        except psycopg.Error as err:
            raise SourceError(f"cannot read {self.describe()}: {_one_line(err)}") from None
        finally:
            conn.close()
        how = (f"read {len(docs) + len(deleted):,} rows at or past {self.cfg.cursor} {mark}"
               + (f", the id column for removals ({len(listed):,} ids)" if listed is not None else ""))
        return Changes.of(docs, listed, deleted, Cursor.of("mark", {"mark": top}), size, how,
                          ids_digest(listed) if listed is not None else "")


def _select_list(cols: list[str]) -> sql.Composable:
    return sql.SQL(", ").join(map(sql.Identifier, cols))


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__
