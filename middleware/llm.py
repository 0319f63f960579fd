"""The only module that imports litellm (lazily: it takes seconds to import).

It serves scripted models (``scripted/<name>``) through litellm's custom
provider hook, so offline demos and tests take the real call path; it turns
responses into plain dicts, usage and cost; and it maps provider failures to
``LLMError`` without leaking keys.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from .core.text import redact_secrets
from .exceptions import LLMError
from .scripted import get_responder
from .tokens import get_tokenizer

__all__ = [
    "StreamedMessage",
    "acomplete",
    "astream",
    "complete",
    "cost_of",
    "custom_logger_class",
    "input_price",
    "litellm",
    "message_of",
    "status_of",
    "stream",
    "tools_tokens",
    "usage_of",
]

# Never fetch the price map from the network: use the copy litellm ships.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_setup_lock = threading.Lock()
# Scripted models are priced like this model, so demos show realistic costs.
SCRIPTED_PRICE_AS = "gpt-4o-mini"


def _scripted_handler() -> Any:
    import litellm
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, ModelResponse, Usage

    class ScriptedLLM(CustomLLM):
        """Answers with a registered responder; usage counted like an OpenAI model."""

        def _answer(
            self, model: str, messages: list[Any], optional_params: Mapping[str, Any] | None
        ) -> tuple[dict[str, Any], Usage]:
            tools = (optional_params or {}).get("tools")
            reply = dict(get_responder(model.split("/", 1)[-1])(messages, tools))
            tokenizer = get_tokenizer(SCRIPTED_PRICE_AS)
            prompt = litellm.token_counter(model=SCRIPTED_PRICE_AS, messages=messages, tools=tools)
            completion = tokenizer.count(reply.get("content") or "") + sum(
                tokenizer.count(c["function"]["arguments"]) for c in reply.get("tool_calls") or ()
            )
            return reply, Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

        def _response(self, model: str, messages: list[Any], optional_params: Any) -> ModelResponse:
            reply, usage = self._answer(model, messages, optional_params)
            calls = [
                ChatCompletionMessageToolCall(id=c["id"], type="function", function=Function(**c["function"]))
                for c in reply.get("tool_calls") or ()
            ]
            message = Message(role="assistant", content=reply.get("content"), tool_calls=calls or None)
            choice = Choices(index=0, message=message, finish_reason="tool_calls" if calls else "stop")
            return ModelResponse(model=model, choices=[choice], usage=usage)

        def _chunks(self, model: str, messages: list[Any], optional_params: Any) -> Iterator[dict[str, Any]]:
            reply, usage = self._answer(model, messages, optional_params)
            words = (reply.get("content") or "").split(" ")
            for index, word in enumerate(words):
                text = word if index == len(words) - 1 else word + " "
                if text:
                    yield {"text": text, "tool_use": None, "is_finished": False, "finish_reason": "", "usage": None, "index": 0}
            for index, call in enumerate(reply.get("tool_calls") or ()):
                tool_use = {"id": call["id"], "type": "function", "function": call["function"], "index": index}
                yield {"text": "", "tool_use": tool_use, "is_finished": False, "finish_reason": "", "usage": None, "index": 0}
            finish = "tool_calls" if reply.get("tool_calls") else "stop"
            yield {"text": "", "tool_use": None, "is_finished": True, "finish_reason": finish, "usage": dict(usage), "index": 0}

        def completion(self, model: str, messages: list[Any], *args: Any, optional_params: Any = None, **kwargs: Any) -> Any:
            return self._response(model, messages, optional_params)

        async def acompletion(
            self, model: str, messages: list[Any], *args: Any, optional_params: Any = None, **kwargs: Any
        ) -> Any:
            return self._response(model, messages, optional_params)

        def streaming(self, model: str, messages: list[Any], *args: Any, optional_params: Any = None, **kwargs: Any) -> Any:
            return self._chunks(model, messages, optional_params)

        async def astreaming(
            self, model: str, messages: list[Any], *args: Any, optional_params: Any = None, **kwargs: Any
        ) -> Any:
            for chunk in self._chunks(model, messages, optional_params):
                yield chunk

    return ScriptedLLM()


@functools.cache
def _litellm() -> Any:
    with _setup_lock:
        import litellm as module

        module.suppress_debug_info = True  # no "Provider List" banners on stdout
        if not any(item.get("provider") == "scripted" for item in module.custom_provider_map):
            module.custom_provider_map = [
                *module.custom_provider_map,
                {"provider": "scripted", "custom_handler": _scripted_handler()},
            ]
        return module


def litellm() -> Any:
    """The litellm module, imported and set up on first use."""
    return _litellm()


def custom_logger_class() -> type[Any]:
    """litellm's ``CustomLogger``, the base of callbacks and proxy hooks (for the litellm adapter)."""
    _litellm()
    from litellm.integrations.custom_logger import CustomLogger

    return CustomLogger


def _price_model(model: str) -> str:
    return SCRIPTED_PRICE_AS if model.startswith("scripted/") else model


def _llm_error(model: str, exc: BaseException) -> LLMError:
    # litellm masks keys in its messages; keys, tokens and URL passwords are hidden here too.
    # litellm's messages can carry a whole traceback: keep the first line (the cause is chained).
    first = str(exc).strip().split("\n", 1)[0]
    return LLMError(f"Model {model!r} failed: {type(exc).__name__}: {redact_secrets(first)[:500]}")


