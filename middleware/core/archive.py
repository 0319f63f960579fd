"""The episodic archive and recall. No I/O.

Every recorded turn is also kept as a few small *pieces*: the user's sentences, each
tool call with its arguments, an observation of each result, the reply, and what
connectors observed. A piece has a kind, its text (one line, capped) and its *terms*
(``lexical.terms``: lower-cased words, lightly stemmed, stop words out), by which the
store indexes it.

Before a call, the query (the current message's terms, the recent window's at half
weight) goes to the store with the load; the store scores archived pieces by the rare
terms they share with it and sends back the best few (``middleware.store.load``).
``rank`` then orders those candidates with older values of context keys (the fact
history) by that score, recency and overlap with the current context, drops what the
prompt already shows, and keeps what fits ``memory.recall_tokens``. ``render_recall``
quotes them, one line each, in a block the model is told is data.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .lexical import saturation, terms
from .specific import specific, specific_terms
from .state import Piece, ToolCall, Turn, compact_json, to_text
from .text import RESULT_DEPTH, RESULT_NOISE, brief, one_line

__all__ = ["MAX_PIECES", "Piece", "Recalled", "bare_question", "pieces_of", "query_terms", "rank", "recall_step", "render_recall"]

MAX_PIECES = 32
SHOWN_KINDS = frozenset({"user", "reply"})  # the kinds of piece the recent window shows
_AVERAGE_TERMS = 8.0  # a piece's terms, about: BM25's average length
MIN_SCORE = 3.0  # a candidate's lexical score must reach this: about one term that is not common
RELATIVE = 0.6  # a lexical match or an earlier value: at least this share of the best candidate's final score
# Semantic recall: the cosine similarity that admits a piece the vector search found. Such
# pieces are not held to RELATIVE: the nearest fill what the budget leaves, best first. It
# only keeps out what is unrelated: the fused ranking, the budget and the repeats rule sort
# the rest. On the tool-free conversations' first and held-out wordings (all-MiniLM-L6-v2),
# 0.2 left out answers the search had found ("What do I drive?" against "My 2020 Mazda CX-5
# is in the garage again", 0.16), and 0.1 answered more of both than 0.2 or 0.15, for about
# the same tokens, as did admitting every piece found. It is above 0: a lexical candidate the
# vector search did not find has similarity 0, and is not admitted by it
# (`python -m benchmarks.recall` publishes what this default answers).
MIN_SIMILARITY = 0.1
# Reciprocal rank fusion's constant (Cormack, Clarke and Büttcher, 2009): a place in either
# ranking scores 1 / (RRF_K + place), so the first few places of each differ little.
RRF_K = 60
# A candidate of which fewer than one term in REDUNDANT is new (neither in the prompt nor in
# a line already chosen) repeats a line, one word changed: it waits until every other
# candidate has had its turn, then fills what room is left if what it adds is specific (a
# name, a number or a code: "INV-0" and "INV-1" may both matter), and is left out if not
# ("Done (wc). 2 words" after "wc -> 2 words" says nothing the model lacks).
REDUNDANT = 4
# A candidate none of whose terms was rare in the archive when it was written (each was in
# more than two pieces, its turn's included: chatter that comes back turn after turn) counts
# this share of one whose terms all were (what a user says once, such as an allergy); in
# between, in proportion (``Candidate.novelty``). Both rankings weigh it. 0.3, not 0.5: of 0.5,
# 0.4, 0.3 and 0.2, by a rule fixed before the run (no fewer answers on either earlier wording set
# of the tool-free conversations, lexical or semantic, tokens within 0.1 point; then the most answers),
# 0.3 and 0.2 answered 5 more of the held-out set's semantic questions and the same elsewhere.
FAMILIAR = 0.3
_PIECE_CHARS = 240
# A neighbour of a user sentence is kept to its first this many characters (the same cut
# whichever side it is on, so a sentence between two recalled ones is one text, seen once).
_NEIGHBOUR_CHARS = 120
_SENTENCES = 12
_RESULT_CHUNKS = 4  # observation pieces of one large result at most
_QUERY_TERMS = 24

# Kinds, and the label a recalled line carries after its turn ("- turn 12 tool result: ").
KINDS = {"user": "user", "call": "tool call", "obs": "tool result", "reply": "assistant", "state": "observed",
         "fact": "earlier value"}  # fmt: skip


# A sentence ends at . ! or ? (or one closing a bracket or quote: '...a bed.) My') and a
# space, but not after a title or an initial ("Mr. Noodles", "J. Smith", "e.g. this"):
# those would cut a name in two.
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][)\]\"'”’]))(?<!\b[A-Z]\.)(?<!\b(?:Mr|Ms|Dr|St|Jr|Sr|Mt|vs)\.)(?<!\b(?:Mrs|Rev|Gen|Col|Sgt)\.)(?<!\b(?:Capt|Prof)\.)"
    r"(?<!\be\.g\.)(?<!\bi\.e\.)\s+|\n+"
)


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


def _sentences(text: str) -> list[str]:
    """The text's sentences, short fragments joined to the next, each one line."""
    parts, pending = [], ""
    for chunk in _SENTENCE_END.split(text):
        pending = f"{pending} {chunk}".strip() if pending else chunk.strip()
        if len(pending) >= 24:
            parts.append(pending)
            pending = ""
    if pending:
        parts.append(pending)
    return [one_line(part, _PIECE_CHARS) for part in parts if part.strip()]


