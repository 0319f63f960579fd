"""What every command shares: printing values literally (never as markup, control
characters escaped), library errors as one line, and the config and manager the global
options name."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import click

from ..config.files import ENV_REDIS_URL, load_config, with_command_log
from ..config.schema import Config
from ..config.service import TENANT
from ..core.text import printable
from ..exceptions import MiddlewareError

if TYPE_CHECKING:
    from rich.text import Text

    from ..session.manager import SessionManager

__all__ = ["CliContext", "Column", "errors", "fitted_table", "joined", "literal", "new_console", "warn_if_private_store"]

# Columns from which a table shows the columns marked wide-only, with their full headers.
WIDE = 120


class Column(NamedTuple):
    """A table column: its key and header, its header on a narrow terminal, whether it holds
    text (cut to fit, with the share of the room left) or a figure (never cut), and whether
    it is shown only on a wide terminal."""

    key: str
    header: str
    short: str | None = None
    share: int = 0  # > 0: a text column, taking this many parts of the room the figures leave
    wide_only: bool = False
    width: int = 6  # the column's least width
    left: bool = False  # a column of short words that are never cut (left-aligned)


def fitted_table(console: Any, title: Any, columns: list[Column], rows: list[dict[str, Any]]) -> Any:
    """``rows`` (cells by column key) as a table that fits the console: one line per row,
    figures whole, text columns cut with an ellipsis to share the room left; narrower than
    WIDE, wide-only columns are left out and headers shortened. From WIDE on, the wide-only
    columns are shown as far as they fit, the last ones left out first."""
    wide = console.width >= WIDE
    shown = [column for column in columns if wide or not column.wide_only]
    table = _table(title, shown, rows, wide)
    optional = [column for column in shown if column.wide_only]
    # A column that does not fit would be cut off at the terminal's edge: leave it out instead.
    while optional and _least_width(console, table) > console.width:
        shown.remove(optional.pop())
        table = _table(title, shown, rows, wide)
    return table


def _least_width(console: Any, table: Any) -> int:
    """The fewest columns ``table`` takes (an expanded table measures as wide as the console)."""
    from rich.measure import Measurement

    table.expand = False
    try:
        # Measured as if the console had room: a measurement is clamped to the room it is given.
        return int(Measurement.get(console, console.options.update(max_width=1_000_000), table).minimum)
    finally:
        table.expand = True


def _table(title: Any, shown: list[Column], rows: list[dict[str, Any]], wide: bool) -> Any:
    from rich import box
    from rich.table import Table

    headers = [column.header if wide or column.short is None else column.short for column in shown]
    widths = {column.key: max(len(header), column.width, *(len(str(row[column.key])) for row in rows))
              for column, header in zip(shown, headers, strict=True) if not column.share}  # fmt: skip
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, expand=True)
    for column, header in zip(shown, headers, strict=True):
        if column.share:  # shares the room the figures leave
            table.add_column(header, no_wrap=True, overflow="ellipsis", ratio=column.share, min_width=column.width)
        else:
            table.add_column(header, justify="left" if column.left else "right", no_wrap=True, min_width=widths[column.key])
    for row in rows:
        table.add_row(*(row[column.key] for column in shown))
    return table


def new_console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Piped or captured output gets a readable width instead of rich's 80 columns.
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 150
    return Console(stderr=stderr, highlight=False, width=width)


def literal(value: object, style: str = "", *, lines: bool = False) -> Text:
    """``value`` as rich prints it literally: a Text, so never markup or emoji codes, with its
    control characters escaped (line breaks and tabs too, unless ``lines``)."""
    from rich.text import Text

    return Text(printable(str(value), keep="\n\t" if lines else ""), style=style)


def joined(*parts: str | Text) -> Text:
    """One line: strings are the command's own words, other parts values made with ``_text``
    (nothing is parsed as markup)."""
    from rich.text import Text

    return Text.assemble(*parts)


@contextmanager
def errors() -> Iterator[None]:
    """Library errors become one clear line and exit status 1, not a traceback."""
    try:
        yield
    except MiddlewareError as exc:
        raise click.ClickException(printable(str(exc))) from None


def checked_tenant(tenant: str | None) -> str | None:
    if tenant is not None and not TENANT.fullmatch(tenant):
        raise click.BadParameter(f"{literal(tenant[:60])}: expected letters, digits, '_', '.' or '-' (at most 48)",
                                 param_hint="--tenant")  # fmt: skip
    return tenant


def _given_after(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def given(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(CliContext), field, checked_tenant(value) if field == "tenant" else value)

    return given


F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """--config, --redis-url and --tenant given after the command too (``sessions show X
    --redis-url …``), as before it, where they win. Found: after the command they were
    refused with "No such option"."""
    options = (
        click.option("--config", "config_path", type=click.Path(dir_okay=False), expose_value=False,
                     callback=_given_after("config_path"), help="Config file (as before the command)."),
        click.option("--redis-url", expose_value=False, callback=_given_after("redis_url"),
                     help="Session store URL (as before the command)."),
        click.option("--tenant", expose_value=False, callback=_given_after("tenant"),
                     help="The endpoint tenant whose sessions to use (as before the command)."),
    )  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


class CliContext:
    def __init__(self, config_path: str | None = None, redis_url: str | None = None, tenant: str | None = None) -> None:
        self.config_path = config_path
        self.redis_url = redis_url
        self.tenant = tenant

    def config(self, **overrides: Any) -> Config:
        with errors():
            # --redis-url is applied as load_config applies $REDIS_URL (one validation).
            env = {**os.environ, ENV_REDIS_URL: self.redis_url} if self.redis_url else None
            config = with_command_log(load_config(self.config_path, env=env))
            return (config.with_overrides(**overrides) if overrides else config).for_tenant(self.tenant)

    def manager(self, config: Config | None = None, **options: Any) -> SessionManager:
        from ..session.manager import SessionManager

        with errors():
            return SessionManager(config or self.config(), **options)


def warn_if_private_store(mgr: SessionManager) -> None:
    if mgr.config.store.url.startswith("memory://"):
        click.echo(
            "Note: the store is memory://, which lives inside this one process, so it holds no sessions of other "
            "processes. Point at a shared store with --redis-url or $REDIS_URL.", err=True,
        )  # fmt: skip
