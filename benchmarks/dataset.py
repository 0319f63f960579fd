"""The public dataset: BFCL multi-turn conversations, replayed with real tool outputs.

Source: the Berkeley Function Calling Leaderboard's multi-turn category
``BFCL_v4_multi_turn_base`` as shipped in the PyPI package ``bfcl-eval``
(2026.3.23, Apache-2.0): 200 conversations, 734 user turns, each turn with its
ground-truth tool calls. Nothing is downloaded: the data are files inside the
installed package, and the tool outputs come from running BFCL's own simulated
tool classes (file system, trading bot, vehicle, travel, ...) on each
conversation's initial state.

Install (its declared dependencies pull in torch; the data and tools need none):

    pip install --no-deps bfcl-eval==2026.3.23 && pip install mpmath
"""

from __future__ import annotations

import ast
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "Conversation", "Turn", "chains", "load", "mixed_chains"]

DATASET = "BFCL_v4_multi_turn_base"
LONG_OUTPUTS = "BFCL_v4_multi_turn_long_context"
INSTALL = "pip install --no-deps bfcl-eval==2026.3.23 && pip install mpmath"


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]
    text: str  # the ground-truth call as written in the dataset
    result: str = ""


@dataclass
class Turn:
    user: str
    calls: list[Call]
    reply: str = ""  # the assistant's final text (see replay)


@dataclass
class Conversation:
    id: str
    turns: list[Turn]
    classes: list[str]
    initial_config: dict[str, Any] = field(repr=False, default_factory=dict)


def _require() -> Any:
    try:
        from importlib.resources import files

        return files("bfcl_eval") / "data"
    except ModuleNotFoundError:
        raise SystemExit(f"The benchmark needs the BFCL dataset: {INSTALL}") from None


def _jsonl(resource: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in resource.read_text(encoding="utf-8").splitlines() if line.strip()]


def _parse_call(text: str) -> Call:
    node = ast.parse(text, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    arguments = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    arguments.update({f"arg{i}": ast.literal_eval(a) for i, a in enumerate(node.args)})
    return Call(name=node.func.id, arguments=arguments, text=text)


def _reply(calls: list[Call]) -> str:
    """A short final answer like an assistant's: what it did and the last result's gist."""
    if not calls:
        return "There is nothing to do for that."
    last = calls[-1].result.strip().replace("\n", " ")
    gist = last if len(last) <= 160 else last[:157] + "..."
    names = ", ".join(dict.fromkeys(c.name for c in calls))
    return f"Done ({names}). {gist}".strip()


def _execute(conversation: Conversation, *, long_context: bool, run: str) -> None:
    """Run the ground-truth calls turn by turn on BFCL's tool classes, keeping their outputs.
    BFCL keeps its tool instances by (model name, test id) for the whole process: ``run``
    names this load, so a second load in the same process starts from the initial state
    again instead of the state the first one left."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    for turn in conversation.turns:
        texts = [c.text for c in turn.calls]
        results, _ = (
            execute_multi_turn_func_call(
                texts, conversation.initial_config, conversation.classes, run, conversation.id, long_context
            )
            if texts
            else ([], None)
        )
        turn.calls = [Call(c.name, c.arguments, c.text, str(r)) for c, r in zip(turn.calls, results, strict=True)]
        turn.reply = _reply(turn.calls)


def load(limit: int | None = None, *, category: str = DATASET) -> list[Conversation]:
    """The conversations with their tool outputs and final replies.

    ``BFCL_v4_multi_turn_long_context`` holds the same kind of tasks with much larger
    tool states, so some outputs run to tens of thousands of characters.
    """
    data = _require()
    questions = _jsonl(data / f"{category}.json")
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(data / "possible_answer" / f"{category}.json")}
    conversations, run = [], f"middleware-bench-{uuid.uuid4().hex[:8]}"
    for entry in questions[:limit]:
        turns = [
            Turn(user=" ".join(m["content"] for m in turn_messages if m.get("role") == "user"),
                 calls=[_parse_call(text) for text in calls])
            for turn_messages, calls in zip(entry["question"], answers[entry["id"]], strict=True)
        ]  # fmt: skip
        conversation = Conversation(entry["id"], turns, entry["involved_classes"], entry["initial_config"])
        _execute(conversation, long_context="long_context" in category, run=run)
        conversations.append(conversation)
    return conversations


def chains(conversations: list[Conversation], min_turns: int = 100) -> list[list[Conversation]]:
    """Long sessions: conversations of the same tool domain played one after another
    until a session has at least ``min_turns`` turns (leftovers join the last chain)."""
    return _cut(sorted(conversations, key=lambda c: (tuple(c.classes), c.id)), min_turns)


def mixed_chains(conversations: list[Conversation], min_turns: int = 100) -> list[list[Conversation]]:
    """Long sessions of *different* tasks: conversations taken in turn from each tool
    domain (the involved classes), so no two neighbours share a domain where another is
    left, until a session has at least ``min_turns`` turns (leftovers join the last)."""
    by_domain: dict[tuple[str, ...], list[Conversation]] = {}
    for conversation in sorted(conversations, key=lambda c: c.id):
        by_domain.setdefault(tuple(conversation.classes), []).append(conversation)
    queues = sorted(by_domain.values(), key=len, reverse=True)
    ordered: list[Conversation] = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return _cut(ordered, min_turns)


def _cut(ordered: list[Conversation], min_turns: int) -> list[list[Conversation]]:
    """``ordered`` cut into sessions of at least ``min_turns`` turns (leftovers join the last)."""
    result: list[list[Conversation]] = []
    current: list[Conversation] = []
    for conversation in ordered:
        current.append(conversation)
        if sum(len(c.turns) for c in current) >= min_turns:
            result.append(current)
            current = []
    if current and result:
        result[-1].extend(current)
    elif current:
        result.append(current)
    return result
