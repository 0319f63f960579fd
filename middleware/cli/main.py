"""The ``middleware`` command line: demo, chat, report, sessions, inspect and serve.

Every command has ``--help``. The store and config come from ``--config`` /
``$MIDDLEWARE_CONFIG`` and ``--redis-url`` / ``$REDIS_URL``, as for the library.

Whatever came from the store, a log, a model or the command line prints as the text it
is: never as rich markup, and with control characters (ANSI and OSC 8 escape sequences,
bidi overrides) shown escaped. Only the command's own words carry markup.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ..config.files import ENV_REDIS_URL
from ..config.schema import Config
from ..core.text import printable
from ..exceptions import LLMError, require
from .console import CliContext, checked_tenant, errors, joined, literal, new_console, store_options, warn_if_private_store
from .demo import demo
from .report import report
from .sessions import print_state, sessions

if TYPE_CHECKING:
    from ..session.manager import SessionManager

__all__ = ["main"]


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
@click.option(
    "--tenant",
    help="Work on the sessions of this tenant of the endpoint (a serve.api_keys tenant; a key given alone "
    "is key-<digest>, as serve prints at start). Default: the sessions of no tenant (the library's).",
)
@click.version_option(package_name="token-middleware", prog_name="middleware")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, redis_url: str | None, tenant: str | None) -> None:
    """Token-efficient memory between a chatbot and its LLM."""
    ctx.obj = CliContext(config_path, redis_url, checked_tenant(tenant))


# --- chat --------------------------------------------------------------------


@main.command()
@store_options
@click.option("--session", default="cli", show_default=True, help="Session id.")
@click.option("--model", help="Any litellm model string (default: the config's model). Try scripted/atlas offline.")
@click.option("--stream/--no-stream", default=True, show_default=True, help="Print the reply as it arrives.")
@click.pass_obj
def chat(obj: CliContext, session: str, model: str | None, stream: bool) -> None:
    """Talk to a model with memory in the configured store. Type /exit to leave,
    /state to see what the session remembers, /reset to forget it.

    Reads one message a line from standard input when it is not a terminal. A turn
    whose model call fails is reported and the conversation goes on; the command then
    exits with status 1, so a script sees that some message got no reply."""
    console = new_console()
    mgr = obj.manager()
    model = model or mgr.config.model
    if model.startswith("scripted/"):
        from .. import demo  # noqa: F401 (serves scripted/atlas)
    interactive = sys.stdin.isatty()
    if interactive:
        console.print(
            joined(
                "Session '",
                literal(session),
                "' · model ",
                literal(model),
                " · store ",
                literal(repr(mgr.store)),
                ". /exit to leave.",
            )
        )
    failed = 0
    with errors(), mgr:
        for line in _lines(interactive):
            text = line.strip()
            if not text:
                continue
            if text in {"/exit", "/quit"}:
                break
            if text == "/state":
                print_state(console, session, mgr.get_state(session))
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
                console.print(literal(exc, "red"))
                failed += 1
                continue
            first = result.calls[0] if result.calls else None
            if first is not None:
                console.print(
                    f"[dim]{first['tokens']['total']:,} tokens sent · {first['full_history_tokens']:,} with the "
                    f"full history · {first['saved_pct']:.0f}% saved[/dim]"
                )
    if failed:
        raise click.ClickException(f"{failed} turn{'s' if failed > 1 else ''} got no reply (the model call failed)")


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
        console.print(joined(literal(mgr.config.assistant.name), "> ", literal(result.text, lines=True)))
        return result
    replies = mgr.chat(session, text, model=model, stream=True)
    console.print(joined(literal(mgr.config.assistant.name), "> "), end="")
    for chunk in replies:
        console.print(literal(chunk, lines=True), end="", soft_wrap=True)
    console.print()
    return replies.result


# --- inspect -----------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_listen(host: str, port: int) -> None:
    """Fail before any banner when the address cannot be listened on (a port in use, an
    address this machine does not have), as uvicorn would after the banner said it serves.
    Bound as uvicorn binds (SO_REUSEADDR), then released for it."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise click.ClickException(f"cannot listen on {printable(host[:80])} port {port}: {reason}") from None


# Bind addresses that mean "every interface": no request names them as its Host.
_WILDCARD_ADDRESSES = {"", "0.0.0.0", "::", "[::]"}


