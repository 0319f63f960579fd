"""The tool policy: which schemas a turn sends, whether every schema costs less, where
breakpoints end. Hand-worked cases under each provider's rules and prices, in tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from middleware import Config
from middleware.core.caching import Rules, rules_for
from middleware.core.composer import Composer
from middleware.core.disclosure import Catalog, DisclosedTools, MatchOdds, entry_of
from middleware.core.policy import Decision, Figures, GrowthPace, LoopOdds, ToolPolicy, worth_sending, worth_writing
from middleware.session.tools import SchemaCount, ToolPlanner
from middleware.tokens import get_tokenizer
from middleware.usage.pricing import Billing
from tests.test_caching import GPT_4O_MINI, SONNET

HAIKU = rules_for("anthropic", {"input_cost_per_token": 1e-06, "cache_read_input_token_cost": 1e-07,
                                "cache_creation_input_token_cost": 1.25e-06, "prompt_cache_min_tokens": 4096})  # fmt: skip
# gpt-5-mini's caching: a 1,024-token minimum in 128-token steps, reads at a tenth.
MINI = rules_for("openai", {"input_cost_per_token": 2.5e-07, "cache_read_input_token_cost": 2.5e-08})


def policy_for(config: Config, model: str = "m") -> ToolPolicy:
    """The policy an engine of ``config`` follows for ``model``: its caching rules, litellm's count, its static text."""
    tokenizer = get_tokenizer(config.tokens.model)
    return ToolPolicy(Billing(config, tokenizer).rules(model), config.caching.anthropic_breakpoints,
                      SchemaCount(config.tokens.model), Composer(config, tokenizer).static_tokens)  # fmt: skip


class Sized:
    """A schema counter for hand-worked cases: each schema's size is its ``x-tokens`` field."""

    def sizes(self, schemas: Sequence[Mapping[str, Any]] | None) -> list[int]:
        return [int(schema.get("x-tokens", 0)) for schema in schemas or ()]

    def tokens(self, schemas: Sequence[Mapping[str, Any]] | None) -> int:
        return sum(self.sizes(schemas))


def sized_catalog(sizes: Mapping[str, int], loader: int = 200) -> Catalog:
    """A catalog whose tools (and loader) carry their sizes for ``Sized``."""
    entries = [entry_of({"type": "function", "x-tokens": size, "function": {"name": name, "description": f"{name} things."}}, "g")
               for name, size in sizes.items()]  # fmt: skip
    catalog = Catalog(entries)
    catalog.loader_schema = {**catalog.loader_schema, "x-tokens": loader}
    return catalog


def test_a_breakpoint_is_written_only_when_a_later_call_is_likely_enough_to_read_it() -> None:
    """Sonnet: writing costs 0.25 of the input price more, a read saves 0.9 of it, so the
    break-even chance is 0.25 / 0.9 = 27.8%. Without a write premium (OpenAI) writing is free."""
    assert worth_writing(SONNET, 0.28) and not worth_writing(SONNET, 0.27)
    assert worth_writing(GPT_4O_MINI, 0.0)
    odds = LoopOdds()
    assert odds.chance(True) == odds.chance(False) == 0.5  # as if one call of each kind was seen
    for _ in range(3):
        odds.note(True, False)
    odds.note(False, True)
    assert odds.chance(True) == pytest.approx(1 / 5) and odds.chance(False) == pytest.approx(2 / 3)


