"""The turn plan: what a turn sends, computed once and followed by every entrance. No I/O.

A plan holds the composed prompt, the tools the turn discloses (or every schema) and the
tool policy of the model called. From it each call's request follows: the prompt, then the
turn's tool loop so far, with the disclosed schemas and, for Anthropic, cache breakpoints.
What the model asks of the loader, or of a known tool whose schema was not sent, the plan
answers itself (``answer``): the same words whether ``chat()``, a wrapped chatbot or the
endpoint made the call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.caching import referenced_tools, with_breakpoints
from ..core.disclosure import Companions, DisclosedTools, baseline_messages
from ..core.policy import LoopOdds, ToolPolicy
from ..core.state import Prompt
from ..core.text import parse_json
from ..core.turnloop import PendingCall

__all__ = ["Request", "TurnPlan", "arguments_of", "rebased"]

Messages = list[dict[str, Any]]
Schemas = list[dict[str, Any]]


def arguments_of(text: str) -> Any:
    """A tool call's arguments as JSON, or None when they are not JSON."""
    try:
        return parse_json(text) if text else {}
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Request:
    """One call's request: its messages and tool schemas, breakpoints included."""

    messages: Messages
    schemas: Schemas | None
    tail: int | None  # the message its breakpoints end at (None: none does)


