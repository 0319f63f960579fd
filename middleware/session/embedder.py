"""Embeddings, for matching tools by meaning (``disclosure.embedding_model``) and for
semantic recall (``memory.recall: semantic``): what a process embeds, and keeps so it
embeds each text once.

A failing embedding model never fails a turn: a warning, and the turn matches tools by
words, or recalls lexically. Whether the store has vector search at all is learned on
first use (the vector index is made then).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import cast

from .. import llm
from ..config.schema import Config
from ..core.disclosure import Catalog
from ..core.effects import Io, Program
from ..core.state import TurnUpdate
from ..core.text import redact_secrets
from ..events import log
from ..exceptions import LLMError
from ..lru import Lru
from ..store.keys import Layout
from ..store.vectors import encode_vector, vector_index

__all__ = ["EMBED_BATCH", "Embedder"]

# Texts embedded per call (pieces of held turns when they are written, tools matched by
# meaning): providers cap a call's inputs (Cohere at 96 texts, Vertex AI at 250).
EMBED_BATCH = 96


class Embedder:
    """What one engine embeds, and what it keeps of it."""

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config, self.layout = config, layout
        # Semantic recall: None until the store says whether it has vector search.
        self.semantic: bool | None = None if config.memory.recall == "semantic" and layout.recall else False
        self._message_vectors: Lru[list[float]] = Lru(64)  # by model and message: made for tools, kept for recall
        self._tool_vectors: Lru[array[float]] = Lru(2_048)  # by model and tool text: see _embed_tools

    def meaning(self, catalog: Catalog | None, message: str) -> Program[Sequence[float]]:
        """The message's embedding for matching ``catalog``'s tools by meaning, the tools' own
        made first when the catalog has none; () when not asked for, or when the model fails
        (a warning: the turn matches by words)."""
        model = self.config.disclosure.embedding_model
        if catalog is None or not model or self.config.disclosure.match_tools <= 0:
            return ()
        try:
            if catalog.vectors is None:
                yield from self._embed_tools(catalog, model)
            (vector,) = yield from self._embedded(model, [message])
            if catalog.vectors is not None and len(catalog.vectors[0][0]) != len(vector):
                # The model now answers in another size: its tools are embedded again next turn.
                size = len(catalog.vectors[0][0])
                catalog.vectors = None
                for text in catalog.meaning_texts():
                    self._tool_vectors.forget(f"{model}\x00{text}")
                raise LLMError(f"a message vector of size {len(vector)} against tool vectors of size {size}; expected one size")
        except LLMError as exc:
            log.warning("disclosure.embedding_failed", model=model, error=redact_secrets(str(exc))[:200],
                        hint="tools are matched by words this turn")  # fmt: skip
            return ()
        if self.semantic is not False and self.config.memory.embedding_model == model:
            self._message_vectors.put(f"{model}\x00{message}", vector)  # recall asks for it next
        return vector

    def message(self, text: str) -> Program[Sequence[float]]:
        """The current message's embedding for semantic recall, or () (not asked for, or it failed)."""
        if self.semantic is False:
            return ()
        found = yield from self.vectors([text])
        return found[0] if found else ()

    def _embed_tools(self, catalog: Catalog, model: str) -> Program[None]:
        """Give ``catalog`` its tools' vectors, embedding in batches of EMBED_BATCH those not
        kept from an earlier catalog; each batch is kept as it is made, so a turn after a
        failed one embeds only what is still missing. LLMError when a batch fails."""
        tools = catalog.meaning_texts()
        found = {text: self._tool_vectors.get(f"{model}\x00{text}") for text in tools}
        missing = [text for text, vector in found.items() if vector is None]
        for start in range(0, len(missing), EMBED_BATCH):
            batch = missing[start : start + EMBED_BATCH]
            made = yield from self._embedded(model, batch)
            for text, vector in zip(batch, made, strict=True):
                found[text] = kept = array("d", vector)  # 8 bytes a number, against about 32 in a list
                self._tool_vectors.put(f"{model}\x00{text}", kept)
        sizes = sorted({len(vector or ()) for vector in found.values()})
        if len(sizes) > 1:  # kept from before the model changed, or a model that answers unevenly
            for text in found:
                self._tool_vectors.forget(f"{model}\x00{text}")
            raise LLMError(f"vectors of sizes {sizes[:5]}; expected one size")
        catalog.set_vectors([cast("array[float]", found[text]) for text in tools])

    def _embedded(self, model: str, texts: list[str]) -> Program[list[list[float]]]:
        """Embeddings of ``texts`` by ``model``, one non-empty vector per text (else LLMError);
        a message whose vector ``meaning`` has just made (for tool matching, then asked for by
        recall) is not embedded again."""
        if len(texts) == 1:
            made = self._message_vectors.get(f"{model}\x00{texts[0]}")
            if made is not None:
                return [made]
        vectors: list[list[float]] = yield Io(lambda: llm.embed(model, texts), lambda: llm.aembed(model, texts))
        if len(vectors) != len(texts) or not all(vectors):
            raise LLMError(f"{len(vectors)} vectors for {len(texts)} texts")
        return vectors

    def vectors(self, texts: list[str]) -> Program[list[list[float]] | tuple[()]]:
        """Embeddings of ``texts`` for semantic recall, or () (none asked for, the model
        failed: a warning, and the turn goes on with lexical recall)."""
        if not texts:
            return ()
        model = self.config.memory.embedding_model or ""
        try:
            vectors = yield from self._embedded(model, texts)
        except LLMError as exc:
            log.warning("recall.embedding_failed", model=model, error=redact_secrets(str(exc))[:200])
            return ()
        if self.semantic is None:  # first use: make the store's vector index, or learn it has none
            self.semantic = yield from vector_index(self.layout, len(vectors[0]))
            if not self.semantic:
                log.warning("recall.semantic_unavailable", hint="the store has no vector search (Redis 8, or Redis "
                            "Stack, outside a cluster): recall ranks lexically")  # fmt: skip
                return ()
        return vectors

    def encoded(self, update: TurnUpdate) -> Program[tuple[bytes, ...] | None]:
        """The vectors of a turn's archived pieces, encoded for the store (semantic recall):
        () when it has none to make, None when the embedding model failed (a held turn tries
        again when it is written)."""
        if self.semantic is False or not update.pieces:
            return ()
        vectors = yield from self.vectors([p.text for p in update.pieces])
        if vectors:
            return tuple(encode_vector(v) for v in vectors)
        # vectors() may have learned that the store has no vector search: none to make; else the model failed
        return () if cast("bool | None", self.semantic) is False else None

    def pieces(self, updates: Sequence[TurnUpdate]) -> Program[dict[int, tuple[bytes, ...]]]:
        """The vectors of the pieces of the first of ``updates`` (by ``id`` of their update),
        in one embedding call of up to EMBED_BATCH pieces; {} when it fails or none are asked for."""
        batch: list[TurnUpdate] = []
        for update in updates:
            if batch and sum(len(u.pieces) for u in batch) + len(update.pieces) > EMBED_BATCH:
                break
            batch.append(update)
        if not batch or self.semantic is False:
            return {}
        vectors = yield from self.vectors([piece.text for update in batch for piece in update.pieces])
        if not vectors:
            return {}
        made, at = {}, 0
        for update in batch:
            made[id(update)] = tuple(encode_vector(v) for v in vectors[at : at + len(update.pieces)])
            at += len(update.pieces)
        return made
