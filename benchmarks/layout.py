"""Would an append-only prompt layout cost less where cache reads cost a tenth? A simulation.

    python -m benchmarks.layout              # about half a minute: Claude Sonnet 4.5, epochs of 4, 8 and 16 turns
    python -m benchmarks.layout --model claude-haiku-4-5 --epochs 8

The middleware rewrites its memory every turn (the rolling summary, the recent window,
the context and recall blocks), so a provider that caches prefixes writes it again on
every call, at 1.25x the input price for Anthropic. This replays BFCL's sessions of 100+
turns (``benchmarks.billing``) through the real ``chat()`` priced as one model, then:

1. splits what each turn's first call writes to the cache by where it sits in the
   request (schemas, static system text, context and recall, earlier messages, the
   current message);
2. rebuilds the same requests in an append-only layout and prices them under the same
   rules: for ``K`` turns (an epoch) the memory of the epoch's first turn stays as it
   was (system text, summary, recent window), each later turn's user message and reply
   are appended after it, and that turn's context and recall go after them, just
   before its message; breakpoints at the schemas, the static text, the end of what
   is appended, and the last message. Schemas as the replay sent them, or (``tools
   known ahead``) every schema the epoch will use, sent from its first turn.

Printed, not written to BENCHMARKS.md: section 6 quotes its figures.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks import billing
from benchmarks.billing import _text
from benchmarks.dataset import chains, load
from middleware import llm
from middleware.core.caching import CacheState, blocks, request_parts, split
from middleware.tokens import get_tokenizer

EPHEMERAL = {"type": "ephemeral"}


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    out = {key: value for key, value in message.items() if key != "cache_control"}
    content = out.get("content")
    if isinstance(content, list) and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        out["content"] = _text(content)
    return out


def _marked(message: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(message)
    if out.get("role") == "tool" or not isinstance(out.get("content"), str) or not out["content"]:
        out["cache_control"] = EPHEMERAL
    else:
        out["content"] = [{"type": "text", "text": out["content"], "cache_control": EPHEMERAL}]
    return out


def _turns(calls: Sequence[billing.Call]) -> list[list[billing.Call]]:
    turns: list[list[billing.Call]] = []
    for call in calls:
        if call.first or not turns:
            turns.append([call])
        else:
            turns[-1].append(call)
    return turns


def written_by_part(played: billing.Played, model: str) -> dict[str, float]:
    """Tokens each turn's first call writes to the cache, by part of the request, per turn."""
    tokenizer, rules = get_tokenizer(billing.COUNTING), llm.cache_rules(model)
    static = billing._static_prefix()
    static_tokens = tokenizer.count_chat("system", static)
    written: Counter[str] = Counter()
    turns = 0
    for calls in played.sessions:
        state = CacheState()
        for number, call in enumerate(calls):
            sizes = llm.tool_sizes(billing.COUNTING, call.tools)
            prompt = blocks(request_parts(call.tools, sizes, call.messages, tokenizer.count_message, static_prefix=static,
                                          static_tokens=static_tokens, priming=3))  # fmt: skip
            billed, state = split(prompt, state, rules, now=float(number), ttl=1e9)
            if not call.first:
                continue
            turns += 1
            system = len(prompt) - len(call.tools) - len(call.messages)  # its blocks: the static text, then the memory's
            parts = ["schemas"] * len(call.tools) + ["static system text"] + ["context and recall"] * (system - 1)
            parts += ["earlier messages"] * (len(call.messages) - 2) + ["current message", "priming"]
            for block, part in zip(prompt, parts, strict=True):
                start = block.end - block.tokens
                written[part] += max(0, min(block.end, billed.read + billed.written) - max(start, billed.read))
    return {part: value / turns for part, value in written.items() if part != "priming"}


