"""Tests for the prompt-cache rules: hand-worked examples of each provider's rules, priced."""

from __future__ import annotations

import json
from typing import Any

import pytest

from middleware.core.caching import (
    ANTHROPIC_LOOKBACK,
    CacheState,
    Rules,
    Split,
    blocks,
    growing_blocks,
    request_parts,
    rules_for,
    split,
    with_breakpoints,
)

# Prices as litellm's local price map has them (USD per token).
GPT_4O_MINI = rules_for("openai", {"input_cost_per_token": 1.5e-07, "cache_read_input_token_cost": 7.5e-08})
SONNET = rules_for(
    "anthropic",
    {"input_cost_per_token": 3e-06, "cache_creation_input_token_cost": 3.75e-06, "cache_read_input_token_cost": 3e-07,
     "prompt_cache_min_tokens": 1024},
)  # fmt: skip
FLASH = rules_for("gemini", {"input_cost_per_token": 3e-07, "cache_read_input_token_cost": 3e-08})


def run(rules: Rules, *prompts: list[tuple[str, int, bool]], gap: float = 1.0, ttl: float = 300.0) -> list[Split]:
    """Bill ``prompts`` one after another in one session, ``gap`` seconds apart."""
    state, out = CacheState(), []
    for index, parts in enumerate(prompts):
        result, state = split(blocks(parts), state, rules, now=index * gap, ttl=ttl)
        out.append(result)
    return out


def test_openai_reads_the_shared_prefix_in_128_token_steps() -> None:
    """1,300 shared tokens are read as 1,280 (10 x 128); the rest is billed in full, and the
    cached part costs half (gpt-4o-mini)."""
    first, second = run(GPT_4O_MINI, [("tools", 1300, False), ("m1", 200, False)], [("tools", 1300, False), ("m2", 400, False)])
    assert first == Split(uncached=1500)
    assert second == Split(read=1280, uncached=420)
    assert second.cost(GPT_4O_MINI) == pytest.approx(1280 * 7.5e-08 + 420 * 1.5e-07)


@pytest.mark.parametrize(("shared", "read"), [(1000, 0), (1023, 0), (1024, 1024), (1151, 1024), (1152, 1152), (5000, 4992)])
def test_openai_caches_from_1024_tokens(shared: int, read: int) -> None:
    """Below 1,024 shared tokens nothing is read; above, whole 128-token steps are."""
    _, second = run(GPT_4O_MINI, [("a", shared, False), ("x", 50, False)], [("a", shared, False), ("y", 50, False)])
    assert second.read == read


def test_openai_reads_nothing_once_the_cache_went_cold() -> None:
    """A call more than ttl after the last one finds nothing cached."""
    parts = [("a", 2000, False)]
    assert run(GPT_4O_MINI, parts, parts, gap=301.0)[1].read == 0
    assert run(GPT_4O_MINI, parts, parts, gap=299.0)[1].read == 1920


def test_openai_matches_any_recent_call_not_only_the_last() -> None:
    """A prefix an earlier call sent is still cached after a call that changed it."""
    a, b = [("tools", 1500, False), ("m", 10, False)], [("other", 1500, False)]
    assert run(GPT_4O_MINI, a, b, a)[2].read == 1408


def test_anthropic_writes_up_to_the_last_breakpoint_then_reads_it() -> None:
    """Tools 1,200 (breakpoint), system 300, message 500 (breakpoint): the first call writes
    2,000 at 1.25x; the next, one message longer, reads those 2,000 at 0.1x and writes 300."""
    one = [("tools", 1200, True), ("system", 300, False), ("m1", 500, True)]
    two = [("tools", 1200, True), ("system", 300, False), ("m1", 500, False), ("m2", 300, True)]
    first, second = run(SONNET, one, two)
    assert first == Split(written=2000)
    assert first.cost(SONNET) == pytest.approx(2000 * 3.75e-06)
    assert second == Split(read=2000, written=300)
    assert second.cost(SONNET) == pytest.approx(2000 * 3e-07 + 300 * 3.75e-06)


