"""What a provider would read from its prompt cache, and what a prompt then costs. No I/O.

A prompt is modelled as a sequence of *blocks* in the order the provider caches them
(tool schemas, then the system text, then the messages), each with its token count. A
provider's cache holds prefixes of earlier requests; a request reads the longest cached
prefix its rules allow, may write a new one, and pays for the rest in full. The rules
modelled, from each provider's documentation:

- **OpenAI** (automatic prefix caching): prompts of 1,024 tokens or more are cached
  automatically; a request reads the longest prefix it shares with a recent request, in
  128-token increments (1,024, 1,152, 1,280, ...); cached input is billed at the model's
  discounted price (``cache_read_input_token_cost``: half the input price for gpt-4o-mini,
  a tenth for gpt-5-mini); writing costs nothing extra.
- **Anthropic** (explicit ``cache_control`` breakpoints, at most 4): the cache order is
  tools, system, messages. A request reads the longest prefix that an earlier request
  wrote and that ends at a block boundary no more than 20 blocks before one of its own
  breakpoints; it writes the prefix up to its last breakpoint (the part after what it
  read) at the cache-write price (1.25x the input price for the 5-minute cache), if that
  prefix reaches the model's minimum cacheable length (``prompt_cache_min_tokens``: 1,024
  for Sonnet, 4,096 for Haiku 4.5); reads cost about a tenth of the input price. A request
  without breakpoints caches nothing.
- **Gemini** (implicit caching): the prefix shared with a recent request is read at the
  cache-read price once it reaches the model's minimum (1,024 tokens for Flash, 2,048 for
  Pro); no write premium, no step.
- **none**: nothing is cached (providers without documented prompt caching).

Every rule assumes the cache is warm: a session's previous call came less than
``ttl`` seconds ago (5 minutes by default: Anthropic's cache lives 5 minutes from its
last use, OpenAI's 5 to 10 minutes of inactivity). A cold cache reads nothing.
Matching is per block: a block that changed is not read even if its first tokens are the
same, which undercounts what OpenAI and Gemini (token-granular) would read, never overcounts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

__all__ = [
    "ANTHROPIC_LOOKBACK",
    "OPENAI_MIN_TOKENS",
    "OPENAI_STEP",
    "Block",
    "CacheState",
    "Rules",
    "Split",
    "blocks",
    "growing_blocks",
    "referenced_tools",
    "request_parts",
    "rules_for",
    "split",
    "with_breakpoints",
]

Kind = Literal["openai", "anthropic", "gemini", "none"]
KINDS: tuple[Kind, ...] = ("openai", "anthropic", "gemini", "none")

OPENAI_MIN_TOKENS = 1024
OPENAI_STEP = 128
ANTHROPIC_LOOKBACK = 20  # blocks before a breakpoint at which Anthropic looks for a hit
ANTHROPIC_WRITE_PREMIUM = 1.25  # the 5-minute cache's write price, as a multiple of input
_DEFAULT_MIN = {"openai": OPENAI_MIN_TOKENS, "anthropic": 1024, "gemini": 1024, "none": 0}
# Entries kept per session: the block prefixes of this many recent calls.
_REMEMBERED_CALLS = 16


@dataclass(frozen=True, kw_only=True)
class Rules:
    """One model's caching rules and prices (USD per token; None when unknown)."""

    kind: Kind
    min_tokens: int = 0
    input_price: float | None = None
    read_price: float | None = None
    write_price: float | None = None

    @property
    def step(self) -> int:
        return OPENAI_STEP if self.kind == "openai" else 1

    @property
    def explicit(self) -> bool:
        """Breakpoints decide what is cached (Anthropic); otherwise any shared prefix is."""
        return self.kind == "anthropic"


