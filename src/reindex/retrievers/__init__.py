"""Retrievers over a reindex alias for RAG frameworks, each in its own module so that importing one does not
need the other library installed:

* :mod:`reindex.retrievers.langchain` — ``ReindexRetriever``, a LangChain retriever (``pip install 'reindex[langchain]'``);
* :mod:`reindex.retrievers.llamaindex` — ``ReindexRetriever``, a LlamaIndex retriever (``pip install 'reindex[llamaindex]'``).

Both are drivers over :class:`reindex.usecases.query.Querier`: the embedding model is loaded once, every
call reads the index alias through a read-only store (so they follow cutovers and rollbacks, and work while
another process runs `reindex apply`)."""

__all__: list[str] = []