def test_anthropic_falls_back_to_an_earlier_breakpoint_when_later_text_changed() -> None:
    """A new system text breaks the prefix after the tools: the tools' entry is read."""
    one = [("tools", 1200, True), ("system", 300, True), ("m1", 500, True)]
    two = [("tools", 1200, True), ("system 2", 300, True), ("m1", 500, True)]
    assert run(SONNET, one, two)[1] == Split(read=1200, written=800)


def test_anthropic_caches_nothing_below_the_minimum_or_without_breakpoints() -> None:
    """Prefixes under 1,024 tokens are not cached; a request without cache_control caches nothing."""
    short = [("tools", 500, True), ("m1", 300, True)]
    assert run(SONNET, short, short) == [Split(uncached=800), Split(uncached=800)]
    unmarked = [("tools", 3000, False), ("m1", 300, False)]
    assert run(SONNET, unmarked, unmarked)[1] == Split(uncached=3300)


def test_anthropic_looks_back_only_20_blocks_from_a_breakpoint() -> None:
    """The earlier entry is found from a breakpoint at most 20 blocks after it, not 21."""
    head = [("tools", 1100, True)]
    near = head + [(f"m{i}", 10, False) for i in range(ANTHROPIC_LOOKBACK - 1)] + [("last", 10, True)]
    far = head + [(f"m{i}", 10, False) for i in range(ANTHROPIC_LOOKBACK)] + [("last", 10, True)]
    far[0] = ("tools", 1100, False)  # only the last block carries a breakpoint
    near[0] = ("tools", 1100, False)
    assert run(SONNET, head, near)[1].read == 1100
    assert run(SONNET, head, far)[1].read == 0


def test_gemini_reads_the_shared_prefix_without_steps() -> None:
    """Gemini's implicit cache reads the shared 1,100 tokens exactly, at a tenth of the price."""
    _, second = run(FLASH, [("a", 1100, False), ("x", 5, False)], [("a", 1100, False), ("y", 5, False)])
    assert second == Split(read=1100, uncached=5)
    assert second.cost(FLASH) == pytest.approx(1100 * 3e-08 + 5 * 3e-07)


def test_no_rules_cache_nothing() -> None:
    parts = [("a", 5000, True)]
    assert run(rules_for("none", {}), parts, parts)[1] == Split(uncached=5000)


def test_a_growing_prompt_reads_its_previous_call() -> None:
    """A full history of 1,500 tokens then 2,000: OpenAI reads 1,408 of the 1,500; Anthropic,
    with breakpoints at both ends, reads 1,500 and writes the new 500."""
    for rules, expected in ((GPT_4O_MINI, Split(read=1408, uncached=595)), (SONNET, Split(read=1500, written=500, uncached=3))):
        state = CacheState()
        _, state = split(growing_blocks(0, 1500, priming=3, breakpoints=rules.explicit), state, rules, now=0, ttl=300)
        second, _ = split(growing_blocks(1500, 2000, priming=3, breakpoints=rules.explicit), state, rules, now=1, ttl=300)
        assert second == expected


def test_rules_take_prices_and_minimum_from_the_price_map() -> None:
    """A missing read price means no discount; Anthropic's write price defaults to 1.25x input;
    prompt_cache_min_tokens sets the minimum; an unknown price gives no cost."""
    assert rules_for("openai", {"input_cost_per_token": 1e-06}).read_price == 1e-06
    haiku = rules_for("anthropic", {"input_cost_per_token": 1e-06, "prompt_cache_min_tokens": 4096})
    assert (haiku.write_price, haiku.min_tokens) == (pytest.approx(1.25e-06), 4096)
    assert Split(uncached=10).cost(rules_for("openai", None)) is None


def count(message: Any) -> int:
    content = message.get("content")
    text = content if isinstance(content, str) else "".join(p["text"] for p in content or ())
    return 3 + len(text.split())


