"""The design notes' picture of the house matches the code (issue 40): every top-level package and module of
``src/reindex`` is in the picture, everything in the picture exists, and its layers are the layer test's, in order."""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import LAYERS, layer_of

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "reindex"
NOTES = ROOT / "docs" / "design-notes.md"


def _picture() -> list[tuple[list[str], str]]:
    """(the names on a row, the row's layer) of the house's picture in the design notes."""
    text = NOTES.read_text(encoding="utf-8")
    section = text[text.index("## The house"):]
    block = section[section.index("```\nsrc/reindex/\n") + len("```\nsrc/reindex/\n"):]
    block = block[:block.index("```")]
    rows = []
    for line in block.splitlines():
        m = re.match(r"\s+((?:[\w.]+/?\s)+)\s+(\w+)\s", line + " ")
        if m:
            rows.append((m.group(1).split(), m.group(2)))
    return rows


def _top_level() -> set[str]:
    out = set()
    for p in SRC.iterdir():
        if p.name.startswith(("_", ".")) or p.name in ("py.typed", "sample"):
            continue
        if p.is_dir() and (p / "__init__.py").exists():
            out.add(p.name + "/")
        elif p.suffix == ".py":
            out.add(p.name)
    return out


def test_the_picture_names_every_top_level_part_and_nothing_else() -> None:
    named = {n for names, _ in _picture() for n in names}
    assert named == _top_level(), (f"in the code, not the picture: {sorted(_top_level() - named)}; "
                                   f"in the picture, not the code: {sorted(named - _top_level())}")


def test_the_pictures_layers_are_the_layer_tests() -> None:
    rows = _picture()
    assert [layer for _, layer in rows] == [name for name, _ in LAYERS]
    for names, layer in rows:
        for n in names:
            module = "reindex." + n.removesuffix("/").removesuffix(".py")
            assert LAYERS[layer_of(module)][0] == layer, f"{n} is drawn in {layer}, the layer test puts it elsewhere"
