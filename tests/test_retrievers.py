"""The LangChain and LlamaIndex retrievers (``reindex.retrievers``) against the real libraries: an index built
from a JSONL source with metadata fields, read through the alias with default settings, before and after
cutovers (a new chunker, a new vector half), while another process applies, and equal to `reindex query`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers_index import REINDEX_BIN, SAMPLE, subprocess_env
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever as LangChainBase
from llama_index.core.retrievers import BaseRetriever as LlamaIndexBase
from llama_index.core.schema import NodeWithScore, TextNode

from reindex import api
from reindex.errors import ConfigError
from reindex.retrievers.langchain import ReindexRetriever as LangChainRetriever
from reindex.retrievers.llamaindex import ReindexRetriever as LlamaIndexRetriever

PEPS = ("pep-0212.rst", "pep-0218.rst", "pep-0223.rst", "pep-0687.rst", "pep-0699.rst", "pep-0288.rst")
GATE = "cutover: {min_recall_delta: -1.0, min_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}"  # the hash embedder has no semantics to gate on
UNDERSCORED = ("_doc_id", "_ordinal", "_score")


class JsonlIndex:
    """A folder with ``docs.jsonl`` (PEPs with ``title`` and ``pep`` fields), ``reindex.yaml`` and its state."""

    def __init__(self, root: Path, *, chars: int | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.metadata: dict[str, dict] = {}
        lines = []
        for name in PEPS:
            text = (SAMPLE / "corpus" / name).read_text(encoding="utf-8")
            meta = {"title": re.search(r"^Title: (.+)$", text, re.MULTILINE)[1], "pep": int(re.search(r"^PEP: (\d+)", text, re.MULTILINE)[1])}
            self.metadata[name] = meta
            lines.append(json.dumps({"id": name, "text": text[:chars] if chars else text, **meta}))
        self.source.write_text("\n".join(lines) + "\n", encoding="utf-8")

    @property
    def source(self) -> Path:
        return self.root / "docs.jsonl"

    @property
    def config(self) -> Path:
        return self.root / "reindex.yaml"

    def configure(self, size: int, vector: str = "{provider: hash}") -> None:
        self.config.write_text(
            "index: docs\n"
            "source: {uri: ./docs.jsonl, metadata_fields: [title, pep]}\n"
            f"text: {{chunker: {{kind: recursive, size: {size}}}}}\n"
            f"vector: {vector}\n"
            "apply: {shards: 2}\n"
            f"{GATE}\n", encoding="utf-8")

    def plan(self) -> Path:
        plan, path = api.make_plan(self.config, out=self.root / "plans")
        if plan.body["approval"]["required"]:
            api.approve_plan(path, "tester", "test")
        return path

    def build(self) -> None:
        """Plan, apply (in process) and cut over the current config."""
        path = self.plan()
        assert api.apply_plan(path, self.config, use_prefect=False).status == "done"
        assert api.cutover(path, self.config).report["swap"]

    def unique_chunks(self) -> list:
        """The current config's chunks whose text occurs once in the corpus (an exact query finds only them)."""
        records = api.chunk_path(self.source, config_path=self.config)[0]
        counts = Counter(r.text for r in records)
        return [r for r in records if counts[r.text] == 1]


