"""A LlamaIndex retriever over the index alias (the one module that imports ``llama_index``).

    from reindex.retrievers.llamaindex import ReindexRetriever

    retriever = ReindexRetriever(config="reindex.yaml", similarity_top_k=4)
    nodes = retriever.retrieve("how are modules found?")   # list[NodeWithScore]

Each result is ``NodeWithScore(node=TextNode(text=chunk text, metadata=the document's configured metadata
fields), score=similarity)``; the node's id is ``"<doc_id>#<ordinal>"`` and its source relationship names
the document, so ``node.ref_doc_id`` is the reindex doc id.

llama-index-core ships the NLTK and tiktoken data it uses (``llama_index/core/_static``), so importing it
downloads nothing; ``NLTK_DATA`` and ``TIKTOKEN_CACHE_DIR`` are honoured if you set them, and not needed."""

from __future__ import annotations

from pathlib import Path

from llama_index.core.constants import DEFAULT_SIMILARITY_TOP_K
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from reindex.errors import ConfigError
from reindex.api import DEFAULT_CONFIG, Querier

__all__ = ["ReindexRetriever", "to_node"]


def to_node(result: dict) -> NodeWithScore:
    """One :func:`reindex.usecases.query.query` result as a LlamaIndex ``NodeWithScore``."""
    node = TextNode(
        id_=f"{result['doc_id']}#{result['ordinal']}",
        text=result["page_content"],
        metadata=dict(result["metadata"]),
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=str(result["doc_id"]))},
    )
    return NodeWithScore(node=node, score=result["score"])


class ReindexRetriever(BaseRetriever):
    """The top ``similarity_top_k`` chunks of the live alias of ``config``'s index (or of ``collection``),
    optionally restricted by equality ``filters``. The embedding model is loaded and a read-only
    store opened once (a :class:`~reindex.usecases.query.Querier`); every call follows the alias, so cutovers
    and syncs are seen."""

    def __init__(self, config: str | Path = DEFAULT_CONFIG, *, similarity_top_k: int = DEFAULT_SIMILARITY_TOP_K,
                 filters: dict[str, str] | None = None, collection: str | None = None, **kwargs) -> None:
        if similarity_top_k < 1:
            raise ConfigError(f"similarity_top_k {similarity_top_k}: must be at least 1")
        self.similarity_top_k = similarity_top_k
        self.filters = dict(filters) if filters else None
        self.collection = collection
        self._querier = Querier(config)
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        found = self._querier.query(query_bundle.query_str, k=self.similarity_top_k, filters=self.filters,
                                    collection=self.collection)
        return [to_node(r) for r in found.results]