def append_only(played: billing.Played, epoch: int, *, tools_ahead: bool) -> list[list[billing.Call]]:
    """The replay's requests rebuilt in the append-only layout (see the module docstring)."""
    static = billing._static_prefix()
    sessions = []
    for calls in played.sessions:
        turns = _turns(calls)
        firsts = [[_plain(m) for m in turn[0].messages] for turn in turns]
        kept: dict[str, dict[str, Any]] = {}
        out: list[billing.Call] = []

        def schemas(sent: Sequence[Mapping[str, Any]], kept: dict[str, dict[str, Any]] = kept) -> list[dict[str, Any]]:
            for tool in sent:
                kept.setdefault(tool["function"]["name"], {k: v for k, v in tool.items() if k != "cache_control"})
            listed = list(kept.values())
            return [*listed[:-1], {**listed[-1], "cache_control": EPHEMERAL}] if listed else listed

        for index, turn in enumerate(turns):
            start = index - index % epoch
            if index == start:
                kept.clear()
                if tools_ahead:
                    schemas([tool for later in turns[start : start + epoch] for call in later for tool in call.tools])
            system_text = _text(turn[0].messages[0]["content"])
            volatile = system_text[len(static) :] if system_text.startswith(static) else ""
            appended: list[dict[str, Any]] = []
            for earlier in range(start, index):  # each later turn's message and reply, in order
                reply = firsts[earlier + 1][-2]
                appended += [firsts[earlier][-1], reply if reply["role"] == "assistant" else {"role": "assistant", "content": ""}]
            stable = [*firsts[start][1:-1], *appended]
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": [{"type": "text", "text": static, "cache_control": EPHEMERAL}]}
            ]
            messages += [*stable[:-1], _marked(stable[-1])] if stable else []
            if volatile.strip():
                messages.append({"role": "user", "content": volatile.strip()})
            messages.append(_marked(firsts[index][-1]))
            out.append(billing.Call(schemas(turn[0].tools), messages, True))
            sent = len(turn[0].messages)
            for call in turn[1:]:  # the turn's later calls: the same prefix, then the loop's messages
                loop = [_plain(m) for m in call.messages[sent:]]
                base = [*messages[:-1], _plain(messages[-1])]
                out.append(billing.Call(schemas(call.tools), [*base, *loop[:-1], _marked(loop[-1])] if loop else base, False))
        sessions.append(out)
    return sessions


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="claude-sonnet-4-5", help="whose caching rules and prices (default: %(default)s)")
    parser.add_argument("--epochs", default="4,8,16", help="turns per epoch to try, comma-separated (default: %(default)s)")
    args = parser.parse_args(argv)
    sessions = chains(load(), min_turns=100)
    full = billing.price(billing.full_history(sessions, lambda n: None), args.model).cost
    played = billing.play("rolling", "", sessions, billing.middleware_config().with_overrides(caching={"price_as": args.model}),
                          lambda n: None)  # fmt: skip
    rolling = billing.price(played, args.model)
    print(f"{len(sessions)} sessions of {min(map(len, played.sessions))}+ calls, priced as {args.model}\n")
    print("| written to the cache by a turn's first call (rolling layout) | tokens per turn |\n|---|---:|")
    for part, tokens in written_by_part(played, args.model).items():
        print(f"| {part} | {tokens:,.0f} |")
    print("\n| layout | effective cost against the full history | billed prompt tokens |\n|---|---:|---:|")
    print(f"| rolling (the middleware's) | {rolling.cost / full - 1:+.1%} | {rolling.tokens:,} |")
    rows = played.sessions
    for epoch in (int(e) for e in args.epochs.split(",")):
        for ahead in (False, True):
            played.sessions = append_only(billing.Played("", "", sessions=rows), epoch, tools_ahead=ahead)
            priced = billing.price(played, args.model)
            label = f"append-only, epochs of {epoch} turns, " + ("tools known ahead" if ahead else "tools as sent")
            print(f"| {label} | {priced.cost / full - 1:+.1%} | {priced.tokens:,} |")
    played.sessions = rows


if __name__ == "__main__":
    main()
