"""Users and agents: a (user, agent) pair's active session and its sessions, and the
long-term notes the pair keeps (which the model may edit with a tool)."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from ..config.schema import Config
from ..core.effects import Inline, Program
from ..core.notes import WRITES, apply_operation, notes_tool_schema
from ..core.state import check_session_id
from ..lru import Lru
from ..store.keys import Layout
from ..store.notes import edit_notes, read_notes
from ..store.sessions import pair_sessions, resolve_session
from ..tools import Tool

__all__ = ["Accounts"]

_PARTY_CHARS = 128


class Accounts:
    """The (user, agent) pairs of one engine. ``owners``: the owner each session was last
    seen with (shared with the session operations, which read its notes with its state)."""

    def __init__(self, config: Config, layout: Layout, owners: Lru[tuple[str, str]]) -> None:
        self.config, self.layout, self.owners = config, layout, owners

    def party(self, user_id: Any, agent: Any) -> tuple[str, str]:
        """The pair, checked (each at most 128 characters, printable)."""
        user_id = check_session_id(user_id, limit=_PARTY_CHARS, what="User id")
        return user_id, check_session_id(agent, limit=_PARTY_CHARS, what="Agent name")

    def session(self, user_id: str, agent: str, *, new: bool) -> Program[str]:
        """The pair's active session, created if there is none (with ``new``: always a fresh one)."""
        user_id, agent = self.party(user_id, agent)
        candidate = f"{user_id}/{agent}/{uuid.uuid4().hex[:12]}"  # readable, searchable, unique
        session_id = yield from resolve_session(self.layout, user_id, agent, candidate=candidate, now=time.time(), new=new)
        if session_id == candidate:
            self.owners.put(candidate, (user_id, agent))
        return session_id

    def sessions(self, user_id: str, agent: str) -> Program[list[tuple[str, float]]]:
        """The pair's sessions, newest first, with their creation times."""
        return pair_sessions(self.layout, *self.party(user_id, agent))

    def notes(self, user_id: str, agent: str) -> Program[str]:
        """The pair's notes (Markdown; "" when there are none)."""
        return read_notes(self.layout, *self.party(user_id, agent))

    def manage_notes(
        self, user_id: str, agent: str, operation: str = "read", *, content: str | None = None, section_header: str | None = None
    ) -> Program[str]:
        """Read or edit the notes; returns what to tell the caller. NotesError for a bad operation."""
        user_id, agent = self.party(user_id, agent)
        said: list[str] = []

        def edit(current: str) -> str:  # called again if another writer got there first
            updated, message = apply_operation(current, operation, content=content, section_header=section_header,
                                               max_chars=self.config.notes.max_chars)  # fmt: skip
            said.append(message)
            return updated

        if operation not in WRITES:
            edit((yield from read_notes(self.layout, user_id, agent)))
        else:
            yield from edit_notes(self.layout, user_id, agent, edit, edit_id=os.urandom(12).hex())
        return said[-1]

    def notes_tool(self, user_id: str, agent: str) -> Tool:
        """The ``manage_long_term_memory`` tool for this pair, for chat(tools=[...])."""
        user_id, agent = self.party(user_id, agent)
        manage = self.manage_notes

        def manage_long_term_memory(
            operation: str = "read", content: str | None = None, section_header: str | None = None
        ) -> Inline:
            return Inline(manage(user_id, agent, operation, content=content, section_header=section_header))

        return Tool(manage_long_term_memory, schema=notes_tool_schema())
