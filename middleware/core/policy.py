"""The tool policy: which tool schemas a turn's calls carry, whether every schema is sent
instead, and where cache breakpoints end. No I/O.

Every entrance (chat turns, wrapped chatbots, the endpoint) asks the same questions here,
from the same inputs: the model's caching rules and prices (``Rules``), the tools a turn
disclosed (``DisclosedTools``), the composed prompt's figures (``Figures``) and what this
process has learned of how the model uses tools (``MatchOdds``, ``LoopOdds``). Schemas are
counted by the ``SchemaCounter`` the caller gives (litellm's count, in the shell).

- ``keeps_recent`` / ``grows_recent``: whether recently used tools stay from turn to turn
  (asked while the tools are chosen, before the prompt is composed);
- ``decide``: which matched tools to leave out, and whether every schema costs less;
- ``tail``: where a call's last breakpoint goes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .caching import Rules
from .disclosure import DisclosedTools, MatchOdds

__all__ = [
    "Decision",
    "Figures",
    "GrowthPace",
    "LoopOdds",
    "MemorySize",
    "RunningMean",
    "SchemaCounter",
    "ToolPolicy",
    "per_call_cost",
    "prefer_whole",
    "resends",
    "turn_cost",
    "worth_sending",
    "worth_writing",
]

Schemas = Sequence[Mapping[str, Any]]


class SchemaCounter(Protocol):
    """Counts tool schemas as the provider's tokenizer does."""

    def tokens(self, schemas: Schemas | None) -> int:
        """What the schemas add to a prompt, together."""

    def sizes(self, schemas: Schemas | None) -> list[int]:
        """What each schema adds, summing to ``tokens``."""


def per_call_cost(rules: Rules, *, total: int, stable: int, step: int | None = None) -> float:
    """What a call of ``total`` tokens costs once the cache is warm, in input-token units,
    when its first ``stable`` tokens are the same on every call: the stable part is read (if
    long enough), the rest billed in full, at Anthropic's write price when breakpoints
    cache it (it changes every call, so it is written every call)."""
    step = step or rules.step  # the cache's steps; 1: token for token
    cached = stable - stable % step if stable >= rules.min_tokens and rules.kind != "none" else 0
    price = rules.input_price or 0.0
    if not price:
        return float(total)
    read = (rules.read_price if rules.read_price is not None else price) / price
    rest = (rules.write_price or price) / price if rules.explicit and total >= rules.min_tokens else 1.0
    return cached * read + (total - cached) * rest


def turn_cost(rules: Rules, *, total: int, stable: int, follow: float = 0.0, loaders: float = 0.0) -> float:
    """What a turn whose first call is ``total`` tokens (``stable`` of them the same on every
    call) costs with a warm cache, in input-token units: the first call (``per_call_cost``),
    ``loaders`` loader rounds like it (a schema loaded goes after the stable tools, so what
    follows is paid again), and ``follow`` calls after tool results, which read the whole
    first call where it is long enough to be cached (what they add is left out: it is the
    same whatever the first call carried)."""
    first = per_call_cost(rules, total=total, stable=stable)
    return first * (1 + loaders) + follow * per_call_cost(rules, total=total, stable=total)


# Turns whose gains prefer_whole counts one by one, at most (see there).
GAIN_TURNS = 64


