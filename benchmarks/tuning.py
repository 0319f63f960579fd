"""Defaults chosen on data the report does not measure: BFCL's multi-turn categories
``miss_param`` and ``miss_func`` (the same kind of tasks as the report's ``base`` and
``long_context``; in them a request lacks a value or a tool that a later turn gives).

    python -m benchmarks.tuning            # about 2 minutes

It plays the conversations (alone, and in sessions of 100+ turns) through the middleware as
section 1 of the report does (the demo's config with auto context keys), with
``summary.result_chars`` at each of ``SWEEP``, and prints the share of needed values the
prompts kept and the tokens they took. The rule, fixed before the first
run: the smallest width within 0.1 points of the best share on every set and scope. Added
after a run in which no width was (a change since made values of several calls give way one
at a time, not all together): failing that, the width with the best mean share, the
smallest of equals.
A turn whose message is empty (``miss_func`` adds its tool there) says "Please continue.".
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.dataset import chains, load
from benchmarks.savings import FullHistory, Middleware, replay, summary_rows
from middleware import SessionManager

CATEGORIES = ("BFCL_v4_multi_turn_miss_param", "BFCL_v4_multi_turn_miss_func")
SWEEP = (0, 16, 24, 32, 40, 60, 80)
SLACK = 0.001  # 0.1 points


def measure(category: str, width: int) -> dict[str, dict[str, float]]:
    """Needed values kept (of those the conversation's own history holds) and tokens, per scope."""
    conversations = load(category=category)
    for conversation in conversations:
        for turn in conversation.turns:
            if not turn.user.strip():
                turn.user = "Please continue."
    out = {}
    for scope in ("single", "chains"):
        sessions = [[c] for c in conversations] if scope == "single" else chains(conversations, 100)
        ours = Middleware(auto=True)
        ours.manager.close()  # made with the default width: remade with this one
        ours.config = ours.config.with_overrides(summary={"result_chars": width})
        ours.manager = SessionManager(ours.config)
        (row,) = [r for r in summary_rows(replay(sessions, [FullHistory(), ours])) if r["name"] == ours.name]
        out[scope] = {"kept": row["kept_of_full"], "tokens": row["total_tokens"]}
    return out


def chosen(results: dict[str, dict[int, dict[str, dict[str, float]]]]) -> int:
    """The smallest width within ``SLACK`` of the best kept share on every category and scope."""

    def near_best(width: int) -> bool:
        return all(
            by_width[width][scope]["kept"] >= max(r[scope]["kept"] for r in by_width.values()) - SLACK
            for by_width in results.values()
            for scope in ("single", "chains")
        )

    near = [width for width in SWEEP if near_best(width)]
    if near:
        return min(near)

    def mean(width: int) -> float:
        shares = [by_width[width][scope]["kept"] for by_width in results.values() for scope in ("single", "chains")]
        return sum(shares) / len(shares)

    return max(SWEEP, key=lambda width: (mean(width), -width))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tuning", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    results: dict[str, dict[int, Any]] = {}
    print(f"{'category':<30} {'chars':>5}  {'kept, alone':>11}  {'kept, 100+':>10}  {'tokens':>7}")
    for category in CATEGORIES:
        results[category] = {}
        for width in SWEEP:
            results[category][width] = measured = measure(category, width)
            base = results[category][SWEEP[0]]
            tokens = sum(measured[s]["tokens"] for s in measured) / sum(base[s]["tokens"] for s in base) - 1
            short = category.removeprefix("BFCL_v4_multi_turn_")
            print(f"{short:<30} {width:>5}  {measured['single']['kept']:>11.2%}  {measured['chains']['kept']:>10.2%}"
                  f"  {tokens:>+7.1%}", flush=True)  # fmt: skip
    print(f"summary.result_chars chosen by the rule: {chosen(results)}")


if __name__ == "__main__":
    main()
