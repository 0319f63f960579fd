"""Full turns through litellm, and wrapping existing chatbots, each written once as a program.

A chat turn composes the prompt, calls the model, runs the tool loop (the model's calls
are executed with the given Python callables, results go back within the turn),
records the turn with its tool calls and writes one usage line per LLM call. A wrapped
turn does the same around a chatbot function that calls its LLM itself. The managers
run these programs in the calling thread or awaited; ``ChatStream`` and
``AsyncChatStream`` run them as iterators of text chunks.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import llm
from ..core.caching import prefer_whole, with_breakpoints, worth_sending, worth_writing
from ..core.disclosure import DisclosedTools, baseline_messages
from ..core.effects import END, Abandoned, Emit, Io, Next, Program
from ..core.replies import as_dict, interpret_reply
from ..core.state import Prompt, SessionState, ToolCall
from ..core.text import CUT_MARKER, redact_secrets
from ..core.turnloop import PendingCall, ToolOutcome, TurnLoop
from ..events import log
from ..exceptions import InvalidToolCallError, LLMError
from ..runner import ASend, Send, adrive, drive
from ..session.engine import Engine, ToolsArg
from ..tools import Tool, ToolList, Toolset, as_tools
from ..usage.log import usage_record

__all__ = ["AsyncChatStream", "ChatResult", "ChatStream", "ChatTurn", "wrapped_turn"]


@dataclass(frozen=True, kw_only=True)
class ChatResult:
    """A finished turn: the final text, the tool calls run, and what the calls cost."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    turn: int
    model: str
    prompt: Prompt
    calls: tuple[dict[str, Any], ...]  # the usage lines written, one per LLM call
    stopped_early: bool = False
    # The tools whose schemas the turn sent, in order (the loader aside): what it started
    # with, then what it loaded. Every tool, when disclosure is off.
    tools_sent: tuple[str, ...] = ()
    loaded: tuple[str, ...] = ()  # the tools the turn loaded (by the loader, or by calling them unsent)

    @property
    def recorded(self) -> bool:
        """False when the store was unreachable (degrade mode): the turn waits in
        ``pending_turns`` and is written once the store answers again."""
        return self.turn > 0

    @property
    def usage(self) -> dict[str, int]:
        """Provider-reported tokens summed over the turn's LLM calls."""
        total = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        for line in self.calls:
            for key in total:
                total[key] += line["provider"].get(key) or 0
        return total

    @property
    def cost_usd(self) -> float | None:
        costs = [line["cost_usd"] for line in self.calls]
        return None if any(c is None for c in costs) else sum(costs)

    def __str__(self) -> str:
        return self.text


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return None


def _answer(call: PendingCall, text: str) -> ToolOutcome:
    """A tool message the turn answers itself, not remembered as a tool call."""
    return ToolOutcome(message={"role": "tool", "tool_call_id": call.id, "content": text}, record=None)


def _cut_reply(texts: list[str]) -> str:
    """What a stream said before it ended early, marked as cut, so nothing is lost."""
    partial = "".join(texts).strip()
    return f"{partial} (cut: the stream ended early)" if partial else "(cut: the stream ended early)"