def test_a_matched_tool_is_sent_when_its_chance_pays_for_it_against_a_loader_round() -> None:
    """Worked by hand, per token. Sonnet, a 100-token schema after 2,000 tokens that stay
    and 600 more: sent, it is written (100 x 3.75e-6 = 3.75e-4); not sent, a turn that calls
    it makes one more call reading the 2,000 (6e-4) and writing the 600 and the schema
    (700 x 3.75e-6 = 2.625e-3), 3.225e-3 in all: the break-even chance is 11.6%. When it is
    the first tool sent after those that stay, the 200 cached tokens after the tools are
    written instead of read too (200 x 3.45e-6 = 6.9e-4): 1.065e-3, break-even 33.0%.
    gpt-4o-mini, the same sizes: 1.5e-5 against 1.5e-4 + 1.05e-4, break-even 5.9%. Where
    the shared tokens are short of the model's minimum nothing is cached, and with no
    prices nothing can be weighed: always sent (disclosure.match_tools decides)."""
    sizes = {"schema": 100, "shared": 2000, "rest": 600}
    assert worth_sending(SONNET, 0.12, **sizes) and not worth_sending(SONNET, 0.11, **sizes)
    assert worth_sending(SONNET, 0.34, **sizes, after=200) and not worth_sending(SONNET, 0.32, **sizes, after=200)
    assert worth_sending(GPT_4O_MINI, 0.06, **sizes) and not worth_sending(GPT_4O_MINI, 0.058, **sizes)
    assert worth_sending(SONNET, 0.0, schema=100, shared=1000, rest=600)
    assert worth_sending(Rules(kind="openai", min_tokens=1024), 0.0, **sizes)


def test_per_call_cost_reads_the_stable_part_once_it_is_long_enough() -> None:
    """In input-token units, warm cache: OpenAI reads whole 128-token steps of the stable part
    at its discount; Anthropic writes the changing rest at 1.25x; below the minimum nothing is read."""
    from middleware.core.policy import per_call_cost

    assert per_call_cost(GPT_4O_MINI, total=3000, stable=2000) == pytest.approx(1920 * 0.5 + 1080)
    assert per_call_cost(SONNET, total=3000, stable=2000) == pytest.approx(2000 * 0.1 + 1000 * 1.25)
    haiku = rules_for(
        "anthropic", {"input_cost_per_token": 1e-06, "cache_read_input_token_cost": 1e-07, "prompt_cache_min_tokens": 4096}
    )
    assert per_call_cost(haiku, total=3000, stable=2800) == 3000  # under 4,096: nothing cached


def test_every_schema_is_preferred_only_when_it_alone_can_be_cached_and_costs_less() -> None:
    """Haiku 4.5: a 2,800-token disclosed prefix is never cached, every schema (5,000) is, and
    costs less. Sonnet: both can be cached, so the disclosed prompt stays (no switching back
    and forth, each switch rewriting the cache). gpt-4o-mini: every schema can be cached but,
    at half price, costs more than a small disclosed prompt."""
    from middleware.core.policy import prefer_whole

    haiku = rules_for("anthropic", {"input_cost_per_token": 1e-06, "cache_read_input_token_cost": 1e-07,
                                    "cache_creation_input_token_cost": 1.25e-06, "prompt_cache_min_tokens": 4096})  # fmt: skip
    sizes = {"disclosed": 3100, "disclosed_stable": 2800, "whole": 5300, "whole_stable": 5000}
    assert prefer_whole(haiku, **sizes)
    assert not prefer_whole(SONNET, **sizes)
    assert not prefer_whole(GPT_4O_MINI, disclosed=800, disclosed_stable=250, whole=2600, whole_stable=2300)


def test_every_schema_is_not_sent_while_the_disclosed_prefix_soon_grows_into_the_minimum() -> None:
    """Hand-worked, Haiku 4.5 (4,096 minimum; input $1, read $0.10, write $1.25 per million):
    the disclosed prompt (3,100 tokens, 2,800 stable) costs 3,100 a call and every schema
    (5,300, 5,000 stable) 5,000 x 0.1 + 300 x 1.25 = 875, a gain of 2,225 a call; its first
    call costs 5,000 x (1.25 - 0.1) = 5,750 more than a warm one. Growing 1,300 tokens a turn
    the stable part is cached after one turn: 2,225 < 5,750, the disclosed prompt stays; at
    500 a turn it takes three: 6,675 > 5,750, every schema is sent; not growing, as before."""
    from middleware.core.policy import prefer_whole

    haiku = rules_for("anthropic", {"input_cost_per_token": 1e-06, "cache_read_input_token_cost": 1e-07,
                                    "cache_creation_input_token_cost": 1.25e-06, "prompt_cache_min_tokens": 4096})  # fmt: skip
    sizes = {"disclosed": 3100, "disclosed_stable": 2800, "whole": 5300, "whole_stable": 5000}
    assert not prefer_whole(haiku, **sizes, growth=1300)
    assert prefer_whole(haiku, **sizes, growth=500)
    assert prefer_whole(haiku, **sizes, growth=0)


