"""Revision pairs: loading them (Parquet/JSONL) or building them from git history, their edit
fraction and edit band, and selecting them by language and band."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from reindex.errors import MeasureError
from reindex.foundation.tables import TableError, read_parquet

__all__ = ["ALL", "BANDS", "BAND_NAMES", "RevisionPair", "band_of", "edit_fraction", "load_pairs", "pairs_from_git",
           "select_pairs"]

BANDS = ("<=5%", "5-20%", "20-50%", ">50%")
ALL = "all"
BAND_NAMES = (*BANDS, ALL)


@dataclass(frozen=True, slots=True)
class RevisionPair:
    """One document before and after one revision."""

    pair_id: str
    lang: str
    doc_key: str  # document identity: bootstrap resamples these, and reuse never crosses them
    doc_path: str
    old_text: str
    new_text: str
    edit_fraction: float

    @property
    def band(self) -> str:
        return band_of(self.edit_fraction)


def band_of(edit_fraction: float) -> str:
    """``<=5%``, ``5-20%``, ``20-50%`` or ``>50%`` (upper bounds inclusive, as in the corpus)."""
    if edit_fraction <= 0.05:
        return "<=5%"
    if edit_fraction <= 0.20:
        return "5-20%"
    if edit_fraction <= 0.50:
        return "20-50%"
    return ">50%"


_TOKEN = re.compile(r"[A-Za-z0-9_]+|\s+|.", re.S)


def edit_fraction(old: str, new: str) -> float:
    """Share of old+new characters not covered by a difflib alignment (the corpus README's
    definition): lines first, then each replaced block re-aligned over word/space/char tokens."""
    total = len(old) + len(new)
    if total == 0:
        return 0.0
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matched = 0
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            matched += sum(len(line) for line in a[i1:i2])
        elif tag == "replace":
            ta = _TOKEN.findall("".join(a[i1:i2]))
            tb = _TOKEN.findall("".join(b[j1:j2]))
            for t2, k1, k2, _, _ in SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes():
                if t2 == "equal":
                    matched += sum(len(t) for t in ta[k1:k2])
    return 1.0 - 2.0 * matched / total


def load_pairs(path: str | Path) -> list[RevisionPair]:
    """Read pairs from Parquet or JSONL with ``pair_id, lang, doc_path, old_text, new_text`` and
    optionally ``doc_key`` and ``edit_fraction`` (computed when absent)."""
    p = Path(path)
    if not p.is_file():
        raise MeasureError(f"{p}: pairs file not found (give a .parquet or .jsonl file of revision pairs)")
    if p.suffix.lower() == ".parquet":
        try:
            cols = read_parquet(p)
        except TableError as err:
            raise MeasureError(f"{p}: cannot read Parquet: {err}") from None
        rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
    else:
        rows = []
        with p.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        raise MeasureError(f"{p}:{n}: invalid JSON: {err.msg}") from None
    out = []
    for n, row in enumerate(rows, 1):
        missing = [k for k in ("old_text", "new_text") if not isinstance(row.get(k), str)]
        if missing:
            raise MeasureError(f"{p}: row {n} has no text column(s) {', '.join(missing)}; need pair_id, lang, doc_path, old_text, new_text")
        ef = row.get("edit_fraction")
        doc_path = str(row.get("doc_path") or row.get("pair_id") or n)
        out.append(
            RevisionPair(
                pair_id=str(row.get("pair_id") or f"pair-{n:05d}"),
                lang=str(row.get("lang") or "en"),
                doc_key=str(row.get("doc_key") or doc_path),
                doc_path=doc_path,
                old_text=row["old_text"],
                new_text=row["new_text"],
                edit_fraction=float(ef) if ef is not None else edit_fraction(row["old_text"], row["new_text"]),
            )
        )
    return out


def _git(repo: str | Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise MeasureError("git is not installed; --from-git needs the git command") from None
    if done.returncode != 0:
        msg = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise MeasureError(f"git {' '.join(args[:2])} in {repo} failed: {msg[0] if msg else done.returncode}")
    return done.stdout.decode("utf-8", "surrogateescape")


def pairs_from_git(repo: str | Path, paths: str, *, lang: str = "en", limit: int | None = None) -> list[RevisionPair]:
    """Adjacent revisions of the files matching ``paths`` (a git pathspec glob) in ``repo``: every
    non-merge commit that modified a file, paired with the file in that commit's parent. Newest
    first; pairs with identical texts or non-UTF-8 blobs are skipped."""
    if not Path(repo).is_dir():
        raise MeasureError(f"{repo}: not a folder (give a git repository for --from-git)")
    log = _git(repo, "log", "--no-merges", "--diff-filter=M", "--format=%x00%H", "--name-only", "--", f":(glob){paths}")
    pairs: list[RevisionPair] = []
    for block in log.split("\x00")[1:]:
        lines = [ln for ln in block.splitlines() if ln.strip()]
        if not lines:
            continue
        commit, files = lines[0].strip(), lines[1:]
        for path in files:
            try:
                old = _git(repo, "show", f"{commit}^:{path}").encode("utf-8", "surrogateescape").decode("utf-8")
                new = _git(repo, "show", f"{commit}:{path}").encode("utf-8", "surrogateescape").decode("utf-8")
            except (MeasureError, UnicodeDecodeError):
                continue
            if old == new:
                continue
            pairs.append(
                RevisionPair(f"git-{len(pairs):05d}", lang, path, path, old, new, edit_fraction(old, new))
            )
            if limit is not None and len(pairs) >= limit:
                return pairs
    return pairs


def select_pairs(
    pairs: Sequence[RevisionPair], *, lang: str | None = None, bands: Sequence[str] = (), limit: int | None = None
) -> list[RevisionPair]:
    """Pairs of one language and the given bands, the first ``limit`` of them (in file order)."""
    bad = [b for b in bands if b not in BANDS]
    if bad:
        raise MeasureError(f"unknown band {bad[0]!r}; allowed: {', '.join(BANDS)}")
    out = [p for p in pairs if (lang is None or p.lang == lang) and (not bands or p.band in bands)]
    return out[:limit] if limit is not None else out
