"""Values of the pure core: tool calls, turns, session state and what a turn persists.

They are frozen dataclasses with keyword-only fields, validated on construction,
so a bad value fails where it is made, not deep inside Redis code.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from ..exceptions import InvalidMessageError, InvalidSessionIdError, InvalidToolCallError
from .text import clean_text, parse_json, quoted

__all__ = [
    "Piece",
    "Prompt",
    "SessionPage",
    "SessionState",
    "SessionSummary",
    "StoredMessage",
    "TokenBreakdown",
    "ToolCall",
    "Turn",
    "TurnUpdate",
    "check_tool_name",
    "is_tool_name",
    "recorded_name",
    "succeeded",
]

MAX_TOOL_NAME = 256
# What a tool's name may hold: what every major provider accepts in one (OpenAI and Anthropic
# ^[a-zA-Z0-9_-]{1,64}$, Gemini "." and ":" too). A name is then a token wherever it is listed
# (the disclosure loader's index, a wrapped chatbot's loader docstring): never a line, a group
# or an instruction of its own.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
TOOL_NAME_EXPECTED = f"1 to {MAX_TOOL_NAME} ASCII letters, digits, '_', '-', '.' or ':'"
MAX_MODEL = 256  # characters of a model name a call may give (a litellm model string is far shorter)
_TOOL_CALL_FIELDS = frozenset({"name", "arguments", "result", "ok", "id", "observation"})


# One encoder for every value: json.dumps with non-default options builds a new
# JSONEncoder per call, which the per-turn path would pay several times.
compact_json = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":")).encode


def to_text(value: Any) -> str:
    """Text of a tool argument or result, whatever it is: JSON when possible, else ``str``.

    Never raises: objects that do not serialize, cycles and very deep nesting fall
    back to ``str()`` and finally to a placeholder naming the type.
    """
    if isinstance(value, str):
        return clean_text(value)
    try:
        return clean_text(compact_json(value))
    except Exception:  # default=str runs user __str__ code, which may raise anything
        pass
    try:
        return clean_text(str(value))
    except Exception:  # a __str__ that raises is still a result we must not crash on
        return f"<unprintable {type(value).__name__}>"


def _parse_arguments(arguments: Any) -> dict[str, Any] | None:
    """The arguments as a dict, or None when they are not a JSON object."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            parsed = parse_json(arguments) if arguments else {}
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def is_tool_name(value: object) -> bool:
    """``value`` is a tool name a provider accepts (``TOOL_NAME_EXPECTED``)."""
    return isinstance(value, str) and len(value) <= MAX_TOOL_NAME and _TOOL_NAME.fullmatch(value) is not None


def check_tool_name(value: object, what: str) -> str:
    """``value`` itself once it is a tool name a provider accepts; else InvalidToolCallError
    naming ``what`` and the value (cut short)."""
    if isinstance(value, str) and len(value) > MAX_TOOL_NAME:
        raise InvalidToolCallError(f"{what} has {len(value):,} characters; expected {TOOL_NAME_EXPECTED}.")
    if not is_tool_name(value):
        raise InvalidToolCallError(f"{what} has value {quoted(value, 60)}; expected {TOOL_NAME_EXPECTED}.")
    return str(value)


def recorded_name(name: Any) -> str:
    """The name a model's call of ``name`` is recorded under: ``name`` itself when a record can
    hold it. A model may make a call up: one of an empty or non-text name is recorded as
    ``unnamed``, one past MAX_TOOL_NAME characters cut short (with "…"), so the turn that
    holds it (a failed call: no such tool) is recorded, not lost after its billed call."""
    if not isinstance(name, str) or not name.strip():
        return "unnamed"
    return name if len(name) <= MAX_TOOL_NAME else name[: MAX_TOOL_NAME - 1] + "…"


