"""A scripted model for the adapter tests, served through litellm as ``scripted/adapters``:
asks for get_weather when asked about weather with tools offered, answers from the tool's
result, else acknowledges. ``SEEN`` keeps what each call was sent."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from middleware import llm
from middleware.testing import register

SEEN: list[list[dict[str, Any]]] = []
MODEL = "scripted/adapters"


def respond(messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
    SEEN.append([dict(m) for m in messages])
    last = messages[-1]
    if last["role"] == "tool":
        result = json.loads(last["content"])
        return {"role": "assistant", "content": f"{result['sky']} in {result['city']}"}
    text = str(last.get("content"))
    if text == "what do you know?":  # shows what the prompt carries of the session
        return {"role": "assistant", "content": " | ".join(str(m.get("content")) for m in messages[:-1])}
    if tools and text.startswith("weather in "):
        call = {
            "id": f"call_{len(SEEN)}",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": text[11:].strip("?")})},
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"role": "assistant", "content": f"ok: {text}"}


def get_weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: the city.
    """
    return json.dumps({"city": city, "sky": "clear"})


register("adapters", respond)
llm.litellm()  # the scripted provider is set up in litellm for libraries that call it directly
