"""The key layout: every Redis key name is built here, and how one config lays sessions out.

All keys of a session share the hash tag ``{<session id>}``, so a session lives in one
Redis Cluster slot::

    <prefix>:{<sid>}:ctx      zset   member "key=value", score = turn * 1000 + position: each key's newest values
    <prefix>:{<sid>}:sum      list   summary lines, oldest first
    <prefix>:{<sid>}:recent   list   JSON {"role","content","tokens","turn"}: the recent window
    <prefix>:{<sid>}:meta     hash   turns, full_tokens, created, updated, last_turn, user, agent,
                                     and "t:<tool>" = "<order> <last turn>" for the tools called recently
    <prefix>:{<sid>}:traces   list   JSON turn records: the inspector, and a young session resending its history
    <prefix>:{<sid>}:prompt   string JSON of the prompt sent on the last recorded turn
    <prefix>:{<sid>}:ids      zset   ids of the last turns written, score = turn number
    <prefix>:{<sid>}:arc      hash   the episodic archive: "<turn>.<n>" -> "kind\ttokens:share\tterms\ttext[\tbefore\tafter]"
    <prefix>:{<sid>}:idx      hash   term -> ids of the archived pieces holding it, newest last
    <prefix>:{<sid>}:live     hash   the endpoint's turns in flight (see ``live``)
    <prefix>:v:{<sid>}:<id>   hash   a piece's vector, for semantic recall (see ``vectors``)
    <prefix>:{u:<user>|<agent>}:active / :sessions / :notes   a (user, agent) pair
    <prefix>:{u:<user>|<agent>}:edits    list   ids of the last edits of its notes, newest first
    <prefix>:sessions         zset   session id -> last update (seconds): the listing index
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

from ..config.schema import Config
from ..config.sections import ContextConfig, SummaryConfig

__all__ = [
    "POSTINGS",
    "TURN_IDS",
    "Layout",
    "PairKeys",
    "SessionKeys",
    "escape_tag",
    "pair_keys",
    "recorded_keys",
    "session_keys",
]

# Ids of the last turns each session remembers: a write retried after its reply was lost,
# or a turn held through an outage, is recognised if fewer than this many turns landed since.
TURN_IDS = 128
# Bytes of piece ids an index term keeps (between this and twice this, so that a list is
# not cut on every write), newest last; a recall reads the newest this many of each term,
# about 20 to 27 ids, which bounds its work whatever the archive holds. Reading more (256
# to 512 bytes, as before) cost up to twice the server time for a long message and kept no
# more needed values; reading 128 lost one answer in 289 with semantic recall
# (`python -m benchmarks.recall`).
POSTINGS = 192


def escape_tag(text: str) -> str:
    # The hash tag is the text between the first '{' and the next '}': braces in an id
    # must not end it early. '%' is escaped too so the mapping is one-to-one.
    return text.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


class SessionKeys(NamedTuple):
    """The Redis key names of one session: written, expiring and reset together."""

    ctx: str
    sum: str
    recent: str
    meta: str
    traces: str
    prompt: str
    ids: str
    arc: str
    idx: str
    live: str  # written by the endpoint only; here so that it expires and resets with the session


class PairKeys(NamedTuple):
    """The keys of one (user, agent) pair: its active session, its sessions, its notes and
    the ids of the last edits of its notes."""

    active: str
    sessions: str
    notes: str
    edits: str


@functools.lru_cache(maxsize=65_536)
def session_keys(prefix: str, session_id: str) -> SessionKeys:
    """The keys of a session, built in this one place."""
    base = f"{prefix}:{{{escape_tag(session_id)}}}"
    return SessionKeys(*(f"{base}:{name}" for name in SessionKeys._fields))


def pair_keys(prefix: str, user_id: str, agent: str) -> PairKeys:
    """The keys of a (user, agent) pair; '|' separates the two, so it is escaped inside them."""
    tag = "|".join(escape_tag(part).replace("|", "%7C") for part in (user_id, agent))
    return PairKeys(*(f"{prefix}:{{u:{tag}}}:{name}" for name in PairKeys._fields))


def recorded_keys(keys: SessionKeys) -> tuple[str, ...]:
    """The keys a recorded turn writes, in SessionKeys order: all but the endpoint's ``live`` hash."""
    return tuple(key for name, key in zip(SessionKeys._fields, keys, strict=True) if name != "live")


@dataclass(frozen=True, slots=True)
class Layout:
    """How one config lays sessions out: key names, bounds and expiry, read once."""

    prefix: str
    index: str
    max_keys: int  # context keys kept: those set most recently (shown ones and earlier ones)
    key_history: int  # values kept per context key, newest first (the first is the current one)
    summary_lines: int  # lines kept: those shown plus those of turns still in the recent window
    recent_messages: int
    trace_entries: int
    ttl_ms: int
    turn_ids: int  # ids of the last turns written, so a retried write is recognised
    archive_turns: int  # turns whose pieces the archive keeps (0: none)
    recall: bool  # a load asks the archive for what the current message needs
    cluster: bool
    notes_shown: bool  # notes.max_tokens > 0: a load reads the notes
    tool_window: int  # turns a called tool is remembered for disclosure (0: none are)
    semantic: bool  # memory.recall is semantic: turns write their pieces' vectors (outside a cluster)
    # What reading a session needs of the config: how context values and summary lines are bounded.
    context: ContextConfig
    summary: SummaryConfig

    @classmethod
    def of(cls, config: Config) -> Layout:
        shown, prefix = config.summary.lines, config.store.key_prefix
        return cls(
            prefix=prefix,
            index=f"{prefix}:sessions",
            max_keys=config.context.max_keys + config.context.earlier_keys,
            key_history=config.context.history,
            summary_lines=shown + (0 if config.summary.cover_recent or not shown else config.recent.turns),
            recent_messages=config.recent.messages,
            trace_entries=config.traces.max_entries,
            ttl_ms=config.store.ttl_seconds * 1000,
            turn_ids=TURN_IDS,
            archive_turns=config.memory.archive_turns,
            recall=bool(config.memory.archive_turns and config.memory.recall_tokens),
            cluster=config.store.cluster,
            notes_shown=config.notes.max_tokens > 0,
            tool_window=config.disclosure.recent_turns if config.disclosure.enabled else 0,
            semantic=config.memory.recall == "semantic" and not config.store.cluster,
            context=config.context,
            summary=config.summary,
        )

    def session(self, session_id: str) -> SessionKeys:
        return session_keys(self.prefix, session_id)

    def pair(self, user_id: str, agent: str) -> PairKeys:
        return pair_keys(self.prefix, user_id, agent)
