"""Claude's tool references end to end: chat() and the endpoint call a Claude 4.5 model through
litellm's own Anthropic route, against a stand-in for Anthropic's Messages API on loopback that
keeps Anthropic's rules for deferred tools (a reference must name a tool sent with
``defer_loading``, or the request is refused with a 400; a deferred tool is callable only once a
tool result references it). litellm reaches it as it reaches Anthropic's API, by the
environment (``ANTHROPIC_API_BASE``): a call given an ``api_base`` of its own gets no references."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import openai
import pytest

from middleware import Config, SessionManager
from middleware.serve import create_app
from middleware.testing import serving

MODEL = "anthropic/claude-sonnet-4-5"
LOADER = "load_tools"


def notes(file_name: str) -> str:
    """Show a text file.

    Args:
        file_name: the file to show.
    """
    return f"contents of {file_name}"


def inbox() -> list[str]:
    """Show the messages received."""
    return ["hi"]


def schema(function: Any) -> dict[str, Any]:
    from middleware.tools import Tool

    return dict(Tool(function).schema or {})


def blocks(content: Any) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def anthropic_app(requests: list[dict[str, Any]]) -> Any:
    """A stand-in for Anthropic's Messages API: it wants ``notes`` for any message. It loads it
    through the loader while it is not callable, then calls it, then answers with its result.
    Each request body is appended to ``requests``. As Anthropic does, it refuses a text block
    that is empty or only whitespace."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def messages(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        requests.append(body)
        tools, turns = body.get("tools") or [], body["messages"]
        texts = [block.get("text") for block in [*blocks(body.get("system") or []), *(b for t in turns for b in blocks(t["content"]))]
                 if block.get("type") == "text"]  # fmt: skip
        if any(not str(text or "").strip() for text in texts):
            error = {"type": "invalid_request_error", "message": "text content blocks must contain non-whitespace text"}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        deferred = {tool["name"] for tool in tools if tool.get("defer_loading")}
        results = [block for turn in turns if turn["role"] == "user" for block in blocks(turn["content"])
                   if block.get("type") == "tool_result"]  # fmt: skip
        referenced = {part["tool_name"] for result in results for part in blocks(result.get("content") or [])
                      if part.get("type") == "tool_reference"}  # fmt: skip
        if not referenced <= deferred:
            error = {
                "type": "invalid_request_error",
                "message": f"Tool reference {sorted(referenced - deferred)} has no definition",
            }
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        if deferred and deferred == {tool["name"] for tool in tools}:
            error = {"type": "invalid_request_error", "message": "All tools have defer_loading set."}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        callable_ = {tool["name"] for tool in tools if not tool.get("defer_loading")} | referenced
        last = blocks(turns[-1]["content"])[-1]
        asked = [block["name"] for turn in turns if turn["role"] == "assistant" for block in blocks(turn["content"])
                 if block.get("type") == "tool_use"]  # fmt: skip
        if last.get("type") == "tool_result" and asked[-1] != LOADER:
            content = [{"type": "text", "text": f"done: {blocks(last['content'])[0]['text']}"}]
        elif "notes" in callable_:
            content = [
                {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:8]}", "name": "notes", "input": {"file_name": "a.txt"}}
            ]
        else:
            content = [{"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:8]}", "name": LOADER, "input": {"names": ["notes"]}}]
        stop = "tool_use" if content[0]["type"] == "tool_use" else "end_turn"
        return JSONResponse({"id": f"msg_{uuid.uuid4().hex[:8]}", "type": "message", "role": "assistant", "model": body["model"],
                             "content": content, "stop_reason": stop, "stop_sequence": None,
                             "usage": {"input_tokens": 100, "output_tokens": 10}})  # fmt: skip

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def config(**caching: Any) -> Config:
    """Disclosure for any tool set, nothing sent up front but the loader, every turn composed."""
    return Config().with_overrides(
        usage_log={"path": None},
        store={"url": f"memory://refs-{uuid.uuid4().hex[:8]}"},
        disclosure={"min_tokens": 0, "match_tools": 0, "cache_aware": False},
        caching={"resend_history": False, **caching},
    )