def test_breakpoints_mark_the_stable_tools_the_static_system_text_and_the_last_message() -> None:
    """with_breakpoints marks three places, and the request's blocks carry the same three."""
    tools = [{"type": "function", "function": {"name": n}} for n in ("load_tools", "cd", "mv")]
    messages = [
        {"role": "system", "content": "You are terse.\n## Current Context\n- a: b"},
        {"role": "user", "content": "hi there"},
    ]
    marked, marked_tools = with_breakpoints(messages, tools, static_prefix="You are terse.", stable_tools=2)
    assert marked_tools is not None and ["cache_control" in t for t in marked_tools] == [False, True, False]
    assert marked[0]["content"][0] == {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
    assert marked[0]["content"][1] == {"type": "text", "text": "\n## Current Context\n- a: b"}
    assert marked[1]["content"] == [{"type": "text", "text": "hi there", "cache_control": {"type": "ephemeral"}}]
    assert messages[1]["content"] == "hi there"  # the caller's messages are left alone
    found = blocks(request_parts(marked_tools, [10, 10, 10], marked, count, static_prefix="You are terse.", static_tokens=6,
                                 priming=3))  # fmt: skip
    assert [b.breakpoint for b in found] == [False, True, False, True, False, True, False]
    assert found[-1].end == 30 + count(marked[0]) + count(marked[1]) + 3


def test_a_part_is_named_by_its_own_text_wherever_it_stands() -> None:
    """request_parts names each part by its own text, not by the prefix ending with it (as
    the blocks are): a message moved behind a new one keeps its name."""
    tools = [{"type": "function", "function": {"name": n}} for n in ("load_tools", "cd")]
    system = {"role": "system", "content": "You are terse.\n## Current Context\n- a: b"}
    asked, more = {"role": "user", "content": "hi there"}, {"role": "user", "content": "and more"}
    before = request_parts(tools, [10, 10], [system, asked], count, static_prefix="You are terse.", static_tokens=6, priming=3)
    after = request_parts(tools[1:], [10], [system, more, asked], count, static_prefix="You are terse.", static_tokens=6)
    names = {identity for identity, _, _ in before}
    assert [identity in names for identity, _, _ in after] == [True, True, True, False, True]
    assert before[-1] == ("priming", 3, False) and sum(tokens for _, tokens, _ in before) == 20 + count(system) + count(asked) + 3
    # A piece of the system text is named by itself: the rest after a changed piece keeps its name.
    split_system = {"role": "system", "content": [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "\n- a: b"},
                                                  {"type": "text", "text": "\n## Recall\n- x"}]}  # fmt: skip
    changed = {**split_system, "content": [*split_system["content"][:1], {"type": "text", "text": "\n- a: c"},
                                           *split_system["content"][2:]]}  # fmt: skip
    one, other = (
        request_parts(None, [], [m], count, static_prefix="You are terse.", static_tokens=6) for m in (split_system, changed)
    )
    assert [a == b for a, b in zip(one, other, strict=True)] == [True, False, True]
    # Named by their prefixes, the blocks share none: the second request opens with another tool.
    first_keys = {b.key for b in blocks(before)}
    assert [b.key in first_keys for b in blocks(after)] == [False] * 5


def test_the_memory_that_changes_now_and_then_gets_its_own_breakpoint_and_is_read_when_unchanged() -> None:
    """With ``stable_system`` the system text splits in three: the static text, the memory up
    to that character (marked), the rest (the recall block). The next turn, same tools and
    memory but another recall block and message, reads through the memory (hand-worked:
    tools 1,100 + static + memory); with its memory changed, the tools and the static text."""
    tools = [{"type": "function", "function": {"name": "load_tools"}}]
    static, memory = "You are terse.", "\n## Current Context\n- a: b"

    def turn(memory: str, recall: str, message: str, tail: int | None = -1) -> tuple[list[dict[str, Any]], Any]:
        system = {"role": "system", "content": static + memory + recall}
        marked, marked_tools = with_breakpoints([system, {"role": "user", "content": message}], tools, static_prefix=static,
                                                stable_tools=1, stable_system=len(static + memory), tail=tail)  # fmt: skip
        return marked, blocks(request_parts(marked_tools, [1100], marked, count, static_prefix=static, static_tokens=6))

    marked, first = turn(memory, "\n## Recalled\n- x", "hi there")
    assert [part.get("cache_control") is not None for part in marked[0]["content"]] == [True, True, False]
    assert "".join(part["text"] for part in marked[0]["content"]) == static + memory + "\n## Recalled\n- x"
    assert [b.breakpoint for b in first] == [True, True, True, False, True]
    through_memory = first[2].end
    state = split(first, CacheState(), SONNET, now=0, ttl=300)[1]
    same, _ = split(turn(memory, "\n## Recalled\n- y", "and now?")[1], state, SONNET, now=1, ttl=300)
    assert same.read == through_memory
    changed, _ = split(turn("\n## Current Context\n- a: c", "", "and now?")[1], state, SONNET, now=1, ttl=300)
    assert changed.read == 1100 + 6
    # No volatile part: the memory is the system text's last part, marked; tail=None marks no message.
    marked, _ = turn(memory, "", "hi", tail=None)
    assert [part.get("cache_control") is not None for part in marked[0]["content"]] == [True, True]
    assert marked[1] == {"role": "user", "content": "hi"}


