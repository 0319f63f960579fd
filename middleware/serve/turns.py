"""The endpoint's turns, as programs: the same turn plan and calls as ``chat()``, spanning
requests when the client runs tools.

``begin`` reads a request against the session: its arrival (``middleware.store.live``) and
the session's load go in one round trip; then the turn is planned as every entrance plans
it (or, for a turn that waited for the client's tool results, resumed with what its plan
kept). ``step`` takes each upstream reply: the calls the turn answers itself (the loader,
a known tool whose schema was not sent) are answered here and the model called again within
the request; any other tool calls go to the client, and the turn waits in Redis for their
results; a final reply records the turn in the session's arrival order. ``fail`` and
``settle`` end a turn whose upstream call failed or whose stream ended early.

A request that retries an earlier attempt (``middleware.store.live``) begins as ``Retried``:
``answer_of`` tells what that attempt answered, and the request runs as a new turn only when
it went no further. Each request keeps what it answered for such a retry (``Exchange.answer``),
written with the turn's end.

Nothing is kept in the process between requests, so any process can take a session's next
request.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ..config.schema import Config
from ..core.conversation import Conversation, OpenTurn, content_text, or_no_text, read_messages
from ..core.effects import Batch, Program
from ..core.replies import decoded, interpret_reply, portable_keys, ran_calls
from ..core.state import ToolCall, Turn
from ..core.turnloop import TurnLoop
from ..exceptions import InvalidMessageError, InvalidRequestError, InvalidToolCallError
from ..session.engine import Engine
from ..store.decoding import Loaded, checked
from ..store.keys import Layout
from ..store.live import (
    Arrival,
    arrival,
    arrive_command,
    catch_up,
    finish,
    release_import,
    renew,
    wait_for_results,
)
from ..store.record import RecordArguments, record_arguments
from ..store.retries import DELIVERED, GAVE_UP, Answer, Retry, answer_command, answer_of, beat
from ..tools import Toolset, as_tools, not_an_object
from ..turn.calls import Calls
from ..turn.plan import Request, TurnPlan
from ..usage.sink import passthrough_call

__all__ = ["Exchange", "Retried", "Turns", "client_calls"]

# Stands in for the text of a user message that holds only images or other non-text parts.
Next = Literal["again", "client", "done"]


@dataclass
class Exchange:
    """A request's part of a turn: the turn as it stood when the request came, its plan and its calls."""

    session_id: str
    turn: OpenTurn  # the client's tool results of this request included
    calls: Calls
    drop: str | None  # the live field the turn waited in, forgotten once it moves on
    forwarded: list[str] = field(default_factory=list)  # the ids of the tool calls the client runs
    final: str | None = None  # the turn's final text, once it ended
    # What the turn still owes the session: its record (made, not yet written), the turn to
    # keep for the client's results, or its place (True); False once it owes nothing.
    owed: RecordArguments | OpenTurn | bool = True
    # Its record was written but waits, queued behind an earlier turn that holds the line:
    # its process flushes the session until it is applied (``catch_up``).
    queued: bool = False
    # The incarnation of the session's live hash the request arrived in: a reset since
    # leaves the turn out of the new session (``middleware.store.live``).
    epoch: str = ""
    # The request's slot in the session's ring of requests (-1: it has none) and its nonce,
    # whether it carries an idempotency key (its answer is then kept whole, delivered or
    # not), and what it answered its client, kept there for a retry of it once written.
    slot: int = -1
    nonce: str = ""
    keyed: bool = False
    answer: Answer | None = None

    @property
    def plan(self) -> TurnPlan:
        return self.calls.plan

    def gave_up(self) -> Answer | None:
        """What the request leaves for a retry of it when it answered nothing: run anew."""
        return Answer(self.slot, self.nonce, GAVE_UP) if self.slot >= 0 else None


@dataclass(frozen=True)
class Retried:
    """A request that retries an earlier attempt, still running or answered (``Turns.answer_of``)."""

    session_id: str
    retry: Retry


def client_calls(reply: Mapping[str, Any], forwarded: Collection[str]) -> list[dict[str, Any]]:
    """The tool calls of ``reply`` that the client runs, in order."""
    return [dict(call) for call in reply.get("tool_calls") or () if call.get("id") in forwarded]


def _toolset(tools: Sequence[Mapping[str, Any]] | None) -> Toolset:
    """The client's tools, as schemas the endpoint cannot run."""
    try:
        return Toolset(as_tools(tools or ()))
    except InvalidToolCallError as exc:
        raise InvalidRequestError(str(exc), param="tools") from None


