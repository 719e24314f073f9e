"""Bring your own splitter: a LangChain text splitter or a ``module:function`` as the chunker. Its path,
parameters and library version are in the text id; offsets are recovered; plan → apply → cutover works."""

from __future__ import annotations

import importlib.metadata
import itertools
import re
from pathlib import Path

import pytest
from helpers_index import SAMPLE, Workspace
from langchain_text_splitters import RecursiveCharacterTextSplitter

from reindex.adapters.chunkers import is_partitioning, make_chunker
from reindex.domain.config import (
    PipelineConfig,
    SourceConfig,
    TextHalf,
    VectorHalf,
    chunker_spec,
)
from reindex.errors import ChunkerError, ConfigError, PlanError
from reindex.domain.identity import identity_of, resolve_config
from reindex.adapters.pipeline import TextPipeline
from reindex.adapters.sources.base import Document
from reindex.adapters.tokenizers import load_tokenizer

LC = "langchain_text_splitters.RecursiveCharacterTextSplitter"
DOCS = sorted((SAMPLE / "corpus").glob("*.rst"))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _lc(**params) -> dict:
    return {"kind": "langchain", "splitter": LC, "params": params}


def _cfg(chunker: dict, *, tokenizer: str = "whitespace") -> PipelineConfig:
    return PipelineConfig(index="docs", source=SourceConfig(uri="/data"),
                          text=TextHalf.model_validate({"chunker": chunker, "tokenizer": tokenizer}),
                          vector=VectorHalf(provider="hash"))


def test_langchain_offsets_round_trip_with_overlap_and_match_the_splitter() -> None:
    chunker = make_chunker(TextHalf.model_validate({"chunker": _lc(chunk_size=300, chunk_overlap=80)}).chunker,
                           "whitespace")
    splitter = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=80)
    tok = load_tokenizer("whitespace")
    overlapping = 0
    for path in DOCS[:8]:
        text = _text(path)
        chunks = chunker.chunk(text)
        assert [c.text for c in chunks] == [t for t in splitter.split_text(text) if t.strip()]
        for i, c in enumerate(chunks):
            assert text[c.start:c.end] == c.text and c.ordinal == i
            # Counted in document context with the configured tokenizer (chunks end on word boundaries here).
            assert c.tokens == tok.count(c.text)
        assert all(b.start > a.start for a, b in itertools.pairwise(chunks))
        overlapping += sum(1 for a, b in itertools.pairwise(chunks) if b.start < a.end)
    assert overlapping > 20  # the overlap really repeats text, and the repeated text was located anyway


def test_langchain_chunks_are_counted_with_the_configured_model_tokenizer() -> None:
    text = _text(DOCS[0])
    chunker = make_chunker(TextHalf.model_validate({"chunker": _lc(chunk_size=500)}).chunker, "all-MiniLM-L6-v2")
    tok = load_tokenizer("all-MiniLM-L6-v2")
    chunks = chunker.chunk(text)
    assert len(chunks) > 5
    # Word pieces whose start lies in the chunk: the chunk's own count, give or take a piece at each end.
    assert all(abs(c.tokens - tok.count(c.text)) <= 2 for c in chunks)
    assert sum(c.tokens for c in chunks) >= 0.9 * tok.count(text)


def test_callable_splitter_with_params_and_objects_with_text() -> None:
    text = _text(DOCS[1])
    for fn, params in (("helpers_splitters:paragraphs", {"max_chars": 200}), ("helpers_splitters:paragraph_objects", {})):
        chunker = make_chunker(TextHalf.model_validate({"chunker": {"kind": "callable", "callable": fn, "params": params}}).chunker,
                               "whitespace")
        chunks = chunker.chunk(text)
        assert len(chunks) > 10
        assert all(text[c.start:c.end] == c.text for c in chunks)
        assert all(c.end <= b.start for c, b in itertools.pairwise(chunks))  # no overlap: in order, disjoint
    assert max(len(c.text) for c in make_chunker(
        TextHalf.model_validate({"chunker": {"kind": "callable", "callable": "helpers_splitters:paragraphs",
                                             "params": {"max_chars": 200}}}).chunker, "char").chunk(text)) <= 200


