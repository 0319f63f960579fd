"""Full turns through litellm, and wrapping existing chatbots.

``chat`` composes the prompt, calls the model, runs the tool loop (the model's
calls are executed with the given Python callables, results go back within the
turn), records the turn with its tool calls and writes one usage line per LLM
call. ``wrap`` does the same around a chatbot function that calls its LLM itself.
The session manager exposes these as ``chat``, ``achat`` and ``wrap``.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import llm
from .events import log
from .exceptions import LLMError
from .state import Prompt, ToolCall
from .text import CUT_MARKER, redact_secrets
from .tools import ToolOutcome, Toolset, _succeeded, is_async_callable
from .turnloop import TurnLoop
from .usage import usage_record

if TYPE_CHECKING:
    from .manager import _ManagerBase

__all__ = ["ChatResult", "ChatStream", "interpret_reply"]


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


async def _maybe(value: Any) -> Any:
    """Await store calls of the async manager; pass the sync manager's values through."""
    return await value if inspect.isawaitable(value) else value


@dataclass
class _Turn:
    """What one chat turn carries between its LLM calls; the drivers below only do I/O."""

    manager: _ManagerBase
    session_id: str
    user_message: str
    model: str
    toolset: Toolset
    kind: str
    schemas: list[dict[str, Any]] | None  # sent on every call
    tools_tokens: int  # what the schemas add to every call
    prompt: Prompt = field(init=False)
    loop: TurnLoop = field(init=False)
    lines: list[dict[str, Any]] = field(default_factory=list)

    def begin(self, prompt: Prompt) -> None:
        self.prompt = prompt
        self.loop = TurnLoop(prompt.messages, max_rounds=self.manager.config.max_tool_rounds)

    def took(self, sent: Sequence[Mapping[str, Any]], reply: Mapping[str, Any], usage: Any, started: float) -> list[Any]:
        """The model's reply to ``sent``, logged: the tool calls to run now, or [] when done."""
        pending = self.loop.take(reply)
        self.log_call(sent, reply, usage, time.perf_counter() - started)
        return pending

    def gave(self, outcomes: Iterable[ToolOutcome]) -> None:
        """The tools' outcomes, then the next call fitted to the budget."""
        self.loop.give(outcomes)
        self.fit_loop()

    def record(self, assistant: str | None = None) -> Any:
        """Record the turn (an awaitable under the async manager); ``assistant`` replaces
        the final text when the turn did not end normally."""
        text = self.loop.final or "" if assistant is None else assistant
        return self.manager.record_turn(self.session_id, user=self.user_message, assistant=text, tool_calls=self.loop.calls)

    def fit_loop(self) -> None:
        """Keep the next call within the budget: cut the largest tool results in the middle."""
        budget = self.manager.budget(self.model)
        if budget is None:
            return
        tokenizer = self.manager.tokenizer
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

    def log_call(self, sent: Sequence[Mapping[str, Any]], reply: Mapping[str, Any], usage: Any, latency: float) -> None:
        tokenizer = self.manager.tokenizer
        provider = llm.usage_of(usage)
        record = usage_record(
            kind=self.kind,
            session=self.session_id,
            turn=self.prompt.turn,
            step=len(self.lines),
            model=self.model,
            prompt=self.prompt,
            loop_tokens=sum(tokenizer.count_message(m) for m in sent[len(self.prompt.messages) :]),
            tools_tokens=self.tools_tokens,
            provider=provider,
            cost_usd=llm.cost_of(self.model, provider),
            price_per_token=llm.input_price(self.model),
            latency_ms=latency * 1000,
            tool_calls=len(reply.get("tool_calls") or ()),
        )
        content = {"messages": list(sent), "reply": dict(reply)}
        self.lines.append(self.manager.usage_log.write(record, content=content))

    def result(self, turn: int) -> ChatResult:
        return ChatResult(
            text=self.loop.final or "",
            tool_calls=tuple(self.loop.calls),
            turn=turn,
            model=self.model,
            prompt=self.prompt,
            calls=tuple(self.lines),
            stopped_early=self.loop.stopped_early,
        )

    def failed(self, error: BaseException) -> str:
        """Text recorded when the model fails after tools already ran (their effects happened)."""
        log.warning("chat.failed_after_tools", session=self.session_id, tool_calls=len(self.loop.calls), error=redact_secrets(str(error))[:200])
        return f"(the model failed after running tools: {type(error).__name__})"


def _cut_reply(texts: list[str]) -> str:
    """What a stream said before it was abandoned, marked as cut, so nothing is lost."""
    partial = "".join(texts).strip()
    return f"{partial} (cut: the stream ended early)" if partial else "(cut: the stream ended early)"