def succeeded(result: Any) -> bool:
    """A tool that returns ``{"success": False}`` or ``{"error": ...}`` did not succeed:
    its arguments must not become context keys."""
    if isinstance(result, Mapping):
        if result.get("success") is False or result.get("ok") is False:
            return False
        if result.get("error") and "success" not in result:
            return False
    return True


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call of a turn, with its outcome.

    ``arguments`` may be a dict or the JSON string providers send. Arguments that
    are not a JSON object (invalid JSON, a list, a number) are kept as text for
    the token figures but give no context keys.
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    result: Any = None
    ok: bool = True
    id: str | None = None
    # One line saying what the result showed (a tool's observation renderer makes it):
    # the summary's action and the archive use it instead of "Used <tool>".
    observation: str | None = None
    round: int = 0  # the tool round of its turn that asked for it (calls of one round came in one message)
    # The text ``result`` was decoded from (a tool's JSON text, a client's tool message): the
    # model read it, and a resent history must carry it byte for byte, so ``result_text`` is it.
    result_sent: str | None = field(default=None, repr=False, compare=False)
    args: dict[str, Any] | None = field(init=False, repr=False, compare=False)
    _texts: list[str | None] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidToolCallError(f"ToolCall.name must be a non-empty string, got {quoted(self.name, 60)}.")
        if len(self.name) > MAX_TOOL_NAME:
            raise InvalidToolCallError(f"ToolCall.name has {len(self.name)} characters; expected at most {MAX_TOOL_NAME}.")
        if not isinstance(self.ok, bool):
            raise InvalidToolCallError(f"ToolCall.ok must be a bool, got {quoted(self.ok, 60)}.")
        if self.observation is not None and not isinstance(self.observation, str):
            raise InvalidToolCallError(f"ToolCall.observation must be a string, got {type(self.observation).__name__}.")
        if self.result_sent is not None and not isinstance(self.result_sent, str):
            raise InvalidToolCallError(f"ToolCall.result_sent must be a string, got {type(self.result_sent).__name__}.")
        object.__setattr__(self, "args", _parse_arguments(self.arguments))
        object.__setattr__(self, "_texts", [None, None])

    @property
    def arguments_text(self) -> str:
        """The arguments as text (computed once: counting and traces both need it)."""
        text = self._texts[0]
        if text is None:
            text = self._texts[0] = to_text(self.arguments)
        return text

    @property
    def result_text(self) -> str:
        """The result as text: as it was sent (``result_sent``), else encoded (computed once)."""
        text = self._texts[1]
        if text is None:
            text = self._texts[1] = to_text(self.result if self.result_sent is None else self.result_sent)
        return text

    @classmethod
    def coerce(cls, value: Any) -> ToolCall:
        """``value`` as a ToolCall: a ToolCall, a mapping of its fields, or an OpenAI ``tool_calls`` entry.
        A mapping without ``ok`` takes it from its result (``succeeded``)."""
        if isinstance(value, ToolCall):
            return value
        if not isinstance(value, Mapping):
            raise InvalidToolCallError(f"A tool call must be a ToolCall or a mapping, got {type(value).__name__}.")
        if "function" in value:  # an OpenAI tool_calls entry
            return cls.from_openai(value, result=value.get("result"), ok=value.get("ok", succeeded(value.get("result"))))
        unknown = set(value) - _TOOL_CALL_FIELDS
        if unknown or "name" not in value:
            names = ", ".join(quoted(name, 40) for name in sorted(map(str, unknown))[:5])
            problem = f"unknown fields {names}{' and more' if len(unknown) > 5 else ''}" if unknown else "no 'name'"
            raise InvalidToolCallError(
                f"Tool call has {problem}; expected 'name' and optionally {sorted(_TOOL_CALL_FIELDS - {'name'})}."
            )
        # ok left out: read from the result, as chat() and the endpoint read a tool's result.
        return cls(**value) if "ok" in value else cls(**value, ok=succeeded(value.get("result")))

    @classmethod
    def from_openai(
        cls, call: Mapping[str, Any], *, result: Any = None, ok: bool = True, result_sent: str | None = None
    ) -> ToolCall:
        """Build from an OpenAI ``tool_calls`` entry: ``{"id", "function": {"name", "arguments"}}``.
        ``result_sent``: the text of the tool message ``result`` was decoded from."""
        function = call.get("function") or {}
        return cls(name=function.get("name", ""), arguments=function.get("arguments") or {}, result=result, ok=ok,
                   id=call.get("id"), result_sent=result_sent)  # fmt: skip


def check_text_size(value: Any, *, what: str, limit: int | None) -> Any:
    """``value`` itself once it is a string within ``limit`` characters; a clear error if not."""
    if not isinstance(value, str):
        raise InvalidMessageError(f"{what} must be a string, got {type(value).__name__}.")
    if limit is not None and len(value) > limit:
        raise InvalidMessageError(f"{what} has {len(value):,} characters; the limit is {limit:,} (tokens.max_message_chars).")
    return value


def _message_text(value: Any, *, what: str, allow_empty: bool, limit: int | None = None) -> str:
    check_text_size(value, what=what, limit=limit)
    if not allow_empty and not value.strip():
        raise InvalidMessageError(f"{what} is empty; expected some text.")
    return clean_text(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """A finished turn: the user's message, the assistant's final text and its tool calls."""

    user: str
    assistant: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "user", _message_text(self.user, what="The user message", allow_empty=False))
        object.__setattr__(self, "assistant", _message_text(self.assistant, what="The assistant reply", allow_empty=True))
        calls = tuple(self.tool_calls) if isinstance(self.tool_calls, Iterable) else None
        if calls is None or not all(isinstance(call, ToolCall) for call in calls):
            raise InvalidToolCallError("Turn.tool_calls must be an iterable of ToolCall.")
        object.__setattr__(self, "tool_calls", calls)