def _call_text(call: ToolCall) -> tuple[str, str, str]:
    """The call as one line, what it is found by (all of it), and what it says: its values
    (the tool's and the arguments' names say what was done, not what was found)."""
    if call.args is None:
        text = one_line(f"{call.name}({call.arguments_text})", _PIECE_CHARS)
        return text, text, call.arguments_text[:_PIECE_CHARS]
    values = [_scalar(value) for value in call.args.values()]
    text = one_line(
        f"{call.name}({', '.join(f'{key}={value}' for key, value in zip(call.args, values, strict=True))})", _PIECE_CHARS
    )
    return text, text, " ".join(values)


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else one_line(to_text(value), 80)


def _leaves(value: Any, path: str = "", depth: int = 0) -> Iterable[tuple[str, str]]:
    """(path, value) for every scalar inside a JSON-like result, in order."""
    if depth >= RESULT_DEPTH and isinstance(value, (Mapping, list, tuple)):
        yield path, one_line(to_text(value), 80)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key), depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]", depth + 1)
    elif value is not None and not isinstance(value, bool) and path.rpartition(".")[2] not in RESULT_NOISE:
        yield path, str(value)


def _observations(call: ToolCall) -> list[tuple[str, str, str]]:
    """What the call's result showed, as (text, what finds it, what it says): its rendered observation
    when the tool has one, else its scalar fields (or text) in a few capped chunks, so a
    value read from a large result later can still be found."""
    if call.observation:
        text = one_line(call.observation, _PIECE_CHARS)
        return [(text, text, text)]
    if call.result is None:
        return []
    result = call.result
    # A text result: its first lines or sentences (its start usually says what it is).
    leaves = (
        _leaves(result) if isinstance(result, (Mapping, list, tuple)) else (("", t) for t in _sentences(call.result_text[:4_000]))
    )
    prefix = f"{call.name} → "
    chunks: list[tuple[str, str]] = []
    text, indexed = "", ""
    for path, value in leaves:
        leaf = one_line(f"{path}: {value}" if path else value, _PIECE_CHARS)
        if text and len(prefix) + len(text) + len(leaf) + 2 > _PIECE_CHARS:
            chunks.append((prefix + text, indexed))
            text, indexed = "", ""
            if len(chunks) == _RESULT_CHUNKS:
                break
        text, indexed = (f"{text}; {leaf}", f"{indexed} {value}") if text else (leaf, value)
    if text and len(chunks) < _RESULT_CHUNKS:
        chunks.append((prefix + text, indexed))
    return [(line, line, values) for line, values in ((one_line(t, _PIECE_CHARS), i) for t, i in chunks)]


