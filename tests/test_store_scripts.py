"""The Lua scripts and their argument records: each script's argument line names exactly the
fields of its record, in the same order, and no script reads ARGV by a literal position."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from middleware.store.live import (
    ARRIVE,
    FINISH,
    FLUSH,
    RENEW,
    ArriveArguments,
    FinishArguments,
    FlushArguments,
    RenewArguments,
)
from middleware.store.load import LOAD, LoadArguments, load_script_until
from middleware.store.notes import NOTES_EDIT, EditArguments
from middleware.store.record import RECORD, RecordArguments
from middleware.store.retries import ANSWER, BEAT, AnswerArguments, BeatArguments
from middleware.store.scripts import Arguments, Script

STORE = Path(__file__).resolve().parent.parent / "middleware" / "store"
SCRIPTS: list[tuple[Script, type[Arguments]]] = [
    (LOAD, LoadArguments),
    (RECORD, RecordArguments),
    (NOTES_EDIT, EditArguments),
    (ARRIVE, ArriveArguments),
    (FINISH, FinishArguments),
    (FLUSH, FlushArguments),
    (RENEW, RenewArguments),
    (ANSWER, AnswerArguments),
    (BEAT, BeatArguments),
]
_ARGUMENT_LINE = re.compile(r"^local ([\w, ]+) = unpack\(ARGV, 1, (\d+)\)$", re.M)


def argument_line(text: str) -> tuple[list[str], int]:
    """The names a script's text gives its ARGV, and how many it unpacks."""
    found = _ARGUMENT_LINE.findall(text)
    assert len(found) == 1, f"{len(found)} argument lines; expected one"
    names, count = found[0]
    return [name.strip() for name in names.split(",")], int(count)


def matches(text: str, record: type[Arguments]) -> bool:
    names, count = argument_line(text)
    return names == list(record.names()) and count == len(names)


def own_text(script: Script) -> str:
    return (STORE / f"{script.name}.lua").read_text()


@pytest.mark.parametrize(("script", "record"), SCRIPTS, ids=lambda item: getattr(item, "name", getattr(item, "__name__", "")))
def test_a_script_names_its_record_fields_in_order(script: Script, record: type[Arguments]) -> None:
    """The script's argument line and its record list the same names in the same order."""
    assert matches(own_text(script), record)


@pytest.mark.parametrize(("script", "record"), SCRIPTS, ids=lambda item: getattr(item, "name", getattr(item, "__name__", "")))
def test_a_script_with_a_tail_reads_it_after_the_named_arguments(script: Script, record: type[Arguments]) -> None:
    """A record with variable-length groups: the script's cursor starts right after the named arguments."""
    names, _ = argument_line(own_text(script))
    cursor = f"local at = {len(names)} + 1"
    assert (cursor in script.text) == bool(record.TAIL)


@pytest.mark.parametrize("path", sorted(STORE.glob("*.lua")), ids=lambda p: p.name)
def test_no_script_reads_argv_by_a_literal_position(path: Path) -> None:
    """ARGV is read by name (the argument line) or by the tail's cursor, never as ARGV[3]."""
    assert re.findall(r"ARGV\[\s*\d+\s*\]", path.read_text()) == []


def test_every_script_file_is_run_or_included() -> None:
    """Each .lua file beside the store modules is a script with a record, or included by one."""
    included = {
        name
        for script, _ in SCRIPTS
        for name in re.findall(r"^--#include (\S+)$", (STORE / f"{script.name}.lua").read_text(), re.M)
    }
    included |= set(re.findall(r"^--#include (\S+)$", (STORE / "order.lua").read_text(), re.M))
    assert {p.name for p in STORE.glob("*.lua")} == {f"{script.name}.lua" for script, _ in SCRIPTS} | included


def test_the_check_would_see_a_shifted_argument() -> None:
    """A record with a field the script does not name, or two fields swapped, fails the check
    (so the test above can fail)."""

    @dataclass(frozen=True, kw_only=True)
    class Shifted(Arguments):
        read: str
        extra: str
        written: str
        edit_id: str
        ids_kept: int

    @dataclass(frozen=True, kw_only=True)
    class Swapped(Arguments):
        written: str
        read: str
        edit_id: str
        ids_kept: int

    text = own_text(NOTES_EDIT)
    assert matches(text, EditArguments) and not matches(text, Shifted) and not matches(text, Swapped)


@pytest.mark.parametrize("part", ["entries", "scoring", "chosen"])
def test_the_load_script_can_be_cut_at_each_part_it_marks(part: str, real_redis_url: str) -> None:
    """The recall benchmark times load.lua part by part: each part it names is marked once, and
    the script cut there returns what it has read (and the server still takes it)."""
    import redis

    cut = load_script_until(part)
    assert cut.count("do return out end") == 1 and cut.index("do return out end") < cut.index(f"-- part: {part}")
    client = redis.Redis.from_url(real_redis_url)
    try:
        assert client.script_load(cut)  # still a whole Lua chunk
    finally:
        client.close()
    with pytest.raises(ValueError, match="marks no part"):
        load_script_until("nowhere")
