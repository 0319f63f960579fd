"""What a request to the endpoint holds, read against the session. No I/O.

A client of the endpoint sends OpenAI chat messages: its whole history, as most do, or only
what is new. Either way the turn in progress is what follows the last user message: that
message, then (when the model asked for tools) the assistant's tool calls and the client's
results. ``read_messages`` finds it; everything before it was recorded by earlier requests.
A turn that waits for the client's tool results between requests is an ``OpenTurn``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..exceptions import InvalidMessageError, InvalidToolCallError
from .state import MAX_TOOL_NAME

__all__ = ["NO_TEXT", "ROLES", "Conversation", "OpenTurn", "content_text", "messages_kind", "or_no_text", "read_messages",
           "whole_turns"]  # fmt: skip

ROLES = ("system", "developer", "user", "assistant", "tool")
NO_TEXT = "(a message without text)"  # a user message with no text of its own (an image alone, only whitespace)
_SHOWN = 40  # characters of a bad value quoted back in an error


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


# --- reading a request's messages -------------------------------------------------------


def content_text(content: Any, where: str) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise InvalidMessageError(f"{where}.content[{index}] is not a content part (an object with a 'type').")
            if part["type"] in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidMessageError(f"{where}.content has a {type(content).__name__}; expected a string or a list of parts.")


def or_no_text(text: str) -> str:
    """A user message's ``text`` as a turn records it: ``NO_TEXT`` where it has none but
    whitespace (a turn's user message may not be empty)."""
    return text if text.strip() else NO_TEXT


def _check_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise InvalidToolCallError(f"{where}.tool_calls has a {type(calls).__name__}; expected an array.")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
            raise InvalidToolCallError(f"{where}.tool_calls[{index}] needs an 'id' and a 'function' with a 'name'.")
        for field, value in (("id", call["id"]), ("function.name", function["name"])):
            if not value or len(value) > MAX_TOOL_NAME:
                raise InvalidToolCallError(f"{where}.tool_calls[{index}].{field} has {len(value):,} characters; "
                                           f"expected 1 to {MAX_TOOL_NAME}.")  # fmt: skip


def _check_message(message: Any, index: int) -> str:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise InvalidMessageError(f"{where} has a {type(message).__name__}; expected an object.")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidMessageError(f"{where}.role has value {_shown(role)}; expected one of {list(ROLES)}.")
    content_text(message.get("content"), where)
    if role == "assistant" and message.get("tool_calls"):
        _check_calls(message["tool_calls"], where)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise InvalidMessageError(f"{where} is a tool result without a 'tool_call_id'.")
    if role == "tool" and not 0 < len(message["tool_call_id"]) <= MAX_TOOL_NAME:
        raise InvalidMessageError(f"{where}.tool_call_id has {len(message['tool_call_id']):,} characters; "
                                  f"expected 1 to {MAX_TOOL_NAME}.")  # fmt: skip
    return str(role)


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a request's messages hold, seen from the session."""

    system: str | None  # the client's own leading system (or developer) text
    user: str | None  # the text of the last user message: the turn in progress
    user_content: Any  # that message's content as sent (parts kept for the upstream call)
    tail: tuple[dict[str, Any], ...]  # what follows it: the turn's tool calls and results so far
    earlier: tuple[tuple[dict[str, Any], ...], ...]  # whole turns before it (user ... final reply)
    waiting: tuple[str, ...]  # the call ids of the tool results the request ends with


def whole_turns(body: Sequence[dict[str, Any]]) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The whole turns in ``body``: a user message, then messages up to a final assistant text."""
    turns: list[tuple[dict[str, Any], ...]] = []
    current: list[dict[str, Any]] = []
    for message in body:
        if message["role"] == "user":
            current = [message]
        elif current:
            current.append(message)
            if message["role"] == "assistant" and not message.get("tool_calls") and content_text(message.get("content"), ""):
                turns.append(tuple(current))
                current = []
    return tuple(turns)


def messages_kind(messages: Any) -> str:
    """What a request's ``messages`` holds when it is not a non-empty array, by its type (a
    string there may be message content, which an error never quotes)."""
    return "'messages' is an empty array" if messages == [] else f"'messages' has a {type(messages).__name__[:40]}"


def read_messages(messages: Any) -> Conversation:
    """The request's messages read into the turn in progress; InvalidMessageError naming
    the first bad one (its index and field, never its content)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidMessageError(f"{messages_kind(messages)}; expected a non-empty array of messages.")
    roles = [_check_message(message, index) for index, message in enumerate(messages)]
    lead = 0
    while lead < len(roles) and roles[lead] in ("system", "developer"):
        lead += 1
    # Only whitespace is no system text: kept, it would reach the provider as a block of its own.
    joined = "\n\n".join(content_text(m.get("content"), "") for m in messages[:lead])
    system = joined if joined.strip() else None
    body = [dict(m) for m, role in zip(messages[lead:], roles[lead:], strict=True) if role not in ("system", "developer")]
    last_user = max((i for i, m in enumerate(body) if m["role"] == "user"), default=None)
    tail = body if last_user is None else body[last_user + 1 :]
    if tail and tail[-1]["role"] == "assistant":
        raise InvalidMessageError("The last message is an assistant message; expected a user message or tool results.")
    waiting: list[str] = []
    for message in reversed(tail):
        if message["role"] != "tool":
            break
        waiting.insert(0, message["tool_call_id"])
    if last_user is None:
        if not waiting:
            raise InvalidMessageError("'messages' holds no user message and no tool results.")
        return Conversation(system, None, None, tuple(tail), (), tuple(waiting))
    user = body[last_user]
    text = content_text(user.get("content"), f"messages[{lead + last_user}]")
    earlier = whole_turns(body[:last_user])
    return Conversation(system, text, user.get("content"), tuple(tail), earlier, tuple(waiting))


