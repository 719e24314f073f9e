"""The architecture, enforced: an ``ast`` walk of ``src/reindex`` (imports inside functions count).

* no import cycles between modules;
* no upward imports: a module imports only from its own layer or the layers below (see ``LAYERS``);
* each third-party library is imported by one module (or the one pair named in ``OWNERS`` with a reason);
* no module imports another module's private names (``_name``), and nothing outside a package imports
  that package's private modules.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A module belongs to the first layer whose prefix matches its dotted name.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("errors", ("reindex.errors",)),
    ("foundation", ("reindex.foundation", "reindex.__init__")),
    ("domain", ("reindex.domain",)),
    ("adapters", ("reindex.adapters",)),
    ("books", ("reindex.books",)),
    ("planning", ("reindex.planner", "reindex.cost")),
    ("engine", ("reindex.engine", "reindex.runners")),
    ("decisions", ("reindex.decisions", "reindex.measure", "reindex.reports")),
    ("context", ("reindex.context",)),
    ("usecases", ("reindex.usecases",)),
    ("api", ("reindex.api",)),
    ("faces", ("reindex.orchestration", "reindex.cli", "reindex.terminal", "reindex.__main__", "reindex.retrievers")),
]

# Third-party libraries allowed in more than one module, with the reason.
OWNERS: dict[str, tuple[set[str], str]] = {
    "numpy": (set(), "vectors are numpy arrays across embedders, stores, execution and measure: not an I/O boundary"),
    "httpx": ({"reindex.adapters.embedders.openai", "reindex.adapters.stores.qdrant"},
              "the OpenAI-compatible embedder's client; qdrant-client raises httpx's errors and the store translates them"),
    "prefect": ({"reindex.runners.prefect", "reindex.orchestration"},
                "the Prefect shard runner and the Prefect driver (scheduled flows) are the two Prefect boundaries"),
}
# Libraries whose one owner is named: a second module importing them fails the test above, and so does
# their owner moving without this table saying so.
NAMED_OWNERS = {
    "model2vec": "reindex.adapters.embedders.static",
    "transformers": "reindex.adapters.embedders.sentence_transformers",
    "sentence_transformers": "reindex.adapters.embedders.sentence_transformers",
}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "reindex").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    is_pkg = MODULES[importer].name == "__init__.py"
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(name: str) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every import in ``name``, nested ones included."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(name, node)
            for a in node.names:
                sub = f"{mod}.{a.name}"
                # `from pkg import submodule` imports the submodule
                out.append((sub, [], node.lineno) if sub in MODULES else (mod, [a.name], node.lineno))
    return out


def _internal(mod: str) -> str | None:
    """The project module an import names (the longest known prefix), or None for third-party/stdlib."""
    parts = mod.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in MODULES:
            return cand
    return None


def layer_of(mod: str) -> int:
    if mod == "reindex":
        return 1  # the package's __init__: a version string
    best, rank = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank >= 0, f"{mod} is in no layer: add it to LAYERS in tests/test_layers.py"
    return rank


def graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in _imports(m):
            t = _internal(target)
            if t is not None and t != m and not m.startswith(t + "."):  # a package's own __init__ is not an edge
                g[m].add(t)
    return g


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``g`` (as a path that returns to its start), or None."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        stack.append(n)
        for t in sorted(g.get(n, ())):
            if colour.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if colour.get(t) is None:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(g):
        if colour.get(n) is None:
            found = visit(n)
            if found:
                return found
    return None


def test_every_module_has_a_layer() -> None:
    for m in MODULES:
        layer_of(m)


def test_no_import_cycles() -> None:
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_cycle_finder_finds_a_deliberate_cycle() -> None:
    g = graph()
    g["reindex.errors"] = g["reindex.errors"] | {"reindex.api"}  # errors → api → … → errors
    cycle = find_cycle(g)
    assert cycle is not None and cycle[0] == cycle[-1] and "reindex.errors" in cycle


def test_no_upward_imports() -> None:
    bad = []
    for m in MODULES:
        for target, _, line in _imports(m):
            t = _internal(target)
            if t is None or m.startswith(t + "."):
                continue
            if layer_of(t) > layer_of(m):
                bad.append(f"{MODULES[m].relative_to(SRC)}:{line}: {m} ({LAYERS[layer_of(m)][0]}) imports {t} "
                           f"({LAYERS[layer_of(t)][0]})")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def _owner(m: str) -> str:
    """The owner a module counts as: a package's private modules (``reindex.domain.config._halves``) are that package's
    parts, so a library used across them (pydantic across the config's sections) has one owner, the package."""
    package, _, last = m.rpartition(".")
    return package if last.startswith("_") and package in MODULES else m


def test_each_third_party_library_has_one_owner() -> None:
    users: dict[str, set[str]] = {}
    for m in MODULES:
        for target, _, _ in _imports(m):
            top = target.split(".")[0]
            if top in ("reindex", "") or top in STDLIB:
                continue
            users.setdefault(top, set()).add(_owner(m))
    bad = []
    for lib, mods in sorted(users.items()):
        if lib in OWNERS:
            allowed, _ = OWNERS[lib]
            if allowed and not mods <= allowed:
                bad.append(f"{lib}: {sorted(mods - allowed)} (allowed: {sorted(allowed)})")
        elif len(mods) > 1:
            bad.append(f"{lib}: imported by {sorted(mods)}")
    assert not bad, "third-party libraries with more than one owner:\n" + "\n".join(bad)
    named = {lib: sorted(users.get(lib, ())) for lib in NAMED_OWNERS}
    assert named == {lib: [owner] for lib, owner in NAMED_OWNERS.items()}


def test_no_private_names_across_modules() -> None:
    bad = []
    for m in MODULES:
        for target, names, line in _imports(m):
            t = _internal(target)
            if t is None:
                continue
            own_package = m.rpartition(".")[0]
            private_module = any(p.startswith("_") and p != "__init__" for p in t.split("."))
            if private_module and not (t.startswith(m + ".") or t.rpartition(".")[0] == own_package
                                       or t.startswith(own_package + ".")):
                bad.append(f"{m}:{line} imports private module {t}")
            for n in names:
                if n.startswith("_") and not t.startswith(m + ".") and t != own_package:
                    bad.append(f"{m}:{line} imports private name {t}.{n}")
    assert not bad, "\n".join(bad)


def test_no_module_is_over_1000_lines() -> None:
    """The hard limit (issue 31): past it a module is split along its seams, a reason does not excuse it."""
    long = [f"{m}: {n} lines" for m, path in MODULES.items()
            if (n := path.read_text(encoding="utf-8").count("\n")) > 1000]
    assert not long, "modules over 1,000 lines:\n" + "\n".join(long)


def test_every_module_declares_its_public_names() -> None:
    """``__all__`` in every module, and every name in it defined or imported there."""
    bad = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = next((n.value for n in tree.body
                         if (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__"
                                                               for t in n.targets))
                         or (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                             and n.target.id == "__all__" and n.value is not None)), None)
        if declared is None:
            bad.append(f"{m}: no __all__")
            continue
        names = {e.value for e in getattr(declared, "elts", ()) if isinstance(e, ast.Constant)}
        bound = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n in tree.body:
                bound.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                bound.add(n.id)
        lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
        if not lazy and names - bound:
            bad.append(f"{m}: __all__ names {sorted(names - bound)}, which it does not define")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("limit", [600])
