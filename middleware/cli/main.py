"""The ``middleware`` command line: demo, chat, report, sessions, inspect and serve.

Every command has ``--help``. The store and config come from ``--config`` /
``$MIDDLEWARE_CONFIG`` and ``--redis-url`` / ``$REDIS_URL``, as for the library.

Whatever came from the store, a log, a model or the command line prints as the text it
is: never as rich markup, and with control characters (ANSI and OSC 8 escape sequences,
bidi overrides) shown escaped. Only the command's own words carry markup.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ..config.files import ENV_REDIS_URL, load_config
from ..config.schema import Config
from ..core.text import printable, printable_json
from ..exceptions import LLMError, MiddlewareError

if TYPE_CHECKING:
    from rich.text import Text

    from ..session.manager import SessionManager

__all__ = ["main"]


def _console(stderr: bool = False) -> Any:

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped or captured output gets a readable width instead of rich's 80 columns.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 150
    return Console(stderr=stderr, highlight=False, width=width)


def _text(value: object, style: str = "", *, lines: bool = False) -> Text:
    """``value`` as rich prints it literally: a Text, so never markup or emoji codes, with its
    control characters escaped (line breaks and tabs too, unless ``lines``)."""
    from rich.text import Text

    return Text(printable(str(value), keep="\n\t" if lines else ""), style=style)


def _joined(*parts: str | Text) -> Text:
    """One line: strings are the command's own words, other parts values made with ``_text``
    (nothing is parsed as markup)."""
    from rich.text import Text

    return Text.assemble(*parts)


@contextmanager
def _errors() -> Iterator[None]:
    """Library errors become one clear line and exit status 1, not a traceback."""
    try:
        yield
    except MiddlewareError as exc:
        raise click.ClickException(printable(str(exc))) from None


class _Context:
    def __init__(self, config_path: str | None, redis_url: str | None) -> None:
        self.config_path = config_path
        self.redis_url = redis_url

    def config(self, **overrides: Any) -> Config:
        with _errors():
            # --redis-url is applied as load_config applies $REDIS_URL (one validation).
            env = {**os.environ, ENV_REDIS_URL: self.redis_url} if self.redis_url else None
            config = load_config(self.config_path, env=env)
            return config.with_overrides(**overrides) if overrides else config

    def manager(self, config: Config | None = None, **options: Any) -> SessionManager:
        from ..session.manager import SessionManager

        with _errors():
            return SessionManager(config or self.config(), **options)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    "config_path",
    envvar="MIDDLEWARE_CONFIG",
    type=click.Path(dir_okay=False),
    help="Config file (default: $MIDDLEWARE_CONFIG, else the library defaults).",
)
@click.option(
    "--redis-url",
    envvar="REDIS_URL",
    help="Session store URL: memory://, redis://, rediss://, unix:// (default: $REDIS_URL, else the config's).",
)
@click.version_option(package_name="token-middleware", prog_name="middleware")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, redis_url: str | None) -> None:
    """Token-efficient memory between a chatbot and its LLM."""
    ctx.obj = _Context(config_path, redis_url)


# --- demo --------------------------------------------------------------------


@main.command()
@click.option(
    "--session", help="Session id to play the conversation in (default: a new demo-<time> id; an existing one is reset)."
)
@click.option("--model", default="scripted/atlas", show_default=True, help="Any litellm model string; the default runs offline.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False), help="Usage log file (default: the config's usage_log.path).")
@click.pass_obj
def demo(obj: _Context, session: str | None, model: str, log_path: str | None) -> None:
    """Play a 12-turn device-navigation conversation through chat() and show the tokens saved.

    Offline by default: the model is the scripted Atlas served through litellm, the tools
    are simulated devices, and Atlas brings its own configuration; it stores and logs
    where your settings say (--config's store and usage_log sections, --redis-url or
    $REDIS_URL; by default the embedded memory:// store, so run it against Redis to look
    at the session in the inspector afterwards). Each request leaves out what earlier
    turns established (interface, device); the model finds it only in the context the
    middleware injects.
    """
    from rich.table import Table

    from .. import llm
    from ..demo import SCRIPT, demo_config
    from ..demo.device import LAB, ScreenConnector
    from ..usage.report import Totals

    with _errors():
        config = demo_config(obj.config(**({"usage_log": {"path": log_path}} if log_path else {})))
    console = _console()
    mgr = obj.manager(config, connectors=[ScreenConnector(LAB)])
    LAB.reset()
    session = session or f"demo-{datetime.now():%Y%m%d-%H%M%S}"
    with _errors(), mgr:
        mgr.reset(session)
        # The demo's own device tools, whatever skills the config lists.
        device_tools = mgr.toolset(
            [
                _device_tool(name)
                for name in ("take_control", "navigate_to_node", "get_current_node", "click_element", "get_node_tree")
            ]
        )
        table = Table(
            title=_joined("middleware demo · session '", _text(session), "' · model ", _text(model)), title_justify="left"
        )
        for column, justify in [
            ("#", "right"),
            ("user", "left"),
            ("tools", "left"),
            ("reply", "left"),
            ("sent", "right"),
            ("cached", "right"),
            ("full history", "right"),
            ("cached ", "right"),
            ("saved", "right"),
            ("with caching", "right"),
        ]:
            # The request and the tools stay on one line; the reply folds.
            table.add_column(column, justify=justify, overflow="fold", no_wrap=column in {"user", "tools"})  # type: ignore[arg-type]
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
            table.add_row(
                str(number),
                _text(request),
                _text(tools),
                _text(result.text, lines=True),
                f"{first['tokens']['total']:,}",
                f"{(cache.get('sent') or {}).get('read', 0):,}",
                f"{first['full_history_tokens']:,}",
                f"{(cache.get('full_history') or {}).get('read', 0):,}",
                f"{first['saved_pct']:.0f}%",
                f"{effective:.0f}%" if effective is not None else "n/a",
            )
        console.print(table)
        state = mgr.get_state(session)
        rules = mgr.config.caching.rules if mgr.config.caching.rules != "auto" else "the model provider's"
        console.print(f"\n{len(SCRIPT)} turns, {every.calls} LLM calls: [bold]{_effective(every)}[/bold]")
        console.print(
            f"(prompt caching modelled on both sides with {rules} caching rules; tool schemas counted on both sides). "
            f"Raw prompt tokens: {every.tokens_sent:,} against {every.full_history_tokens:,} with the full history, "
            f"{every.saved_pct:.0f}% saved. Rows show each turn's first call; 'cached' is what the provider would read from "
            "its prompt cache."
        )
        console.print(_joined("Remembered context: ", _text(state.context)))
        log_file = mgr.config.usage_log.path
        if log_file is not None:
            console.print(_joined("Usage log: ", _text(log_file), "  ·  review it with: middleware report ", _text(log_file),
                                  " --session ", _text(session)))  # fmt: skip
        if not mgr.config.store.url.startswith("memory://"):
            console.print(
                _joined("Session '", _text(session), "' is in ", _text(repr(mgr.store)), ": middleware inspect shows it.")
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


def _warn_if_private_store(mgr: SessionManager) -> None:
    if mgr.config.store.url.startswith("memory://"):
        click.echo(
            "Note: the store is memory://, which lives inside this one process, so it holds no sessions of other "
            "processes. Point at a shared store with --redis-url or $REDIS_URL.", err=True,
        )  # fmt: skip


# --- chat --------------------------------------------------------------------


@main.command()
@click.option("--session", default="cli", show_default=True, help="Session id.")
@click.option("--model", help="Any litellm model string (default: the config's model). Try scripted/atlas offline.")
@click.option("--stream/--no-stream", default=True, show_default=True, help="Print the reply as it arrives.")
@click.pass_obj
def chat(obj: _Context, session: str, model: str | None, stream: bool) -> None:
    """Talk to a model with memory in the configured store. Type /exit to leave,
    /state to see what the session remembers, /reset to forget it."""
    console = _console()
    mgr = obj.manager()
    model = model or mgr.config.model
    if model.startswith("scripted/"):
        from .. import demo  # noqa: F401 (serves scripted/atlas)
    interactive = sys.stdin.isatty()
    if interactive:
        console.print(
            _joined(
                "Session '", _text(session), "' · model ", _text(model), " · store ", _text(repr(mgr.store)), ". /exit to leave."
            )
        )
    with _errors(), mgr:
        for line in _lines(interactive):
            text = line.strip()
            if not text:
                continue
            if text in {"/exit", "/quit"}:
                break
            if text == "/state":
                _print_state(console, session, mgr.get_state(session))
                continue
            if text == "/reset":
                mgr.reset(session)
                console.print("(session forgotten)")
                continue
            if text.startswith("/"):
                console.print("Commands: /state (what the session remembers), /reset (forget it), /exit.")
                continue
            try:
                result = _chat_turn(mgr, session, text, model, stream, console)
            except LLMError as exc:  # one failed turn does not end the conversation
                console.print()
                console.print(_text(exc, "red"))
                continue
            first = result.calls[0] if result.calls else None
            if first is not None:
                console.print(
                    f"[dim]{first['tokens']['total']:,} tokens sent · {first['full_history_tokens']:,} with the "
                    f"full history · {first['saved_pct']:.0f}% saved[/dim]"
                )


def _lines(interactive: bool) -> Iterator[str]:
    while True:
        try:
            line = input("you> ") if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and line == "":
            return
        yield line


def _chat_turn(mgr: SessionManager, session: str, text: str, model: str, stream: bool, console: Any) -> Any:
    if not stream:
        result = mgr.chat(session, text, model=model)
        console.print(_joined(_text(mgr.config.assistant.name), "> ", _text(result.text, lines=True)))
        return result
    replies = mgr.chat(session, text, model=model, stream=True)
    console.print(_joined(_text(mgr.config.assistant.name), "> "), end="")
    for chunk in replies:
        console.print(_text(chunk, lines=True), end="", soft_wrap=True)
    console.print()
    return replies.result


# --- report ------------------------------------------------------------------


@main.command()
@click.argument("log", type=click.Path(exists=True, dir_okay=False))
@click.option("--session", help="Only this session.")
@click.option("--since", help="Only calls since a time: 2026-11-21, 2026-11-21T18:00Z, or 30m, 2h, 7d ago.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Also write a self-contained HTML page with a chart.")
def report(log: str, session: str | None, since: str | None, fmt: str, html_path: str | None) -> None:
    """Summarize a token usage log, led by the saving in effective cost (prompt caching
    modelled on both sides, tool schemas included), with raw and billed tokens beside it:
    totals, per session and per model (calls, tokens sent, full-history tokens, saved,
    cost, cost saved, p50/p95 prompt tokens). Lines that are not usage records are
    counted and skipped."""
    from ..usage.report import build_report, load_report, render_csv, render_html, render_json

    try:
        moment = _parse_since(since)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since") from None
    result = load_report(log, since=moment)
    if session is not None:
        if session not in result.sessions:
            latest = ", ".join(repr(name[:60]) for name in list(result.sessions)[-3:]) or "none"
            when = " since then" if moment else ""
            raise click.ClickException(f"No calls of session {session[:100]!r} in {log}{when}: it holds "
                                       f"{len(result.sessions)} session(s), the latest {latest}.")  # fmt: skip
        result = build_report(result.records, bad_lines=result.bad_lines, session=session)
    if fmt == "json":
        click.echo(printable_json(render_json(result)))
    elif fmt == "csv":
        click.echo(printable(render_csv(result), keep="\r\n"), nl=False)  # a log's names, control characters escaped
    else:
        _print_report(result)
    if html_path:
        Path(html_path).write_text(render_html(result, title=f"Token usage · {Path(log).name}"), encoding="utf-8")
        click.echo(f"wrote {html_path}", err=fmt != "table")


def _parse_since(since: str | None) -> datetime | None:
    from ..usage.report import parse_since

    return parse_since(since) if since else None


def _print_report(result: Any) -> None:
    from rich.table import Table

    from ..usage.report import report_rows

    table = Table(title_justify="left", title="Token usage")
    columns = [
        "scope",
        "name",
        "calls",
        "tokens sent",
        "cached",
        "full history",
        "cached ",
        "saved %",
        "saved % with caching",
        "prompt cost $",
        "cost $",
        "p50",
        "p95",
    ]
    for column in columns:
        table.add_column(column, justify="left" if column in {"scope", "name"} else "right", overflow="fold")
    for scope, name, row in report_rows(result):
        priced = row["calls_without_price"] < row["calls"]  # no price known at all: say so, not $0
        cost = f"{row['cost_usd']:.6f}" if priced else "n/a"
        effective = row["saved_effective_pct"]
        table.add_row(
            scope,
            _text(name),
            f"{row['calls']:,}",
            f"{row['tokens_sent']:,}",
            f"{row['cached_tokens_sent']:,}",
            f"{row['full_history_tokens']:,}",
            f"{row['cached_tokens_full_history']:,}",
            f"{row['saved_pct']:.1f}",
            f"{effective:.1f}" if effective is not None else "n/a",
            f"{row['effective_cost_usd']:.6f}" if effective is not None else "n/a",
            cost,
            f"{row['p50_prompt_tokens']:,.0f}",
            f"{row['p95_prompt_tokens']:,.0f}",
        )
    console = _console()
    console.print(f"[bold]{result.total.headline()}[/bold]")
    console.print(table)
    if result.bad_lines:
        console.print(f"{result.bad_lines} line(s) were not usage records and were skipped.")


# --- inspect -----------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# Bind addresses that mean "every interface": no request names them as its Host.
_WILDCARD_ADDRESSES = {"", "0.0.0.0", "::", "[::]"}


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8300, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--token",
    envvar="MIDDLEWARE_INSPECT_TOKEN",
    help="Require this token on every request (Authorization: Bearer or ?token=); needed off loopback. "
    "Prefer $MIDDLEWARE_INSPECT_TOKEN: a command line is visible to other users.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="MIDDLEWARE_INSPECT_ALLOWED_HOSTS",
    help="Also answer requests whose Host header names this host (repeatable; '*' for any), such as the name a "
    "reverse proxy forwards. Loopback names and --host are always answered; others get 400 (DNS rebinding). "
    "$MIDDLEWARE_INSPECT_ALLOWED_HOSTS: space-separated.",
)
@click.pass_context
def inspect(ctx: click.Context, host: str, port: int, token: str | None, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the memory inspector: a JSON API and a page to browse sessions, open one and
    see what the model was sent on its last turn. Point it at a shared store (--redis-url)."""
    import uvicorn

    from ..inspector.app import LOOPBACK_HOSTS, create_app

    if not _is_loopback(host) and not token:
        raise click.UsageError(
            f"--host {host} is not loopback: the inspector shows conversation content, so set --token "
            "(or MIDDLEWARE_INSPECT_TOKEN), and put it behind TLS (see README, 'The memory inspector')."
        )
    mgr = ctx.obj.manager()
    _warn_if_private_store(mgr)
    hosts = [*LOOPBACK_HOSTS, *([] if host in _WILDCARD_ADDRESSES else [host]), *allowed_hosts]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    click.echo(f"Memory inspector on {url}  (store {mgr.store!r}; Ctrl-C to stop)")
    if token:  # never printed: it would land in terminal scrollback, logs and screen shares
        where = "$MIDDLEWARE_INSPECT_TOKEN" if ctx.get_parameter_source("token") is ParameterSource.ENVIRONMENT else "--token"
        click.echo(f"Every request needs the token given by {where}: open {url}?token=<token>, or send "
                   "'Authorization: Bearer <token>'.")  # fmt: skip
    with _errors(), mgr:
        uvicorn.run(create_app(mgr, token=token, allowed_hosts=hosts), host=host, port=port, log_level="warning")