@pytest.mark.parametrize(
    ("caching", "kept_tokens", "whole_tokens", "keeps"),
    [
        ({"rules": "none"}, 50_000, 50_000, False),  # not modelled, and no cache price known
        ({"rules": "none", "price_as": "deepseek/deepseek-chat"}, 500, 500, True),  # not modelled, reads priced lower
        (
            {"price_as": "claude-sonnet-4-5", "anthropic_breakpoints": False},
            5_000,
            5_000,
            False,
        ),  # Anthropic caches only at breakpoints
        ({"price_as": "claude-sonnet-4-5", "anthropic_breakpoints": True}, 1_100, 1_100, True),
        ({"price_as": "claude-sonnet-4-5", "anthropic_breakpoints": True}, 400, 1_100, True),  # reads at a tenth
        ({"price_as": "claude-sonnet-4-5", "anthropic_breakpoints": True}, 400, 700, False),  # nothing reaches 1,024
        ({"price_as": "gpt-4o-mini"}, 1_100, 1_100, True),  # reaches 1,024, read at half
        ({"price_as": "gpt-4o-mini"}, 700, 50_000, False),  # read at half: only once they are cached
        ({"price_as": "gpt-5-mini"}, 700, 1_100, True),  # read at a tenth
        ({"price_as": "gpt-4.1-mini"}, 700, 1_100, True),  # read at exactly a quarter
        ({"price_as": "claude-haiku-4-5", "anthropic_breakpoints": True}, 3_000, 3_900, False),  # 4,096 minimum
    ],
)
def test_whether_recent_tools_pay_follows_each_providers_caching(
    caching: dict[str, Any], kept_tokens: int, whole_tokens: int, keeps: bool
) -> None:
    """Hand-worked: kept schemas of ``kept_tokens`` against every schema's ``whole_tokens``
    (with the static system text), under each provider's rules and litellm's prices."""
    policy = policy_for(Config().with_overrides(caching=caching))
    schemas = schemas_of_tokens(kept_tokens)
    assert policy.keeps_recent(schemas, whole_tokens - policy.static_tokens) is keeps


def schemas_of_tokens(tokens: int) -> list[dict[str, Any]]:
    """One schema of ``tokens`` tokens (within 2), as litellm counts them for the default tokens.model."""

    def schemas_of(words: int) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "t", "description": "word " * words}}]

    count = SchemaCount(Config().tokens.model).tokens
    words = tokens
    for _ in range(5):
        words += tokens - count(schemas_of(words))
    assert abs(count(schemas_of(words)) - tokens) <= 2
    return schemas_of(words)


def test_the_system_text_after_changing_tools_is_not_counted_as_cached() -> None:
    """Matched tools come between the kept tools and the system text and change from turn to
    turn, so a long system text does not lift kept tools over the minimum: 700 tokens of
    kept tools with about 900 of instructions stay out with gpt-4o-mini."""
    config = Config().with_overrides(
        assistant={"instructions": "Follow the house rules. " * 180}, caching={"price_as": "gpt-4o-mini"}
    )
    policy = policy_for(config)
    assert policy.static_tokens > 800
    assert policy.keeps_recent(schemas_of_tokens(700), 50_000) is False
    assert policy.keeps_recent(schemas_of_tokens(1_100), 50_000) is True


