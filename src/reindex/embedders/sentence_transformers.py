"""Local sentence-transformers models, loaded offline from a folder (never downloaded)."""

from __future__ import annotations

import os
import threading

import numpy as np

from reindex.config import VectorHalf
from reindex.embedders.base import EmbedResult
from reindex.errors import ConfigError, ModelError
from reindex.models import resolve_model_path
from reindex.tokenizers import load_tokenizer

_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str], object] = {}


def _load(path: str, precision: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with _LOCK:
        key = (path, precision)
        if key not in _CACHE:
            try:
                import warnings

                from sentence_transformers import SentenceTransformer

                try:
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()
                    hf_logging.set_verbosity_error()
                except ImportError:  # pragma: no cover - older transformers
                    pass
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)
                    model = SentenceTransformer(path, device="cpu", local_files_only=True)
            except Exception as err:  # noqa: BLE001 - any load failure is one clear line
                raise ModelError(f"cannot load sentence-transformers model from {path}: {err}".splitlines()[0]) from None
            if precision == "float16":
                model = model.half()
            _CACHE[key] = model
        return _CACHE[key]


class SentenceTransformerEmbedder:
    """Batches texts through a local sentence-transformers model; counts truncated inputs."""

    def __init__(self, vector: VectorHalf, *, batch_size: int = 64) -> None:
        if vector.backend != "torch":
            raise ConfigError(f"vector.backend: {vector.backend!r} is not supported for sentence-transformers (use torch)")
        if vector.precision == "int8":
            raise ConfigError("vector.precision: int8 inference is not supported for sentence-transformers here")
        self.vector = vector
        self.path = resolve_model_path(vector.model)
        self.batch_size = batch_size
        self.model = _load(str(self.path), vector.precision)
        limit = int(getattr(self.model, "max_seq_length", 0) or 0)
        if vector.max_tokens:
            limit = min(limit, vector.max_tokens + 2) if limit else vector.max_tokens + 2
            self.model.max_seq_length = limit
        self.max_tokens = limit - 2 if limit else None  # [CLS] and [SEP]
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim != vector.dimension:
            raise ConfigError(f"vector.dimension is {vector.dimension} but model {vector.model} makes {dim}-dimensional vectors")
        self.dimension = dim
        self._tok = load_tokenizer(str(self.path))  # the model's own word pieces, no truncation or padding

    def embed(self, texts: list[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(np.zeros((0, self.dimension), dtype=np.float32), 0, 0)
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        lengths = self._tok.count_batch(inputs)
        truncated = sum(1 for n in lengths if self.max_tokens and n > self.max_tokens)
        vecs = self.model.encode(
            inputs,
            batch_size=self.batch_size,
            normalize_embeddings=self.vector.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return EmbedResult(np.asarray(vecs, dtype=np.float32), truncated, sum(lengths))