# --- the turn in flight ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpenTurn:
    """A turn between requests: its place, its user message, its tool loop so far and what
    its plan keeps between requests (the tools it disclosed and loaded, where its last call's
    breakpoints ended, the calls it answered itself: see ``middleware.serve.turns``)."""

    seq: int  # its arrival number (0: none, recorded whenever it ends)
    turn_id: str
    user: str
    loop: tuple[dict[str, Any], ...] = ()  # assistant tool-call messages and tool results, in order
    steps: int = 0  # upstream calls made so far
    plan: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    epoch: str = ""  # the incarnation of the session's live hash it began in ("": not known)

    def to_json(self) -> bytes:
        # The epoch first: arrive.lua reads it from the opening of the text, not decoding it all.
        return orjson.dumps({"epoch": self.epoch, "seq": self.seq, "turn_id": self.turn_id, "user": self.user, "loop": self.loop,
                             "steps": self.steps, "plan": self.plan})  # fmt: skip

    @classmethod
    def from_json(cls, raw: Any) -> OpenTurn | None:
        """The turn a ``live`` field holds, or None for a missing or unreadable record."""
        try:
            data = orjson.loads(raw)
            plan = data.get("plan") or {}
            if not isinstance(plan, dict):
                raise TypeError("plan")
            return cls(seq=int(data["seq"]), turn_id=str(data["turn_id"]), user=str(data["user"]),
                       loop=tuple(dict(m) for m in data["loop"]), steps=int(data["steps"]), plan=plan,
                       epoch=str(data.get("epoch") or ""))  # fmt: skip
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    @property
    def pending(self) -> tuple[str, ...]:
        """The call ids the last assistant message asked for that have no result yet."""
        asked: list[str] = []
        for message in self.loop:
            if message["role"] == "assistant":
                asked = [call["id"] for call in message.get("tool_calls") or ()]
            elif message.get("tool_call_id") in asked:
                asked.remove(message["tool_call_id"])
        return tuple(asked)

    def answered(self, results: Sequence[Mapping[str, Any]]) -> OpenTurn:
        """This turn with the tool results among ``results`` that answer its pending calls,
        every result after the last assistant message in the order it asked for them;
        InvalidMessageError when one is missing."""
        pending = self.pending
        given = {m["tool_call_id"]: m for m in results if m.get("role") == "tool" and m.get("tool_call_id") in pending}
        missing = [call for call in pending if call not in given]
        if missing:
            raise InvalidMessageError(f"No tool result for call {_shown(missing[0])}, which the model asked for.")
        answers = [
            {"role": "tool", "tool_call_id": call, "content": content_text(given[call].get("content"), "")} for call in pending
        ]
        last = max((i for i, m in enumerate(self.loop) if m["role"] == "assistant"), default=-1)
        order = {call["id"]: i for i, call in enumerate(self.loop[last].get("tool_calls") or ())} if last >= 0 else {}
        results_after = sorted([*self.loop[last + 1 :], *answers], key=lambda m: order.get(m.get("tool_call_id"), len(order)))
        return dataclasses.replace(self, loop=(*self.loop[: last + 1], *results_after))

    @property
    def field(self) -> str | None:
        """The ``live`` field that holds this turn while it waits for tool results."""
        pending = self.pending
        return f"open:{pending[0]}" if pending else None