def complete(model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any) -> Any:
    lib = _litellm()
    try:
        return lib.completion(model=model, messages=list(messages), tools=list(tools) if tools else None, **kwargs)
    except LLMError:
        raise
    except Exception as exc:
        raise _llm_error(model, exc) from exc


async def acomplete(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any
) -> Any:
    lib = _litellm()
    try:
        return await lib.acompletion(model=model, messages=list(messages), tools=list(tools) if tools else None, **kwargs)
    except LLMError:
        raise
    except Exception as exc:
        raise _llm_error(model, exc) from exc


class StreamedMessage:
    """Accumulates a streamed reply: text deltas and tool-call fragments by index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Any = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; return its new text (may be empty)."""
        if getattr(chunk, "usage", None):
            self.usage = chunk.usage
        if not chunk.choices:
            return ""
        delta = chunk.choices[0].delta
        for part in getattr(delta, "tool_calls", None) or ():
            slot = self.calls.setdefault(part.index or 0, {"id": None, "name": "", "arguments": ""})
            slot["id"] = part.id or slot["id"]
            if part.function is not None:
                slot["name"] += part.function.name or ""
                slot["arguments"] += part.function.arguments or ""
        text = getattr(delta, "content", None) or ""
        self.text.append(text)
        return text

    def message(self) -> dict[str, Any]:
        calls = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for _, c in sorted(self.calls.items())
        ]
        return {"role": "assistant", "content": "".join(self.text) or None, "tool_calls": calls or None}


def stream(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any
) -> Iterator[Any]:
    kwargs.setdefault("stream_options", {"include_usage": True})
    response = complete(model, messages, tools, stream=True, **kwargs)
    try:
        yield from response
    except LLMError:
        raise
    except Exception as exc:
        raise _llm_error(model, exc) from exc


async def astream(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any
) -> AsyncIterator[Any]:
    kwargs.setdefault("stream_options", {"include_usage": True})
    response = await acomplete(model, messages, tools, stream=True, **kwargs)
    try:
        async for chunk in response:
            yield chunk
    except LLMError:
        raise
    except Exception as exc:
        raise _llm_error(model, exc) from exc


def status_of(error: BaseException) -> int:
    """The HTTP status a provider failure came with (litellm's exceptions carry the
    provider's own); 502 when it has none."""
    cause = error.__cause__ if isinstance(error, LLMError) and error.__cause__ is not None else error
    status = getattr(cause, "status_code", None)
    return status if isinstance(status, int) and 400 <= status <= 599 else 502


def message_of(response: Any) -> dict[str, Any]:
    """The first choice's message as an OpenAI-format dict."""
    message = response.choices[0].message
    data = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    calls = [
        {
            "id": c.get("id"),
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": c["function"].get("arguments") or "{}"},
        }
        for c in data.get("tool_calls") or ()
    ]
    return {"role": "assistant", "content": data.get("content"), "tool_calls": calls or None}


def usage_of(response_or_usage: Any) -> dict[str, int | None]:
    """Provider-reported usage: prompt, completion and cached prompt tokens."""
    usage = getattr(response_or_usage, "usage", response_or_usage)
    if usage is None:
        return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
    get = usage.get if isinstance(usage, Mapping) else lambda k, d=None: getattr(usage, k, d)
    details = get("prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    if isinstance(details, Mapping):
        cached = details.get("cached_tokens")
    return {
        "prompt_tokens": get("prompt_tokens", None),
        "completion_tokens": get("completion_tokens", None),
        "cached_tokens": cached,
    }


def _model_info(model: str) -> Mapping[str, Any] | None:
    lib = _litellm()
    name = _price_model(model)
    try:
        return lib.get_model_info(name)  # type: ignore[no-any-return]
    except Exception:
        return lib.model_cost.get(name)  # type: ignore[no-any-return]


def input_price(model: str) -> float | None:
    """USD per prompt token from litellm's local price map, or None when unknown."""
    info = _model_info(model) or {}
    price = info.get("input_cost_per_token")
    return float(price) if price is not None else None


def cost_of(model: str, usage: Mapping[str, int | None]) -> float | None:
    """USD for a call from provider usage and the local price map, or None when unknown."""
    info = _model_info(model) or {}
    prompt_price, completion_price = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if prompt_price is None or completion_price is None or usage.get("prompt_tokens") is None:
        return None
    cached = usage.get("cached_tokens") or 0
    cached_price = info.get("cache_read_input_token_cost") or prompt_price
    prompt = (usage["prompt_tokens"] or 0) - cached
    return float(prompt * prompt_price + cached * cached_price + (usage.get("completion_tokens") or 0) * completion_price)


@functools.lru_cache(maxsize=256)
def _tools_tokens(model: str, tools_json: str) -> int:
    lib = _litellm()
    tools = json.loads(tools_json)
    base = [{"role": "system", "content": "x"}]
    return int(lib.token_counter(model=model, messages=base, tools=tools) - lib.token_counter(model=model, messages=base))


def tools_tokens(model: str, tools: Sequence[Mapping[str, Any]] | None) -> int:
    """Prompt tokens the tool schemas add, as litellm counts them for ``model``'s tokenizer."""
    if not tools:
        return 0
    # Key order matters to the count (litellm formats properties in order): keep it.
    return _tools_tokens(model, json.dumps(list(tools)))