def _start(manager: _ManagerBase, session_id: Any, user_message: Any, model: str | None, tools: Any, kind: str) -> _Turn:
    """A turn with its session id, model and tools checked; ``begin`` it with the prompt."""
    toolset = manager.toolset(tools)
    schemas = toolset.schemas or None
    return _Turn(
        manager,
        manager._session_id(session_id),
        user_message,
        model or manager.config.model,
        toolset,
        kind,
        schemas,
        llm.tools_tokens(manager.config.tokens.model, schemas),
    )


def _prepare(turn: _Turn) -> Any:
    """The manager's prepare() for this turn (an awaitable under the async manager)."""
    return turn.manager.prepare(turn.session_id, turn.user_message, model=turn.model, extra_tokens=turn.tools_tokens)


# --- synchronous -------------------------------------------------------------


def run_chat(manager: Any, session_id: Any, user_message: Any, *, model: str | None, tools: Any, kwargs: dict[str, Any]) -> ChatResult:
    turn = _start(manager, session_id, user_message, model, tools, "chat")
    turn.begin(_prepare(turn))
    try:
        while not turn.loop.done:
            sent, started = list(turn.loop.messages), time.perf_counter()
            response = llm.complete(turn.model, sent, turn.schemas, **kwargs)
            pending = turn.took(sent, llm.message_of(response), response, started)
            if pending:
                turn.gave(turn.toolset.run(p.id, p.name, p.arguments) for p in pending)
    except LLMError as error:
        if turn.loop.calls:
            turn.record(turn.failed(error))
        raise
    return turn.result(turn.record())


class ChatStream:
    """Iterate for the reply's text chunks; the turn is recorded when the stream ends.

    ``result`` holds the :class:`ChatResult` afterwards. If iteration stops early,
    the text received so far is recorded (marked as cut) when the stream is closed.
    """

    def __init__(self, manager: Any, session_id: Any, user_message: Any, model: str | None, tools: Any, kwargs: dict[str, Any]) -> None:
        self._turn = _start(manager, session_id, user_message, model, tools, "stream")
        self._turn.begin(_prepare(self._turn))
        self._kwargs = kwargs
        self.result: ChatResult | None = None
        self._iterator = self._run()

    def __iter__(self) -> Iterator[str]:
        return self._iterator

    def __next__(self) -> str:
        return next(self._iterator)

    def close(self) -> None:
        self._iterator.close()

    def _run(self) -> Iterator[str]:
        turn, texts, recorded = self._turn, [], False
        try:
            while not turn.loop.done:
                sent, started = list(turn.loop.messages), time.perf_counter()
                streamed = llm.StreamedMessage()
                for chunk in llm.stream(turn.model, sent, turn.schemas, **self._kwargs):
                    text = streamed.add(chunk)
                    if text:
                        texts.append(text)
                        yield text
                pending = turn.took(sent, streamed.message(), streamed.usage, started)
                if pending:
                    turn.gave(turn.toolset.run(p.id, p.name, p.arguments) for p in pending)
            number = turn.record()
            recorded = True
            self.result = turn.result(number)
        finally:
            if not recorded and (texts or turn.loop.calls):
                turn.record(_cut_reply(texts))


# --- asynchronous ------------------------------------------------------------


async def arun_chat(manager: Any, session_id: Any, user_message: Any, *, model: str | None, tools: Any, kwargs: dict[str, Any]) -> ChatResult:
    turn = _start(manager, session_id, user_message, model, tools, "chat")
    turn.begin(await _maybe(_prepare(turn)))
    try:
        while not turn.loop.done:
            sent, started = list(turn.loop.messages), time.perf_counter()
            response = await llm.acomplete(turn.model, sent, turn.schemas, **kwargs)
            pending = turn.took(sent, llm.message_of(response), response, started)
            if pending:
                turn.gave([await turn.toolset.arun(p.id, p.name, p.arguments) for p in pending])
    except LLMError as error:
        if turn.loop.calls:
            await _maybe(turn.record(turn.failed(error)))
        raise
    return turn.result(await _maybe(turn.record()))


class AsyncChatStream:
    """The async twin of :class:`ChatStream`: ``async for chunk in stream``."""

    def __init__(self, manager: Any, session_id: Any, user_message: Any, model: str | None, tools: Any, kwargs: dict[str, Any]) -> None:
        self._args = (manager, session_id, user_message, model, tools, kwargs)
        self.result: ChatResult | None = None
        self._iterator = self._run()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._iterator

    async def __anext__(self) -> str:
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        await self._iterator.aclose()

    async def _run(self) -> AsyncIterator[str]:
        manager, session_id, user_message, model, tools, kwargs = self._args
        turn = _start(manager, session_id, user_message, model, tools, "stream")
        turn.begin(await _maybe(_prepare(turn)))
        texts: list[str] = []
        recorded = False
        try:
            while not turn.loop.done:
                sent, started = list(turn.loop.messages), time.perf_counter()
                streamed = llm.StreamedMessage()
                async for chunk in llm.astream(turn.model, sent, turn.schemas, **kwargs):
                    text = streamed.add(chunk)
                    if text:
                        texts.append(text)
                        yield text
                pending = turn.took(sent, streamed.message(), streamed.usage, started)
                if pending:
                    turn.gave([await turn.toolset.arun(p.id, p.name, p.arguments) for p in pending])
            number = await _maybe(turn.record())
            recorded = True
            self.result = turn.result(number)
        finally:
            if not recorded and (texts or turn.loop.calls):
                await _maybe(turn.record(_cut_reply(texts)))