def test_modules_over_the_size_guide_say_why(limit: int) -> None:
    long = []
    for m, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > limit and "lines:" not in doc.lower():
            long.append(f"{m}: {text.count(chr(10))} lines and no 'Lines:' reason in its docstring")
    assert not long, "\n".join(long)


# Modules (None) or names re-exported only so that users' old import paths keep working: src/ never imports
# through them (STYLE.md: a shim is for users, never imported from inside src/).
def _is_shim(m: str) -> bool:
    """A module whose body is only a docstring, imports and ``__all__`` (a kept import path): package faces
    (``__init__``) and ``__main__`` aside."""
    path = MODULES[m]
    if path.name in ("__init__.py", "__main__.py"):
        return False
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    only = all(isinstance(n, (ast.Import, ast.ImportFrom)) or (isinstance(n, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(tg, ast.Name) and tg.id == "__all__" for tg in getattr(n, "targets", [getattr(n, "target", None)])))
        for n in body)
    return bool(body) and only


def test_no_compatibility_shims() -> None:
    """The fifth version removed the last kept import paths: every module holds code of its own."""
    shims = [m for m in MODULES if _is_shim(m)]
    assert not shims, f"modules that only re-export another's names: {shims}"


def test_the_shim_check_sees_a_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "reindex" / "old_path.py"
    fake.parent.mkdir()
    fake.write_text('"""Kept import path."""\nfrom reindex.books.locks import *  # noqa\n__all__ = ["x"]\n')
    monkeypatch.setitem(MODULES, "reindex.old_path", fake)
    assert _is_shim("reindex.old_path") and not _is_shim("reindex.books.locks")


def _top_level_imports(m: str) -> list[str]:
    """What importing ``m`` imports at once: its module-level imports (inside ``if``/``try`` blocks too)."""
    out = []
    for node in ast.parse(MODULES[m].read_text(encoding="utf-8")).body:
        for n in [node] if not isinstance(node, (ast.If, ast.Try)) else list(ast.walk(node)):
            if isinstance(n, ast.Import):
                out += [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                mod = _resolve(m, n)
                out += [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in n.names]
    return out


_AT_IMPORT: dict[str, set[str]] = {}


def _third_party_at_import(m: str) -> set[str]:
    """Third-party libraries that importing ``m`` loads, through its own and its packages' top-level imports
    (memoised: the graph has no cycles, test_no_import_cycles)."""
    if m in _AT_IMPORT:
        return _AT_IMPORT[m]
    _AT_IMPORT[m] = set()  # a guard, should a cycle ever slip in
    libs: set[str] = set()
    parents = [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)]
    for target in _top_level_imports(m) + [p for p in parents if p in MODULES]:
        top = target.split(".")[0]
        if top not in ("reindex", "") and top not in STDLIB:
            libs.add(top)
        t = _internal(target)
        if t and t != m:
            libs |= _third_party_at_import(t)
    _AT_IMPORT[m] = libs
    return libs