def test_repeated_text_is_located_in_order() -> None:
    text = "alpha beta\n\nalpha beta\n\ngamma\n\nalpha beta"
    chunker = make_chunker(TextHalf.model_validate({"chunker": {"kind": "callable", "callable": "helpers_splitters:paragraphs"}}).chunker,
                           "whitespace")
    assert [(c.start, c.end) for c in chunker.chunk(text)] == [(0, 10), (12, 22), (24, 29), (31, 41)]


def test_blank_pieces_are_dropped_and_external_chunkers_promise_no_partition() -> None:
    chunker = make_chunker(TextHalf.model_validate({"chunker": {"kind": "callable", "callable": "helpers_splitters:with_blanks"}}).chunker,
                           "whitespace")
    assert [c.text for c in chunker.chunk("one two\n\nthree")] == ["one two", "three"]
    assert [c.ordinal for c in chunker.chunk("one two\n\nthree")] == [0, 1]
    assert not is_partitioning(TextHalf.model_validate({"chunker": _lc(chunk_size=100)}).chunker)
    assert not is_partitioning(TextHalf.model_validate({"chunker": {"kind": "callable", "callable": "m:f"}}).chunker)


def test_a_chunk_that_is_not_in_the_document_is_an_error_naming_splitter_and_document() -> None:
    cfg = resolve_config(_cfg({"kind": "callable", "callable": "helpers_splitters:collapsing"}))
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    doc = Document.of("pep-x.rst", b"A title\n=======\n\nsome   text\nwrapped here\n\nend")
    with pytest.raises(ChunkerError) as err:
        pipe.chunk_document(doc)
    msg = str(err.value)
    assert msg.startswith("document 'pep-x.rst': splitter helpers_splitters:collapsing: chunk 0 ('A title =======')")
    assert "does not occur anywhere in the normalised text" in msg
    bad = make_chunker(TextHalf.model_validate({"chunker": {"kind": "callable", "callable": "helpers_splitters:not_texts"}}).chunker,
                       "whitespace")
    with pytest.raises(ChunkerError, match="returned a int, not a chunk text"):
        bad.chunk("some text")


def test_a_splitter_that_raises_is_one_line_naming_splitter_document_and_error(tmp_path: Path) -> None:
    """Issue 22: a user's splitter that raised gave "unexpected ValueError … report it"."""
    cfg = resolve_config(_cfg({"kind": "callable", "callable": "helpers_splitters:raising"}))
    pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
    assert pipe.chunk_document(Document.of("plain.txt", b"one\n\ntwo"))
    with pytest.raises(ChunkerError) as err:
        pipe.chunk_document(Document.of("pep-x.rst", b"A title\n=======\n\ntext"))
    assert str(err.value) == ("document 'pep-x.rst': splitter helpers_splitters:raising raised ValueError: cannot split "
                              "a heading of 21 characters; fix the splitter or its text.chunker.params")
    ws = tmp_path / "ws"
    (ws / "corpus").mkdir(parents=True)
    (ws / "corpus" / "a.rst").write_text("A title\n=======\n\ntext\n")
    (ws / "reindex.yaml").write_text("index: docs\nsource: ./corpus\nvector: {provider: hash}\n"
                                     "text: {chunker: {kind: callable, callable: 'helpers_splitters:raising'}}\n")
    from click.testing import CliRunner

    from reindex.cli import main

    r = CliRunner().invoke(main, ["plan", "-c", str(ws / "reindex.yaml")])
    assert r.exit_code == 1 and r.stderr.strip() == (
        "error: document 'a.rst': splitter helpers_splitters:raising raised ValueError: cannot split a heading of 22 "
        "characters; fix the splitter or its text.chunker.params"), r.output


