"""A LangChain retriever and a read-only LangChain vector store over the index alias (the one module that
imports ``langchain_core``).

    from reindex.retrievers.langchain import ReindexRetriever, ReindexVectorStore

    retriever = ReindexRetriever(config="reindex.yaml", k=4)
    docs = retriever.invoke("how are modules found?")   # list[Document]

    store = ReindexVectorStore("reindex.yaml")          # code written for a stock VectorStore
    store.similarity_search("how are modules found?", k=4, filter={"doc_id": "pep-0302.rst"})
    store.similarity_search_with_score("how are modules found?")
    store.as_retriever(search_kwargs={"k": 2}).invoke("how are modules found?")

Each ``Document`` has the chunk text as ``page_content``, the document's configured metadata fields as
``metadata`` plus ``_doc_id``, ``_ordinal`` and ``_score`` (underscored like langchain-qdrant's ``_id``), and
``id`` ``"<doc_id>#<ordinal>"``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore

from reindex.errors import ConfigError
from reindex.api import DEFAULT_CONFIG, Querier

__all__ = ["ReindexRetriever", "ReindexVectorStore", "to_document"]


def to_document(result: dict) -> Document:
    """One :func:`reindex.usecases.query.query` result as a LangChain ``Document``."""
    meta = dict(result["metadata"])
    meta.update(_doc_id=result["doc_id"], _ordinal=result["ordinal"], _score=result["score"])
    return Document(page_content=result["page_content"], metadata=meta, id=f"{result['doc_id']}#{result['ordinal']}")


class ReindexRetriever(BaseRetriever):
    """The top ``k`` chunks of the live alias of ``config``'s index (or of ``collection``), optionally
    restricted by equality ``filters`` (``{"doc_id": "pep-0008.rst"}``). The embedding model is loaded and a read-only
    store opened once (a :class:`~reindex.usecases.query.Querier`); every call follows the alias, so cutovers
    and syncs are seen."""

    config: str | Path = DEFAULT_CONFIG
    k: int = 4  # LangChain's vector-store retrievers default to 4
    filters: dict[str, str] | None = None  # equality filters, e.g. {"doc_id": "pep-0008.rst"}
    collection: str | None = None
    _querier: Querier  # a pydantic private attribute (leading underscore), set once the fields are validated

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        if self.k < 1:
            raise ConfigError(f"k {self.k}: must be at least 1")
        self._querier = Querier(self.config)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        found = self._querier.query(query, k=self.k, filters=self.filters, collection=self.collection)
        return [to_document(r) for r in found.results]


_READ_ONLY = ("ReindexVectorStore is read-only: reindex builds the index from its source (`reindex plan`, "
              "`reindex apply`, `reindex cutover`); add the documents to the source and plan again")


class ReindexVectorStore(VectorStore):
    """A read-only LangChain ``VectorStore`` over the live alias of ``config``'s index (or ``collection``), for
    code written against a stock vector store: ``similarity_search``, ``similarity_search_with_score``,
    ``similarity_search_with_relevance_scores`` and ``as_retriever()`` (``search_kwargs``: ``k``, ``filter``,
    ``score_threshold``), with ``filter`` an equality dict on ``doc_id`` or the configured metadata fields.
    Scores are the store's similarities (cosine by default: 1 is the same direction). The embedding model is
    loaded once; every search opens the store read-only, so cutovers are followed and an apply may run.
    Writes (``add_texts``, ``add_documents``, ``delete``, ``from_texts``) raise ``NotImplementedError``."""

    def __init__(self, config: str | Path = DEFAULT_CONFIG, *, collection: str | None = None) -> None:
        self._querier = Querier(config)
        self.collection = collection

    @property
    def embeddings(self) -> Embeddings | None:
        return None  # queries are embedded by the index's own vector half, not by a LangChain Embeddings

    def similarity_search_with_score(self, query: str, k: int = 4, filter: dict[str, Any] | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        """The top ``k`` chunks for ``query`` with their similarity scores, best first."""
        if kwargs:  # never a silently ignored argument (a filter under another name, a threshold here)
            raise ConfigError(f"ReindexVectorStore search: unsupported argument(s) {', '.join(sorted(kwargs))}; "
                              "it takes k and filter (an equality dict on doc_id or metadata fields)")
        found = self._querier.query(query, k=k, filters=dict(filter) if filter else None, collection=self.collection)
        return [(to_document(r), float(r["score"])) for r in found.results]

    def similarity_search(self, query: str, k: int = 4, filter: dict[str, Any] | None = None,
                          **kwargs: Any) -> list[Document]:
        """The top ``k`` chunks for ``query``, best first."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, filter, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Similarity → relevance in [0, 1] (LangChain's ``similarity_score_threshold``): cosine only."""
        distance = self._querier.distance
        if distance != "cosine":
            raise ConfigError(f"relevance scores need vector.distance cosine (this index uses {distance}); use "
                              "similarity_search_with_score")
        return lambda score: (1.0 + score) / 2.0

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, **kwargs: Any) -> list[str]:
        raise NotImplementedError(_READ_ONLY)

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        raise NotImplementedError(_READ_ONLY)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        raise NotImplementedError(_READ_ONLY)

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict] | None = None,
                   **kwargs: Any) -> "ReindexVectorStore":
        raise NotImplementedError(_READ_ONLY)
