"""Splitters of our own for the bring-your-own-splitter tests, referenced by ``module:function`` in configs
(this module is on ``sys.path`` under pytest, outside any distribution, so its version is its source digest)."""

from __future__ import annotations


def paragraphs(text: str, max_chars: int = 400) -> list[str]:
    """Blank-line paragraphs, stripped (so chunks are substrings, not slices that start at the cut), and
    cut into pieces of at most ``max_chars`` characters at spaces."""
    out = []
    for para in text.split("\n\n"):
        para = para.strip()
        while len(para) > max_chars:
            cut = para.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            out.append(para[:cut].strip())
            para = para[cut:].strip()
        if para:
            out.append(para)
    return out


class Piece:
    """A chunk object with a ``text`` attribute, as chonkie returns them."""

    def __init__(self, text: str) -> None:
        self.text = text


def paragraph_objects(text: str) -> list[Piece]:
    """:func:`paragraphs` as objects with ``.text``."""
    return [Piece(p) for p in paragraphs(text)]


def collapsing(text: str) -> list[str]:
    """A splitter that rewrites whitespace (its chunks are not substrings of the document)."""
    return [" ".join(p.split()) for p in text.split("\n\n") if p.strip()]


def not_texts(text: str) -> list[int]:
    """A broken splitter: returns numbers."""
    return [len(text)]


def with_blanks(text: str) -> list[str]:
    """Paragraphs with empty and whitespace-only pieces in between (nothing to embed in those)."""
    out: list[str] = []
    for p in paragraphs(text):
        out += ["", "   ", p]
    return out


def raising(text: str) -> list[str]:
    """A splitter with a bug: it raises on documents with a heading underline."""
    if "===" in text:
        raise ValueError(f"cannot split a heading of {len(text)} characters")
    return paragraphs(text)
