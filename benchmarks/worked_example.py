"""A worked example: tokens sent per turn against the full history.

    python -m benchmarks.worked_example

Replays four device-navigation requests with the demo's Atlas configuration
("navigate to watchlist on google_tv", "goto shop", "check current node", "now show
current node") with tool results shaped like a real device lab's (steps, timing,
capture), and prints per turn the prompt tokens this
middleware sends against a chatbot that resends every message with its tool
calls and results. The naive prompt is built message by message and counted,
which also checks the session's running full-history counter.

A second table measures the summary window choice (``summary.cover_recent``)
on a longer conversation: tokens sent, and how many earlier turns' facts (the
node each turn reached) are still in the prompt.
"""

from __future__ import annotations

import itertools
import json
import uuid
from dataclasses import dataclass
from typing import Any

from middleware import Config, SessionManager, ToolCall, load_config
from middleware.core.composer import turn_messages
from middleware.core.state import Turn
from middleware.demo import CONFIG_PATH
from middleware.session.standalone import composer_for

TREE = "8f3c2a1e-5b7d-4c9a-a0e2-6d1f4b3c9e7a"


def navigation_result(node: str, path: list[str]) -> dict[str, Any]:
    """A navigate_to_node result shaped like a device lab's (steps, timing, capture)."""
    steps = [
        {"from": a, "to": b, "action": "press_key", "params": {"key": "DOWN" if i % 2 else "RIGHT"}, "verified": True}
        for i, (a, b) in enumerate(itertools.pairwise(path))
    ]
    return {
        "success": True,
        "userinterface_name": "google_tv",
        "tree_id": TREE,
        "target_node": node,
        "transitions": steps,
        "execution_time_ms": 1800 + 900 * len(steps),
        "screenshot": f"/captures/google_tv/{node}_20261121T180211.jpg",
        "message": f"Navigation to '{node}' completed in {len(steps)} steps",
    }


def nav_call(node: str, path: list[str]) -> ToolCall:
    args = {"userinterface_name": "google_tv", "tree_id": TREE, "node": node}
    return ToolCall(name="navigate_to_node", arguments=json.dumps(args), result=navigation_result(node, path))


CURRENT_NODE = ToolCall(
    name="get_current_node",
    arguments="{}",
    result={
        "success": True,
        "current_node": "shop",
        "node_id": "node-7c1e",
        "verified_by": "image_match",
        "confidence": 0.97,
        "screen": {
            "title": "Shop",
            "focused_element": "Featured apps",
            "elements": ["Featured apps", "Top charts", "Categories"],
        },
    },
)

TURNS: list[Turn] = [
    Turn(
        user="navigate to watchlist on google_tv",
        assistant="✅ Navigated to watchlist on google_tv (2 steps).",
        tool_calls=(nav_call("watchlist", ["home", "home_menu", "watchlist"]),),
    ),
    Turn(
        user="goto shop",
        assistant="✅ Navigated to shop (3 steps).",
        tool_calls=(nav_call("shop", ["watchlist", "home_menu", "apps", "shop"]),),
    ),
    Turn(
        user="check current node",
        assistant="You are on the Shop screen; 'Featured apps' has focus.",
        tool_calls=(CURRENT_NODE,),
    ),
]
FINAL_REQUEST = "now show current node"


@dataclass
class Row:
    turn: int
    message: str
    sent: int
    full: int
    history_sent: int  # without the system prompt (both approaches send it)
    history_full: int

    @property
    def saved(self) -> float:
        return 1 - self.sent / self.full

    @property
    def history_saved(self) -> float:
        return 1 - self.history_sent / self.history_full


