"""The session managers: the shell around the pure core (load -> build -> call -> record).

``SessionManager`` runs every operation in the calling thread over redis-py;
``AsyncSessionManager`` awaits the same operations over ``redis.asyncio``. Each
operation is written once, as a program of ``middleware.engine.Engine``; the
``operation`` descriptor binds it to a manager's runner, typed for each face.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, Protocol, TypeAlias, TypeVar, cast, overload

from ..config.files import load_config
from ..config.schema import Config
from ..config.sections import template_for
from ..connectors import Connector
from ..core.effects import Program
from ..core.state import Prompt, TurnUpdate
from ..exceptions import ConfigError
from ..llm import ProviderOptions
from ..runner import ASend, arun, run
from ..store.drivers import (
    AsyncRedisStore,
    AsyncSessionStore,
    RedisStore,
    SessionStore,
    ThreadedStore,
    checked_client,
    checked_store,
)
from ..tools import Tool, Toolset, is_async_callable
from ..turn.chat import AsyncChatStream, ChatResult, ChatStream, ChatTurn
from ..turn.wrapped import NO_MESSAGE, wrapped_turn
from .engine import Engine
from .tools import ToolsArg

if TYPE_CHECKING:
    from ..tokens import Tokenizer

__all__ = ["AsyncChat", "AsyncSessionManager", "Chat", "SessionManager"]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")
M = TypeVar("M", bound="_Manager")
_R_co = TypeVar("_R_co", covariant=True)
_S_co = TypeVar("_S_co", covariant=True)


class _ChatCall(Protocol[_R_co, _S_co]):
    """The signature of chat(), written once for both faces: a result, or with stream=True a stream."""

    @overload
    def __call__(
        self, session_id: str, user_message: str, *, model: str | None = None, tools: ToolsArg = None,
        stream: Literal[False] = False, **litellm_kwargs: Any,
    ) -> _R_co: ...  # fmt: skip
    @overload
    def __call__(
        self, session_id: str, user_message: str, *, model: str | None = None, tools: ToolsArg = None,
        stream: Literal[True], **litellm_kwargs: Any,
    ) -> _S_co: ...  # fmt: skip


# A chatbot fn(messages, ...) -> reply, sync or async; what wrap() makes of it.
Chatbot: TypeAlias = Callable[Concatenate[Any, P], R]
AsyncChatbot: TypeAlias = Callable[Concatenate[Any, P], Awaitable[R]]
Wrapped: TypeAlias = Callable[Concatenate[str, str, P], R]
AsyncWrapped: TypeAlias = Callable[Concatenate[str, str, P], Coroutine[Any, Any, R]]
Chat = _ChatCall[ChatResult, ChatStream]
AsyncChat = _ChatCall[Coroutine[Any, Any, ChatResult], Coroutine[Any, Any, AsyncChatStream]]


class operation(Generic[P, T]):
    """An Engine program as a manager method: ``SessionManager`` returns its result,
    ``AsyncSessionManager`` a coroutine of it. ``then`` maps the program's result."""

    @overload
    def __init__(self: operation[P, T], program: Callable[Concatenate[Engine, P], Program[T]]) -> None: ...
    @overload
    def __init__(
        self: operation[P, T], program: Callable[Concatenate[Engine, P], Program[R]], then: Callable[[R], T], doc: str
    ) -> None: ...
    def __init__(self, program: Callable[..., Program[Any]], then: Callable[[Any], Any] | None = None, doc: str = "") -> None:
        self.program, self.then = program, then
        self.name = program.__name__
        self.__doc__ = doc or program.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, manager: None, owner: type[Any]) -> operation[P, T]: ...
    @overload
    def __get__(self, manager: SessionManager, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, manager: AsyncSessionManager, owner: type[Any]) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, manager: _Manager | None, owner: type[Any]) -> Any:
        if manager is None:
            return self
        program, engine, runner, then = self.program, manager._engine, manager._runner, self.then

        if then is None:

            def bound(*args: Any, **kwargs: Any) -> Any:
                return runner(program(engine, *args, **kwargs), manager.store.send)

        elif runner is run:  # the result, mapped in this thread

            def bound(*args: Any, **kwargs: Any) -> Any:
                return then(run(program(engine, *args, **kwargs), manager.store.send))

        else:  # a coroutine of the result, mapped once it is done

            def bound(*args: Any, **kwargs: Any) -> Any:
                return _then(runner(program(engine, *args, **kwargs), manager.store.send), then)

        bound.__name__, bound.__doc__ = self.name, self.__doc__
        manager.__dict__[self.name] = bound  # found first from now on
        return bound


