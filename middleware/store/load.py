"""A session's load: its state in one round trip, with the archive's best pieces for the
current message (recall) and, for semantic recall, the nearest pieces by meaning.

The reads of a load and the archive's best pieces for a query run in one script
(``load.lua``): the query's terms are looked up in the index, each piece scored by the rare
terms it shares (BM25's idf, weighted per term), skipping turns out of the archive; of the
pieces holding a term of the current message itself (weight 1: the recent window's terms
only rank), the CANDIDATES best of the turns the recent window does not show come back with
their text, then as many of the window's own turns' calls, results and observations (the
window shows their user messages and replies only), scored by the same idf, which does not
count them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.archive import MIN_SCORE, Candidate
from ..core.effects import Batch, Command, Plan
from ..core.nearest import distinct_nearest
from .decoding import (
    LOAD_REPLIES,
    Corrupt,
    Loaded,
    archived,
    checked,
    decode_state,
    error_text,
    refused,
    text_of,
    text_or_empty,
    wrong_type,
)
from .keys import POSTINGS, Layout, SessionKeys
from .notes import read_notes
from .scripts import Arguments, Script, no_script
from .vectors import nearest, vector_search

__all__ = [
    "CANDIDATES",
    "COMMON_TERMS",
    "LOAD",
    "NEAREST",
    "NEAR_CANDIDATES",
    "POSTINGS",
    "LoadArguments",
    "load",
    "load_commands",
    "load_script_until",
    "query_argument",
]

# Of the message's terms whose lists fill those bytes (common words, held by a dozen or more
# recent pieces), a recall reads the first this many, in the message's order: such words
# rank little and cost the most to read. Reading all of them took 40% more server time
# for a long message and kept no more needed values (`python -m benchmarks.recall`).
COMMON_TERMS = 6
# Pieces a recall sends back at most, best first: the bytes read per call do not grow with the archive.
CANDIDATES = 10
# Pieces the vector search keeps at most (semantic recall, opt-in): more than the lexical
# side, since a small embedding model puts a reworded answer behind filler more often than
# shared words do. Chosen in side runs on the first and held-out wordings of the tool-free
# conversations (`python -m benchmarks.recall --embedding DIR`): 10, 20 and 30 put the
# answer in the prompt for 94.8%, 97.6% and 99.0% of the first set's questions and 62.8%,
# 68.8% and 69.7% of the held-out set's, at 0.6 and 0.2 points more of the full history's
# tokens; 20 lexical candidates as well added nothing.
NEAR_CANDIDATES = 30
# The vector search reads this many nearest, so that NEAR_CANDIDATES are left once pieces of
# the turns the recent window shows, of turns out of the archive and repeated texts are
# dropped (a phrase a user repeats turn after turn would otherwise fill every place).
NEAREST = 3 * NEAR_CANDIDATES

LOAD = Script.named("load")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadArguments(Arguments):
    """ARGV of load.lua. ``query``: "term weight term weight ..." in one argument (it costs
    the client less to send than two arguments a term); ``scan``: the bytes read of each
    term's ids, the newest; ``common``: how many terms whose ids fill them are read."""

    archive_turns: int
    recent_turns: int
    candidates: int
    n_terms: int
    query: str
    min_score: float
    scan: int
    common: int
    traces: int  # read the turn records of a session of at most this many turns, not composed (0: never)


def load_script_until(part: str) -> str:
    """load.lua returning early where it marks ``-- part: <part>`` (entries, scoring,
    chosen), with what it has read: for timing the script part by part."""
    marker = f"-- part: {part}"
    lines = LOAD.text.splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.startswith(marker) and line[len(marker) : len(marker) + 1] in (" ", "\n")]
    if len(found) != 1:
        raise ValueError(f"load.lua marks no part {part!r}; expected one '{marker}' line")
    return "".join([*lines[: found[0]], "do return out end\n", *lines[found[0] :]])


@functools.lru_cache(maxsize=65_536)
def load_commands(keys: SessionKeys) -> tuple[Command, ...]:
    """The reads of one load: the same for a session every time, so built once."""
    return (
        ("zrange", keys.ctx, 0, -1, False, True),  # desc=False, withscores=True
        ("lrange", keys.sum, 0, -1),
        ("lrange", keys.recent, 0, -1),
        ("hgetall", keys.meta),
    )