def check_user_message(value: Any, *, limit: int) -> str:
    """The current user message, cleaned; a clear error when it cannot be sent."""
    return _message_text(value, what="The user message", allow_empty=False, limit=limit)


class Piece(NamedTuple):
    """One recallable piece of a turn for the episodic archive: a user sentence, a tool
    call, an observation of a result, what a connector observed, or the reply."""

    kind: str
    text: str
    terms: tuple[str, ...]  # what it is found by: its words, a call's tool and argument names too
    tokens: int
    facts: tuple[str, ...] = ()  # the terms of what it says (a call's values): new to the prompt or not
    # A user sentence's neighbours in its message (before, after), where they name something
    # specific: recall hands them beside the sentence when room is left ("" where none).
    around: tuple[str, str] = ("", "")


class StoredMessage(NamedTuple):
    """A message of the recent window with its token count, counted once when recorded.

    A NamedTuple rather than a frozen dataclass: it is built on every load, and
    tuple construction is several times cheaper.
    """

    role: str
    content: str
    tokens: int

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def whole_pairs(messages: Iterable[StoredMessage]) -> list[StoredMessage]:
    """Keep only whole (user, assistant) pairs with text, in order.

    A lone or corrupt half of a turn is dropped so the window stays a valid sequence.
    """
    usable = [m for m in messages if m.role in {"user", "assistant"} and m.content.strip()]
    pairs: list[StoredMessage] = []
    for first, second in itertools.pairwise(usable):
        if first.role == "user" and second.role == "assistant" and (not pairs or pairs[-1] is not first):
            pairs.extend((first, second))
    return pairs


_V = TypeVar("_V")


def built(cls: type[_V], **fields: Any) -> _V:
    """An instance of the frozen dataclass ``cls`` from checked fields, every field given,
    built without its frozen ``__init__`` (one ``object.__setattr__`` per field): for the
    values made on every call (a loaded state, a composed prompt and its figures, a turn's
    update)."""
    value = object.__new__(cls)
    value.__dict__.update(fields)
    return value


