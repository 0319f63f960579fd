"""The Lua scripts the store runs, shipped as ``.lua`` files beside these modules, and the
argument records that say what each is given.

A script is sent by its SHA (``evalsha``); a server that has not seen it yet answers
NOSCRIPT and gets its text once. A script's ``ARGV`` is a frozen argument record: its fields,
in order, are the names the script's argument line gives them
(``local a, b = unpack(ARGV, 1, 2)``), and a test holds the two to each other, so an
argument cannot slip by one position without failing. A line ``--#include <file>`` takes
another script's text in its place (the endpoint's ordering scripts run the record script
as a function: scripts cannot call scripts).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from importlib.resources import files
from typing import Any, ClassVar

from ..core.effects import Command
from .decoding import error_text

__all__ = ["Arguments", "Script", "no_script"]

_INCLUDE = re.compile(r"^--#include (\S+)$", re.M)


def _read(name: str) -> str:
    text = (files(__package__) / name).read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda match: _read(match.group(1)).rstrip("\n"), text)


class Arguments:
    """Base of a script's argument record (a frozen dataclass): its fields, in order, are the
    script's named arguments; those in ``TAIL`` come after them, as counted groups the
    script reads with a cursor. ``argv()`` is the one place that orders them."""

    TAIL: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The named arguments, in the order the script's argument line names them."""
        return _names(cls)

    def head(self) -> list[Any]:
        return list(map(self.__getattribute__, _names(type(self))))

    def argv(self) -> list[Any]:
        """The script's ARGV: the named arguments, then the tail (scripts with one define it)."""
        return self.head()


_NAMES: dict[type[Arguments], tuple[str, ...]] = {}


def _names(cls: type[Arguments]) -> tuple[str, ...]:
    # Read once per record class: dataclasses.fields() on every write cost the record path
    # a few microseconds.
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls) if f.name not in cls.TAIL)  # type: ignore[arg-type]
    return names


@dataclass(frozen=True, slots=True)
class Script:
    """One Lua script: its name (the file ``<name>.lua``), its text and its SHA."""

    name: str
    text: str
    sha: str

    @classmethod
    def named(cls, name: str) -> Script:
        text = _read(f"{name}.lua")
        return cls(name, text, hashlib.sha1(text.encode()).hexdigest())

    def by_sha(self, keys: Sequence[str], arguments: Arguments) -> Command:
        """The command that runs the script by its SHA (redis-py's ``evalsha``)."""
        return ("evalsha", self.sha, len(keys), *keys, *arguments.argv())

    def by_text(self, command: Command) -> Command:
        """``command`` (from ``by_sha``) with the script's text, for a server that answered NOSCRIPT."""
        return ("eval", self.text, *command[2:])

    def inline(self, keys: Sequence[str], arguments: Arguments) -> Command:
        """The command that sends the text itself: for scripts a cluster client must route
        by their keys inside a transaction or pipeline."""
        return ("execute_command", "EVAL", self.text, len(keys), *keys, *arguments.argv())


def no_script(reply: Any) -> bool:
    """The server does not have the script yet (redis-py strips the NOSCRIPT prefix)."""
    return isinstance(reply, Exception) and (type(reply).__name__ == "NoScriptError" or "NOSCRIPT" in error_text(reply))