def prefer_whole(
    rules: Rules, *, disclosed: int, disclosed_stable: int, whole: int, whole_stable: int, growth: float = 0.0,
    follow: float = 0.0, loaders: float = 0.0, warm: bool = False, joined: float | None = None,
) -> bool:  # fmt: skip
    """Whether sending every schema (``whole`` tokens, ``whole_stable`` of them the same on
    every call) beats the disclosed prompt: only when the disclosed prompt's stable part is
    too short for the cache and every schema's is not, and the warm-cache cost per call is
    lower. When both can be cached, switching between them would rewrite the cache on each
    switch, which the per-call comparison does not see, so the disclosed prompt stays. Per
    turn (``turn_cost``): the disclosed prompt also pays its ``loaders`` loader rounds, and
    the ``follow`` calls after tool results read every schema's first call whole. ``warm``:
    the session's previous turn sent every schema within the cache's lifetime, so its first
    call is read, not paid again: every schema stays while it costs less per turn.

    ``growth``: tokens a turn adds, on average, to the disclosed stable part (its tools stay
    while it is under the minimum: see ``Catalog.select``'s ``grows``); 0 when it does not
    grow. Every schema then pays only if what it saves per turn, over the turns the stable
    part takes to reach the minimum (the disclosed prompt growing at that pace, so each turn
    saves more than the last), is more than its first call costs over a warm one (it writes,
    or pays in full, what later calls read). Every schema sent sooner saves more: if it will
    pay before the disclosed prompt is cached, it pays from now. ``joined``: what the stable
    part grows by at the next turn, when it is known apart from the pace after it (a first
    turn's matched tools all join at once; later turns mostly call tools already sent)."""
    if not (disclosed_stable < rules.min_tokens <= whole_stable):
        return False
    whole_turn = turn_cost(rules, total=whole, stable=whole_stable, follow=follow)

    def gain(grown: float) -> float:  # per turn, once the disclosed stable part has grown ``grown`` tokens
        size, stable = round(disclosed + grown), round(disclosed_stable + grown)
        return turn_cost(rules, total=size, stable=stable, follow=follow, loaders=loaders) - whole_turn

    first = gain(0)
    if first <= 0:
        return False
    price = rules.input_price
    if not price or warm:  # warm: the session's last turn sent every schema, which the cache holds
        return True
    step = growth if joined is None else joined  # the next turn's growth; the pace after it
    if step >= rules.min_tokens - disclosed_stable:
        turns = 1
    elif growth <= 0:  # it never reaches the minimum
        return True
    else:
        turns = 1 + math.ceil((rules.min_tokens - disclosed_stable - step) / growth)
    read = rules.read_price if rules.read_price is not None else price
    premium = whole_stable * ((rules.write_price or price) - read) / price
    # Until it reaches the minimum, the disclosed prompt grows, and each of its calls pays what it
    # grew by: each turn gains at least what the one before did, so past GAIN_TURNS turns the
    # last gain counted stands for the rest (a lower bound; a slow growth costs no more work).
    saved = 0.0
    for turn in range(min(turns, GAIN_TURNS)):
        last = gain(step + growth * (turn - 1)) if turn else first
        saved += last
        if saved > premium:
            return True
    return saved + last * max(turns - GAIN_TURNS, 0) > premium


def resends(rules: Rules, *, history: int, history_stable: int, composed: int, composed_stable: int, follow: float = 0.0) -> bool:
    """Whether resending the session's own history (``history`` tokens with every schema,
    ``history_stable`` of them sent by the previous call in the same order, so cached)
    costs no more per turn than the composed prompt (``composed``, ``composed_stable``):
    the first call, and the ``follow`` calls after tool results, which read the whole first
    call (what they add is left out: it is the same whichever prompt the turn began with)."""
    if not rules.input_price:
        return False

    def cost(total: int, stable: int, step: int) -> float:
        return per_call_cost(rules, total=total, stable=stable, step=step) + follow * per_call_cost(
            rules, total=total, stable=total, step=1
        )

    # Both sides are what later turns pay at least, since the choice holds for them too: the
    # history token for token (what a cache step leaves unread, the next call reads), the
    # composed prompt at this turn's size (its memory grows while the session is young). One
    # cost is certain and counted: the composed prompt's stable part is the same on every
    # call, so what the cache's last step (OpenAI's 128 tokens) leaves of it is never read.
    return cost(history, history_stable, 1) <= cost(composed, composed_stable, rules.step)


def worth_writing(rules: Rules, chance: float) -> bool:
    """Whether a call should write what it adds to the cache (a breakpoint at its end) when
    another call reads it with probability ``chance``: writing costs the write premium now,
    and saves the difference between the input and the read price on that later call.
    With Anthropic's prices (1.25x to write, 0.1x to read) the break-even is about 28%."""
    price, write = rules.input_price, rules.write_price
    if not rules.explicit or not price or write is None or write <= price:
        return True
    read = rules.read_price if rules.read_price is not None else price
    return chance * (price - read) > write - price


