"""What a provider call carries, and how its failures are told: the call's options with a
repr that masks their secrets, and an ``LLMError`` that quotes no secret of the call (the
provider's exception and the chain it came from retold, masked, without their frames).
Nothing here imports litellm (``middleware.llm`` does the calls)."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .core.text import SECRET_NAME, QuotedTexts, cut_middle, redact_quoted, redact_secrets
from .exceptions import LLMError, RedactedError

__all__ = ["ProviderOptions", "environment_secrets", "provider_error", "sent_texts", "status_code"]


# Names of environment variables (OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY...) that
# hold credentials (arguments' names: text.SECRET_NAME).
_SECRET_VARIABLE = re.compile(r"(?i)(?:^|_)(?:API_?KEY|KEY|KEY_ID|TOKEN|SECRET|PASSWORD|CREDENTIALS?)$")
# Exceptions of a provider's chain retold under an LLMError (litellm's wrapper, the SDK's, the HTTP one...).
_CHAIN_KEPT = 8
_CAUSE_CHARS = 2_000


def environment_secrets() -> set[str]:
    """The values of the environment variables named as credentials (``OPENAI_API_KEY``,
    ``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``...): litellm reads a provider's
    key there, and a tool's error may quote one."""
    return {value for name, value in os.environ.items() if _SECRET_VARIABLE.search(name)}


def _secret_values(value: Any, named: bool) -> Iterator[str]:
    """The strings under secret names in ``value``, nested mappings and lists included."""
    if isinstance(value, str):
        if named:
            yield value
            yield from value.split()[1:]  # "Bearer <token>": the token alone too
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from _secret_values(item, named or bool(SECRET_NAME.search(str(name))))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secret_values(item, named)


class ProviderOptions(Mapping[str, Any]):
    """The keyword arguments of one litellm call (``api_key`` and the like), with a repr that
    masks their secrets.

    Every frame between ``chat()`` and litellm holds the arguments only in this form, so a
    traceback formatter that shows local variables (structlog's and rich's do by default)
    shows no key. Not a dict on purpose: formatters expand dicts item by item.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = dict(values)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return redact_secrets(f"ProviderOptions({self._values!r})", self.secrets())

    def secrets(self) -> set[str]:
        """The credentials this call may use: its secret-named arguments, and the keys in the
        environment that litellm reads for a provider when no argument names one."""
        return set(_secret_values(self._values, named=False)) | environment_secrets()


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not hide the failure it describes
        return f"<unprintable {type(exc).__name__}>"


def _raised_at(exc: BaseException) -> str | None:
    """Where ``exc`` was raised: the innermost frame of its traceback, as ``folder/file.py:line in function``."""
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code, path = tb.tb_frame.f_code, Path(tb.tb_frame.f_code.co_filename)
    file = f"{path.parent.name}/{path.name}" if path.parent.name else path.name
    return f"{file}:{tb.tb_lineno} in {code.co_name}"


def _retold(exc: BaseException, secrets: Collection[str], sent: QuotedTexts) -> RedactedError:
    """``exc`` and the exceptions it came from (as a traceback would show them), each retold as a
    RedactedError with the secrets and what it quotes of the ``sent`` texts masked, and without
    its frames."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < _CHAIN_KEPT and not any(seen is known for known in chain):
        chain.append(seen)
        seen = seen.__cause__ if seen.__cause__ is not None else None if seen.__suppress_context__ else seen.__context__
    retold: RedactedError | None = None
    for original in reversed(chain):
        name, where = f"{type(original).__module__}.{type(original).__qualname__}", _raised_at(original)
        # Cut to a bounded size before the search for quoted text (which indexes every
        # window of it), then to what is kept: the first cut's middle goes with the second's.
        text = cut_middle(redact_secrets(_text_of(original), secrets), 16 * _CAUSE_CHARS)
        text = cut_middle(redact_quoted(text, sent), _CAUSE_CHARS)
        stand_in = RedactedError(f"{name}{f' (raised at {where})' if where else ''}: {text}", type_name=name, location=where)
        stand_in.__cause__, stand_in.__suppress_context__ = retold, True
        retold = stand_in
    assert retold is not None
    return retold


def provider_error(
    model: str, exc: BaseException, options: ProviderOptions, known: Iterable[str] = (), sent: Sequence[str] = ()
) -> LLMError:
    """The LLMError for a failed call, chained to a retelling of ``exc`` (``exc`` itself, its
    frames and their local variables are dropped) that quotes no secret of the call and none
    of the ``sent`` texts, the call's messages newest first (a provider may echo what it
    refused). A model name litellm cannot place gets a hint: the closest of the ``known``
    names, and the form a name takes."""
    secrets = options.secrets()
    # litellm's messages can carry a whole traceback: keep the first line (the cause has the rest).
    first = _text_of(exc).strip().split("\n", 1)[0]
    quoted = QuotedTexts(sent)  # each text's escaped forms made once, for the error and its causes
    told = redact_quoted(redact_secrets(first, secrets)[:2_000], quoted)[:500]
    if "LLM Provider NOT provided" in first:
        told = told.rstrip(".") + "." + _model_hint(model, known)
    name = repr(model) if len(model) <= _MODEL_SHOWN else f"{model[:_MODEL_SHOWN]!r}… ({len(model):,} characters)"
    error = LLMError(f"Model {name} failed: {type(exc).__name__}: {told}",
                     status_code=status_code(exc))  # fmt: skip
    error.__cause__, error.__suppress_context__ = _retold(exc, secrets, quoted), True
    return error


# An error quotes at most this much of a model's name (it may be megabytes from a client).
_MODEL_SHOWN = 120


def _model_hint(model: str, known: Iterable[str]) -> str:
    # A name far longer than any known one is close to none (and comparing it whole is slow).
    close = difflib.get_close_matches(model, list(known), n=1, cutoff=0.8) if len(model) <= 2 * _MODEL_SHOWN else []
    guess = f" Did you mean {close[0]!r}?" if close else ""
    return (f"{guess} A model is a litellm model string, 'provider/model' (e.g. 'openai/gpt-4o-mini', "
            "'anthropic/claude-sonnet-4-5'), or 'scripted/echo' to run offline.")  # fmt: skip


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of a provider's failure (litellm's exceptions carry the provider's own)."""
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) and 400 <= status <= 599 else None


def sent_texts(messages: Sequence[Any]) -> list[str]:
    """The texts of a call's ``messages``, newest first (what ``provider_error`` keeps out of an
    error): each message's content (a string, or its text parts) and its tool calls' arguments."""
    texts = []
    for message in reversed(messages):
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [part["text"] for part in content if isinstance(part, Mapping) and isinstance(part.get("text"), str)]
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
                texts.append(function["arguments"])
    return texts
