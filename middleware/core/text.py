"""Text helpers of the pure core: cleaning, one-line sanitizing and briefs.

Everything that reaches the system prompt or the summary from user or tool text
goes through ``one_line`` so it cannot add a line, a section or a role marker
line to the prompt.
"""

from __future__ import annotations

import json
import re
import reprlib
import unicodedata
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

ELLIPSIS = "…"

# Fields of a tool result that say how the call went rather than what it found: the archive
# does not recall them, the summary does not show them, context keys are not drawn from them.
RESULT_NOISE = frozenset({"success", "ok", "status", "error", "errors", "message", "detail", "details"})
RESULT_DEPTH = 6  # a result's parts nested deeper are not walked (and a cycle cannot recurse forever)
# A field or argument name that says it holds a credential (api_key, aws_secret_access_key, an
# Authorization header, a password, PIN, cookie or session id...): its value is never shown.
# Short ones (otp, ssn, pin...) only as a word of the name: "user_otp", "cardCvv", not "footprint".
SECRET_NAME = re.compile(
    r"(?i)key|token|secret|pass(?:w|code|phrase)|credential|auth(?!or)|authoriz|cookie|session_?id|bearer"
    r"|(?<![a-z])(?:otp|ssn|cvv|jwt|pwd|pin)(?![a-z])|(?<![a-z])pin_?code"
    r"|(?-i:(?<=[a-z0-9])(?:Otp|Ssn|Cvv|Jwt|Pwd|Pin|OTP|SSN|CVV|JWT|PWD|PIN)(?![a-z]))"
)

# Line breaks of every kind, tabs and other whitespace runs become one space.
_WHITESPACE = re.compile(r"\s+", re.UNICODE)
# Categories dropped outright: controls, format characters (zero-width, bidi
# overrides), surrogates, private use and unassigned code points.
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def _span(first: int, last: int) -> str:
    return "".join(map(chr, range(first, last + 1)))


# Characters that show as nothing: Unicode's Default_Ignorable_Code_Point set (format
# characters, reserved ignorables, and the marks and letters among them that isprintable()
# lets through: the combining grapheme joiner, Hangul fillers, Khmer inherent vowels,
# Mongolian free variation selectors and every variation selector, with which bytes can be
# hidden after an emoji), plus blanks drawn as empty space (the blank Braille pattern, the
# Khitan filler). Every variation selector goes, U+FE0F after an emoji too: the emoji is the
# same character without it. Shared by the sanitizers here and the id check of ``state``.
INVISIBLE = frozenset(
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u2800\u3164\ufeff\uffa0\U00016fe4"
    + _span(0x180B, 0x180F)
    + _span(0x200B, 0x200F)
    + _span(0x202A, 0x202E)
    + _span(0x2060, 0x206F)
    + _span(0xFE00, 0xFE0F)
    + _span(0xFFF0, 0xFFF8)
    + _span(0x1BCA0, 0x1BCA3)
    + _span(0x1D173, 0x1D17A)
    + _span(0xE0000, 0xE0FFF)
)


def _char_class(chars: Iterable[str]) -> re.Pattern[str]:
    """A regex class matching ``chars``, written as ranges: sre scans a class of single
    characters one by one (60 us for 200 characters of text against this set), ranges fast."""
    spans: list[list[int]] = []
    for code in sorted(map(ord, chars)):
        if spans and spans[-1][1] == code - 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return re.compile("[" + "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "") for a, b in spans) + "]")


# The ones isprintable() calls printable, for the sanitizers' fast check (the rest are
# dropped by category already).
_PRINTABLE_INVISIBLE = _char_class(c for c in INVISIBLE if c.isprintable())


_BLANK_RUNS = re.compile(r"\n{3,}")


def squeeze_blank_lines(text: str) -> str:
    """Runs of blank lines cut to one blank line."""
    return _BLANK_RUNS.sub("\n\n", text)