def disclosed(catalog: Catalog, *, stable: Sequence[str], ranked: Sequence[str], grown: int = 0) -> DisclosedTools:
    return DisclosedTools(catalog, names=[*stable, *ranked], stable=len(stable) + grown, grown=grown, ranked=list(ranked),
                          settled=bool(stable))  # fmt: skip


CATALOG = sized_catalog({"kept": 1500, "best": 300, "second": 300, "third": 300})
FIGURES = Figures(messages=600, stable_system=0, turn=3, budget=None)


def seldom(rank: int, times: int = 40) -> MatchOdds:
    """Odds after ``times`` turns that never called the tool matched at ``rank``."""
    odds, ranked = MatchOdds(), [*(f"called_{i}" for i in range(rank)), "never"]
    for _ in range(times):
        odds.note(True, ranked, [], ranked[:-1])  # the matches above it are called every time
    return odds


@pytest.mark.parametrize(
    ("rules", "breakpoints", "odds", "grown", "expected"),
    [
        (Rules(kind="none"), False, seldom(0), 0, Decision()),  # nothing cached: nothing weighed
        (SONNET, False, seldom(0), 0, Decision()),  # Claude without breakpoints caches nothing
        (SONNET, True, MatchOdds(), 0, Decision()),  # even odds: each pays for itself
        (SONNET, True, seldom(0), 0, Decision(drop=("best",))),  # the best match is never called: left out
        (SONNET, True, seldom(1), 0, Decision(drop=("second",))),
        (SONNET, True, seldom(0), 1, Decision()),  # matches joining the tools that stay are never left out
        (GPT_4O_MINI, False, seldom(2), 0, Decision(drop=("third",))),
    ],
)
def test_decide_leaves_out_matches_the_model_seldom_calls(
    rules: Rules, breakpoints: bool, odds: MatchOdds, grown: int, expected: Decision
) -> None:
    """With 1,700 tokens that stay (read from the cache) and 300-token matches, a match
    never called at its rank costs more sent than the loader round it would spare."""
    policy = ToolPolicy(rules, breakpoints, Sized(), static_tokens=100)
    tools = disclosed(CATALOG, stable=["kept"], ranked=["best", "second", "third"], grown=grown)
    assert policy.decide(tools, FIGURES, odds, whole_tokens=2_600) == expected


@pytest.mark.parametrize(
    ("kept", "whole", "budget", "expected"),
    [
        (2_000, 5_000, None, True),  # Haiku caches nothing under 4,096: every schema (cached) costs less
        (2_000, 5_000, 5_000, False),  # ... unless every schema would not fit the budget
        (4_200, 5_000, None, False),  # the disclosed prefix is cached too: no switching back and forth
        (2_000, 3_000, None, False),  # every schema is short of the minimum too
    ],
)
def test_every_schema_is_sent_where_it_alone_can_be_cached_and_costs_less(kept: int, whole: int, budget: int | None,
                                                                         expected: bool) -> None:  # fmt: skip
    """Haiku 4.5 with breakpoints, a disclosed prompt of one kept tool and one match."""
    catalog = sized_catalog({"kept": kept, "best": 300}, loader=100)
    policy = ToolPolicy(HAIKU, True, Sized(), static_tokens=200)
    figures = Figures(messages=300, stable_system=0, turn=5, budget=budget)
    decision = policy.decide(disclosed(catalog, stable=["kept"], ranked=["best"]), figures, MatchOdds(), whole_tokens=whole)
    assert decision.whole is expected and decision.drop == ()


