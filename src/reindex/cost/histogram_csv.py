"""Reading document-length histograms (``reindex plan --histogram FILE``).

The file is CSV with the header ``documents,tokens`` (either order) and one bucket per row:
``documents`` documents of representative length ``tokens`` tokens. Blank lines and lines starting
with ``#`` are skipped; numbers may use ``_`` as a thousands separator (``2_400_000``).
"""

from __future__ import annotations

import csv
from pathlib import Path

from reindex.cost import Bucket
from reindex.errors import ConfigError

__all__ = ["read_histogram"]

_COLUMNS = ("documents", "tokens")


def read_histogram(path: str | Path) -> list[Bucket]:
    """The buckets of a histogram file, in file order. Bad input raises ConfigError naming the
    file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # utf-8-sig: spreadsheets like to prepend a BOM
    except FileNotFoundError:
        raise ConfigError(f"{p}: histogram file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{p}: cannot read histogram: {err}") from None

    rows = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not rows:
        raise ConfigError(f"{p}: empty histogram; expected a header `documents,tokens` and one row per bucket")
    header_line, header = rows[0][0], [c.strip().lower() for c in next(csv.reader([rows[0][1]]))]
    if sorted(header) != sorted(_COLUMNS):
        raise ConfigError(
            f"{p}:{header_line}: expected the header `documents,tokens`, got `{rows[0][1].strip()}`"
        )
    where = {name: header.index(name) for name in _COLUMNS}

    buckets = []
    for number, line in rows[1:]:
        cells = [c.strip() for c in next(csv.reader([line]))]
        if len(cells) != len(header):
            raise ConfigError(f"{p}:{number}: expected 2 values (documents,tokens), got {len(cells)}: `{line.strip()}`")
        values = {}
        for name in _COLUMNS:
            cell = cells[where[name]]
            try:
                value = int(cell)
            except ValueError:
                raise ConfigError(f"{p}:{number}: {name} must be a whole number, got `{cell}`") from None
            if value < 0:
                raise ConfigError(f"{p}:{number}: {name} must be >= 0, got {value}")
            values[name] = value
        buckets.append(Bucket(documents=values["documents"], tokens=values["tokens"]))
    if not buckets:
        raise ConfigError(f"{p}: the histogram has a header but no buckets")
    return buckets