def worth_sending(rules: Rules, chance: float, *, schema: int, shared: int, rest: int, after: int = 0) -> bool:
    """Whether a tool matched to the message is worth sending up front, by the model's prompt
    caching, when the turn calls it with probability ``chance``. Sent, its ``schema`` tokens
    are billed on the turn's first call in full, or at the write price (the matched tools
    change from turn to turn, so they are not read from the cache), and, when it is the
    first tool sent after those that stay, the ``after`` tokens that follow the tools and
    would have been read from the cache (the static system text, the memory that changes
    only now and then) are billed again too. Not sent, a turn that calls it pays a loader
    round: one more call, whose prompt opens with the ``shared`` tokens of the first call's
    (read from the cache) and then pays the ``rest`` (the messages, the other matched
    tools: what follows a schema appended is new) and the schema loaded, in full or at the
    write price. The loader call's own output is not counted. Where ``shared`` is not read
    from the cache (shorter than the model's minimum) or the prices are unknown: always
    (then ``disclosure.match_tools`` alone says how many are sent)."""
    price, read = rules.input_price, rules.read_price
    if not price or read is None or shared < rules.min_tokens:
        return True
    write = rules.write_price if rules.explicit and rules.write_price else price
    return chance * (shared * read + (rest + schema) * write) > schema * write + after * (write - read)


class LoopOdds:
    """How often a call that offers tools is followed by another call of the same turn (its
    reply asked for tools), counted apart for a turn's first call and for the calls after
    tool results, and among those apart again for the calls after a round that only loaded
    schemas (a model that asked for tools mostly calls them next). Each starts as if one
    call of each kind had been seen (even odds), so a process starts out writing, as a model
    that runs long tool loops needs."""

    def __init__(self) -> None:
        # after tool results (and whether they only loaded schemas) -> [followed, calls]
        self._seen = {False: [1, 2], True: [1, 2], "loaded": [1, 2]}

    def chance(self, after_results: bool, *, loaded: bool = False) -> float:
        followed, calls = self._seen["loaded" if after_results and loaded else after_results]
        return followed / calls

    def follow(self) -> float:
        """The calls a turn makes after its first, expected: the first is followed with one
        chance, each later one with another (capped, so a model that always loops counts 20)."""
        return self.chance(False) / (1 - min(self.chance(True), 0.95))

    def note(self, after_results: bool, followed: bool, *, loaded: bool = False) -> None:
        for key in (after_results, "loaded") if after_results and loaded else (after_results,):
            counts = self._seen[key]
            counts[0] += followed
            counts[1] += 1


class RunningMean:
    """The mean of the values noted so far, once ``MIN_SEEN`` were (None before): what a
    process learns from the turns it planned, where too few would say little."""

    MIN_SEEN = 10

    def __init__(self) -> None:
        self._total: float = 0
        self.seen = 0

    def mean(self) -> float | None:
        return self._total / self.seen if self.seen >= self.MIN_SEEN else None

    def note(self, value: float) -> None:
        self._total += value
        self.seen += 1


class GrowthPace(RunningMean):
    """How fast the tools that stay grow after a session's first turn (tokens a turn, over
    the turns seen while they were short of the model's minimum cached prefix; each turn
    that disclosed noted once, with the tokens the turn's tools that stay grew by: where
    every schema went instead, none of them stays). A first turn's tools are mostly filled
    up to the minimum at once (``Catalog.select``); where the prompt cap leaves no room for
    that, its matched tools join at once, and later turns mostly call tools already sent,
    so the list grows far slower than the first turn suggests: a first turn judges every
    schema against the pace seen. Before that, as if the list grew no more after the first
    turn's join: every schema is then sent wherever it alone can be cached, which costs no
    more than a chatbot resending its full history."""


