"""Python callables as LLM tools: JSON schemas from signatures and docstrings, and
safe execution (validated arguments; a failing tool becomes an error result).

    def navigate_to_node(node: str, userinterface_name: str) -> dict:
        '''Walk the shortest path to a screen.

        Args:
            node: the screen to reach, e.g. "shop".
            userinterface_name: the UI, e.g. "google_tv".
        '''

    toolset = Toolset([navigate_to_node])      # or Tool(fn, schema={...}) for an explicit schema
    toolset.schemas                             # OpenAI "tools" list for any chat API
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .core.disclosure import Companions, DisclosedTools
from .core.effects import Inline, Io, Program
from .core.replies import decoded, succeeded
from .core.state import ToolCall, check_tool_name, recorded_name, to_text
from .core.text import one_line, parse_json, quoted, redact_secrets
from .core.turnloop import ToolOutcome
from .exceptions import ConfigError, InvalidToolCallError
from .provider import environment_secrets

__all__ = ["Tool", "ToolList", "Toolset", "as_tools", "import_tool", "is_async_callable", "origin_of", "tool_schema"]

_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.IGNORECASE)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def _docstring_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The description (text before an ``Args:`` section) and per-argument descriptions.

    Google style: ``name: text`` lines under ``Args:``; deeper-indented lines continue
    the previous argument; a blank line ends the section.
    """
    description: list[str] = []
    params: dict[str, str] = {}
    lines = iter((inspect.getdoc(fn) or "").splitlines())
    for line in lines:
        if _ARGS_HEADER.match(line):
            break
        description.append(line.strip())
    indent: int | None = None
    current = ""
    for line in lines:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line)
        if match and (indent is None or depth <= indent):
            indent, current = depth, match.group(1).lstrip("*")
            params[current] = match.group(2).strip()
        elif current:
            params[current] = f"{params[current]} {line.strip()}"
    return " ".join(" ".join(description).split()), params


def _defined(fn: Callable[..., Any]) -> Any:
    """Where a callable's annotations and docstring live: the function itself, the function a
    ``functools.partial`` wraps, or the ``__call__`` of an object that is called."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn if inspect.isroutine(fn) or isinstance(fn, type) else type(fn).__call__


def _name_of(fn: Callable[..., Any], name: str | None) -> str:
    """The tool's name: ``name``, else the function's own; a callable without one (a partial,
    an object) must be given one."""
    found = name or getattr(fn, "__name__", None)
    if not isinstance(found, str) or not found:
        raise InvalidToolCallError(f"A tool of type {type(fn).__name__[:40]} has no __name__; give it one: Tool(fn, name='...').")
    return found


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    hints = inspect.get_annotations(_defined(fn), eval_str=True)
    _, param_docs = _docstring_parts(_defined(fn))
    fields: dict[str, Any] = {}
    for argument, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(argument, Any)
        default = ... if param.default is param.empty else param.default
        fields[argument] = (annotation, Field(default, description=param_docs.get(argument) or None))
    return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _compact(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop what costs tokens on every call and tells the model nothing: titles,
    ``additionalProperties`` (arguments are validated here anyway), ``default: null``,
    and the ``anyOf [T, null]`` of optional parameters (they are simply not required)."""
    schema.pop("title", None)
    schema.pop("additionalProperties", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        options = prop.get("anyOf")
        if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
            prop.update(next(o for o in options if o != {"type": "null"}))
            del prop["anyOf"]
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    return schema


def tool_schema(fn: Callable[..., Any], *, name: str | None = None) -> dict[str, Any]:
    """The OpenAI tool schema of ``fn``, from its signature, type hints and docstring; its
    name (``name``, else the function's own) must be one a provider accepts."""
    name = check_tool_name(_name_of(fn, name), "A tool's name")
    description, _ = _docstring_parts(_defined(fn))
    parameters = _compact(_arguments_model(fn, name).model_json_schema())
    parameters.setdefault("properties", {})
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or name.replace("_", " "),
            "parameters": parameters,
        },
    }


Observe = str | Callable[[Mapping[str, Any], Any], str | None]


