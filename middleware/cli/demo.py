"""``middleware demo``: the offline 12-turn device-navigation conversation, with its token figures."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from .console import WIDE, CliContext, Column, errors, fitted_table, joined, literal, new_console, store_options

__all__ = ["demo"]

COLUMNS = [Column("#", "#", width=2), Column("request", "request", share=7, width=12), Column("tools", "tools", share=3, width=8),
           Column("reply", "reply", share=10, wide_only=True, width=12), Column("sent", "sent"), Column("cached", "cached", wide_only=True),
           Column("full history", "full history", "full"), Column("cached ", "cached ", wide_only=True), Column("saved", "saved"),
           Column("with caching", "with caching", "w/ cache")]  # fmt: skip


@click.command()
@store_options
@click.option(
    "--session", help="Session id to play the conversation in (default: a new demo-<time> id; an existing one is reset)."
)
@click.option("--model", default="scripted/atlas", show_default=True, help="Any litellm model string; the default runs offline.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), help="Usage log file (default: the config's usage_log.path).")
@click.pass_obj
def demo(obj: CliContext, session: str | None, model: str, log_path: str | None) -> None:
    """Play a 12-turn device-navigation conversation through chat() and show the tokens saved.

    Offline by default: the model is the scripted Atlas served through litellm, the tools
    are simulated devices, and Atlas brings its own configuration; it stores and logs
    where your settings say (--config's store and usage_log sections, --redis-url or
    $REDIS_URL; by default the embedded memory:// store, so run it against Redis to look
    at the session in the inspector afterwards). Each request leaves out what earlier
    turns established (interface, device); the model finds it only in the context the
    middleware injects.
    """
    from rich.text import Text

    from .. import llm
    from ..demo import SCRIPT, demo_config
    from ..demo.device import LAB, ScreenConnector
    from ..usage.report import Totals

    with errors():
        config = demo_config(obj.config(**({"usage_log": {"path": log_path}} if log_path else {})))
    console = new_console()
    mgr = obj.manager(config, connectors=[ScreenConnector(LAB)])
    LAB.reset()
    session = session or f"demo-{datetime.now():%Y%m%d-%H%M%S}"
    with errors(), mgr:
        mgr.reset(session)
        # The demo's own device tools, whatever skills the config lists.
        device_tools = mgr.toolset(
            [
                _device_tool(name)
                for name in ("take_control", "navigate_to_node", "get_current_node", "click_element", "get_node_tree")
            ]
        )
        # One line per turn at 80 columns; a wide terminal adds the reply and the cache reads.
        rows: list[dict[str, str | Text]] = []
        every = Totals()  # every LLM call, the tool loop's included
        with console.status("Loading litellm (the first call takes a few seconds)…"):
            llm.litellm()
        for number, request in enumerate(SCRIPT, start=1):
            result = mgr.chat(session, request, model=model, tools=device_tools)
            for line in result.calls:
                every.add(line)
            first, cache = result.calls[0], result.calls[0].get("cache") or {}
            tools = ", ".join(call.name for call in result.tool_calls) or "-"
            effective = cache.get("saved_pct")
            rows.append({
                "#": str(number),
                "request": literal(request),
                "tools": literal(tools),
                "reply": literal(" ".join(result.text.split())),
                "sent": f"{first['tokens']['total']:,}",
                "cached": f"{(cache.get('sent') or {}).get('read', 0):,}",
                "full history": f"{first['full_history_tokens']:,}",
                "cached ": f"{(cache.get('full_history') or {}).get('read', 0):,}",
                "saved": f"{first['saved_pct']:.0f}%",
                "with caching": f"{effective:.0f}%" if effective is not None else "n/a",
            })  # fmt: skip
        title = joined("middleware demo · session '", literal(session), "' · model ", literal(model))
        console.print(fitted_table(console, title, COLUMNS, rows))
        state = mgr.get_state(session)
        rules = mgr.config.caching.rules if mgr.config.caching.rules != "auto" else "the model provider's"
        console.print(f"\n{len(SCRIPT)} turns, {every.calls} LLM calls: [bold]{_effective(every)}[/bold]")
        console.print(
            f"(prompt caching modelled on both sides with {rules} caching rules; tool schemas counted on both sides). "
            f"Raw prompt tokens: {every.tokens_sent:,} against {every.full_history_tokens:,} with the full history, "
            f"{every.saved_pct:.0f}% saved. Rows show each turn's first call"
            + ("; 'cached' is what the provider would read from its prompt cache." if console.width >= WIDE else
               f" ({WIDE} columns add what the provider would read from its cache).")
        )  # fmt: skip
        console.print(joined("Remembered context: ", literal(state.context)))
        log_file = mgr.config.usage_log.path
        if log_file is not None:
            console.print(joined("Usage log: ", literal(log_file), "  ·  review it with: middleware report ", literal(log_file),
                                  " --session ", literal(session)))  # fmt: skip
        if not mgr.config.store.url.startswith("memory://"):
            console.print(
                joined("Session '", literal(session), "' is in ", literal(repr(mgr.store)), ": middleware inspect shows it.")
            )


def _effective(totals: Any) -> str:
    saved = totals.saved_effective_pct
    if saved is None:
        return "no price known for the model, so no effective saving"
    return (f"{saved:.0f}% saved in effective prompt cost (${totals.effective_cost_usd:.4f} against "
            f"${totals.full_effective_cost_usd:.4f} for the full history)")  # fmt: skip


def _device_tool(name: str) -> Any:
    from ..demo import device

    return getattr(device, name)
