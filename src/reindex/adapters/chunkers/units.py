"""Units: sentences (or small sentence groups) that partition one chunk's text exactly — what
``vector.compose: units`` embeds and ``reindex measure --unit`` counts.

A unit ends at a sentence end (``.``/``!``/``?`` followed by whitespace, or ``。！？`` with none needed) or at a
line break; whitespace after the end belongs to the unit before, as between chunks. A piece shorter than
``min_tokens`` joins the pieces after it until the group holds ``min_tokens`` (a last short group joins the
one before), so a heading line or a one-token list marker is not an input of its own. Every decision reads
only the chunk's own text: an edit changes the units it touches and, through the grouping, at most its
neighbours; units never cross a chunk boundary, so a chunk's vector is composed from its own units.

Every cut lies at whitespace or just after punctuation, where BERT-style pre-tokenizers split anyway: the
tokens of a chunk are the tokens of its units one after the other (checked for the static model over every
chunk of a corpus in the tests)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from reindex.adapters.chunkers._segments import UNIT_END, Doc
from reindex.adapters.tokenizers import Tokenizer
from reindex.errors import ConfigError

__all__ = ["DEFAULT_UNIT_MIN_TOKENS", "UnitSpec", "parse_unit_spec", "unit_spans", "unit_texts"]

DEFAULT_UNIT_MIN_TOKENS = 8


@dataclass(frozen=True, slots=True)
class UnitSpec:
    """How chunks are cut into units: ``sentence`` (groups of at least ``min_tokens``) or ``chunk`` (the
    chunk is its own single unit: unit-level reuse is then chunk-level reuse)."""

    kind: Literal["sentence", "chunk"] = "sentence"
    min_tokens: int = DEFAULT_UNIT_MIN_TOKENS

    def __str__(self) -> str:
        return "chunk" if self.kind == "chunk" else f"sentence:min={self.min_tokens}"


_SPEC = re.compile(r"^(sentence|chunk)(?::min=(\d+))?$")


def parse_unit_spec(spec: str | UnitSpec) -> UnitSpec:
    """``sentence``, ``sentence:min=N`` or ``chunk`` (ConfigError naming the forms otherwise)."""
    if isinstance(spec, UnitSpec):
        return spec
    m = _SPEC.match(spec.strip())
    if not m or (m.group(1) == "chunk" and m.group(2) is not None):
        raise ConfigError(f"unit {spec!r}: expected sentence, sentence:min=N (tokens, default "
                          f"{DEFAULT_UNIT_MIN_TOKENS}) or chunk")
    if m.group(1) == "chunk":
        return UnitSpec("chunk", 0)
    return UnitSpec("sentence", int(m.group(2)) if m.group(2) is not None else DEFAULT_UNIT_MIN_TOKENS)


def unit_spans(text: str, tokenizer: Tokenizer, spec: UnitSpec) -> list[tuple[int, int]]:
    """``[start, end)`` character spans of the units of one chunk's ``text``, in order: they partition it
    (the first starts at 0, each starts where the one before ends, the last ends at ``len(text)``). A blank
    text is one unit."""
    if spec.kind == "chunk" or not text:
        return [(0, len(text))]
    doc = Doc.of(text, tokenizer)
    if doc is None:
        return [(0, len(text))]
    bounds = [0, *doc.pattern_cuts(UNIT_END, 0, doc.n).tolist(), doc.n]
    cuts: list[int] = []  # token indices where a unit ends (interior)
    start = 0
    for b in bounds[1:]:
        if b - start >= spec.min_tokens:
            cuts.append(b)
            start = b
    if cuts:  # the last cut is the text's end, or a short rest after it joins the group before
        cuts.pop()
    chars = [doc.char_at(t) for t in cuts]
    edges = [0, *chars, len(text)]
    return [(a, b) for a, b in zip(edges[:-1], edges[1:])]


def unit_texts(text: str, tokenizer: Tokenizer, spec: UnitSpec) -> list[str]:
    """The texts of :func:`unit_spans`; they concatenate to ``text``."""
    return [text[a:b] for a, b in unit_spans(text, tokenizer, spec)]
