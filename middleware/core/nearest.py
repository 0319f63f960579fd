"""Semantic recall's candidates: which of the pieces the vector search found are ranked.
No I/O.

The store's vector search sends back the nearest pieces by meaning (``middleware.store.load``);
``distinct_nearest`` keeps those recall may use, one of each text, a phrase reworded waiting
behind the pieces that say something else, each counting how often it was said.
"""

from __future__ import annotations

from collections.abc import Sequence

from .archive import Candidate, bare_question, mostly_said
from .lexical import terms

__all__ = ["distinct_nearest"]


def distinct_nearest(near: Sequence[Candidate], oldest: int, newest: int, limit: int) -> list[Candidate]:
    """Of the pieces the vector search found (``near``, nearest first), the ``limit``
    nearest of archived turns ``oldest`` to ``newest`` (those out of the recent window), one
    of each text (its newest: the search gives equal texts equal distances), leaving out a
    user's question that told nothing (``bare_question``: recall would leave it out, and it
    would hold a place the next nearest can fill).

    A piece that mostly says what those nearer already say (``mostly_said``: a phrase
    reworded, one word changed) waits until the others have had their places, as it does
    in the ranking: else one phrase a user varies turn after turn fills every place. Each
    piece kept counts its ``repeats``: the pieces read that say mostly what it says and that
    it says mostly what they say, itself and its repeats word for word included (a longer
    sentence that holds a short one's words is not its repeat: "Mum doesn't live in Bergen
    any more" does not count "I live in Bergen" down). A text written once is new when
    said; one said again and again is chatter, even if its first saying came when every
    word was rare (``Candidate.novelty`` sees only the archive before it)."""
    texts: dict[str, Candidate] = {}  # nearest first
    says: dict[str, frozenset[str]] = {}  # each text's terms
    read: dict[frozenset[str], int] = {}  # the terms of the pieces read that may be recalled: how many say them
    for c in near:
        if oldest <= c.turn <= newest and not bare_question(c):
            words = says.get(c.text)
            if words is None:
                words = says[c.text] = frozenset(c.terms or terms(c.text))
            read[words] = read.get(words, 0) + 1
            held = texts.get(c.text)
            if held is None or c.turn > held.turn:
                texts[c.text] = c
    kept: list[Candidate] = []
    waiting: list[Candidate] = []
    said: set[str] = set()
    for c in texts.values():
        if mostly_said(says[c.text], said):
            waiting.append(c)
            continue
        kept.append(c)
        said |= says[c.text]
        if len(kept) == limit:
            break
    chosen = [*kept, *waiting][:limit]
    for i, c in enumerate(chosen):
        words = says[c.text]
        repeats = sum(n for other, n in read.items() if mostly_said(words, other) and mostly_said(other, words))
        if repeats > 1:
            chosen[i] = c._replace(repeats=repeats)
    return chosen
