"""Retrievers over a reindex alias for RAG frameworks, each in its own module so that importing one does not
need the other library installed:

* :mod:`reindex.retrievers.langchain` — ``ReindexRetriever``, a LangChain retriever (``pip install 'vector-reindex[langchain]'``);
* :mod:`reindex.retrievers.llamaindex` — ``ReindexRetriever``, a LlamaIndex retriever (``pip install 'vector-reindex[llamaindex]'``).

Both are drivers over :class:`reindex.usecases.query.Querier`: the embedding model is loaded once and one
read-only store is held, which follows the index alias on every call (cutovers, rollbacks and in-place syncs
by another process, while `reindex apply` runs) without reopening the store per call."""

__all__: list[str] = []
