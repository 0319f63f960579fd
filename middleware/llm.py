"""The only module that imports litellm (lazily: it takes seconds to import).

It serves scripted models (``scripted/<name>``) through litellm's custom
provider hook, so offline demos and tests take the real call path; it turns
responses into plain dicts, usage and cost; and it maps provider failures to
``LLMError`` without leaking keys: the error and the chain it is raised from are
retold with every credential of the call masked, and the call's arguments are held
in a form whose repr masks them, for tracebacks that show local variables.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

from . import local_embedding
from .core.caching import KINDS, Kind, Rules, rules_for
from .exceptions import LLMError
from .provider import ProviderOptions, provider_error, sent_texts, status_code
from .testing.scripted import get_embedder, get_responder
from .tokens import get_tokenizer

__all__ = [
    "ProviderOptions",
    "StreamedMessage",
    "acomplete",
    "astream",
    "cache_rules",
    "caching_kind",
    "complete",
    "cost_of",
    "custom_logger_class",
    "input_price",
    "litellm",
    "message_of",
    "status_of",
    "stream",
    "tool_sizes",
    "tools_tokens",
    "usage_of",
]

# Never fetch the price map from the network: use the copy litellm ships. litellm reads
# this when it is imported, so it holds only where middleware is imported first.
LOCAL_PRICES = "LITELLM_LOCAL_MODEL_COST_MAP"


def _warn_if_prices_fetched() -> None:
    """litellm imported before middleware, without LITELLM_LOCAL_MODEL_COST_MAP, has tried
    to fetch its price map from the network (warnings, or seconds of retries offline): say
    so once, and how to keep it off the network whatever the import order."""
    if "litellm" not in sys.modules or os.environ.get(LOCAL_PRICES, "").lower() == "true":
        return
    warnings.warn(
        "litellm was imported before middleware, so it loaded its price map from the network (or tried to). "
        f"To keep it offline whatever the import order, set {LOCAL_PRICES}=True in the environment "
        "(or import middleware first).",
        stacklevel=3,
    )


_warn_if_prices_fetched()
os.environ.setdefault(LOCAL_PRICES, "True")


def _known_models() -> Iterable[str]:
    """The model names litellm's (local) price map holds: what a mistyped name is matched against."""
    import litellm

    return litellm.model_cost.keys()


_setup_lock = threading.Lock()
# Scripted models are priced like this model, so demos show realistic costs.
SCRIPTED_PRICE_AS = "gpt-4o-mini"


def _scripted_handler() -> Any:
    import litellm
    from litellm.exceptions import NotFoundError
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import ChatCompletionMessageToolCall, Choices, Function, Message, ModelResponse, Usage

    class ScriptedLLM(CustomLLM):
        """Answers with a registered responder; usage counted like an OpenAI model."""

        def _answer(
            self, model: str, messages: list[Any], optional_params: Mapping[str, Any] | None
        ) -> tuple[dict[str, Any], Usage]:
            tools = (optional_params or {}).get("tools")
            try:
                responder = get_responder(model.split("/", 1)[-1])
            except LLMError as exc:  # a model that does not exist, as a provider says it: 404, not retried
                raise NotFoundError(str(exc), model=model, llm_provider="scripted") from None
            reply = dict(responder(messages, tools))
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

        def embedding(self, model: str, input: list[Any], model_response: Any, *args: Any, **kwargs: Any) -> Any:
            vectors = get_embedder(model.split("/", 1)[-1])([str(text) for text in input])
            tokens = sum(get_tokenizer(SCRIPTED_PRICE_AS).count(str(text)) for text in input)
            model_response.model = model
            model_response.data = [{"object": "embedding", "index": i, "embedding": list(v)} for i, v in enumerate(vectors)]
            model_response.usage = Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens)
            return model_response

        async def aembedding(self, model: str, input: list[Any], model_response: Any, *args: Any, **kwargs: Any) -> Any:
            return self.embedding(model, input, model_response)

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