class ChatTurn:
    """One chat turn, its input checked when made; ``program()`` is the turn itself."""

    prompt: Prompt
    loop: TurnLoop

    def __init__(
        self, engine: Engine, session_id: Any, user_message: Any, *, model: str | None, tools: ToolsArg, stream: bool
    ) -> None:
        self.engine, self.stream, self.kind = engine, stream, "stream" if stream else "chat"
        self.session_id, self.user_message = engine.session_id(session_id), engine.user_message(user_message)
        self.model, self.toolset = model or engine.config.model, engine.toolset(tools)
        self.catalog = engine.catalog(self.toolset)  # None: every schema on every call
        self.every_schema = self.toolset.schemas or None  # what a full-history chatbot sends
        self.full_tools_tokens = llm.tools_tokens(engine.config.tokens.model, self.every_schema)
        self.disclosed: DisclosedTools | None = None
        self.kept: list[str] = []  # tools the turn keeps uncalled (see Engine.grows_recent)
        self.selected: DisclosedTools | None = None  # what was chosen up front, matches included (see MatchOdds)
        self.vector: Sequence[float] = ()  # the message's embedding, when tools are matched by meaning
        self.rules = engine.billing.rules(self.model)  # the model's caching rules and prices
        self.breakpoints = engine.config.caching.anthropic_breakpoints and self.rules.explicit
        self.marked: int | None = None  # the message that the turn's previous call ended its breakpoints at
        self.lines: list[dict[str, Any]] = []  # the usage lines written, one per LLM call
        self.extra = False  # the next call is one a full-history chatbot would not make (after a loader round)

    @property
    def schemas(self) -> list[dict[str, Any]] | None:
        """The tool schemas of the next call: the disclosed ones, or every one."""
        return self.disclosed.schemas() if self.disclosed is not None else self.every_schema

    @property
    def tools_tokens(self) -> int:
        """What the next call's schemas add to its prompt."""
        return llm.tools_tokens(self.engine.config.tokens.model, self.schemas)

    def _choose(self, state: SessionState) -> int:
        """Given the session, choose what the turn discloses up front; its schemas' tokens."""
        if self.catalog is not None:
            self.disclosed = self.engine.disclose(self.catalog, state, self.user_message, vector=self.vector, model=self.model,
                                                 whole_tokens=self.full_tools_tokens)  # fmt: skip
        return self.tools_tokens

    def program(self, litellm_kwargs: Mapping[str, Any]) -> Program[ChatResult]:
        stream = self.stream
        self.vector = yield from self.engine.meaning(self.catalog, self.user_message)
        self.prompt = yield from self.engine.prepare(
            self.session_id, self.user_message, model=self.model, schemas_for=self._choose
        )
        # Tools that stay uncalled (see Engine.grows_recent): kept even when every schema is sent.
        self.kept = self.disclosed.kept if self.disclosed is not None else []
        if self.disclosed is not None and self.engine.config.disclosure.cache_aware:
            self.selected = self.disclosed  # kept when every schema is sent instead
            self._drop_unlikely()
            if self._whole_is_cheaper():
                self.disclosed = None
        self.loop = TurnLoop(self.prompt.messages, max_rounds=self.engine.config.max_tool_rounds)
        texts: list[str] = []
        try:
            while not self.loop.done:
                sent, schemas, started = self._request()
                message, usage = yield from (
                    self._streamed(sent, schemas, litellm_kwargs, texts)
                    if stream
                    else self._called(sent, schemas, litellm_kwargs)
                )
                pending = self.loop.take(message)
                if schemas:  # how often a reply asks for tools, a turn's first call apart from later ones
                    self.engine.loop_odds.note(len(sent) > len(self.prompt.messages), bool(pending))
                self._log_call(sent, schemas, message, usage, time.perf_counter() - started)
                if pending:
                    outcomes = []
                    for call in pending:
                        outcomes.append((yield from self._run(call)))
                    self.loop.give(outcomes)
                    self.extra = all(outcome.record is None for outcome in outcomes)
                    self._fit_loop()
        except (LLMError, Abandoned) as error:
            # Tools that ran had their effects, and a streamed reply was read: record them.
            if stream and (texts or self.loop.calls):
                yield from self._record(_cut_reply(texts))
            elif self.loop.calls:
                yield from self._record(self._failed(error))
            raise
        return self._result((yield from self._record()))

    def _drop_unlikely(self) -> None:
        """Leave out the tools matched to the message, and their companions, that the model
        calls too seldom at their rank (learned: ``Engine.match_odds``) to pay for what they
        cost with this model's prompt caching against the loader round they would spare
        (see core.caching.worth_sending): best first, the first sent also paying, with
        breakpoints, for the cached system text it makes the provider write again. Not while
        the matched tools join the ones that stay (``Engine.grows_recent``), nor where
        nothing is cached."""
        disclosed, engine, rules = self.disclosed, self.engine, self.rules
        if disclosed is None or disclosed.grown or not (disclosed.ranked or disclosed.companions) or not engine.caches(rules):
            return
        schemas, count = disclosed.schemas(), engine.config.tokens.model
        every = llm.tool_sizes(count, schemas)
        sizes, stable = dict(zip(disclosed.names, every[1:], strict=True)), sum(every[: disclosed.stable_tools])
        # What a call after a loader round shares with the first: with breakpoints, up to the
        # last tool that stays; without, every schema the first call sent (the new one comes after).
        shared = stable if rules.explicit else sum(every)
        rest = self.prompt.tokens.total + sum(every) - shared
        # The cached system text the first tool sent makes the provider write again: where
        # breakpoints mark it (Anthropic). Prefix caching reads on past the tools only in whole
        # steps (OpenAI's 128 tokens), as far as nothing changed: too little to count on.
        system = self.prompt.messages[0].get("content") if self.prompt.messages and rules.explicit else None
        after = engine.tokenizer.count(system[: self.prompt.stable_system_chars]) if isinstance(system, str) else 0
        odds, settled, dropped = engine.match_odds, disclosed.settled, []
        offered = [*enumerate(disclosed.ranked), *((odds.COMPANION, name) for name in disclosed.companions)]
        for rank, name in offered:
            if worth_sending(rules, odds.chance(settled, rank), schema=sizes[name], shared=shared, rest=rest, after=after):
                after = 0  # the first sent makes the provider write the rest again
            else:
                dropped.append(name)
        disclosed.drop(dropped)

    def _whole_is_cheaper(self) -> bool:
        """Whether every schema costs less than the disclosed ones with this model's prompt
        caching: when the disclosed prompt's stable part is too short to be cached and every
        schema's is not (a model that caches nothing under 4,096 tokens, say), comparing both
        per call with a warm cache, and, while the stable part grows into the minimum
        (``Engine.grows_recent``), over the turns it will take at the session's pace so far
        (see core.caching.prefer_whole)."""
        rules, engine, disclosed = self.rules, self.engine, self.disclosed
        if disclosed is None or not engine.caches(rules):
            return False
        messages, static, count = self.prompt.tokens.total, engine.composer.static_tokens, engine.config.tokens.model
        schemas = disclosed.schemas()
        # What this call reads: the tools that stayed from the previous turn, and the static
        # system text only when no tools that changed (matched, or joining) come before it.
        kept = llm.tools_tokens(count, schemas[: disclosed.stable_tools - disclosed.grown])
        growth = 0.0
        if disclosed.growing:  # this turn's, or the pace so far: the tools that joined (not pinned) over the turns
            stable = llm.tools_tokens(count, schemas[: disclosed.stable_tools])
            joined = stable - llm.tools_tokens(count, schemas[: 1 + disclosed.pinned])
            growth = max(stable - kept, joined / max(self.prompt.turn, 1))
        if len(disclosed.names) == disclosed.stable and not disclosed.grown:
            kept += static
        whole, budget = self.full_tools_tokens + messages, engine.budget(self.model)
        cheaper = prefer_whole(rules, disclosed=self.tools_tokens + messages, disclosed_stable=kept, whole=whole,
                               whole_stable=self.full_tools_tokens + static, growth=growth)  # fmt: skip
        return cheaper and (budget is None or whole <= budget)

    def _request(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None, float]:
        """The next call's messages and schemas, with Anthropic breakpoints when asked for."""
        sent, schemas = list(self.loop.messages), self.schemas
        if self.breakpoints:
            stable = self.disclosed.stable_tools if self.disclosed is not None else len(schemas or ())
            # The breakpoints end at this call's last message only when another call of the
            # turn is likely enough to read what that writes; else where the previous call's
            # ended (read, not written again), or, on a first call, at the stable memory.
            later = len(sent) > len(self.prompt.messages)
            odds = self.engine.loop_odds.chance(later) if schemas else 0.0
            self.marked = len(sent) - 1 if worth_writing(self.rules, odds) else self.marked
            sent, schemas = with_breakpoints(sent, schemas, static_prefix=self.engine.composer.static_prefix, stable_tools=stable,
                                             stable_system=self.prompt.stable_system_chars, tail=self.marked)  # fmt: skip
        return sent, schemas, time.perf_counter()

    def _run(self, call: PendingCall) -> Program[ToolOutcome]:
        """Run one call the model asked for. Disclosure answers its loader, and a known tool
        called without its schema is run when its arguments fit (and sent from then on), or
        loaded with a one-line answer when they do not: never an opaque error."""
        disclosed = self.disclosed
        if disclosed is not None and call.name == disclosed.catalog.loader_name:
            return _answer(call, disclosed.load(_arguments(call.arguments)))
        if disclosed is not None and call.name in disclosed.catalog and call.name not in disclosed:
            _, prepared = self.toolset.prepare(call.name, call.arguments)
            if isinstance(prepared, str):
                return _answer(call, disclosed.unsent(call.name, prepared[:300]))
            disclosed.add([call.name])
        return (yield from self.toolset.call(call.id, call.name, call.arguments))

    def _called(
        self, sent: list[dict[str, Any]], schemas: list[dict[str, Any]] | None, kwargs: Mapping[str, Any]
    ) -> Program[tuple[dict[str, Any], Any]]:
        model = self.model
        response = yield Io(
            lambda: llm.complete(model, sent, schemas, **kwargs), lambda: llm.acomplete(model, sent, schemas, **kwargs)
        )
        return llm.message_of(response), response

    def _streamed(
        self, sent: list[dict[str, Any]], schemas: list[dict[str, Any]] | None, kwargs: Mapping[str, Any], texts: list[str]
    ) -> Program[tuple[dict[str, Any], Any]]:
        model = self.model
        chunks = yield Io(lambda: llm.stream(model, sent, schemas, **kwargs), lambda: llm.astream(model, sent, schemas, **kwargs))
        streamed = llm.StreamedMessage()
        while (chunk := (yield Next(chunks))) is not END:
            text = streamed.add(chunk)
            if text:
                texts.append(text)
                yield Emit(text)
        return streamed.message(), streamed.usage

    def _record(self, assistant: str | None = None) -> Program[int]:
        """Record the turn; ``assistant`` replaces the final text when the turn did not end normally."""
        text = self.loop.final or "" if assistant is None else assistant
        if self.kept:
            self.engine.note_kept_tools(self.session_id, self.kept)
        selected = self.selected
        if selected is not None and assistant is None:  # a turn that ended normally: which of its matches it called
            called = (call.name for call in self.loop.calls)
            self.engine.match_odds.note(selected.settled, selected.ranked, selected.companions, called)
        return self.engine.record_turn(self.session_id, user=self.user_message, assistant=text, tool_calls=self.loop.calls)

    def _fit_loop(self) -> None:
        """Keep the next call within the budget: cut the largest tool results in the middle."""
        budget = self.engine.budget(self.model)
        if budget is None:
            return
        tokenizer = self.engine.tokenizer
        results = [m for m in self.loop.loop_messages if m.get("role") == "tool"]
        while results:
            over = tokenizer.count_messages(self.loop.messages) + self.tools_tokens - budget
            if over <= 0:
                return
            largest = max(results, key=lambda m: tokenizer.count(m["content"]))
            size = tokenizer.count(largest["content"])
            if size <= 64:
                return
            largest["content"] = tokenizer.cut_middle(largest["content"], max(size - over, 64), CUT_MARKER)
            results.remove(largest)

    def _log_call(
        self, sent: Sequence[Mapping[str, Any]], schemas: list[dict[str, Any]] | None, reply: Mapping[str, Any], usage: Any,
        latency: float,
    ) -> None:  # fmt: skip
        provider, engine, count = llm.usage_of(usage), self.engine, self.engine.tokenizer.count_message
        tools_tokens = llm.tools_tokens(engine.config.tokens.model, schemas)
        loop = sent[len(self.prompt.messages) :]
        # The full-history chatbot sends every schema and the same tool messages, less the
        # loader's; it makes no call after a round that only loaded schemas.
        baseline = [] if self.disclosed is None else baseline_messages(loop, [call.id for call in self.loop.calls])
        full_loop = sum(map(count, loop)) if self.disclosed is None else sum(map(count, baseline))
        full = None if self.extra else self.prompt.full_history_tokens + full_loop + self.full_tools_tokens
        cache = engine.billing.call(self.session_id, self.model, tools=schemas, messages=sent, full_tokens=full, now=time.time(),
                                    static_prefix=engine.composer.static_prefix, static_tokens=engine.composer.static_tokens)  # fmt: skip
        record = usage_record(
            kind=self.kind,
            session=self.session_id,
            turn=self.prompt.turn,
            step=len(self.lines),
            model=self.model,
            prompt=self.prompt,
            loop_tokens=sum(map(count, loop)),
            tools_tokens=tools_tokens,
            full_history_tokens=full or 0,
            provider=provider,
            cost_usd=llm.cost_of(self.model, provider),
            price_per_token=llm.input_price(self.model),
            latency_ms=latency * 1000,
            tool_calls=len(reply.get("tool_calls") or ()),
            cache=cache,
            tools=self._tools_line(schemas),
        )
        if not self.lines:
            engine.note_billed(self.session_id, {"tools": record["tools"], "cache": cache})
        self.lines.append(engine.usage_log.write(record, content={"messages": list(sent), "reply": dict(reply)}))

    def _tools_line(self, schemas: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The ``tools`` field of a usage line: what the call carried, against every schema."""
        line: dict[str, Any] = {"sent": len(schemas or ()), "of": len(self.toolset), "full_tokens": self.full_tools_tokens}
        if self.disclosed is not None:
            line["loaded"] = len(self.disclosed.loaded)
        return line

    def _result(self, turn: int) -> ChatResult:
        disclosed = self.disclosed
        sent = tuple(disclosed.names) if disclosed is not None else tuple(tool.name for tool in self.toolset)
        return ChatResult(text=self.loop.final or "", tool_calls=tuple(self.loop.calls), turn=turn, model=self.model,
                          prompt=self.prompt, calls=tuple(self.lines), stopped_early=self.loop.stopped_early,
                          tools_sent=sent, loaded=tuple(disclosed.loaded) if disclosed is not None else ())  # fmt: skip

    def _failed(self, error: BaseException) -> str:
        """Text recorded when the model fails after tools already ran (their effects happened)."""
        log.warning(
            "chat.failed_after_tools",
            session=self.session_id,
            tool_calls=len(self.loop.calls),
            error=redact_secrets(str(error))[:200],
        )
        return f"(the model failed after running tools: {type(error).__name__})"


class ChatStream:
    """Iterate for the reply's text chunks; the turn is recorded when the stream ends.

    ``result`` holds the :class:`ChatResult` afterwards. If iteration stops early
    (``close()``, or the stream is dropped), the text received so far is recorded,
    marked as cut.
    """

    def __init__(self, program: Program[ChatResult], send: Send) -> None:
        self.result: ChatResult | None = None
        self._steps: Generator[str, None, ChatResult] = drive(program, send)

    def __iter__(self) -> ChatStream:
        return self

    def __next__(self) -> str:
        try:
            return next(self._steps)
        except StopIteration as stop:
            self.result = stop.value if stop.value is not None else self.result
            raise StopIteration from None

    def close(self) -> None:
        self._steps.close()


class AsyncChatStream:
    """:class:`ChatStream` for asyncio: ``async for chunk in stream``, then ``stream.result``;
    ``aclose()`` stops it early."""

    def __init__(self, program: Program[ChatResult], send: ASend) -> None:
        self.result: ChatResult | None = None
        self._out: list[ChatResult] = []
        self._steps: AsyncGenerator[str, None] = adrive(program, send, self._out)

    def __aiter__(self) -> AsyncChatStream:
        return self

    async def __anext__(self) -> str:
        try:
            return await anext(self._steps)
        except StopAsyncIteration:
            self.result = self._out[0] if self._out else None
            raise

    async def aclose(self) -> None:
        await self._steps.aclose()


# --- wrapping an existing chatbot -------------------------------------------


def _call_blocking(fn: Callable[..., Any], messages: list[dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    reply = fn(messages, *args, **kwargs)
    if inspect.isawaitable(reply):
        if inspect.iscoroutine(reply):
            reply.close()  # never awaited: say so once, not as a RuntimeWarning too
        raise LLMError("The wrapped chatbot returned an awaitable: wrap an async function (async def) instead.")
    return reply


def _loader_only(reply: Any, loader: str) -> list[dict[str, Any]] | None:
    """The assistant message of a reply that only asks for the loader (a chatbot that makes
    one LLM call and hands tool calls back), else None."""
    if isinstance(reply, str) or (isinstance(reply, Sequence) and not isinstance(reply, Mapping)):
        return None
    message = as_dict(reply.choices[0].message) if hasattr(reply, "choices") else dict(reply)
    calls = [as_dict(call) for call in message.get("tool_calls") or ()]
    names = [(call.get("function") or {}).get("name") for call in calls]
    return calls if calls and all(name == loader for name in names) else None


def _readable_tools(given: Any) -> list[Tool]:
    """The tools a wrapped chatbot is handed, when the middleware can read them (a list of
    schemas, Tools or callables with distinct names); otherwise none, and ``tools`` reaches
    the chatbot as given."""
    if not isinstance(given, (list, tuple)) or not given:
        return []
    try:
        tools = as_tools(given)
        Toolset(tools)  # distinct names
    except InvalidToolCallError:
        return []
    return tools


class WrappedTurn:
    """A turn of the chatbot ``fn(messages, *args, **kwargs) -> reply``: compose, call,
    record, log. Tools it is handed (``tools=``) are disclosed like chat()'s: it gets a
    ``ToolList``; a reply that only asks for the loader is answered here and the chatbot
    called again with the loaded schemas, within the turn."""

    def __init__(self, engine: Engine, fn: Callable[..., Any], session_id: Any, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.engine, self.fn, self.args, self.kwargs = engine, fn, args, dict(kwargs)
        self.session_id = engine.session_id(session_id)
        given = kwargs.get("tools")
        self.tools = _readable_tools(given)
        self.catalog = engine.catalog(Toolset(self.tools)) if self.tools else None
        self.originals = dict(zip((tool.name for tool in self.tools), given or (), strict=False))
        self.callables = bool(self.tools) and not all(isinstance(item, Mapping) for item in given or ())
        self.every_schema = [dict(tool.schema or {}) for tool in self.tools] or None
        self.handed: ToolList | None = None
        self.vector: Sequence[float] = ()  # the message's embedding, when tools are matched by meaning

    def _choose(self, state: SessionState) -> int:
        if self.catalog is None:
            return llm.tools_tokens(self.engine.config.tokens.model, self.every_schema) if self.tools else 0
        # The chatbot is handed the tools as it gave them, so they are counted as given.
        disclosed = self.engine.disclose(self.catalog, state, self.message, exact=True, vector=self.vector)
        self.handed = ToolList(disclosed, self.originals, callables=self.callables)
        self.kwargs["tools"] = self.handed
        return llm.tools_tokens(self.engine.config.tokens.model, disclosed.schemas())

    def program(self, user_message: Any) -> Program[Any]:
        engine, fn, args = self.engine, self.fn, self.args
        self.message = engine.user_message(user_message)
        self.vector = yield from engine.meaning(self.catalog, self.message)
        prompt = yield from engine.prepare(self.session_id, self.message, schemas_for=self._choose if self.tools else None)
        messages: list[dict[str, Any]] = list(prompt.messages)
        rounds, extra = 0, False
        while True:
            sent = list(messages)
            started = time.perf_counter()
            reply = yield Io(
                functools.partial(_call_blocking, fn, sent, args, self.kwargs), functools.partial(fn, sent, *args, **self.kwargs)
            )
            self._log(prompt, sent, reply, time.perf_counter() - started, extra)
            asked = _loader_only(reply, self.handed.loader_name) if self.handed is not None else None
            if asked is None or rounds >= engine.config.max_tool_rounds:
                break
            assert self.handed is not None
            answers = [{"role": "tool", "tool_call_id": call.get("id"), "content": self.handed.load(call["function"].get("arguments"))}
                       for call in asked]  # fmt: skip
            messages += [{"role": "assistant", "content": None, "tool_calls": asked}, *answers]
            rounds, extra = rounds + 1, True
        text, calls, _, _ = interpret_reply(reply)
        loader = self.handed.loader_name if self.handed is not None else None
        calls = [call for call in calls if call.name != loader]
        yield from engine.record_turn(self.session_id, user=self.message, assistant=text, tool_calls=calls)
        return reply

    def _log(self, prompt: Prompt, sent: list[dict[str, Any]], reply: Any, latency: float, extra: bool) -> None:
        engine = self.engine
        text, calls, usage, model = interpret_reply(reply)
        provider, name = llm.usage_of(usage), model or "wrapped"
        schemas = self.handed.disclosed.schemas() if self.handed is not None else self.every_schema
        tools_tokens = llm.tools_tokens(engine.config.tokens.model, schemas)
        full_tools = llm.tools_tokens(engine.config.tokens.model, self.every_schema)
        loop = sum(map(engine.tokenizer.count_message, sent[len(prompt.messages) :]))
        full = None if extra else prompt.full_history_tokens + full_tools
        cache = engine.billing.call(self.session_id, name, tools=schemas, messages=sent, full_tokens=full, now=time.time(),
                                    static_prefix=engine.composer.static_prefix, static_tokens=engine.composer.static_tokens)  # fmt: skip
        record = usage_record(
            kind="wrap", session=self.session_id, turn=prompt.turn, step=0 if not extra else 1, model=name, prompt=prompt,
            loop_tokens=loop, tools_tokens=tools_tokens, full_history_tokens=full or 0, provider=provider,
            cost_usd=llm.cost_of(name, provider) if model else None,
            price_per_token=llm.input_price(name) if model else None,
            latency_ms=latency * 1000, tool_calls=len(calls), cache=cache,
            tools={"sent": len(schemas or ()), "of": len(self.tools), "full_tokens": full_tools} if self.tools else None,
        )  # fmt: skip
        if not extra:
            engine.note_billed(self.session_id, {"tools": record.get("tools"), "cache": cache})
        engine.usage_log.write(record, content={"messages": sent, "reply": text})


def wrapped_turn(
    engine: Engine, fn: Callable[..., Any], session_id: Any, user_message: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Program[Any]:
    """A turn of the chatbot ``fn(messages, *args, **kwargs) -> reply``: compose, call, record, log."""
    return WrappedTurn(engine, fn, session_id, args, kwargs).program(user_message)
