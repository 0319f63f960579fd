"""Progressive tool disclosure: which tool schemas each LLM call carries. No I/O.

Tool schemas are part of every prompt and often its largest part. Instead of every
schema on every call, a call carries:

1. the **loader**, a small built-in tool whose description is the index of every tool
   by group (a configured skill, or a group made from the tools' module, class or name
   prefix); the model calls it with tool or group names, it answers with one line, and
   the next call of the same turn's tool loop carries their schemas;
2. the tools pinned by ``disclosure.always``;
3. the tools the session called in its last ``disclosure.recent_turns`` turns (or all
   tools of their groups, with ``recent_scope: skill``), in the order they were first
   sent, so the list only grows at its end while they stay in use; where the model's
   prompt caching does not make them worth keeping, they do not stay (``select``'s ``cached``),
   and where they are kept though short of the model's minimum cached prefix, the matched
   tools (4, 5) join them, called or not, until they reach it (``select``'s ``grows``);
4. up to ``disclosure.match_tools`` tools whose names, descriptions and parameters share
   words with the current message (BM25 over ``core.lexical``'s words, those recall indexes by), after the others: they change
   from turn to turn, so they come last. With ``disclosure.embedding_model`` they are
   ranked by meaning as well (the cosine of the message's and each tool's embedding, added
   to the word score scaled to the best); a tool that shares no word with the message is
   matched only when its cosine stands out from the tool set's (``MEANING_STANDOUT``).
5. up to ``disclosure.co_use_tools`` tools the model has called in most of the turns in
   which it called one of those and could have called them (``CoUse``: ``cd`` with a file
   operation, a login with what needs it), learned from the turns recorded: requests often
   need tools they do not name.

Where the model's prompt caching reads the prompt's opening, the caller may leave out
matches (4, 5) at ranks the model seldom calls (``MatchOdds``; ``DisclosedTools.drop``).

The loader and the tools that stay (1-3) are the stable prefix a provider can cache; only
the matched tools and what a turn loads vary. Tools of a group whose descriptions open
with the same sentences (an API's "This tool belongs to ..." preamble) carry them once per
call, in the first of the group's tools sent (``disclosure.share_preambles``): the same
words, stated once. A model that calls a known tool whose schema
it was not sent gets it run (its arguments checked against the schema) or, when the
arguments do not fit, loaded with a one-line answer: never an opaque error.
"""

from __future__ import annotations

from .baseline import baseline_messages
from .catalog import LOADER_DESCRIPTION, Catalog, Companions, DisclosedTools, Uses
from .groups import ToolEntry, auto_groups, entry_of, shared_preamble
from .odds import CoUse, MatchOdds

__all__ = [
    "LOADER_DESCRIPTION",
    "Catalog",
    "CoUse",
    "Companions",
    "DisclosedTools",
    "MatchOdds",
    "ToolEntry",
    "Uses",
    "auto_groups",
    "baseline_messages",
    "entry_of",
    "shared_preamble",
]