def unmarked(value: Any) -> Any:
    """``value`` without cache_control marks (not part of what a cached prefix holds)."""
    if isinstance(value, Mapping):
        return {key: unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    return value


def assert_referenced(requests: Sequence[Mapping[str, Any]]) -> None:
    """The turn's three calls: the loader alone; after the load the same tools, system text and
    user message, the loaded tool last and deferred, the loader's answer its reference; then
    the tool's result."""
    first, loaded, final = requests
    assert [tool["name"] for tool in first["tools"]] == [LOADER]
    assert [(tool["name"], tool.get("defer_loading")) for tool in loaded["tools"]] == [(LOADER, None), ("notes", True)]
    assert loaded["tools"][0] == first["tools"][0] and loaded["system"] == first["system"]
    assert unmarked(loaded["messages"][0]) == unmarked(first["messages"][0])
    answer = loaded["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["content"] == [{"type": "tool_reference", "tool_name": "notes"}]
    assert final["tools"] == loaded["tools"] and final["messages"][-1]["content"][0]["content"] == "contents of a.txt"


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    requests: list[dict[str, Any]] = []
    with serving(anthropic_app(requests)) as url:
        monkeypatch.setenv("ANTHROPIC_API_BASE", url)
        yield url, requests


def test_chat_loads_a_tool_by_reference_and_keeps_the_prefix(provider: Any) -> None:
    """Through chat(): the loader's answer reaches Anthropic as a tool_result holding a
    tool_reference to the deferred tool, the call after it sends the first call's prefix
    again, and the tool runs; the next turn sends it up front, not deferred."""
    _, requests = provider
    with SessionManager(config()) as mgr:
        result = mgr.chat("s", "show a.txt", model=MODEL, tools=[notes, inbox])
        assert result.text == "done: contents of a.txt" and [call.name for call in result.tool_calls] == ["notes"]
        assert_referenced(requests)
        mgr.chat("s", "and again", model=MODEL, tools=[notes, inbox])
    assert [(tool["name"], tool.get("defer_loading")) for tool in requests[3]["tools"]] == [(LOADER, None), ("notes", None)]


def test_off_or_through_an_api_base_the_loaded_schema_joins_the_tools(provider: Any) -> None:
    """caching.tool_references off, or a call given an api_base of its own (a gateway that may not
    pass them on): the loader answers in words and the loaded schema joins the tools, as before."""
    url, requests = provider
    with SessionManager(config(tool_references=False)) as mgr:
        mgr.chat("s", "show a.txt", model=MODEL, tools=[notes, inbox])
    with SessionManager(config()) as mgr:
        mgr.chat("s", "show a.txt", model=MODEL, tools=[notes, inbox], api_base=url)
    assert len(requests) == 6
    for loaded in (requests[1], requests[4]):
        assert [tool["name"] for tool in loaded["tools"]] == [LOADER, "notes"]
        assert not any(tool.get("defer_loading") for tool in loaded["tools"])
        assert blocks(loaded["messages"][-1]["content"][0]["content"])[0]["text"].startswith("Loaded notes")


def test_the_endpoint_loads_by_reference_as_chat_does(provider: Any) -> None:
    """Through the endpoint, an OpenAI client sending its tools: the loader round it never sees
    goes upstream by reference, and the client gets the tool call, runs it and gets the answer."""
    _, requests = provider
    served = config().with_overrides(serve={"models": {"claude": {"model": MODEL}}})
    tools = [
        {"type": "function", "function": schema(notes)["function"]},
        {"type": "function", "function": schema(inbox)["function"]},
    ]
    with serving(create_app(served)) as endpoint:
        client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "show a.txt"}]
        first = client.chat.completions.create(model="claude", messages=history, tools=tools,  # type: ignore[arg-type]
                                               extra_headers={"X-Session-Id": "s"}).choices[0].message  # fmt: skip
        assert first.tool_calls and first.tool_calls[0].function.name == "notes"
        call = first.tool_calls[0]
        history += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": notes(**json.loads(call.function.arguments))}]  # fmt: skip
        final = client.chat.completions.create(model="claude", messages=history, tools=tools,  # type: ignore[arg-type]
                                               extra_headers={"X-Session-Id": "s"}).choices[0].message  # fmt: skip
    assert final.content == "done: contents of a.txt"
    assert_referenced(requests)


