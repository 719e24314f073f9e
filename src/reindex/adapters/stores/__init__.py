"""Storage backends: the vector store and the object store for state (plans, manifests, locks).

``vectors.py`` holds the vector-store contract (``VectorStore``, ``Point``, ``Hit``); ``opening.py`` opens
a store (``open_vector_store``, ``open_vector_reader``), importing only the backend chosen; ``qdrant.py`` is
the Qdrant-server and local-mode backend (the one module that imports qdrant-client);
``edge/`` is the embedded default (qdrant-edge); ``migrate.py`` converts old local-mode folders;
``objects.py`` is the state's object store (local folder | S3)."""

__all__ = []
