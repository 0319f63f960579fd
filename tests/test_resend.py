"""A young session resends its own history (``caching.resend_history``): where the model's
caching makes the full history cheaper than the composed prompt, a turn sends its
session's recorded turns as they were sent, append-only, with every schema; from the
first turn that composes instead, every later turn composes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from middleware import Config, Tool

from .conftest import ManagerFactory
from .test_disclosure import Needs, _text


def _tools(count: int) -> list[Tool]:
    return [Tool(lambda **_: "a result", schema={"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool {i}. " + "It does one careful thing with the records. " * 20,
        "parameters": {"type": "object", "properties": {}}}}) for i in range(count)]  # fmt: skip


def _config(log_path: Path, model: str | None, **caching: Any) -> Config:
    return Config().with_overrides(usage_log={"path": str(log_path)}, caching={"price_as": model, **caching})


REQUESTS = ["use tool 0", "use tool 1", "use tool 2"]


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message without breakpoints: its text as one string."""
    return {**message, "content": _text(message["content"])} if isinstance(message.get("content"), list) else message


def test_a_young_session_resends_its_turns_append_only(managers: ManagerFactory, log_path: Path) -> None:
    """Priced as gpt-5-mini (reads at a tenth), the second and third turns' first calls begin
    with the previous turn's last call, byte for byte: the user message, the tool call and
    its result; every schema goes, and no memory section."""
    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-5-mini"))
    for request in REQUESTS:
        mgr.chat("s", request, model=model.model, tools=_tools(8))
    firsts = [i for i, sent in enumerate(model.sent) if sent[-1]["role"] == "user"]
    assert len(firsts) == 3
    for after in firsts[1:]:
        last = model.sent[after - 1]  # the previous turn's last call: after its tool results
        assert model.sent[after][: len(last)] == last
        assert [m["role"] for m in model.sent[after][len(last) :]] == ["assistant", "user"]
    assert all(len(names) == 8 for names in model.requests)  # every schema, no loader
    assert "Current Context" not in model.sent[firsts[-1]][0]["content"]
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [line["tools"].get("resent", False) for line in lines if line["step"] == 0] == [True, True, True]


def test_where_reads_cost_half_these_turns_are_composed(managers: ManagerFactory, log_path: Path) -> None:
    """Priced as gpt-4o-mini (reads at half): resending the history with every schema costs
    more than the composed prompt, so no turn resends the tool calls of the one before."""
    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-4o-mini"))
    for request in REQUESTS:
        mgr.chat("s", request, model=model.model, tools=_tools(8))
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert all(not any(m["role"] == "tool" for m in sent) for sent in firsts)


def test_once_a_turn_is_composed_every_later_turn_is(managers: ManagerFactory, log_path: Path) -> None:
    """A large tool result (kept whole by the traces here) makes resending cost more than
    the composed prompt: the next turn and every later one compose."""
    big = Tool(lambda **_: "x " * 6_000, schema={"type": "function", "function": {
        "name": "big", "description": "Returns a large document.", "parameters": {"type": "object", "properties": {}}}})  # fmt: skip
    needs = {"use tool 0": [("tool_0", {})], "read the big one": [("big", {})], "use tool 1": [("tool_1", {})]}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-5-mini").with_overrides(traces={"max_entry_chars": 100_000}))
    for request in needs:
        mgr.chat("s", request, model=model.model, tools=[*_tools(8), big])
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert any(m["role"] == "tool" for m in firsts[1])  # the second turn resends the first
    assert not any(m["role"] == "tool" for m in firsts[2])  # the third composes: the big result is not resent
    assert mgr.get_state("s").composed


def test_a_first_turn_that_discloses_its_tools_composes_for_good(managers: ManagerFactory, log_path: Path) -> None:
    """Priced as Sonnet, 40 tools of about 10,000 tokens: the policy discloses them on the
    first turn (every schema would not pay for its first write), so that turn composes and
    marks the session; no later turn resends the history, though it is young."""
    from .test_entrances import SCHEMAS, tools_for_chat

    names = [schema["function"]["name"] for schema in SCHEMAS]
    needs = {request: [(names[i], {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "claude-sonnet-4-5"))
    tools = tools_for_chat()
    mgr.chat("s", REQUESTS[0], model=model.model, tools=tools)
    assert len(model.requests[0]) < len(SCHEMAS)  # disclosed
    assert mgr.get_state("s").composed
    for request in REQUESTS[1:]:
        mgr.chat("s", request, model=model.model, tools=tools)
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert len(firsts) == 3 and all(not any(m["role"] == "tool" for m in sent) for sent in firsts)


def test_a_turn_that_shows_a_connectors_state_composes(managers: ManagerFactory, log_path: Path) -> None:
    """The recorded history holds no connector's current state: where the composed prompt
    shows one, the turn composes (the state reaches the model), and so does every later
    turn, though resending would cost less here (gpt-5-mini, the first test's tools)."""
    from middleware import Connector

    class Thermostat(Connector):
        name = "thermostat"

        def render(self, session_id: str) -> list[str]:
            return ["target 21.0 °C"]

    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-5-mini"), connectors=[Thermostat()])
    for request in REQUESTS:
        mgr.chat("s", request, model=model.model, tools=_tools(8))
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert len(firsts) == 3 and all(not any(m["role"] == "tool" for m in sent) for sent in firsts)
    assert all("target 21.0 °C" in _text(sent[0]["content"]) for sent in firsts)
    assert mgr.get_state("s").composed
