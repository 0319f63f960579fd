"""Every entrance sends the same upstream requests: chat() (plain, streamed, awaited), a wrapped
chatbot and the OpenAI-compatible endpoint (plain and streamed, driven by the official ``openai``
client), for the same session and input, through litellm to a mock OpenAI-compatible provider on
loopback that records each request body.

The tool set is large enough to be disclosed (40 schemas, about 10,000 tokens, in four
namespaced groups whose descriptions share an opening sentence), and the caching rules are
Anthropic's with breakpoints, so the requests carry the loader, shortened schemas and ``cache_control`` marks: the comparison
covers the whole tool policy, not only the composed messages. The scripted model reads only the
request, so every entrance that sends the same requests gets the same replies.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from middleware import AsyncSessionManager, Config, SessionManager, Tool, llm
from middleware.serve import create_app
from middleware.testing import mock_openai_app, serving

SESSION = "entrances"
LOADER = "load_tools"

# --- the tool set: 4 groups of 10, each group's descriptions opening with the same sentence ----

PREAMBLES = {
    "mail": "Belongs to the mailbox service, which keeps every message in folders on the server. ",
    "cal": "Belongs to the calendar service, which stores events with their attendees and times. ",
    "fs": "Belongs to the document storage service, which holds files in nested directories. ",
    "shop": "Belongs to the online store service, which sells catalogue items with home delivery. ",
}


def _p(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


# name -> (what it does, parameters, required)
SPECS: dict[str, tuple[str, dict[str, dict[str, Any]], tuple[str, ...]]] = {
    "mail_send": ("Compose and deliver a new message to one or several recipients.",
                  {"to": _p("string", "Recipient address, several separated by commas."), "subject": _p("string", "Subject line."),
                   "body": _p("string", "Message text, plain or markdown.")}, ("to", "subject", "body")),
    "mail_search": ("Search messages by sender, subject words or date range, newest first.",
                    {"query": _p("string", "Words to look for."), "folder": _p("string", "Folder to search; all when omitted."),
                     "limit": _p("integer", "At most this many results.")}, ("query",)),
    "mail_read": ("Return the full text and headers of one message.", {"message_id": _p("string", "Message identifier.")},
                  ("message_id",)),
    "mail_reply": ("Answer a message, keeping its thread and subject.",
                   {"message_id": _p("string", "Message to answer."), "body": _p("string", "Answer text."),
                    "reply_all": _p("boolean", "Include every original recipient.")}, ("message_id", "body")),
    "mail_forward": ("Pass a message with its attachments on to other recipients.",
                     {"message_id": _p("string", "Message to pass on."), "to": _p("string", "Recipient address."),
                      "note": _p("string", "Text added above the original.")}, ("message_id", "to")),
    "mail_delete": ("Move a message to the trash folder, where it is purged after thirty days.",
                    {"message_id": _p("string", "Message to remove.")}, ("message_id",)),
    "mail_archive": ("File a message in the archive folder, out of the inbox.", {"message_id": _p("string", "Message to file.")},
                     ("message_id",)),
    "mail_list_folders": ("List the mailbox folders with their unread counts.", {}, ()),
    "mail_move": ("Move a message from its folder into another folder.",
                  {"message_id": _p("string", "Message to move."), "folder": _p("string", "Destination folder.")},
                  ("message_id", "folder")),
    "mail_mark_read": ("Flag messages as read or unread.",
                       {"message_ids": _p("array", "Messages to flag.", items={"type": "string"}),
                        "read": _p("boolean", "True for read, false for unread.")}, ("message_ids", "read")),
    "cal_create_event": ("Schedule a new event, optionally inviting attendees.",
                         {"title": _p("string", "Event title."), "start": _p("string", "Start, ISO 8601 local time."),
                          "minutes": _p("integer", "Duration in minutes."),
                          "attendees": _p("array", "Attendee addresses.", items={"type": "string"})}, ("title", "start")),
    "cal_list_events": ("List the events between two dates, in chronological order.",
                        {"from_date": _p("string", "First day, YYYY-MM-DD."), "to_date": _p("string", "Last day, YYYY-MM-DD.")},
                        ("from_date", "to_date")),
    "cal_update_event": ("Change the title, time or duration of an existing event.",
                         {"event_id": _p("string", "Event to change."), "title": _p("string", "New title."),
                          "start": _p("string", "New start, ISO 8601."), "minutes": _p("integer", "New duration.")}, ("event_id",)),
    "cal_delete_event": ("Cancel an event and notify its attendees.", {"event_id": _p("string", "Event to cancel.")}, ("event_id",)),
    "cal_find_free_time": ("Find open slots of a given length across attendee schedules.",
                           {"minutes": _p("integer", "Slot length."), "attendees": _p("array", "Whose schedules to consider.",
                                                                                        items={"type": "string"})}, ("minutes",)),
    "cal_invite": ("Add attendees to an existing event and send them invitations.",
                   {"event_id": _p("string", "Event."), "attendees": _p("array", "Addresses to invite.", items={"type": "string"})},
                   ("event_id", "attendees")),
    "cal_respond": ("Accept, decline or tentatively accept an invitation.",
                    {"event_id": _p("string", "Invitation."), "answer": _p("string", "Response.", enum=["accept", "decline", "maybe"])},
                    ("event_id", "answer")),
    "cal_list_calendars": ("List the calendars the account can see, with their colours.", {}, ()),
    "cal_set_reminder": ("Set an alert some minutes before an event begins.",
                         {"event_id": _p("string", "Event."), "minutes_before": _p("integer", "Lead time in minutes.")},
                         ("event_id", "minutes_before")),
    "cal_get_event": ("Return one event with its description, location and attendees.", {"event_id": _p("string", "Event.")},
                      ("event_id",)),
    "fs_read_file": ("Return the contents of a file as text.", {"path": _p("string", "File path from the storage root.")}, ("path",)),
    "fs_write_file": ("Create or overwrite a file with the given text.",
                      {"path": _p("string", "File path."), "content": _p("string", "Text to write.")}, ("path", "content")),
    "fs_list_dir": ("List the entries of a directory with their sizes.", {"path": _p("string", "Directory path.")}, ("path",)),
    "fs_find": ("Locate files whose names match a glob pattern, below a directory.",
                {"pattern": _p("string", "Glob pattern such as *.pdf."), "under": _p("string", "Directory to search below.")},
                ("pattern",)),
    "fs_move": ("Rename a file or move it into another directory.",
                {"source": _p("string", "Current path."), "destination": _p("string", "New path.")}, ("source", "destination")),
    "fs_copy": ("Duplicate a file to a new path.",
                {"source": _p("string", "Path to duplicate."), "destination": _p("string", "Path of the copy.")},
                ("source", "destination")),
    "fs_delete": ("Remove a file or an empty directory.", {"path": _p("string", "Path to remove.")}, ("path",)),
    "fs_make_dir": ("Create a directory, with any missing parents.", {"path": _p("string", "Directory to create.")}, ("path",)),
    "fs_stat": ("Return the size, owner and modification time of a path.", {"path": _p("string", "Path to inspect.")}, ("path",)),
    "fs_share": ("Grant another account read or write access to a file.",
                 {"path": _p("string", "File to grant."), "account": _p("string", "Account address."),
                  "access": _p("string", "Access level.", enum=["read", "write"])}, ("path", "account")),
    "shop_search_products": ("Search the catalogue by keywords and price range.",
                             {"keywords": _p("string", "What to look for."), "max_price": _p("number", "Highest price, in euros.")},
                             ("keywords",)),
    "shop_get_product": ("Return the details, stock and price of one catalogue item.", {"product_id": _p("string", "Item.")},
                         ("product_id",)),
    "shop_add_to_cart": ("Put a catalogue item into the cart.",
                         {"product_id": _p("string", "Item."), "quantity": _p("integer", "How many.")}, ("product_id",)),
    "shop_view_cart": ("Show the cart with its items and total.", {}, ()),
    "shop_remove_from_cart": ("Take an item out of the cart.", {"product_id": _p("string", "Item to take out.")}, ("product_id",)),
    "shop_checkout": ("Pay for the cart with a stored card and place the order.",
                      {"card_id": _p("string", "Stored card."), "address_id": _p("string", "Delivery address.")}, ("card_id",)),
    "shop_track_order": ("Report where a parcel is and when it should arrive.", {"order_id": _p("string", "Order.")},
                         ("order_id",)),
    "shop_list_orders": ("List past orders with their status, newest first.", {"limit": _p("integer", "At most this many.")}, ()),
    "shop_cancel_order": ("Cancel an order that has not shipped yet.", {"order_id": _p("string", "Order to cancel.")},
                          ("order_id",)),
    "shop_return_item": ("Start a return for a delivered item and print its label.",
                         {"order_id": _p("string", "Order."), "product_id": _p("string", "Item to send back."),
                          "reason": _p("string", "Why it goes back.")}, ("order_id", "product_id")),
}  # fmt: skip


# Real tools carry more than their own arguments: every call takes the same request options, as
# many APIs' tools do. They make the set about 10,000 tokens, large enough that disclosing it costs
# less than sending every schema even when every schema is read from the cache at a tenth.
OPTIONS = _p(
    "object",
    "Request options shared by every call of the service, all optional.",
    properties={
        "idempotency_key": _p(
            "string",
            "A key of your choosing: a request repeated with the same key within a day "
            "is carried out once, and the repeat returns the first result unchanged.",
        ),
        "locale": _p(
            "string",
            "Language and region of any text in the result, as a BCP 47 tag such as en-GB or "
            "fr-CA; the account's own setting when omitted.",
        ),
        "timezone": _p(
            "string",
            "IANA time zone in which times in the result are shown, such as Europe/Paris; the account's own zone when omitted.",
        ),
        "dry_run": _p("boolean", "Check the request and report what it would do, without doing it."),
        "trace": _p(
            "boolean",
            "Return with the result the identifiers of every backend request it made, for support cases; off by default.",
        ),
    },
)


def _schema(name: str) -> dict[str, Any]:
    what, properties, required = SPECS[name]
    description = PREAMBLES[name.split("_", 1)[0]] + what
    parameters = {"type": "object", "properties": {**properties, "options": OPTIONS}, "required": list(required)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


SCHEMAS = [_schema(name) for name in SPECS]


def run_tool(name: str, arguments: Mapping[str, Any]) -> str:
    """What every tool answers, wherever it runs: JSON text naming the call, spaced as
    ``json.dumps`` spaces it (a result decoded and encoded again would be compact, and a
    resent history holding it would no longer match what the provider cached)."""
    return json.dumps({"done": name, **dict(sorted(arguments.items()))})


def _function(name: str) -> Callable[..., str]:
    def tool(**arguments: Any) -> str:
        return run_tool(name, arguments)

    return tool


def tools_for_chat() -> list[Tool]:
    """The same schemas as Tool objects for chat(), run here."""
    return [Tool(_function(schema["function"]["name"]), schema=schema) for schema in SCHEMAS]


# --- the scripted upstream model -----------------------------------------------------------------

# A user message names the tool it needs by a word that is in no tool's text, so no schema is
# matched to it up front: the first time, the model must load the tool's group.
WANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "Bob": ("mail_send", {"to": "bob@example.com", "subject": "Running late", "body": "Back by nine."}),
    "Friday": ("cal_create_event", {"title": "Planning", "start": "2025-06-06T10:00", "minutes": 30}),
    "quarterly": ("fs_read_file", {"path": "reports/q2.txt"}),
    "scarf": ("shop_add_to_cart", {"product_id": "scarf-blue", "quantity": 1}),
}


def _text(content: Any) -> str:
    """A message's text, whether a string or a list of parts (as with cache_control breakpoints)."""
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, Mapping))
    return str(content or "")