@pytest.mark.parametrize(("chunker", "message"), [
    ({"kind": "callable", "callable": "helpers_splitters:paragraphs", "params": {"max_char": 10}},
     "text.chunker.params: helpers_splitters:paragraphs(text, **{'max_char': 10}) cannot be called: got an "
     "unexpected keyword argument 'max_char'"),
    (_lc(chunk_size=100, nonsense=1), "cannot build langchain_text_splitters.RecursiveCharacterTextSplitter"),
    ({"kind": "langchain", "splitter": "no_such_module.Splitter"}, "cannot import 'no_such_module'"),
    ({"kind": "langchain", "splitter": "langchain_text_splitters.NoSuchSplitter"}, "has no attribute 'NoSuchSplitter'"),
    ({"kind": "langchain", "splitter": "helpers_splitters.Piece"}, "cannot build helpers_splitters.Piece"),
    ({"kind": "callable", "callable": "helpers_splitters:missing"}, "has no attribute 'missing'"),
])
def test_bad_splitters_fail_when_built(chunker: dict, message: str) -> None:
    with pytest.raises(ChunkerError, match=re.escape(message)):
        make_chunker(TextHalf.model_validate({"chunker": chunker}).chunker, "whitespace")


def test_version_params_and_path_are_in_the_text_id(monkeypatch: pytest.MonkeyPatch) -> None:
    base = resolve_config(_cfg(_lc(chunk_size=800, chunk_overlap=100)))
    installed = importlib.metadata.version("langchain-text-splitters")
    assert base.text.chunker.version == f"langchain-text-splitters=={installed}"
    assert chunker_spec(base.text.chunker) == (f'langchain:splitter={LC},params={{"chunk_overlap":100,"chunk_size":800}},'
                                               f"version=langchain-text-splitters=={installed}")
    ident = identity_of(base)
    assert identity_of(resolve_config(_cfg(_lc(chunk_size=800, chunk_overlap=100)))) == ident  # deterministic
    assert identity_of(resolve_config(_cfg(_lc(chunk_size=801, chunk_overlap=100)))).text_id != ident.text_id
    other = {"kind": "langchain", "splitter": "langchain_text_splitters.CharacterTextSplitter",
             "params": {"chunk_size": 800, "chunk_overlap": 100}}
    assert identity_of(resolve_config(_cfg(other))).text_id != ident.text_id
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "99.0.0" if name == "langchain-text-splitters" else real(name))
    upgraded = identity_of(resolve_config(_cfg(_lc(chunk_size=800, chunk_overlap=100))))
    assert upgraded.text_id != ident.text_id and upgraded.vector_id == ident.vector_id


