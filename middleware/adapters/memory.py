"""What the framework adapters share: the session's memory as chat messages, and the whole turns
in a run of chat messages. No framework is imported here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..config.schema import Config
from ..core.conversation import content_text, or_no_text, whole_turns
from ..core.replies import interpret_reply
from ..core.state import Prompt, SessionState, ToolCall
from ..exceptions import MiddlewareError, StoreError
from ..session.standalone import composer_for
from ..tokens import Tokenizer

__all__ = ["ChatTurn", "memory_messages", "prompt_memory", "turns_in", "unrecordable"]

# The composer needs a current message; the adapters leave it out of what they return.
_PLACEHOLDER = "."


def memory_messages(state: SessionState, config: Config, tokenizer: Tokenizer) -> list[dict[str, str]]:
    """The session's memory as chat messages, oldest first, when the current message is not
    known yet (an Agents SDK session, a chat history): as ``prompt_memory`` of a prompt composed
    for no message, so nothing is recalled for it."""
    composer = composer_for(config, tokenizer)
    return prompt_memory(composer.compose(state, _PLACEHOLDER, checked=True), composer.static_prefix)


def prompt_memory(prompt: Prompt, static_prefix: str) -> list[dict[str, str]]:
    """A composed prompt's memory as chat messages, oldest first: its notes, context and recall
    sections as one system message (when there are any), the summary exchange and the recent
    turn. The framework's own instructions stay its system prompt (the manager's static prompt
    ``static_prefix`` is left out), and its own current message stays its last."""
    messages = prompt.messages
    memory = messages[0]["content"][len(static_prefix) :].strip("\n")
    return [*([{"role": "system", "content": memory}] if memory else []), *messages[1:-1]]


class ChatTurn(NamedTuple):
    """A whole turn read from chat messages: what to record."""

    user: str
    assistant: str
    tool_calls: list[ToolCall]


def turns_in(messages: Sequence[dict[str, Any]]) -> list[tuple[ChatTurn, int]]:
    """The whole turns among OpenAI chat ``messages`` (a user message, its tool calls and results,
    a final assistant text), each with how many messages it and those before it use up (the
    rest is a turn in progress)."""
    turns = []
    for turn in whole_turns(messages):
        text, calls, _, _ = interpret_reply(list(turn[1:]))
        used = next(i for i in range(len(messages) - 1, -1, -1) if messages[i] is turn[-1]) + 1
        turns.append((ChatTurn(or_no_text(content_text(turn[0].get("content"), "")), text, calls), used))
    return turns


def unrecordable(exc: BaseException) -> bool:
    """Whether a turn whose recording raised ``exc`` can never be recorded (bad input: a
    message too long, a malformed tool call), so an adapter drops it rather than keep it
    pending, where it would block every later turn. A store failure may pass: kept."""
    return isinstance(exc, MiddlewareError) and not isinstance(exc, StoreError)