def respond(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None, *, act: bool, reuse_ids: bool = False
) -> dict[str, Any]:
    """The scripted model, a function of the request alone. It wants the tool its user message
    names (``WANTS``); it loads the tool's group when the tool is not among the request's tools,
    then calls it (``act``) or just answers; after a tool's result it answers naming the result.
    Call ids come from the request's length, so every entrance sees the same ids; with
    ``reuse_ids``, every call is "call_0", as some models number calls afresh each round."""
    names = {tool["function"]["name"] for tool in tools or ()}
    start = max(i for i, message in enumerate(messages) if message["role"] == "user")
    user, turn = _text(messages[start]["content"]), messages[start + 1 :]
    called = {call["id"]: call["function"]["name"] for m in turn for call in m.get("tool_calls") or ()}
    last = messages[-1]
    if last["role"] == "tool" and called.get(last["tool_call_id"]) != LOADER:
        return {"role": "assistant", "content": f"Done: {_text(last['content'])}"}
    wanted, arguments = next(want for word, want in WANTS.items() if word in user)
    if wanted not in names and LOADER not in called.values():
        return _call(messages, LOADER, {"names": [wanted.split("_", 1)[0]]}, reuse_ids)
    if act and wanted in names:
        return _call(messages, wanted, arguments, reuse_ids)
    return {"role": "assistant", "content": f"{wanted} is ready." if wanted in names else f"{wanted} is missing."}