@dataclass(frozen=True, slots=True)
class Tool:
    """A callable with its schema; the schema is derived when not given.

    ``observe`` renders a successful call's result as one short line (a self-rendering
    observation), which the summary uses as the turn's action and the archive keeps for
    recall: a template over the arguments, the result's top-level fields and ``{result}``
    (``"Read {path}: {result}"``), or a callable ``(arguments, result) -> str``.
    """

    fn: Callable[..., Any]
    schema: Mapping[str, Any] | None = None
    name: str = ""
    observe: Observe | None = None
    _model: type[BaseModel] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidToolCallError(f"A tool must be callable, got {type(self.fn).__name__}.")
        # Arguments are validated against the signature only when the schema came from it;
        # an explicit schema is the caller's contract with the model.
        given = self.schema is not None
        schema = dict(self.schema) if self.schema is not None else tool_schema(self.fn, name=self.name or None)
        if "function" not in schema:  # a bare function schema: wrap it
            schema = {"type": "function", "function": schema}
        # Checked here, where every tool enters (chat(), wrap(), the endpoint's and the proxy's
        # schemas): a name is listed raw in the disclosure loader's index.
        name = check_tool_name(self.name or schema["function"].get("name") or _name_of(self.fn, None), "A tool's name")
        object.__setattr__(self, "_model", None if given else _arguments_model(self.fn, name))
        schema["function"] = {**schema["function"], "name": name}
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "name", name)
        if self.observe is not None and not (isinstance(self.observe, str) or callable(self.observe)):
            raise InvalidToolCallError(
                f"Tool.observe must be a template string or a callable, got {type(self.observe).__name__}."
            )

    def observation(self, arguments: Mapping[str, Any], result: Any) -> str | None:
        """The call's observation line, or None (no renderer, or one that failed: the
        summary then says what it always said)."""
        if self.observe is None:
            return None
        text: str | None
        try:
            if isinstance(self.observe, str):
                fields = {k: _field(v) for k, v in result.items() if isinstance(k, str)} if isinstance(result, Mapping) else {}
                fields.update({k: _field(v) for k, v in arguments.items()})
                fields["result"] = _field(result)
                text = self.observe.format_map(fields)
            else:
                text = self.observe(arguments, result)
        except Exception:  # a renderer is user code: its failure costs the line, never the turn
            return None
        return one_line(text, 240) if isinstance(text, str) and text.strip() else None


class Toolset:
    """Tools by name; runs the model's calls and never lets a tool crash the turn."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            tool = item if isinstance(item, Tool) else Tool(item)
            if tool.name in self._tools:
                raise InvalidToolCallError(f"Two tools are named {quoted(tool.name, 60)}; tool names must be unique.")
            self._tools[tool.name] = tool

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return [dict(tool.schema or {}) for tool in self._tools.values()]

    def prepare(self, name: str, arguments: Any) -> tuple[Tool | None, dict[str, Any] | str]:
        """The tool and validated keyword arguments, or (None|tool, error text)."""
        tool = self._tools.get(name)
        if tool is None:
            return None, f"unknown tool {quoted(name, 80)}; available: {sorted(self._tools)}"
        call = ToolCall(name=name, arguments=arguments if arguments is not None else {})
        if call.args is None:
            return tool, not_an_object(call)
        if tool._model is None:
            return tool, call.args
        try:
            return tool, tool._model.model_validate(call.args).model_dump(exclude_unset=True)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            return tool, f"invalid arguments: {problems}"

    @staticmethod
    def outcome(
        call_id: str, name: str, arguments: Any, result: Any, ok: bool, observation: str | None = None, *, value: Any = None
    ) -> ToolOutcome:
        """The tool message and the record of a call; a result returned as text is recorded
        as the JSON it holds, if it holds any (its ``value``, when already decoded), and sent
        as the text (``decoded``)."""
        text = result if isinstance(result, str) else None
        if text is not None and value is None:
            value = decoded(text)
        record = ToolCall(name=recorded_name(name), arguments=arguments if arguments is not None else {},
                          result=value if text is not None else result, ok=ok, id=call_id, observation=observation,
                          result_sent=text)  # fmt: skip
        content = record.result_text if ok else to_text(result)
        return ToolOutcome(message={"role": "tool", "tool_call_id": call_id, "content": content}, record=record)

    def call(self, call_id: str, name: str, arguments: Any, *, secrets: Set[str] = frozenset()) -> Program[ToolOutcome]:
        """Run one call the model asked for (sync tools in the calling thread under the sync
        runner, async tools awaited under the async one); a tool that raises or gets bad
        arguments gives an error result, never an exception, its ``secrets`` (the turn's
        credentials, such as an ``api_key`` given to ``chat()``) masked with the rest. A tool
        may return an ``Inline`` program, which runs in place."""
        tool, prepared = self.prepare(name, arguments)
        if tool is None or isinstance(prepared, str):
            return self.outcome(call_id, name, arguments, {"error": prepared}, ok=False)
        try:
            result = yield Io(functools.partial(_call_blocking, tool.fn, prepared), functools.partial(tool.fn, **prepared))
            if isinstance(result, Inline):
                result = yield from result.program
        except Exception as exc:
            return self.outcome(call_id, name, arguments, {"error": _describe(exc, secrets)}, ok=False)
        value = decoded(result) if isinstance(result, str) else result
        ok = succeeded(value)
        return self.outcome(
            call_id,
            name,
            arguments,
            result,
            ok=ok,
            observation=tool.observation(prepared, value if isinstance(tool.observe, str) else result) if ok else None,
            value=value,
        )


def not_an_object(call: ToolCall) -> str:
    """What a call whose arguments are not a JSON object is told (its arguments cut short)."""
    return f"arguments are not a JSON object: {call.arguments_text[:200]!r}"


def origin_of(fn: Callable[..., Any]) -> str | None:
    """Where a tool comes from, for grouping it: the class of a bound method, else the last
    part of the function's module (None when neither says anything)."""
    owner = getattr(fn, "__self__", None)
    if owner is not None and not inspect.ismodule(owner):
        return type(owner).__name__ if not isinstance(owner, type) else owner.__name__
    module = getattr(fn, "__module__", None)
    return module.rsplit(".", 1)[-1] if isinstance(module, str) and module not in {"__main__", "builtins"} else None