@dataclass(frozen=True, kw_only=True)
class TurnPlan:
    """What one turn sends (see the module docstring). ``tools`` grows as the turn loads
    schemas; everything else stays as planned."""

    session_id: str
    message: str  # the current user message's text
    model: str
    prompt: Prompt  # the composed prompt: its messages open every call of the turn
    policy: ToolPolicy
    static_prefix: str  # the system text that stays the same from call to call (ours, or the client's)
    every: tuple[dict[str, Any], ...]  # every schema, as given: what a full-history chatbot sends
    full_tools_tokens: int  # their tokens
    tools: DisclosedTools | None  # the disclosed tools; None: every schema is sent
    selected: DisclosedTools | None = None  # what was matched up front, before the policy left any out
    kept: tuple[str, ...] = ()  # tools the turn keeps from now on as if it had called them
    max_rounds: int = 8  # tool rounds a turn may run (config max_tool_rounds)
    # The schema tokens the prompt was composed beside (what the turn matched up front): a
    # turn that spans requests composes its prompt alike on each, whatever it loaded since.
    schema_tokens: int = 0
    composes: bool = False  # the session's history could have been resent, and this turn composes instead
    resent: bool = False  # the prompt resends the session's history: the next turn reads all of it
    # How often this process has seen a call followed by another of its turn: where breakpoints end.
    loop_odds: LoopOdds = dataclasses.field(default_factory=LoopOdds)
    # The loader's answers reference what they load, sent deferred (caching.tool_references).
    refers: bool = False
    # Given tools and the names sent already, those usually called with them and not sent
    # (disclosure.co_use_tools): a load adds the loaded ones'.
    companions: Companions | None = None

    @property
    def loader(self) -> str | None:
        """The loader's name, when the turn discloses tools."""
        return self.tools.catalog.loader_name if self.tools is not None else None

    def schemas(self) -> Schemas | None:
        """The schemas of the next call: the disclosed ones, or every one."""
        return self.tools.schemas() if self.tools is not None else list(self.every) or None

    def request(self, messages: Sequence[Mapping[str, Any]], *, marked: int | None, loaded: bool = False) -> Request:
        """The next call's request: ``messages`` (the prompt, then the tool loop so far) with
        the schemas and, where the policy places them, the breakpoints: the tools that stay,
        the static system text (or the notes and keys set earlier after it), the memory that
        changes only now and then, and the last message when another call of the turn is
        likely enough (``loop_odds``; ``loaded``: the last round only loaded schemas) to read
        it, else where the previous call's ended (``marked``)."""
        sent, schemas = [dict(m) for m in messages], self.schemas()
        if schemas and not self.refers and any("defer_loading" in schema for schema in schemas):  # restored for another model
            schemas = [{k: v for k, v in schema.items() if k != "defer_loading"} for schema in schemas]
        sent = unreferenced(sent, {str(s["function"]["name"]) for s in schemas or () if s.get("defer_loading")})
        if not self.policy.marks:
            return Request(sent, schemas, None)
        stable = self.tools.stable_tools if self.tools is not None else len(schemas or ())
        chance = self.loop_odds.chance(len(sent) > len(self.prompt.messages), loaded=loaded) if schemas else 0.0
        # A resent history is read by the next turn as well: its calls end their breakpoints at their last message.
        tail = len(sent) - 1 if self.resent else self.policy.tail(chance, marked=marked, last=len(sent) - 1)
        sent, schemas = with_breakpoints(sent, schemas, static_prefix=self.static_prefix, stable_tools=stable,
                                         stable_system=self.prompt.stable_system_chars,
                                         settled_system=self.prompt.settled_system_chars, tail=tail)  # fmt: skip
        return Request(sent, schemas, tail)

    def answer(
        self, call: PendingCall, problem: Callable[[str, Any], str | None], room: Callable[[], int | None] | None = None
    ) -> str | list[dict[str, str]] | None:
        """What the turn answers itself for ``call``, or None when the call is to be run (by
        the entrance's tools, or the client's). The loader's calls are answered with what
        they loaded; a known tool called without its schema is loaded, and run when its
        arguments fit (``problem(name, arguments)`` says what is wrong with them, or None),
        else answered with a line that says what did not fit: never an opaque error. With
        ``room`` (the tokens the budget has left, asked only when a schema would join), only
        schemas that fit join: the loader says which had no room, and a tool called without
        its schema and without room for it does not run. Where the plan ``refers``, a load that
        found and loaded every name asked for is answered with references to what it loaded
        (``DisclosedTools.load_referenced``)."""
        tools = self.tools
        if tools is None:
            return None
        if call.name == tools.catalog.loader_name:
            load = tools.load_referenced if self.refers else tools.load
            return load(arguments_of(call.arguments), room() if room else None, self.policy.counter.tokens,
                        companions=self.companions)  # fmt: skip
        if call.name in tools.catalog and call.name not in tools:
            added, _, _ = tools.add_within([call.name], room() if room else None, self.policy.counter.tokens)
            if not added:
                return (f"The schema of {call.name} was not sent, and the prompt's token budget has no room for it: "
                        f"{call.name} did not run.")  # fmt: skip
            wrong = problem(call.name, call.arguments)
            if wrong is not None:
                return tools.unsent(call.name, wrong[:300])
        return None

    def full_tokens(
        self, loop: Sequence[Mapping[str, Any]], ran: Sequence[str], count: Callable[[Mapping[str, Any]], int]
    ) -> int:
        """What the full-history chatbot would send for a call whose tool loop is ``loop``:
        every schema and the same tool messages, less the loader's (``ran``: the calls that
        ran, by ``replies.call_key``)."""
        baseline = loop if self.tools is None else baseline_messages(loop, ran)
        return self.prompt.full_history_tokens + sum(map(count, baseline)) + self.full_tools_tokens

    def tools_line(self, schemas: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
        """The ``tools`` field of a usage line for a call that carried ``schemas``."""
        if not self.every:
            return None
        line: dict[str, Any] = {"sent": len(schemas or ()), "of": len(self.every), "full_tokens": self.full_tools_tokens}
        if self.tools is not None:
            line["loaded"] = len(self.tools.loaded)
        if self.resent:
            line["resent"] = True  # the prompt resent the session's history (caching.resend_history)
        return line

    def sent_names(self) -> tuple[str, ...]:
        """The tools whose schemas the turn sent, in order (the loader aside)."""
        if self.tools is not None:
            return tuple(self.tools.names)
        return tuple(str((schema.get("function") or {}).get("name")) for schema in self.every)


def unreferenced(messages: list[dict[str, Any]], deferred: set[str]) -> list[dict[str, Any]]:
    """``messages`` with each loader answer that references a tool this request does not send
    deferred (a turn resumed with other tools, or for another model) put in words: a reference
    the provider cannot expand would have it refuse the request."""
    out = []
    for message in messages:
        names = referenced_tools(message.get("content")) if message.get("role") == "tool" else []
        if not deferred.issuperset(names):
            message = {**message, "content": f"Loaded {', '.join(names)}: call them in your next step."}
        out.append(message)
    return out


def rebased(prompt: Prompt, system: str, *, static_prefix: str, count: Callable[[str, str], int]) -> Prompt:
    """``prompt`` with ``system`` (a client's own system text) before its memory sections
    instead of the static prefix; ``count(role, content)`` counts a message."""
    tail = prompt.messages[0]["content"][len(static_prefix) :]
    memory = tail.strip("\n")
    content = f"{system}\n{memory}" if memory else system
    own = count("system", system)
    tokens = count("system", content) - prompt.tokens.notes - prompt.tokens.context
    messages = [{"role": "system", "content": content}, *prompt.messages[1:]]
    breakdown = dataclasses.replace(prompt.tokens, system=tokens)
    full = prompt.full_history_tokens - prompt.tokens.system + own
    # The memory's first character moves to just after the client's text and one line break
    # (however many stood before it), and the breakpoints' ends with it.
    start = len(static_prefix) + len(tail) - len(tail.lstrip("\n"))
    shift = len(system) + 1 - start if memory else len(system) - len(static_prefix)

    def moved(end: int) -> int:
        return min(max(end + shift, len(system)), len(content))

    settled = moved(prompt.settled_system_chars) if prompt.settled_system_chars else 0
    return dataclasses.replace(prompt, messages=messages, tokens=breakdown, full_history_tokens=full,
                               stable_system_chars=moved(prompt.stable_system_chars), settled_system_chars=settled)  # fmt: skip