@pytest.mark.parametrize(
    ("rules", "chance", "marked", "tail"),
    [
        (SONNET, 0.5, None, 7),  # likely enough to be read: the last message
        (SONNET, 0.2, None, None),  # a first call not worth writing: the stable memory alone
        (SONNET, 0.2, 4, 4),  # a later call: where the previous call's breakpoints ended
        (GPT_4O_MINI, 0.0, None, 7),  # writing costs nothing extra
    ],
)
def test_a_calls_breakpoints_end_where_a_later_call_is_likely_to_read(
    rules: Rules, chance: float, marked: int | None, tail: int | None
) -> None:
    """Sonnet's break-even chance is 27.8% (see worth_writing)."""
    assert ToolPolicy(rules, True, Sized(), static_tokens=0).tail(chance, marked=marked, last=7) == tail


def test_the_decision_table_would_see_a_wrong_drop() -> None:
    """The decision differs from a wrong expectation (so the tables above can fail)."""
    policy = ToolPolicy(SONNET, True, Sized(), static_tokens=100)
    tools = disclosed(CATALOG, stable=["kept"], ranked=["best", "second", "third"])
    assert policy.decide(tools, FIGURES, seldom(0), whole_tokens=2_600) != Decision(drop=("second",))


def test_every_schema_counts_the_turn_the_disclosed_prompt_pays_loader_rounds_and_later_calls_for() -> None:
    """Hand-worked, gpt-5-mini (1,024 minimum in 128-token steps; input $0.25, read $0.025 per
    million): the disclosed prompt (650 tokens, 250 stable) is never cached and costs 650 a
    call; every schema (2,700, 2,350 stable) reads 2,304 at a tenth and pays 396: 626.4, a gain
    of 23.6 a call. Its first call pays 2,350 x 0.9 = 2,115 more than a warm one. Per turn,
    with one call after tool results and a loader round on 3 turns in 10: the disclosed turn
    costs 650 x 1.3 + 650 = 1,495 (its later call reads nothing: 650 is under the minimum),
    every schema's 626.4 + (2,688 x 0.1 + 12) = 907.2 (its later call reads the first whole):
    587.8 a turn. With the disclosed stable part cached after one turn (growing 1,000 a turn),
    neither repays 2,115; see the next test for a prompt that grows slower."""
    from middleware.core.policy import prefer_whole, turn_cost

    assert (MINI.min_tokens, MINI.step) == (1024, 128)
    sizes = {"disclosed": 650, "disclosed_stable": 250, "whole": 2700, "whole_stable": 2350}
    assert turn_cost(MINI, total=650, stable=250, follow=1, loaders=0.3) == pytest.approx(1495)
    assert turn_cost(MINI, total=2700, stable=2350, follow=1) == pytest.approx(907.2)
    assert not prefer_whole(MINI, **sizes, growth=1000)  # 23.6 < 2,115
    assert not prefer_whole(MINI, **sizes, growth=1000, follow=1, loaders=0.3)  # 587.8 < 2,115
    assert prefer_whole(MINI, **sizes, follow=1, loaders=0.3)  # never cached: every schema repays in time


def test_every_schema_counts_what_the_disclosed_prompt_will_grow_by_before_it_is_cached() -> None:
    """The same prompts, the disclosed stable part growing 300 tokens a turn (tools that stay),
    so it is cached after ceil(774 / 300) = 3 turns, and each of its calls pays what it grew by.
    Per call: 23.6 + 323.6 + 623.6 = 970.8 < 2,115, the disclosed prompt stays. Per turn (one
    later call, a loader round on 3 turns in 10): 587.8, then 1,277.8 (950 tokens paid 2.3
    times), then 931.0 (1,250 tokens: the later call now reads the first, 1,152 at a tenth):
    2,796.6 > 2,115, every schema from now. Growing 100 a turn, 8 turns: 23.6 + 123.6 + ...
    + 723.6 = 2,988.8 > 2,115 even per call."""
    from middleware.core.policy import prefer_whole

    sizes = {"disclosed": 650, "disclosed_stable": 250, "whole": 2700, "whole_stable": 2350}
    assert not prefer_whole(MINI, **sizes, growth=300)
    assert prefer_whole(MINI, **sizes, growth=300, follow=1, loaders=0.3)
    assert prefer_whole(MINI, **sizes, growth=100)