# Each call below raises its LLMError outside the `except` block that made it, so the provider's
# exception does not ride along as the error's __context__ either.


def complete(model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any) -> Any:
    options = ProviderOptions(kwargs)
    del kwargs  # held from here on only with its secrets masked (see ProviderOptions)
    lib = _litellm()
    try:
        return lib.completion(model=model, messages=list(messages), tools=list(tools) if tools else None, **options)
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), sent_texts(messages))
    raise error


async def acomplete(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any
) -> Any:
    options = ProviderOptions(kwargs)
    del kwargs  # held from here on only with its secrets masked (see ProviderOptions)
    lib = _litellm()
    try:
        return await lib.acompletion(model=model, messages=list(messages), tools=list(tools) if tools else None, **options)
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), sent_texts(messages))
    raise error


def _vectors(response: Any) -> list[list[float]]:
    data = response["data"] if isinstance(response, Mapping) else response.data
    ordered = sorted(data, key=lambda item: item["index"] if isinstance(item, Mapping) else item.index)
    # Numbers, checked here: a reply that holds anything else fails as the call's error.
    return [[float(x) for x in (item["embedding"] if isinstance(item, Mapping) else item.embedding)] for item in ordered]


def embed(model: str, texts: Sequence[str], **kwargs: Any) -> list[list[float]]:
    """One vector per text from any litellm embedding model, or a local one
    (``local/<name>``, see ``middleware.local_embedding``); LLMError when it fails."""
    if local_embedding.is_local(model):
        return local_embedding.embed(model, texts)
    options = ProviderOptions(kwargs)
    del kwargs
    lib = _litellm()
    try:
        return _vectors(lib.embedding(model=model, input=list(texts), **options))
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), list(reversed(texts)))
    raise error


async def aembed(model: str, texts: Sequence[str], **kwargs: Any) -> list[list[float]]:
    if local_embedding.is_local(model):  # on this machine's CPU: off the event loop
        return await asyncio.to_thread(local_embedding.embed, model, texts)
    options = ProviderOptions(kwargs)
    del kwargs
    lib = _litellm()
    try:
        return _vectors(await lib.aembedding(model=model, input=list(texts), **options))
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), list(reversed(texts)))
    raise error


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
    options = ProviderOptions({"stream_options": {"include_usage": True}, **kwargs})
    del kwargs  # held from here on only with its secrets masked (see ProviderOptions)
    response = complete(model, messages, tools, stream=True, **options)
    try:
        yield from response
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), sent_texts(messages))
    else:
        return
    raise error


async def astream(
    model: str, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, **kwargs: Any
) -> AsyncIterator[Any]:
    options = ProviderOptions({"stream_options": {"include_usage": True}, **kwargs})
    del kwargs  # held from here on only with its secrets masked (see ProviderOptions)
    response = await acomplete(model, messages, tools, stream=True, **options)
    try:
        async for chunk in response:
            yield chunk
    except Exception as exc:
        error = provider_error(model, exc, options, _known_models(), sent_texts(messages))
    else:
        return
    raise error


