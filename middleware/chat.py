"""Full turns through litellm, and wrapping existing chatbots, each written once as a program.

A chat turn composes the prompt, calls the model, runs the tool loop (the model's calls
are executed with the given Python callables, results go back within the turn),
records the turn with its tool calls and writes one usage line per LLM call. A wrapped
turn does the same around a chatbot function that calls its LLM itself. The managers
run these programs in the calling thread or awaited; ``ChatStream`` and
``AsyncChatStream`` run them as iterators of text chunks.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import llm
from .core.effects import END, Abandoned, Emit, Io, Next, Program
from .core.replies import interpret_reply
from .core.state import Prompt, ToolCall
from .core.text import CUT_MARKER, redact_secrets
from .core.turnloop import TurnLoop
from .engine import Engine, ToolsArg
from .events import log
from .exceptions import LLMError
from .runner import ASend, Send, adrive, drive
from .usage import usage_record

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
        self.schemas = self.toolset.schemas or None  # sent on every call
        self.tools_tokens = llm.tools_tokens(engine.config.tokens.model, self.schemas)  # what they add to every call
        self.lines: list[dict[str, Any]] = []  # the usage lines written, one per LLM call

    def program(self, litellm_kwargs: Mapping[str, Any]) -> Program[ChatResult]:
        stream = self.stream
        self.prompt = yield from self.engine.prepare(
            self.session_id, self.user_message, model=self.model, extra_tokens=self.tools_tokens
        )
        self.loop = TurnLoop(self.prompt.messages, max_rounds=self.engine.config.max_tool_rounds)
        texts: list[str] = []
        try:
            while not self.loop.done:
                sent, started = list(self.loop.messages), time.perf_counter()
                message, usage = yield from (
                    self._streamed(sent, litellm_kwargs, texts) if stream else self._called(sent, litellm_kwargs)
                )
                pending = self.loop.take(message)
                self._log_call(sent, message, usage, time.perf_counter() - started)
                if pending:
                    outcomes = []
                    for call in pending:
                        outcomes.append((yield from self.toolset.call(call.id, call.name, call.arguments)))
                    self.loop.give(outcomes)
                    self._fit_loop()
        except (LLMError, Abandoned) as error:
            # Tools that ran had their effects, and a streamed reply was read: record them.
            if stream and (texts or self.loop.calls):
                yield from self._record(_cut_reply(texts))
            elif self.loop.calls:
                yield from self._record(self._failed(error))
            raise
        return self._result((yield from self._record()))

    def _called(self, sent: list[dict[str, Any]], kwargs: Mapping[str, Any]) -> Program[tuple[dict[str, Any], Any]]:
        model, schemas = self.model, self.schemas
        response = yield Io(
            lambda: llm.complete(model, sent, schemas, **kwargs), lambda: llm.acomplete(model, sent, schemas, **kwargs)
        )
        return llm.message_of(response), response

    def _streamed(
        self, sent: list[dict[str, Any]], kwargs: Mapping[str, Any], texts: list[str]
    ) -> Program[tuple[dict[str, Any], Any]]:
        model, schemas = self.model, self.schemas
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

    def _log_call(self, sent: Sequence[Mapping[str, Any]], reply: Mapping[str, Any], usage: Any, latency: float) -> None:
        provider = llm.usage_of(usage)
        record = usage_record(
            kind=self.kind,
            session=self.session_id,
            turn=self.prompt.turn,
            step=len(self.lines),
            model=self.model,
            prompt=self.prompt,
            loop_tokens=sum(self.engine.tokenizer.count_message(m) for m in sent[len(self.prompt.messages) :]),
            tools_tokens=self.tools_tokens,
            provider=provider,
            cost_usd=llm.cost_of(self.model, provider),
            price_per_token=llm.input_price(self.model),
            latency_ms=latency * 1000,
            tool_calls=len(reply.get("tool_calls") or ()),
        )
        self.lines.append(self.engine.usage_log.write(record, content={"messages": list(sent), "reply": dict(reply)}))

    def _result(self, turn: int) -> ChatResult:
        return ChatResult(text=self.loop.final or "", tool_calls=tuple(self.loop.calls), turn=turn, model=self.model,
                          prompt=self.prompt, calls=tuple(self.lines), stopped_early=self.loop.stopped_early)  # fmt: skip

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


def _call_blocking(fn: Callable[..., Any], messages: list[dict[str, str]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    reply = fn(messages, *args, **kwargs)
    if inspect.isawaitable(reply):
        if inspect.iscoroutine(reply):
            reply.close()  # never awaited: say so once, not as a RuntimeWarning too
        raise LLMError("The wrapped chatbot returned an awaitable: wrap an async function (async def) instead.")
    return reply


def wrapped_turn(
    engine: Engine, fn: Callable[..., Any], session_id: Any, user_message: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Program[Any]:
    """A turn of the chatbot ``fn(messages, *args, **kwargs) -> reply``: compose, call, record, log."""
    session_id = engine.session_id(session_id)
    prompt = yield from engine.prepare(session_id, user_message)
    started = time.perf_counter()
    reply = yield Io(lambda: _call_blocking(fn, prompt.messages, args, kwargs), lambda: fn(prompt.messages, *args, **kwargs))
    latency = time.perf_counter() - started
    text, calls, usage, model = interpret_reply(reply)
    provider = llm.usage_of(usage)
    name = model or "wrapped"
    record = usage_record(
        kind="wrap", session=session_id, turn=prompt.turn, step=0, model=name, prompt=prompt,
        loop_tokens=0, tools_tokens=0, provider=provider,
        cost_usd=llm.cost_of(name, provider) if model else None,
        price_per_token=llm.input_price(name) if model else None,
        latency_ms=latency * 1000, tool_calls=len(calls),
    )  # fmt: skip
    engine.usage_log.write(record, content={"messages": prompt.messages, "reply": text})
    yield from engine.record_turn(session_id, user=user_message, assistant=text, tool_calls=calls)
    return reply