def pieces_of(turn: Turn, reply: str, tokenizer: _Counter, observed: Sequence[str] = ()) -> tuple[Piece, ...]:
    """The pieces of one turn, at most ``MAX_PIECES``: sentences first, then each call
    and what it returned, then what connectors observed, then the reply."""
    sentences = _sentences(turn.user)[:_SENTENCES]
    texts: list[tuple[str, str, str, str]] = [("user", s, s, s) for s in sentences]
    for call in turn.tool_calls:
        texts.append(("call", *_call_text(call)))
        texts += [("obs", *parts) for parts in _observations(call)]
    texts += [("state", line, line, line) for line in (one_line(text, _PIECE_CHARS) for text in observed) if line]
    if reply.strip():
        line = one_line(reply, _PIECE_CHARS)
        texts.append(("reply", line, line, line))
    pieces = []
    for at, (kind, text, found_by, says) in enumerate(texts[:MAX_PIECES]):
        facts = terms(says)
        if facts:  # a piece that says nothing (a call without arguments) is not worth recalling
            around = _around(sentences, at) if kind == "user" else ("", "")
            pieces.append(Piece(kind, text, terms(found_by), tokenizer.count(text), facts, around))
    return tuple(pieces)


def _around(sentences: Sequence[str], at: int) -> tuple[str, str]:
    """The sentences before and after ``sentences[at]`` in its message, each kept to its
    first ``_NEIGHBOUR_CHARS`` and only where that names something specific (memory is for
    specifics: "That's how I met Dana." beside "We train together on Tuesdays.")."""
    cut = [brief(sentences[i], _NEIGHBOUR_CHARS) if 0 <= i < len(sentences) else "" for i in (at - 1, at + 1)]
    before, after = (text if text and specific(text) else "" for text in cut)
    return before, after


def query_terms(current: str, recent: Sequence[Mapping[str, str]]) -> list[tuple[str, float]]:
    """What recall looks for: the current message's terms (weight 1), then the recent
    window's (0.5, the assistant's last words first), at most ``_QUERY_TERMS``."""
    weighted: dict[str, float] = dict.fromkeys(terms(current), 1.0)
    for message in reversed(recent):
        for term in terms(message.get("content", "")):
            weighted.setdefault(term, 0.5)
    return list(weighted.items())[:_QUERY_TERMS]


@dataclass(frozen=True, slots=True)
class Recalled:
    """A line of the recall block, and why it was chosen."""

    text: str
    kind: str
    turn: int
    score: float
    why: str
    tokens: int
    plain: Recalled | None = None  # the line without the neighbouring sentences it was given (None: it has none)

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "turn": self.turn, "score": round(self.score, 5), "why": self.why}


def recall_step(items: Sequence[Recalled]) -> tuple[list[Recalled], str]:
    """One step off a recall block that does not fit: the neighbours the lowest-scored line
    with any were given go first ("recall_narrowed"), and only when no line has any left the
    lowest-scored line ("recall_dropped"), so a neighbour never pushes a match out."""
    windowed = [item for item in items if item.plain is not None]
    if windowed:
        worst = min(windowed, key=lambda item: (item.score, item.turn))
        return [item.plain if item is worst and item.plain is not None else item for item in items], "recall_narrowed"
    return sorted(items, key=lambda item: -item.score)[:-1], "recall_dropped"


class Candidate(NamedTuple):
    """A piece the store chose for the query: its id (``<turn>.<n>``), lexical score and record."""

    turn: int
    kind: str
    text: str
    tokens: int
    score: float
    matched: tuple[str, ...] = ()  # the query's terms it holds
    terms: tuple[str, ...] = ()  # the terms of what it says
    similarity: float = 0.0  # cosine similarity to the current message (semantic recall)
    asked: float = 0.0  # the part of ``score`` the current message's own terms gave
    around: tuple[str, str] = ("", "")  # a user sentence's neighbours (``Piece.around``)
    novelty: float = 1.0  # the share of its terms rare in the archive when it was written (see FAMILIAR)
    # The pieces the vector search read that say mostly what it says, and it mostly what they say; itself included.
    repeats: int = 1


# A candidate as rank scores it: (lexical, semantic, turn, text, kind, tokens, why), each
# ranking's score None where it is not in that ranking.
_Scored = tuple[float | None, float | None, int, str, str, int, str | tuple[Candidate, bool, bool]]