def status_of(error: BaseException) -> int:
    """The HTTP status a provider failure came with (an LLMError's, or a litellm exception's
    own); 502 when it has none."""
    return status_code(error) or 502


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
    """Provider-reported usage: prompt, completion and cached prompt tokens (read from the
    cache), and for Anthropic the tokens written to it (``cache_write_tokens``), as litellm
    reports them."""
    usage = getattr(response_or_usage, "usage", response_or_usage)
    empty: dict[str, int | None] = {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
    if usage is None:
        return empty
    get = usage.get if isinstance(usage, Mapping) else lambda k, d=None: getattr(usage, k, d)
    details = get("prompt_tokens_details", None)
    detail = details.get if isinstance(details, Mapping) else lambda k, d=None: getattr(details, k, d)
    reported = {
        "prompt_tokens": get("prompt_tokens", None),
        "completion_tokens": get("completion_tokens", None),
        "cached_tokens": detail("cached_tokens", None) if details is not None else None,
    }
    written = detail("cache_write_tokens", None) if details is not None else None
    if isinstance(written, int) and written:
        reported["cache_write_tokens"] = written
    return {key: value if isinstance(value, int) or value is None else None for key, value in reported.items()}


@functools.lru_cache(maxsize=256)  # read for every call's usage line; litellm's lookup raises for unknown models
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
    cached, written = usage.get("cached_tokens") or 0, usage.get("cache_write_tokens") or 0
    cached_price = info.get("cache_read_input_token_cost") or prompt_price
    write_price = info.get("cache_creation_input_token_cost") or prompt_price
    prompt = (usage["prompt_tokens"] or 0) - cached - written
    return float(prompt * prompt_price + cached * cached_price + written * write_price
                 + (usage.get("completion_tokens") or 0) * completion_price)  # fmt: skip


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


# litellm counts a list of tool schemas as one namespace: each schema alone costs this many
# tokens more than it adds to a list (measured with litellm 1.106; used only to split a
# list's exact count among its schemas, for the cache figures).
_NAMESPACE_TOKENS = 12


def tool_sizes(model: str, tools: Sequence[Mapping[str, Any]] | None) -> list[int]:
    """What each schema adds to the prompt, summing to ``tools_tokens(model, tools)``: the
    first carries the namespace's own tokens."""
    if not tools:
        return []
    total = tools_tokens(model, tools)
    sizes = [max(tools_tokens(model, [tool]) - _NAMESPACE_TOKENS, 1) for tool in tools]
    sizes[0] += total - sum(sizes)
    return sizes


def _provider(model: str) -> str:
    if model.startswith("scripted/"):
        return "openai"  # priced like gpt-4o-mini
    try:
        return str(_litellm().get_llm_provider(model)[1])
    except Exception:
        return model.split("/", 1)[0] if "/" in model else ""


def caching_kind(model: str) -> Kind:
    """Whose prompt-caching rules apply to ``model``: OpenAI (and Azure OpenAI), Anthropic
    (Claude models, wherever they are served), Gemini (Google AI and Vertex), else none."""
    provider, name = _provider(model), model.rsplit("/", 1)[-1].lower()
    if "claude" in name or provider == "anthropic":
        return "anthropic"
    if "gemini" in name or provider == "gemini":
        return "gemini"
    if provider in {"openai", "azure", "text-completion-openai"}:
        return "openai"
    return "none"


# A Claude model's family and version in its name: claude-sonnet-4-5, claude-haiku-4-5-20251001, claude-opus-5.
_CLAUDE = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d+)(?:[-.](\d)(?!\d))?")


@functools.lru_cache(maxsize=256)
def expands_tool_references(model: str, price_as: str | None = None) -> bool:
    """Whether ``model``'s API expands a tool result's tool references into the deferred
    tools they name: Anthropic's own API (litellm's ``anthropic`` route, which passes them
    on) for Claude 4.5 and later, which run its tool search. The model called decides, not
    the one it is priced as (an alias or an OpenAI-compatible proxy gets none: litellm drops
    them there), but for a scripted model (``middleware.testing``), which stands for the
    model it is priced as (``price_as``)."""
    if model.startswith("scripted/"):
        model = price_as or ""
    if not model or _provider(model) != "anthropic":
        return False
    found = _CLAUDE.search(model.rsplit("/", 1)[-1].lower())
    return found is not None and (int(found[1]), int(found[2] or 0)) >= (4, 5)


@functools.lru_cache(maxsize=256)
def cache_rules(model: str, kind: str = "auto") -> Rules:
    """The caching rules and prices for ``model`` (``kind`` forces a provider's rules)."""
    chosen: Kind = caching_kind(model) if kind == "auto" else next(k for k in KINDS if k == kind)
    return rules_for(chosen, _model_info(model))