def spread(items: list, n: int = 5) -> list:
    return [items[i * len(items) // n] for i in range(n)]


def cli_query(ix: JsonlIndex, text: str, *args: str) -> list[dict]:
    env = subprocess_env()
    env.pop("PREFECT_API_URL", None)
    r = subprocess.run([str(REINDEX_BIN), "query", text, "-c", str(ix.config), *args, "--json"], cwd=ix.root,
                       env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["results"]


def assert_found(lc: LangChainRetriever, li: LlamaIndexRetriever, chunk) -> None:
    """Both retrievers, asked a chunk's exact text, return that chunk first (the hash embedder: score 1)."""
    docs = lc.invoke(chunk.text)
    assert len(docs) == 4 and all(isinstance(d, Document) for d in docs)  # LangChain's default k
    top = docs[0]
    assert top.page_content == chunk.text
    assert (top.metadata["_doc_id"], top.metadata["_ordinal"]) == (chunk.doc_id, chunk.ordinal)
    assert top.id == f"{chunk.doc_id}#{chunk.ordinal}"
    assert top.metadata["_score"] == pytest.approx(1.0, abs=1e-5) and docs[1].metadata["_score"] < 0.99
    nodes = li.retrieve(chunk.text)
    assert len(nodes) == 2 and all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert nodes[0].node.get_content() == chunk.text and nodes[0].node.ref_doc_id == chunk.doc_id
    assert nodes[0].node.node_id == f"{chunk.doc_id}#{chunk.ordinal}"
    assert nodes[0].score == pytest.approx(1.0, abs=1e-5) and nodes[1].score < 0.99


def test_the_retrievers_are_the_libraries_retrievers_with_their_default_k(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path)
    ix.configure(150)
    lc, li = LangChainRetriever(config=ix.config), LlamaIndexRetriever(ix.config)
    assert isinstance(lc, LangChainBase) and isinstance(li, LlamaIndexBase)
    assert (lc.k, lc.filters, li.similarity_top_k, li.filters) == (4, None, 2, None)
    with pytest.raises(ConfigError, match="must be at least 1"):
        LangChainRetriever(config=ix.config, k=0)
    with pytest.raises(ConfigError, match="must be at least 1"):
        LlamaIndexRetriever(ix.config, similarity_top_k=0)
    ix.build()
    for retrieve in (LangChainRetriever(config=ix.config, filters={"no_such_key": "x"}).invoke,
                     LlamaIndexRetriever(ix.config, filters={"no_such_key": "x"}).retrieve):
        with pytest.raises(ConfigError, match="filter no_such_key: can filter on doc_id, title, pep only"):
            retrieve("anything")  # never silently unfiltered


def test_retrievers_return_the_live_chunks_while_apply_runs_and_after_a_chunker_cutover(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path)
    ix.configure(150)
    ix.build()
    lc, li = LangChainRetriever(config=ix.config), LlamaIndexRetriever(ix.config)  # built once, used throughout
    old = ix.unique_chunks()
    for chunk in spread(old):
        assert_found(lc, li, chunk)

    ix.configure(90)  # a new chunker: every document recut, applied by another process while we read
    path = ix.plan()
    env = subprocess_env(REINDEX_SHARD_WORKERS="1")
    env.pop("PREFECT_API_URL", None)
    writer = subprocess.Popen([str(REINDEX_BIN), "apply", str(path), "-c", str(ix.config), "--no-progress"],
                              cwd=ix.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reads = 0
    while writer.poll() is None or reads == 0:
        assert_found(lc, li, old[reads % len(old)])  # the alias still serves the old population
        reads += 1
    _, err = writer.communicate()
    assert writer.returncode == 0, err
    before = api.status(ix.config)["aliases"]["docs"]
    assert api.cutover(path, ix.config).report["swap"]
    assert api.status(ix.config)["aliases"]["docs"] != before

    new = ix.unique_chunks()
    new_texts = {c.text for c in new}
    only_new = [c for c in new if c.text not in {o.text for o in old}]
    gone = [c for c in old if c.text not in new_texts]
    assert only_new and gone
    for chunk in spread(only_new):
        assert_found(lc, li, chunk)
    pinned = (LangChainRetriever(config=ix.config, collection=before), LlamaIndexRetriever(ix.config, collection=before))
    for chunk in spread(gone):  # the old population is no longer what the alias serves, but can be named
        assert lc.invoke(chunk.text)[0].page_content != chunk.text
        assert li.retrieve(chunk.text)[0].node.get_content() != chunk.text
        assert_found(*pinned, chunk)


def test_retrievers_return_the_documents_metadata_before_and_after_a_cutover(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path)
    lc = li = None
    for size in (150, 90):
        ix.configure(size)
        ix.build()
        if lc is None:
            lc, li = LangChainRetriever(config=ix.config), LlamaIndexRetriever(ix.config)
        for chunk in spread(ix.unique_chunks()):
            top = lc.invoke(chunk.text)[0]
            assert top.page_content == chunk.text
            # the payload's metadata object: the configured source fields plus doc_id (the payload contract)
            want = {**ix.metadata[chunk.doc_id], "doc_id": chunk.doc_id}
            assert {k: v for k, v in top.metadata.items() if k not in UNDERSCORED} == want
            node = li.retrieve(chunk.text)[0].node
            assert node.get_content() == chunk.text and node.metadata == want


def _rows_lc(docs: list[Document]) -> list[tuple]:
    return [(d.metadata["_doc_id"], d.metadata["_ordinal"], d.page_content, d.metadata["_score"]) for d in docs]


def _rows_li(nodes: list[NodeWithScore]) -> list[tuple]:
    return [(n.node.ref_doc_id, int(n.node.node_id.rpartition("#")[2]), n.node.get_content(), n.score) for n in nodes]


def _rows_cli(results: list[dict]) -> list[tuple]:
    return [(r["doc_id"], r["ordinal"], r["page_content"], r["score"]) for r in results]


def test_retrievers_top_k_equals_reindex_query_with_and_without_a_filter(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path)
    ix.configure(150)
    ix.build()
    text = "the module search path"
    lc, li = LangChainRetriever(config=ix.config), LlamaIndexRetriever(ix.config)
    cli4 = _rows_cli(cli_query(ix, text, "--k", "4"))
    assert len(cli4) == 4 and _rows_lc(lc.invoke(text)) == cli4
    assert _rows_li(li.retrieve(text)) == _rows_cli(cli_query(ix, text, "--k", "2"))
    k7 = LangChainRetriever(config=ix.config, k=7)
    assert _rows_lc(k7.invoke(text)) == _rows_cli(cli_query(ix, text, "--k", "7"))

    doc = "pep-0218.rst"  # equality filters pass through to the store
    want = _rows_cli(cli_query(ix, text, "--k", "3", "--filter", f"doc_id={doc}"))
    assert len(want) == 3 and {row[0] for row in want} == {doc}
    assert _rows_lc(LangChainRetriever(config=ix.config, k=3, filters={"doc_id": doc}).invoke(text)) == want
    assert _rows_li(LlamaIndexRetriever(ix.config, similarity_top_k=3, filters={"doc_id": doc}).retrieve(text)) == want


def test_a_querier_built_before_a_vector_half_cutover_embeds_queries_with_the_new_half(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path)
    ix.configure(150)
    ix.build()
    querier = api.Querier(ix.config)
    lc, li = LangChainRetriever(config=ix.config), LlamaIndexRetriever(ix.config)
    ix.configure(150, vector='{provider: hash, prefix: "passage: "}')  # a new vector half: every vector recomputed
    ix.build()
    for chunk in spread(ix.unique_chunks()):
        assert_found(lc, li, chunk)  # the query text is embedded with the prefix, as the population was
        assert querier.query(chunk.text, k=3).results == api.query(chunk.text, ix.config, k=3).results


@pytest.mark.slow
def test_with_the_default_model_the_retrievers_equal_reindex_query(tmp_path: Path) -> None:
    ix = JsonlIndex(tmp_path, chars=1500)  # a few dozen chunks: the real model stays cheap
    ix.config.write_text("index: docs\nsource: {uri: ./docs.jsonl, metadata_fields: [title, pep]}\n"
                         "text: {chunker: {kind: recursive, size: 120}}\napply: {shards: 2}\n", encoding="utf-8")
    ix.build()
    text = "Why was the loop counter proposal rejected?"
    cli = cli_query(ix, text, "--k", "4")
    got = _rows_lc(LangChainRetriever(config=ix.config).invoke(text))
    assert [row[:3] for row in got] == [row[:3] for row in _rows_cli(cli)]
    assert [row[3] for row in got] == pytest.approx([r["score"] for r in cli], abs=1e-4)
    assert got[0][0] == "pep-0212.rst"  # PEP 212, "Loop Counter Iteration", was rejected
    nodes = LlamaIndexRetriever(ix.config).retrieve(text)
    assert [n.node.get_content() for n in nodes] == [r["page_content"] for r in cli[:2]]


def test_the_llamaindex_retriever_imports_offline_without_downloading(tmp_path: Path) -> None:
    """llama-index-core ships its NLTK and tiktoken data: importing the retriever with no network, an empty
    home and no NLTK_DATA / TIKTOKEN_CACHE_DIR writes nothing and tries no download."""
    home = tmp_path / "home"
    home.mkdir()
    env = subprocess_env(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), HTTP_PROXY="http://127.0.0.1:9",
                         HTTPS_PROXY="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9")
    for var in ("NLTK_DATA", "TIKTOKEN_CACHE_DIR", "LLAMA_INDEX_CACHE_DIR"):
        env.pop(var, None)
    code = ("import reindex.retrievers.llamaindex as m; "
            "n = m.to_node({'doc_id': 'a.md', 'ordinal': 3, 'score': 0.5, 'page_content': 'x', 'metadata': {'k': 1}}); "
            "print(n.node.node_id, n.node.ref_doc_id, n.node.metadata, n.score)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "a.md#3 a.md {'k': 1} 0.5"
    assert "download" not in (r.stdout + r.stderr).lower()
    assert [p for p in home.rglob("*")] == []


def test_a_read_only_langchain_vector_store_over_the_alias(tmp_path: Path) -> None:
    from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

    from reindex.retrievers.langchain import ReindexVectorStore

    ix = JsonlIndex(tmp_path)
    ix.configure(150)
    ix.build()
    store = ReindexVectorStore(ix.config)
    assert isinstance(store, VectorStore)
    chunk = spread(ix.unique_chunks())[2]
    docs = store.similarity_search(chunk.text)
    assert len(docs) == 4 and docs[0].page_content == chunk.text and docs[0].id == f"{chunk.doc_id}#{chunk.ordinal}"
    scored = store.similarity_search_with_score(chunk.text, k=3)
    assert [d.id for d, _ in scored] == [d.id for d in docs[:3]]
    assert scored[0][1] == pytest.approx(1.0, abs=1e-5) and scored[0][1] > scored[1][1] >= scored[2][1]
    assert _rows_lc([d for d, _ in scored]) == _rows_lc(LangChainRetriever(config=ix.config, k=3).invoke(chunk.text))

    other = next(n for n in PEPS if n != chunk.doc_id)
    title = ix.metadata[other]["title"]
    for flt in ({"doc_id": other}, {"title": title}):
        hits = store.similarity_search(chunk.text, k=3, filter=flt)
        assert hits and all(d.metadata["_doc_id"] == other and d.metadata["title"] == title for d in hits)

    retriever = store.as_retriever(search_kwargs={"k": 2, "filter": {"doc_id": other}})
    assert isinstance(retriever, VectorStoreRetriever)
    assert [d.id for d in retriever.invoke(chunk.text)] == [d.id for d in store.similarity_search(chunk.text, 2, {"doc_id": other})]
    exact = store.as_retriever(search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99})
    assert [d.page_content for d in exact.invoke(chunk.text)] == [chunk.text]  # relevance (1 + cos) / 2

    with pytest.raises(ConfigError, match="unsupported argument"):
        store.similarity_search(chunk.text, where={"doc_id": other})  # never silently unfiltered
    for write in (lambda: store.add_texts(["x"]), lambda: store.add_documents([Document(page_content="x")]),
                  lambda: store.delete(["x"]), lambda: ReindexVectorStore.from_texts(["x"], None)):
        with pytest.raises(NotImplementedError, match="read-only"):
            write()