def test_a_slowly_growing_disclosed_prompt_counts_its_turns_in_bounded_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Growing a thousandth of a token a turn, the disclosed stable part takes 774,000 turns to
    be cached: the gains are counted one by one for GAIN_TURNS turns at most, the last standing
    for the rest (each turn gains at least what the one before did), so a slow growth costs no
    more work. Here the gain stays 23.6 a call (the prompt grows by less than a token in 64
    turns), and 774,000 turns of it repay every schema's first call (2,115) many times over;
    with the disclosed prompt 23 tokens shorter there is no gain to count."""
    from middleware.core import policy
    from middleware.core.policy import GAIN_TURNS, prefer_whole, turn_cost

    sizes = {"disclosed": 650, "disclosed_stable": 250, "whole": 2700, "whole_stable": 2350}
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> float:
        calls.append(1)
        return turn_cost(*args, **kwargs)

    monkeypatch.setattr(policy, "turn_cost", counted)
    assert prefer_whole(MINI, **sizes, growth=0.001)
    assert len(calls) <= GAIN_TURNS + 2  # a disclosed turn per gain counted, with the first again; every schema's once
    assert not prefer_whole(MINI, **{**sizes, "disclosed": 626}, growth=0.001)


def test_a_history_is_resent_while_its_turn_costs_no_more_than_the_composed_prompts() -> None:
    """Hand-worked, reads at a tenth (OpenAI rules): a 10,000-token history 9,000 of them
    sent before costs 9,000 x 0.1 + 1,000 = 1,900 a call (token for token); the composed
    4,000 with 2,000 the same each call, cached to 1,920 (the last whole 128-token step),
    costs 192 + 2,080 = 2,272: resent. With one call after tool results, which reads the
    whole first call, the turns cost 1,900 + 1,000 = 2,900 and 2,272 + 400 = 2,672:
    composed. A model without prices never resends."""
    from middleware.core.policy import resends

    tenth = rules_for("openai", {"input_cost_per_token": 2.5e-07, "cache_read_input_token_cost": 2.5e-08})
    figures = {"history": 10_000, "history_stable": 9_000, "composed": 4_000, "composed_stable": 2_000}
    assert resends(tenth, **figures)
    assert not resends(tenth, **figures, follow=1.0)
    assert resends(tenth, **figures, follow=0.2)  # 1,900 + 200 against 2,272 + 80
    assert not resends(rules_for("openai", {}), **figures)


def test_a_composed_prompt_pays_for_the_part_of_its_stable_prefix_a_cache_step_leaves_unread() -> None:
    """Hand-worked, OpenAI's 128-token steps, reads at a tenth: a 3,100-token history with
    3,000 sent before costs 300 + 100 = 400 a call, token for token (what a step leaves
    unread, the next call reads: the history only grows). The composed 3,000 with 2,940
    the same on every call is cached to 2,816, the last whole step, on every call: 281.6 +
    184 = 465.6, so the history is resent. Token for token it would have been 294 + 60 =
    354, and composed."""
    from middleware.core.policy import resends

    tenth = rules_for("openai", {"input_cost_per_token": 2.5e-07, "cache_read_input_token_cost": 2.5e-08})
    figures = {"history": 3_100, "history_stable": 3_000, "composed": 3_000, "composed_stable": 2_940}
    assert resends(tenth, **figures)
    assert not resends(tenth, **{**figures, "composed_stable": 2_944})  # a whole step: 294.4 + 56 = 350.4


def test_a_first_turn_judges_every_schema_against_the_pace_seen_after_first_turns() -> None:
    """A first turn's matched tools all join the ones that stay at once (here 300 tokens), but
    later turns mostly call tools already sent: growing 300 a turn, the stable part would be
    cached after 3 turns and the disclosed prompt stays (970.8 < 2,115, see above). Joining
    300 now and then 100 a turn (the pace this process saw), it takes 1 + ceil(474 / 100) = 6
    turns: 23.6 + 323.6 + 423.6 + 523.6 + 623.6 + 723.6 = 2,641.6 > 2,115, every schema pays.
    A join that reaches the minimum at once leaves one turn's gain (23.6); a pace of 0 never
    reaches it."""
    from middleware.core.policy import prefer_whole

    sizes = {"disclosed": 650, "disclosed_stable": 250, "whole": 2700, "whole_stable": 2350}
    assert not prefer_whole(MINI, **sizes, growth=300)
    assert not prefer_whole(MINI, **sizes, growth=300, joined=300)  # the same, told apart
    assert prefer_whole(MINI, **sizes, growth=100, joined=300)
    assert not prefer_whole(MINI, **sizes, growth=100, joined=800)
    assert prefer_whole(MINI, **sizes, growth=0, joined=300)


def test_the_pace_is_learned_only_after_enough_turns() -> None:
    """No pace until GrowthPace.MIN_SEEN turns were seen; then the mean tokens joined a turn,
    turns that joined nothing included."""
    from middleware.core.policy import GrowthPace

    pace = GrowthPace()
    for joined in [0, 200] * (GrowthPace.MIN_SEEN // 2 - 1) + [0]:
        pace.note(joined)
        assert pace.mean() is None
    pace.note(400)
    assert pace.mean() == pytest.approx((200 * (GrowthPace.MIN_SEEN // 2 - 1) + 400) / GrowthPace.MIN_SEEN)


def test_a_first_turn_sends_every_schema_until_the_process_learns_the_tools_keep_joining() -> None:
    """Through the tool planner: a first turn whose two matched tools (600 tokens) join the
    loader (150) is judged, before GrowthPace.MIN_SEEN later turns were seen, as if no tool
    joined after it: never cached, so it sends every schema (the choice that costs no more
    than resending the full history). First turns teach nothing. Once the process has seen
    later turns join 300 tokens each (and disclose: ``_later``), the same first turn would be
    cached after 2 turns, so it discloses (469.2 + 1,069.2 < 2,430 that every schema's first
    call costs more)."""
    planner = _planner()
    for first in range(6):  # a new session each: none is warm from an earlier turn
        assert _first_turn_sends_every_schema(planner, f"first{first}")  # first turns teach nothing
    for number in range(2, 2 + GrowthPace.MIN_SEEN - 1):
        _later(planner, number, f"later{number}")
    assert _first_turn_sends_every_schema(planner, "again")
    _later(planner, 2 + GrowthPace.MIN_SEEN, "last")
    assert not _first_turn_sends_every_schema(planner, "learned")


# Three tools after a 150-token loader.
ABC = sized_catalog({"a": 300, "b": 300, "c": 300}, loader=150)


def _planner() -> ToolPlanner:
    """A tool planner of its own (the policy each call is judged by is passed to ``decide``)."""
    return ToolPlanner(Config(), rules=lambda model: MINI, static_tokens=0)


def _later(planner: ToolPlanner, number: int, session: str) -> None:
    """Turn ``number`` of ``session``, priced as gpt-5-mini's caching: tool c (300 tokens)
    joins a and b, which stayed from its earlier turns, so the list (the loader and 900
    tokens) is 1 turn from the 1,024-token minimum, and it discloses."""
    tools = DisclosedTools(ABC, names=["a", "b", "c"], stable=3, grown=1, growing=True, ranked=["c"])
    figures = Figures(messages=100, stable_system=0, turn=number, budget=None)
    policy = ToolPolicy(MINI, False, Sized(), static_tokens=0)
    assert not planner.decide(tools, figures, policy, whole_tokens=2_700, session_id=session).whole


def test_a_turn_tried_again_counts_once_in_the_pace() -> None:
    """A later turn planned twice (its first call failed, say) grew the tools that stay
    once: GrowthPace.MIN_SEEN - 1 turns of one session each tried twice leave the pace
    unlearned (a first turn still sends every schema), and one more turn learns it."""
    planner = _planner()
    for number in range(2, 2 + GrowthPace.MIN_SEEN - 1):
        _later(planner, number, "tried")
        _later(planner, number, "tried")
    assert _first_turn_sends_every_schema(planner, "first")
    _later(planner, 2 + GrowthPace.MIN_SEEN, "tried")
    assert not _first_turn_sends_every_schema(planner, "second")


def _first_turn_sends_every_schema(planner: ToolPlanner, session: str) -> bool:
    """Whether a first turn whose two matched tools (600 tokens) join the loader (150) sends
    every schema, priced as gpt-5-mini's caching: yes until the planner learned a pace."""
    tools = DisclosedTools(ABC, names=["a", "b"], stable=2, grown=2, growing=True, ranked=["a", "b"])
    figures = Figures(messages=100, stable_system=0, turn=1, budget=None)
    policy = ToolPolicy(MINI, False, Sized(), static_tokens=0)
    return planner.decide(tools, figures, policy, whole_tokens=2_700, session_id=session).whole


