"""Local sentence-transformers models, loaded offline from a folder (never downloaded), on a chosen device,
with torch or (``vector.backend: onnx``) with onnxruntime on a local ONNX export of the same model.

The one module that imports torch, sentence-transformers, onnx and onnxruntime (all lazily, inside
functions: importing this module costs nothing).

ONNX: sentence-transformers' own ONNX backend (``SentenceTransformer(path, backend="onnx")``) needs
optimum-onnx, whose only release (0.1.0) requires transformers < 4.58 and does not import with the
transformers 5.x that sentence-transformers 6 needs. So the export is done here from the installed model
files: the model's transformer is exported with ``torch.onnx.export`` and, for int8, quantised with
onnxruntime's dynamic quantisation (what optimum's ``export_dynamic_quantized_onnx_model`` calls). At run
time the sentence-transformers pipeline is kept (its tokenizer, pooling and normalisation) and only the
transformer's forward pass runs in onnxruntime, so both backends share everything but the network."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
import warnings
from pathlib import Path

import numpy as np

from reindex.foundation import settings
from reindex.domain.config import VectorHalf
from reindex.adapters.embedders.base import EmbedResult, Preparing
from reindex.errors import ConfigError, ModelError
from reindex.domain.models import digest_path, resolve_model_path
from reindex.adapters.tokenizers import load_tokenizer

__all__ = ["ONNX_OPSET", "ONNX_RECIPE", "ReindexErrors", "SentenceTransformerEmbedder", "load_transformer",
           "model_files", "one_intra_op_thread", "onnx_cache_key", "onnx_device", "onnx_export", "require_onnxruntime",
           "resolve_device"]

ReindexErrors = (ConfigError, ModelError)
_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str, str, str, int | None], object] = {}

# Bump when the export or quantisation recipe changes: a new recipe is a new cache folder (and its files'
# digest a new vector id).
ONNX_RECIPE = "reindex/onnx/v1"
ONNX_OPSET = 17
_ONNX_FILE = "model.onnx"
_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------


def resolve_device(spec: str) -> str:
    """The torch device ``embed.device`` names on this machine (``auto``: the first CUDA device, else
    Apple's mps, else the CPU). Raises ConfigError, in one line, when the named device is absent."""
    if spec == "cpu":
        return "cpu"
    import torch

    cuda = torch.cuda.is_available()
    count = torch.cuda.device_count() if cuda else 0
    mps_backend = getattr(torch.backends, "mps", None)
    mps = bool(mps_backend is not None and mps_backend.is_available())
    if spec == "auto":
        return "cuda:0" if count else ("mps" if mps else "cpu")
    if spec.startswith("cuda"):
        index = int(spec.partition(":")[2] or 0)
        if not count:
            why = (f"torch {torch.__version__} is a CPU-only build" if torch.version.cuda is None
                   else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
            raise ConfigError(f"embed.device: {spec} is not available: this machine has no CUDA device ({why}); "
                              "set embed.device: cpu, or auto to use a GPU where there is one")
        if index >= count:
            raise ConfigError(f"embed.device: {spec} is not available: this machine has {count} CUDA device"
                              f"{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1}); set embed.device to one of them")
        return f"cuda:{index}"
    if spec == "mps":
        if not mps:
            raise ConfigError("embed.device: mps is not available: torch sees no Apple GPU on this machine; "
                              "set embed.device: cpu or auto")
        return "mps"
    raise ConfigError(f"embed.device: {spec!r}; expected cpu, cuda, cuda:N, mps or auto")


def onnx_device(spec: str) -> str:
    """The device of an ONNX model: onnxruntime's CPU provider (``auto`` resolves to the CPU)."""
    if spec in ("cpu", "auto"):
        return "cpu"
    raise ConfigError(f"embed.device: {spec}: vector.backend: onnx runs on the CPU in this version (onnxruntime's "
                      "CPUExecutionProvider); set embed.device: cpu or auto, or use vector.backend: torch on the GPU")


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _quiet_transformers() -> None:
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - older transformers
        pass


def _load_torch(path: str, device: str):
    from sentence_transformers import SentenceTransformer

    _quiet_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return SentenceTransformer(path, device=device, local_files_only=True)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def one_intra_op_thread() -> bool:
    """Set the calling thread to one torch intra-op thread, leaving the process-wide number (what a thread
    started later takes) as it was; False (nothing done) before torch is imported. A thread's OpenMP team size and
    MKL's local count are its own; ``torch.set_num_threads`` also sets the process-wide number, which a throwaway
    thread puts back (setting it sets the setter's own count too). Callers serialise calls
    (:func:`reindex.adapters.embedders.queries.in_query_thread`)."""
    if "torch" not in sys.modules:
        return False
    import torch

    process: list[int] = []
    probe = threading.Thread(target=lambda: process.append(torch.get_num_threads()), name="reindex-torch-probe")
    probe.start()  # a new thread's first look takes the process-wide number
    probe.join()
    torch.get_num_threads()  # this thread's first look (it would reset the count later): taken before ours is set
    torch.set_num_threads(1)
    back = threading.Thread(target=torch.set_num_threads, args=(process[0],), name="reindex-torch-restore")
    back.start()
    back.join()
    return True


def _load(path: str, backend: str = "torch", precision: str = "float32", device: str = "cpu"):
    """The model in ``path`` (cached per process: one model per backend, precision and device)."""
    _offline()
    # An ONNX session's threads are its own (the calling thread's torch count when made): a query thread's
    # one-thread session is another entry than the build's.
    threads = _torch_threads() if backend == "onnx" else None
    with _LOCK:
        key = (path, backend, precision, device, threads)
        if key not in _CACHE:
            try:
                model = _load_torch(path, device)
                if backend == "onnx":
                    _run_transformer_in_onnxruntime(model, onnx_export(Path(path), precision),
                                                    per_text=precision == "int8")
            except ReindexErrors:
                raise
            except Exception as err:  # noqa: BLE001 - any load failure is one clear line
                raise ModelError(f"cannot load sentence-transformers model from {path}: {err}".splitlines()[0]) from None
            if backend == "torch" and precision == "float16":
                model = model.half()
            _CACHE[key] = model
        return _CACHE[key]


def load_transformer(source: Path):
    """The bare transformer and fast tokenizer of the local model folder ``source`` (no sentence-transformers
    pipeline), read from its files only: what a static-model distillation reads."""
    from transformers import AutoModel, AutoTokenizer

    _offline()
    _quiet_transformers()
    model = AutoModel.from_pretrained(str(source), local_files_only=True)
    return model, AutoTokenizer.from_pretrained(str(source), local_files_only=True, use_fast=True)


# --------------------------------------------------------------------------------------------
# ONNX export (local, content-addressed cache)
# --------------------------------------------------------------------------------------------


def require_onnxruntime() -> None:
    """Raise ConfigError (one line, what to install) unless onnx and onnxruntime can be imported."""
    missing = []
    for name in ("onnxruntime", "onnx"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ConfigError(
            f"vector.backend: onnx needs the package{'s' if len(missing) > 1 else ''} {' and '.join(missing)}, "
            f"which {'are' if len(missing) > 1 else 'is'} not installed; run `pip install 'vector-reindex[onnx]'` "
            "(or set vector.backend: torch)")


def onnx_cache_key(source_digest: str, precision: str) -> str:
    """The cache folder name of an export: the source model's digest, the backend, the precision, the recipe."""
    body = json.dumps([ONNX_RECIPE, source_digest, "onnx", precision], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:32]


def onnx_export(source: Path, precision: str) -> Path:
    """The folder of the ONNX export of the model in ``source`` at ``precision`` (float32 or int8), made
    here from the local files on first use and then kept in ``<cache>/onnx/<key>`` (see
    :func:`onnx_cache_key`). Its files' digest is the vector half's revision."""
    if precision not in ("float32", "int8"):
        raise ConfigError(f"vector.precision: {precision} is not available with vector.backend: onnx (use float32 or int8)")
    require_onnxruntime()
    source = Path(source)
    source_digest = digest_path(source)
    folder = settings.model_cache_dir() / "onnx" / onnx_cache_key(source_digest, precision)
    if (folder / "export.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    saying = Preparing(f"exporting {source} to ONNX ({precision})",
                       "vector.backend onnx runs the model with onnxruntime on a local export, and none of this model "
                       "at this precision is cached yet", "about 5-10 CPU-seconds for all-MiniLM-L6-v2 (measured here: "
                       "float32 8.8, int8 4.7), more for a larger model")
    try:
        _export(source, precision, tmp)
        # Written last: a folder with export.json is complete.
        (tmp / "export.json").write_text(json.dumps(
            {"recipe": ONNX_RECIPE, "source_digest": source_digest, "precision": precision, "opset": ONNX_OPSET},
            sort_keys=True, indent=1) + "\n", encoding="utf-8")
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / "export.json").is_file():  # another process finished first: use its export
                raise
        saying.finished(str(folder))
    except ReindexErrors:
        raise
    except Exception as err:  # noqa: BLE001 - an exporter failure is one clear line
        raise ModelError(f"cannot export {source} to ONNX ({precision}): {err}".splitlines()[0]) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


@contextlib.contextmanager
def _quiet_exporters():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # onnxruntime's quantiser logs advice on the root logger
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


# Model types whose exported graph onnxruntime's transformer optimizer fuses (attention, layer norms, GELU):
# measured on all-MiniLM-L6-v2 at 252 tokens, int8 took 1.0× torch's CPU time unfused and 0.67× fused.
_FUSED_MODEL_TYPES = {"bert": "bert"}


def _export(source: Path, precision: str, out: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    _quiet_transformers()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        # Eager attention: its traced graph is what the optimizer recognises and fuses (SDPA's is not).
        model = SentenceTransformer(str(source), device="cpu", local_files_only=True,
                                    model_kwargs={"attn_implementation": "eager"})
    first = model[0]
    hf = getattr(first, "model", None) or getattr(first, "auto_model", None)
    if hf is None or not isinstance(hf, torch.nn.Module):
        raise ConfigError(f"vector.backend: onnx: the first module of {source} is not a transformer "
                          f"({type(first).__name__}); use vector.backend: torch for this model")
    names = [n for n in _ONNX_INPUTS if n in model.preprocess(["probe"])]

    class _Forward(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, args)), return_dict=True)["last_hidden_state"]

    hf.eval()
    example = tuple(torch.ones((2, 8), dtype=torch.long) if n != "token_type_ids" else torch.zeros((2, 8), dtype=torch.long)
                    for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in (*names, "last_hidden_state")}
    traced, fused = out / "traced.onnx", out / "fused.onnx"
    with _quiet_exporters(), torch.no_grad():
        # The TorchScript exporter (dynamo=False): deterministic (same files for the same weights) and
        # without onnxscript, which the dynamo exporter needs.
        torch.onnx.export(_Forward(hf), example, str(traced), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=axes, opset_version=ONNX_OPSET, dynamo=False)
        kind = _FUSED_MODEL_TYPES.get(getattr(hf.config, "model_type", ""))
        if kind is not None:
            from onnxruntime.transformers.optimizer import optimize_model

            optimized = optimize_model(str(traced), model_type=kind, num_heads=int(hf.config.num_attention_heads),
                                       hidden_size=int(hf.config.hidden_size), opt_level=1)
            optimized.save_model_to_file(str(fused))
            traced.unlink()
        else:
            traced.rename(fused)
        if precision == "int8":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            # Per-channel int8 weights, activations quantised at run time. Measured on all-MiniLM-L6-v2:
            # mean cosine to float32 0.996 (per-tensor weights, the common default: 0.94).
            quantize_dynamic(str(fused), str(out / _ONNX_FILE), weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul", "Attention"],
                             extra_options={"DefaultTensorType": 1})  # 1 = float: fused ops' outputs are untyped
            fused.unlink()
        else:
            fused.rename(out / _ONNX_FILE)


def _run_transformer_in_onnxruntime(model, folder: Path, *, per_text: bool = False) -> None:
    """Replace the forward pass of ``model``'s transformer with an onnxruntime session of the export in
    ``folder``: tokenisation, pooling and normalisation stay sentence-transformers' own.

    ``per_text`` (int8): each text of a call runs alone, unpadded. Dynamic quantisation computes one
    activation scale over the whole input tensor, so in a batch a text's vector depended on the other texts
    and the padding beside it (least cosine 0.986 alone vs in a batch of 48, bench/gate_onnx.py --inspect):
    one vector id must give one vector per text whatever the batch, shard layout or resume (invariants 2, 10).
    The padded positions of the output are zeros, which mean pooling masks out."""
    import numpy as np
    import onnxruntime as ort
    import torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, torch.get_num_threads())  # the same thread budget as torch
    options.log_severity_level = 3
    session = ort.InferenceSession(str(folder / _ONNX_FILE), options, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    first = model[0]
    hf = getattr(first, "model", None) or getattr(first, "auto_model", None)

    def run(features, ids) -> np.ndarray:
        feed = {}
        for name in inputs:
            value = features.get(name)
            feed[name] = (value if value is not None else torch.zeros_like(ids)).cpu().numpy()
        return session.run(["last_hidden_state"], feed)[0]

    def forward(**features):
        ids = features["input_ids"]
        if not per_text or ids.shape[0] == 1 and bool(features["attention_mask"].all()):
            return {"last_hidden_state": torch.from_numpy(run(features, ids))}
        lengths = features["attention_mask"].sum(dim=1).tolist()
        hidden = None
        for row, n in enumerate(lengths):
            one = {k: v[row:row + 1, :n] for k, v in features.items() if torch.is_tensor(v) and v.dim() == 2}
            out = run(one, ids[row:row + 1, :n])
            if hidden is None:
                hidden = np.zeros((ids.shape[0], ids.shape[1], out.shape[-1]), dtype=out.dtype)
            hidden[row, :n] = out[0]
        return {"last_hidden_state": torch.from_numpy(hidden)}

    hf.forward = forward  # sentence-transformers calls the transformer's `forward` method by name


def model_files(vector: VectorHalf) -> Path:
    """The files whose digest identifies this vector half's model: the model folder (torch), or its ONNX
    export (made on first use)."""
    source = resolve_model_path(vector.model)
    return onnx_export(source, vector.precision) if vector.backend == "onnx" else source


# --------------------------------------------------------------------------------------------
# The embedder
# --------------------------------------------------------------------------------------------


class _Feed:
    """The model's features built from reindex's token ids: each text is tokenized once (the model's own
    ``tokenizer.json``, without truncation or padding), its tokens counted, and the same ids, truncated to the
    model's limit, wrapped in the model's special tokens and padded, are what the network reads. The model's
    own preprocessing never runs. Made only when it builds exactly the model's features for probe texts
    (:func:`_feed_for`); otherwise the embedder counts, then lets the model tokenize (two passes)."""

    def __init__(self, tok, *, limit: int, prefix: list[int], suffix: list[int], prefix_types: list[int],
                 suffix_types: list[int], content_type: int, pad_id: int, keys: tuple[str, ...], extra: dict) -> None:
        self.tok, self.limit = tok, limit  # limit: content tokens (specials excluded)
        self.prefix, self.suffix = np.asarray(prefix, np.int64), np.asarray(suffix, np.int64)
        self.prefix_types, self.suffix_types = np.asarray(prefix_types, np.int64), np.asarray(suffix_types, np.int64)
        self.content_type, self.pad_id, self.keys, self.extra = content_type, pad_id, keys, extra

    def features(self, rows: list[list[int]]) -> dict:
        """The padded tensors (right padding, longest row) of ``rows`` of content ids, truncated to the limit."""
        import torch

        a, b = len(self.prefix), len(self.suffix)
        rows = [r[: self.limit] for r in rows]
        width = a + b + max(len(r) for r in rows)
        ids = np.full((len(rows), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        types = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            n = len(r)
            ids[i, :a], ids[i, a:a + n], ids[i, a + n:a + n + b] = self.prefix, r, self.suffix
            mask[i, : a + n + b] = 1
            types[i, :a], types[i, a:a + n], types[i, a + n:a + n + b] = self.prefix_types, self.content_type, self.suffix_types
        made = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        return {**{k: torch.from_numpy(made[k]) for k in self.keys}, **self.extra}


_FEED_PROBES = ("Reindex feeds the model its own token ids.", "Ünïcödé, accents — and 中文 text; CamelCaseWords!",
                "a")


def _feed_for(model, tok):
    """A :class:`_Feed` for ``model`` and its tokenizer ``tok`` (reindex's HFTokenizer of the model folder), or None
    when the model is not a plain text transformer whose features it reproduces exactly."""
    import torch

    try:
        if getattr(model, "truncate_dim", None) or getattr(model, "prompts", None) and getattr(model, "default_prompt_name", None):
            return None
        backend = tok.backend
        plain = backend.encode("probe", add_special_tokens=False)
        full = backend.post_process(plain)
        special = list(full.special_tokens_mask)
        if 0 not in special:
            return None
        first = special.index(0)
        last = len(special) - special[::-1].index(0)
        if last - first != len(plain.ids) or any(special[first:last]):
            return None
        seq = int(getattr(model, "max_seq_length", 0) or 0)
        limit = seq - (len(special) - (last - first))
        if limit <= 0:
            return None
        hf_tok = getattr(model, "tokenizer", None)
        if hf_tok is None or getattr(hf_tok, "padding_side", "right") != "right":
            return None
        pad = getattr(hf_tok, "pad_token_id", None)
        preprocess = getattr(model, "preprocess", None) or model.tokenize
        long = " ".join(["word"] * (limit + 8))
        probes = [*_FEED_PROBES, long]
        want = preprocess(probes)
        tensors = tuple(k for k, v in want.items() if torch.is_tensor(v))
        if not set(tensors) <= {"input_ids", "attention_mask", "token_type_ids"} or "input_ids" not in tensors:
            return None
        feed = _Feed(tok, limit=limit, prefix=full.ids[:first], suffix=full.ids[last:],
                     prefix_types=full.type_ids[:first], suffix_types=full.type_ids[last:],
                     content_type=full.type_ids[first], pad_id=0 if pad is None else int(pad), keys=tensors,
                     extra={k: v for k, v in want.items() if not torch.is_tensor(v)})
        got = feed.features(tok.ids_batch(probes))
        if all(torch.equal(got[k], want[k].cpu()) for k in tensors):
            return feed
    except Exception:  # noqa: BLE001 - any surprise in a model's layout: the model tokenizes, as before
        return None
    return None


class SentenceTransformerEmbedder:
    """Batches texts through a local sentence-transformers model; counts truncated inputs. Each text is
    tokenized once: the count and the model's input come from the same token ids (:class:`_Feed`)."""

    def __init__(self, vector: VectorHalf, *, batch_size: int = 64, device: str = "auto") -> None:
        if vector.backend not in ("torch", "onnx"):
            raise ConfigError(f"vector.backend: {vector.backend!r} is not supported for sentence-transformers (use torch or onnx)")
        if vector.precision == "int8" and vector.backend != "onnx":
            raise ConfigError("vector.precision: int8 needs vector.backend: onnx (dynamic quantisation of an ONNX export)")
        self.vector = vector
        self.path = resolve_model_path(vector.model)
        self.batch_size = batch_size
        self.device = onnx_device(device) if vector.backend == "onnx" else resolve_device(device)
        if vector.backend == "onnx" and vector.revision.startswith("sha256:"):
            export = onnx_export(self.path, vector.precision)
            if digest_path(export) != vector.revision:
                raise ModelError(
                    f"the ONNX export in {export} has digest {digest_path(export)} but vector.revision is {vector.revision} "
                    "(exported by another torch/onnxruntime version?); copy the export folder from the machine that "
                    "planned, or plan again")
        self.model = _load(str(self.path), vector.backend, vector.precision, self.device)
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
        self._feed = _feed_for(self.model, self._tok)
        if self._feed is not None:
            self.max_tokens = self._feed.limit  # the model's length less its own special tokens

    def describe(self) -> dict:
        """Where and how this embedder runs (for run reports and calibration)."""
        import torch

        # threads: torch's intra-op threads (onnxruntime is given the same number), the CPUs one call uses.
        return {"provider": self.vector.provider, "backend": self.vector.backend, "precision": self.vector.precision,
                "device": self.device, "threads": torch.get_num_threads() if self.device == "cpu" else None,
                "tokenized": "once" if self._feed is not None else "twice"}

    def for_queries(self):
        """This embedder as a reader embeds queries: on the query threads, one intra-op thread each
        (:mod:`reindex.adapters.embedders.queries`); an ONNX model with a one-thread session of its own. On a GPU,
        itself."""
        from reindex.adapters.embedders.queries import QueryEmbedder, in_query_thread

        if self.device != "cpu":
            return self
        if self.vector.backend == "onnx":
            return QueryEmbedder(in_query_thread(SentenceTransformerEmbedder, self.vector, batch_size=self.batch_size,
                                                 device=self.device, prepare=one_intra_op_thread),
                                 one_intra_op_thread, owns=True)
        return QueryEmbedder(self, one_intra_op_thread)

    def raw(self, texts: list[str]) -> np.ndarray:
        """The bare library call on the same inputs (``SentenceTransformer.encode``): what calibration compares
        :meth:`embed` with."""
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        return self.model.encode(inputs, batch_size=self.batch_size, normalize_embeddings=self.vector.normalize,
                                 convert_to_numpy=True, show_progress_bar=False)

    def embed(self, texts: list[str]) -> EmbedResult:
        if not texts:
            return EmbedResult(np.zeros((0, self.dimension), dtype=np.float32), 0, 0)
        inputs = [self.vector.prefix + t for t in texts] if self.vector.prefix else list(texts)
        if self._feed is None:
            lengths = self._tok.count_batch(inputs)
            vecs = self.raw(texts)
        else:
            ids = self._tok.ids_batch(inputs)
            lengths = [len(r) for r in ids]
            vecs = self._forward(ids, lengths)
        truncated = sum(1 for n in lengths if self.max_tokens and n > self.max_tokens)
        return EmbedResult(np.asarray(vecs, dtype=np.float32), truncated, sum(lengths))

    def _forward(self, ids: list[list[int]], lengths: list[int]) -> np.ndarray:
        """The model's vectors of token-id rows: longest first in batches (less padding), back in order."""
        import torch

        order = sorted(range(len(ids)), key=lambda i: -lengths[i])
        out = np.zeros((len(ids), self.dimension), dtype=np.float32)
        self.model.eval()
        with torch.inference_mode():
            for at in range(0, len(order), max(self.batch_size, 1)):
                rows = order[at: at + max(self.batch_size, 1)]
                features = self._feed.features([ids[i] for i in rows])
                if self.device != "cpu":
                    features = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in features.items()}
                vec = self.model(features)["sentence_embedding"]
                if self.vector.normalize:
                    vec = torch.nn.functional.normalize(vec, p=2, dim=1)
                out[rows] = vec.float().cpu().numpy()
        return out