def clean_text(text: str) -> str:
    """Replace unpaired surrogates with U+FFFD so the text can be encoded as UTF-8.

    A surrogate pair split into two code points is joined back into one character.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def drop_invisible(text: str) -> str:
    """``text`` without the characters of ``INVISIBLE`` that isprintable() lets through."""
    return text if text.isascii() else _PRINTABLE_INVISIBLE.sub("", text)


def _keep(char: str) -> bool:
    return unicodedata.category(char) not in _DROPPED_CATEGORIES


def one_line(text: str, limit: int | None = None) -> str:
    """Collapse ``text`` to one printable line, optionally cut to ``limit`` characters."""
    # Fast path for text that is already clean (what the store holds): isprintable() is
    # False for every line break, control, format, surrogate and non-ASCII space, and
    # no invisible letter or mark is possible in ASCII text.
    if (
        text.isprintable()
        and (limit is None or len(text) <= limit)
        and text == text.strip()
        and (text.isascii() or not _PRINTABLE_INVISIBLE.search(text))
    ):
        return text
    # Invisible characters go first, so the spaces around one collapse into one.
    flat = _WHITESPACE.sub(" ", drop_invisible(clean_text(text)))
    if not flat.isprintable():
        flat = "".join(filter(_keep, flat))
    flat = flat.strip()
    return brief(flat, limit) if limit is not None else flat


def brief(text: str, limit: int | None) -> str:
    """Cut one-line ``text`` to at most ``limit`` characters at a word boundary.

    An ellipsis is added only when something was cut, and counts toward the limit.
    """
    if limit is None or len(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS[:limit]
    head = text[: limit - 1]
    # Back off to the previous space only when the cut would split a word, and
    # only if that keeps at least half of the room.
    splits_word = head[-1].isalnum() and text[limit - 1].isalnum()
    cut = head.rfind(" ")
    if splits_word and cut >= limit // 2:
        head = head[:cut]
    return head.rstrip(" ,;:.-") + ELLIPSIS


# Greedy up to the last '@' of the authority, so a password holding '@' is hidden whole. The
# lookbehind starts a scheme only where one can start: without it, every letter of a long run
# began a fresh scan of the run (quadratic: a minute for 200,000 characters of error text).
_URL_PASSWORD = re.compile(r"(?<![a-z0-9+.\-])(?P<head>[a-z][a-z0-9+.\-]*://[^:@/?#]*:)(?P<secret>[^/?#]*)@", re.IGNORECASE)
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)[^&]*", re.IGNORECASE)


# API keys as providers issue them, each alternative capturing the prefix it keeps: OpenAI and
# Anthropic sk-..., Google AIza..., Groq gsk_..., xAI xai-..., Hugging Face hf_..., Perplexity
# pplx-..., AWS access key ids, GitHub tokens, Replicate r8_..., and bare hex keys.
_KEY_LIKE = re.compile(
    r"\b(?:(sk-)[A-Za-z0-9_\-]{8,}|(AIza)[0-9A-Za-z_\-]{20,}|(gsk_)[A-Za-z0-9]{16,}|(xai-)[A-Za-z0-9]{16,}"
    r"|(hf_)[A-Za-z0-9]{16,}|(pplx-)[A-Za-z0-9]{16,}|(AKIA|ASIA)[0-9A-Z]{16}\b|(gh[pousr]_)[A-Za-z0-9]{20,}"
    r"|(github_pat_)[A-Za-z0-9_]{20,}|(r8_)[A-Za-z0-9]{20,}|()[0-9A-Fa-f]{32,}\b)"
)
_BEARER = re.compile(r"(?i)\b(Bearer\s+[A-Za-z0-9._~+/=\-]+|Basic\s+[A-Za-z0-9+/=]{6,})")
# A pair whose name is or ends in a secret word (api_key=, access_token=, client_secret:,
# DB_PASSWORD=). A name starts only where no name character precedes (the lookbehind), so a
# long word is scanned once, not once per position (that was quadratic: 20 s for 20,000 letters).
_SECRET_PAIR = re.compile(
    r"(?i)(?<![A-Za-z0-9_.\-])([A-Za-z0-9_.\-]*?(?:api[_-]?key|access[_-]?key|private[_-]?key|password|passwd|pwd|secret"
    r"|token|authorization|credentials?)[\"']?\s*[:=]\s*[\"']?)([^\s\"',}&]+)"
)
# A known secret shorter than this is not masked: replacing every "abc" of a message would
# garble it, and so short a value protects nothing anyway.
MIN_SECRET_CHARS = 6


def mask(secret: str) -> str:
    """How a known secret is shown: its first 3 characters (usually the format's prefix) when
    it is long enough that they give nothing away, then ``***``."""
    return secret[:3] + "***" if len(secret) >= 16 else "***"


def redact_secrets(text: str, known: Iterable[str] = ()) -> str:
    """Hide the ``known`` secrets wherever they appear, then passwords in URLs, provider API
    keys by their format, bearer tokens and ``password=...``-style values."""
    for secret in sorted({s for s in known if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(secret, mask(secret))
    text = redact_url(text)
    text = _KEY_LIKE.sub(lambda m: next(g for g in m.groups() if g is not None) + "***", text)
    text = _BEARER.sub(lambda m: m.group(1).split(None, 1)[0] + " ***", text)
    return _SECRET_PAIR.sub(lambda m: m.group(1) + "***", text)


# A run this long that an error shares with a message sent is the message quoted back; shorter
# runs are common phrases ("the request", a model name).
QUOTED_RUN = 24
# What of the texts sent is searched for runs an error quotes, newest first: this many
# characters of each text at most, and of all of them together (a content filter quotes what
# it refused, mostly the current message; a huge tool result does not crowd that out).
QUOTED_EACH = 65_536
QUOTED_SEARCHED = 262_144
QUOTE_MARK = "[…message text…]"


def _quoted_forms(said: str) -> tuple[str, ...]:
    """``said`` as an error may quote it: as it is, and escaped as JSON (ASCII or not) or as
    a Python repr writes a string (a provider's JSON body, an SDK's message)."""
    return tuple(dict.fromkeys((said, json.dumps(said)[1:-1], json.dumps(said, ensure_ascii=False)[1:-1], repr(said)[1:-1])))


class QuotedTexts:
    """The texts a call sent, as ``redact_quoted`` searches them (newest first; the first
    ``each`` characters of each, ``searched`` of all together; each also escaped as JSON
    and a repr): each text's forms are made once, when a search first reaches it, so one
    error and the causes it is retold from share them."""

    def __init__(self, sent: Iterable[str], *, each: int = QUOTED_EACH, searched: int = QUOTED_SEARCHED) -> None:
        self._sent, self._each, self._left = iter(sent), each, searched
        self._forms: list[tuple[str, ...]] = []

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        """Each text's forms in turn."""
        index = 0
        while True:
            if index == len(self._forms):
                said = next(self._sent, None) if self._left > 0 else None
                if said is None:
                    return
                self._forms.append(_quoted_forms(said[: min(self._each, self._left)]))
                self._left -= min(len(said), self._each)
            yield self._forms[index]
            index += 1


def redact_quoted(
    text: str, sent: Iterable[str] | QuotedTexts, *, run: int = QUOTED_RUN, each: int = QUOTED_EACH,
    searched: int = QUOTED_SEARCHED,
) -> str:  # fmt: skip
    """``text`` (an error) with every run of at least ``run`` characters that also stands in
    one of the ``sent`` texts (newest first; as they are or escaped as JSON or a repr; the
    first ``each`` characters of each, ``searched`` of all together; or ``QuotedTexts``,
    which carries its own bounds) written as one mark: a provider error echoing a message
    does not carry its content into a log. Each window of ``text`` is looked up once:
    linear in the characters searched, whatever repeats."""
    if len(text) < run:
        return text
    # Windows of mostly letters and digits: a run of indentation or punctuation that a
    # message shares with an error page is layout, not the message.
    letters = [0]
    for char in text:
        letters.append(letters[-1] + char.isalnum())
    at: dict[str, list[int]] = {}
    for i in range(len(text) - run + 1):
        if 2 * (letters[i + run] - letters[i]) >= run:
            at.setdefault(text[i : i + run], []).append(i)
    if not at:
        return text
    covered = bytearray(len(text))
    for forms in sent if isinstance(sent, QuotedTexts) else QuotedTexts(sent, each=each, searched=searched):
        for form in forms:
            for i in range(len(form) - run + 1):
                starts = at.pop(form[i : i + run], None)
                for start in starts or ():
                    covered[start : start + run] = b"\x01" * run
            if not at:
                break
        if not at:
            break
    if not any(covered):
        return text
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(QUOTE_MARK)
        else:
            j = covered.find(1, i)
            j = len(text) if j < 0 else j
            out.append(text[i:j])
            i = j
    return "".join(out)


def redact_url(url: str) -> str:
    """Hide the password of a URL (``redis://user:secret@host`` -> ``redis://user:***@host``)."""
    url = _URL_PASSWORD.sub(r"\g<head>***@", url)
    return _QUERY_PASSWORD.sub(r"\g<head>***", url)


# How deep JSON from a client, a model or a tool may nest: deeper than any schema or
# argument needs, and far below what encoders, decoders and recursion limits allow (orjson
# encodes 254 levels; Python recursion stops near 1,000).
JSON_DEPTH = 64


def json_depth(value: Any, limit: int = JSON_DEPTH) -> int:
    """How deep ``value`` nests (a scalar is 0), counted without recursion; counting stops
    past ``limit`` (returns ``limit + 1``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, (list, tuple)) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


# 19 digits or more in a row: possibly an integer orjson cannot hold (beyond 64 bits).
_LONG_NUMBER, _LONG_NUMBER_BYTES = re.compile(r"\d{19}"), re.compile(rb"\d{19}")


def parse_json(text: str | bytes | bytearray, limit: int = JSON_DEPTH) -> Any:
    """The JSON value ``text`` holds; ValueError when it is not JSON or nests deeper than
    ``limit`` (a decoder's own limit, or a RecursionError, never escapes)."""
    try:
        value = orjson.loads(text)
        if _LONG_NUMBER.search(text) if isinstance(text, str) else _LONG_NUMBER_BYTES.search(text):
            # orjson reads an integer beyond 64 bits as a float: read it whole. (One beyond a
            # float's range, 309 digits or more, orjson refuses: such text stays text, whole.)
            value = json.loads(text)
    except (orjson.JSONDecodeError, RecursionError):
        raise ValueError("not JSON") from None
    if json_depth(value, limit) > limit:
        raise ValueError(f"JSON nested deeper than {limit} levels")
    return value


CUT_MARKER = " […cut…] "


def cut_middle(text: str, limit: int, marker: str = CUT_MARKER) -> str:
    """Keep the start and the end of ``text`` within ``limit`` characters, marking the cut."""
    if len(text) <= limit:
        return text
    room = max(limit - len(marker), 0)
    head = room - room // 2
    return text[:head] + marker + (text[-(room // 2) :] if room // 2 else "")


# What a terminal acts on instead of showing: C0 and C1 controls (ESC opens ANSI colour and
# OSC 8 hyperlink sequences, U+009B is a one-character CSI), format characters (bidi
# overrides, zero-width), lone surrogates, and line and paragraph separators.
_UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _shown(char: str) -> bool:
    return char.isprintable() or unicodedata.category(char) not in _UNSHOWN


def printable(text: str, keep: str = "") -> str:
    """``text`` with every character a terminal would act on written as its escape (``\\x1b``,
    ``\\x9b``, ``\\u202e``), so stored or foreign text prints as the text it is; characters
    in ``keep`` (say ``"\\n"`` for multi-line text) stay as they are."""
    if text.isprintable():
        return text
    return "".join(c if c in keep or _shown(c) else c.encode("unicode_escape").decode("ascii") for c in text)


def _json_escape(char: str) -> str:
    code = ord(char)
    if code > 0xFFFF:  # JSON escapes a character beyond the BMP as its UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def printable_json(document: str) -> str:
    """A JSON document (as ``json.dumps(..., ensure_ascii=False)`` writes it) with the characters
    ``printable`` escapes written as ``\\uXXXX`` escapes: the same data, safe on a terminal.

    Outside its strings a JSON document holds only ASCII punctuation, spaces and the line
    breaks of indentation, which are kept."""
    if document.isprintable():
        return document
    return "".join(c if c == "\n" or _shown(c) else _json_escape(c) for c in document)


def _quoter(limit: int) -> reprlib.Repr:
    quoter = reprlib.Repr()
    quoter.maxstring = quoter.maxother = limit
    quoter.maxlevel, quoter.maxlong = 3, 40
    quoter.maxdict = quoter.maxlist = quoter.maxtuple = quoter.maxset = quoter.maxfrozenset = 8
    return quoter


def quoted(value: object, limit: int = 200) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters and marked where cut,
    built without ever writing out a huge string, container or number in full."""
    if isinstance(value, int) and value.bit_length() > 256:  # repr() refuses ints past 4,300 digits
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits>"
    try:
        text = _quoter(limit).repr(value)
    except Exception:  # a broken or refusing __repr__
        text = f"<{type(value).__name__}>"
    return cut_middle(text, limit, " … ")


def capped_count(count: int) -> str:
    """A count as an error message shows it: past a million, only its sign and size."""
    return str(count) if abs(count) < 1_000_000 else f"{'-' if count < 0 else ''}>1e6"
