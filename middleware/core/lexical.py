"""The word model that tool matching and recall share. No I/O.

Text becomes words: camelCase and snake_case split (``lockDoors``, ``rear_left``),
letters and digits of any script, lower-cased, stop words and single letters left out,
lightly stemmed. Recall indexes archived pieces in Redis by these words (term -> piece
ids), so they are a stored format: a text gives the same terms from one release to the
next, or an existing store's pieces can no longer be found by the words whose terms
changed. The stop list may grow (a word no longer asked for leaves stale index entries,
harmless). One change was made on purpose when tool matching moved onto these words: a
three-letter stem that lost an e to -ing or -ed gets it back ("moving" and "moved" meet
"move", as tool matching had them meet), so pieces archived before it under such a stem
("mov") are found by their other words until they leave the archive.

Both score with Okapi BM25: ``Bm25`` over the tool texts of a catalog; recall's idf is
computed by the store's load script (``middleware/store/load.lua``) over the archive, with
the same formula, and ``archive.rank`` applies ``saturation`` for a piece's length.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["K1", "STOP", "B", "Bm25", "idf", "saturation", "stem", "terms", "tokens", "words"]

# BM25's usual constants: K1, how soon more of a word stops counting; B, how much a
# longer text's length discounts its words.
K1, B = 1.2, 0.75

# Words that say nothing about what a message wants or what a piece holds: what recall and
# tool matching each left out before they shared one list. The entries with an apostrophe
# never match (the tokenizer splits there): kept, as the list may only grow.
STOP = frozenset([
    "a", "an", "the", "and", "or", "but", "if", "then", "else", "of", "to", "in", "on", "at", "by", "for", "with", "from",
    "into", "onto", "over", "under", "about", "as", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does",
    "did", "done", "have", "has", "had", "having", "i", "me", "my", "mine", "we", "us", "our", "you", "your", "yours",
    "he", "him", "his", "she", "her", "it", "its", "they", "them", "their", "this", "that", "these", "those", "there",
    "here", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "all", "any", "both", "each", "few",
    "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same", "so", "than", "too", "very",
    "can", "will", "just", "should", "would", "could", "may", "might", "must", "shall", "now", "also", "please", "thanks",
    "thank", "hi", "hello", "ok", "okay", "yes", "yeah", "let", "lets", "let's", "get", "got", "make", "made", "want",
    "need", "like", "know", "one", "two", "use", "using", "used", "go", "going", "tell", "show", "give", "me's", "i'm",
    "it's", "that's", "don't", "up"
])  # fmt: skip

_WORD = re.compile(r"[^\W_]+", re.UNICODE)  # letters and digits of any script; "_" splits
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # lockDoors: lock Doors (HTTPServer stays one word)


def tokens(text: str) -> list[str]:
    """Every word of ``text``, lower-cased, camelCase and snake_case split; none left out or stemmed."""
    return _WORD.findall(_CAMEL.sub(" ", text).lower())


# A stem of three letters, consonant-vowel-consonant, that lost an e to -ing or -ed (as
# Porter's stemmer restores it): "mov", "fil", "sav"; not "book" or "add".
_SHORT = re.compile(r"[^aeiouy][aeiouy][^aeiouywx]")


def stem(word: str) -> str:
    """A light English stem of a lower-cased word: "files" meets "file", "booked" "book",
    "navigated" "navigate". Short words and numbers stay as they are."""
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith(("ing", "ed")) and len(word) - (3 if word.endswith("ing") else 2) >= 3:
        word = word[: -3 if word.endswith("ing") else -2]
        if _SHORT.fullmatch(word):  # "moving" and "moved" meet "move", "filing" meets "file"
            return word + "e"
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    # "navigate" and "navigated" meet; a four-letter stem keeps its e ("move", "moves").
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def words(text: str) -> list[str]:
    """The stemmed words of ``text``, stop words and single letters out, repeats kept (a
    word's count in a tool's text weighs in BM25)."""
    return [stem(word) for word in tokens(text) if word not in STOP and (len(word) > 1 or word.isdigit())]


@functools.lru_cache(maxsize=8192)
def terms(text: str) -> tuple[str, ...]:
    """The distinct ``words`` of ``text``, in order of first appearance: recall's index terms."""
    # Cached: the same summary lines, recent messages and context values come back every turn.
    return tuple(dict.fromkeys(words(text)))


def idf(documents: int, holding: int) -> float:
    """BM25's inverse document frequency of a word ``holding`` of ``documents`` hold (never
    negative: a word most documents hold still counts a little)."""
    return math.log(1 + (documents - holding + 0.5) / (holding + 0.5))


def saturation(frequency: int, length: float, average: float) -> float:
    """What a word found ``frequency`` times in a text of ``length`` words weighs, where
    texts average ``average`` words: more of it counts less and less, a long text's less."""
    return frequency * (K1 + 1) / (frequency + K1 * (1 - B + B * length / average))


class Bm25:
    """Okapi BM25 over a fixed set of texts: the rare words a text shares with a query score."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(words(text)) for text in texts]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        # Texts without a word have no average length: 1 keeps the division defined (nothing scores).
        self.average = (sum(self.lengths) / len(self.lengths) if self.lengths else 0.0) or 1.0
        holding: Counter[str] = Counter()
        for doc in self.docs:
            holding.update(doc.keys())
        self.idf = {word: idf(len(self.docs), count) for word, count in holding.items()}

    def scores(self, query: str) -> list[float]:
        """Each text's score for ``query``, in the order the texts were given."""
        asked = self.idf.keys() & set(words(query))
        # fsum: the same total whatever order the set yields the words in, so ties stay ties.
        return [
            math.fsum(self.idf[word] * saturation(doc[word], length, self.average) for word in asked if word in doc)
            for doc, length in zip(self.docs, self.lengths, strict=True)
        ]
