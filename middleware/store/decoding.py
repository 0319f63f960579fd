"""Reading Redis replies: text, error replies, and a session's state from the replies of its
four reads. Corrupt values are skipped and listed; an error reply other than a foreign
type at our key is the server refusing, never an empty memory."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple

import orjson

from ..config.sections import ContextConfig, SummaryConfig
from ..core.archive import Candidate
from ..core.context import sanitize_key, sanitize_value
from ..core.state import SessionState, StoredMessage, built, whole_pairs
from ..core.text import one_line
from ..exceptions import StoreError
from .keys import Layout

__all__ = [
    "LOAD_REPLIES",
    "PARTS",
    "Corrupt",
    "Loaded",
    "archived",
    "checked",
    "decode_state",
    "error_text",
    "refused",
    "text_of",
    "text_or_empty",
    "wrong_type",
]

_loads = orjson.loads  # about ten times faster than the json module on the store's own records


def archived(record: Any) -> tuple[str, str, str, str, tuple[str, str], float]:
    """An archived piece's record (see ``record``): its kind, tokens, terms, text, a user
    sentence's neighbours (("", "") where it has none, as in a record written before them)
    and the share of its terms that were rare when it was written (1.0 in a record written
    before the share was)."""
    kind, tokens, terms, text = [*text_of(record).split("\t", 3), "", "", ""][:4]
    tokens, _, share = tokens.partition(":")
    novelty = int(share) / 100 if share.isascii() and share.isdigit() and len(share) <= 3 else 1.0
    if "\t" not in text:
        return kind, tokens, terms, text, ("", ""), min(novelty, 1.0)
    text, _, rest = text.partition("\t")
    before, _, after = rest.partition("\t")
    return kind, tokens, terms, text, (before, after.replace("\t", " ")), min(novelty, 1.0)


def text_of(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def text_or_empty(value: Any) -> str:
    """A string reply as text; a missing key (None) or anything else as ""."""
    return text_of(value) if isinstance(value, bytes) else ""


def error_text(error: BaseException) -> str:
    """What Redis said, without the failed command that redis-py quotes before it (its
    arguments carry message text): ``Command # 3 (RPUSH … ) of pipeline caused error: X`` is X."""
    said: Any = error.args[0] if error.args else ""
    while isinstance(said, tuple) and said:  # redis.asyncio nests the message in a tuple
        said = said[0]
    return str(said).rsplit(" of pipeline caused error: ", 1)[-1][:200]


def wrong_type(error: BaseException) -> bool:
    """A key holding another type of value: a corrupt record, skipped on read, replaced on write."""
    return error_text(error).startswith("WRONGTYPE")


def refused(error: BaseException) -> StoreError:
    return StoreError(f"Redis replied with an error: {type(error).__name__}: {error_text(error)}")


