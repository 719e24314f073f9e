"""The Embedder protocol."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from typing import Protocol, TextIO, runtime_checkable

import numpy as np

__all__ = ["EmbedResult", "Embedder", "Preparing"]


@dataclass(frozen=True, slots=True)
class EmbedResult:
    """Vectors for a batch of texts, in order, and how many inputs the model truncated."""

    vectors: np.ndarray  # float32, shape (n, dimension)
    truncated: int
    tokens: int  # model tokens of the inputs (before truncation)


@runtime_checkable
class Embedder(Protocol):
    """Embeds texts with one model; the vector half it implements decides the vectors."""

    dimension: int
    max_tokens: int | None  # input limit in model tokens (without special tokens), if known

    def embed(self, texts: list[str]) -> EmbedResult:
        """Vectors of ``texts`` (prefix applied, normalised if the vector half says so)."""
        ...


class Preparing:
    """Says, on standard error, what a long one-time piece of model work is doing (a distillation, an export), why,
    what it is expected to cost, how far it got (every tenth of the way) and what it cost: whichever command
    triggers it, so that nobody waits minutes on a silent command. Also a stream for a library's progress bar
    (``write``: the ``n/total`` counts of tqdm's lines become progress)."""

    _COUNTS = re.compile(r"(\d+)/(\d+)")

    def __init__(self, what: str, why: str, expected: str, *, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.what = what
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self._step = 0
        self._say(f"{what}: {why}. Expected {expected}; done once, then cached.")

    def _say(self, line: str) -> None:
        try:
            print(f"reindex: {line}", file=self.out, flush=True)
        except (OSError, ValueError):
            pass  # a closed or broken stream: the work goes on

    def progress(self, done: int, total: int) -> None:
        """``done`` of ``total`` units: said at each further tenth, with the time so far and an estimate of the rest."""
        if total <= 0:
            return
        step = min(10, done * 10 // total)
        if step <= self._step:
            return
        self._step = step
        wall = time.perf_counter() - self.t0
        rest = wall * (total - done) / done if done else 0.0
        self._say(f"{self.what}: {step * 10}% ({done:,}/{total:,}), {wall:.0f} s so far"
                  + (f", about {rest:.0f} s to go" if done < total else ""))

    def write(self, text: str) -> int:
        """A progress bar's output (tqdm writes ``… n/total …``): its latest counts become :meth:`progress`."""
        found = self._COUNTS.findall(text)
        if found:
            done, total = found[-1]
            self.progress(int(done), int(total))
        return len(text)

    def flush(self) -> None:
        pass

    def finished(self, where: str) -> None:
        self._say(f"{self.what}: done in {time.perf_counter() - self.t0:.0f} s ({time.process_time() - self.c0:.0f} "
                  f"CPU-s of this process); kept in {where}")