def rank(
    candidates: Sequence[Candidate],
    facts: Mapping[str, Sequence[tuple[str, int]]],
    *,
    query: Sequence[tuple[str, float]],
    context: Mapping[str, str],
    turns: int,
    shown: str | Sequence[str],
    budget: int,
    count: _Counter,
    recent_turns: int = 1,
    asked_before: Set[str] = frozenset(),
) -> list[Recalled]:
    """The recall block's lines, best first, within ``budget`` tokens.

    Two rankings are fused by place (`_fused`). The lexical one: a candidate's lexical
    score from the store, raised by recency (a piece of the last turns counts up to twice
    one from long ago), by the recent window's terms it shares and by naming a current
    context value; older values of context keys (``facts``) score by the query terms of
    their key and value they share. The ranking by meaning (semantic recall): the
    ``similarity`` a vector search found to the current message, not weighed by recency.
    A user's sentence that names nothing specific counts half in both; a piece none of
    whose terms was rare when it was written counts ``FAMILIAR`` of one whose terms all
    were, in between in proportion; a piece of which the vector search found ``repeats``
    versions (a phrase said again and again, a word changed) counts one in ``repeats``.
    Left out: weak lexical matches, matches on the recent window's terms alone (they rank, the current
    message selects), pieces that say nothing the prompt does not already say (every term
    of theirs is in ``shown``) and a user's sentence that only asks (``bare_question``).
    A candidate that adds few terms to the prompt and the lines already chosen waits until
    every other has had its room, and is left out unless what it adds is specific
    (``REDUNDANT``).

    Of the last ``recent_turns`` turns (the recent window, which shows their user messages
    and replies only), a call, result or observation is recalled when the current message
    selects it by a term neither the window's user messages (``asked_before``) nor the
    piece's values hold: a question about what the last call found ("when is the ticket
    due?"), not the same request again ("now show current node" after "check current
    node") nor one naming a value the message already gives ("navigate to watchlist on
    google_tv" after a result listing the interfaces). Such a piece neither sets nor is held
    to the cut of weak lexical matches, which compares the older ones among themselves."""
    if budget <= 0:
        return []
    wanted = dict(query)
    asked = {term for term, weight in query if weight >= 1.0}  # the current message's own terms
    window_weights = {term: weight for term, weight in wanted.items() if term not in asked}
    parts = [shown] if isinstance(shown, str) else list(shown)
    known = set().union(*map(terms, parts))
    values = {value.lower() for value in context.values() if len(value) >= 3}
    # A candidate's why is made only if it is kept.
    scored: list[_Scored] = []
    for c in candidates:
        in_window = c.turn > turns - recent_turns
        if in_window and (c.turn > turns or c.kind in SHOWN_KINDS):
            continue  # shown in full
        # Asked for by the current message: in what the piece says (its values), or by two of
        # its words at least (a tool's name alone, "navigate_to_node" for "node", is not enough).
        hits = asked.intersection(c.matched)
        lexical = (
            (c.asked or c.score) >= MIN_SCORE and bool(hits) and (len(hits) >= 2 or not hits.isdisjoint(c.terms) or not c.terms)
        )
        semantic = c.similarity >= MIN_SIMILARITY
        if in_window:  # asked anew: by a term the window's own user messages lack, not a value it holds
            lexical, semantic = lexical and not hits.issubset({*asked_before, *_values(c)}), False
        if not (lexical or semantic) or known.issuperset(c.terms or terms(c.text)) or bare_question(c):
            continue  # a weak match, one the current message does not ask for, nothing new, or only a question
        recency = 1.0 + math.exp(-max(turns - c.turn, 0) / 40)
        lowered = c.text.lower() if values else ""
        overlap = 1.25 if any(value in lowered for value in values) else 1.0
        weight = overlap * (1.0 if c.kind != "user" or specific(c.text) else 0.5)  # memory is for specifics
        weight *= FAMILIAR + (1.0 - FAMILIAR) * c.novelty  # and for what was new when said
        weight /= c.repeats  # and for what is not said again and again
        # BM25's length normalisation: a long sentence shares words by its length alone.
        length = saturation(1, len(c.terms or c.matched), _AVERAGE_TERMS)
        # The recent window's words rank what the message selected (the store sees only the message's).
        # fsum: the same total whatever order the set yields the terms in.
        window = math.fsum(window_weights[term] for term in window_weights.keys() & c.terms) if window_weights else 0.0
        scored.append((
            (c.score + window) * length * weight * recency if lexical else None, c.similarity * weight if semantic else None,
            c.turn, c.text, c.kind, c.tokens, (c, lexical, semantic),
        ))  # fmt: skip
    for key, history in facts.items():
        key_terms = set(terms(key))
        for value, turn in history:
            shared = {*key_terms, *terms(value)}.intersection(wanted)
            if asked.isdisjoint(shared):
                continue
            text = f"{key} = {value}"
            why = f"earlier value of {key}; shares {', '.join(sorted(shared)[:3])}"
            scored.append((sum(2.0 * wanted[t] for t in shared), None, turn, text, "fact", count.count(text), why))
    chosen: list[Recalled] = []
    around: list[tuple[str, str]] = []  # each chosen line's neighbours (a user sentence's)
    later: list[tuple[float, _Scored]] = []  # repeats: they wait for every other candidate
    used, seen, said = 0, set(), set(known)
    shown_lower = "\n".join(parts).lower()
    for repeats, rows in ((False, _fused(scored, turns - recent_turns)), (True, later)):
        for score, row in rows:
            _, _, turn, text, kind, tokens, reason = row
            key = text.lower()
            cost = tokens + line_tokens(count, turn, kind)
            if used + cost > budget or key in seen or key in shown_lower:
                continue
            says = set(reason[0].terms or terms(text)) if not isinstance(reason, str) else set()
            if not repeats and mostly_said(says, said):
                later.append((score, row))  # mostly what a chosen line says: a phrase repeated, a word changed
                continue
            if repeats and (says - said).isdisjoint(specific_terms(text)):
                continue  # it rewords what is chosen: no name, number or code of its own
            chosen.append(Recalled(text, kind, turn, score, reason if isinstance(reason, str) else _why(*reason), tokens))
            around.append(("", "") if isinstance(reason, str) else reason[0].around)
            seen.add(key)
            said |= says
            used += cost
    # Sentence windows: where room is left, a chosen user sentence gains its neighbours, the
    # best line first and the sentence before first (it often names what this one refers to:
    # "That's how I met Dana." before "We train together on Tuesdays."). A neighbour joins
    # only with a name, number or code the prompt and the chosen lines do not hold yet.
    for index, neighbours in enumerate(around):
        if used >= budget:
            break
        item = chosen[index]
        for side, neighbour in zip(("before", "after"), neighbours, strict=True):
            key = neighbour.lower()
            if not neighbour or key in seen or key in shown_lower:
                continue
            adds = set(terms(neighbour)) - said
            if adds.isdisjoint(specific_terms(neighbour)):
                continue
            text = f"{neighbour} {item.text}" if side == "before" else f"{item.text} {neighbour}"
            tokens = count.count(text)
            if used + tokens - item.tokens > budget:
                continue
            used += tokens - item.tokens
            item = dataclasses.replace(item, text=text, tokens=tokens, why=f"{item.why}; with the sentence {side}",
                                       plain=item.plain or item)  # fmt: skip
            seen.add(key)
            said |= adds
        chosen[index] = item
    chosen.sort(key=lambda r: (-r.score, -r.turn))
    return chosen


