"""What chatbots and providers send back, read into the turn's final text and tool calls.

Pure functions: a wrapped chatbot may return a string, an OpenAI-style message dict, a
list of the turn's new messages (assistant tool calls, tool results, final answer) or a
litellm/OpenAI response; tool results arrive as ``tool`` messages answering call ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..exceptions import LLMError
from .state import ToolCall, recorded_name, succeeded
from .text import parse_json

__all__ = [
    "as_dict",
    "call_key",
    "calls_of",
    "decoded",
    "interpret_reply",
    "portable_keys",
    "ran_calls",
    "round_ids",
    "succeeded",
    "tool_results",
]


def as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    if hasattr(message, "model_dump"):
        return message.model_dump()  # type: ignore[no-any-return]
    raise LLMError(f"The chatbot returned a message of type {type(message).__name__}; expected a dict.")


def calls_of(message: Mapping[str, Any], results: Mapping[str, Any]) -> list[ToolCall]:
    """The tool calls an assistant message asked for, with their results (by call id) and outcome."""
    calls = []
    for call in message.get("tool_calls") or ():
        call = as_dict(call)
        result, text = results.get(call.get("id") or "", (None, None))
        function = call.get("function")
        if isinstance(function, Mapping) and recorded_name(function.get("name")) != function.get("name"):
            call = {**call, "function": {**function, "name": recorded_name(function.get("name"))}}  # a name made up
        calls.append(ToolCall.from_openai(call, result=result, ok=succeeded(result), result_sent=text))
    return calls


def tool_results(messages: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Any, str | None]]:
    """The results of the tool messages among ``messages``, by call id: each result (JSON
    decoded where it is JSON, for context keys and the archive) with its text as it came,
    where it came as text (what the history resends, byte for byte: a result decoded and
    encoded again would differ in its spacing, and a provider's cache of the history with it)."""
    results: dict[str, tuple[Any, str | None]] = {}
    for message in messages:
        if message.get("role") == "tool":
            content = message.get("content")
            text = content if isinstance(content, str) else None
            results[message.get("tool_call_id") or ""] = (decoded(text) if text is not None else content, text)
    return results


def _rounds(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any], Sequence[Mapping[str, Any]]]]:
    """Each assistant message with its round (the number of the run of assistant messages
    it is in, from 0) and its round's tool results: the messages after that run, up to the
    next assistant message. A call is answered within its round, so a model that numbers its
    calls afresh each round (``call_0`` every time) has each call paired with its own
    result; parallel calls given one assistant message each (as the Agents SDK's items
    read) are one round and share the results that follow them."""
    assistant = [m.get("role") == "assistant" for m in messages]
    paired: list[tuple[int, Mapping[str, Any], Sequence[Mapping[str, Any]]]] = []
    at, end, run = 0, len(messages), 0
    while at < end:  # one pass: a run of assistant messages, then its results
        if not assistant[at]:
            at += 1
            continue
        start = at
        while start < end and assistant[start]:
            start += 1
        stop = start
        while stop < end and not assistant[stop]:
            stop += 1
        answers = messages[start:stop]
        paired += ((run, message, answers) for message in messages[at:start])
        at, run = stop, run + 1
    return paired


def decoded(text: str) -> Any:
    """A tool result given as text, as its value: the JSON it holds (a chatbot's tool
    message, or a Python tool returning JSON text, reads as a tool returning the object
    would), else the text itself."""
    try:
        return parse_json(text)
    except ValueError:
        return text


def call_key(round_: int, call_id: str) -> str:
    """A call of a turn's tool loop by its round (the assistant messages before it) and id:
    a model may number its calls afresh each round."""
    return f"{round_} {call_id}"


def round_ids(keys: Iterable[str], round_: int) -> set[str]:
    """The call ids of ``round_`` among ``keys`` (see ``call_key``); a bare id, as a turn
    saved by an earlier version keeps it, stands for its id in every round."""
    ids = set()
    for key in keys:
        number, space, call_id = key.partition(" ")
        if not (space and number.isascii() and number.isdigit()):
            ids.add(key)
        elif int(number) == round_:
            ids.add(call_id)
    return ids


def portable_keys(keys: Iterable[str], loop: Sequence[Mapping[str, Any]]) -> list[str]:
    """``keys`` (see ``call_key``) as a turn waiting between requests saves them: a call whose
    id no other round of ``loop`` uses as its bare id, which a process of the previous
    version, taking the turn's next request during a deploy, reads alike."""
    rounds: dict[str, int] = {}
    for message in loop:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or ():
                rounds[str(call.get("id"))] = rounds.get(str(call.get("id")), 0) + 1
    portable = []
    for key in keys:
        number, space, call_id = key.partition(" ")
        portable.append(call_id if space and number.isascii() and number.isdigit() and rounds.get(call_id) == 1 else key)
    return portable


def ran_calls(
    loop: Sequence[Mapping[str, Any]], answered: Iterable[str], whole: Mapping[str, str] | None = None
) -> list[ToolCall]:
    """The tool calls a turn's tool loop ran, with their results (each round's calls with
    the tool messages that follow them, numbered by round as ``chat()`` numbers them):
    those the turn ``answered`` itself (the disclosure loader's, by ``call_key``) left out.
    A result cut to fit the budget is remembered with the text sent, and valued by its text
    as it came (``whole``, by ``call_key``), as ``chat()`` values a tool's return."""
    answered, ran = list(answered), []
    # ``number`` counts assistant messages, as the turn's own keys do (turn.calls.Calls); a
    # call's round counts runs of them, as chat()'s tool loop does (one per model reply).
    for number, (run, message, answers) in enumerate(_rounds(loop)):
        results, gone = tool_results(answers), round_ids(answered, number)
        for key, text in (whole or {}).items():
            for call_id in round_ids([key], number) & results.keys():
                results[call_id] = (decoded(text), results[call_id][1])
        kept = [c for c in message.get("tool_calls") or () if c.get("id") not in gone]
        ran += [dataclasses.replace(c, round=run) for c in calls_of({**message, "tool_calls": kept}, results)]
    return ran


def interpret_reply(reply: Any) -> tuple[str, list[ToolCall], Any, str | None]:
    """(final text, tool calls, provider usage, model) from whatever a chatbot returns:
    a string, an OpenAI-style message dict, a list of the turn's new messages
    (assistant tool calls, tool results, final answer) or a litellm/OpenAI response."""
    if isinstance(reply, str):
        return reply, [], None, None
    if hasattr(reply, "choices"):
        message = as_dict(reply.choices[0].message)
        return (
            str(message.get("content") or ""),
            calls_of(message, {}),
            getattr(reply, "usage", None),
            getattr(reply, "model", None),
        )
    if isinstance(reply, Mapping):
        return str(reply.get("content") or ""), calls_of(reply, {}), reply.get("usage"), None
    if isinstance(reply, Sequence) and not isinstance(reply, (bytes, bytearray)):  # bytes would read as ints
        messages = [as_dict(m) for m in reply]
        calls = [dataclasses.replace(c, round=run) for run, m, answers in _rounds(messages)
                 for c in calls_of(m, tool_results(answers))]  # fmt: skip
        finals = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("content")]
        return str(finals[-1] if finals else ""), calls, None, None
    raise LLMError(
        f"The chatbot returned a {type(reply).__name__}; expected a string, a message dict, "
        "a list of messages or a litellm/OpenAI response."
    )
