"""The local embedding model (``local/all-MiniLM-L6-v2``): all-MiniLM-L6-v2 as an int8 ONNX
file on onnxruntime, no provider and no PyTorch. Run for real: the dev extra installs it."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from middleware import Config, ConfigError, llm, local_embedding
from middleware.exceptions import LLMError
from middleware.testing import RedisServer, capture_events
from tests.conftest import open_manager
from tests.test_recall import FILLER, auto, events_named, say, search_server  # noqa: F401 (a fixture)

MODEL = "local/all-MiniLM-L6-v2"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_unit_length_and_near_by_meaning_not_by_words() -> None:
    """384 numbers of unit length per text; a paraphrase that shares no word is nearer
    than a sentence that shares one."""
    car, paraphrase, shares_a_word = llm.embed(MODEL, [
        "What car do I have?", "I drive a 2016 Volvo V60.", "Do I have the tickets for the game?"])  # fmt: skip
    assert len(car) == 384 and all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in (car, paraphrase))
    assert cosine(car, paraphrase) > cosine(car, shares_a_word) + 0.1


def test_a_text_gets_the_same_vector_alone_or_in_a_padded_batch() -> None:
    """Batches are padded to their longest text: padding must not move a vector, and a
    batch longer than one run comes back whole and in order."""
    texts = [f"Sentence number {i} about {'a long and winding road ' * (i % 5)}the harbour." for i in range(70)]
    together = llm.embed(MODEL, texts)
    assert len(together) == len(texts)
    for i in (0, 33, 69):
        (alone,) = llm.embed(MODEL, [texts[i]])
        assert cosine(alone, together[i]) > 0.9999


def test_the_async_face_gives_the_same_vectors() -> None:
    texts = ["The blue kayak stays in the garage."]
    assert asyncio.run(llm.aembed(MODEL, texts)) == llm.embed(MODEL, texts)


def test_an_unknown_local_model_is_refused_by_name() -> None:
    for section in ("memory", "disclosure"):
        with pytest.raises(ConfigError, match=r"local/minilm-xl.*expected one of: local/all-MiniLM-L6-v2"):
            Config().with_overrides(**{section: {"embedding_model": "local/minilm-xl"}})
    with pytest.raises(LLMError, match="unknown local embedding model 'local/minilm-xl'"):
        llm.embed("local/minilm-xl", ["x"])


def test_a_missing_package_or_a_changed_model_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not installed: the error says what to install. A model file of another size or
    checksum (a damaged or swapped download) is never run."""
    spec = local_embedding.MODELS["all-MiniLM-L6-v2"]
    monkeypatch.setattr(local_embedding, "_loaded", {})
    monkeypatch.setitem(local_embedding.MODELS, "all-MiniLM-L6-v2", spec.__class__(**{**vars(spec), "package": "no_such_pkg"}))
    with pytest.raises(LLMError, match=r"needs onnxruntime and no-such-pkg \(no_such_pkg is missing\): pip install"):
        llm.embed(MODEL, ["x"])
    monkeypatch.setitem(local_embedding.MODELS, "all-MiniLM-L6-v2", spec.__class__(**{**vars(spec), "sha256": "0" * 64}))
    with pytest.raises(LLMError, match=r"model file .*model\.onnx is missing or not the one expected \(22,928,619 bytes"):
        llm.embed(MODEL, ["x"])


def test_semantic_recall_with_the_local_model_finds_a_fact_asked_in_other_words(
    face: str,
    search_server: RedisServer,  # noqa: F811
    tmp_path: Path,
    loop: asyncio.AbstractEventLoop,
) -> None:
    """End to end on Redis with the query engine: the fact comes back for a question that
    shares none of its words, by the local model's vectors alone."""
    search_server.client().flushall()
    config = auto(tmp_path, recall="semantic", embedding_model=MODEL).with_overrides(store={"url": search_server.url})

    with open_manager(face, config, loop) as mgr, capture_events() as events:
        say(mgr, "s", "I drive a 2016 Volvo V60.", *([FILLER] * 6))
        prompt = mgr.prepare("s", "What car do I have?")
    assert not events_named(events, "recall.semantic_unavailable") and not events_named(events, "recall.embedding_failed")
    (item,) = [r for r in prompt.recalled if "Volvo" in r.text]
    assert "similar" in item.why