def _problem(name: str, arguments: Any) -> str | None:
    """What is wrong with the arguments of a client's tool, as chat() says it of a tool given as
    a schema (whose arguments it does not validate): only that they are not a JSON object."""
    call = ToolCall(name=name, arguments=arguments if arguments is not None else {})
    return not_an_object(call) if call.args is None else None


# A longer answer is not kept for a retry of its request (which then runs as a new turn).
KEPT_ANSWER_BYTES = 256 * 1024
# At most this many characters of cut results, as they came, wait with a turn in Redis.
SAVED_RESULTS_CHARS = 1_000_000


def _worth_keeping(whole: Mapping[str, str], cleared: Collection[str] = ()) -> dict[str, str]:
    """The cut results a waiting turn keeps as they came: those that hold JSON (text values
    alike whole or cut: the cut text is kept anyway) and those ``cleared`` (their text is
    not), within ``SAVED_RESULTS_CHARS``; a result left out is valued by its cut text."""
    kept, room = {}, SAVED_RESULTS_CHARS
    for call_id, text in whole.items():
        if len(text) <= room and (call_id in cleared or not isinstance(decoded(text), str)):
            kept[call_id], room = text, room - len(text)
    return kept


def _texts(saved: Any) -> dict[str, str]:
    """The results a turn cut to fit, as they came, from its saved plan (none when it kept
    none, or was saved before it did)."""
    if not isinstance(saved, Mapping):
        return {}
    return {str(call_id): text for call_id, text in saved.items() if isinstance(text, str)}


