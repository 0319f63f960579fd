"""The words tool matching reads, and BM25 over them. No I/O."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["WORD", "Bm25", "words"]

WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "should",
        "so",
        "some",
        "than",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "this",
        "those",
        "to",
        "up",
        "us",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "will",
        "with",
        "would",
        "you",
        "your",
    ]
)


# First words that name an action rather than a namespace: tools are not grouped by them.
def _stem(word: str) -> str:
    """A light English stemmer: enough that 'moving', 'moves' and 'moved' meet 'move'."""
    for suffix in ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "s", "ly", "er"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def words(text: str) -> list[str]:
    """Stemmed words of ``text``, camelCase and snake_case split, stop words dropped."""
    return [_stem(w.lower()) for w in WORD.findall(text) if w.lower() not in _STOP]


class Bm25:
    """Okapi BM25 over the tools' texts: rare words that a tool and the message share score."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(words(text)) for text in texts]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.average = sum(self.lengths) / len(self.lengths) if self.lengths else 0.0
        frequency: Counter[str] = Counter()
        for doc in self.docs:
            frequency.update(doc.keys())
        n = len(self.docs)
        self.idf = {word: math.log(1 + (n - f + 0.5) / (f + 0.5)) for word, f in frequency.items()}

    def scores(self, query: str, k1: float = 1.2, b: float = 0.75) -> list[float]:
        terms = set(words(query)) & self.idf.keys()
        out = []
        for doc, length in zip(self.docs, self.lengths, strict=True):
            norm = k1 * (1 - b + b * length / self.average) if self.average else k1
            out.append(sum(self.idf[t] * doc[t] * (k1 + 1) / (doc[t] + norm) for t in terms if t in doc))
        return out