def test_a_turn_that_sends_every_schema_adds_nothing_to_the_pace() -> None:
    """Priced as Claude Haiku 4.5 with breakpoints, later turns whose tools that stay grow
    (the loader and 600 tokens, 300 joining) far below its 4,096-token minimum send every
    schema (5,000 tokens) instead: none of their tools stays, so none joined, and the pace
    stays unlearned after GrowthPace.MIN_SEEN of them (a first turn still sends every
    schema). The same turns disclosed would teach it (the tests above)."""
    planner = _planner()
    haiku = ToolPolicy(HAIKU, True, Sized(), static_tokens=0)
    for number in range(2, 2 + GrowthPace.MIN_SEEN + 2):
        tools = DisclosedTools(ABC, names=["a", "b", "c"], stable=3, grown=1, growing=True, ranked=["c"])
        figures = Figures(messages=100, stable_system=0, turn=number, budget=None)
        assert planner.decide(tools, figures, haiku, whole_tokens=5_000, session_id=f"h{number}").whole
    assert _first_turn_sends_every_schema(planner, "first")


def test_a_reset_session_counts_its_turns_in_the_pace_again() -> None:
    """A session whose turn 2 was noted, then reset in this process (``forget``), notes its
    new turn 2: with GrowthPace.MIN_SEEN - 1 other turns seen, that learns the pace (a
    first turn then discloses). Without the reset it would count as the same turn tried
    again, and teach nothing."""
    for reset in (False, True):
        planner = _planner()
        for other in range(GrowthPace.MIN_SEEN - 2):
            _later(planner, 2, f"other{other}")
        _later(planner, 2, "s")
        if reset:
            planner.forget("s")
        _later(planner, 2, "s")
        assert _first_turn_sends_every_schema(planner, "first") is not reset


def test_the_calls_after_a_load_are_counted_apart_and_among_the_calls_after_results() -> None:
    """A call after a round that only loaded schemas is mostly followed (the model calls what
    it asked for), where a call after tool results mostly ends the turn: the odds where a
    breakpoint ends are learned apart for it, and it still counts among the calls after
    results, so the calls a turn is expected to make (``follow``) do not move."""
    odds, plain = LoopOdds(), LoopOdds()
    for _ in range(4):
        odds.note(True, False)
        plain.note(True, False)
    for _ in range(3):
        odds.note(True, True, loaded=True)
        plain.note(True, True)
    assert odds.chance(True, loaded=True) == pytest.approx(4 / 5)  # 1 of 2 before, 3 of 3 since
    assert odds.chance(True) == plain.chance(True) == pytest.approx(4 / 9) and odds.follow() == plain.follow()
    assert worth_writing(SONNET, odds.chance(True, loaded=True)) and odds.chance(False, loaded=True) == odds.chance(False)
