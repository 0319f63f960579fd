"""Tests for middleware.context: context keys from successful tool calls."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from middleware import Config, ToolCall
from middleware.config import ContextConfig
from middleware.core.context import extract_context, render_context
from tests.strategies import hostile_text, tool_calls

TRACKED = ContextConfig(
    keys=("userinterface_name", "tree_id", "host_name", "device_id"),
    tools=("navigate_to_node", "take_control"),
)
AUTO = ContextConfig(max_keys=4, max_value_chars=20)


def nav(ok: bool = True, **args: object) -> ToolCall:
    return ToolCall(name="navigate_to_node", arguments=args, ok=ok)


def test_tracked_keys_come_from_successful_context_tool_calls() -> None:
    """Only tracked keys of successful calls of context tools are taken."""
    calls = [
        nav(userinterface_name="google_tv", tree_id="t-1", node="watchlist"),
        ToolCall(name="search", arguments={"device_id": "ignored: not a context tool"}),
        ToolCall(name="take_control", arguments={"device_id": "d9"}, ok=False),  # failed: ignored
    ]
    assert extract_context(calls, TRACKED) == (("userinterface_name", "google_tv"), ("tree_id", "t-1"))


def test_json_string_arguments_count_like_dicts() -> None:
    """Providers send arguments as JSON strings; they give the same keys."""
    call = ToolCall(name="take_control", arguments='{"host_name": "sunri-pi1", "device_id": "device1"}')
    assert extract_context([call], TRACKED) == (("host_name", "sunri-pi1"), ("device_id", "device1"))


def test_last_value_wins_within_a_turn() -> None:
    """A key set twice in one turn keeps its last value, in the order of last setting."""
    calls = [nav(userinterface_name="a", tree_id="t"), nav(userinterface_name="b")]
    assert extract_context(calls, TRACKED) == (("tree_id", "t"), ("userinterface_name", "b"))


def test_unusable_arguments_give_no_keys() -> None:
    """Invalid JSON, non-object JSON and other types are kept as text but set nothing."""
    for arguments in ["{not json", "[1, 2]", "42", "", "null"]:
        assert extract_context([ToolCall(name="navigate_to_node", arguments=arguments)], TRACKED) == ()


def test_auto_mode_keeps_every_scalar_argument_bounded() -> None:
    """Auto mode takes scalars and short lists of scalars from any tool; it skips other
    containers and bad key names, and caps sizes."""
    call = ToolCall(
        name="anything",
        arguments={
            "city": "Paris",
            "days": 3,
            "metric": True,
            "doors": ["driver", "rear_left"],  # a short list of scalars: kept, joined
            "nested": {"a": 1},  # not a scalar
            "many": list(range(20)),  # too long a list
            "bad key\n## x": "v",  # not a usable name
            "note": "x" * 100,
            "empty": "   ",
        },
    )
    found = dict(extract_context([call], ContextConfig(max_keys=8, max_value_chars=20)))
    assert found == {"city": "Paris", "days": "3", "metric": "true", "doors": "driver, rear_left", "note": "x" * 19 + "…"}


def test_results_give_context_only_when_asked() -> None:
    """from_results adds short scalar result fields (not status noise); tracked mode keeps
    only tracked keys from results."""
    call = ToolCall(
        name="navigate_to_node",
        arguments={"node": "shop"},
        result={"success": True, "tree_id": "t-9", "message": "done", "steps": 3},
    )
    assert dict(extract_context([call], ContextConfig())) == {"node": "shop"}
    assert dict(extract_context([call], ContextConfig(from_results=True))) == {"node": "shop", "tree_id": "t-9", "steps": "3"}
    tracked = ContextConfig(keys=("tree_id", "userinterface_name"), from_results=True)
    assert dict(extract_context([call], tracked)) == {"tree_id": "t-9"}


def test_auto_mode_caps_the_keys_one_turn_can_set() -> None:
    """One call with many arguments sets at most max_keys keys (the last ones)."""
    call = ToolCall(name="t", arguments={f"k{i}": i for i in range(10)})
    assert [k for k, _ in extract_context([call], AUTO)] == ["k6", "k7", "k8", "k9"]


def test_render_context_is_one_line_per_key_with_labels() -> None:
    """The section lists key (or label) and value, one line each; empty context gives ''."""
    config = ContextConfig(keys=("userinterface_name",), labels={"userinterface_name": "Interface"})
    assert render_context({}, config) == ""
    assert render_context({"userinterface_name": "google_tv"}, config) == (
        "## Current Context (use as defaults)\n- Interface: google_tv"
    )


@given(calls=st.lists(tool_calls, max_size=5), value=hostile_text)
def test_values_can_never_add_a_line_to_the_section(calls: list[ToolCall], value: str) -> None:
    """Whatever the tool arguments hold, the section has exactly one line per key."""
    calls = [*calls, ToolCall(name="x", arguments={"userinterface_name": value, "k\nk": value})]
    context = dict(extract_context(calls, AUTO))
    section = render_context(context, AUTO)
    assert len(section.splitlines()) == (len(context) + 1 if context else 0)
    for line in section.splitlines()[1:]:
        assert line.startswith("- ") and line.isprintable()


def test_atlas_tracks_the_seed_context_tools(atlas: Config) -> None:
    """The shipped config tracks the seed's keys from the seed's CONTEXT_TOOLS."""
    assert set(atlas.context.tools or ()) >= {"navigate_to_node", "take_control", "get_node_tree"}
