"""Turns that span requests, for the OpenAI-compatible endpoint. No I/O.

A client of the endpoint sends OpenAI chat messages: its whole history, as most do, or only
what is new. Either way the turn in progress is what follows the last user message: that
message, then (when the model asked for tools) the assistant's tool calls and the client's
results. ``read_messages`` finds it; everything before it was recorded by earlier requests.

Processes share nothing but Redis, so what a turn needs across requests lives in the
session's ``live`` hash, under the session's hash tag (one cluster slot)::

    arrived          a counter: a turn's arrival number is its place in the session
    applied          the last arrival number whose turn was recorded (or given up on)
    queued, blocked  finished turns waiting for an earlier one, and since when (seconds)
    q:<n>            the record commands of finished turn n, waiting for their turn
    open:<call id>   a turn waiting for the client's tool results, by its first pending call id
    imported         set once: a new session took the history its first request carried

A finished turn is recorded by a server-side script that applies queued turns strictly in
arrival order, so concurrent requests to one session from any number of processes are
recorded once each, in the order they arrived. A turn that waits for the client's tool
results gives its place up (the client decides how long that takes) and is recorded when it
ends; a turn whose process died mid-call holds the line for ``serve.order_wait_seconds`` at
most (and is recorded whenever it does finish).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import orjson

from ..core.effects import Batch, Command, Plan
from ..exceptions import InvalidMessageError, InvalidToolCallError, StoreError
from .plans import RECORD_SCRIPT, Layout, Loaded, error_text, index_commands, load, recorded_keys

__all__ = [
    "Arrival",
    "Conversation",
    "OpenTurn",
    "arrive",
    "content_text",
    "finish",
    "piggyback",
    "read_messages",
    "record_arguments",
    "wait_for_results",
    "whole_turns",
]

T = TypeVar("T")
ROLES = ("system", "developer", "user", "assistant", "tool")
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


def _check_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise InvalidToolCallError(f"{where}.tool_calls has a {type(calls).__name__}; expected an array.")
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
            raise InvalidToolCallError(f"{where}.tool_calls[{index}] needs an 'id' and a 'function' with a 'name'.")


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


def read_messages(messages: Any) -> Conversation:
    """The request's messages read into the turn in progress; InvalidMessageError naming
    the first bad one (its index and field, never its content)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidMessageError("'messages' must be a non-empty array of messages.")
    roles = [_check_message(message, index) for index, message in enumerate(messages)]
    lead = 0
    while lead < len(roles) and roles[lead] in ("system", "developer"):
        lead += 1
    system = "\n\n".join(content_text(m.get("content"), "") for m in messages[:lead]) or None
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
    """A turn between requests: its place, its user message and its tool loop so far."""

    seq: int  # its arrival number (0: none, recorded whenever it ends)
    turn_id: str
    user: str
    loop: tuple[dict[str, Any], ...] = ()  # assistant tool-call messages and tool results, in order
    steps: int = 0  # upstream calls made so far

    def to_json(self) -> bytes:
        return orjson.dumps({"seq": self.seq, "turn_id": self.turn_id, "user": self.user, "loop": self.loop, "steps": self.steps})

    @classmethod
    def from_json(cls, raw: Any) -> OpenTurn | None:
        """The turn a ``live`` field holds, or None for a missing or unreadable record."""
        try:
            data = orjson.loads(raw)
            return cls(seq=int(data["seq"]), turn_id=str(data["turn_id"]), user=str(data["user"]),
                       loop=tuple(dict(m) for m in data["loop"]), steps=int(data["steps"]))  # fmt: skip
        except (ValueError, TypeError, KeyError):
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
        """This turn with the tool results among ``results`` that answer its pending calls;
        InvalidMessageError when one is missing."""
        pending = self.pending
        given = {m["tool_call_id"]: m for m in results if m.get("role") == "tool" and m.get("tool_call_id") in pending}
        missing = [call for call in pending if call not in given]
        if missing:
            raise InvalidMessageError(f"No tool result for call {_shown(missing[0])}, which the model asked for.")
        answers = [
            {"role": "tool", "tool_call_id": call, "content": content_text(given[call].get("content"), "")} for call in pending
        ]
        return OpenTurn(seq=self.seq, turn_id=self.turn_id, user=self.user, loop=(*self.loop, *answers), steps=self.steps)

    def asked(self, message: Mapping[str, Any]) -> OpenTurn:
        """This turn after the model asked for tools with ``message``, one more call made."""
        return OpenTurn(
            seq=self.seq, turn_id=self.turn_id, user=self.user, loop=(*self.loop, dict(message)), steps=self.steps + 1
        )

    @property
    def field(self) -> str | None:
        """The ``live`` field that holds this turn while it waits for tool results."""
        pending = self.pending
        return f"open:{pending[0]}" if pending else None


