"""A turn's tool loop as a chatbot that sends every schema would have sent it (the
baseline the usage figures compare with). No I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..replies import call_key

__all__ = ["baseline_messages"]


def baseline_messages(loop: Sequence[Mapping[str, Any]], ran: Iterable[str]) -> list[Mapping[str, Any]]:
    """A turn's tool-loop messages as a chatbot that sends every schema would have them: only
    the calls that ran (``ran``: by ``replies.call_key``, round and id, as a model may number
    its calls afresh each round) and their results, without the loader's calls and the
    answers about unsent schemas."""
    keys, round_ = set(ran), -1
    out: list[Mapping[str, Any]] = []
    for message in loop:
        if message.get("role") == "assistant":
            round_ += 1
            if message.get("tool_calls"):
                kept = [call for call in message["tool_calls"] if call_key(round_, str(call.get("id"))) in keys]
                if kept or message.get("content"):
                    out.append({**message, "tool_calls": kept or None})
                continue
        if message.get("role") != "tool" or call_key(round_, str(message.get("tool_call_id"))) in keys:
            out.append(message)
    return out
