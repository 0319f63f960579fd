"""The OpenAI wire format of the endpoint: reading a chat completions request, the session it
names, error bodies and server-sent events. No I/O.

Errors name the parameter and its bad value cut short, never message content or keys.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..core.conversation import messages_kind
from ..core.state import MAX_MODEL, MAX_TOOL_NAME, TOOL_NAME_EXPECTED, is_tool_name
from ..core.text import JSON_DEPTH, json_depth
from ..exceptions import InvalidRequestError

__all__ = ["Request", "error_body", "read_request", "retry_of", "session_of", "sse"]

SESSION_HEADER = "x-session-id"
# What a request may carry beside model/messages/tools/stream, forwarded to the model as it is.
FORWARDED = frozenset({
    "temperature", "top_p", "n", "stop", "max_tokens", "max_completion_tokens", "presence_penalty", "frequency_penalty",
    "logit_bias", "logprobs", "top_logprobs", "seed", "response_format", "tool_choice", "parallel_tool_calls", "user",
    "reasoning_effort", "service_tier", "modalities", "prediction", "audio", "web_search_options", "verbosity",
})  # fmt: skip
# Read here and not forwarded: the session's metadata, our own stream options.
KNOWN = FORWARDED | {"model", "messages", "tools", "stream", "stream_options", "metadata", "store"}
_SHOWN = 40
# MAX_MODEL: a longer model name is refused before anything (litellm, an error's hint, a log
# line) reads it whole.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
          408: "timeout_error", 409: "conflict_error", 413: "invalid_request_error", 422: "invalid_request_error",
          429: "rate_limit_error"}  # fmt: skip


def shown(value: Any) -> str:
    """A bad value as an error message quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(frozen=True, slots=True)
class Request:
    """A chat completions request, checked."""

    model: str  # as the client named it
    messages: list[Any]
    tools: list[dict[str, Any]] | None
    stream: bool
    include_usage: bool
    options: dict[str, Any]  # forwarded to the model as they are
    session: str | None  # the session it names (None: passed through untouched)
    session_from: str  # where it named it: "X-Session-Id", "user" or "metadata.session_id"
    key: str = ""  # what a retry of it is known by (see ``retry_of``)
    retry: bool = False  # it may retry an earlier attempt: look that attempt up first
    keyed: bool = False  # it carries an idempotency key


