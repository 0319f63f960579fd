"""The tool loop of one turn, with no I/O (the sync and async drivers share it).

The driver sends ``loop.messages`` to the model, hands the reply to ``take()``,
runs the calls it returns and hands the outcomes to ``give()``, until ``take()``
returns no calls. Every tool result is appended right after the assistant
message that asked for it, in order, so the sequence stays valid for providers;
calls past the round limit are not run and the turn ends with a note instead.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .state import ToolCall

__all__ = ["PendingCall", "ToolOutcome", "TurnLoop", "valid_tool_sequence"]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What running one requested call gave: the message for the model and the record
    (None for what the turn does not remember as a tool call: the disclosure loader's answer)."""

    message: dict[str, Any]
    record: ToolCall | None


@dataclass(frozen=True, slots=True)
class PendingCall:
    id: str
    name: str
    arguments: str


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments if arguments is not None else {})
    except (TypeError, ValueError):
        return str(arguments)


@dataclass
class TurnLoop:
    messages: list[dict[str, Any]]
    max_rounds: int
    prompt_length: int = field(init=False)
    rounds: int = 0
    final: str | None = None
    stopped_early: bool = False
    calls: list[ToolCall] = field(default_factory=list)
    # Where each remembered call's tool message is: its index in ``messages`` -> in ``calls``.
    recorded: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.messages = list(self.messages)
        self.prompt_length = len(self.messages)

    @property
    def done(self) -> bool:
        return self.final is not None

    @property
    def loop_messages(self) -> list[dict[str, Any]]:
        """Messages added within the turn: tool calls and their results."""
        return self.messages[self.prompt_length :]

    def take(self, message: Mapping[str, Any]) -> list[PendingCall]:
        """The model's reply: the calls to run now, or [] when the turn is over."""
        requested = list(message.get("tool_calls") or ())
        content = message.get("content")
        if not requested:
            self.final = content if isinstance(content, str) else ""
            return []
        if self.rounds >= self.max_rounds:
            self.stopped_early = True
            note = f"(stopped after {self.max_rounds} tool rounds)"
            self.final = f"{content} {note}" if isinstance(content, str) and content.strip() else note
            return []
        pending = [
            PendingCall(
                id=str(call.get("id") or f"call_{self.rounds}_{index}"),
                name=str((call.get("function") or {}).get("name") or ""),
                arguments=_arguments_text((call.get("function") or {}).get("arguments")),
            )
            for index, call in enumerate(requested)
        ]
        self.messages.append(
            {
                "role": "assistant",
                "content": content if isinstance(content, str) and content else None,
                "tool_calls": [
                    {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}} for p in pending
                ],
            }
        )
        return pending

    def give(self, outcomes: Iterable[ToolOutcome]) -> None:
        """The outcomes of the calls ``take()`` returned, in the same order."""
        for outcome in outcomes:
            self.messages.append(outcome.message)
            if outcome.record is not None:
                self.recorded[len(self.messages) - 1] = len(self.calls)
                self.calls.append(dataclasses.replace(outcome.record, round=self.rounds))
        self.rounds += 1


def valid_tool_sequence(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Every tool message answers a call of the assistant message before it, and
    every call is answered before the next non-tool message."""
    open_ids: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if not open_ids or message.get("tool_call_id") != open_ids[0]:
                return False
            open_ids.pop(0)
            continue
        if open_ids:
            return False
        if role == "assistant" and message.get("tool_calls"):
            open_ids = [call["id"] for call in message["tool_calls"]]
    return not open_ids