class Turns:
    """The endpoint's turn programs over one engine; ``wait``: how long a turn whose process
    died holds the line; ``kind``: what usage lines call these calls."""

    def __init__(self, engine: Engine, config: Config, *, wait: float, kind: str = "serve") -> None:
        self.engine, self.wait, self.kind = engine, wait, kind
        self.layout, self.counting_model = Layout.of(config), config.tokens.model

    @classmethod
    def of_tenant(cls, engine: Engine, config: Config, tenant: str | None, *, kind: str = "serve") -> Turns:
        """The turns of ``tenant``'s sessions: an engine of its own over the tenant's key prefix
        (``Config.for_tenant``), sharing ``engine``'s usage log; None: ``engine``'s own."""
        scoped = config.for_tenant(tenant)
        own = Engine(scoped, sink_of=engine, tenant=tenant) if tenant is not None else engine
        return cls(own, scoped, wait=scoped.serve.order_wait_seconds, kind=kind)

    # --- begin ------------------------------------------------------------------------------

    def begin(
        self, session_id: str, messages: Any, tools: Sequence[Mapping[str, Any]] | None, model: str, *,
        tool_choice: Any = None, disclose: bool = True, refer: bool = True, key: str = "", retry: bool = False,
        nonce: str = "", keyed: bool = False,
    ) -> Program[Exchange | Retried]:  # fmt: skip
        """Read the request against the session and plan (or resume) its turn. ``disclose``
        False: every one of the client's tools goes upstream (a caller that cannot answer the
        loader itself); ``refer`` False: the loader's answers reference nothing (an upstream
        served at an ``api_base`` of its own). ``key``: what a retry of the request is known
        by; ``retry``: look an earlier attempt up by it first (found: ``Retried``); ``nonce``:
        the request's own (hex); ``keyed``: the key is the client's idempotency key."""
        engine = self.engine
        session_id, _ = engine.checked(session_id)
        conversation = read_messages(messages)
        user = conversation.user
        if user is not None:
            _, user = engine.checked(session_id, or_no_text(user))
        command = arrive_command(self.layout, session_id, waiting=conversation.waiting, reserve=user is not None,
                                 mark_import=bool(conversation.earlier), now=time.time(), wait=self.wait, key=key,
                                 retry=retry, nonce=nonce)  # fmt: skip
        # Recall looks for what the turn's user message needs, on every call of the turn alike.
        loaded: Loaded | None = yield from engine.load_turn(session_id, user or "", model=model, ahead=[command])
        assert loaded is not None
        arrived = arrival(loaded.ahead[0], key)
        if arrived.retried is not None:
            return Retried(session_id, arrived.retried)
        importing = arrived.first  # this request takes the history it carries into the new session
        try:
            turn, drop = self._turn(conversation, arrived, user)
            if user is None:  # only the tool results came: recall for the turn's own message
                loaded = None
            elif importing and not loaded.state.turns and conversation.earlier:
                yield from self._import(session_id, conversation.earlier)
                loaded = None
            importing = False
            plan = yield from engine.plan_turn(session_id, turn.user, model=model, toolset=_toolset(tools), disclose=disclose,
                                               loaded=loaded, system=conversation.system, saved=turn.plan or None,
                                               refer=refer)  # fmt: skip
        except Exception:  # the request goes no further: the place it took is given up at once
            if importing:  # the history it did not import (it imports all or none) is the next request's to import
                yield from release_import(self.layout, session_id)
            gave_up = Answer(arrived.slot, nonce, GAVE_UP) if arrived.slot >= 0 else None
            if arrived.seq:
                yield from finish(self.layout, session_id, arrived.seq, None, drop=None, now=time.time(), wait=self.wait,
                                  epoch=arrived.epoch, answer=gave_up)  # fmt: skip
            elif gave_up is not None:
                checked((yield Batch([answer_command(self.layout, session_id, gave_up)])))
            raise
        named = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
        if plan.tools is not None and isinstance(named, Mapping) and isinstance(named.get("name"), str):
            plan.tools.add([named["name"]])  # a tool the client names must be sent (its name checked as the request was read)
        current = self._current(plan.prompt.messages[-1], conversation)
        loop = TurnLoop([*plan.prompt.messages[:-1], current], max_rounds=plan.max_rounds)
        loop.messages.extend(turn.loop)
        saved = turn.plan
        calls = Calls(engine, plan, self.kind, loop, marked=saved.get("marked"), extra=bool(saved.get("extra")), step=turn.steps,
                      answered=saved.get("answered") or (), first=saved.get("first"), whole=_texts(saved.get("whole")))  # fmt: skip
        calls.fit()
        return Exchange(
            session_id=session_id,
            turn=turn,
            calls=calls,
            drop=drop,
            epoch=arrived.epoch,
            slot=arrived.slot,
            nonce=nonce,
            keyed=keyed,
        )

    def _turn(self, conversation: Conversation, arrived: Arrival, user: str | None) -> tuple[OpenTurn, str | None]:
        """The turn this request continues (waiting in Redis, or told by a full history) or starts."""
        if arrived.open is not None and arrived.open.epoch in ("", arrived.epoch):
            return arrived.open.answered(conversation.tail), arrived.open.field
        if user is None:  # nothing waits for them (or what waits began before the session was reset)
            raise InvalidMessageError(
                f"The tool results answer call {conversation.waiting[0][:40]!r}, which this session is not waiting for."
            )
        turn = OpenTurn(seq=arrived.seq, turn_id=uuid.uuid4().hex, user=user, loop=conversation.tail,
                        steps=sum(1 for m in conversation.tail if m["role"] == "assistant"), epoch=arrived.epoch)  # fmt: skip
        if turn.pending:  # a full history whose last tool calls are not all answered
            raise InvalidMessageError(f"No tool result for call {turn.pending[0][:40]!r}, which the model asked for.")
        return turn, None

    def _import(self, session_id: str, earlier: Sequence[Sequence[dict[str, Any]]]) -> Program[None]:
        """A new session takes the whole turns its first request carried, oldest first; all
        are checked before any is written, so a refused request imports none of them and the
        corrected one imports them all."""
        turns = []
        for number, messages in enumerate(earlier, start=1):
            text, calls, _, _ = interpret_reply(list(messages[1:]))
            user = or_no_text(content_text(messages[0].get("content"), ""))
            try:  # as recording checks it: the message's size, then the turn itself
                self.engine.checked(session_id, user)
                Turn(user=user, assistant=text, tool_calls=tuple(calls))
            except (InvalidMessageError, InvalidToolCallError) as exc:
                raise type(exc)(f"Earlier turn {number} of {len(earlier)}: {exc}") from None
            turns.append((user, text, calls))
        for user, text, calls in turns:
            yield from self.engine.record_turn(session_id, user=user, assistant=text, tool_calls=calls)

    @staticmethod
    def _current(composed: dict[str, Any], conversation: Conversation) -> dict[str, Any]:
        """The current user message as the client sent it (images and other parts kept)."""
        content = conversation.user_content
        return {"role": "user", "content": content} if isinstance(content, list) else composed

    # --- each upstream reply --------------------------------------------------------------

    def step(
        self, exchange: Exchange, request: Request, reply: Mapping[str, Any], usage: Any, *, model: str, latency: float,
        head: Mapping[str, Any] | None = None,
    ) -> Program[Next]:  # fmt: skip
        """Take the model's reply to ``request``: ``again`` when the turn answered every call
        itself (call the model again), ``client`` when the client runs the rest (the turn
        waits for its results), ``done`` when the turn ended and was recorded. ``head``: the
        reply's id, creation time, finish reason and the request's usage so far, kept with
        what the request answers for a retry of it."""
        calls = exchange.calls
        loop = calls.loop
        calls.made(request, reply, usage, latency, model=model)
        pending = loop.take(reply)
        if not pending:
            exchange.final = loop.final or ""
            exchange.answer = self._answer(exchange, reply, head or {})
            yield from self._record(exchange, exchange.final)
            return "done"
        own = [calls.answer(call, _problem) for call in pending]
        answers = [outcome for outcome in own if outcome is not None]
        if len(answers) == len(pending):
            loop.give(answers)
            calls.round_done(answers)
            calls.fit()
            return "again"
        # The client runs the rest; the turn's own answers wait with it, in Redis.
        loop.messages.extend(outcome.message for outcome in answers)
        calls.extra = False
        exchange.forwarded = [call.id for call, outcome in zip(pending, own, strict=True) if outcome is None]
        exchange.answer = self._answer(exchange, reply, head or {})
        waiting = OpenTurn(seq=exchange.turn.seq, turn_id=exchange.turn.turn_id, user=exchange.turn.user,
                           loop=tuple(loop.messages[len(exchange.plan.prompt.messages) :]), steps=calls.step,
                           plan=self._saved(calls), epoch=exchange.epoch)  # fmt: skip
        exchange.owed = waiting
        yield from self.pay(exchange)
        return "client"

    @staticmethod
    def _answer(exchange: Exchange, reply: Mapping[str, Any], head: Mapping[str, Any]) -> Answer | None:
        """What the request answers its client, as a retry of it gets it: the model's last
        reply with the calls the client runs only, or the turn's final text (``DELIVERED``
        once it reached its client: ``delivered``)."""
        if exchange.slot < 0:
            return None
        message: dict[str, Any] = {"role": "assistant", "content": exchange.final}
        finish_reason = head.get("finish_reason") if head.get("finish_reason") in ("length", "content_filter") else "stop"
        if exchange.forwarded:
            message = {"role": "assistant", "content": reply.get("content") or None,
                       "tool_calls": client_calls(reply, exchange.forwarded)}  # fmt: skip
            finish_reason = "tool_calls"
        elif reply.get("tool_calls"):  # the turn ended on calls it would not run (too many rounds)
            finish_reason = "stop"
        kept = {"id": head.get("id"), "created": head.get("created"), "message": message, "finish_reason": finish_reason,
                "usage": head.get("usage")}  # fmt: skip
        text = orjson.dumps(kept)
        return Answer(exchange.slot, exchange.nonce, text if len(text) <= KEPT_ANSWER_BYTES else GAVE_UP)

    def answer_of(self, retried: Retried) -> Program[bytes | None]:
        """What the attempt ``retried`` retries answered (see ``middleware.store.retries.answer_of``)."""
        answer: bytes | None = yield from answer_of(self.layout, retried.session_id, retried.retry, now=time.time())
        return answer

    def delivered(self, session_id: str, slot: int, nonce: str) -> Program[None]:
        """The answer kept in ``slot`` for request ``nonce`` reached its client: a request sent
        again with its body is a new message now (``middleware.store.retries``)."""
        checked((yield Batch([answer_command(self.layout, session_id, Answer(slot, nonce, DELIVERED))])))

    def beat(self, session_id: str, nonce: str) -> Program[bool]:
        """Say that request ``nonce`` of the session still runs (``middleware.store.retries.beat``)."""
        session_id, _ = self.engine.checked(session_id)
        found: bool = yield from beat(self.layout, session_id, nonce, now=time.time())
        return found

    @staticmethod
    def _saved(calls: Calls) -> dict[str, Any]:
        """What the turn's plan keeps between requests."""
        plan, loop = calls.plan, calls.loop.messages[len(calls.plan.prompt.messages) :]
        whole = _worth_keeping(calls.whole, calls.cleared)
        return {"tools": plan.tools.saved() if plan.tools is not None else None,
                "selected": plan.selected.saved() if plan.selected is not None else None, "kept": list(plan.kept),
                "marked": calls.marked, "extra": calls.extra, "answered": portable_keys(calls.answered, loop),
                "first": calls.first, "resent": plan.resent, "composes": plan.composes, "schema_tokens": plan.schema_tokens,
                "whole": dict(zip(portable_keys(whole, loop), whole.values(), strict=True))}  # fmt: skip

    def _record(self, exchange: Exchange, text: str, *, ended: bool = True) -> Program[None]:
        """Record the turn in its place in the session, with the tool calls the client ran."""
        calls, plan = exchange.calls, exchange.plan
        sent = calls.loop.messages[len(plan.prompt.messages) :]
        turn = Turn(user=plan.message, assistant=text, tool_calls=tuple(ran_calls(sent, calls.answered, calls.whole)))
        update, vectors = yield from self.engine.planned_update(plan, turn, ended=ended, billed=calls.first,
                                                                turn_id=exchange.turn.turn_id,
                                                                sent=calls.loop.messages[: len(plan.prompt.messages)])  # fmt: skip
        exchange.owed = record_arguments(self.layout, exchange.session_id, update, now=time.time(), vectors=vectors)
        yield from self.pay(exchange)

    def pay(self, exchange: Exchange) -> Program[None]:
        """Write what the turn owes the session: its record, made and not yet written (again,
        after the store failed: the record script knows a turn it already wrote by its id),
        or, for a request that went no further, its place given up (a turn whose client-side
        tools ran is recorded with them). A turn waiting in Redis for the client's results
        stays there; nothing happens for a turn that owes nothing."""
        owed, calls = exchange.owed, exchange.calls
        if owed is False:
            return
        answer = exchange.answer or exchange.gave_up()
        if isinstance(owed, OpenTurn):  # the turn waits for the client's results, in Redis
            yield from wait_for_results(self.layout, exchange.session_id, owed, drop=exchange.drop, now=time.time(),
                                        wait=self.wait, epoch=exchange.epoch, answer=answer)  # fmt: skip
            exchange.owed = False
            return
        record = None if owed is True else owed
        if record is None:
            if exchange.drop is not None:  # the turn waits in Redis: the client may send its results again
                if answer is not None:
                    checked((yield Batch([answer_command(self.layout, exchange.session_id, answer)])))
                exchange.owed = False
                return
            sent = calls.loop.messages[len(exchange.plan.prompt.messages) :]
            if ran_calls(sent, calls.answered):
                yield from self._record(exchange, "(the model failed after the tools ran)", ended=False)
                return
        applied = yield from finish(self.layout, exchange.session_id, exchange.turn.seq, record, drop=exchange.drop,
                                    now=time.time(), wait=self.wait, epoch=exchange.epoch, answer=answer)  # fmt: skip
        exchange.owed, exchange.queued = False, not applied and record is not None

    def catch_up(self, exchange: Exchange) -> Program[tuple[bool, int]]:
        """Apply the session's turns due, for a turn queued behind an earlier one: whether it
        is applied, and the last place applied (see ``middleware.store.live.catch_up``)."""
        applied: tuple[bool, int] = yield from catch_up(self.layout, exchange.session_id, exchange.turn.seq, now=time.time(),
                                            wait=self.wait, epoch=exchange.epoch)  # fmt: skip
        return applied

    # --- a turn that did not end normally ----------------------------------------------------

    def fail(self, exchange: Exchange, request: Request, *, model: str, latency: float, status: int) -> Program[None]:
        """The upstream call failed (``status``). A turn waiting in Redis stays there (the
        client may send its tool results again); one whose client-side tools ran is recorded
        with them; a new turn gives its place up."""
        exchange.calls.made(request, {}, None, latency, model=model, error=status)
        yield from self.pay(exchange)

    def settle(
        self, exchange: Exchange, request: Request, reply: Mapping[str, Any], usage: Any, *, model: str, latency: float
    ) -> Program[None]:
        """A stream that ended early (the client went away, or the provider broke off): what
        it said is recorded, marked as cut; tool calls cut mid-stream cannot be run."""
        exchange.calls.made(request, reply, usage, latency, model=model)
        text = str(reply.get("content") or "").strip() if not reply.get("tool_calls") else ""
        exchange.final = f"{text} (cut: the stream ended early)".strip()
        yield from self._record(exchange, exchange.final, ended=False)

    def renew(self, exchange: Exchange) -> Program[bool]:
        """Renew the lease on the turn's place while its request runs (see ``middleware.store.live``);
        False once there is none to renew (the turn owes no place, or it lapsed)."""
        if not exchange.turn.seq or exchange.owed is False:
            return False
        renewed: bool = yield from renew(self.layout, exchange.session_id, exchange.turn.seq, now=time.time(),
                                         epoch=exchange.epoch)  # fmt: skip
        return renewed

    def passthrough(self, messages: Any, tools: Any, reply: Mapping[str, Any], usage: Any, *, model: str,
                    latency: float) -> dict[str, Any]:  # fmt: skip
        """The usage line of a request that named no session (sent upstream untouched)."""
        call = passthrough_call(messages, tools, reply, usage, model=model, latency=latency, tokenizer=self.engine.tokenizer,
                                counting_model=self.counting_model)  # fmt: skip
        return self.engine.call_made(call, after_results=False, offered=False)