def tool_result(content: str) -> Any:
    """A tool message's content as the result to record: JSON decoded where it is JSON."""
    try:
        return json.loads(content)
    except ValueError:
        return content


# --- the ordering scripts ---------------------------------------------------------------------


def record_arguments(command: Command) -> list[str]:
    """The ARGV of a ``plans.record_command``: what a queued turn keeps until its turn comes."""
    _, _, count, *rest = command
    return [value.decode() if isinstance(value, bytes) else str(value) for value in rest[int(count) :]]


# Shared by both scripts: apply queued turns strictly in arrival order. A turn is applied by
# the store's own record script (plans.RECORD_SCRIPT), run here as a function: scripts cannot
# call scripts. KEYS: the live hash, then the recorded keys in their order, then the listing
# index unless on a cluster.
_ORDER = (
    """
local live = KEYS[1]
local now, wait, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local recorded = {unpack(KEYS, 2)}
local function record_turn(KEYS, ARGV)
"""
    + RECORD_SCRIPT
    + """
end
local function number(name) return tonumber(redis.call('HGET', live, name) or '0') or 0 end
local function apply(entry)
  local arguments = cjson.decode(entry)
  if #arguments > 0 then record_turn(recorded, arguments) end
end
local function flush()
  local applied, arrived, queued = number('applied'), number('arrived'), number('queued')
  while queued > 0 and applied < arrived do
    local name = 'q:' .. (applied + 1)
    local entry = redis.call('HGET', live, name)
    if entry then
      apply(entry)
      redis.call('HDEL', live, name)
      queued = queued - 1
    else
      -- the turn holding the line is passed over once the waiting ones waited long enough
      local blocked = tonumber(redis.call('HGET', live, 'blocked') or '')
      if not blocked then
        blocked = now
        redis.call('HSET', live, 'blocked', ARGV[1])
      end
      if now - blocked < wait then break end
      redis.call('HSET', live, 'blocked', ARGV[1])
    end
    applied = applied + 1
  end
  if queued <= 0 then redis.call('HDEL', live, 'blocked') queued = 0 end
  redis.call('HSET', live, 'applied', applied, 'queued', queued)
end
"""
)

# ARGV: now wait ttl reserve(0/1) mark_import(0/1) field... -> {arrival number, open turn or '', first(0/1)}
ARRIVE = (
    _ORDER
    + """
flush()
local found = ''
for i = 6, #ARGV do
  local value = redis.call('HGET', live, ARGV[i])
  if value then found = value break end
end
local before = number('arrived')
local seq = 0
if found == '' and ARGV[4] == '1' then seq = redis.call('HINCRBY', live, 'arrived', 1) end
-- history may be imported once, by a request that found no turn arrived before it
local first = 0
if ARGV[5] == '1' and redis.call('HSETNX', live, 'imported', '1') == 1 and before == 0 then first = 1 end
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
return {seq, found, first}
"""
)

# ARGV: now wait ttl seq entry drop_field -> 1
FINISH = (
    _ORDER
    + """
if ARGV[6] ~= '' then redis.call('HDEL', live, ARGV[6]) end
local seq = tonumber(ARGV[4])
if seq <= number('applied') then
  apply(ARGV[5])
else
  redis.call('HSET', live, 'q:' .. seq, ARGV[5])
  redis.call('HINCRBY', live, 'queued', 1)
end
flush()
if ttl > 0 then redis.call('PEXPIRE', live, ttl) end
return 1
"""
)


# --- plans ----------------------------------------------------------------------------------