def _load_command(layout: Layout, keys: SessionKeys, query: Sequence[tuple[str, float]], traces: int) -> Command:
    head, tail = _load_frame(keys, layout.archive_turns, layout.recent_messages // 2, traces)
    return (*head, len(query), query_argument(query), *tail)


_QUERY_AT = LoadArguments.names().index("n_terms")  # the query's two arguments: n_terms, then query
if LoadArguments.names()[_QUERY_AT + 1] != "query":
    raise TypeError("LoadArguments: query must follow n_terms (_load_frame leaves their two places open)")


@functools.lru_cache(maxsize=65_536)
def _load_frame(keys: SessionKeys, archive_turns: int, recent_turns: int, traces: int) -> tuple[Command, Command]:
    """The load script's command before and after its query's two arguments: the same for
    a session every time, so built once."""
    arguments = LoadArguments(archive_turns=archive_turns, recent_turns=recent_turns, candidates=CANDIDATES, n_terms=0,
                              query="", min_score=MIN_SCORE, scan=POSTINGS, common=COMMON_TERMS, traces=traces)  # fmt: skip
    command = LOAD.by_sha((keys.ctx, keys.sum, keys.recent, keys.meta, keys.arc, keys.idx, keys.traces), arguments)
    at = len(command) - len(arguments.argv()) + _QUERY_AT
    return command[:at], command[at + 2 :]


def query_argument(query: Sequence[tuple[str, float]]) -> str:
    """The load script's query, "term weight term weight ...": terms are words (no spaces)."""
    text = " ".join(f"{term} {_WEIGHTS.get(weight) or repr(float(weight))}" for term, weight in query)
    if len(text.split()) != 2 * len(query):
        raise ValueError(
            f"recall query of {len(query)} terms: a term is empty or holds whitespace; expected words as lexical.terms gives"
        )
    return text


_WEIGHTS = {1.0: "1", 0.5: "0.5"}  # the two weights query_terms gives, spelt once


def _pairs(flat: Any) -> Any:
    """A script's flat [a, b, a, b...] reply as the pipeline would give it: [(a, b)...]."""
    return flat if isinstance(flat, Exception) else [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]


def _mapping(flat: Any) -> Any:
    return flat if isinstance(flat, Exception) else {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}


def _merged(lexical: Sequence[Candidate], near: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """One candidate per piece: a piece both searches found keeps its lexical score and
    gains its similarity and repeats."""
    similar = {(c.turn, c.text): c for c in near}
    merged = []
    for c in lexical:
        found = similar.pop((c.turn, c.text), None)
        merged.append(c._replace(similarity=found.similarity, repeats=found.repeats) if found else c)
    return (*merged, *similar.values())


def _candidates(flat: Any) -> tuple[Candidate, ...]:
    found = []
    for i in range(0, len(flat) - 4, 5):
        piece_id, score, asked, matched, record = flat[i : i + 5]
        kind, tokens, terms, text, around, novelty = archived(record)
        if text and tokens.isascii() and tokens.isdigit():
            turn = int(text_of(piece_id).partition(".")[0])
            # Positional: a NamedTuple's keyword constructor costs more.
            found.append(Candidate(turn, kind, text, int(tokens), float(score), tuple(text_of(matched).split()),
                                   tuple(terms.split()), 0.0, float(asked), around, novelty))  # fmt: skip
    return tuple(found)


def load(
    layout: Layout,
    session_id: str,
    *,
    owner: tuple[str, str] | None = None,
    query: Sequence[tuple[str, float]] = (),
    vector: Sequence[float] = (),
    ahead: Sequence[Command] = (),
    traces: bool = False,
) -> Plan[Loaded]:
    """A session's state in one round trip. Its notes join the reads when ``owner`` (the
    owner the caller last saw) is given; a session whose owner turns out different
    takes a second round trip for them. With a ``query`` (terms and weights), the
    archive's best pieces for it come back too (``Loaded.candidates``), and with a
    ``vector`` (the current message's embedding) the nearest pieces, from the server's
    vector index, in the same round trip. Commands given ``ahead`` go first in that round
    trip (their replies in ``Loaded.ahead``; on a cluster, which sends a script by its SHA
    only alone, in a round trip of their own). With ``traces``, a recall's script also
    reads the turn records of a session young enough to resend its history
    (``Loaded.traces``; ``caching.resend_history``)."""
    notes_shown, keys = layout.notes_shown, layout.session(session_id)
    recall = bool(query) and layout.recall
    commands = (_load_command(layout, keys, query, layout.trace_entries if traces else 0),) if recall else load_commands(keys)
    if owner is not None and notes_shown:
        commands = (*commands, ("get", layout.pair(*owner).notes))
    if vector:
        commands = (*commands, vector_search(layout, session_id, vector, count=NEAREST))
    if ahead and layout.cluster:
        before: Sequence[Any] = yield Batch(list(ahead))
        replies = yield Batch(commands)
    else:
        replies = yield Batch([*ahead, *commands])
        before, replies = replies[: len(ahead)], replies[len(ahead) :]
    if vector:
        near, replies = nearest(replies[-1]), replies[:-1]
    candidates: tuple[Candidate, ...] = ()
    records: Any = None
    if recall:
        if no_script(replies[0]):
            replies = yield Batch([LOAD.by_text(commands[0]), *commands[1 : len(replies)]])
        script, *rest = replies
        if isinstance(script, Exception):
            raise refused(script)
        ctx, summary, recent, meta, found, records = script
        replies = [_pairs(ctx), summary, recent, _mapping(meta), *rest]
        candidates = _candidates(found)
    loaded = decode_state(session_id, replies, layout)
    if vector:  # the index may still hold vectors of turns out of the archive: they are not recalled
        turns = loaded.state.turns
        shown = turns - len(loaded.state.recent) // 2  # the window's turns are shown whole
        candidates = _merged(candidates, distinct_nearest(near, turns - layout.archive_turns + 1, shown, NEAR_CANDIDATES))
    if isinstance(records, Exception):  # a traces key of another type: corrupt, so not resent (record.lua replaces it)
        if not wrong_type(records):
            raise refused(records)
        loaded = loaded._replace(corrupt=(*loaded.corrupt, Corrupt("traces", f"unreadable: {error_text(records)[:80]}")))
        records = ()
    loaded = loaded._replace(candidates=candidates, ahead=tuple(before), traces=tuple(records) if records is not None else None)
    if "meta" in loaded.missing:  # the ids of the last turns carry the count the meta hash lost
        (last,) = yield Batch([("zrange", keys.ids, -1, -1, False, True)])
        counted = int(last[0][1]) if isinstance(last, list) and last else 0
        loaded = loaded._replace(state=dataclasses.replace(loaded.state, turns=max(loaded.state.turns, counted)))
    found_owner = loaded.state.owner
    if found_owner is None or not notes_shown:
        return loaded
    if found_owner == owner:
        text = text_or_empty(checked(replies[LOAD_REPLIES:])[0])
    else:
        text = yield from read_notes(layout, *found_owner)
    return loaded._replace(state=dataclasses.replace(loaded.state, notes=text))