# --- serve -------------------------------------------------------------------


@main.command()
@click.option("--host", help="Address to listen on (default: the config's serve.host, 127.0.0.1).")
@click.option("--port", type=int, help="Port to listen on (default: the config's serve.port, 8400).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256), help="Worker processes sharing the store.")
@click.pass_obj
def serve(obj: _Context, host: str | None, port: int | None, workers: int) -> None:
    """Serve an OpenAI-compatible endpoint (POST /v1/chat/completions, GET /v1/models) that
    gives any chatbot memory: point its base_url here and name the session with the
    X-Session-Id header (or the request's user field, or metadata.session_id). Upstream
    keys come from the environment, as litellm reads them. Any number of processes, on
    any number of machines, can share one Redis or Redis Cluster."""
    import uvicorn

    config = obj.config()
    settings = config.serve
    host, port = host or settings.host, port or settings.port
    if not _is_loopback(host) and not settings.api_keys:
        raise click.UsageError(f"--host {host} is not loopback: set serve.api_keys in the config so clients must send a key.")
    memory = config.store.url.startswith("memory://")
    if memory and workers > 1:
        raise click.UsageError("--workers needs a shared store: memory:// lives inside one process (use --redis-url).")
    click.echo(f"OpenAI-compatible endpoint on http://{host}:{port}/v1  (store {_store_name(config)}; Ctrl-C to stop)")
    if workers == 1:
        from ..serve import create_app

        with _errors():
            uvicorn.run(create_app(config), host=host, port=port, log_level="warning")
        return
    # Each worker process builds its app from the environment: pass this command's choices on.
    if obj.config_path:
        os.environ["MIDDLEWARE_CONFIG"] = str(Path(obj.config_path).resolve())
    os.environ[ENV_REDIS_URL] = config.store.url
    uvicorn.run(
        "middleware.serve.app:app_from_environment", factory=True, host=host, port=port, workers=workers, log_level="warning"
    )


def _store_name(config: Config) -> str:
    from ..core.text import redact_url

    return redact_url(config.store.url)


# --- sessions ----------------------------------------------------------------


@main.group()
def sessions() -> None:
    """List, show and reset sessions in the configured store."""


@sessions.command("list")
@click.option("--search", help="Only sessions whose id contains this text.")
@click.option("--page", default=1, show_default=True, type=int, help="Page number (from 1).")
@click.option("--page-size", default=20, show_default=True, type=int, help="Sessions per page (1-200).")
@click.pass_obj
def sessions_list(obj: _Context, search: str | None, page: int, page_size: int) -> None:
    """Sessions, most recently updated first."""
    from rich.table import Table

    mgr = obj.manager()
    _warn_if_private_store(mgr)
    with _errors(), mgr:
        result = mgr.list_sessions(search=search, page=page, page_size=page_size)
    table = Table(title=f"sessions · page {result.page}/{result.total_pages} · {result.total} in all", title_justify="left")
    for column in ["session", "updated", "turns", "context keys", "summary lines", "recent", "full-history tokens"]:
        table.add_column(column, justify="left" if column in {"session", "updated"} else "right")
    for entry in result.entries:
        updated = datetime.fromtimestamp(entry.updated_at, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            _text(entry.session_id),
            updated,
            str(entry.turns),
            str(entry.context_keys),
            str(entry.summary_lines),
            str(entry.recent_messages),
            f"{entry.full_tokens:,}",
        )
    _console().print(table)


@sessions.command("show")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a readable view.")
@click.pass_obj
def sessions_show(obj: _Context, session_id: str, as_json: bool) -> None:
    """What one session remembers: context keys, summary, recent messages, counters."""
    from dataclasses import asdict

    mgr = obj.manager()
    _warn_if_private_store(mgr)
    with _errors(), mgr:
        state = mgr.get_state(session_id)
    if state.is_empty:
        raise click.ClickException(f"no session {session_id!r}")
    if as_json:
        data = {k: v for k, v in asdict(state).items() if k != "pairs"}
        click.echo(printable_json(json.dumps(data, indent=2, ensure_ascii=False)))
        return
    _print_state(_console(), session_id, state)


def _print_state(console: Any, session_id: str, state: Any) -> None:
    owner = ("", " · user ", _text(state.owner[0]), " · agent ", _text(state.owner[1])) if state.owner else ("",)
    console.print(_joined(_text(session_id, "bold"), f" · {state.turns} turn(s) · its messages with tool details: "
                          f"{state.full_tokens:,} tokens", *owner))  # fmt: skip
    for title, lines in (
        ("context", [f"{k}: {v}" for k, v in state.context.items()]),
        *([("set earlier", [f"{k}={v}" for k, v in state.earlier.items()])] if state.earlier else []),
        ("summary", state.summary),
        ("recent", [f"{m['role']}: {m['content']}" for m in state.recent]),
        ("notes", state.notes.splitlines()),
    ):
        console.print(f"[bold]{title}[/bold]" + ("" if lines else " (none)"))
        for line in lines:
            console.print(_joined("  ", _text(line, lines=True)))


@sessions.command("reset")
@click.argument("session_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def sessions_reset(obj: _Context, session_id: str, yes: bool) -> None:
    """Forget a session entirely (asks first; --yes to skip, required when input is not a terminal)."""
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("not resetting without --yes: input is not a terminal to confirm on")
        click.confirm(f"Forget session {session_id!r}?", abort=True)
    mgr = obj.manager()
    _warn_if_private_store(mgr)
    with _errors(), mgr:
        existed = not mgr.get_state(session_id).is_empty
        mgr.reset(session_id)
    click.echo(f"session {session_id!r} reset" if existed else f"no session {session_id!r}: nothing to reset")


if __name__ == "__main__":  # pragma: no cover
    main()
