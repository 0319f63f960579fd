"""One request's part of a turn through the endpoint, as programs: ``begin`` reads the
request against the session and composes what goes upstream; ``finish`` logs the call and
records the turn (or keeps it open for the client's tool results); ``fail`` settles a turn
whose upstream call failed; ``passthrough`` logs a request that names no session.

Nothing is kept in the process between requests: the turn in flight lives in Redis
(``middleware.core.live``), so any process can take a session's next request.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from .. import llm
from ..core.archive import query_terms
from ..core.conversation import Conversation, OpenTurn, content_text, read_messages
from ..core.effects import Program
from ..core.replies import interpret_reply
from ..core.state import Prompt, SessionState, TokenBreakdown, built
from ..exceptions import InvalidMessageError
from ..session.engine import Engine
from ..store import live
from ..store.load import load
from ..store.record import record, record_arguments
from ..usage.log import usage_record

__all__ = ["Exchange", "Turns"]

# Stands in for the text of a user message that holds only images or other non-text parts.
NO_TEXT = "(a message without text)"
_PROMPT_CHARS = 64_000


@dataclass(frozen=True, slots=True)
class Exchange:
    """A request's part of a turn: the turn so far and what goes upstream."""

    session_id: str
    turn: OpenTurn  # the turn in progress, this request's tool results included
    prompt: Prompt  # the composed prompt, on the client's own system text when it sent one
    messages: list[dict[str, Any]]  # what goes upstream: the prompt, then the turn's tool loop
    drop: str | None  # the live field the turn waited in, forgotten once it moves on
    loop_tokens: int
    tools_tokens: int
    tools: list[dict[str, Any]] | None = None  # the schemas that go upstream, as the client sent them
    static_prefix: str = ""  # the system text that does not change from call to call (the client's, else ours)


def _prompt_json(prompt: Prompt, sent: Sequence[Mapping[str, Any]]) -> str:
    """What the inspector shows as the last prompt; dropped past 64 kB rather than cut."""
    record = {"messages": list(sent), "tokens": prompt.tokens.as_dict(), "full_history_tokens": prompt.full_history_tokens,
              "turn": prompt.turn, "trimmed": list(prompt.trimmed)}  # fmt: skip
    text = orjson.dumps(record, default=str)
    return text.decode() if len(text) <= _PROMPT_CHARS else ""