def checked(replies: Sequence[Any]) -> Sequence[Any]:
    """The replies, or StoreError for the first error reply among them."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise refused(reply)
    return replies


class Corrupt(NamedTuple):
    """A record skipped on load: which part of the session, and why."""

    part: str
    reason: str


PARTS = ("ctx", "sum", "recent", "meta")  # what load_commands reads, in order
LOAD_REPLIES = len(PARTS)
_META_FIELDS = {name: name.encode() for name in ("turns", "full_tokens", "created", "updated")}


def _turn_of(score: float) -> int:
    """The turn a context value was set in, from its score (0 for a value stored by an
    earlier version, scored by the clock)."""
    return int(score // 1000) if score < 1e12 else 0


def _decode_context(
    reply: Any, settings: ContextConfig, bad: list[Corrupt]
) -> tuple[dict[str, str], dict[str, str], dict[str, list[tuple[str, int]]]]:
    """The current value of each key (its newest): of the ``max_keys`` keys set last, and of
    the ``earlier_keys`` set before them; and each key's earlier values, newest first."""
    values: dict[str, list[tuple[float, str]]] = {}
    limit = settings.max_value_chars
    for raw, score in reply:  # lowest score first
        text = text_of(raw)
        key, equals, value = text.partition("=")
        clean_key = sanitize_key(key)
        # Values were sanitized when written; a record written behind our back is re-sanitized.
        clean_value = (value if value.isprintable() and len(value) <= limit and value == value.strip() and value
                       else sanitize_value(value, limit)) if equals else None  # fmt: skip
        if clean_key is None or clean_value is None:
            bad.append(Corrupt("ctx", f"member {text[:80]!r} has an unusable key or value"))
            continue
        values.setdefault(clean_key, []).append((score, clean_value))
    for history in values.values():
        if len(history) > 1:
            history.sort()  # a reply not in score order (the store's is) still gives the newest last
    if settings.keys is not None and not values.keys() <= set(settings.keys):
        values = {k: v for k, v in values.items() if k in settings.keys}
    kept = settings.max_keys + settings.earlier_keys
    # In the order they were last set; beyond what is kept, the keys set most recently.
    values = dict(sorted(values.items(), key=lambda item: item[1][-1][0])[-kept:])
    latest = [(key, history[-1][1]) for key, history in values.items()]
    cut = max(len(latest) - settings.max_keys, 0)  # the keys set before the max_keys set last
    context, earlier = dict(latest[cut:]), dict(latest[:cut])
    facts = {key: [(value, _turn_of(score)) for score, value in reversed(history[:-1])]
             for key, history in values.items() if len(history) > 1}  # fmt: skip
    return context, earlier, facts


def _decode_recent(reply: Any, bad: list[Corrupt]) -> list[StoredMessage]:
    messages = []
    for raw in reply:
        try:
            record = _loads(raw)
            role, content = record["role"], record["content"]
            tokens = record.get("tokens", -1)
            if role not in {"user", "assistant"} or not isinstance(content, str):
                raise ValueError("bad role or content")
        except (ValueError, TypeError, KeyError, AttributeError):
            bad.append(Corrupt("recent", f"entry {raw[:80]!r} is not a message record"))
            continue
        valid_count = isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0
        messages.append(StoredMessage(role, content, tokens if valid_count else -1))
    return whole_pairs(messages)


def _decode_summary(reply: Iterable[bytes], summary: SummaryConfig) -> list[str]:
    limit = summary.user_brief_chars + summary.action_brief_chars + 8
    lines = [one_line(raw.decode("utf-8", "replace"), limit) for raw in reply]
    return [line for line in lines if line]


def _meta_number(meta: Mapping[bytes, bytes], name: str, kind: type, bad: list[Corrupt]) -> Any:
    raw = meta.get(_META_FIELDS[name])
    if raw is None:
        return None
    try:
        return kind(raw.decode())
    except (ValueError, UnicodeDecodeError):
        bad.append(Corrupt("meta", f"{name}={raw[:40]!r} is not a number"))
        return None


def _tool_uses(meta: Mapping[bytes, bytes], bad: list[Corrupt]) -> dict[str, tuple[int, int]]:
    """The ``t:<tool>`` fields of the meta hash: tool name -> (order first sent, last turn)."""
    uses = {}
    for field, value in meta.items():
        if not field.startswith(b"t:"):
            continue
        order, _, last = value.partition(b" ")
        if not (order.isdigit() and last.isdigit()):
            bad.append(Corrupt("meta", f"{field[:80]!r}={value[:40]!r} is not '<order> <turn>'"))
            continue
        uses[field[2:].decode("utf-8", "replace")] = (int(order), int(last))
    return uses


def _owner(meta: Mapping[bytes, bytes]) -> tuple[str, str] | None:
    user, agent = meta.get(b"user"), meta.get(b"agent")
    if isinstance(user, bytes) and isinstance(agent, bytes):
        return user.decode("utf-8", "replace"), agent.decode("utf-8", "replace")
    return None