# Letters that print as nothing (Hangul fillers, the blank Braille pattern): an id made of them
# looks empty, or like another id, in a listing.
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def check_session_id(value: Any, *, limit: int, what: str = "Session id") -> str:
    """An id (session, user, agent): a non-empty string of at most ``limit`` printable
    characters: no control, format (zero-width, bidi), private-use or separator character
    but the space, so an id cannot hide or spoof another in a listing. Braces are allowed
    (escaped in Redis keys, so hash tags hold)."""
    if not isinstance(value, str):
        raise InvalidSessionIdError(f"{what} must be a string, got {type(value).__name__}.")
    if not value or not value.strip():
        raise InvalidSessionIdError(f"{what} is empty; expected a non-empty string.")
    if len(value) > limit:
        raise InvalidSessionIdError(f"{what} has {len(value):,} characters; expected at most {limit}.")
    if not value.isprintable() or not _INVISIBLE.isdisjoint(value):
        index, char = next((i, c) for i, c in enumerate(value) if not c.isprintable() or c in _INVISIBLE)
        raise InvalidSessionIdError(
            f"{what} has an invisible or control character (U+{ord(char):04X}) at index {index}; expected printable text."
        )
    return value


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """What a session remembers.

    ``context``: tracked keys and their values (sanitized), in prompt order.
    ``summary``: the summary lines the prompt shows (older turns only, by default).
    ``recent``: the last user message and the last assistant final text.
    ``turns``: turns recorded. ``full_tokens``: tokens the whole history, tool
    calls and results included, would cost to send now.
    """

    session_id: str = ""
    context: dict[str, str] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    recent: list[dict[str, str]] = field(default_factory=list)
    turns: int = 0
    full_tokens: int = 0
    recent_tokens: tuple[int, ...] = ()
    created_at: float | None = None
    updated_at: float | None = None
    # The long-term notes of the session's (user, agent), when it has an owner.
    notes: str = ""
    owner: tuple[str, str] | None = None  # (user_id, agent) for sessions made by resolve_session
    # Keys set before the current ones (context.earlier_keys), in the order they were last set.
    earlier: dict[str, str] = field(default_factory=dict)
    # Earlier values of context keys, newest first, each with the turn that set it (0: unknown).
    facts: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # Tools the session called recently (disclosure): name -> (the order in which it was
    # first sent in its current run of use, the last turn that called it).
    tool_uses: dict[str, tuple[int, int]] = field(default_factory=dict)
    # A turn was composed though the session's history could have been resent (caching.resend_history):
    # from then on every turn is composed.
    composed: bool = False
    # Set by the store's decoder: the recent window as validated (user, assistant) pairs
    # with their counts, so composing does not check and rebuild it again.
    pairs: tuple[StoredMessage, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def is_empty(self) -> bool:
        """Nothing remembered: a session never recorded, expired or reset."""
        return not (self.turns or self.recent or self.context or self.summary)


@dataclass(frozen=True, kw_only=True)
class TurnUpdate:
    """What recording one turn writes: derived from the turn alone, so writers commute."""

    context: tuple[tuple[str, str], ...]
    summary_line: str
    recent: tuple[StoredMessage, ...]
    full_tokens: int
    # Names this write, so a turn held through an outage is not written twice when its
    # first attempt did reach Redis but the reply was lost. Set by the session manager.
    turn_id: str = ""
    # Raw trace entries of the turn (user message, tool calls, results, reply), kept for
    # the inspector and for a young session resending its history (caching.resend_history).
    traces: tuple[dict[str, Any], ...] = ()
    # The prompt the model was sent for this turn (JSON), when the manager composed it.
    prompt: str = ""
    # The turn as recallable pieces, for the episodic archive (see middleware.core.archive).
    pieces: tuple[Piece, ...] = ()
    # The names of the tools the turn called, in order, once each (disclosure keeps them sent).
    tools: tuple[str, ...] = ()
    # The turn composed its prompt where the session's history could have been resent: the
    # session composes from now on (``SessionState.composed``).
    composed: bool = False


@dataclass(frozen=True, kw_only=True)
class TokenBreakdown:
    """Prompt tokens by layer. ``system`` is the static part of the system prompt; the
    notes and context sections are counted in ``notes`` and ``context``."""

    system: int
    context: int
    summary: int
    recent: int
    current: int
    priming: int
    notes: int = 0
    recall: int = 0  # the recall block
    state: int = 0  # connectors' current-state lines

    @property
    def total(self) -> int:
        return (self.system + self.notes + self.context + self.state + self.recall + self.summary + self.recent
                + self.current + self.priming)  # fmt: skip

    @property
    def memory(self) -> int:
        """The memory sections: notes, context keys, connectors' state, recall, summary."""
        return self.notes + self.context + self.state + self.recall + self.summary

    def as_dict(self) -> dict[str, int]:
        return {
            "system": self.system,
            "notes": self.notes,
            "context": self.context,
            "state": self.state,
            "recall": self.recall,
            "summary": self.summary,
            "recent": self.recent,
            "current": self.current,
            "total": self.total,
        }


@dataclass(frozen=True, kw_only=True)
class Prompt:
    """A composed prompt: the messages to send and what they cost against the full history."""

    messages: list[dict[str, str]]
    tokens: TokenBreakdown
    full_history_tokens: int
    # The number the turn will have once recorded (absent concurrent writers).
    turn: int = 1
    # What the token budget took away (e.g. "recent_cut:assistant", "summary_line_dropped").
    trimmed: tuple[str, ...] = ()
    # What the recall block holds, and why each was chosen (middleware.core.archive.Recalled).
    recalled: tuple[Any, ...] = ()
    # How many leading characters of the system text change only when the notes, the keys
    # set earlier or the Current Context do (the rest, connectors' state and the recall
    # block, changes with each message): where a cache breakpoint can end.
    stable_system_chars: int = 0
    # How many leading characters change only when the notes or the keys set earlier do,
    # which change less often than the Current Context after them (0: no such section).
    settled_system_chars: int = 0

    @property
    def saved_tokens(self) -> int:
        return self.full_history_tokens - self.tokens.total

    @property
    def saved_ratio(self) -> float:
        return self.saved_tokens / self.full_history_tokens if self.full_history_tokens else 0.0


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One entry of a session listing: what the session holds."""

    session_id: str
    updated_at: float
    turns: int
    context_keys: int
    summary_lines: int
    recent_messages: int
    full_tokens: int
    user: str | None = None
    agent: str | None = None

    @classmethod
    def of(cls, state: SessionState, updated: float) -> SessionSummary:
        """What ``state`` holds; ``updated`` stands in when it has no update time."""
        user, agent = state.owner or (None, None)
        return cls(session_id=state.session_id, updated_at=state.updated_at or updated, turns=state.turns,
                   context_keys=len(state.context), summary_lines=len(state.summary), recent_messages=len(state.recent),
                   full_tokens=state.full_tokens, user=user, agent=agent)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a session listing, newest first."""

    entries: list[SessionSummary]
    total: int
    page: int
    page_size: int

    @property
    def total_pages(self) -> int:
        return max(1, -(-self.total // self.page_size))