class Turns:
    """The endpoint's turn programs over one engine (config, composer, usage log)."""

    def __init__(self, engine: Engine, *, wait: float, kind: str = "serve") -> None:
        self.engine, self.wait, self.kind = engine, wait, kind  # kind: what usage lines call these calls
        self.layout = engine.layout

    # --- begin ------------------------------------------------------------------------------

    def begin(self, session_id: str, messages: Any, tools: Sequence[Mapping[str, Any]] | None, model: str) -> Program[Exchange]:
        """Read the request against the session; compose what goes upstream."""
        engine = self.engine
        session_id = engine.session_id(session_id)
        conversation = read_messages(messages)
        user = conversation.user
        if user is not None:
            user = engine.user_message(user if user.strip() else NO_TEXT)
        # Recall looks for what the turn's user message needs, on every call of the turn alike.
        query = query_terms(user, ()) if user is not None and self.layout.recall else ()
        arrival = yield from live.arrive(self.layout, session_id, waiting=conversation.waiting, reserve=user is not None,
                                         mark_import=bool(conversation.earlier), now=time.time(), wait=self.wait, query=query)  # fmt: skip
        turn, drop = self._turn(conversation, arrival, user)
        state, candidates = arrival.loaded.state, arrival.loaded.candidates
        if user is None and self.layout.recall:  # only the tool results came: recall for the turn's own message
            loaded = yield from load(self.layout, session_id, query=query_terms(turn.user, ()))
            state, candidates = loaded.state, loaded.candidates
        if arrival.first and not state.turns and conversation.earlier:
            state, candidates = yield from self._import(session_id, conversation.earlier, turn.user)
        tools_tokens = llm.tools_tokens(engine.config.tokens.model, tools)
        loop_tokens = sum(map(engine.tokenizer.count_message, turn.loop))
        prompt = self._compose(state, turn.user, conversation.system, model, tools_tokens + loop_tokens, candidates)
        sent = [*prompt.messages[:-1], self._current(prompt, conversation), *turn.loop]
        static = conversation.system if conversation.system is not None else engine.composer.static_prefix
        return Exchange(session_id=session_id, turn=turn, prompt=prompt, messages=sent, drop=drop,
                        loop_tokens=loop_tokens, tools_tokens=tools_tokens, tools=[dict(t) for t in tools] if tools else None,
                        static_prefix=static)  # fmt: skip

    def _turn(self, conversation: Conversation, arrival: live.Arrival, user: str | None) -> tuple[OpenTurn, str | None]:
        """The turn this request continues (waiting in Redis, or told by a full history) or starts."""
        if arrival.open is not None:
            return arrival.open.answered(conversation.tail), arrival.open.field
        if user is None:
            raise InvalidMessageError(
                f"The tool results answer call {conversation.waiting[0][:40]!r}, which this session is not waiting for."
            )
        turn = OpenTurn(seq=arrival.seq, turn_id=uuid.uuid4().hex, user=user, loop=conversation.tail,
                        steps=sum(1 for m in conversation.tail if m["role"] == "assistant"))  # fmt: skip
        if turn.pending:  # a full history whose last tool calls are not all answered
            raise InvalidMessageError(f"No tool result for call {turn.pending[0][:40]!r}, which the model asked for.")
        return turn, None

    def _import(
        self, session_id: str, earlier: Sequence[Sequence[dict[str, Any]]], user: str
    ) -> Program[tuple[SessionState, Any]]:
        """A new session takes the whole turns its first request carried, oldest first."""
        engine = self.engine
        for messages in earlier:
            text, calls, _, _ = interpret_reply(list(messages[1:]))
            user = content_text(messages[0].get("content"), "") or NO_TEXT
            update = engine.composer.apply_turn(engine.turn(user, text, calls), turn_id=uuid.uuid4().hex)
            yield from record(self.layout, session_id, update, now=time.time())
        loaded = yield from load(self.layout, session_id, query=query_terms(user, ()) if self.layout.recall else ())
        return loaded.state, loaded.candidates

    def _compose(self, state: SessionState, user: str, system: str | None, model: str, extra: int, candidates: Any) -> Prompt:
        engine = self.engine
        composer = engine.composer
        if system is None:
            return composer.compose(
                state, user, budget=engine.budget(model), extra_tokens=extra, checked=True, candidates=candidates
            )
        # The client's own system text takes the place of the configured static prefix.
        own = engine.tokenizer.count_chat("system", system)
        prompt = composer.compose(state, user, budget=engine.budget(model), extra_tokens=extra + max(own - composer.static_tokens, 0),
                                  checked=True, candidates=candidates)  # fmt: skip
        return self._rebased(prompt, system, own)

    def _rebased(self, prompt: Prompt, system: str, own: int) -> Prompt:
        """``prompt`` with ``system`` before its memory sections instead of the static prefix."""
        composer = self.engine.composer
        memory = prompt.messages[0]["content"][len(composer.static_prefix) :].strip("\n")
        content = f"{system}\n{memory}" if memory else system
        tokens = self.engine.tokenizer.count_chat("system", content) - prompt.tokens.notes - prompt.tokens.context
        messages = [{"role": "system", "content": content}, *prompt.messages[1:]]
        breakdown = dataclasses.replace(prompt.tokens, system=tokens)
        full = prompt.full_history_tokens - prompt.tokens.system + own
        stable = prompt.stable_system_chars - len(composer.static_prefix) + len(system)  # the memory follows the client's text
        return dataclasses.replace(
            prompt, messages=messages, tokens=breakdown, full_history_tokens=full, stable_system_chars=stable
        )

    @staticmethod
    def _current(prompt: Prompt, conversation: Conversation) -> dict[str, Any]:
        """The current user message as the client sent it (images and other parts kept)."""
        content = conversation.user_content
        return {"role": "user", "content": content} if isinstance(content, list) else prompt.messages[-1]

    # --- finish -----------------------------------------------------------------------------

    def finish(
        self, exchange: Exchange, reply: Mapping[str, Any], usage: Any, *, model: str, latency: float
    ) -> Program[dict[str, Any]]:
        """Log the call; record the turn when the reply is final, else keep it open for the
        client's tool results. Returns the usage line."""
        line = self.log(exchange, reply, usage, model=model, latency=latency)
        turn = exchange.turn
        if reply.get("tool_calls"):
            yield from live.wait_for_results(self.layout, exchange.session_id, turn.asked(reply), drop=exchange.drop,
                                             now=time.time(), wait=self.wait)  # fmt: skip
            return line
        yield from self._record(exchange, str(reply.get("content") or ""))
        return line

    def _record(self, exchange: Exchange, text: str) -> Program[None]:
        engine, turn, now = self.engine, exchange.turn, time.time()
        _, calls, _, _ = interpret_reply([*turn.loop, {"role": "assistant", "content": text}])
        update = engine.composer.apply_turn(engine.turn(turn.user, text, calls), turn_id=turn.turn_id,
                                            prompt=_prompt_json(exchange.prompt, exchange.messages))  # fmt: skip
        arguments = record_arguments(self.layout, exchange.session_id, update, now=now)
        yield from live.finish(self.layout, exchange.session_id, turn.seq, arguments, drop=exchange.drop, now=now, wait=self.wait)

    def fail(self, exchange: Exchange) -> Program[None]:
        """The upstream call failed. A turn waiting in Redis stays there (the client may send
        its tool results again); one whose client-side tools ran is recorded with them; a new
        turn gives its place up."""
        turn = exchange.turn
        if exchange.drop is not None:
            return
        if turn.loop:
            yield from self._record(exchange, "(the model failed after the tools ran)")
            return
        yield from live.finish(self.layout, exchange.session_id, turn.seq, None, drop=None, now=time.time(), wait=self.wait)

    # --- usage lines ------------------------------------------------------------------------

    def log(
        self, exchange: Exchange, reply: Mapping[str, Any], usage: Any, *, model: str, latency: float, error: int | None = None
    ) -> dict[str, Any]:
        """One usage line for an upstream call of a session's turn (``error``: the HTTP status it failed with)."""
        provider, engine = llm.usage_of(usage), self.engine
        # A full-history client resends the same schemas: it sends every one it was given.
        full = exchange.prompt.full_history_tokens + exchange.loop_tokens + exchange.tools_tokens
        # What the provider would read from its cache (a failed call leaves its cache as it was).
        cache = None if error is not None else engine.billing.call(
            exchange.session_id, model, tools=exchange.tools, messages=exchange.messages, full_tokens=full, now=time.time(),
            static_prefix=exchange.static_prefix, static_tokens=engine.tokenizer.count_chat("system", exchange.static_prefix),
        )  # fmt: skip
        record = usage_record(kind=self.kind, session=exchange.session_id, turn=exchange.prompt.turn, step=exchange.turn.steps,
                              model=model, prompt=exchange.prompt, loop_tokens=exchange.loop_tokens,
                              tools_tokens=exchange.tools_tokens, full_history_tokens=full,
                              provider=provider, cost_usd=llm.cost_of(model, provider),
                              price_per_token=llm.input_price(model), latency_ms=latency * 1000,
                              tool_calls=len(reply.get("tool_calls") or ()), cache=cache)  # fmt: skip
        if error is not None:
            record["error_status"] = error
        return self.engine.usage_log.write(record, content={"messages": exchange.messages, "reply": dict(reply)})

    def passthrough(self, messages: Any, tools: Any, usage: Any, *, model: str, latency: float, calls: int) -> dict[str, Any]:
        """The usage line of a request that named no session (sent upstream untouched)."""
        tokenizer = self.engine.tokenizer
        sent = tokenizer.count_messages(m for m in messages if isinstance(m, Mapping)) if isinstance(messages, list) else 0
        tools_tokens = llm.tools_tokens(self.engine.config.tokens.model, tools if isinstance(tools, list) else None)
        breakdown = built(TokenBreakdown, system=0, notes=0, context=0, summary=0, recent=0, current=max(sent - 3, 0), priming=3)
        prompt = built(Prompt, messages=[], tokens=breakdown, full_history_tokens=breakdown.total, turn=0, trimmed=())
        provider = llm.usage_of(usage)
        record = usage_record(kind="passthrough", session="", turn=0, step=0, model=model, prompt=prompt, loop_tokens=0,
                              tools_tokens=tools_tokens, full_history_tokens=breakdown.total + tools_tokens, provider=provider, cost_usd=llm.cost_of(model, provider),
                              price_per_token=llm.input_price(model), latency_ms=latency * 1000, tool_calls=calls)  # fmt: skip
        return self.engine.usage_log.write(record)