def naive_messages(config: Config, history: list[Turn], current: str) -> list[dict[str, Any]]:
    """What a chatbot that keeps everything sends: every message, tool calls and results included."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": composer_for(config).static_prefix}]
    for turn in history:
        messages += turn_messages(turn, turn.assistant)
    return [*messages, {"role": "user", "content": current}]


def replay(config: Config, turns: list[Turn], final: str) -> list[Row]:
    tokenizer = composer_for(config).tokenizer
    rows = []
    requests = [t.user for t in turns] + [final]
    with SessionManager(config, redis_url=f"memory://bench-{uuid.uuid4().hex}") as mgr:
        for index, request in enumerate(requests):
            prompt = mgr.prepare("example", request)
            naive = naive_messages(config, turns[:index], request)
            full = tokenizer.count_messages(naive)
            if full != prompt.full_history_tokens:  # the running counter must equal a real recount
                raise AssertionError(f"turn {index + 1}: counter {prompt.full_history_tokens} != recount {full}")
            system_full = tokenizer.count_message(naive[0])
            rows.append(
                Row(
                    turn=index + 1,
                    message=request,
                    sent=prompt.tokens.total,
                    full=full,
                    history_sent=prompt.tokens.total - prompt.tokens.system - prompt.tokens.context,
                    history_full=full - system_full,
                )
            )
            if index < len(turns):
                turn = turns[index]
                mgr.record_turn("example", user=turn.user, assistant=turn.assistant, tool_calls=list(turn.tool_calls))
    return rows


def long_conversation(n: int) -> list[Turn]:
    nodes = ["watchlist", "shop", "settings", "search", "library", "profile", "home", "live_tv", "apps", "kids"]
    return [
        Turn(
            user=f"goto {nodes[i % len(nodes)]}",
            assistant=f"✅ Navigated to {nodes[i % len(nodes)]}.",
            tool_calls=(nav_call(nodes[i % len(nodes)], ["home", nodes[i % len(nodes)]]),),
        )
        for i in range(n)
    ]


def window_choice(config: Config, n: int = 10) -> list[tuple[str, int, int, int]]:
    """Per setting: tokens sent over the whole conversation, tokens at the last turn, and
    how many earlier turns' facts (the node each reached) are still in the last prompt."""
    turns = long_conversation(n)
    out = []
    for cover in (False, True):
        variant = config.with_overrides(summary={"cover_recent": cover})
        total = 0
        with SessionManager(variant, redis_url=f"memory://win-{uuid.uuid4().hex}") as mgr:
            for turn in turns:
                total += mgr.prepare("w", turn.user).tokens.total
                mgr.record_turn("w", user=turn.user, assistant=turn.assistant, tool_calls=list(turn.tool_calls))
            prompt = mgr.prepare("w", "where am I?")
        text = "\n".join(m["content"] for m in prompt.messages[1:])
        surviving = sum(1 for turn in turns if turn.user.split()[1] in text)
        out.append((f"cover_recent={str(cover).lower()}", total + prompt.tokens.total, prompt.tokens.total, surviving))
    return out


def main() -> None:
    config = load_config(CONFIG_PATH, env={})
    rows = replay(config, TURNS, FINAL_REQUEST)
    print("Worked example: prompt tokens per turn, this middleware vs. full history with tool details")
    print(f"tokenizer: {composer_for(config).tokenizer.encoding_name} (model {config.tokens.model})\n")
    print(
        f"{'turn':>4}  {'message':<36} {'sent':>5} {'full':>5} {'saved':>6}   {'history sent':>12} {'history full':>12} {'saved':>6}"
    )
    for r in rows:
        print(
            f"{r.turn:>4}  {r.message:<36} {r.sent:>5} {r.full:>5} {r.saved:>6.0%}   "
            f"{r.history_sent:>12} {r.history_full:>12} {r.history_saved:>6.0%}"
        )
    last = rows[-1]
    print(
        f"\nAt turn 4 the message history (system prompt aside, since both send it) is "
        f"{last.history_saved:.0%} smaller; the target is 70%. The whole prompt, system "
        f"prompt included, is {last.saved:.0%} smaller, and the gap widens with every turn."
    )
    print("\nSummary window choice: 10 navigation turns to distinct nodes, then 'where am I?'")
    print(f"{'setting':<20} {'tokens, all 11 calls':>20} {'tokens, last call':>18} {'earlier turns still in it':>26}")
    for name, total, last_call, surviving in window_choice(config):
        print(f"{name:<20} {total:>20} {last_call:>18} {surviving:>26}")


if __name__ == "__main__":
    main()
