"""A (user, agent) pair's long-term notes: read, and edited atomically by compare and set
(``notes.lua``): an edit is set only if the notes are still what it read, and filed by its
id, so a write resent after a lost reply counts once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.effects import Batch, Plan
from ..exceptions import StoreError, StoreUnavailableError
from .decoding import checked, text_or_empty
from .keys import Layout
from .scripts import Arguments, Script

__all__ = ["NOTES_EDIT", "NOTES_EDIT_IDS", "EditArguments", "edit_notes", "read_notes"]

# Sent as its text (EVAL), not by SHA: a cluster client routes it by its keys, and a notes
# edit is rare enough that the bytes do not matter.
NOTES_EDIT = Script.named("notes")


@dataclass(frozen=True, slots=True, kw_only=True)
class EditArguments(Arguments):
    """ARGV of notes.lua: what the edit read, what it writes, its id, and how many ids are kept."""

    read: str
    written: str
    edit_id: str
    ids_kept: int


def read_notes(layout: Layout, user_id: str, agent: str) -> Plan[str]:
    """The pair's notes ("" when there are none)."""
    (value,) = checked((yield Batch([("get", layout.pair(user_id, agent).notes)])))
    return text_or_empty(value)


NOTES_ATTEMPTS = 50
# Times one edit is sent while its replies are lost (a dropped connection, a timeout): the same
# edit id each time, so an edit that landed counts once and is not applied again.
NOTES_RESENDS = 4
# Edits whose ids the notes keep: a resent edit is recognised if fewer than this many others landed since.
NOTES_EDIT_IDS = 32


def edit_notes(layout: Layout, user_id: str, agent: str, edit: Callable[[str], str], *, edit_id: str) -> Plan[str]:
    """Apply ``edit`` to the notes atomically: read, edit, then set only if no other writer
    changed them in between (else read again). ``edit_id``, unique to this edit, makes a
    resent write count once."""
    keys = layout.pair(user_id, agent)
    for _ in range(NOTES_ATTEMPTS):
        (value,) = checked((yield Batch([("get", keys.notes)])))
        current = text_or_empty(value)
        updated = edit(current)
        cas = NOTES_EDIT.inline((keys.notes, keys.edits), EditArguments(read=current, written=updated, edit_id=edit_id,
                                                                       ids_kept=NOTES_EDIT_IDS))  # fmt: skip
        for resend in range(NOTES_RESENDS):
            try:
                (written,) = checked((yield Batch([cas])))
                break
            except StoreUnavailableError:  # the reply was lost: the edit may have landed, and its id says so
                if resend == NOTES_RESENDS - 1:
                    raise
        if written:
            return updated
    raise StoreError(f"The notes of ({user_id!r}, {agent!r}) changed under {NOTES_ATTEMPTS} edits in a row; try again.")
