"""The scripted "Atlas" model: answers device-navigation requests offline.

A pure function of the messages it is sent: it reads the user's request, takes
missing parameters (interface, device, tree) *only* from the Current Context
section of the system prompt, asks for a tool call, and after the tool results
come back writes the final reply. So the demo shows the memory layer at work: if
the context were lost, "goto shop" could not name an interface.

Served through litellm as model ``scripted/atlas`` (see ``middleware.llm``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["LOADER", "respond"]

LOADER = "load_tools"  # the disclosure loader's default name (disclosure.loader_name)

_CONTEXT_LINE = re.compile(r"^- ([A-Za-z_][\w.\-]*): (.+)$")
_TAKE_CONTROL = re.compile(r"take control of (?P<device>[\w-]+) on (?P<host>[\w.-]+)", re.I)
_NAVIGATE = re.compile(
    r"\b(?:navigate to|go to|goto|open|move to)\s+(?:the\s+)?(?P<node>[\w-]+)(?:\s+(?:screen|page))?(?:\s+on\s+(?P<ui>[\w-]+))?",
    re.I,
)
_CURRENT = re.compile(r"current (?:node|screen)|where am i|where are we", re.I)
_CLICK = re.compile(r"\b(?:click|select|press)\s+(?:on\s+)?(?:the\s+)?(?P<element>[\w -]+?)\s*$", re.I)
_TREE = re.compile(r"node tree|list (?:the )?(?:screens|nodes)|show (?:the )?tree|which screens", re.I)
_RECAP = re.compile(r"what (?:have|did) we|summar|recap|so far", re.I)
# An interface named in the request ("... of google_tv"), which wins over the context.
_NAMED_UI = re.compile(r"\b(?:on|of|for|in)\s+(?P<ui>[a-z0-9]+_[a-z0-9_]+)\b", re.I)


def _context(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    if not messages or messages[0].get("role") != "system":
        return {}
    found: dict[str, str] = {}
    in_context = False
    for line in str(messages[0].get("content") or "").splitlines():
        if line.startswith("## "):
            in_context = line.startswith("## Current Context")
            continue
        match = _CONTEXT_LINE.match(line) if in_context else None
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def _call(messages: Sequence[Any], name: str, **arguments: Any) -> dict[str, Any]:
    args = {k: v for k, v in arguments.items() if v not in (None, "")}
    return {
        "id": f"call_{len(messages)}_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "tool_calls": None}


def _ask(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def _plan(request: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    context = _context(messages)
    named = _NAMED_UI.search(request)
    ui = named["ui"] if named else context.get("userinterface_name")
    device = context.get("device_id")
    if match := _TAKE_CONTROL.search(request):
        return _ask(_call(messages, "take_control", host_name=match["host"], device_id=match["device"]))
    if _RECAP.search(request):
        return _reply(_recap(messages))
    if _TREE.search(request):
        if not ui:
            return _reply("Which interface? For example: show the node tree of google_tv.")
        return _ask(_call(messages, "get_node_tree", userinterface_name=ui))
    if _CURRENT.search(request):
        if not ui:
            return _reply("Which interface is the device on? Navigate somewhere first, e.g. 'go to home on google_tv'.")
        return _ask(_call(messages, "get_current_node", userinterface_name=ui, device_id=device))
    if match := _NAVIGATE.search(request):
        ui = match["ui"] or ui
        if not ui:
            return _reply(f"Which interface should I open '{match['node']}' on? For example: google_tv.")
        tree = context.get("tree_id") if ui == context.get("userinterface_name") else None
        return _ask(
            _call(
                messages, "navigate_to_node", node=match["node"].lower(), userinterface_name=ui, tree_id=tree, device_id=device
            ),
        )
    if match := _CLICK.search(request):
        if not ui:
            return _reply("Which interface is the device on?")
        return _ask(_call(messages, "click_element", element=match["element"], userinterface_name=ui, device_id=device))
    return _reply("I can take control of a device, move between its screens, click elements and tell you where it is.")


def _recap(messages: Sequence[Mapping[str, Any]]) -> str:
    done = []
    for message in messages[1:-1]:
        content = str(message.get("content") or "")
        if message.get("role") == "user" and content.startswith("[Previous conversation summary]"):
            done += [line.split("→", 1)[-1].strip() for line in content.splitlines()[1:]]
        elif message.get("role") == "assistant" and content and not content.startswith("Understood"):
            done.append(content.rstrip("."))
    return "So far: " + "; ".join(done) + "." if done else "Nothing yet: this is the start of our session."


def _describe(name: str, result: Mapping[str, Any]) -> str:
    if result.get("success") is False or "error" in result:
        return f"❌ {name.replace('_', ' ')} failed: {result.get('error', 'unknown error')}."
    if name == "navigate_to_node":
        steps = len(result.get("transitions") or [])
        plural = "step" if steps == 1 else "steps"
        return f"✅ Navigated to {result.get('target_node')} on {result.get('userinterface_name')} ({steps} {plural})."
    if name == "take_control":
        return f"✅ In control of {result.get('device_id')} on {result.get('host_name')}."
    if name == "get_current_node":
        screen = result.get("screen") or {}
        return f"You are on the {screen.get('title', result.get('current_node'))} screen ({result.get('current_node')})."
    if name == "click_element":
        return f"✅ Clicked '{result.get('element')}': now on {result.get('to_node')}."
    if name == "get_node_tree":
        nodes = [n["id"] for n in result.get("nodes", [])]
        return f"{result.get('userinterface_name')} has {len(nodes)} screens: {', '.join(nodes)}."
    return f"Done: {name}."


def _finish(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The final reply, from the tool results that follow the last tool-calling message."""
    names: dict[str, str] = {}
    results = []
    for message in reversed(messages):
        if message.get("role") == "tool":
            results.append(message)
        elif message.get("role") == "assistant" and message.get("tool_calls"):
            names = {c["id"]: c["function"]["name"] for c in message["tool_calls"]}
            break
    lines = []
    for message in reversed(results):
        try:
            result = json.loads(message.get("content") or "{}")
        except ValueError:
            result = {"message": message.get("content")}
        lines.append(_describe(names.get(message.get("tool_call_id", ""), "tool"), result if isinstance(result, dict) else {}))
    return _reply(" ".join(lines) or "Done.")


def respond(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The assistant message Atlas sends next: tool calls, or the final text."""
    if not messages:
        return _reply("Hello, I am Atlas.")
    last = messages[-1]
    if last.get("role") == "tool" and not _loaded(messages):
        return _finish(messages)
    names = {t.get("function", {}).get("name") for t in tools or ()}
    request = next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")
    plan = _plan(request, messages)
    missing = [c["function"]["name"] for c in plan.get("tool_calls") or () if c["function"]["name"] not in names]
    if missing and LOADER in names:  # tool disclosure: open the tool's schema first (its name is in the index)
        return _ask(_call(messages, LOADER, names=missing))
    if missing:
        return _reply(f"I would use {', '.join(missing)}, but that tool is not available to me here.")
    return plan


def _loaded(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the last tool round only answered the disclosure loader."""
    for message in reversed(messages):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            return all(c["function"]["name"] == LOADER for c in message["tool_calls"])
    return False