def test_the_keys_set_earlier_take_the_static_texts_breakpoint_and_are_read_when_only_the_context_changed() -> None:
    """With ``settled_system`` (the notes and the keys set earlier end there), the system text
    splits in four: the static text (no longer marked), the part up to it (marked), the
    Current Context (marked), the recall block; still four breakpoints with the tool's and
    the message's. A turn whose Current Context changed but not the keys set earlier reads
    through them (hand-worked: tools 1,100 + the static text and the keys set earlier), where
    the static text's breakpoint read 1,100 + 6; with the keys set earlier changed too, it
    reads the tools alone. A ``settled_system`` not past the static text, or not short of
    ``stable_system``, changes nothing."""
    tools = [{"type": "function", "function": {"name": "load_tools"}}]
    static, earlier, context = "You are terse.", "\n## Set earlier\nk=v", "\n## Current Context\n- a: b"

    sent: list[Any] = []

    def turn(earlier: str, context: str, message: str, settled: int | None = None) -> tuple[list[dict[str, Any]], Any]:
        system = {"role": "system", "content": static + earlier + context + "\n## Recalled\n- x"}
        marked, marked_tools = with_breakpoints([system, {"role": "user", "content": message}], tools, static_prefix=static,
                                                stable_tools=1, stable_system=len(static + earlier + context),
                                                settled_system=len(static + earlier) if settled is None else settled)  # fmt: skip
        sent[:] = [marked, marked_tools]
        return marked, blocks(request_parts(marked_tools, [1100], marked, count, static_prefix=static, static_tokens=6))

    marked, first = turn(earlier, context, "hi there")
    assert [part.get("cache_control") is not None for part in marked[0]["content"]] == [False, True, True, False]
    assert [part["text"] for part in marked[0]["content"]] == [static, earlier, context, "\n## Recalled\n- x"]
    assert [b.breakpoint for b in first] == [True, False, True, True, False, True]
    assert json.dumps(sent).count("cache_control") == 4  # Anthropic's most
    through_earlier = first[2].end
    assert through_earlier > 1100 + 6
    state = split(first, CacheState(), SONNET, now=0, ttl=300)[1]
    moved, _ = split(turn(earlier, "\n## Current Context\n- a: c", "and now?")[1], state, SONNET, now=1, ttl=300)
    assert moved.read == through_earlier
    both, _ = split(turn("\n## Set earlier\nk=w", "\n## Current Context\n- a: c", "and now?")[1], state, SONNET,
                    now=1, ttl=300)  # fmt: skip
    assert both.read == 1100
    for settled in (len(static), len(static + earlier + context), 0):
        marked, _ = turn(earlier, context, "hi", settled=settled)
        assert [part.get("cache_control") is not None for part in marked[0]["content"]] == [True, True, False]
    # No recall block: the memory runs to the end of the system text, and its last part is marked.
    bare = {"role": "system", "content": static + earlier + context}
    marked, _ = with_breakpoints([bare, {"role": "user", "content": "hi"}], tools, static_prefix=static, stable_tools=1,
                                 stable_system=len(bare["content"]), settled_system=len(static + earlier))  # fmt: skip
    assert [(part["text"], "cache_control" in part) for part in marked[0]["content"]] == [
        (static, False), (earlier, True), (context, True)]  # fmt: skip


