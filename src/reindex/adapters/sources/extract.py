"""Bytes → text (the extractor) and text → normalised text (the normaliser). Both belong to the
text half: any change to what they output must bump the text id's version. Pure functions."""

from __future__ import annotations

import re
import unicodedata
from html.parser import HTMLParser

from reindex.domain.config import NormaliserConfig
from reindex.adapters.sources.base import Document

__all__ = ["HTML_MEDIA_TYPES", "extract_text", "html_to_text", "normalise"]

HTML_MEDIA_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def extract_text(doc: Document, extractor: str = "auto") -> str:
    """The text of a document. ``plain``: UTF-8 decode (a leading BOM is dropped); ``html``: visible
    text of the HTML; ``auto``: ``html`` for HTML media types, else ``plain``."""
    if extractor not in ("auto", "plain", "html"):
        raise ValueError(f"unknown extractor {extractor!r}; allowed: auto, html, plain")
    text = doc.data.decode("utf-8-sig")
    if extractor == "html" or (extractor == "auto" and doc.media_type in HTML_MEDIA_TYPES):
        return html_to_text(text)
    return text


def normalise(text: str, cfg: NormaliserConfig) -> str:
    """Apply the normaliser: newlines (CRLF/CR → LF), Unicode normal form, trailing whitespace."""
    if cfg.newlines == "lf":
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    if cfg.unicode != "none":
        text = unicodedata.normalize(cfg.unicode, text)
    if cfg.strip_trailing_whitespace:
        text = _TRAILING_WS.sub("", text)
    return text


_TRAILING_WS = re.compile(r"[ \t]+(?=\r\n|\r|\n|\Z)")


# --------------------------------------------------------------------------------------------
# HTML → text
# --------------------------------------------------------------------------------------------

# Elements whose content is never visible text.
_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math"})
# Elements that start and end a block (a paragraph of the output).
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "caption", "dd", "details", "dialog", "div", "dl",
        "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
        "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
        "td", "tfoot", "th", "thead", "title", "tr", "ul", "body", "html",
    }
)  # fmt: skip
_SPACES = re.compile(r"[ \t\n\r\f\v]+")


class _TextParser(HTMLParser):
    """Collects visible text as blocks: whitespace collapsed, ``<br>`` a line break, ``<pre>`` verbatim."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._parts: list[str] = []
        self._skip = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
            return
        if tag == "br":
            self._parts.append("\n")
        elif tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
            return
        if tag in _BLOCK:
            self._flush()
            if tag == "pre":
                self._pre = max(0, self._pre - 1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br":
            self._parts.append("\n")
        elif tag in _BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self._parts.append(data if self._pre else _SPACES.sub(" ", data))

    def _flush(self) -> None:
        if not self._parts:
            return
        text = "".join(self._parts)
        self._parts = []
        if self._pre:
            text = text.strip("\n").rstrip()
        else:
            text = "\n".join(line.strip() for line in text.split("\n")).strip()
        if text:
            self.blocks.append(text)

    def close(self) -> None:
        super().close()
        self._flush()


def html_to_text(html: str) -> str:
    """Visible text of an HTML document: blocks separated by blank lines, scripts and styles dropped."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    return "\n\n".join(parser.blocks)
