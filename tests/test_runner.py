"""Tests for middleware.runner: one program, performed by the sync and the async runner alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from middleware import StoreError
from middleware.core.effects import END, Abandoned, Batch, Emit, Io, Next, Program
from middleware.runner import adrive, arun, drive, run


def sync_send(batch: Batch) -> list[Any]:
    if batch.commands and batch.commands[0][0] == "fail":
        raise StoreError("the store said no")
    return [f"reply to {c[0]}" for c in batch.commands]


async def async_send(batch: Batch) -> list[Any]:
    await asyncio.sleep(0)
    return sync_send(batch)


async def async_items() -> AsyncIterator[str]:
    for item in ("a", "b"):
        yield item


def program(log: list[Any]) -> Program[str]:
    """Every kind of effect, and a failure it handles itself."""
    log.append((yield Batch([("get", "k")])))
    log.append((yield Io(lambda: "sync form", lambda: asyncio.sleep(0, "async form"))))
    items = yield Io(lambda: iter(["a", "b"]), async_items)
    while (item := (yield Next(items))) is not END:
        yield Emit(item)
    try:
        yield Batch([("fail",)])
    except StoreError as exc:
        log.append(f"handled: {exc}")
    return "done"


def test_the_sync_runner_performs_each_effect_and_throws_failures_back() -> None:
    log: list[Any] = []
    assert run(program(log), sync_send) == "done"
    assert log == [["reply to get"], "sync form", "handled: the store said no"]


def test_the_async_runner_performs_the_same_program() -> None:
    log: list[Any] = []
    assert asyncio.run(arun(program(log), async_send)) == "done"
    assert log == [["reply to get"], "async form", "handled: the store said no"]


def test_drive_hands_emitted_text_to_its_reader() -> None:
    steps = drive(program([]), sync_send)
    assert list(steps) == ["a", "b"]

    async def read() -> tuple[list[str], list[Any]]:
        out: list[Any] = []
        return [text async for text in adrive(program([]), async_send, out)], out

    assert asyncio.run(read()) == (["a", "b"], ["done"])


def streaming(log: list[str]) -> Program[None]:
    try:
        for text in ("one", "two", "three"):
            yield Emit(text)
    except Abandoned:
        log.append("abandoned")
        log.append(str((yield Batch([("record",)]))))  # the program may still use the store
        raise


def test_a_reader_that_stops_early_lets_the_program_wind_down() -> None:
    """Closing the stream throws Abandoned into the program, which may still record; both faces."""
    log: list[str] = []
    steps = drive(streaming(log), sync_send)
    assert next(steps) == "one"
    steps.close()
    assert log == ["abandoned", "['reply to record']"]

    async def read_one() -> None:
        steps = adrive(streaming(log), async_send, [])
        assert await anext(steps) == "one"
        await steps.aclose()

    asyncio.run(read_one())
    assert log[2:] == ["abandoned", "['reply to record']"]


def test_a_failure_the_program_does_not_handle_reaches_the_caller() -> None:
    def careless() -> Program[None]:
        yield Batch([("fail",)])

    with pytest.raises(StoreError, match="said no"):
        run(careless(), sync_send)
    with pytest.raises(StoreError, match="said no"):
        asyncio.run(arun(careless(), async_send))


def test_a_program_without_a_store_says_so_if_it_needs_one() -> None:
    def needs_store() -> Program[None]:
        yield Batch([("get", "k")])

    with pytest.raises(StoreError, match="needs a store"):
        run(needs_store())