def test_light_modules_are_imported_at_the_top() -> None:
    """A function-level import is for a module that costs something to load (it pulls in a third-party
    library: the embedder's torch, qdrant-client, Prefect, ...). A reindex module whose import loads no
    third-party library at all is imported at the top of the module that uses it (STYLE.md, issue 21)."""
    light = {m for m in MODULES if not _third_party_at_import(m)}
    assert {"reindex.errors", "reindex.foundation.settings", "reindex.domain.kinds"} <= light
    bad = []
    for m in MODULES:
        for fn in ast.walk(ast.parse(MODULES[m].read_text(encoding="utf-8"))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.ImportFrom):
                    mod = _resolve(m, n)
                    for a in n.names:
                        t = _internal(f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod)
                        if t in light and t != m and not m.startswith(t + "."):
                            bad.append(f"{MODULES[m].relative_to(SRC)}:{n.lineno}: {m} imports {t} inside "
                                       f"{fn.name}(); it loads no third-party library: import it at the top")
    assert not bad, "\n".join(sorted(set(bad)))


# The books' layout (DESIGN.md: books): every key and file name of an index's state is spelled in one module.
BOOKS_MODULE = "reindex.books.layout"
STATE_NAMES = ("live.json", "population.json", "serving.json", "lock.json", "intent.json", "progress.json",
               "done.json", "cursor.json", "indexes/", "populations/", "/runs/", "chunks/", "chunk-texts/",
               "summaries/", "rewrites/", "calibration/", "history/", "staging/", "results-", "bridges/",
               "carried/", "cursors/", ".run.json", ".approval.json", ".rejection.json")


def _string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant of a module but its docstrings (module, class, function)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def spelled_state_names(source: str) -> list[tuple[int, str]]:
    return [(line, s) for line, s in _string_constants(ast.parse(source)) if any(name in s for name in STATE_NAMES)]


def test_the_state_layout_is_spelled_in_the_books_module_only() -> None:
    """No module but :mod:`reindex.books.layout` spells a state key or file name (``live.json``,
    ``indexes/…/populations/…``, ``runs/``, …): they ask :class:`reindex.books.layout.Books`."""
    bad = [f"{MODULES[m].relative_to(SRC)}:{line}: {s!r}" for m in MODULES if m != BOOKS_MODULE
           for line, s in spelled_state_names(MODULES[m].read_text(encoding="utf-8"))]
    assert not bad, "state keys spelled outside reindex.books.layout:\n" + "\n".join(bad)
    assert spelled_state_names(MODULES[BOOKS_MODULE].read_text(encoding="utf-8")), "the books module spells them"


def test_the_layout_check_sees_a_key_spelled_elsewhere() -> None:
    source = 'def f(index):\n    """Reads indexes/<index>/live.json."""\n    return f"indexes/{index}/live.json"\n'
    assert [s for _, s in spelled_state_names(source)] == ["indexes/", "/live.json"]


def test_no_contextvar_in_the_use_cases() -> None:
    """Use cases take their context explicitly (DESIGN.md: context): nothing in ``usecases/`` lends through a
    ``ContextVar``."""
    bad = [m for m in MODULES if m.startswith(("reindex.usecases", "reindex.context"))
           and "ContextVar" in MODULES[m].read_text(encoding="utf-8")]
    assert not bad, f"ContextVar in the use cases: {bad}"


# A plan's body is read through its typed views (``Plan.numbers``, ``Plan.baseline``, ``Plan.corpus``, …) everywhere
# but in the planner that writes it and the reports that render the whole document field by field.
PLAN_BODY_READERS = ("reindex.planner", "reindex.reports")


def plan_body_subscripts(source: str) -> list[int]:
    """Lines that subscript ``<x>.body`` or call ``<x>.body.get``."""
    out = []
    for n in ast.walk(ast.parse(source)):
        target = n.value if isinstance(n, ast.Subscript) else (
            n.func.value if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"
            else None)
        if isinstance(target, ast.Attribute) and target.attr == "body":
            out.append(n.lineno)
    return out


def test_a_plans_body_is_read_through_its_typed_views() -> None:
    bad = [f"{MODULES[m].relative_to(SRC)}:{line}" for m in MODULES if not m.startswith(PLAN_BODY_READERS)
           for line in plan_body_subscripts(MODULES[m].read_text(encoding="utf-8"))]
    assert not bad, "plan bodies subscripted outside the planner and the reports:\n" + "\n".join(bad)
    assert sorted(plan_body_subscripts('x = plan.body["work"]["tokens"]\ny = plan.body.get("repair")\n')) == [1, 2]
