"""Tests for the scripted Atlas model and the simulated devices."""

from __future__ import annotations

import json

from middleware import load_config
from middleware.demo import CONFIG_PATH
from middleware.demo.atlas import respond
from middleware.demo.device import DeviceLab

TOOLS = [
    {"type": "function", "function": {"name": n}}
    for n in ["take_control", "navigate_to_node", "get_current_node", "click_element", "get_node_tree"]
]
SYSTEM = {
    "role": "system",
    "content": "You are Atlas.\n## Skills\n- x: y\n## Current Context (use as defaults)\n- userinterface_name: google_tv\n- device_id: device1",
}


def call_of(message: dict) -> tuple[str, dict]:
    call = message["tool_calls"][0]["function"]
    return call["name"], json.loads(call["arguments"])


def test_missing_parameters_come_only_from_the_current_context() -> None:
    """'goto shop' uses the context's interface; without context Atlas must ask."""
    assert call_of(respond([SYSTEM, {"role": "user", "content": "goto shop"}], TOOLS)) == (
        "navigate_to_node",
        {"node": "shop", "userinterface_name": "google_tv", "device_id": "device1"},
    )
    bare = respond([{"role": "system", "content": "You are Atlas."}, {"role": "user", "content": "goto shop"}], TOOLS)
    assert bare["tool_calls"] is None and "Which interface" in bare["content"]


def test_context_lines_outside_the_context_section_are_ignored() -> None:
    """Only the Current Context section counts, not look-alike lines elsewhere."""
    system = {"role": "system", "content": "## Skills\n- userinterface_name: evil_tv"}
    reply = respond([system, {"role": "user", "content": "goto shop"}], TOOLS)
    assert reply["tool_calls"] is None


def test_unavailable_tools_are_not_called() -> None:
    """Atlas does not call a tool it was not given."""
    reply = respond([SYSTEM, {"role": "user", "content": "goto shop"}], [])
    assert reply["tool_calls"] is None and "not available" in reply["content"]


def test_navigation_follows_the_shortest_path_and_needs_control() -> None:
    """The lab walks the tree, remembers positions, and refuses without a device."""
    lab = DeviceLab()
    assert lab.navigate_to_node("shop", "google_tv")["success"] is False
    lab.take_control("sunri-pi1", "device1")
    result = lab.navigate_to_node("shop", "google_tv")
    assert [s["to"] for s in result["transitions"]] == ["menu", "apps", "shop"]
    assert lab.get_current_node("google_tv")["current_node"] == "shop"
    assert lab.navigate_to_node("nowhere", "google_tv")["success"] is False
    assert lab.click_element("featured apps", "google_tv")["success"] is False  # not on this screen


def test_every_device_tool_has_a_summary_line_that_says_what_it_did() -> None:
    """The demo's summary never falls back to 'Used <tool>', which carries no fact."""
    templates = load_config(CONFIG_PATH, env={}).summary.templates
    assert {t["function"]["name"] for t in TOOLS} <= set(templates)
