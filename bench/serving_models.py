"""The two real models of bench/serving.py, behind a disk cache (``vector.provider: langchain``).

``CachedEmbeddings(model="minilm")`` is reindex's own sentence-transformers embedder of the packaged
all-MiniLM-L6-v2 (384 dimensions); ``model="static"`` is reindex's model2vec embedder of the static model distilled
from it (``vector: {provider: model2vec, model: all-MiniLM-L6-v2}``, 256 dimensions). Each text's vector is kept
under ``REINDEX_BENCH_CACHE`` (default ``build/serving/cache``), one ``.npz`` per embedding call, so that the
bench's two directions and its re-runs embed each chunk text once per model: MiniLM encodes ~10 chunks per
CPU-second here. The vectors are the models' own (the wrapper changes nothing but who computes them); the
class counts what it really embedded (``computed``) and what it served (``served``), and the CPU-seconds."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import numpy as np

_MODELS = {"minilm": {"provider": "sentence-transformers", "dimension": 384},
           "static": {"provider": "model2vec", "model": "all-MiniLM-L6-v2", "dimension": 256}}
_LOCK = threading.Lock()
_REAL: dict[str, object] = {}


def real_embedder(model: str):
    """reindex's embedder of ``model`` (made once per process), uncached."""
    from reindex.domain.config import VectorHalf
    from reindex.adapters.embedders import make_embedder

    with _LOCK:
        if model not in _REAL:
            _REAL[model] = make_embedder(VectorHalf(**_MODELS[model]), batch_size=64)
        return _REAL[model]


def _key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class CachedEmbeddings:
    """A LangChain ``Embeddings``-like class over reindex's embedder of ``model``, cached on disk."""

    computed: dict[str, int] = {"minilm": 0, "static": 0}
    served: dict[str, int] = {"minilm": 0, "static": 0}
    cpu_seconds: dict[str, float] = {"minilm": 0.0, "static": 0.0}
    _caches: dict[str, dict[str, np.ndarray]] = {}

    def __init__(self, model: str = "minilm") -> None:
        if model not in _MODELS:
            raise ValueError(f"model must be one of {sorted(_MODELS)}")
        self.model = model
        self.folder = Path(os.environ.get("REINDEX_BENCH_CACHE", "build/serving/cache")) / model
        self.folder.mkdir(parents=True, exist_ok=True)
        with _LOCK:
            if model not in CachedEmbeddings._caches:
                cache: dict[str, np.ndarray] = {}
                for f in sorted(self.folder.glob("*.npz")):
                    with np.load(f, allow_pickle=False) as z:
                        cache.update(zip((str(k) for k in z["keys"]), z["vectors"]))
                CachedEmbeddings._caches[model] = cache
        self.cache = CachedEmbeddings._caches[model]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        keys = [_key(t) for t in texts]
        with _LOCK:
            missing = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if missing:
            text_of = dict(zip(keys, texts))
            c0 = time.process_time()
            vecs = np.asarray(real_embedder(self.model).embed([text_of[k] for k in missing]).vectors, np.float32)
            spent = time.process_time() - c0
            buf = io.BytesIO()
            np.savez(buf, keys=np.array(missing), vectors=vecs)
            (self.folder / f"{_key(''.join(missing))}.npz").write_bytes(buf.getvalue())
            with _LOCK:
                self.cache.update(zip(missing, vecs))
                CachedEmbeddings.computed[self.model] += len(missing)
                CachedEmbeddings.cpu_seconds[self.model] += spent
        with _LOCK:
            CachedEmbeddings.served[self.model] += len(texts)
            return [self.cache[k].tolist() for k in keys]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def vector_line(model: str) -> str:
    """The config's vector half for one cached model (no normalisation on top: the models normalise)."""
    return (f"vector: {{provider: langchain, model: serving_models.CachedEmbeddings, params: {{model: {model}}}, "
            f"dimension: {_MODELS[model]['dimension']}}}")