def _checked(replies: Sequence[Any]) -> Sequence[Any]:
    for reply in replies:
        if isinstance(reply, Exception):
            raise StoreError(f"Redis replied with an error: {type(reply).__name__}: {error_text(reply)}")
    return replies


def _script(layout: Layout, session_id: str, script: str, *args: Any, now: float, wait: float) -> Command:
    keys = layout.session(session_id)
    declared = (keys.live, *recorded_keys(keys), *(() if layout.cluster else (layout.index,)))  # every key it touches
    return ("execute_command", "EVAL", script, len(declared), *declared, repr(now), repr(wait), layout.ttl_ms, *args)


class Arrival(NamedTuple):
    loaded: Loaded  # the session as it is now
    seq: int  # the arrival number given to a new turn (0 when none was asked for or one was open)
    open: OpenTurn | None  # the turn the request's tool results answer, when one is waiting
    first: bool  # the first request to arrive in this session, which may import the history it carries


def piggyback(commands: Sequence[Command], plan: Plan[T]) -> Plan[tuple[list[Any], T]]:
    """``plan`` with ``commands`` sent ahead of its first batch, in the same round trip:
    their replies, and the plan's result."""
    try:
        batch = next(plan)
    except StopIteration as stop:
        return list((yield Batch(list(commands)))), stop.value
    replies = yield Batch([*commands, *batch.commands], transaction=batch.transaction)
    ours, value = list(replies[: len(commands)]), replies[len(commands) :]
    while True:
        try:
            batch = plan.send(value)
        except StopIteration as stop:
            return ours, stop.value
        value = yield batch


def arrive(
    layout: Layout, session_id: str, *, waiting: Sequence[str], reserve: bool, mark_import: bool, now: float, wait: float,
    query: Sequence[tuple[str, float]] = (),
) -> Plan[Arrival]:  # fmt: skip
    """One round trip (two on a cluster): apply the turns due, find the open turn the tool
    results answer (or give the new turn its arrival number), and load the session (with the
    archive's pieces for ``query``, as ``plans.load`` does)."""
    fields = [f"open:{call}" for call in waiting]
    script = _script(layout, session_id, ARRIVE, int(reserve), int(mark_import), *fields, now=now, wait=wait)
    if layout.cluster:  # a cluster client sends a script by its SHA only alone, not in a pipeline: two round trips
        (reply,) = yield Batch([script])
        loaded = yield from load(layout, session_id, query=query)
    else:
        (reply,), loaded = yield from piggyback([script], load(layout, session_id, query=query))
    seq, found, first = _checked([reply])[0]
    return Arrival(loaded, int(seq), OpenTurn.from_json(found) if found else None, bool(first))


def wait_for_results(
    layout: Layout, session_id: str, turn: OpenTurn, *, drop: str | None, now: float, wait: float
) -> Plan[OpenTurn]:
    """Keep ``turn`` for the request that brings its tool results (and forget where it was).
    Its place in the session is given up: how long a client takes to run tools is up to
    the client, and later turns should not wait on it. It is recorded when it ends."""
    live, waiting = layout.session(session_id).live, dataclasses.replace(turn, seq=0)
    commands: list[Command] = [("hset", live, waiting.field, waiting.to_json())]
    if drop and drop != waiting.field:
        commands.append(("hdel", live, drop))
    if layout.ttl_ms:
        commands.append(("pexpire", live, layout.ttl_ms))
    if turn.seq:
        commands.append(_script(layout, session_id, FINISH, turn.seq, b"[]", "", now=now, wait=wait))
    _checked((yield Batch(commands, transaction=True)))
    return waiting


def finish(
    layout: Layout, session_id: str, seq: int, command: Command | None, *, drop: str | None, now: float, wait: float
) -> Plan[None]:
    """Record a finished turn in its place (``command``: its ``plans.record_command``; None
    gives the place up). On a cluster the listing index, in another slot, is written beside
    the script (best effort, as ``plans.record`` does)."""
    arguments = record_arguments(command) if command is not None else []
    script = _script(layout, session_id, FINISH, seq, orjson.dumps(arguments), drop or "", now=now, wait=wait)
    outside = index_commands(layout, session_id, now=now) if layout.cluster and command is not None else []
    _checked((yield Batch([script, *outside]))[:1])
