"""Running programs: the one place where the sync and the async faces differ.

A program (see ``middleware.core.effects``) yields effects and receives their results.
``run`` performs them in the calling thread, ``arun`` awaits them; ``drive`` and
``adrive`` do the same and hand each ``Emit`` text to their own reader (a stream). An
effect that raises is thrown back into the program. A reader who stops a stream early
gets ``Abandoned`` thrown into the program, which may still record what it has.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any, TypeVar

from .core.effects import END, Abandoned, Batch, Effect, Emit, Next, Program
from .exceptions import StoreError

__all__ = ["ASend", "Send", "adrive", "arun", "drive", "run"]

T = TypeVar("T")
Send = Callable[[Batch], list[Any]]
ASend = Callable[[Batch], Awaitable[list[Any]]]
_DONE = object()


def _no_store(batch: Batch) -> list[Any]:
    raise StoreError("This program needs a store, and none was given to run it.")


def _resume(program: Program[Any], value: Any, error: BaseException | None) -> tuple[Any, Any]:
    """(the next effect, None), or (_DONE, the program's result)."""
    try:
        return (program.throw(error) if error is not None else program.send(value)), None
    except StopIteration as stop:
        return _DONE, stop.value


def _perform(effect: Effect, send: Send) -> Any:
    if type(effect) is Batch:
        return send(effect)
    if type(effect) is Next:
        return next(effect.iterator, END)
    if type(effect) is Emit:
        return None
    return effect.sync()  # type: ignore[union-attr]


async def _aperform(effect: Effect, send: ASend) -> Any:
    if type(effect) is Batch:
        return await send(effect)
    if type(effect) is Next:
        return await anext(effect.iterator, END)
    result = effect.async_()  # type: ignore[union-attr]
    return await result if inspect.isawaitable(result) else result


def drive(program: Program[T], send: Send = _no_store, error: BaseException | None = None) -> Generator[str, None, T]:
    """Perform ``program``'s effects, yielding its emitted text; returns its result."""
    value: Any = None
    while True:
        effect, result = _resume(program, value, error)
        if effect is _DONE:
            return result  # type: ignore[no-any-return]
        value, error = None, None
        if type(effect) is Emit:
            try:
                yield effect.text
            except GeneratorExit:  # the reader stopped: let the program wind down, then stop
                with contextlib.suppress(Abandoned):
                    run(program, send, Abandoned())
                raise
            continue
        try:
            value = _perform(effect, send)
        except Exception as exc:
            error = exc


def run(program: Program[T], send: Send = _no_store, error: BaseException | None = None) -> T:
    """Perform ``program``'s effects in this thread (emitted text is dropped); its result."""
    value: Any = None
    while True:  # drive() without its reader, inlined: the hot path of every sync operation
        try:
            effect = program.send(value) if error is None else program.throw(error)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            value = send(effect) if type(effect) is Batch else _perform(effect, send)
        except Exception as exc:
            error = exc


async def adrive(
    program: Program[Any], send: ASend, out: list[Any], error: BaseException | None = None
) -> AsyncGenerator[str, None]:
    """``drive`` for the async face: awaits effects; the program's result goes into ``out``."""
    value: Any = None
    while (step := _resume(program, value, error))[0] is not _DONE:
        effect, value, error = step[0], None, None
        if type(effect) is Emit:
            try:
                yield effect.text
            except GeneratorExit:
                with contextlib.suppress(Abandoned):
                    await arun(program, send, Abandoned())
                raise
        else:
            try:
                value = await _aperform(effect, send)
            except Exception as exc:
                error = exc
    out.append(step[1])


async def arun(program: Program[T], send: ASend, error: BaseException | None = None) -> T:
    """Await ``program``'s effects (emitted text is dropped); its result."""
    out: list[Any] = []
    async for _ in adrive(program, send, out, error):
        pass
    return out[0]  # type: ignore[no-any-return]