class Loaded(NamedTuple):
    state: SessionState
    corrupt: tuple[Corrupt, ...]  # records skipped
    missing: tuple[str, ...] = ()  # parts a session with turns must have and has not (evicted under maxmemory)
    candidates: tuple[Candidate, ...] = ()  # archived pieces the recall query found, best first
    ahead: tuple[Any, ...] = ()  # the replies of the commands sent ahead of the reads (see load.load)
    traces: tuple[bytes, ...] | None = None  # the turn records, where the load read them (see load.load)


def _missing(replies: Sequence[Any], turns: int, layout: Layout, bad: list[Corrupt]) -> tuple[str, ...]:
    """The parts every recorded turn writes that are gone while others stay: what an
    eviction policy left of the session (a session expires whole; nothing else removes
    one part). Parts read as corrupt are reported as such, not here."""
    ctx, summary, recent, meta = replies[:LOAD_REPLIES]
    if meta and summary and recent:  # every part there (a part read as corrupt is None here)
        return ()
    unreadable = {c.part for c in bad if c.reason.startswith("unreadable")}
    if not meta and "meta" not in unreadable:
        return ("meta",) if summary or recent or ctx else ()
    expected = (("sum", summary, layout.summary.lines), ("recent", recent, layout.recent_messages))
    return tuple(part for part, reply, kept in expected if turns and kept and not reply and part not in unreadable)


def decode_state(session_id: str, replies: Sequence[Any], layout: Layout) -> Loaded:
    """The state from the replies of ``load_commands`` (further replies are ignored); corrupt
    parts are skipped and listed."""
    bad: list[Corrupt] = []
    ctx, summary, recent_records, meta = replies[:LOAD_REPLIES]
    if any(map(isinstance, (ctx, summary, recent_records, meta), repeat(Exception))):
        # Something else was written at our key: skipped. Any other error (no permission,
        # cluster down) is the server refusing, not an empty memory.
        for part, reply in zip(PARTS, replies, strict=False):
            if isinstance(reply, Exception):
                if not wrong_type(reply):
                    raise refused(reply)
                bad.append(Corrupt(part, f"unreadable: {error_text(reply)}"))
        ctx, summary, recent_records, meta = (
            None if isinstance(r, Exception) else r for r in (ctx, summary, recent_records, meta)
        )
    context, earlier, facts = _decode_context(ctx or [], layout.context, bad)
    # The recent window is what the list holds, up to its configured length: lowered, the
    # list is longer until the next write, and the older turns it holds are not shown.
    recent = _decode_recent(recent_records or [], bad)
    recent = recent[len(recent) - layout.recent_messages :] if len(recent) > layout.recent_messages else recent
    lines = _decode_summary(summary or [], layout.summary)
    if not layout.summary.cover_recent:
        # The last lines belong to turns the recent window shows in full.
        lines = lines[: max(len(lines) - len(recent) // 2, 0)]
    meta = meta or {}
    state = built(
        SessionState,
        session_id=session_id,
        context=context,
        earlier=earlier,
        summary=lines[-layout.summary.lines :] if layout.summary.lines else [],
        recent=[{"role": m.role, "content": m.content} for m in recent],
        recent_tokens=tuple(m.tokens for m in recent),
        pairs=tuple(recent) if all(m.tokens >= 0 for m in recent) else None,
        turns=_meta_number(meta, "turns", int, bad) or 0,
        full_tokens=_meta_number(meta, "full_tokens", int, bad) or 0,
        created_at=_meta_number(meta, "created", float, bad),
        updated_at=_meta_number(meta, "updated", float, bad),
        owner=_owner(meta),
        composed=meta.get(b"composed") == b"1",
        notes="",
        facts=facts,
        tool_uses=_tool_uses(meta, bad),
    )
    missing = _missing((ctx, summary, recent_records, meta), state.turns, layout, bad)
    if "meta" in missing:  # no count: what is left tells at least how many turns there were
        state = dataclasses.replace(state, turns=max(len(summary or ()), len(recent) // 2))
    return Loaded(state, tuple(bad), missing)
