"""Numbers people read: counts, compact numbers, bytes, dollars, durations, ratios, shares; capped id lists."""

from __future__ import annotations

from typing import Sequence

__all__ = ["LIST_CAP", "capped", "duration", "human_bytes", "human_number", "num", "pct", "ratio", "usd"]

LIST_CAP = 50  # ids shown per list before "… and N more"


def num(value: float | int) -> str:
    """A count with thousands separators."""
    return f"{round(value):,}"


def human_number(value: float) -> str:
    """Compact axis/card numbers: 950, 1.2 k, 3.4 M, 5.6 B."""
    v = abs(value)
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            s = f"{value / div:.1f}".rstrip("0").rstrip(".")
            return f"{s} {unit}"
    return f"{value:g}" if value != int(value) else str(int(value))


def human_bytes(n: float) -> str:
    """Human bytes: 512 B, 1.5 KiB, 3.2 MiB, 1.1 GiB."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} B" if unit == "B" else f"{v:,.1f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def usd(x: float) -> str:
    if x == 0:
        return "$0.00"
    return f"${x:.4f}" if abs(x) < 0.01 else f"${x:,.2f}"


def duration(h: float) -> str:
    """Wall clock for a manager: seconds, minutes, hours, and days when it runs that long."""
    if h <= 0:
        return "0 s"
    if h < 1 / 60:
        return f"{max(1, round(h * 3600))} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    out = f"{h:,.1f} h"
    return out + f" ({h / 24:.1f} days)" if h >= 48 else out


def ratio(old: float, new: float) -> str:
    if not old:
        return "new" if new else "—"
    return f"×{new / old:.2f}"


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "—"


def capped(items: Sequence[str], cap: int = LIST_CAP) -> tuple[list[str], int]:
    return list(items[:cap]), max(0, len(items) - cap)