def _parse(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise InvalidRequestError("The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise InvalidRequestError(f"The request body is a JSON {type(data).__name__}; expected an object.")
    for key, value in data.items():  # the body is an object: its values may nest one level less
        if json_depth(value, JSON_DEPTH - 1) > JSON_DEPTH - 1:
            raise InvalidRequestError(f"{shown(key)[1:-1]!r} nests deeper than {JSON_DEPTH} levels; expected flatter JSON.",
                                      param=str(key)[:_SHOWN])  # fmt: skip
    return data


def _tools(data: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = data.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequestError(f"'tools' has a {type(tools).__name__}; expected an array.", param="tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or tool.get("type") != "function":
            raise InvalidRequestError(
                f"tools[{index}] needs type 'function' and a function with a 'name'.", param=f"tools[{index}]"
            )
        _check_name(function["name"], f"tools[{index}].function.name")
    return tools or None


def _check_name(name: str, param: str) -> None:
    """A tool's name within MAX_TOOL_NAME characters (a call of a longer one could not be
    recorded: the turn would be lost), of the characters every provider accepts (the name is
    listed in the disclosure loader's index, whose schema is sent where the tool's is not)."""
    if len(name) > MAX_TOOL_NAME:
        raise InvalidRequestError(f"{param!r} has {len(name):,} characters; expected at most {MAX_TOOL_NAME}.", param=param)
    if not is_tool_name(name):
        raise InvalidRequestError(f"{param!r} has value {shown(name)}; expected {TOOL_NAME_EXPECTED}.", param=param)


def _tool_choice(data: Mapping[str, Any]) -> None:
    """A ``tool_choice`` that names a function names it with a string of a tool's length."""
    choice = data.get("tool_choice")
    if not isinstance(choice, dict) or "function" not in choice:
        return
    function = choice["function"]
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidRequestError(
            f"'tool_choice.function' has value {shown(function)}; expected an object with a 'name'.", param="tool_choice"
        )
    _check_name(function["name"], "tool_choice.function.name")


def read_request(body: bytes, headers: Mapping[str, str]) -> Request:
    """The request in ``body``; InvalidRequestError naming the first bad parameter."""
    data = _parse(body)
    unknown = sorted(set(data) - KNOWN)
    if unknown:
        raise InvalidRequestError(f"Unrecognized request argument supplied: {shown(unknown[0])[1:-1]}", param=unknown[0][:_SHOWN])
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise InvalidRequestError(f"'model' has value {shown(model)}; expected a model name.", param="model")
    if len(model) > MAX_MODEL:
        raise InvalidRequestError(f"'model' has {len(model):,} characters; expected at most {MAX_MODEL}.", param="model")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError(f"{messages_kind(messages)}; expected a non-empty array of messages.", param="messages")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequestError(f"'stream' has value {shown(stream)}; expected true or false.", param="stream")
    stream_options = data.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise InvalidRequestError(
            f"'stream_options' has value {shown(stream_options)}; expected an object.", param="stream_options"
        )
    _tool_choice(data)
    options = {key: value for key, value in data.items() if key in FORWARDED}
    session, where = session_of(headers, data)
    key, retry = retry_of(body, headers) if session is not None else ("", False)  # passed through: no turn to retry
    keyed = session is not None and bool(headers.get(IDEMPOTENCY_HEADER))
    return Request(model=model, messages=data["messages"], tools=_tools(data), stream=stream,
                   include_usage=stream_options.get("include_usage") is True, options=options, session=session,
                   session_from=where, key=key, retry=retry, keyed=keyed)  # fmt: skip


IDEMPOTENCY_HEADER = "idempotency-key"
RETRY_HEADER = "x-stainless-retry-count"  # sent by OpenAI's SDKs on every request: 0, then 1, 2, … on retries


def retry_of(body: bytes, headers: Mapping[str, str]) -> tuple[str, bool]:
    """What a request is known by when its client sends it again (a hex digest of its
    ``Idempotency-Key`` header and its body, else of its body), and whether it may be such a
    retry: it carries an idempotency key, or OpenAI's SDKs count it a retry. A request sent
    twice without either is two turns (a user may well say the same thing twice); a key
    given again with another body names another request."""
    given = headers.get(IDEMPOTENCY_HEADER)
    if given:
        named = b"key:" + given.encode("latin-1", "replace") + b"\0" + body
        return hashlib.blake2b(named, digest_size=16).hexdigest(), True
    count = headers.get(RETRY_HEADER, "").strip()
    retry = count.isascii() and count.isdigit() and int(count[:6]) > 0
    return hashlib.blake2b(b"body:" + body, digest_size=16).hexdigest(), retry


def session_of(headers: Mapping[str, str], data: Mapping[str, Any]) -> tuple[str | None, str]:
    """The session a request names, and where: the X-Session-Id header, else the ``user``
    field, else ``metadata.session_id``; (None, "") when it names none. A ``user`` or
    ``metadata.session_id`` of another type is refused, whichever names the session (else
    the request could go on without the memory it asked for)."""
    user, metadata = data.get("user"), data.get("metadata")
    if user is not None and not isinstance(user, str):
        raise InvalidRequestError(f"'user' has a {type(user).__name__[:40]}; expected a string (the session id).", param="user")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRequestError(f"'metadata' has a {type(metadata).__name__[:40]}; expected an object.", param="metadata")
    named = (metadata or {}).get("session_id")
    if named is not None and not isinstance(named, str):
        raise InvalidRequestError(f"'metadata.session_id' has a {type(named).__name__[:40]}; expected a string (the session id).",
                                  param="metadata.session_id")  # fmt: skip
    header = headers.get(SESSION_HEADER)
    if header is not None:
        try:  # HTTP servers read header bytes as Latin-1; clients send UTF-8
            return header.encode("latin-1").decode("utf-8"), "X-Session-Id"
        except UnicodeError:
            raise InvalidRequestError("The X-Session-Id header is not UTF-8 text.", param="X-Session-Id") from None
    if user:
        return user, "user"
    return (named, "metadata.session_id") if named is not None else (None, "")


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One server-sent event."""
    payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
    return b"data: " + payload + b"\n\n"