def test_a_cut_of_only_whitespace_joins_the_next_block_and_no_block_is_whitespace_alone() -> None:
    """Anthropic refuses a text block of only whitespace on every retry: where a cut of the
    system text holds nothing else (a section rendered empty between two cut points), it joins
    the part after it, unmarked, and whitespace at the end is dropped; the text is otherwise
    sent whole, in order."""
    static, blank, context = "You are terse.", "\n \n", "\n## Current Context\n- a: b"
    system = {"role": "system", "content": static + blank + context + "\n\n"}
    marked, _ = with_breakpoints([system, {"role": "user", "content": "hi"}], None, static_prefix=static, stable_tools=0,
                                 stable_system=len(static + blank + context), settled_system=len(static + blank))  # fmt: skip
    parts = marked[0]["content"]
    assert all(part["text"].strip() for part in parts)
    assert "".join(part["text"] for part in parts) == static + blank + context
    assert [(part["text"], "cache_control" in part) for part in parts] == [(static, False), (blank + context, True)]


def test_litellm_passes_the_breakpoints_on_to_anthropic() -> None:
    """Through litellm's own Anthropic request transformation (offline): cache_control lands
    on the tool, the static system block and the last tool result."""
    from middleware import llm

    llm.litellm()
    from litellm.llms.anthropic.chat.transformation import AnthropicConfig

    tools = [
        {
            "type": "function",
            "function": {"name": "load_tools", "description": "x", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "load_tools", "arguments": "{}"}}
    messages = [{"role": "system", "content": "STATIC\n- a: b\n## Recalled\n- r"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]  # fmt: skip
    marked, marked_tools = with_breakpoints(messages, tools, static_prefix="STATIC", stable_tools=1)
    config = AnthropicConfig()
    params = config.map_openai_params({"tools": marked_tools}, {}, "claude-sonnet-4-5", drop_params=False)
    request = config.transform_request("claude-sonnet-4-5", marked, params, {}, {})
    assert request["tools"][0]["cache_control"] == {"type": "ephemeral"}
    assert [block.get("cache_control") for block in request["system"]] == [{"type": "ephemeral"}, None]
    assert request["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}
    # The memory's own breakpoint, and the last one at the user message (tail=1): four in all.
    marked, marked_tools = with_breakpoints(messages, tools, static_prefix="STATIC", stable_tools=1,
                                            stable_system=len("STATIC\n- a: b"), tail=1)  # fmt: skip
    request = config.transform_request("claude-sonnet-4-5", marked, params, {}, {})
    assert [block.get("cache_control") for block in request["system"]] == [{"type": "ephemeral"}] * 2 + [None]
    assert request["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(request["messages"][1:])


def test_a_deferred_tool_is_no_part_of_the_prefix_and_counts_where_a_result_references_it() -> None:
    """Anthropic leaves a deferred tool (defer_loading) out of the prompt's prefix and expands
    it where a tool result references it: the call after a load that references it keeps
    the first call's blocks, reads all of them from the cache, and pays the expanded schema
    inside the loader's answer. Loaded the classic way (the schema joins the tools) the same
    call reads only the tools before it and writes the system text and messages again."""
    count = lambda message: 400 if message["role"] == "system" else 10  # noqa: E731
    loader = {"type": "function", "function": {"name": "load_tools"}, "cache_control": {"type": "ephemeral"}}
    cat = {"type": "function", "function": {"name": "cat", "description": "show a file"}}
    call = {"id": "c1", "type": "function", "function": {"name": "load_tools", "arguments": '{"names": ["cat"]}'}}
    prompt = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "show", "cache_control": {}}]},
    ]
    first = request_parts([loader], [1100], prompt, count)
    asked = [*prompt, {"role": "assistant", "content": None, "tool_calls": [call]}]
    referenced = request_parts([loader, {**cat, "defer_loading": True}], [1100, 300],
                               [*asked, {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_reference", "tool_name": "cat"}]}],
                               count)  # fmt: skip
    assert referenced[: len(first)] == first and len(referenced) == len(first) + 2
    assert [tokens for _, tokens, _ in referenced[len(first) :]] == [10, 10 + 300]  # the schema where it is referenced
    classic = request_parts(
        [loader, cat], [1100, 300], [*asked, {"role": "tool", "tool_call_id": "c1", "content": "Loaded cat."}], count
    )
    one, two = run(SONNET, first, referenced)
    assert one == Split(written=1510) and two == Split(read=1510, uncached=320)
    _, three = run(SONNET, first, classic)
    assert three == Split(read=1100, written=710, uncached=20)