def rules_for(kind: Kind, info: Mapping[str, object] | None) -> Rules:
    """The rules of ``kind`` with the prices and minimum of a price-map entry (litellm's
    ``model_cost`` fields); a missing read price means no discount, a missing Anthropic
    write price is 1.25x the input price."""
    info = info or {}
    price = _number(info.get("input_cost_per_token"))
    read = _number(info.get("cache_read_input_token_cost"))
    write = _number(info.get("cache_creation_input_token_cost"))
    if kind == "anthropic" and write is None and price is not None:
        write = price * ANTHROPIC_WRITE_PREMIUM
    minimum = info.get("prompt_cache_min_tokens")
    return Rules(
        kind=kind,
        min_tokens=minimum if isinstance(minimum, int) and minimum > 0 else _DEFAULT_MIN[kind],
        input_price=price,
        read_price=read if read is not None else price,
        write_price=write if kind == "anthropic" else price,
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Block:
    """One cacheable unit of a prompt: ``key`` names the prefix that ends with it (it
    depends on every block before), ``end`` is the prefix's size in tokens."""

    key: int
    tokens: int
    end: int
    breakpoint: bool = False


def blocks(parts: Iterable[tuple[object, int, bool]]) -> tuple[Block, ...]:
    """Blocks from ``(identity, tokens, breakpoint)`` parts in cache order; ``identity`` is
    anything hashable that changes when the block's text does (the text itself will do)."""
    out: list[Block] = []
    key, end = 0, 0
    for identity, tokens, breakpoint in parts:
        key = hash((key, identity))
        end += tokens
        out.append(Block(key, tokens, end, breakpoint))
    return tuple(out)


def growing_blocks(previous: int, total: int, *, priming: int = 0, breakpoints: bool = False) -> tuple[Block, ...]:
    """A prompt that only grows (a full history) of ``total`` tokens, plus ``priming`` that
    no cache holds: the previous call's ``previous`` tokens are its prefix, unchanged, and
    the rest is new. A prefix is named by its length alone, so it matches whatever the
    earlier call's blocks were. With ``breakpoints`` both ends carry one (a full-history
    chatbot that caches its conversation as Anthropic advises)."""
    ends = [previous, total] if 0 < previous < total else [total]
    out, start = [], 0
    for end in ends:
        out.append(Block(hash(("growing", end)), end - start, end, breakpoints))
        start = end
    if priming:
        out.append(Block(hash(("priming", total)), priming, total + priming))
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class Split:
    """A prompt's tokens by how they are billed: read from the cache, written to it
    (Anthropic's premium), and billed in full."""

    read: int = 0
    written: int = 0
    uncached: int = 0

    @property
    def total(self) -> int:
        return self.read + self.written + self.uncached

    def cost(self, rules: Rules) -> float | None:
        """USD for these prompt tokens under ``rules``, or None when a price is unknown."""
        if rules.input_price is None:
            return None
        read = rules.read_price if rules.read_price is not None else rules.input_price
        write = rules.write_price if rules.write_price is not None else rules.input_price
        return self.read * read + self.written * write + self.uncached * rules.input_price

    def as_dict(self) -> dict[str, int]:
        return {"read": self.read, "written": self.written, "uncached": self.uncached}


@dataclass(frozen=True, kw_only=True)
class CacheState:
    """What a provider holds for one session: prefix key -> (tokens, call number), and
    when the session's last call was made."""

    entries: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    calls: int = 0
    at: float | None = None


def _readable(prompt: Sequence[Block], rules: Rules) -> Iterable[Block]:
    """The blocks at whose end a read may stop."""
    if not rules.explicit:
        return prompt
    marks = [i for i, block in enumerate(prompt) if block.breakpoint]
    # Anthropic looks back from each breakpoint over about 20 block boundaries.
    return (prompt[i] for i in sorted({j for m in marks for j in range(max(0, m - ANTHROPIC_LOOKBACK), m + 1)}))


def split(prompt: Sequence[Block], state: CacheState, rules: Rules, *, now: float, ttl: float) -> tuple[Split, CacheState]:
    """How ``prompt`` is billed given what the cache holds, and what it holds afterwards."""
    total = prompt[-1].end if prompt else 0
    warm = state.at is not None and now - state.at <= ttl
    entries = dict(state.entries) if warm else {}
    if rules.kind == "none" or not prompt:
        return Split(uncached=total), CacheState(entries={}, calls=state.calls + 1, at=now)
    hits = [block.end for block in _readable(prompt, rules) if block.key in entries]
    read = max(hits, default=0)
    if read < rules.min_tokens:
        read = 0
    read -= read % rules.step
    written = 0
    calls = state.calls + 1
    if rules.explicit:
        cached = [block for block in prompt if block.breakpoint and block.end >= rules.min_tokens]
        if cached:
            written = max(cached[-1].end - read, 0)
        new = {block.key: (block.end, calls) for block in cached}
    else:
        new = {block.key: (block.end, calls) for block in prompt if block.end >= rules.min_tokens}
    # What was read is refreshed (it stays as long as it is used); the rest ages out.
    entries.update({block.key: (block.end, calls) for block in prompt if block.key in entries and block.end <= read})
    entries.update(new)
    kept = {key: value for key, value in entries.items() if value[1] > calls - _REMEMBERED_CALLS}
    return Split(read=read, written=written, uncached=total - read - written), CacheState(entries=kept, calls=calls, at=now)


# --- requests ----------------------------------------------------------------------

EPHEMERAL = {"type": "ephemeral"}


def _marked(message: Mapping[str, Any]) -> bool:
    """Whether a message carries a breakpoint (on itself, or on its last content part)."""
    content = message.get("content")
    last = content[-1] if isinstance(content, list) and content else None
    return "cache_control" in message or (isinstance(last, Mapping) and "cache_control" in last)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", part.get("tool_name", ""))) for part in content if isinstance(part, Mapping))
    return content if isinstance(content, str) else ""


def with_breakpoints(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    *,
    static_prefix: str,
    stable_tools: int,
    stable_system: int = 0,
    settled_system: int = 0,
    tail: int | None = -1,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The request with Anthropic ``cache_control`` breakpoints where litellm passes them on:
    the last of the first ``stable_tools`` tool schemas (what the next turn sends again),
    the end of the static system text (its own system block), the end of the system text's
    first ``stable_system`` characters when they go past it (the memory that changes only
    now and then: the next turn reads it when it did not change), and message ``tail`` (its
    index; by default the last message, so the later calls of a turn's tool loop read
    everything before them; None: no message). At most Anthropic's four. With
    ``settled_system`` past the static text and short of ``stable_system`` (the notes and
    the keys set earlier, which change less often than the Current Context after them), the
    breakpoint moves from the end of the static text to there: a turn whose Current Context
    changed reads the memory up to it, where the static text alone was a few tokens."""
    marked_tools = [dict(tool) for tool in tools] if tools else None
    if marked_tools and stable_tools > 0:
        index = min(stable_tools, len(marked_tools)) - 1
        marked_tools[index] = {**marked_tools[index], "cache_control": EPHEMERAL}
    out = [dict(message) for message in messages]
    first = out[0] if out else None
    content = first.get("content") if first else None
    if (
        first
        and first.get("role") == "system"
        and isinstance(content, str)
        and static_prefix
        and content.startswith(static_prefix)
    ):
        settled = len(static_prefix) < settled_system < min(stable_system, len(content))
        cuts = [len(static_prefix), *([settled_system] if settled else ()),
                *([stable_system] if len(static_prefix) < stable_system < len(content) else ())]  # fmt: skip
        pieces = [(content[a:b], not (settled and not a)) for a, b in pairwise([0, *cuts])]
        # The rest is marked where all of it changes only now and then.
        pieces.append((content[cuts[-1] :], stable_system >= len(content) > len(static_prefix)))
        parts: list[dict[str, Any]] = []
        carry = ""
        for text, marked in pieces:
            text = carry + text
            if not text.strip():  # whitespace alone is no block (Anthropic refuses one): it joins the next, unmarked
                carry = text
                continue
            carry = ""
            parts.append({"type": "text", "text": text, **({"cache_control": EPHEMERAL} if marked else {})})
        if parts:
            first["content"] = parts
    index = tail % len(out) if tail is not None and -len(out) <= tail < len(out) else 0
    last = out[index] if index else None  # never the first message
    if last is not None:
        if last.get("role") == "tool":
            last["cache_control"] = EPHEMERAL
        elif isinstance(last.get("content"), str) and last["content"]:
            last["content"] = [{"type": "text", "text": last["content"], "cache_control": EPHEMERAL}]
    return out, marked_tools


def _system_blocks(
    message: Mapping[str, Any], text: str, tokens: int, count: Callable[[Mapping[str, Any]], int], *, static_prefix: str,
    static_tokens: int,
) -> list[tuple[object, int, bool]]:  # fmt: skip
    """The system message as blocks: its static prefix, then each further content part (or
    the rest of its text when it is a string), each ending where the text so far does and
    named by its own text (the block's key names the prefix: see ``blocks``)."""
    content = message.get("content")
    pieces = [p for p in content if isinstance(p, Mapping)] if isinstance(content, list) else []
    static = min(static_tokens, tokens)
    if len(pieces) < 2 or _text(pieces[:1]) != static_prefix:
        head = pieces[0] if pieces else {}
        return [(("system", static_prefix), static, "cache_control" in head),
                (("system", text[len(static_prefix) :]), tokens - static, len(pieces) > 1 and _marked(message))]  # fmt: skip
    out: list[tuple[object, int, bool]] = [(("system", static_prefix), static, "cache_control" in pieces[0])]
    so_far, counted = static_prefix, static
    for number, piece in enumerate(pieces[1:], start=2):
        own = str(piece.get("text", ""))
        so_far += own
        upto = tokens if number == len(pieces) else min(max(count({"role": "system", "content": so_far}), counted), tokens)
        out.append((("system", own), upto - counted, "cache_control" in piece))
        counted = upto
    return out


def referenced_tools(content: Any) -> list[str]:
    """The tool names a message's content references (Anthropic's ``tool_reference`` parts,
    which a loader's answer holds), in order; none where the content is text."""
    if not isinstance(content, list):
        return []
    return [str(part.get("tool_name")) for part in content if isinstance(part, Mapping) and part.get("type") == "tool_reference"]


def _referenced(content: Any, deferred: Mapping[str, int]) -> int:
    """The tokens of the deferred schemas a message's tool references name (``deferred``:
    their sizes by name), expanded where they stand."""
    return sum(deferred.get(name, 0) for name in referenced_tools(content))


def request_parts(
    tools: Sequence[Mapping[str, Any]] | None,
    tool_sizes: Sequence[int],
    messages: Sequence[Mapping[str, Any]],
    count: Callable[[Mapping[str, Any]], int],
    *,
    static_prefix: str = "",
    static_tokens: int = 0,
    priming: int = 0,
) -> list[tuple[object, int, bool]]:
    """A request as ``(identity, tokens, breakpoint)`` parts in cache order (``blocks``
    makes its cache blocks of them): each tool schema (``tool_sizes``: what each adds), the
    system message as its static prefix and the rest, then each message (``count`` gives
    its tokens), then ``priming`` (the reply priming) as a part of its own. Each identity
    names that part's own text, not the prefix that ends with it; the priming is named
    "priming". Breakpoints are where the request carries ``cache_control``. A deferred tool
    (``defer_loading``) is no part of the prefix: its schema counts where a tool result
    references it (``tool_reference``), as Anthropic expands it there."""
    parts: list[tuple[object, int, bool]] = []
    deferred: dict[str, int] = {}
    for tool, size in zip(tools or (), tool_sizes, strict=True):
        if tool.get("defer_loading"):
            deferred[str((tool.get("function") or {}).get("name"))] = size
            continue
        identity = repr(sorted((k, repr(v)) for k, v in tool.items() if k != "cache_control"))
        parts.append((identity, size, "cache_control" in tool))
    for index, message in enumerate(messages):
        tokens, text = count(message) + _referenced(message.get("content"), deferred), _text(message.get("content"))
        if index == 0 and message.get("role") == "system" and static_prefix and text.startswith(static_prefix):
            parts += _system_blocks(message, text, tokens, count, static_prefix=static_prefix, static_tokens=static_tokens)
            continue
        identity = repr((message.get("role"), text, message.get("tool_calls"), message.get("tool_call_id")))
        parts.append((identity, tokens, _marked(message)))
    if parts and priming:  # what primes the reply is never part of a cached prefix
        parts.append(("priming", priming, False))
    return parts