class MemorySize(RunningMean):
    """The memory sections a composed prompt carries at its session's first turn past the
    recent window (the first whose window no longer shows every turn: until then nothing
    was summarized or recalled), without any connector's current state (a prompt showing
    one never resends its history); each session noted once. A young session's composed
    prompt shows little memory yet (a few context keys at most), so its size then is no
    measure of what composing costs from the next turn on: the choice to stop resending
    the history, which holds for every later turn, counts this much memory instead
    (``TurnPlanner``)."""


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What the policy needs of the composed prompt, in tokens."""

    messages: int  # the prompt's messages (its total), without schemas
    stable_system: int  # the system text up to where its memory changes only now and then
    turn: int  # the turn's number in the session
    budget: int | None  # the prompt cap, schemas included


@dataclass(frozen=True, kw_only=True)
class Decision:
    """What ``decide`` chose for a turn's first call: the matched tools left out, and
    whether every schema is sent instead of the disclosed ones."""

    drop: tuple[str, ...] = ()
    whole: bool = False


@dataclass(frozen=True)
class ToolPolicy:
    """The policy for calls to one model: its caching ``rules``, whether Anthropic
    breakpoints are placed (``breakpoints``), how schemas are counted and the static system
    text's tokens (``static_tokens``)."""

    rules: Rules
    breakpoints: bool
    counter: SchemaCounter
    static_tokens: int

    @property
    def caches(self) -> bool:
        """Whether calls are read from a provider's cache at all, as the figures model it: a
        provider whose caching they model, and for Anthropic only with breakpoints (it
        caches nothing unmarked)."""
        return self.rules.kind != "none" and (not self.rules.explicit or self.breakpoints)

    @property
    def marks(self) -> bool:
        """Whether requests carry cache_control breakpoints (Anthropic, when asked for)."""
        return self.breakpoints and self.rules.explicit

    def keeps_recent(self, staying: Schemas, whole_tokens: int) -> bool:
        """Whether recently used tools stay in every call, given the schemas that would stay
        (``staying``: the loader, pinned and recent tools) and every schema's tokens
        (``whole_tokens``). They are kept so that the prompt's opening is read from the
        provider's cache:

        - a model whose caching the figures do not model (``caching.rules`` none): they stay
          where litellm prices its cached reads below its input (DeepSeek, say), else not;
        - Claude without breakpoints: nothing is cached, they do not stay;
        - they stay once they (with the loader and the pinned tools) reach the model's minimum
          cached prefix (the matched tools after them change from turn to turn, so what
          follows is not counted);
        - below it, where a cached token costs a quarter of an input token or less (or the
          prices are unknown), they stay whenever every schema could be cached: the list grows
          into the minimum, and ``decide`` may send every schema instead. Where it costs more
          (gpt-4o-mini: half), they do not: they would be paid in full on every call."""
        rules = self.rules
        if rules.kind == "none":
            return rules.read_price is not None and rules.input_price is not None and rules.read_price < rules.input_price
        if not self.caches:
            return False
        return self.counter.tokens(staying) >= rules.min_tokens or self._pays_below_minimum(whole_tokens)

    def grows_recent(self, staying: Schemas, whole_tokens: int) -> bool:
        """Whether the tools that stay (``staying``, as for ``keeps_recent``) are kept though
        they are still short of the model's minimum cached prefix (a cached token costing a
        quarter or less): then the tools a turn sends up front stay too, so the list reaches
        the minimum after a few turns and is read from the cache from then on, instead of
        being written anew, or every schema sent, until enough tools have been used."""
        if not self.caches:  # also false for caching.rules none
            return False
        return self.counter.tokens(staying) < self.rules.min_tokens and self._pays_below_minimum(whole_tokens)

    def _pays_below_minimum(self, whole_tokens: int) -> bool:
        """Kept tools short of the minimum pay where a cached token costs a quarter or less
        (or the prices are unknown) and every schema could be cached."""
        read, price = self.rules.read_price, self.rules.input_price
        deep = read is None or price is None or read * 4 <= price
        return deep and whole_tokens + self.static_tokens >= self.rules.min_tokens

    def decide(
        self, disclosed: DisclosedTools, figures: Figures, odds: MatchOdds, whole_tokens: int, loop: LoopOdds | None = None,
        *, warm: bool = False, pace: float | None = None,
    ) -> Decision:  # fmt: skip
        """What the turn's first call sends: the disclosed tools less the matched ones the
        model calls too seldom to pay for (``unlikely``), or every schema (``whole_tokens``
        of them) where that costs less (``whole_is_cheaper``; ``pace``: see ``GrowthPace``)."""
        if not self.caches:
            return Decision()
        drop = tuple(self.unlikely(disclosed, figures, odds))
        if drop:
            disclosed = disclosed.without(drop)
        follow = loop.follow() if loop is not None else 0.0
        return Decision(drop=drop, whole=self.whole_is_cheaper(disclosed, figures, whole_tokens, follow=follow,
                                                               loaders=odds.misses(), warm=warm, pace=pace))  # fmt: skip

    def joining(self, disclosed: DisclosedTools) -> int:
        """The tokens of the tools that join the ones that stay this turn (``grown``)."""
        schemas, count = disclosed.schemas(), self.counter.tokens
        return count(schemas[: disclosed.stable_tools]) - count(schemas[: disclosed.stable_tools - disclosed.grown])

    def unlikely(self, disclosed: DisclosedTools, figures: Figures, odds: MatchOdds) -> list[str]:
        """The tools matched to the message, and their companions, that the model calls too
        seldom at their rank (learned: ``odds``) to pay for what they cost with this model's
        prompt caching against the loader round they would spare (see ``worth_sending``):
        best first, the first sent also paying, with breakpoints, for the cached system text
        it makes the provider write again. None while the matched tools join the ones that
        stay (``grows_recent``), nor where nothing is cached."""
        if disclosed.grown or not (disclosed.ranked or disclosed.companions) or not self.caches:
            return []
        rules, every = self.rules, self.counter.sizes(disclosed.schemas())
        sizes, stable = dict(zip(disclosed.names, every[1:], strict=True)), sum(every[: disclosed.stable_tools])
        # What a call after a loader round shares with the first: with breakpoints, up to the
        # last tool that stays; without, every schema the first call sent (the new one comes after).
        shared = stable if rules.explicit else sum(every)
        rest = figures.messages + sum(every) - shared
        # The cached system text the first tool sent makes the provider write again: where
        # breakpoints mark it (Anthropic). Prefix caching reads on past the tools only in whole
        # steps (OpenAI's 128 tokens), as far as nothing changed: too little to count on.
        after = figures.stable_system if rules.explicit else 0
        dropped = []
        offered = [*enumerate(disclosed.ranked), *((odds.COMPANION, name) for name in disclosed.companions)]
        for rank, name in offered:
            if worth_sending(
                rules, odds.chance(disclosed.settled, rank), schema=sizes[name], shared=shared, rest=rest, after=after
            ):
                after = 0  # the first sent makes the provider write the rest again
            else:
                dropped.append(name)
        return dropped

    def whole_is_cheaper(
        self, disclosed: DisclosedTools, figures: Figures, whole_tokens: int, *, follow: float = 0.0, loaders: float = 0.0,
        warm: bool = False, pace: float | None = None,
    ) -> bool:  # fmt: skip
        """Whether every schema costs less than the disclosed ones with this model's prompt
        caching: when the disclosed prompt's stable part is too short to be cached and every
        schema's is not (a model that caches nothing under 4,096 tokens, say), comparing both
        per call with a warm cache, and, while the stable part grows into the minimum
        (``grows_recent``), over the turns it will take at the session's pace so far (see
        ``prefer_whole``)."""
        if not self.caches:
            return False
        count, schemas = self.counter.tokens, disclosed.schemas()
        # What this call reads: the tools that stayed from the previous turn, and the static
        # system text only when no tools that changed (matched, or joining) come before it.
        kept = count(schemas[: disclosed.stable_tools - disclosed.grown])
        growth, step = 0.0, None
        if disclosed.growing:  # this turn's, or the pace so far: the tools that joined (not pinned) over the turns
            stable = count(schemas[: disclosed.stable_tools])
            joined = stable - count(schemas[: 1 + disclosed.pinned])
            growth = max(stable - kept, joined / max(figures.turn, 1))
            if figures.turn <= 1:  # a first turn: its tools join now, then the pace seen (none yet: see GrowthPace)
                step, growth = stable - kept, pace if pace is not None else 0.0
        if len(disclosed.names) == disclosed.stable and not disclosed.grown:
            kept += self.static_tokens
        whole = whole_tokens + figures.messages
        cheaper = prefer_whole(self.rules, disclosed=count(schemas) + figures.messages, disclosed_stable=kept, whole=whole,
                               whole_stable=whole_tokens + self.static_tokens, growth=growth, follow=follow,
                               loaders=loaders, warm=warm, joined=step)  # fmt: skip
        return cheaper and (figures.budget is None or whole <= figures.budget)

    def tail(self, chance: float, *, marked: int | None, last: int) -> int | None:
        """Where a call's breakpoints end among its messages (``last``: its last message's
        index): at its last message only when another call of the turn is likely enough
        (``chance``) to read what that writes; else where the previous call's ended
        (``marked``: read, not written again), or, on a first call (None), at the stable
        memory alone."""
        return last if worth_writing(self.rules, chance) else marked