# --- wrapping an existing chatbot -------------------------------------------


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    if hasattr(message, "model_dump"):
        return message.model_dump()  # type: ignore[no-any-return]
    raise LLMError(f"The chatbot returned a message of type {type(message).__name__}; expected a dict.")


def _calls_of(message: Mapping[str, Any], results: Mapping[str, Any]) -> list[ToolCall]:
    calls = []
    for call in message.get("tool_calls") or ():
        call = _as_dict(call)
        result = results.get(call.get("id") or "")
        calls.append(ToolCall.from_openai(call, result=result, ok=_succeeded(result)))
    return calls


def _tool_results(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    results = {}
    for message in messages:
        if message.get("role") == "tool":
            content = message.get("content")
            try:
                results[message.get("tool_call_id") or ""] = json.loads(content) if isinstance(content, str) else content
            except ValueError:
                results[message.get("tool_call_id") or ""] = content
    return results


def interpret_reply(reply: Any) -> tuple[str, list[ToolCall], Any, str | None]:
    """(final text, tool calls, provider usage, model) from whatever a chatbot returns:
    a string, an OpenAI-style message dict, a list of the turn's new messages
    (assistant tool calls, tool results, final answer) or a litellm/OpenAI response."""
    if isinstance(reply, str):
        return reply, [], None, None
    if hasattr(reply, "choices"):
        message = _as_dict(reply.choices[0].message)
        return message.get("content") or "", _calls_of(message, {}), getattr(reply, "usage", None), getattr(reply, "model", None)
    if isinstance(reply, Mapping):
        return reply.get("content") or "", _calls_of(reply, {}), reply.get("usage"), None
    if isinstance(reply, Sequence):
        messages = [_as_dict(m) for m in reply]
        results = _tool_results(messages)
        calls = [c for m in messages if m.get("role") == "assistant" for c in _calls_of(m, results)]
        finals = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("content")]
        return (finals[-1] if finals else ""), calls, None, None
    raise LLMError(
        f"The chatbot returned a {type(reply).__name__}; expected a string, a message dict, "
        "a list of messages or a litellm/OpenAI response."
    )


def _wrapped_line(manager: Any, session_id: str, prompt: Prompt, reply: Any, latency: float) -> tuple[str, list[ToolCall]]:
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
    manager.usage_log.write(record, content={"messages": prompt.messages, "reply": text})
    return text, calls


def wrap(manager: Any, fn: Callable[[list[dict[str, str]]], Any]) -> Callable[[str, str], Any]:
    """``(session_id, user_message) -> reply`` around ``fn(messages) -> reply``.

    The wrapper is async when ``fn`` is async or the manager is (``AsyncSessionManager``).
    """
    if is_async_callable(fn) or manager.is_async:

        async def wrapped_async(session_id: str, user_message: str) -> Any:
            session_id = manager._session_id(session_id)
            prompt = await _maybe(manager.prepare(session_id, user_message))
            started = time.perf_counter()
            reply = await _maybe(fn(prompt.messages))
            text, calls = _wrapped_line(manager, session_id, prompt, reply, time.perf_counter() - started)
            await _maybe(manager.record_turn(session_id, user=user_message, assistant=text, tool_calls=calls))
            return reply

        return _named(wrapped_async, fn)

    def wrapped(session_id: str, user_message: str) -> Any:
        session_id = manager._session_id(session_id)
        prompt = manager.prepare(session_id, user_message)
        started = time.perf_counter()
        reply = fn(prompt.messages)
        if inspect.isawaitable(reply):
            raise LLMError("The wrapped chatbot returned an awaitable: wrap an async function (async def) instead.")
        text, calls = _wrapped_line(manager, session_id, prompt, reply, time.perf_counter() - started)
        manager.record_turn(session_id, user=user_message, assistant=text, tool_calls=calls)
        return reply

    return _named(wrapped, fn)


def _named(wrapper: Callable[..., Any], fn: Any) -> Callable[..., Any]:
    wrapper.__name__ = getattr(fn, "__name__", "chatbot")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
