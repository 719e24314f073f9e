"""Embedders: turn chunk texts into vectors for one vector half."""

from __future__ import annotations

from reindex.domain.config import EmbedConfig, VectorHalf
from reindex.adapters.embedders.base import Embedder, EmbedResult
from reindex.errors import ConfigError

__all__ = ["Embedder", "EmbedResult", "counting_tokenizer", "describe_embedder", "for_queries", "import_names",
           "make_embedder", "model_files", "resolve_device", "vector_config_of"]


def make_embedder(vector: VectorHalf, *, batch_size: int = 64, options: EmbedConfig | None = None) -> Embedder:
    """The embedder for a (resolved) vector half; ``options`` reach an HTTP provider."""
    if vector.provider == "sentence-transformers":
        from reindex.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(vector, batch_size=batch_size, device=(options or EmbedConfig()).device)
    if vector.provider == "openai":
        from reindex.adapters.embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder(vector, options or EmbedConfig(), batch_size=batch_size)
    if vector.provider in ("langchain", "llamaindex"):
        from reindex.adapters.embedders.external import ExternalEmbedder

        return ExternalEmbedder(vector, batch_size=batch_size)
    if vector.provider == "model2vec":
        from reindex.adapters.embedders.static import StaticEmbedder

        return StaticEmbedder(vector, batch_size=batch_size)
    if vector.provider == "hash":
        from reindex.adapters.embedders.hashing import HashEmbedder

        return HashEmbedder(vector, batch_size=batch_size)
    raise ConfigError(f"vector.provider: {vector.provider!r} has no embedder in this version")


def for_queries(embedder: Embedder) -> Embedder:
    """``embedder`` as a reader embeds queries with: one intra-op thread a query, the process's (a build's)
    thread settings unchanged (:mod:`reindex.adapters.embedders.queries`)."""
    from reindex.adapters.embedders.queries import for_queries as _for

    return _for(embedder)


def import_names(vector: VectorHalf) -> tuple[str, ...]:
    """The third-party modules a process imports to embed with ``vector`` (seconds of CPU for a model library):
    what a pool of worker processes imports once, before it forks them."""
    return {"sentence-transformers": ("sentence_transformers",), "model2vec": ("model2vec",)}.get(vector.provider, ())


def counting_tokenizer(vector: VectorHalf) -> str | None:
    """The tokenizer (a name :func:`reindex.adapters.tokenizers.load_tokenizer` takes) whose tokens the vector half's
    embedder reads and truncates at its input limit: the model's own for a local model (sentence-transformers, a
    static model2vec model), whitespace words for ``hash``; None when it cannot be told here (an API model)."""
    if vector.provider in ("sentence-transformers", "model2vec"):
        return vector.model
    if vector.provider == "hash":
        return "whitespace"
    return None


def model_files(vector: VectorHalf):
    """The local files whose digest is the ``auto`` revision of a local vector half: a sentence-transformers
    model folder, or (``vector.backend: onnx``) its ONNX export; for ``model2vec`` the static model folder, or
    its distillation from a sentence-transformers folder. Exports and distillations are made locally on
    first use and cached."""
    if vector.provider == "model2vec":
        from reindex.adapters.embedders.static import model_files as _static

        return _static(vector)
    from reindex.adapters.embedders.sentence_transformers import model_files as _files

    return _files(vector)


def describe_embedder(embedder: Embedder) -> dict:
    """Where and how an embedder runs (provider, backend, precision, device), for reports."""
    describe = getattr(embedder, "describe", None)
    if describe is not None:
        return describe()
    vector = getattr(embedder, "vector", None)
    return {"provider": getattr(vector, "provider", type(embedder).__name__), "backend": getattr(vector, "backend", None),
            "precision": getattr(vector, "precision", None), "device": None}


def resolve_device(spec: str) -> str:
    """The device ``embed.device`` names on this machine; ConfigError (one line) when it is absent."""
    from reindex.adapters.embedders.sentence_transformers import resolve_device as _resolve

    return _resolve(spec)


def vector_config_of(obj) -> dict:
    """The ``vector`` config section (provider, model = class path, params) of a LangChain ``Embeddings`` or
    LlamaIndex ``BaseEmbedding`` instance (see :func:`reindex.adapters.embedders.external.vector_config_of`)."""
    from reindex.adapters.embedders.external import vector_config_of as _of

    return _of(obj)