def test_a_callable_outside_any_distribution_is_versioned_by_its_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = tmp_path / "my_splitter.py"
    mod.write_text("def split(text):\n    return text.split('\\n\\n')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _cfg({"kind": "callable", "callable": "my_splitter:split"})
    first = resolve_config(cfg)
    assert first.text.chunker.version.startswith("sha256:")
    mod.write_text("def split(text):\n    return text.split('\\n')\n", encoding="utf-8")
    assert resolve_config(cfg).text.chunker.version != first.text.chunker.version
    pinned = _cfg({"kind": "callable", "callable": "my_splitter:split", "version": "mine-1"})
    assert resolve_config(pinned).text.chunker.version == "mine-1"
    with pytest.raises(ConfigError, match="module 'nowhere_at_all' of 'nowhere_at_all:f' cannot be found"):
        resolve_config(_cfg({"kind": "callable", "callable": "nowhere_at_all:f"}))


def _write(ws: Workspace, chunk_size: int, overlap: int = 100) -> None:
    ws.config.write_text(
        "index: docs\nsource: ./corpus\n"
        f"text: {{tokenizer: whitespace, chunker: {{kind: langchain, splitter: {LC}, "
        f"params: {{chunk_size: {chunk_size}, chunk_overlap: {overlap}}}}}}}\n"
        "vector: {provider: hash}\napply: {shards: 2}\n"
        "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n", encoding="utf-8")


def test_langchain_splitter_plans_applies_and_cuts_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = Workspace(tmp_path / "ws")
    _write(ws, 800)
    live = ws.build_live()
    rows = ws.manifest_rows(live)
    texts = {d.name: _text(d) for d in DOCS}
    splitter = RecursiveCharacterTextSplitter(chunk_size=800, chunk_overlap=100)
    assert len(rows) == sum(len(splitter.split_text(t)) for t in texts.values())
    points = [p for _, p in ws.snapshot(live).points.values()]
    assert len(points) == len(rows)
    # The stored offsets point at the splitter's own chunk texts, overlap included.
    assert all(texts[p["doc_id"]][p["start"]:p["end"]] == splitter.split_text(texts[p["doc_id"]])[p["ordinal"]]
               for p in points)
    assert ws.alias() == live

    # A parameter change recuts every document: pipeline-scoped/text, and it cuts over.
    _write(ws, 600)
    plan, path = ws.plan()
    assert plan.kind == "pipeline-scoped/text"
    assert plan.body["chunker"]["new"].startswith(f'langchain:splitter={LC},params={{"chunk_overlap":100,"chunk_size":600}}')
    ws.approve(path)
    r = ws.apply(path)
    assert r.status == "done" and r.collection != live
    # Its probes say the smaller chunks lose passages (passage MRR worse): a worse change passes only by --force
    # (approved above); this test is about the splitter, not the gate.
    assert ws.cutover(path, force=True).report["swap"]
    assert ws.alias() == r.collection

    # Same config, nothing changed: nothing to do. A new library version: a planned text change, and a plan
    # made before the upgrade is refused at apply.
    assert ws.plan()[0].kind == "none"
    _write(ws, 500)
    _, stale_path = ws.plan()
    ws.approve(stale_path)
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "99.0.0" if name == "langchain-text-splitters" else real(name))
    with pytest.raises(PlanError, match="the config changed since the plan"):
        ws.apply(stale_path)
    _write(ws, 600)
    assert ws.plan()[0].kind == "pipeline-scoped/text"


@pytest.mark.parametrize("chunker, error", [
    ({"kind": "callable", "callable": "helpers_splitters:missing_function"},
     "error: text.chunker.callable 'helpers_splitters:missing_function': module 'helpers_splitters' has no attribute "
     "'missing_function'\n"),
    ({"kind": "langchain", "splitter": "langchain_text_splitters.NoSuchSplitter"},
     "error: text.chunker.splitter 'langchain_text_splitters.NoSuchSplitter': module 'langchain_text_splitters' has no "
     "attribute 'NoSuchSplitter'\n"),
    (_lc(chunk_size=100, bogus=1),
     f"error: text.chunker: cannot build {LC}(**{{'chunk_size': 100, 'bogus': 1}}): TextSplitter.__init__() got an "
     "unexpected keyword argument 'bogus'\n"),
    ({"kind": "callable", "callable": "helpers_splitters:paragraphs"}, ""),
])
def test_validate_imports_and_builds_a_splitter_named_by_path(tmp_path: Path, chunker: dict, error: str) -> None:
    import json

    from click.testing import CliRunner

    from reindex.cli import main

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.md").write_text("One paragraph.\n\nAnother one.\n", encoding="utf-8")
    cfg = tmp_path / "reindex.yaml"
    cfg.write_text(f"index: docs\nsource: {tmp_path / 'corpus'}\nvector: {{provider: hash}}\n"
                   f"text: {{chunker: {json.dumps(chunker)}, tokenizer: whitespace}}\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
    assert (r.exit_code, r.stderr) == (1 if error else 0, error)