def _values(c: Candidate) -> Set[str]:
    """The terms of the values a piece holds: a call's arguments, a structured result's
    fields (``Candidate.terms``, apart from their names). A piece that says all it is found
    by (a text result, an observation) holds its specific words only: "due" in "The ticket
    is due on 2026-12-20" is what a question asks by, not a value it gives."""
    said = set(c.terms)
    if said.issuperset(terms(c.text.partition(" → ")[2] or c.text)):
        return specific_terms(c.text)
    return said


def mostly_said(says: Set[str], said: Set[str]) -> bool:
    """Whether a text with the terms ``says`` adds fewer than one term in ``REDUNDANT`` to
    those of ``said``: a phrase repeated with a word changed (an empty text adds nothing, and
    is not counted as one)."""
    return bool(says) and len(says - said) * REDUNDANT < len(says)


def _fused(scored: Sequence[_Scored], edge: int) -> list[tuple[float, _Scored]]:
    """The candidates in the order both rankings give together (reciprocal rank fusion):
    each scores the sum, over the lexical ranking and the ranking by meaning, of 1 / (RRF_K
    + its place in it), so neither kind of score has to be weighed against the other. A
    lexical match far weaker than the best older one (under RELATIVE of its score) has no
    place in the lexical ranking: noise, not memory. The recent window's pieces (of turns
    after ``edge``; earlier values of context keys are not pieces) neither set that best nor
    are held to it: `rank` kept them only when the message asked for them anew. Ties go to
    the newer turn."""
    window = [row[2] > edge and not isinstance(row[6], str) for row in scored]
    best = max((row[0] for row, new in zip(scored, window, strict=True) if row[0] is not None and not new), default=0.0)
    lexical = [i for i, row in enumerate(scored) if row[0] is not None and (window[i] or row[0] >= best * RELATIVE)]
    semantic = [i for i, row in enumerate(scored) if row[1] is not None]
    lexical.sort(key=lambda i: (-(scored[i][0] or 0.0), -scored[i][2]))
    semantic.sort(key=lambda i: (-(scored[i][1] or 0.0), -scored[i][2]))
    if not semantic or not lexical:  # one ranking: its own order
        return [(1.0 / (RRF_K + place), scored[i]) for place, i in enumerate(lexical or semantic, start=1)]
    total = dict.fromkeys(lexical + semantic, 0.0)
    for ranking in (lexical, semantic):
        for place, i in enumerate(ranking, start=1):
            total[i] += 1.0 / (RRF_K + place)
    return sorted(((score, scored[i]) for i, score in total.items()), key=lambda item: (-item[0], -item[1][2]))