def _client_url(client: Any) -> str:
    """Where a given client connects, as errors and the repr name it (its password masked
    there): redis://host:port/db, or "" where the client does not say."""
    if type(client).__module__.startswith("fakeredis"):
        return "memory://"
    try:
        if hasattr(client, "get_default_node"):  # a cluster client: the node it asks first
            node = client.get_default_node()
            return f"redis://{node.host}:{node.port}/0"
        kwargs = client.connection_pool.connection_kwargs
        if "host" in kwargs:
            return f"redis://{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    except Exception:  # a client that does not say
        pass
    return ""


async def _then(result: Coroutine[Any, Any, Any], then: Callable[[Any], Any]) -> Any:
    return then(await result)


def _active_session(engine: Engine, user_id: str, agent: str) -> Program[str]:
    """The active session of (user, agent), created if there is none."""
    return engine.session_of(user_id, agent)


def _fresh_session(engine: Engine, user_id: str, agent: str) -> Program[str]:
    """Start a fresh session for (user, agent) and make it the active one."""
    return engine.session_of(user_id, agent, new=True)


def _messages(prompt: Prompt) -> list[dict[str, str]]:
    return prompt.messages


def _named(wrapper: Callable[..., Any], fn: Any) -> Callable[..., Any]:
    wrapper.__name__ = getattr(fn, "__name__", "chatbot")
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