@main.command()
@store_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8300, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
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
    uvicorn = _web_server("inspect")

    from ..inspector.app import LOOPBACK_HOSTS, create_app

    if not _is_loopback(host) and not token:
        raise click.UsageError(
            f"--host {host} is not loopback: the inspector shows conversation content, so set --token "
            "(or MIDDLEWARE_INSPECT_TOKEN), and put it behind TLS (see docs/guides/inspector.md)."
        )
    _check_listen(host, port)
    mgr = ctx.obj.manager()
    warn_if_private_store(mgr)
    hosts = [*LOOPBACK_HOSTS, *([] if host in _WILDCARD_ADDRESSES else [host]), *allowed_hosts]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    click.echo(f"Memory inspector on {url}  (store {mgr.store!r}; Ctrl-C to stop)")
    if token:  # never printed: it would land in terminal scrollback, logs and screen shares
        where = "$MIDDLEWARE_INSPECT_TOKEN" if ctx.get_parameter_source("token") is ParameterSource.ENVIRONMENT else "--token"
        click.echo(f"Every request needs the token given by {where}: open {url}?token=<token>, or send "
                   "'Authorization: Bearer <token>'.")  # fmt: skip
    with errors(), mgr:
        uvicorn.run(create_app(mgr, token=token, allowed_hosts=hosts), host=host, port=port, log_level="warning")


# --- serve -------------------------------------------------------------------


@main.command()
@store_options
@click.option("--host", help="Address to listen on (default: the config's serve.host, 127.0.0.1).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port to listen on (default: the config's serve.port, 8400).")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256), help="Worker processes sharing the store.")
@click.pass_obj
def serve(obj: CliContext, host: str | None, port: int | None, workers: int) -> None:
    """Serve an OpenAI-compatible endpoint (POST /v1/chat/completions, GET /v1/models) that
    gives any chatbot memory: point its base_url here and name the session with the
    X-Session-Id header (or the request's user field, or metadata.session_id). Upstream
    keys come from the environment, as litellm reads them. Any number of processes, on
    any number of machines, can share one Redis or Redis Cluster."""
    uvicorn = _web_server("serve")

    if obj.tenant is not None:
        raise click.UsageError("serve serves every tenant of serve.api_keys; --tenant is for chat, sessions and inspect.")
    config = obj.config()
    settings = config.serve
    host, port = host or settings.host, port if port is not None else settings.port
    if not _is_loopback(host) and not settings.api_keys:
        raise click.UsageError(f"--host {host} is not loopback: set serve.api_keys in the config so clients must send a key.")
    memory = config.store.url.startswith("memory://")
    if memory and workers > 1:
        raise click.UsageError("--workers needs a shared store: memory:// lives inside one process (use --redis-url).")
    _check_listen(host, port)
    click.echo(f"OpenAI-compatible endpoint on http://{host}:{port}/v1  (store {_store_name(config)}; Ctrl-C to stop)")
    tenants = sorted({tenant for _, tenant in settings.tenants()})
    if tenants:  # what an operator passes to --tenant to look at a tenant's sessions
        click.echo(f"Tenants: {', '.join(tenants[:10])}" + (f" and {len(tenants) - 10} more" if len(tenants) > 10 else ""))
    from ..serve.server import log_to_stderr, options, raise_file_limit

    log_to_stderr()

    limit = raise_file_limit(settings.max_connections + 256)
    if limit < settings.max_connections + 64:
        click.echo(f"Warning: this process may open {limit} files; serve.max_connections is {settings.max_connections}. "
                   "Raise the limit (ulimit -n) or lower serve.max_connections.", err=True)  # fmt: skip
    if workers == 1:
        from ..serve import create_app

        with errors():
            uvicorn.run(create_app(config), host=host, port=port, **options(settings))
        return
    # Each worker process builds its app from the environment: pass this command's choices on.
    if obj.config_path:
        os.environ["MIDDLEWARE_CONFIG"] = str(Path(obj.config_path).resolve())
    os.environ[ENV_REDIS_URL] = config.store.url
    uvicorn.run("middleware.serve.app:app_from_environment", factory=True, host=host, port=port, workers=workers,
                **options(settings))  # fmt: skip


def _web_server(command: str) -> Any:
    """uvicorn, or a clear error: the endpoint and the inspector come with the serve extra."""
    try:
        require("starlette", "serve", "starlette uvicorn")
        return require("uvicorn", "serve", "starlette uvicorn")
    except ImportError as exc:
        raise click.ClickException(f"middleware {command}: {exc}") from None


def _store_name(config: Config) -> str:
    from ..core.text import redact_url

    return redact_url(config.store.url)


for command in (demo, report, sessions):
    main.add_command(command)


if __name__ == "__main__":  # pragma: no cover
    main()
