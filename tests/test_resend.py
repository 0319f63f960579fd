"""A young session resends its own history (``caching.resend_history``): where the model's
caching makes the full history cheaper than the composed prompt, a turn sends its
session's recorded turns as they were sent, append-only, with every schema; from the
first turn that composes instead, every later turn composes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from middleware import Config, Tool

from .conftest import ManagerFactory
from .test_disclosure import Needs, _text


def _tools(count: int) -> list[Tool]:
    return [Tool(lambda **_: "a result", schema={"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Tool {i}. " + "It does one careful thing with the records. " * 20,
        "parameters": {"type": "object", "properties": {}}}}) for i in range(count)]  # fmt: skip


def _config(log_path: Path, model: str | None, *, disclose: bool = False, **caching: Any) -> Config:
    """Priced as ``model``; tool disclosure off unless ``disclose``: with it on, a model whose
    cached token costs a quarter or less gets the tools that stay filled up to its minimum
    cached prefix on the first turn, and discloses them (the session composes), so the
    history is resent only where every schema goes anyway (disclosure off, or a tool set
    under ``disclosure.min_tokens``)."""
    return Config().with_overrides(usage_log={"path": str(log_path)}, caching={"price_as": model, **caching},
                                   disclosure={"enabled": disclose})  # fmt: skip


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
    """Priced as gpt-4o-mini (reads at half), the tools disclosed: resending the history with
    every schema costs more than the composed prompt, so no turn resends the tool calls of
    the one before."""
    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-4o-mini", disclose=True))  # no tools filled: reads at half
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


def test_a_young_session_counts_the_memory_composed_prompts_learned_to_carry(managers: ManagerFactory, log_path: Path) -> None:
    """On its second turn a session's composed prompt shows no memory yet (the recent window
    still shows the first turn), so its size is no measure of what composing costs from the
    next turn on. The choice to compose, which holds for every later turn, counts the memory
    composed prompts carried once a turn had left the window, learned per process: with
    composed prompts seen to carry a large memory, the second turn resends the large result
    it would otherwise leave behind; before anything is learned, it composes."""
    from middleware.core.policy import MemorySize

    tools = _tools(8)
    tools[0] = Tool(lambda **_: "x " * 3_000, schema=tools[0].schema)  # the first turn's result is large
    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    config = _config(log_path, "gpt-5-mini").with_overrides(traces={"max_entry_chars": 100_000})

    def second_turn_resends(learned: int | None) -> tuple[bool, MemorySize]:
        model = Needs(needs)
        mgr = managers(config)
        planner = mgr._engine._planner
        for _ in range(MemorySize.MIN_SEEN if learned is not None else 0):
            planner.memory.note(learned or 0)
        for request in REQUESTS:
            mgr.chat(f"s-{learned}", request, model=model.model, tools=tools)
        firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
        assert len(firsts) == 3
        # The third turn composes either way: its prompt shows its own memory, counted as it is.
        assert not any(m["role"] == "tool" for m in firsts[2])
        return any(m["role"] == "tool" for m in firsts[1]), planner.memory

    resent, memory = second_turn_resends(None)
    assert not resent and memory.mean() is None  # composes: its prompt is far shorter
    assert memory.seen == 1  # the third turn, the session's first past the window, was noted once
    resent, memory = second_turn_resends(20_000)
    assert resent
    # The third turn was the session's first past the window: its memory joined what was learned.
    assert memory.seen == MemorySize.MIN_SEEN + 1 and memory.mean() is not None and memory.mean() < 20_000


def test_the_memory_learned_is_noted_once_a_session_and_leaves_out_a_connectors_state(
    managers: ManagerFactory, log_path: Path
) -> None:
    """What ``MemorySize`` learns: a session's third turn (its first past the window) is
    noted once, also when its first call failed and the caller tried the turn again; and
    the memory noted leaves out a connector's current state, which a prompt that could
    resend its history never shows (the same session with a thermostat notes the same)."""
    from middleware import Connector

    class Thermostat(Connector):
        name = "thermostat"

        def render(self, session_id: str) -> list[str]:
            return ["target 21.0 °C, " + "schedule 06:00 19 °C, 22:00 17 °C; " * 20]

    class Failing(Needs):
        """Fails the third turn's first call once."""

        failed = False

        def __call__(self, messages: Any, tools: Any) -> dict[str, Any]:
            if not self.failed and _text(messages[-1]["content"]) == REQUESTS[2]:
                self.failed = True
                raise RuntimeError("the provider is down")
            return super().__call__(messages, tools)

    needs = {request: [(f"tool_{i}", {})] for i, request in enumerate(REQUESTS)}
    noted: dict[bool, list[float]] = {}
    states: list[int] = []  # the connector's tokens in each prompt noted (without the thermostat first, then with it)
    for connected in (False, True):
        model = Failing(needs)
        mgr = managers(_config(log_path, "gpt-5-mini"), connectors=[Thermostat()] if connected else [])
        planner = mgr._engine._planner
        noted[connected], session = [], f"s-{connected}"
        shown = planner._note_memory
        planner._note_memory = lambda sid, prompt, shown=shown: (states.append(prompt.tokens.state), shown(sid, prompt))[1]  # type: ignore[method-assign]
        note = planner.memory.note
        planner.memory.note = lambda value, seen=noted[connected], note=note: (seen.append(value), note(value))[1]  # type: ignore[method-assign]
        for request in REQUESTS[:2]:
            mgr.chat(session, request, model=model.model, tools=_tools(8))
        with pytest.raises(Exception, match="the provider is down"):
            mgr.chat(session, REQUESTS[2], model=model.model, tools=_tools(8))
        mgr.chat(session, REQUESTS[2], model=model.model, tools=_tools(8))
        assert model.failed and mgr.get_state(session).turns == 3
        assert len(noted[connected]) == 1 and planner.memory.seen == 1
        # A session reset is noted again at its first turn past the window.
        mgr.reset(session)
        for request in REQUESTS:
            mgr.chat(session, request, model=model.model, tools=_tools(8))
        assert len(noted[connected]) == 2
    assert noted[True] == noted[False]
    assert states and all(state > 0 for state in states[len(states) // 2 :])  # the thermostat's state was shown


def test_a_first_turn_that_discloses_its_tools_composes_for_good(managers: ManagerFactory, log_path: Path) -> None:
    """Priced as Sonnet, 40 tools of about 10,000 tokens: the policy discloses them on the
    first turn (every schema would not pay for its first write), so that turn composes and
    marks the session; no later turn resends the history, though it is young."""
    from .test_entrances import SCHEMAS, tools_for_chat

    names = [schema["function"]["name"] for schema in SCHEMAS]
    needs = {request: [(names[i], {})] for i, request in enumerate(REQUESTS)}
    model = Needs(needs)
    mgr = managers(_config(log_path, "claude-sonnet-4-5", disclose=True))
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


def test_a_trace_gives_each_round_its_own_message_and_ids_unique_over_the_history() -> None:
    """Two rounds of one turn are two assistant messages, each followed by its results; an
    id an earlier turn used (a caller's calls without ids are call_0, call_1... in every
    turn) gets the turn's suffix, its result too; empty arguments are sent as {}."""
    from middleware.core.resend import trace_messages

    def turn(user: str, *rounds: list[str]) -> dict[str, Any]:
        events: list[dict[str, Any]] = [{"type": "user", "content": user}]
        for number, ids in enumerate(rounds):
            for call_id in ids:
                events.append({"type": "tool_call", "call_id": call_id, "tool": "t", "arguments": "", "round": number})
                events.append({"type": "tool_result", "call_id": call_id, "tool": "t", "ok": True, "result": call_id})
        return {"events": [*events, {"type": "assistant", "content": "done"}]}

    taken: set[str] = set()
    first = trace_messages(turn("one", ["call_0", "call_1"], ["call_2"]), taken=taken, suffix="_0")
    assert [m["role"] for m in first] == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert [c["id"] for c in first[1]["tool_calls"]] == ["call_0", "call_1"] and first[1]["tool_calls"][0]["function"][
        "arguments"
    ] == "{}"
    second = trace_messages(turn("two", ["call_0", "c9"]), taken=taken, suffix="_1")
    assert [c["id"] for c in second[1]["tool_calls"]] == ["call_0_1", "c9"]
    assert [m["tool_call_id"] for m in second[2:4]] == ["call_0_1", "c9"]


def test_a_history_that_cannot_be_resent_whole_is_not() -> None:
    """Calls left out of a trace (omitted), or arguments a trace cut in the middle (no
    longer JSON): not resendable."""
    from middleware.core.resend import resendable

    call = {"type": "tool_call", "call_id": "a", "tool": "t", "round": 0}
    assert resendable([{"events": [{**call, "arguments": '{"x": 1}'}]}])
    assert not resendable([{"events": [{**call, "arguments": '{"x": "aaa […cut…] aa'}]}])
    assert not resendable([{"events": [{"type": "omitted", "tool_calls": 3}]}])


def test_long_tool_arguments_cut_by_the_trace_make_the_session_compose(managers: ManagerFactory, log_path: Path) -> None:
    """A call whose arguments pass traces.max_entry_chars is traced cut, which is not JSON
    (300 keys, cut in the middle between two of them; a long string cut inside itself would
    still be JSON): the next turn composes (and marks the session) instead of resending a
    call a provider would refuse."""
    needs = {"use tool 0": [("tool_0", {f"key_{i}": i for i in range(300)})], "use tool 1": [("tool_1", {})]}
    model = Needs(needs)
    mgr = managers(_config(log_path, "gpt-5-mini"))
    for request in needs:
        mgr.chat("s", request, model=model.model, tools=_tools(8))
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert not any(m["role"] == "tool" for m in firsts[1]) and mgr.get_state("s").composed


def test_turns_recorded_without_call_ids_are_resent_with_unique_ids(managers: ManagerFactory, log_path: Path) -> None:
    """Two turns recorded by record_turn() with calls that carry no id (traced as call_0 in
    both): the resent history holds every id once."""
    model = Needs({"use tool 0": [("tool_0", {})]})
    mgr = managers(_config(log_path, "gpt-5-mini"))
    for n in range(2):
        mgr.record_turn("s", user=f"earlier {n}", assistant="ok", tool_calls=[{"name": "tool_1", "arguments": {"n": n}}])
    mgr.chat("s", "use tool 0", model=model.model, tools=_tools(8))
    ids = [c["id"] for m in model.sent[0] for c in m.get("tool_calls") or ()]
    assert len(ids) == 2 and len(set(ids)) == 2


def test_a_history_over_the_prompt_cap_is_not_resent(managers: ManagerFactory, log_path: Path) -> None:
    """With tokens.budget under the history with every schema, the turn composes."""
    model = Needs({"use tool 0": [("tool_0", {})], "use tool 1": [("tool_1", {})]})
    mgr = managers(_config(log_path, "gpt-5-mini").with_overrides(tokens={"budget": 1_600}))
    for request in ("use tool 0", "use tool 1"):
        mgr.chat("s", request, model=model.model, tools=_tools(8))
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert not any(m["role"] == "tool" for m in firsts[1]) and mgr.get_state("s").composed


def test_a_traces_key_of_another_type_is_reported_and_the_turn_composes(
    managers: ManagerFactory, log_path: Path, raw: Any
) -> None:
    """A corrupt traces key (a string) does not fail the load: it is reported as corrupt,
    the turn composes, and recording the turn replaces the key."""
    from middleware.store.keys import session_keys
    from middleware.testing import capture_events

    model = Needs({"use tool 0": [("tool_0", {})], "use tool 1": [("tool_1", {})]})
    mgr = managers(_config(log_path, "gpt-5-mini"))
    mgr.chat("s", "use tool 0", model=model.model, tools=_tools(8))
    raw.set(session_keys(mgr.config.store.key_prefix, "s").traces, "not a list")
    with capture_events() as events:
        mgr.chat("s", "use tool 1", model=model.model, tools=_tools(8))
    assert [e["key"] for e in events if e["event"] == "store.corrupt_record"] == ["traces"]
    firsts = [sent for sent in model.sent if sent[-1]["role"] == "user"]
    assert not any(m["role"] == "tool" for m in firsts[1]) and mgr.get_state("s").composed


def test_a_wrapped_turn_of_two_rounds_is_resent_as_two_rounds(managers: ManagerFactory, log_path: Path) -> None:
    """A wrapped chatbot's turn that called a tool, read its result, then called another is
    resent as it happened: two assistant messages, each followed by its own result (chat()'s
    tool loop records its rounds so; a wrapped chatbot's were all round 0, one message)."""

    def call(call_id: str, name: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}]}  # fmt: skip

    def bot(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [call("a", "tool_0"), {"role": "tool", "tool_call_id": "a", "content": "first"},
                call("b", "tool_1"), {"role": "tool", "tool_call_id": "b", "content": "second"},
                {"role": "assistant", "content": "both done"}]  # fmt: skip

    model = Needs({"use tool 2": [("tool_2", {})]})
    mgr = managers(_config(log_path, "gpt-5-mini"))
    mgr.wrap(bot)("s", "use tools 0 and 1")
    mgr.chat("s", "use tool 2", model=model.model, tools=_tools(8))
    resent = [_plain(m) for m in model.sent[0][1:-1]]
    assert [(m["role"], m.get("tool_call_id") or [c["id"] for c in m.get("tool_calls") or ()]) for m in resent] == [
        ("user", []), ("assistant", ["a"]), ("tool", "a"), ("assistant", ["b"]), ("tool", "b"), ("assistant", [])]  # fmt: skip
