"""Tests for middleware.core.lexical: the words tool matching and recall share (no I/O)."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from middleware.core import lexical
from middleware.core.lexical import Bm25, saturation, stem, terms, tokens, words
from tests.strategies import any_text

# --- the reference: archive.terms_of as it was before the lexical module (index terms are
# stored in Redis, so they change only on purpose). Copied verbatim, stop list included; the
# two changes made on purpose follow it (see _NOW).

_OLD_STOP = frozenset([
    "a", "an", "the", "and", "or", "but", "if", "then", "else", "of", "to", "in", "on", "at", "by", "for", "with", "from",
    "into", "onto", "over", "under", "about", "as", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does",
    "did", "done", "have", "has", "had", "having", "i", "me", "my", "mine", "we", "us", "our", "you", "your", "yours",
    "he", "him", "his", "she", "her", "it", "its", "they", "them", "their", "this", "that", "these", "those", "there",
    "here", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "all", "any", "both", "each", "few",
    "more", "most", "other", "some", "such", "no", "nor", "not", "only", "own", "same", "so", "than", "too", "very",
    "can", "will", "just", "should", "would", "could", "may", "might", "must", "shall", "now", "also", "please", "thanks",
    "thank", "hi", "hello", "ok", "okay", "yes", "yeah", "let", "lets", "let's", "get", "got", "make", "made", "want",
    "need", "like", "know", "one", "two", "use", "using", "used", "go", "going", "tell", "show", "give", "me's", "i'm",
    "it's", "that's", "don't",
])  # fmt: skip
_OLD_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_OLD_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _old_stem(word: str) -> str:
    if word.isdigit() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zes")):
        word = word[:-2]
    elif word.endswith(("ing", "ed")) and len(word) - (3 if word.endswith("ing") else 2) >= 3:
        word = word[: -3 if word.endswith("ing") else -2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def _old_terms_of(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in _OLD_WORD.findall(_OLD_CAMEL.sub(" ", text).lower()):
        if word in _OLD_STOP or (len(word) < 2 and not word.isdigit()):
            continue
        seen.setdefault(_old_stem(word), None)
    return list(seen)


# The changes made on purpose when tool matching moved onto these words: "up", a stop word of
# tool matching, is one for both; a three-letter consonant-vowel-consonant stem that lost an e
# to -ing or -ed gets it back ("moving" meets "move", as tool matching had it).
def _now_stem(word: str) -> str:
    stemmed = _old_stem(word)
    lost_e = word.endswith(("ing", "ed")) and re.fullmatch(r"[^aeiouy][aeiouy][^aeiouywx]", stemmed)
    return stemmed + "e" if lost_e and len(word) > 3 else stemmed


def _now_terms_of(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for word in _OLD_WORD.findall(_OLD_CAMEL.sub(" ", text).lower()):
        if word in _OLD_STOP or word == "up" or (len(word) < 2 and not word.isdigit()):
            continue
        seen.setdefault(_now_stem(word), None)
    return list(seen)


# Text made of the parts the word model treats specially: stop words, suffixes, case
# changes, separators, digits and other scripts, so the property meets them often.
_PIECES = ["the", "please", "Move", "moving", "files", "boxes", "parties", "booked", "navigate", "ies", "sses", "es", "ed",
           "ing", "s", "e", "ly", "er", "ations", "lockDoors", "rear_left", "HTTPServer", "a1B", "48213", "٣", "ÉTÉ",
           "straße", "İstanbul", "ǅ", "ﬁles", "Ⅻ", "東京", "don't", "it's", "_", "-", " ", ".", "\n", "'"]  # fmt: skip
_word_text = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=4)), max_size=30).map("".join)


@given(st.one_of(any_text, _word_text))
@settings(max_examples=1500, deadline=None)
def test_terms_are_the_index_terms_the_archive_stored_but_for_the_changes_made_on_purpose(text: str) -> None:
    """For any text, the terms archive.terms_of gave before, but for 'up' and the short stems
    that get their e back: stores indexed by them keep working for every other word."""
    assert list(terms(text)) == _now_terms_of(text)


def test_the_changes_made_on_purpose_are_the_only_ones() -> None:
    """Against the old terms, exactly the words the changes name differ (so the property above can fail)."""
    differ = [w for w in ("moving", "moved", "filing", "saved", "booked", "adding", "up", "files", "navigated")
              if list(terms(w)) != _old_terms_of(w)]  # fmt: skip
    assert differ == ["moving", "moved", "filing", "saved", "up"]


def test_the_stop_list_holds_every_word_it_ever_held() -> None:
    """The stop list only grows: a word taken out would start matching where it never did."""
    assert _OLD_STOP <= lexical.STOP


@given(st.one_of(any_text, _word_text))
@settings(max_examples=300, deadline=None)
def test_terms_are_the_distinct_words_in_order(text: str) -> None:
    """``terms`` is ``words`` with repeats left out, in order of first appearance."""
    assert terms(text) == tuple(dict.fromkeys(words(text)))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The files were booked", ["file", "book"]),  # stop words out, light stems
        ("file boxes parties", ["file", "box", "party"]),
        ("lockDoors(door=rear_left)", ["lock", "door", "rear", "left"]),  # camelCase and snake_case split
        ("Order A-48213, order 48213!", ["order", "48213"]),  # distinct, first appearance
        ("navigate and navigated", ["navigat"]),  # both forms meet
        ("lists listing listed list", ["list"]),
        ("Zürich, München, 東京", ["zürich", "münchen", "東京"]),  # words of any script
    ],
)
def test_terms_are_lowercased_stemmed_and_distinct(text: str, expected: list[str]) -> None:
    """Index terms: words without stop words or single letters, lightly stemmed, each once, in order."""
    assert list(terms(text)) == expected


def test_words_keep_repeats_for_term_frequency() -> None:
    """``words`` keeps every occurrence (BM25 counts them); ``terms`` each once."""
    assert words("Move the file, then move the files to a folder") == ["move", "file", "move", "file", "folder"]
    assert terms("Move the file, then move the files to a folder") == ("move", "file", "folder")


def test_terms_are_cached() -> None:
    """The same text (a summary line, a context value) is split once."""
    assert terms("the same summary line, again") is terms("the same summary line, again")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lockDoors", ["lock", "doors"]),
        ("rear_left", ["rear", "left"]),
        ("get_stock_info", ["get", "stock", "info"]),
        ("HTTPServer", ["httpserver"]),  # an acronym run is one word
        ("file2Name", ["file2", "name"]),  # digits stay with their letters
        ("Hello, wörld!", ["hello", "wörld"]),
    ],
)
def test_tokens_split_camel_and_snake_case_and_keep_every_word(text: str, expected: list[str]) -> None:
    """``tokens``: the raw split, lower-cased, nothing dropped or stemmed (tool names for grouping)."""
    assert tokens(text) == expected


# Words that both stemmers before the lexical module brought together (archive's and
# tool matching's): they meet.
@pytest.mark.parametrize(
    ("forms", "expected"),
    [
        (["move", "moves", "moving", "moved"], "move"),
        (["file", "files", "filing", "filed"], "file"),
        (["book", "books", "booked", "booking"], "book"),
        (["navigate", "navigates", "navigated", "navigating"], "navigat"),
        (["create", "creates", "created", "creating"], "creat"),
        (["message", "messages"], "messag"),
        (["list", "lists", "listed", "listing"], "list"),
        (["ticket", "tickets"], "ticket"),
        (["party", "parties"], "party"),
        (["directory", "directories"], "directory"),
        (["flight", "flights"], "flight"),
        (["lock", "locks", "locked", "locking"], "lock"),
    ],
)
def test_the_stem_brings_a_words_forms_together(forms: list[str], expected: str) -> None:
    """Plural, past and -ing forms meet at one stem."""
    assert {stem(form) for form in forms} == {expected}


# Forms the tool-matching stemmer used to bring together and this one leaves apart: the stem
# is a stored format (recall's index), so these stay apart; pinned so a change is deliberate.
@pytest.mark.parametrize(
    ("one", "other"),
    [("send", "sender"), ("quick", "quickly"), ("inform", "information")],
)  # fmt: skip
def test_forms_the_stem_leaves_apart(one: str, other: str) -> None:
    """-er, -ly and -ation are not suffixes here."""
    assert stem(one) != stem(other)


@pytest.mark.parametrize("word", ["is", "car", "48213", "2024", "bus", "class", "boss"])
def test_short_words_numbers_and_double_s_stay_whole(word: str) -> None:
    """Words of three letters or less, numbers and -ss words are their own stems."""
    assert stem(word) == word


def test_bm25_scores_the_text_sharing_the_rarer_word_first() -> None:
    """A word every text holds counts less than one only one text holds; a text sharing
    no word scores 0."""
    bm25 = Bm25(["move a file", "copy a file", "send a message"])
    copy, move, send = bm25.scores("copy the file")[1], bm25.scores("copy the file")[0], bm25.scores("copy the file")[2]
    assert copy > move > 0 and send == 0
    assert Bm25([]).scores("anything") == []
    assert Bm25(["", "the"]).scores("the") == [0.0, 0.0]


def test_bm25_weighs_a_repeated_word_more_and_a_long_text_less() -> None:
    """Term frequency raises a score with diminishing returns; length lowers it."""
    bm25 = Bm25(["file folder", "file file", "file folder" + " extra" * 20, "unrelated"])
    once, twice, long, _ = bm25.scores("file")
    assert twice > once > long > 0 and twice < 2 * once


def test_saturation_of_one_occurrence_is_recalls_length_factor() -> None:
    """At one occurrence, BM25's term weight is (1 + K1) / (1 + K1 * (1 - B + B * length / average))."""
    for length in (1, 8, 30):
        assert saturation(1, length, 8.0) == (1 + 1.2) / (1 + 1.2 * (1 - 0.75 + 0.75 * length / 8.0))
    assert math.isclose(saturation(1, 8, 8.0), 1.0)
