"""The billing benchmark's conversations through ``middleware serve``, as an OpenAI client sends them.

The client is the official ``openai`` package against the endpoint on loopback (a uvicorn
thread, the same process), sending its whole history on every request with the schemas of
the session's BFCL classes, running the tool calls it receives itself (BFCL's own outputs)
and sending the results back. Upstream is the same scripted model as ``chat()``'s replay
(``benchmarks.billing.Model``), which records every request the endpoint makes; those are
priced as the others are. Unlike ``chat()``, which is handed Python methods and groups them
by class, the endpoint sees schemas only: it groups them as any client's tools are grouped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from middleware import Config
from middleware.serve import create_app
from middleware.testing import serving

from .billing import Model, Outputs, Played, replay, schemas, session_classes
from .dataset import Conversation, Turn

__all__ = ["play_served"]


class _Client:
    """Turns as an OpenAI client sends them to the endpoint at ``url``."""

    def __init__(self, url: str, model: Model) -> None:
        import openai

        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        self.model = model
        self.sid, self.tools, self.history, self.outputs = "", list[Any](), list[dict[str, Any]](), Outputs()

    def start(self, number: int, session: Sequence[Conversation], outputs: Outputs) -> None:
        self.sid, self.history, self.outputs = f"served-{number}-{uuid.uuid4().hex[:6]}", [], outputs
        self.tools = [schema for name in session_classes(session) for schema in schemas(name)]

    def turn(self, turn: Turn) -> list[bool]:
        before = len(self.model.requests)
        self.history.append({"role": "user", "content": turn.user})
        while True:
            response = self.client.chat.completions.create(model="bench", messages=self.history, tools=self.tools,  # type: ignore[arg-type]
                                                           extra_headers={"X-Session-Id": self.sid})  # fmt: skip
            message = response.choices[0].message
            if not message.tool_calls:
                self.history.append({"role": "assistant", "content": message.content or ""})
                break
            calls = [call.model_dump() for call in message.tool_calls]
            self.history.append({"role": "assistant", "content": message.content, "tool_calls": calls})
            self.history += [{"role": "tool", "tool_call_id": call["id"], "content": self.outputs.next()} for call in calls]
        # A call right after a round that only loaded schemas is one the full history would not make.
        requests = self.model.requests[before:]
        return [index > 0 and Model.after_loader(messages) for index, (messages, _) in enumerate(requests)]


def play_served(
    name: str, label: str, sessions: Sequence[Sequence[Conversation]], config: Config, progress: Callable[[int], None]
) -> Played:
    """Every session through the endpoint: the calls as the model received them."""
    played = Played(name, label)
    model = Model(played)
    served = config.with_overrides(serve={"models": {"bench": f"scripted/{model.name}"}})
    with serving(create_app(served)) as url:
        replay(played, model, sessions, _Client(url, model), progress)
    return played
