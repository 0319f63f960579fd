"""The memory inspector's views, as pure functions over what the store returns.

A paged listing of sessions, newest first and searchable by id; one session's view with include flags and limits;
raw traces merged and sorted by (time, turn, sequence); a conversation view in
which a tool call and its result become one entry and a result without its call
is kept as an orphan. Bad records never fail a view: they are skipped and named
in ``warnings``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ..core.state import SessionPage
from ..store.sessions import Inspection

__all__ = ["INCLUDES", "conversation_view", "listing", "parse_traces", "session_view"]

INCLUDES = ("context", "summary", "recent", "notes", "traces", "conversation", "prompt")
MAX_LIMIT = 1_000


def listing(page: SessionPage) -> dict[str, Any]:
    return {
        "entries": [asdict(entry) for entry in page.entries],
        "total": page.total,
        "page": page.page,
        "page_size": page.page_size,
        "total_pages": page.total_pages,
    }


def parse_traces(raw: Any, warnings: list[str]) -> list[dict[str, Any]]:
    """Trace events of the stored turn records, sorted by (ts, turn_id, seq); unreadable
    records and events are skipped with a warning."""
    if isinstance(raw, Exception):
        warnings.append(f"traces: unreadable ({raw})")
        return []
    events = []
    for index, item in enumerate(raw or ()):
        try:
            record = json.loads(item)
            if not isinstance(record, dict) or not isinstance(record.get("events"), list):
                raise ValueError("not a turn record")
            ts, turn_id = float(record.get("ts") or 0.0), str(record.get("turn_id", ""))
        except (ValueError, TypeError):
            warnings.append(f"traces: record {index} is not a turn record")
            continue
        for seq, event in enumerate(record["events"]):
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                warnings.append(f"traces: record {index} has an unreadable event {seq}")
                continue
            events.append({**event, "ts": ts, "turn_id": turn_id, "seq": seq})
    return sorted(events, key=lambda e: (e["ts"], e["turn_id"], e["seq"]))


def conversation_view(traces: Sequence[Mapping[str, Any]], *, collapse: bool = True) -> list[dict[str, Any]]:
    """Messages, with each tool call and its result collapsed into one ``tool`` entry.

    A result whose call is not in the traces (trimmed away, or never written) is kept
    as ``tool_result_orphan``; a call without a result stays a ``tool`` entry with no result.
    """
    entries: list[dict[str, Any]] = []
    open_calls: dict[str, dict[str, Any]] = {}
    for trace in traces:
        kind = trace.get("type")
        if kind in {"user", "assistant"}:
            entries.append({"kind": "message", "role": kind, "content": trace.get("content"), "ts": trace.get("ts")})
        elif kind == "tool_call":
            entry = {"kind": "tool", "tool": trace.get("tool"), "arguments": trace.get("arguments"),
                     "result": None, "ok": None, "ts": trace.get("ts")}  # fmt: skip
            entries.append(entry)
            if collapse:
                open_calls[str(trace.get("call_id"))] = entry
            else:
                entry["kind"] = "tool_call"
        elif kind == "omitted":
            entries.append({"kind": "omitted", "tool_calls": trace.get("tool_calls"), "ts": trace.get("ts")})
        elif kind == "tool_result":
            call = open_calls.pop(str(trace.get("call_id")), None) if collapse else None
            if call is not None:
                call.update(result=trace.get("result"), ok=trace.get("ok"))
            else:
                entries.append({"kind": "tool_result" if not collapse else "tool_result_orphan", "tool": trace.get("tool"),
                                "result": trace.get("result"), "ok": trace.get("ok"), "ts": trace.get("ts")})  # fmt: skip
    return entries


def _prompt(raw: Any, warnings: list[str]) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        prompt = json.loads(raw)
        if not isinstance(prompt, dict) or not isinstance(prompt.get("messages"), list):
            raise ValueError
        return prompt
    except (ValueError, TypeError):
        warnings.append("prompt: the stored last prompt is not readable")
        return None


def _limit(value: int | None, default: int) -> int:
    return default if value is None else max(0, min(int(value), MAX_LIMIT))


def session_view(
    raw: Inspection,
    *,
    include: Iterable[str] = INCLUDES,
    trace_limit: int | None = None,
    conversation_limit: int | None = None,
) -> dict[str, Any]:
    """One session as the inspector shows it; ``include`` picks the parts."""
    state = raw.state
    wanted = set(include)
    warnings = [f"{corrupt.part}: {corrupt.reason}" for corrupt in raw.corrupt]
    view: dict[str, Any] = {
        "session_id": state.session_id,
        "turns": state.turns,
        "full_tokens": state.full_tokens,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "owner": {"user": state.owner[0], "agent": state.owner[1]} if state.owner else None,
    }
    if "context" in wanted:
        view["context"] = dict(state.context)
        view["earlier"] = dict(state.earlier)
        view["context_history"] = {key: [{"value": v, "turn": t} for v, t in values] for key, values in state.facts.items()}
    if "summary" in wanted:
        view["summary"] = list(state.summary)
    if "recent" in wanted:
        view["recent"] = [{**m, "tokens": t} for m, t in zip(state.recent, state.recent_tokens, strict=False)]
    if "notes" in wanted:
        view["notes"] = state.notes
    traces = parse_traces(raw.traces, warnings) if wanted & {"traces", "conversation"} else []
    if "traces" in wanted:
        limit = _limit(trace_limit, 100)
        view["traces"] = traces[-limit:] if limit else []
    if "conversation" in wanted:
        limit = _limit(conversation_limit, 50)
        conversation = conversation_view(traces)
        view["conversation"] = conversation[-limit:] if limit else []
    if "prompt" in wanted:
        view["prompt"] = _prompt(raw.prompt, warnings)
    view["warnings"] = warnings
    return view
