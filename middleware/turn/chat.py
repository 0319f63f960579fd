"""Full turns through litellm, written once as a program: compose, call the model, run the
tool loop (the model's calls run with the given Python callables, results go back within
the turn), record the turn, write one usage line per LLM call. The managers run it in the
calling thread or awaited; ``ChatStream`` and ``AsyncChatStream`` run it as iterators of
text chunks.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from .. import llm
from ..core.effects import END, Abandoned, Emit, Io, Next, Program
from ..core.state import Prompt, ToolCall, Turn
from ..core.text import redact_secrets
from ..core.turnloop import PendingCall, ToolOutcome, TurnLoop
from ..events import log
from ..exceptions import LLMError
from ..provider import ProviderOptions, environment_secrets
from ..runner import ASend, Send, adrive, drive
from ..session.engine import Engine
from .calls import Calls
from .plan import Request, TurnPlan

__all__ = ["AsyncChatStream", "ChatResult", "ChatStream", "ChatTurn", "cut_reply"]


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


def cut_reply(text: str) -> str:
    """What a stream said before it ended early, marked as cut, so nothing is lost."""
    partial = text.strip()
    return f"{partial} (cut: the stream ended early)" if partial else "(cut: the stream ended early)"


class ChatTurn:
    """One chat turn, its input checked when made; ``program()`` is the turn itself."""

    def __init__(
        self, engine: Engine, session_id: Any, user_message: Any, *, model: str | None, tools: Any, stream: bool
    ) -> None:
        self.engine, self.stream, self.kind = engine, stream, "stream" if stream else "chat"
        self.session_id, self.message = engine.checked(session_id, user_message)
        self.model, self.toolset = model, engine.toolset(tools)
        self.secrets: set[str] = set()

    def program(self, litellm_kwargs: Mapping[str, Any]) -> Program[ChatResult]:
        engine, stream = self.engine, self.stream
        # The turn's credentials (an api_key given to chat()), masked in a failed tool's error
        # and in what is logged, as the environment's are.
        self.secrets = litellm_kwargs.secrets() if isinstance(litellm_kwargs, ProviderOptions) else environment_secrets()
        # Tool references go to Anthropic's own API, not through an api_base of the caller's.
        plan: TurnPlan = yield from engine.plan_turn(self.session_id, self.message, model=self.model, toolset=self.toolset,
                                                     refer=not litellm_kwargs.get("api_base"))  # fmt: skip
        calls = Calls(engine, plan, self.kind, TurnLoop(plan.prompt.messages, max_rounds=plan.max_rounds))
        loop, texts = calls.loop, list[str]()
        try:
            while not loop.done:
                request, started = calls.request(), time.perf_counter()
                message, usage = yield from (self._streamed(plan.model, request, litellm_kwargs, texts) if stream
                                             else self._called(plan.model, request, litellm_kwargs))  # fmt: skip
                calls.made(request, message, usage, time.perf_counter() - started)
                pending = loop.take(message)
                if pending:
                    outcomes = []
                    for call in pending:
                        outcomes.append((yield from self._run(calls, call)))
                    loop.give(outcomes)
                    calls.round_done(outcomes)
                    calls.fit()
        except (LLMError, Abandoned) as error:
            # Tools that ran had their effects, and a streamed reply was read: record them.
            if stream and (texts or loop.calls):
                yield from self._record(calls, cut_reply("".join(texts)), ended=False)
            elif loop.calls:
                yield from self._record(calls, self._failed(error, loop), ended=False)
            raise
        turn = yield from self._record(calls, loop.final or "", ended=True)
        return ChatResult(text=loop.final or "", tool_calls=tuple(loop.calls), turn=turn, model=plan.model, prompt=plan.prompt,
                          calls=tuple(calls.lines), stopped_early=loop.stopped_early, tools_sent=plan.sent_names(),
                          loaded=tuple(plan.tools.loaded) if plan.tools is not None else ())  # fmt: skip

    def _run(self, calls: Calls, call: PendingCall) -> Program[ToolOutcome]:
        """Run one call the model asked for, unless the turn answers it itself (the loader, or
        a known tool whose schema was not sent and whose arguments do not fit)."""
        own = calls.answer(call, self._problem)
        if own is not None:
            return own
        return (yield from self.toolset.call(call.id, call.name, call.arguments, secrets=self.secrets))

    def _problem(self, name: str, arguments: Any) -> str | None:
        _, prepared = self.toolset.prepare(name, arguments)
        return prepared if isinstance(prepared, str) else None

    def _called(self, model: str, request: Request, kwargs: Mapping[str, Any]) -> Program[tuple[dict[str, Any], Any]]:
        sent, schemas = request.messages, request.schemas
        response = yield Io(
            lambda: llm.complete(model, sent, schemas, **kwargs), lambda: llm.acomplete(model, sent, schemas, **kwargs)
        )
        return llm.message_of(response), response

    def _streamed(
        self, model: str, request: Request, kwargs: Mapping[str, Any], texts: list[str]
    ) -> Program[tuple[dict[str, Any], Any]]:
        sent, schemas = request.messages, request.schemas
        chunks = yield Io(lambda: llm.stream(model, sent, schemas, **kwargs), lambda: llm.astream(model, sent, schemas, **kwargs))
        streamed = llm.StreamedMessage()
        while (chunk := (yield Next(chunks))) is not END:
            text = streamed.add(chunk)
            if text:
                texts.append(text)
                yield Emit(text)
        return streamed.message(), streamed.usage

    def _record(self, calls: Calls, text: str, *, ended: bool) -> Program[int]:
        """Record the turn with ``text`` as its final reply (``ended``: it ended normally)."""
        turn = Turn(user=calls.plan.message, assistant=text, tool_calls=tuple(calls.loop.calls))
        return (yield from self.engine.record_planned(calls.plan, turn, ended=ended, billed=calls.first))

    def _failed(self, error: BaseException, loop: TurnLoop) -> str:
        """Text recorded when the model fails after tools already ran (their effects happened)."""
        log.warning("chat.failed_after_tools", session=self.session_id, tool_calls=len(loop.calls),
                    error=redact_secrets(str(error), self.secrets)[:200])  # fmt: skip
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
