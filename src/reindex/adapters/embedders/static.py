"""Static embeddings (``vector.provider: model2vec``): a model2vec folder, or one distilled here, offline,
from a local sentence-transformers folder and kept in a content-addressed cache (as ONNX exports are).

The one module that imports model2vec (lazily, inside functions: importing this module costs nothing).

A static model is a table of token vectors: a text's vector is the mean of its tokens' rows (then
normalised), so it does not depend on the batch, the shard layout or the thread count. Distillation
(model2vec's ``distill``: one forward pass of the source model per vocabulary token, PCA to
``STATIC_DISTILL_DIMS``, SIF weighting, float16) takes ~40–90 CPU-s for all-MiniLM-L6-v2 and writes ~15 MB.
Its files' digest is the vector half's revision (docs/design-notes.md, "Identity")."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
import warnings
from pathlib import Path

import numpy as np

from reindex.foundation import settings
from reindex.domain.config import VectorHalf
from reindex.adapters.embedders.base import EmbedResult, Preparing
from reindex.adapters.embedders.sentence_transformers import load_transformer
from reindex.errors import ConfigError, ModelError
from reindex.domain.models import (
    STATIC_DISTILL_DIMS,
    digest_path,
    is_static_folder,
    resolve_model_path,
    static_dimension,
)
from reindex.adapters.tokenizers import load_tokenizer

__all__ = ["DISTILL_RECIPE", "StaticEmbedder", "compose_sums", "distill_cache_key", "distilled",
           "expected_distill_cost", "model_files",
           "require_model2vec"]

# Bump when the distillation recipe changes: a new recipe is a new cache folder (and a new vector id).
DISTILL_RECIPE = "reindex/model2vec/v1"
_MARK = "distill.json"  # written last: a cache folder holding it is complete
_LOCK = threading.Lock()
_CACHE: dict[str, object] = {}


def require_model2vec(distill: bool = False) -> None:
    """Raise ConfigError (one line, what to install) unless model2vec (and, to distil, its distillation
    dependencies) can be imported."""
    names = ("model2vec", "skeletoken", "sklearn") if distill else ("model2vec",)
    missing = []
    for name in names:
        try:
            __import__(name)
        except ImportError:
            missing.append({"sklearn": "scikit-learn"}.get(name, name))
    if missing:
        what = "distilling a static model from a sentence-transformers folder" if distill else "vector.provider: model2vec"
        raise ConfigError(f"{what} needs {' and '.join(missing)}, not installed; run `pip install 'vector-reindex[model2vec]'` (from a checkout: `pip install -e '.[model2vec]'`)")


def distill_cache_key(source_digest: str, dims: int) -> str:
    """The cache folder name of a distillation: the recipe, the source model's digest and the PCA dims."""
    body = json.dumps([DISTILL_RECIPE, source_digest, dims], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def distilled(source: Path, dimension: int | None = None) -> Path:
    """The folder of the static model distilled from the sentence-transformers folder ``source``, made here
    offline on first use and then kept in ``<cache>/model2vec/<key>``. ``dimension``: the configured
    vector size, checked against what the distillation makes before any work (ConfigError)."""
    source = Path(source)
    dims = static_dimension(source)
    if dims is None:
        raise ConfigError(f"vector.model: {source} is neither a model2vec folder nor a model folder whose config.json "
                          "gives hidden_size; point it at a static model or a sentence-transformers folder")
    if dimension is not None and dimension != dims:
        raise ConfigError(f"vector.dimension is {dimension} but a static model distilled from {source} makes "
                          f"{dims}-dimensional vectors; set vector.dimension: {dims}")
    source_digest = digest_path(source)
    folder = settings.model_cache_dir() / "model2vec" / distill_cache_key(source_digest, STATIC_DISTILL_DIMS)
    if (folder / _MARK).is_file():
        return folder
    require_model2vec(distill=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    saying = Preparing(f"distilling a static model from {source}",
                       "vector.provider model2vec names a sentence-transformers folder, and no static model distilled "
                       f"from it is cached yet (one forward pass of the model per vocabulary token, then PCA to {dims} "
                       "dimensions)", expected_distill_cost(source))
    try:
        _distill(source, tmp, saying)
        _stable_config(tmp / "config.json", source_digest)
        (tmp / _MARK).write_text(json.dumps({"recipe": DISTILL_RECIPE, "source_digest": source_digest,
                                             "pca_dims": STATIC_DISTILL_DIMS}, sort_keys=True, indent=1) + "\n",
                                 encoding="utf-8")
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / _MARK).is_file():  # another process finished first: use its distillation
                raise
        saying.finished(str(folder))
    except (ConfigError, ModelError):
        raise
    except Exception as err:  # noqa: BLE001 - a distillation failure is one clear line
        raise ModelError(f"cannot distil a static model from {source}: {err}".splitlines()[0]) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


#: Vocabulary tokens a static distillation encodes per CPU-second with all-MiniLM-L6-v2 (6 layers × 384): 30,522
#: tokens in 74-123 CPU-s measured here (bench/RESULTS.md); a larger model costs in proportion to layers × width.
_DISTILL_TOKENS_PER_CPU_S = 250
_MINILM_SIZE = 6 * 384


def expected_distill_cost(source: Path) -> str:
    """What distilling ``source`` is expected to cost, from its vocabulary and size (read from its files)."""
    def read(name: str) -> dict:
        try:
            return json.loads((Path(source) / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    conf = read("config.json")
    vocab = int(conf.get("vocab_size") or 30522)
    layers, width = int(conf.get("num_hidden_layers") or 6), int(conf.get("hidden_size") or 384)
    cpu = vocab / _DISTILL_TOKENS_PER_CPU_S * layers * width / _MINILM_SIZE
    return (f"about {max(cpu, 1):.0f} CPU-seconds ({vocab:,} vocabulary tokens through a {layers}-layer, {width}-wide "
            f"model; all-MiniLM-L6-v2 measured 74-123 CPU-s here), longer in wall time on a busy machine")


@contextlib.contextmanager
def _offline_and_quiet(progress: bool = False):
    """Nothing reaches the network (the model and tokenizer come from the folder); no progress bars (unless
    ``progress``: the distillation's bar is read for its counts)."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE",
            "TRANSFORMERS_VERBOSITY")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                       "TRANSFORMERS_VERBOSITY": "error"})
    if not progress:
        os.environ.update({"TQDM_DISABLE": "1"})  # written for tqdm, never read as a setting of ours
    else:
        os.environ.pop("TQDM_DISABLE", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _distill(source: Path, out: Path, saying: Preparing) -> None:
    import logging

    loggers = [logging.getLogger(n) for n in ("model2vec", "skeletoken", "transformers", "sentence_transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)  # advice about PCA sizes and pad tokens, not errors
    try:
        # model2vec's tqdm bar goes to `saying`, which turns its counts into a line every tenth of the way.
        with _offline_and_quiet(progress=True), contextlib.redirect_stderr(saying):
            _distill_quietly(source, out)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _distill_quietly(source: Path, out: Path) -> None:
    from model2vec.distill.distillation import distill_from_model

    # Loaded from the folder only (model2vec's own `distill` would ask the hub about a name that is not a folder).
    model, tokenizer = load_transformer(source)
    static = distill_from_model(model=model, tokenizer=tokenizer, device="cpu", pca_dims=STATIC_DISTILL_DIMS)
    static.save_pretrained(str(out))


def _stable_config(path: Path, source_digest: str) -> None:
    """model2vec writes the source folder's absolute path into ``config.json`` (``tokenizer_name``): the same
    weights distilled from another install location would get another digest. Name the source by digest."""
    conf = json.loads(path.read_text(encoding="utf-8"))
    conf["tokenizer_name"] = source_digest
    path.write_text(json.dumps(conf, sort_keys=True, indent=1) + "\n", encoding="utf-8")


def model_files(vector: VectorHalf) -> Path:
    """The static model folder of this vector half: ``vector.model`` when it is a model2vec folder, else the
    distillation of that sentence-transformers folder (made on first use)."""
    source = resolve_model_path(vector.model)
    return source if is_static_folder(source) else distilled(source, vector.dimension)


def compose_sums(sums: np.ndarray, counts: np.ndarray, *, normalize: bool = True) -> np.ndarray:
    """Float32 vectors ``sum / count`` per row (zero rows for no tokens), L2-normalised when ``normalize``;
    the arithmetic is float64 until the cast, so equal sums and counts give bit-identical vectors."""
    sums = np.asarray(sums, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    mean = np.divide(sums, counts[:, None], out=np.zeros_like(sums), where=counts[:, None] > 0)
    if normalize:
        norms = np.linalg.norm(mean, axis=1, keepdims=True)
        mean = np.divide(mean, norms, out=np.zeros_like(mean), where=norms > 0)
    return mean.astype(np.float32)


def _load(path: str):
    with _LOCK:
        if path not in _CACHE:
            require_model2vec()
            with _offline_and_quiet():
                from model2vec import StaticModel

                try:
                    _CACHE[path] = StaticModel.from_pretrained(path, force_download=False)
                except Exception as err:  # noqa: BLE001 - any load failure is one clear line
                    raise ModelError(f"cannot load the static model in {path}: {err}".splitlines()[0]) from None
        return _CACHE[path]


class _Ids:
    """The static model fed token ids: its own pooling (``StaticModel._encode_batch``: the mean of the tokens'
    rows, weights and token mapping applied, normalised) over ids that reindex tokenized, so the text is
    tokenized once for both its count and its vector."""

    def __init__(self, model) -> None:
        self._model = model

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def tokenize(self, sentences):  # the "sentences" handed to _encode_batch are already id lists
        return sentences


class StaticEmbedder:
    """Embeds texts with a model2vec static model (a token table: mean of the tokens' rows, normalised). Each text
    is tokenized once (the static folder's ``tokenizer.json``): the same ids give its count and its vector.

    ``exact`` (``vector.compose: units``): a text's vector is computed here from its token sums in float64
    (:meth:`token_sums`) instead of by model2vec's ``encode``, which rounds the mean to the table's float16
    and cuts long texts by characters first. The float16 rows are exact in float64 and so is their sum for
    any text under 8,192 tokens, in any order: a chunk's vector composed from its units' sums and counts
    (:func:`compose_sums`) is bit-identical to the chunk embedded whole. The two paths differ by the float16
    rounding (about 1e-4 per component), which is why ``exact`` belongs to the vector half."""

    def __init__(self, vector: VectorHalf, *, batch_size: int = 64, exact: bool | None = None) -> None:
        self.vector = vector
        self.batch_size = batch_size
        self.exact = (getattr(vector, "compose", "none") == "units") if exact is None else exact
        self.path = model_files(vector)
        if vector.revision.startswith("sha256:") and digest_path(self.path) != vector.revision:
            raise ModelError(
                f"the static model in {self.path} has digest {digest_path(self.path)} but vector.revision is "
                f"{vector.revision} (distilled by another torch/model2vec version?); copy the folder from the machine "
                "that planned, or plan again")
        self.model = _load(str(self.path))
        self.dimension = int(self.model.dim)
        if self.dimension != vector.dimension:
            raise ConfigError(f"vector.dimension is {vector.dimension} but the static model {vector.model} makes "
                              f"{self.dimension}-dimensional vectors; set vector.dimension: {self.dimension}")
        limit = self.model.max_length
        self.max_tokens = min(limit, vector.max_tokens) if limit and vector.max_tokens else (vector.max_tokens or limit)
        # model2vec cuts a text to max_length × the median token length in characters before tokenizing it.
        self._cut = self.max_tokens * int(self.model.median_token_length) if self.max_tokens else None
        self._tok = load_tokenizer(str(self.path))  # the model's own tokens, no truncation
        self._ids = None  # the model's tokenizer without truncation (token_sums), made on first use
        self._fed = self._feeds_exactly()

    def describe(self) -> dict:
        """Where and how this embedder runs: a table lookup in numpy, on the calling thread."""
        return {"provider": "model2vec", "backend": "static", "precision": str(self.model.embedding.dtype),
                "device": "cpu", "threads": 1, "tokenized": "once" if self._fed else "twice"}

    def raw(self, texts: list[str]) -> np.ndarray:
        """The bare library call on the same inputs (``StaticModel.encode``): what calibration compares
        :meth:`embed` with."""
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        return self.model.encode(inputs, max_length=self.max_tokens, batch_size=max(self.batch_size, 1),
                                 normalize=self.vector.normalize, use_multiprocessing=False, show_progress_bar=False)

    def _model_ids(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids by the model's own tokenizer, without special tokens or truncation (unknown tokens kept)."""
        if self._ids is None:
            import copy

            tok = copy.deepcopy(self.model.tokenizer)
            tok.no_truncation()
            self._ids = tok
        return [e.ids for e in self._ids.encode_batch_fast(list(texts), add_special_tokens=False)]

    def _without_unknown(self, ids: list[list[int]]) -> list[list[int]]:
        unk = self.model.unk_token_id
        return [[i for i in r if i != unk] for r in ids] if unk is not None else ids

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The ids model2vec averages for each text: its tokenizer without special tokens and without
        truncation, unknown tokens dropped (as ``StaticModel.tokenize`` does)."""
        return self._without_unknown(self._model_ids(texts))

    def token_sums(self, texts: list[str], limit: int | None = None,
                   ids: list[list[int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(sums, counts)``: the float64 sum of each text's token rows (its first ``limit`` tokens when given)
        and how many tokens were summed. No prefix is added: these are a unit's parts of a chunk's vector.
        ``ids``: the texts' :meth:`token_ids`, when the caller has them already (not tokenized again)."""
        sums = np.zeros((len(texts), self.dimension), dtype=np.float64)
        counts = np.zeros(len(texts), dtype=np.int64)
        table = self.model.embedding
        for i, row in enumerate(self.token_ids(texts) if ids is None else ids):
            if limit is not None:
                row = row[:limit]
            if row:
                sums[i] = table[np.asarray(row, dtype=np.int64)].astype(np.float64).sum(axis=0)
                counts[i] = len(row)
        return sums, counts

    def vectors_of_sums(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Vectors from token sums and counts: the mean, normalised when the vector half says so (float32)."""
        return compose_sums(sums, counts, normalize=self.vector.normalize)

    def embed(self, texts: list[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(np.zeros((0, self.dimension), dtype=np.float32), 0, 0)
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        if self.exact:  # one tokenization: the model's own ids give the count and the sums
            raw_ids = self._model_ids(inputs)
            lengths = [len(r) for r in raw_ids]
            truncated = sum(1 for n in lengths if self.max_tokens and n > self.max_tokens)
            sums, counts = self.token_sums(inputs, self.max_tokens, ids=self._without_unknown(raw_ids))
            return EmbedResult(self.vectors_of_sums(sums, counts), truncated, sum(lengths))
        if not self._fed:
            lengths = self._tok.count_batch(inputs)
            truncated = sum(1 for n in lengths if self.max_tokens and n > self.max_tokens)
            return EmbedResult(np.asarray(self.raw(texts), dtype=np.float32), truncated, sum(lengths))
        vecs, lengths, truncated = self._embed_ids(inputs)
        return EmbedResult(vecs, truncated, sum(lengths))

    def _embed_ids(self, inputs: list[str]) -> tuple[np.ndarray, list[int], int]:
        """Vectors, token counts and truncated inputs: every character tokenized once. The model reads what
        ``StaticModel.encode`` reads (the text cut to ``max_length`` × the median token length in characters,
        then ``max_length`` tokens, the unknown token dropped). A text longer than that cut is counted as its
        head's tokens plus its tail's (tokenized apart: within a token of a whole count) and is truncated."""
        cut = self._cut
        heads = [t[:cut] for t in inputs] if cut else inputs
        ids = self._tok.ids_batch(heads)
        lengths = [len(r) for r in ids]
        long = [i for i, t in enumerate(inputs) if cut and len(t) > cut]
        if long:
            for i, tail in zip(long, self._tok.ids_batch([inputs[i][cut:] for i in long])):
                lengths[i] += len(tail)
        limit = self.max_tokens
        truncated = sum(1 for i, n in enumerate(lengths) if limit and (n > limit or (cut and len(inputs[i]) > cut)))
        unk = self.model.unk_token_id
        rows = [r[:limit] if limit else r for r in ids]
        if unk is not None:
            rows = [[t for t in r if t != unk] for r in rows]
        step = max(self.batch_size, 1)
        fed = _Ids(self.model)
        parts = [type(self.model)._encode_batch(fed, rows[i:i + step], self.vector.normalize) for i in range(0, len(rows), step)]
        return np.asarray(np.concatenate(parts), dtype=np.float32), lengths, truncated

    def _feeds_exactly(self) -> bool:
        """Whether reindex's ids give exactly the library's vectors here (a model2vec release whose internals moved:
        no, and the model tokenizes again after the count)."""
        probes = ["Reindex feeds the static model its own token ids.", "Ünïcödé — 中文; CamelCaseWords!", "a"]
        if self._cut:
            probes.append(" ".join(["word"] * (self.max_tokens + 8)))
            probes.append("x" * (self._cut + 5) + " tail")
        try:
            return bool(np.array_equal(self._embed_ids(probes)[0], np.asarray(self.raw(probes), dtype=np.float32)))
        except Exception:  # noqa: BLE001 - internals that moved: the library's own path
            return False
