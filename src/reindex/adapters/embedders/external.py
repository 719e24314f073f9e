"""Bring your own embedder: a LangChain ``Embeddings`` or a LlamaIndex ``BaseEmbedding`` class, by import path
(``vector.provider: langchain | llamaindex``, ``vector.model: package.module.Class``, ``vector.params``), as
chunkers accept a LangChain splitter. The class, its parameters and the version of the library providing it
are in the vector id (:func:`reindex.domain.identity.vector_id`), so another model name or library release is a
vector change. Neither library is imported here: the class is loaded by its path and called through the
methods of its kind (``embed_documents`` or ``get_text_embedding_batch``)."""

from __future__ import annotations

import importlib
import json
from typing import Any

import numpy as np

from reindex.domain.config import VectorHalf, is_secret_name, params_from_env, scrub
from reindex.adapters.embedders.base import EmbedResult
from reindex.errors import ConfigError, ModelError

__all__ = ["ExternalEmbedder", "load_class", "vector_config_of"]

# The method each provider kind embeds a batch of passages with.
_METHODS = {"langchain": "embed_documents", "llamaindex": "get_text_embedding_batch"}


def load_class(path: str) -> type:
    """The class at ``package.module.Class``; ConfigError in one line when it cannot be imported."""
    module, _, name = path.rpartition(".")
    if not module:
        raise ConfigError(f"vector.model: {path!r} is not an import path (package.module.Class)")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as err:
        raise ConfigError(f"vector.model: cannot import {module!r} ({err}); is it installed?") from None
    except AttributeError:
        raise ConfigError(f"vector.model: module {module!r} has no {name!r}") from None


class ExternalEmbedder:
    """Embeds through a LangChain ``Embeddings`` or LlamaIndex ``BaseEmbedding`` instance."""

    def __init__(self, vector: VectorHalf, *, batch_size: int = 64, instance: Any = None) -> None:
        kind = vector.provider
        if kind not in _METHODS:
            raise ConfigError(f"vector.provider: {kind!r} is not an external embeddings kind ({', '.join(_METHODS)})")
        if instance is None:
            cls = load_class(vector.model)
            params = params_from_env(vector.params, "vector.params")
            try:
                instance = cls(**params)
            except Exception as err:  # noqa: BLE001 - a constructor failure is one clear line
                raise ConfigError(scrub(f"vector.params: {vector.model}(**params) failed: {type(err).__name__}: {err}"
                                        .splitlines()[0], vector.params)) from None
        method = getattr(instance, _METHODS[kind], None)
        if not callable(method):
            other = next((k for k, m in _METHODS.items() if k != kind and callable(getattr(instance, m, None))), None)
            hint = f"; it looks like a {other} class: set vector.provider: {other}" if other else ""
            raise ConfigError(f"vector.model: {vector.model} has no {_METHODS[kind]}() method, so it is not a {kind} "
                              f"embeddings class{hint}")
        self.vector = vector
        self.instance = instance
        self._embed = method
        self.dimension = vector.dimension
        self.max_tokens = vector.max_tokens
        self.batch_size = batch_size

    def describe(self) -> dict:
        """Where and how this embedder runs (for run reports)."""
        return {"provider": self.vector.provider, "backend": type(self.instance).__qualname__,
                "precision": self.vector.precision, "device": None}

    def for_queries(self):
        """This embedder as a reader embeds queries: on the query threads (a class that runs torch gets one
        intra-op thread a query; :mod:`reindex.adapters.embedders.queries`)."""
        from reindex.adapters.embedders.queries import QueryEmbedder
        from reindex.adapters.embedders.sentence_transformers import one_intra_op_thread

        return QueryEmbedder(self, one_intra_op_thread)

    def raw(self, texts: list[str]) -> np.ndarray:
        """The bare library call on the same inputs (the class's own batch method): what calibration compares
        :meth:`embed` with."""
        return np.asarray(self._embed([self.vector.prefix + t for t in texts]), dtype=np.float32)

    def embed(self, texts: list[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(np.zeros((0, self.dimension), dtype=np.float32), 0, 0)
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        try:
            raw = self._embed(inputs)
        except Exception as err:  # noqa: BLE001 - the class's own failure, in one line
            raise ModelError(scrub(f"{self.vector.model}.{_METHODS[self.vector.provider]}: {type(err).__name__}: {err}"
                                   .splitlines()[0], self.vector.params)) from None
        vecs = np.asarray(raw, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[0] != len(inputs):
            raise ModelError(f"{self.vector.model} returned {vecs.shape[0] if vecs.ndim else 0} vectors for {len(inputs)} inputs")
        if vecs.shape[1] != self.dimension:
            raise ConfigError(f"vector.dimension is {self.dimension} but {self.vector.model} makes "
                              f"{vecs.shape[1]}-dimensional vectors; set vector.dimension: {vecs.shape[1]}")
        if self.vector.normalize:
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        # Token counts are the class's business; whitespace words stand in (like the hash provider).
        return EmbedResult(vecs, 0, sum(len(t.split()) for t in inputs))


def vector_config_of(obj: Any) -> dict:
    """The ``vector`` section (provider, model = class path, params) that rebuilds ``obj``, a LangChain
    ``Embeddings`` or LlamaIndex ``BaseEmbedding`` instance: its fields that differ from the class defaults,
    plus its model name, leaving out secrets (read from the environment by the class) and LlamaIndex's
    callback manager. Raises ConfigError for a field that is not plain JSON."""
    cls = type(obj)
    kind = next((k for k, m in _METHODS.items() if callable(getattr(obj, m, None))), None)
    if kind is None:
        raise ConfigError(f"{cls.__qualname__} is neither a LangChain Embeddings (embed_documents) nor a LlamaIndex "
                          "BaseEmbedding (get_text_embedding_batch)")
    dump = getattr(obj, "model_dump", None)
    fields = dump(exclude_defaults=True) if callable(dump) else dict(vars(obj))
    for name in ("model", "model_name"):
        if hasattr(obj, name) and isinstance(getattr(obj, name), str):
            fields.setdefault(name, getattr(obj, name))
    params = {}
    for name, value in fields.items():
        if name.startswith("_") or name == "callback_manager" or is_secret_name(name):
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise ConfigError(f"{cls.__qualname__}.{name} ({type(value).__name__}) is not plain JSON and cannot go into "
                              "a config; give vector.model and vector.params yourself") from None
        params[name] = value
    return {"provider": kind, "model": f"{cls.__module__}.{cls.__qualname__}", "params": params}
