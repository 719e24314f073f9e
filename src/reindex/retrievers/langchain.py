"""A LangChain retriever over the index alias (the one module that imports ``langchain_core``).

    from reindex.retrievers.langchain import ReindexRetriever

    retriever = ReindexRetriever(config="reindex.yaml", k=4)
    docs = retriever.invoke("how are modules found?")   # list[Document]

Each ``Document`` has the chunk text as ``page_content``, the document's configured metadata fields as
``metadata`` plus ``_doc_id``, ``_ordinal`` and ``_score`` (underscored like langchain-qdrant's ``_id``), and
``id`` ``"<doc_id>#<ordinal>"``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from reindex.errors import ConfigError
from reindex.usecases.backends import DEFAULT_CONFIG
from reindex.usecases.query import Querier

__all__ = ["ReindexRetriever", "to_document"]


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
