"""Semantic recall's side of the store: each archived piece's vector in a hash of its own,
under the session's hash tag behind a prefix the server's vector index covers (Redis 8, or
Redis Stack, outside a cluster), and the search for the pieces nearest a message."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

from ..core.archive import Candidate
from ..core.effects import Batch, Command, Plan
from .decoding import archived, error_text, text_of
from .keys import Layout, escape_tag

__all__ = ["encode_vector", "nearest", "vector_index", "vector_index_name", "vector_prefix", "vector_search", "vector_tag"]


def vector_prefix(layout: Layout, session_id: str) -> str:
    """Where a session's piece vectors live: under the session's hash tag, behind a
    prefix of their own that the vector index covers."""
    return f"{layout.prefix}:v:{{{escape_tag(session_id)}}}:"


def vector_tag(session_id: str) -> str:
    """The session as the index's tag field holds it: hex, so no id needs escaping."""
    return hashlib.sha1(session_id.encode()).hexdigest()[:20]


def vector_index_name(layout: Layout, dimensions: int) -> str:
    return f"{layout.prefix}:vectors:{dimensions}"


def encode_vector(vector: Sequence[float]) -> bytes:
    return struct.pack(f"<{len(vector)}f", *vector)


def vector_index(layout: Layout, dimensions: int) -> Plan[bool]:
    """Make the vector index for ``dimensions`` (kept if there); False when the server
    has no query engine (Redis 7 without modules, the embedded store) or is a cluster."""
    if layout.cluster:
        return False
    (reply,) = yield Batch([(
        "execute_command", "FT.CREATE", vector_index_name(layout, dimensions), "ON", "HASH", "PREFIX", "1",
        f"{layout.prefix}:v:", "SCHEMA", "s", "TAG", "turn", "NUMERIC", "vec", "VECTOR", "HNSW", "6",
        "TYPE", "FLOAT32", "DIM", str(dimensions), "DISTANCE_METRIC", "COSINE",
    )])  # fmt: skip
    return not isinstance(reply, Exception) or "already exists" in error_text(reply).lower()


def vector_search(layout: Layout, session_id: str, vector: Sequence[float], *, count: int) -> Command:
    """The session's pieces nearest ``vector`` (those the recent window shows are dropped by the caller)."""
    query = f"(@s:{{{vector_tag(session_id)}}})=>[KNN {count} @vec $q AS dist]"
    return ("execute_command", "FT.SEARCH", vector_index_name(layout, len(vector)), query, "PARAMS", "2", "q",
            encode_vector(vector), "RETURN", "3", "rec", "turn", "dist", "SORTBY", "dist", "LIMIT", "0", str(count),
            "DIALECT", "2")  # fmt: skip


def _search_rows(reply: Any) -> list[dict[str, Any]]:
    """FT.SEARCH's documents as field dicts, from a RESP2 array or a RESP3 map."""
    if isinstance(reply, dict):
        results = reply.get(b"results", reply.get("results")) or []
        rows = [r.get(b"extra_attributes", r.get("extra_attributes")) or {} for r in results if isinstance(r, dict)]
        return [{text_of(k): v for k, v in row.items()} for row in rows]
    if isinstance(reply, list):
        return [{text_of(f[i]): f[i + 1] for i in range(0, len(f) - 1, 2)} for f in reply[2::2] if isinstance(f, list)]
    return []


def nearest(reply: Any) -> tuple[Candidate, ...]:
    """The pieces a vector search found, their score the cosine similarity."""
    found = []
    for row in _search_rows(reply):
        kind, tokens, terms, text, around, novelty = archived(row.get("rec", b""))
        turn, distance = text_of(row.get("turn", b"0")), text_of(row.get("dist", b"2"))
        if text and tokens.isascii() and tokens.isdigit() and turn.isascii() and turn.isdigit():
            found.append(Candidate(int(turn), kind, text, int(tokens), 0.0, (), tuple(terms.split()), 1.0 - float(distance),
                                   0.0, around, novelty))  # fmt: skip
    return tuple(found)