def _schema_only(**_: Any) -> Any:
    raise InvalidToolCallError("This tool was given as a schema only: the chatbot runs it, not the middleware.")


def as_tools(items: Iterable[Any]) -> list[Tool]:
    """What a wrapped chatbot was handed as ``tools``: OpenAI schemas (run by the chatbot),
    ``Tool`` objects or callables."""
    return [
        item if isinstance(item, Tool) else Tool(_schema_only, schema=item) if isinstance(item, Mapping) else Tool(item)
        for item in items
    ]


class ToolList(list):  # type: ignore[type-arg]
    """The ``tools`` a wrapped chatbot is handed with disclosure on: a plain list (the loader,
    then the disclosed tools) that also runs the loader. Schemas it was given as dicts are
    handed as ``chat()`` sends them (``schemas``: the request's, breakpoints included); its
    ``Tool`` objects and callables as given. A chatbot that runs its own tool loop answers a
    call of the loader with ``tools.load(arguments)``, which appends the loaded tools to this
    same list for its next LLM call; with callables, the loader is a callable too."""

    def __init__(
        self, disclosed: DisclosedTools, originals: Mapping[str, Any], *, callables: bool,
        schemas: Sequence[Mapping[str, Any]] | None = None, companions: Companions | None = None,
    ) -> None:  # fmt: skip
        self.disclosed, self.originals, self.callables = disclosed, originals, callables
        # Given tools and the names sent, those usually called with them, not sent (a load adds the loaded ones').
        self.companions = companions
        self.loader_name = disclosed.catalog.loader_name
        if callables:
            super().__init__([self._loader(), *(originals[name] for name in disclosed.names)])
        else:
            super().__init__([dict(schema) for schema in (schemas if schemas is not None else disclosed.schemas())])

    def _loader(self) -> Any:
        def load(names: list[str]) -> str:
            return self.load({"names": names})

        # A callable like the others: frameworks that derive schemas from signatures and
        # docstrings see the loader's name, its one parameter and the index.
        load.__name__ = load.__qualname__ = self.loader_name
        load.__doc__ = (
            f"{self.disclosed.catalog.loader_schema['function']['description']}\n\nArgs:\n    names: tool or group names"
        )
        return load

    def load(self, arguments: Any) -> str:
        """Answer a call of the loader (its arguments as a dict or JSON text); the tools it
        loads are appended to this list."""
        if isinstance(arguments, str):
            try:
                arguments = parse_json(arguments) if arguments else {}
            except ValueError:
                arguments = None
        before = len(self.disclosed.names)
        answer = self.disclosed.load(arguments, companions=self.companions)
        added = self.disclosed.names[before:]
        if self.callables:
            self.extend(self.originals[name] for name in added)
        else:  # as chat() sends them: a group's shared opening only in the first of its tools sent
            sent = {schema["function"]["name"]: schema for schema in self.disclosed.schemas()}
            self.extend(sent[name] for name in added)
        return answer


def _call_blocking(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call a tool from sync code; an async tool runs to completion in its own event loop."""
    result = fn(**kwargs)
    return asyncio.run(_awaited(result)) if inspect.isawaitable(result) else result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def is_async_callable(fn: Any) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 (an async __call__)


def _field(value: Any) -> str:
    """A value as a template shows it: one line, at most 120 characters."""
    return one_line(value if isinstance(value, str) else to_text(value), 120)


_ERROR_CHARS, _ERROR_READ = 500, 20_000  # of a failed tool's error: kept; read to mask secrets in


def _describe(exc: BaseException, secrets: Set[str] = frozenset()) -> str:
    """A failed tool's error as the model is told it and the turn records it (traces, archive):
    its type and message, credentials masked (passwords in URLs, ``api_key=``- and
    ``token: ``-style pairs, provider keys by their format, the environment's secret
    variables, the turn's own ``secrets``), at most 500 characters. Its first 20,000 are masked and then cut to 500, so
    the cut never leaves part of a secret its pattern no longer matches."""
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not turn a failed call into a failed turn
        text = "<unprintable>"
    return redact_secrets(f"{type(exc).__name__}: {text[:_ERROR_READ]}", environment_secrets() | secrets)[:_ERROR_CHARS]


def import_tool(ref: str, skill: str) -> Tool:
    """The tool a skill names as ``module:function``."""
    module_name, _, attribute = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"Skill {quoted(skill, 100)} lists tool {quoted(ref, 200)}, which cannot be imported: {exc}.", key="skills"
        ) from None
    return Tool(fn)
