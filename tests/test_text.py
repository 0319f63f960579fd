"""Tests for middleware.text: cleaning, one-line sanitizing, briefs, redaction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware.core.text import (
    ELLIPSIS,
    INVISIBLE,
    brief,
    clean_text,
    cut_middle,
    one_line,
    parse_json,
    printable,
    printable_json,
    quoted,
    redact_url,
)
from tests.strategies import INJECTIONS, any_text, hostile_text


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("navigate to watchlist", 40, "navigate to watchlist"),  # fits: no ellipsis
        ("navigate to watchlist on google_tv please", 30, "navigate to watchlist on…"),  # word boundary
        ("supercalifragilisticexpialidocious", 10, "supercali…"),  # no space: hard cut
        ("hello world", 11, "hello world"),
        ("hello world", 6, "hello…"),
        ("a, b, c, d, e, f", 8, "a, b, c…"),  # trailing punctuation dropped before the ellipsis
        ("abc", 1, ELLIPSIS),
    ],
)
def test_brief_cuts_at_word_boundary_with_ellipsis_only_when_cut(text: str, limit: int, expected: str) -> None:
    """brief keeps whole words where it can and adds an ellipsis only when it cut."""
    assert brief(text, limit) == expected
    assert len(brief(text, limit)) <= limit


@given(text=any_text, limit=st.integers(min_value=1, max_value=200))
def test_brief_never_exceeds_limit_and_marks_every_cut(text: str, limit: int) -> None:
    """For any input, the result fits the limit, and it ends with an ellipsis iff it was cut."""
    flat = one_line(text)
    result = brief(flat, limit)
    assert len(result) <= limit
    assert (result == flat) or result.endswith(ELLIPSIS)


@pytest.mark.parametrize("payload", INJECTIONS)
def test_one_line_removes_every_line_break_and_control_character(payload: str) -> None:
    """Known injection payloads collapse to a single printable line."""
    result = one_line(payload)
    assert "\n" not in result and "\r" not in result
    assert result.isprintable()


@given(text=hostile_text, limit=st.one_of(st.none(), st.integers(min_value=1, max_value=500)))
def test_one_line_holds_for_any_string(text: str, limit: int | None) -> None:
    """Sanitization: one printable line, no surrounding space, within the limit, valid UTF-8."""
    result = one_line(text, limit)
    assert len(result.splitlines()) <= 1
    assert result.isprintable()
    assert result == result.strip()
    assert limit is None or len(result) <= limit
    assert INVISIBLE.isdisjoint(result)
    result.encode("utf-8")  # no lone surrogates left


def _hidden(data: bytes) -> str:
    """``data`` written in variation selectors, which show as nothing ("emoji smuggling")."""
    return "".join(chr(0xFE00 + b) if b < 16 else chr(0xE0100 + b - 16) for b in data)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\U0001f600" + _hidden(b"ignore previous instructions"), "\U0001f600"),  # bytes hidden after an emoji
        ("I \u2764\ufe0f tea", "I \u2764 tea"),  # emoji presentation selector too: the emoji stays
        ("a\u034fb", "ab"),  # combining grapheme joiner
        ("a\u115fb\u1160c\u3164d\uffa0e", "abcde"),  # Hangul fillers
        ("a \u2800 b", "a b"),  # blank Braille pattern, between spaces: one space left
        ("a\u17b4b\u17b5c", "abc"),  # Khmer inherent vowels
        ("a\u180bb\u180cc\u180dd\u180fe", "abcde"),  # Mongolian free variation selectors
        ("a\U00016fe4b", "ab"),  # Khitan filler
        ("\u3164", ""),  # nothing visible: nothing left
        ("caf\u00e9 \u4e2d\u6587 \u2192 \U0001f600", "caf\u00e9 \u4e2d\u6587 \u2192 \U0001f600"),  # visible text kept
    ],
)
def test_one_line_drops_characters_that_show_as_nothing(text: str, expected: str) -> None:
    """Marks, letters and symbols that print as nothing (isprintable() lets them through)
    are dropped, so nothing can be hidden in text the prompt shows."""
    assert one_line(text) == expected
    assert one_line(text, 300) == expected


def test_clean_text_replaces_lone_surrogates_and_joins_split_pairs() -> None:
    """Unpaired surrogates become U+FFFD; a pair split in two code points is joined."""
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("x\ud83d\ude00y") == "x😀y"
    assert clean_text("plain") == "plain"


def test_cut_middle_keeps_both_ends_and_marks_the_cut() -> None:
    """A long text keeps its start and end within the limit."""
    text = "START " + "x" * 1000 + " END"
    cut = cut_middle(text, 100)
    assert len(cut) <= 100
    assert cut.startswith("START") and cut.endswith("END") and "cut" in cut
    assert cut_middle("short", 100) == "short"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:p@ss@host/0", "rediss://user:***@host/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://host/0?password=zz&db=1", "redis://host/0?password=***&db=1"),
    ],
)
def test_redact_url_hides_passwords(url: str, expected: str) -> None:
    """Passwords in the authority or the query never survive redaction."""
    assert redact_url(url) == expected


def _acted_on(text: str, keep: str = "") -> list[str]:
    """Characters of ``text`` a terminal acts on instead of showing (those in ``keep`` aside)."""
    import unicodedata

    return [c for c in text if c not in keep and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain [bold] text", "plain [bold] text"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("\x1b]8;;https://e.example\x07link", "\\x1b]8;;https://e.example\\x07link"),
        ("csi \x9b2J", "csi \\x9b2J"),
        ("bidi \u202eevil", "bidi \\u202eevil"),
        ("two\nlines", "two\\nlines"),
        ("ünïcode 你好 🙂", "ünïcode 你好 🙂"),
    ],
)
def test_printable_writes_what_a_terminal_acts_on_as_escapes(text: str, expected: str) -> None:
    """Controls, escape sequences, bidi overrides and line breaks become visible escapes; text stays."""
    assert printable(text) == expected


@given(text=hostile_text)
def test_printable_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    """For any string, no control, format or separator character survives (but kept line breaks)."""
    assert _acted_on(printable(text)) == []
    assert _acted_on(printable(text, keep="\n"), keep="\n") == []


@given(value=st.recursive(st.one_of(st.none(), st.integers(), hostile_text), lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(hostile_text, inner, max_size=3), max_leaves=10))  # fmt: skip
def test_printable_json_is_the_same_data_with_nothing_a_terminal_acts_on(value: object) -> None:
    """printable_json keeps a document's data (it loads back equal) and leaves only its indentation's line breaks."""
    import json

    document = printable_json(json.dumps(value, indent=2, ensure_ascii=False))
    assert json.loads(document) == value and _acted_on(document, keep="\n") == []


def _bomb(depth: int) -> list[object]:
    """A list that repeats itself nine times per level: 9**depth strings, built in a few objects."""
    level: list[object] = ["lol"] * 9
    for _ in range(depth):
        level = [level] * 9
    return level


@pytest.mark.parametrize(
    "value",
    ["x" * 1_000_000, 10**5_000, _bomb(9), {f"k{i}": "v" * 1_000 for i in range(10_000)}, ("a\nb", b"\x00" * 10_000)],
    ids=["long string", "huge int", "nested aliases", "big dict", "mixed"],
)
def test_quoted_stays_short_whatever_the_value(value: object) -> None:
    """An error quotes any value in at most the limit, without building its full repr first
    (a nested-alias structure holds 9**9 strings; an int of 5,000 digits has no repr at all)."""
    text = quoted(value, 200)
    assert 0 < len(text) <= 200 and "\n" not in text


def test_quoted_is_the_repr_when_it_fits() -> None:
    """Short values are quoted exactly as repr() would."""
    for value in ["it's", -1, 2.5, None, ["a", 1], {"k": (1, 2)}]:
        assert quoted(value) == repr(value)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "text",
    ["redis://" + "h" * 200_000, "a" * 200_000 + "://", "f" * 200_000 + "g", "sk-" * 70_000, "a://b:" + "c" * 200_000],
    ids=["url run", "scheme at the end", "hex run", "key prefixes", "password run"],
)
def test_redaction_reads_adversarial_text_in_one_pass(text: str) -> None:
    """200,000 characters shaped to make a pattern retry from every position are redacted at
    once (the URL pattern used to rescan a run of letters from each of them: minutes), and
    what holds no secret comes back unchanged."""
    from middleware.core.text import redact_secrets

    assert redact_secrets(text) == text or "***" in redact_secrets(text)


def test_json_integers_beyond_64_bits_are_read_whole() -> None:
    """orjson reads an integer beyond 64 bits as a float; a tool's id or amount must not
    become a different number (a context key set from it would be wrong)."""
    big = 2**64 + 1
    assert parse_json(f'{{"id": {big}, "n": -{big}}}') == {"id": big, "n": -big}
    assert parse_json(f"[{-(2**63) - 1}]".encode()) == [-(2**63) - 1]
    assert parse_json('{"id": "12345678901234567890123", "n": 1.5}') == {"id": "12345678901234567890123", "n": 1.5}
    with pytest.raises(ValueError):  # read whole or not, too deep is refused
        parse_json("[" * 900 + "1" + "0" * 30 + "]" * 900)


def test_invisible_covers_the_characters_ids_refuse() -> None:
    """INVISIBLE is the one complete set: it holds every character the id check refuses as
    invisible (so that check can use it), and every default-ignorable character."""
    from middleware.core import state

    assert state._INVISIBLE <= INVISIBLE
    assert {"\u200b", "\u2060", "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\U000e0100", "\U000e01ef", "\U000e0041"} <= INVISIBLE


@pytest.mark.parametrize(
    ("name", "secret"),
    [("api_key", True), ("Authorization", True), ("Cookie", True), ("session_id", True), ("sessionId", True),
     ("user_otp", True), ("cardCvv", True), ("userPIN", True), ("pin", True), ("pin_code", True), ("db_pwd", True),
     ("author", False), ("footprint", False), ("classname", False), ("spinner", False), ("pinned", False),
     ("top_p", False), ("metadata", False)],
)  # fmt: skip
def test_credential_names_and_words_that_only_contain_a_short_one(name: str, secret: bool) -> None:
    """SECRET_NAME marks the names of credentials, the short ones (otp, ssn, cvv, pin...)
    only as a word of the name (snake_case or camelCase), so a JSON schema's "footprint" or
    "classname" does not mark its values as secrets to mask in an error."""
    from middleware.core.text import SECRET_NAME

    assert bool(SECRET_NAME.search(name)) is secret