class _Manager:
    """What both managers share: configuration, the engine and every operation."""

    store: Any
    _driver: Any  # the store driver class
    _runner: Any  # runner.run or runner.arun
    _async: bool  # the face: whether the store's methods are awaited

    def __init__(
        self,
        config: Config | None = None,
        *,
        system_prompt: str | None = None,
        instructions: str | None = None,
        redis_url: str | None = None,
        client: Any = None,
        store: Any = None,
        connectors: Iterable[Connector] = (),
    ) -> None:
        config = config if config is not None else load_config()
        if not isinstance(config, Config):
            raise ConfigError(f"config is a {type(config).__name__[:40]}; expected a Config (Config.model_validate(settings) "
                              "for a mapping, load_config(path) for a file).")  # fmt: skip
        for name, text in (("system_prompt", system_prompt), ("instructions", instructions)):
            if text is not None and not isinstance(text, str):
                raise ConfigError(f"{name} is of type {type(text).__name__[:40]}; expected a string.")
        if system_prompt is not None and instructions is not None:
            raise ConfigError("Give system_prompt (your whole prompt) or instructions (for the default one), not both.")
        if system_prompt is not None:
            config = config.with_overrides(prompt={"template": template_for(system_prompt)})
        if instructions is not None:
            config = config.with_overrides(assistant={"instructions": instructions})
        if redis_url is not None:
            config = config.with_overrides(store={"url": redis_url})
        self.config = config
        self._engine = Engine(config, connectors)
        self.tokenizer: Tokenizer = self._engine.tokenizer
        if store is not None and client is not None:
            raise ConfigError("Give store= (a store) or client= (a redis-py client), not both.")
        self.store = checked_store(store, asyncio=self._async) if store is not None else self._connect(client)

    @classmethod
    def from_config(cls: type[M], path: str | os.PathLike[str] | None = None, **kwargs: Any) -> M:
        """Load ``path`` (or ``$MIDDLEWARE_CONFIG``; with neither, the library default) and connect."""
        return cls(load_config(path), **kwargs)

    def _connect(self, client: Any) -> Any:
        driver, url = self._driver, self.config.store.url
        if client is None:
            return driver.from_url(url, self.config.store)
        return driver(checked_client(client, asyncio=self._async), url=_client_url(client))

    def _async_send(self) -> ASend:
        """How async code reaches the store: directly, or through a worker thread for a sync store."""
        return self.store.send if inspect.iscoroutinefunction(self.store.send) else ThreadedStore(self.store).send

    get_state = operation(Engine.get_state)
    prepare = operation(Engine.prepare)
    build_messages = operation(
        Engine.prepare, then=_messages, doc="OpenAI-format messages for ``user_message``, ready for any chat API."
    )
    record_turn = operation(Engine.record_turn)
    reset = operation(Engine.reset)
    resolve_session = operation(_active_session)
    new_session = operation(_fresh_session)
    pair_sessions = operation(Engine.pair_sessions)
    notes = operation(Engine.notes)
    manage_notes = operation(Engine.manage_notes)
    list_sessions = operation(Engine.list_sessions)
    inspect = operation(Engine.inspect)
    ping = operation(Engine.ping)
    flush_pending = operation(Engine.flush_pending)

    @property
    def pending_turns(self) -> list[tuple[str, TurnUpdate]]:
        """Turns recorded while the store was unreachable, not yet written (degrade mode)."""
        return self._engine.pending_turns

    def budget(self, model: str | None = None) -> int | None:
        """The prompt cap: tokens.budget, else the model's context window minus reply_reserve."""
        return self._engine.budget(model)

    def toolset(self, tools: ToolsArg = None) -> Toolset:
        """``tools`` as a Toolset: None means the configured skills' tools, [] means none."""
        return self._engine.toolset(tools)

    def notes_tool(self, user_id: str, agent: str) -> Tool:
        """The ``manage_long_term_memory`` tool for this (user, agent), for chat(tools=[...])."""
        return self._engine.notes_tool(user_id, agent)

    def _chat_program(self, session_id: Any, user_message: Any, model: str | None, tools: ToolsArg, stream: bool,
                      litellm_kwargs: dict[str, Any]) -> Program[ChatResult]:  # fmt: skip
        turn = ChatTurn(self._engine, session_id, user_message, model=model, tools=tools, stream=stream)
        return turn.program(ProviderOptions(litellm_kwargs))

    @property
    def achat(self) -> AsyncChat:
        """``chat()`` awaited: ``await mgr.achat(...)`` (and ``async for`` over it with stream=True).
        Store calls never block the event loop."""
        return cast(AsyncChat, self._achat)

    async def _achat(self, session_id: str, user_message: str, *, model: str | None = None, tools: ToolsArg = None,
                     stream: bool = False, **litellm_kwargs: Any) -> ChatResult | AsyncChatStream:  # fmt: skip
        program = self._chat_program(session_id, user_message, model, tools, stream, litellm_kwargs)
        del litellm_kwargs  # the program holds them with their secrets masked; a traceback shows this frame
        send = self._async_send()
        return AsyncChatStream(program, send) if stream else await arun(program, send)

    def _wrap_async(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        engine, send = self._engine, self._async_send()

        async def wrapped(session_id: str, user_message: str = NO_MESSAGE, *args: Any, **kwargs: Any) -> Any:
            return await arun(wrapped_turn(engine, fn, session_id, user_message, args, kwargs), send)

        return _named(wrapped, fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(store={self.store!r}, assistant={self.config.assistant.name!r})"


class SessionManager(_Manager):
    """Remembers sessions and composes token-efficient prompts for them.

    >>> mgr = SessionManager()                      # a neutral assistant, memory:// store
    >>> messages = mgr.build_messages("s1", "goto shop")
    """

    store: SessionStore
    _driver, _runner, _async = RedisStore, staticmethod(run), False

    @property
    def chat(self) -> Chat:
        """One full turn through litellm: compose, call, run tools, record, log.

        ``chat(session_id, user_message, *, model=None, tools=None, stream=False, **litellm_kwargs)``.
        ``tools``: Python callables (schemas from signatures and docstrings), ``Tool`` objects,
        a ``Toolset``, or None for the configured skills' tools. With ``stream=True`` returns
        a ChatStream of text chunks that records the turn when it ends."""
        return cast(Chat, self._chat)

    def _chat(self, session_id: str, user_message: str, *, model: str | None = None, tools: ToolsArg = None,
              stream: bool = False, **litellm_kwargs: Any) -> ChatResult | ChatStream:  # fmt: skip
        program = self._chat_program(session_id, user_message, model, tools, stream, litellm_kwargs)
        del litellm_kwargs  # the program holds them with their secrets masked; a traceback shows this frame
        return ChatStream(program, self.store.send) if stream else run(program, self.store.send)

    @overload
    def wrap(self, fn: AsyncChatbot[P, R]) -> AsyncWrapped[P, R]: ...
    @overload
    def wrap(self, fn: Chatbot[P, R]) -> Wrapped[P, R]: ...
    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Give a chatbot ``fn(messages, *args, **kwargs) -> reply`` memory: the result is
        ``(session_id, user_message, *args, **kwargs) -> reply``, extra arguments passed
        through. It is async when ``fn`` is."""
        if is_async_callable(fn):
            return self._wrap_async(fn)
        engine, send = self._engine, self.store.send

        def wrapped(session_id: str, user_message: str = NO_MESSAGE, *args: Any, **kwargs: Any) -> Any:
            return run(wrapped_turn(engine, fn, session_id, user_message, args, kwargs), send)

        return _named(wrapped, fn)

    def close(self) -> None:
        self.store.close()
        self._engine.close()

    def __enter__(self) -> SessionManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncSessionManager(_Manager):
    """:class:`SessionManager` for asyncio: the same methods, awaited."""

    store: AsyncSessionStore
    _driver, _runner, _async = AsyncRedisStore, staticmethod(arun), True

    chat = _Manager.achat  # on this manager chat() is awaited too

    @overload
    def wrap(self, fn: AsyncChatbot[P, R]) -> AsyncWrapped[P, R]: ...
    @overload
    def wrap(self, fn: Chatbot[P, R]) -> AsyncWrapped[P, R]: ...
    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Give a chatbot ``fn(messages, *args, **kwargs) -> reply`` (sync or async) memory:
        the result is an async ``(session_id, user_message, *args, **kwargs) -> reply``."""
        return self._wrap_async(fn)

    async def close(self) -> None:
        await self.store.close()
        self._engine.close()

    async def __aenter__(self) -> AsyncSessionManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