def _call(
    messages: Sequence[Mapping[str, Any]], name: str, arguments: Mapping[str, Any], reuse_ids: bool = False
) -> dict[str, Any]:
    call = {
        "id": "call_0" if reuse_ids else f"call_{len(messages)}_0",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


# --- the entrances -------------------------------------------------------------------------------

# Scenario A: each turn loads a group and answers (no other tool call); mail comes back in turn 4.
LOADER_TURNS = ("Tell Bob I am running late tonight", "Plan a meeting for Friday morning",
                "Where are the quarterly figures?", "Nudge Bob once more")  # fmt: skip
# Scenario B: each turn loads a group, calls a tool and answers; in turn 4 mail_send, called in
# turn 1, is sent up front, so the model calls it at once.
TOOL_TURNS = ("Tell Bob I am running late tonight", "Plan a meeting for Friday morning",
              "Grab that blue scarf for Alice", "Nudge Bob once more")  # fmt: skip
MODEL = "openai/mock"


def run_chat(config: Config, api_base: str, turns: Sequence[str], *, stream: bool = False) -> None:
    tools = tools_for_chat()
    with SessionManager(config) as mgr:
        for text in turns:
            reply = mgr.chat(SESSION, text, model=MODEL, tools=tools, stream=stream, api_base=api_base, api_key="unused")
            if stream:
                list(reply)  # the turn goes on (and is recorded) as the stream is read


def run_achat(config: Config, api_base: str, turns: Sequence[str]) -> None:
    async def main() -> None:
        tools = tools_for_chat()
        async with AsyncSessionManager(config) as mgr:
            for text in turns:
                await mgr.achat(SESSION, text, model=MODEL, tools=tools, api_base=api_base, api_key="unused")

    asyncio.run(main())


def run_wrapped(config: Config, api_base: str, turns: Sequence[str]) -> None:
    def bot(messages: list[dict[str, Any]], *, tools: Any = None, model: str, **kw: Any) -> Any:
        """A chatbot that makes one LLM call and hands its reply back."""
        import litellm

        return litellm.completion(model=model, messages=messages, tools=list(tools) if tools else None, api_base=api_base,
                                  api_key="unused")  # fmt: skip

    with SessionManager(config) as mgr:
        chat = mgr.wrap(bot)
        for text in turns:
            chat(SESSION, text, tools=SCHEMAS, model=MODEL)


def _message(content: str | None, calls: Sequence[Any]) -> dict[str, Any]:
    """An assistant message as an OpenAI client keeps it in its history."""
    tool_calls = [{"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
                  for call in calls]  # fmt: skip
    return {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if tool_calls else {})}


def _joined(chunks: Any) -> dict[str, Any]:
    """A streamed reply put together: its text deltas, and each tool call's pieces by index."""
    texts: list[str] = []
    calls: dict[int, Any] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts.append(choice.delta.content or "")
            for piece in choice.delta.tool_calls or ():
                if piece.index not in calls:
                    calls[piece.index] = piece.model_copy(deep=True)
                elif piece.function is not None:
                    function = calls[piece.index].function
                    function.arguments = (function.arguments or "") + (piece.function.arguments or "")
    return _message("".join(texts) or None, [calls[index] for index in sorted(calls)])


def _answer(client: openai.OpenAI, history: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
    """The endpoint's answer to ``history``, the whole tool set offered."""
    request: dict[str, Any] = {"model": "mock", "messages": history, "tools": SCHEMAS, "extra_headers": {"X-Session-Id": SESSION}}
    if stream:
        return _joined(client.chat.completions.create(stream=True, **request))
    message = client.chat.completions.create(**request).choices[0].message
    return _message(message.content, message.tool_calls or ())


def run_endpoint(config: Config, api_base: str, turns: Sequence[str], *, stream: bool = False) -> list[dict[str, Any]]:
    """An OpenAI client that resends its whole history each turn and runs the tool calls it
    receives itself; returns that history."""
    history: list[dict[str, Any]] = []
    with serving(create_app(config)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        for text in turns:
            history.append({"role": "user", "content": text})
            while True:
                message = _answer(client, history, stream=stream)
                history.append(message)
                if "tool_calls" not in message:
                    break
                for call in message["tool_calls"]:
                    result = run_tool(call["function"]["name"], json.loads(call["function"]["arguments"]))
                    history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return history


ENTRANCES: dict[str, Callable[[Config, str, Sequence[str]], Any]] = {
    "chat": run_chat,
    "chat_stream": functools.partial(run_chat, stream=True),
    "achat": run_achat,
    "wrap": run_wrapped,
    "endpoint": run_endpoint,
    "endpoint_stream": functools.partial(run_endpoint, stream=True),
}


@dataclass(frozen=True)
class Run:
    """What one entrance did in a scenario: its upstream request bodies, its usage lines, and
    (through the endpoint) the client's history."""

    requests: list[dict[str, Any]]
    usage: list[dict[str, Any]]
    history: Any


BREAKPOINTS = {"price_as": "anthropic/claude-sonnet-4-5", "anthropic_breakpoints": True}


@pytest.fixture
def perform(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Run]:
    """``perform(entrance, turns, act=..., **settings)``: the turns through one entrance against a
    fresh mock provider, in the session ``SESSION`` of a store of its own (a key prefix per run),
    with Anthropic's caching rules and breakpoints unless ``settings`` say otherwise."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # the endpoint's upstream key comes from the environment

    def perform(entrance: str, turns: Sequence[str], *, act: bool, reuse_ids: bool = False, **settings: Any) -> Run:
        requests: list[dict[str, Any]] = []
        log = tmp_path / f"{entrance}-{uuid.uuid4().hex}.jsonl"
        with serving(
            mock_openai_app(responder=functools.partial(respond, act=act, reuse_ids=reuse_ids), requests=requests)
        ) as url:
            config = Config().with_overrides(**{
                "store": {"url": store_url, "key_prefix": f"mw-{uuid.uuid4().hex[:12]}"},
                "usage_log": {"path": str(log)},
                "caching": BREAKPOINTS,
                "serve": {"models": {"mock": {"model": MODEL, "api_base": f"{url}/v1"}}},
                **settings,
            })  # fmt: skip
            history = ENTRANCES[entrance](config, f"{url}/v1", turns)
        usage = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return Run(requests=requests, usage=usage, history=history)

    return perform


# --- comparing ------------------------------------------------------------------------------------

# Compared: what the model reads. Left out: "model" (the endpoint's client names an alias),
# "stream" and "stream_options" (how the reply travels, which differs by entrance on purpose),
# "user" and the other transport fields litellm or a client may add (none of them reach the prompt).
COMPARED = ("tools", "messages")


def sent(requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{key: body.get(key) for key in COMPARED} for body in requests]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _first_difference(got: Any, want: Any, path: str) -> str:
    """Where ``got`` first departs from ``want``: a path and both values (or lengths)."""
    if isinstance(got, Mapping) and isinstance(want, Mapping):
        key = next(k for k in [*want, *(k for k in got if k not in want)] if got.get(k, "<absent>") != want.get(k, "<absent>"))
        return _first_difference(got.get(key, "<absent>"), want.get(key, "<absent>"), f"{path}.{key}" if path else str(key))
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{len(got)} {path} vs {len(want)}"
        index = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        return _first_difference(got[index], want[index], f"{path}[{index}]")
    return f"{path}: {_short(got)} vs {_short(want)}"


def difference(who: str, got: Sequence[Any], want: Sequence[Any], *, item: str = "call") -> str:
    """A readable account of how ``who``'s items depart from chat()'s: the first difference,
    then a diff of the first item that differs (items counted from 1)."""
    head = f"{who}: {len(got)} {item}s vs {len(want)} (chat())" if len(got) != len(want) else ""
    index = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    if index == min(len(got), len(want)):
        return head
    first = f"{who} {item} {index + 1}: {_first_difference(got[index], want[index], '')} (here, then in chat())"
    lines = difflib.unified_diff(json.dumps(want[index], indent=1, sort_keys=True).splitlines(),
                                 json.dumps(got[index], indent=1, sort_keys=True).splitlines(),
                                 f"chat() {item} {index + 1}", f"{who} {item} {index + 1}", lineterm="", n=2)  # fmt: skip
    shown = list(lines)
    return "\n".join([first, *([head] if head else []), *shown[:60], *(["..."] if len(shown) > 60 else [])])


def tool_names(body: Mapping[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


def has_breakpoint(value: Any) -> bool:
    """Whether a cache_control mark sits anywhere in ``value``."""
    if isinstance(value, Mapping):
        return "cache_control" in value or any(has_breakpoint(v) for v in value.values())
    return isinstance(value, list) and any(has_breakpoint(v) for v in value)


def assert_disclosed(requests: Sequence[Mapping[str, Any]]) -> None:
    """chat()'s requests are the ones the tool policy shapes, so an equal pair is not empty:
    the first call carries the loader and fewer than 40 schemas, cache_control on a tool
    schema and in the system message, and some call states a group's preamble only once."""
    first = requests[0]
    assert LOADER in tool_names(first) and len(tool_names(first)) < len(SCHEMAS)
    assert any("cache_control" in tool for tool in first["tools"])
    assert first["messages"][0]["role"] == "system" and has_breakpoint(first["messages"][0])
    shortened = [tool for body in requests for tool in body.get("tools") or ()
                 if tool["function"]["name"] != LOADER and not tool["function"]["description"].startswith("Belongs to")]  # fmt: skip
    assert shortened, "no schema was sent without its group's shared preamble"


# --- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entrance", ["chat_stream", "achat", "wrap", "endpoint", "endpoint_stream"])
def test_loader_turns_send_what_chat_sends(perform: Callable[..., Run], entrance: str) -> None:
    """Turns that load a group and answer send chat()'s upstream requests, call by call, through every entrance."""
    want = perform("chat", LOADER_TURNS, act=False)
    assert_disclosed(want.requests)
    got = perform(entrance, LOADER_TURNS, act=False)
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


@pytest.mark.parametrize("entrance", ["chat_stream", "achat", "endpoint", "endpoint_stream"])
def test_tool_turns_send_what_chat_sends(perform: Callable[..., Run], entrance: str) -> None:
    """Turns that load a group, call a tool and answer send chat()'s upstream requests, call by call."""
    want = perform("chat", TOOL_TURNS, act=True)
    assert_disclosed(want.requests)
    got = perform(entrance, TOOL_TURNS, act=True)
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


@pytest.mark.parametrize("entrance", ["endpoint", "endpoint_stream"])
def test_the_endpoint_reaches_a_tool_it_did_not_send_first(perform: Callable[..., Run], entrance: str) -> None:
    """A client sending all 40 tools gets a first upstream call with fewer, and a tool call for a
    tool missing from it, after a load_tools round the client never sees."""
    run = perform(entrance, TOOL_TURNS[2:3], act=True)
    first = tool_names(run.requests[0])
    assert len(first) < len(SCHEMAS) and LOADER in first, f"first upstream call: {len(first)} tools"
    assert "shop_add_to_cart" not in first
    called = [call["function"]["name"] for message in run.history for call in message.get("tool_calls") or ()]
    assert called == ["shop_add_to_cart"]
    assert run.history[-1] == {"role": "assistant", "content": f"Done: {run_tool(*WANTS['scarf'])}"}


def figures(lines: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Of each usage line, the disclosure and cache figures; time, latency, kind, session and
    what the provider reported are left out."""
    return [{"tools": line.get("tools"), "cache": line.get("cache")} for line in lines]


def test_the_endpoint_logs_chat_s_disclosure_and_cache_figures(perform: Callable[..., Run]) -> None:
    """The endpoint's usage lines carry chat()'s tools and cache figures, line by line, for the same turns."""
    want = perform("chat", TOOL_TURNS, act=True)
    got = perform("endpoint", TOOL_TURNS, act=True)
    assert {line["kind"] for line in got.usage} == {"serve"}
    assert figures(got.usage) == figures(want.usage), difference("endpoint", figures(got.usage), figures(want.usage), item="line")


@pytest.mark.parametrize("entrance", ["chat_stream", "achat", "wrap", "endpoint", "endpoint_stream"])
def test_with_every_schema_and_no_breakpoints_every_entrance_already_agrees(perform: Callable[..., Run], entrance: str) -> None:
    """With disclosure off and no breakpoints every entrance sends chat()'s requests already: the
    harness compares like with like, so the tests above fail only on the tool policy."""
    turns, act = (LOADER_TURNS, False) if entrance == "wrap" else (TOOL_TURNS, True)  # the wrapped bot runs no tools
    plain = {"disclosure": {"enabled": False}, "caching": {"price_as": BREAKPOINTS["price_as"], "anthropic_breakpoints": False}}
    want = perform("chat", turns, act=act, **plain)
    got = perform(entrance, turns, act=act, **plain)
    assert len(tool_names(want.requests[0])) == len(SCHEMAS) and not has_breakpoint(sent(want.requests))
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


def test_a_disclosed_turn_resumes_on_another_endpoint(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn's plan waits in Redis with the turn, not in the process: a client whose tool
    results reach another endpoint gets the same turn there. The tool it loaded is still sent,
    the loader round stays in the model's messages (never in the client's), and the turn is
    recorded once, with the client's tool call."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    requests: list[dict[str, Any]] = []
    with serving(mock_openai_app(responder=functools.partial(respond, act=True), requests=requests)) as upstream:
        config = Config().with_overrides(store={"url": store_url}, usage_log={"path": str(tmp_path / "usage.jsonl")},
                                         serve={"models": {"mock": {"model": MODEL, "api_base": f"{upstream}/v1"}}},
                                         disclosure={"cache_aware": False})  # nothing filled: the tool is loaded  # fmt: skip
        with serving(create_app(config)) as one, serving(create_app(config)) as two:
            first, second = (openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) for url in (one, two))
            history: list[dict[str, Any]] = [{"role": "user", "content": TOOL_TURNS[0]}]
            history.append(_answer(first, history, stream=False))
            (call,) = history[-1]["tool_calls"]
            assert call["function"]["name"] == "mail_send"  # after a loader round the client never saw
            history.append({"role": "tool", "tool_call_id": call["id"], "content": run_tool("mail_send", WANTS["Bob"][1])})
            final = _answer(second, history, stream=False)
    assert final == {"role": "assistant", "content": f"Done: {run_tool(*WANTS['Bob'])}"}
    loader, asked, resumed = requests
    assert (
        tool_names(asked) == tool_names(resumed) and "mail_send" in tool_names(resumed) and "mail_send" not in tool_names(loader)
    )
    assert [m.get("tool_calls", [{}])[0].get("function", {}).get("name") for m in resumed["messages"] if m["role"] == "assistant"
            and m.get("tool_calls")] == [LOADER, "mail_send"]  # fmt: skip
    with SessionManager(config) as mgr:
        state = mgr.get_state(SESSION)
    assert state.turns == 1 and state.context["to"] == "bob@example.com"
    assert [m["content"] for m in state.recent] == [TOOL_TURNS[0], final["content"]]


@pytest.mark.parametrize("entrance", ["chat_stream", "achat", "endpoint", "endpoint_stream"])
def test_a_resent_history_is_what_chat_resends(perform: Callable[..., Run], entrance: str) -> None:
    """Priced as gpt-5-mini (reads at a tenth), with every schema sent (disclosure off), the
    young session's turns resend its history: every entrance sends chat()'s requests, and a
    later turn's first call carries the earlier turns' tool calls and results."""
    settings = {"caching": {"price_as": "gpt-5-mini"}, "disclosure": {"enabled": False}}
    want = perform("chat", TOOL_TURNS, act=True, **settings)
    firsts = [body for body in want.requests if body["messages"][-1]["role"] == "user"]
    assert len(firsts) == len(TOOL_TURNS) and any(m["role"] == "tool" for m in firsts[-1]["messages"])
    assert all(len(tool_names(body)) == len(SCHEMAS) for body in firsts)  # every schema, no loader
    got = perform(entrance, TOOL_TURNS, act=True, **settings)
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


@pytest.mark.parametrize("entrance", ["endpoint", "endpoint_stream"])
def test_a_model_that_reuses_call_ids_across_rounds_is_recorded_alike_by_every_entrance(
    perform: Callable[..., Run], entrance: str
) -> None:
    """Every call "call_0": the loader's in one round, the tool's in the next. The tool call
    the client ran is recorded with its own result, not left out as the loader's answer (an
    id alone named both), so later turns' memory and requests are chat()'s."""
    want = perform("chat", TOOL_TURNS, act=True, reuse_ids=True)
    assert any("Done: " in json.dumps(body["messages"]) for body in want.requests)
    got = perform(entrance, TOOL_TURNS, act=True, reuse_ids=True)
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


@pytest.mark.parametrize("entrance", ["chat_stream", "achat", "endpoint", "endpoint_stream"])
def test_a_result_given_as_json_text_is_read_alike_by_every_entrance(perform: Callable[..., Run], entrance: str) -> None:
    """The tools answer JSON text: chat()'s Python tools return it, the endpoint's client sends
    it in tool messages. With ``context.from_results`` its fields
    become context keys wherever it came from, so every entrance sends chat()'s requests, and
    the later turns' context shows a field only the results hold ("done")."""
    settings = {"context": {"from_results": True}}
    want = perform("chat", TOOL_TURNS, act=True, **settings)
    assert any("- done: " in json.dumps(body["messages"][0]) for body in want.requests)
    got = perform(entrance, TOOL_TURNS, act=True, **settings)
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))


@pytest.mark.parametrize("entrance", ["endpoint", "endpoint_stream"])
@pytest.mark.parametrize("budget", [2600, 3000])
def test_a_turn_that_loads_tools_under_a_tight_budget_composes_alike_on_every_request(
    perform: Callable[..., Run], entrance: str, budget: int
) -> None:
    """Under a budget the loaded group's schemas nearly fill, chat() composes a turn's prompt
    once, beside the tools matched up front. The endpoint composes it again on the request
    that brings the client's tool results: alike, not beside the tools loaded since (which
    refused the turn midway at 2,600 tokens, and dropped history chat() kept at 3,000). The
    loader loads only the schemas the budget has room for: the call it answers fits."""
    # Nothing filled up to the cache's minimum (cache_aware off): the group is loaded.
    want = perform("chat", TOOL_TURNS, act=True, tokens={"budget": budget}, disclosure={"cache_aware": False})
    got = perform(entrance, TOOL_TURNS, act=True, tokens={"budget": budget}, disclosure={"cache_aware": False})
    assert sent(got.requests) == sent(want.requests), difference(entrance, sent(got.requests), sent(want.requests))
    loaded = [body for body in want.requests if "Loaded " in _text(body["messages"][-1]["content"])]
    with SessionManager(Config()) as mgr:
        sizes = [mgr.tokenizer.count_messages(body["messages"]) + llm.tools_tokens(MODEL, body.get("tools")) for body in loaded]
    assert loaded and max(sizes) <= budget, sizes
    answers = [m["content"] for body in want.requests for m in body["messages"] if m["role"] == "tool"]
    assert any("token budget has no room" in answer for answer in answers)  # the budget did bind


def test_the_endpoint_marks_a_session_whose_first_turn_disclosed_as_composed(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the endpoint, a first turn that discloses the 40 tools (Sonnet's prices)
    composes, and its record, queued in the session's arrival order, marks the session so:
    no later turn resends its history."""
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    requests: list[dict[str, Any]] = []
    with serving(mock_openai_app(responder=functools.partial(respond, act=False), requests=requests)) as url:
        config = Config().with_overrides(
            store={"url": store_url, "key_prefix": f"mw-{uuid.uuid4().hex[:12]}"}, usage_log={"path": None},
            caching=BREAKPOINTS, serve={"models": {"mock": {"model": MODEL, "api_base": f"{url}/v1"}}},
        )  # fmt: skip
        run_endpoint(config, f"{url}/v1", LOADER_TURNS[:1])
    assert LOADER in tool_names(requests[0])
    with SessionManager(config) as mgr:
        assert mgr.get_state(SESSION).composed