def _why(c: Candidate, lexical: bool, semantic: bool) -> str:
    reasons = ([f"shares {', '.join(c.matched[:4])}"] if lexical else []) + (
        [f"similar ({c.similarity:.2f})"] if semantic else []
    )
    return "; ".join(reasons)


# How a question opens: a question word, or a verb put first ("Did I...", "Is there...").
_QUESTION = re.compile(
    r"(?:what|which|who|whom|whose|where|when|why|how|is|are|was|were|am|do|does|did|can|could|will|would|shall|should|"
    r"may|might|have|has|had)\b",
    re.IGNORECASE,
)


def bare_question(c: Candidate) -> bool:
    """A user's question and nothing else ("What do I drive?"): one sentence that opens as a
    question does and ends with "?", naming nothing specific, with no neighbour that does
    (sentence windows). It asked and told nothing, so recalling it only repeats the asking
    (the reply, archived apart, holds any answer). A statement asked about ("I just got a
    hatchback, is that fine in snow?") or joined to one ("I'm vegetarian. Any recipes?") stays."""
    text = c.text.rstrip()
    return (
        c.kind == "user" and text.endswith("?") and not any(c.around) and _QUESTION.match(text) is not None
        and _SENTENCE_END.search(text) is None and not specific(text)
    )  # fmt: skip


def line_prefix(turn: int, kind: str) -> str:
    """What a recalled line starts with: its turn and who said it ("- turn 12 tool result: ").
    A kind this version does not know (an archive written by another) reads "archived"."""
    return f"- turn {turn} {KINDS.get(kind, 'archived')}: "


def line_tokens(count: _Counter, turn: int, kind: str) -> int:
    """What a recalled line takes besides its text: the line break, its prefix and the quotes
    round the text (counted apart from the text, so never fewer than the line itself takes)."""
    return count.count("\n" + line_prefix(turn, kind)) + 2


def render_recall(items: Sequence[Recalled], header: str) -> str:
    """The recall block: the header, then one quoted line per item, oldest first. Each text
    is one line (the archive keeps it so, and it is flattened again here), so archived
    text cannot add a line or a section of its own."""
    if not items:
        return ""
    lines = [header]
    for item in sorted(items, key=lambda r: (r.turn, r.kind)):
        lines.append(f"{line_prefix(item.turn, item.kind)}{compact_json(one_line(item.text))}")
    return "\n".join(lines)