def test_a_waiting_turn_resumed_without_the_referenced_tool_answers_the_load_in_words(provider: Any) -> None:
    """The endpoint keeps a turn waiting for the client's tool results with its loop, the
    loader's references included. A client whose next request no longer offers the tool
    referenced (its tool list changed) gets its turn finished: the reference goes upstream in
    words, which Anthropic accepts, where a reference to a tool not sent deferred is refused."""
    _, requests = provider
    served = config().with_overrides(serve={"models": {"claude": {"model": MODEL}}})
    tools = [{"type": "function", "function": schema(function)["function"]} for function in (notes, inbox)]
    with serving(create_app(served)) as endpoint:
        client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "show a.txt"}]
        first = client.chat.completions.create(model="claude", messages=history, tools=tools,  # type: ignore[arg-type]
                                               extra_headers={"X-Session-Id": "w"}).choices[0].message  # fmt: skip
        assert first.tool_calls
        call = first.tool_calls[0]
        history += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                    {"role": "tool", "tool_call_id": call.id, "content": "contents of a.txt"}]  # fmt: skip
        final = client.chat.completions.create(model="claude", messages=history, tools=tools[1:],  # type: ignore[arg-type]
                                               extra_headers={"X-Session-Id": "w"}).choices[0].message  # fmt: skip
    assert final.content == "done: contents of a.txt"
    answered = requests[-1]["messages"][-3]["content"][0]  # the loader's answer, before the tool's call and result
    assert answered["type"] == "tool_result" and blocks(answered["content"])[0]["text"].startswith("Loaded notes")
    assert not any(tool.get("defer_loading") for tool in requests[-1]["tools"])


def test_a_wrapped_chatbot_is_handed_loads_in_words(provider: Any) -> None:
    """A wrapped chatbot makes its own calls, through a client the middleware does not know:
    its loads are answered in words and the loaded schema joins the tools it is handed, even
    for a Claude model."""
    import litellm

    _, requests = provider
    handed: list[list[str]] = []

    def bot(messages: list[dict[str, Any]], *, tools: Any = None, model: str, **kw: Any) -> Any:
        handed.append([tool["function"]["name"] for tool in tools or ()])
        return litellm.completion(model=model, messages=messages, tools=list(tools) if tools else None)

    with SessionManager(config()) as mgr:
        mgr.wrap(bot)("s", "show a.txt", tools=[schema(notes), schema(inbox)], model=MODEL)
    assert handed[:2] == [[LOADER], [LOADER, "notes"]]
    assert not any(tool.get("defer_loading") for body in requests for tool in body["tools"])
    assert blocks(requests[1]["messages"][-1]["content"][0]["content"])[0]["text"].startswith("Loaded notes")


def test_the_call_after_a_load_is_weighed_and_counted_apart(provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where its breakpoints end, the call after a round that only loaded schemas is weighed by
    how often such calls were followed, and counted among them once made (``LoopOdds``); the
    other calls are not."""
    from middleware.core.policy import LoopOdds

    seen: list[tuple[str, bool, bool]] = []
    chance, note = LoopOdds.chance, LoopOdds.note

    def weighed(self: LoopOdds, after_results: bool, *, loaded: bool = False) -> float:
        seen.append(("chance", after_results, loaded))
        return chance(self, after_results, loaded=loaded)

    def counted(self: LoopOdds, after_results: bool, followed: bool, *, loaded: bool = False) -> None:
        seen.append(("note", after_results, loaded))
        note(self, after_results, followed, loaded=loaded)

    monkeypatch.setattr(LoopOdds, "chance", weighed)
    monkeypatch.setattr(LoopOdds, "note", counted)
    with SessionManager(config()) as mgr:
        mgr.chat("s", "show a.txt", model=MODEL, tools=[notes, inbox])
    assert [entry for entry in seen if entry[0] == "note"] == [
        ("note", False, False),
        ("note", True, True),
        ("note", True, False),
    ]
    assert ("chance", True, True) in seen and seen.count(("chance", True, True)) == 1


def test_a_client_system_text_of_whitespace_only_is_no_system_text(provider: Any) -> None:
    """A client whose system message holds only whitespace gets the configured system text, as
    one that sends none does: kept as its own, it would go upstream as a whitespace-only block
    of its own (the breakpoint at its end), which Anthropic refuses on every retry."""
    _, requests = provider
    served = config().with_overrides(serve={"models": {"claude": {"model": MODEL}}})
    with serving(create_app(served)) as endpoint:
        client = openai.OpenAI(base_url=f"{endpoint}/v1", api_key="unused", max_retries=0)
        for session, system in (("blank", " \n\t"), ("none", None)):
            lead = [{"role": "system", "content": system}] if system is not None else []
            client.chat.completions.create(model="claude", messages=[*lead, {"role": "user", "content": "hello"}],
                                           extra_headers={"X-Session-Id": session})  # fmt: skip
    blank, none = requests
    assert unmarked(blank["system"]) == unmarked(none["system"]) and blocks(blank["system"])[0]["text"].strip()
