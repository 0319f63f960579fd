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

from .billing import COUNTING, LOADER, Call, Model, Outputs, Played, _count_kept, schemas, session_classes
from .dataset import Conversation
from .savings import turn_messages

__all__ = ["play_served"]


def play_served(
    name: str, label: str, sessions: Sequence[Sequence[Conversation]], config: Config, progress: Callable[[int], None]
) -> Played:
    """Every session through the endpoint: the calls as the model received them."""
    import openai

    from middleware import llm

    played = Played(name, label)
    model = Model(played)
    served = config.with_overrides(serve={"models": {"bench": f"scripted/{model.name}"}})
    with serving(create_app(served)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        for number, session in enumerate(sessions):
            outputs, tools = Outputs(), [s for c in session_classes(session) for s in schemas(c)]
            sid, own_calls, history = f"served-{number}-{uuid.uuid4().hex[:6]}", [], []
            for conversation in session:
                own: list[dict[str, Any]] = []
                for turn in conversation.turns:
                    model.start(turn)
                    outputs.queue = [call.result for call in turn.calls]
                    before = len(model.requests)
                    history.append({"role": "user", "content": turn.user})
                    while True:
                        response = client.chat.completions.create(model="bench", messages=history, tools=tools,  # type: ignore[arg-type]
                                                                  extra_headers={"X-Session-Id": sid})  # fmt: skip
                        message = response.choices[0].message
                        if not message.tool_calls:
                            history.append({"role": "assistant", "content": message.content or ""})
                            break
                        calls = [call.model_dump() for call in message.tool_calls]
                        history.append({"role": "assistant", "content": message.content, "tool_calls": calls})
                        history += [{"role": "tool", "tool_call_id": call["id"], "content": outputs.next()} for call in calls]
                    requests = model.requests[before:]
                    played.turns += 1
                    first_names = [t["function"]["name"] for t in requests[0][1]]
                    played.sent_up_front += all(c.name in first_names for c in turn.calls)
                    played.whole += LOADER not in first_names and len(first_names) == len(tools)
                    for index, (messages, schemas_sent) in enumerate(requests):
                        # A call right after a round that only loaded schemas is one the full history would not make.
                        after_loader = index > 0 and Model._after_loader(messages)
                        own_calls.append(Call(schemas_sent, messages, index == 0, counterpart=not after_loader))
                        played.schemas_sent.append(len(schemas_sent))
                        sizes = llm.tool_sizes(COUNTING, schemas_sent)
                        played.schema_tokens += sum(sizes)
                        played.loader_tokens += sum(
                            n for n, t in zip(sizes, schemas_sent, strict=True) if t["function"]["name"] == LOADER
                        )
                    _count_kept(played, turn, own, requests[0][0])
                    own += turn_messages(turn, played.turns)
                    progress(1)
            played.sessions.append(own_calls)
    return played
