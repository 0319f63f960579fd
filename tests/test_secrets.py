"""Secrets: store passwords and API keys never reach logs, errors or reprs."""

from __future__ import annotations

import inspect
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from middleware import Config, LLMError, SessionManager, ToolCall
from middleware.core.text import redact_secrets
from middleware.testing import capture_events
from middleware.testing.scripted import register

KEY = "sk-live-ABCDEFGHIJKLMNOPQRST"


def test_reprs_hide_the_store_password(atlas: Config) -> None:
    """Config, manager and store reprs show the URL with its password masked."""
    config = atlas.with_overrides(store={"url": "redis://:hunter2@127.0.0.1:1/0"})
    with SessionManager(config) as mgr:
        for text in (repr(config), str(config), repr(config.store), repr(mgr), repr(mgr.store)):
            assert "hunter2" not in text
        assert "***" in repr(mgr.store)


def test_provider_errors_are_redacted(atlas: Config, tmp_path: Path) -> None:
    """A provider error quoting the key becomes an LLMError without it, and the warning
    logged when tools had already run holds no key either."""

    def leaky(messages: Any, tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            raise RuntimeError(f"Incorrect API key provided: {KEY}. Authorization: Bearer {KEY}")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "function": {"name": "get_node_tree", "arguments": '{"userinterface_name": "google_tv"}'}}
            ],
        }

    name = f"leaky-{uuid.uuid4().hex[:6]}"
    register(name, leaky)
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")})
    with SessionManager(config, redis_url=f"memory://{name}") as mgr, capture_events() as events:
        with pytest.raises(LLMError) as info:
            mgr.chat("s", "show the node tree", model=f"scripted/{name}", api_key=KEY)
    assert KEY not in str(info.value) and "sk-***" in str(info.value)
    assert KEY not in str(events) and any(e["event"] == "chat.failed_after_tools" for e in events)
    assert KEY not in (tmp_path / "u.jsonl").read_text()


def test_a_provider_error_echoing_the_message_keeps_its_text_out(atlas: Config, tmp_path: Path) -> None:
    """A provider that refuses a message and quotes it back (a content filter) fails the call
    with an LLMError that names the failure but not the message, in its text and its causes;
    what it says in its own words stays."""
    said = "please summarise the medical file of Jane Roe, born 1984-03-07, for the insurer"

    def echoing(messages: Any, tools: Any) -> Any:
        raise RuntimeError(f"Content policy violation: the prompt '{messages[-1]['content']}' was refused (code 4711)")

    name = f"echo-{uuid.uuid4().hex[:6]}"
    register(name, echoing)
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")})
    with SessionManager(config, redis_url=f"memory://{name}") as mgr, pytest.raises(LLMError) as info:
        mgr.chat("s", said, model=f"scripted/{name}")
    chain, cause = [], info.value
    while cause is not None:
        chain.append(str(cause))
        cause = cause.__cause__
    told = "\n".join(chain)
    assert len(chain) >= 2 and "Jane Roe" not in told and "1984-03-07" not in told
    assert "Content policy violation" in chain[0] and "(code 4711)" in chain[0] and "[…message text…]" in chain[0]


def test_an_error_keeps_short_phrases_a_message_shares_and_masks_long_runs() -> None:
    from middleware.core.text import QUOTE_MARK, redact_quoted

    sent = ["the request was made", "my card number is 4111 1111 1111 1111 and it expires soon"]
    assert redact_quoted("Error: the request was made twice", sent) == "Error: the request was made twice"
    masked = redact_quoted("refused: 'card number is 4111 1111 1111 1111' (policy)", sent)
    assert masked == f"refused: '{QUOTE_MARK}' (policy)"
    # What was sent is searched newest first, ``searched`` characters in all, ``each`` of each
    # text at most: a huge tool result does not crowd out the message before it.
    assert redact_quoted("x: card number is 4111 1111 1111 1111", sent, searched=20) == "x: card number is 4111 1111 1111 1111"
    assert redact_quoted("x: card number is 4111 1111 1111 1111", ["<p>page</p>" * 100_000, *sent]) == f"x:{QUOTE_MARK}"
    # Quoted inside a JSON body or a repr, line breaks and accents escaped, it is found all the same.
    note = "Patient: Jane Roe\nDOB: 1984-03-07\nLe médecin a confirmé\n"
    for body in (json.dumps({"prompt": note}), json.dumps({"prompt": note}, ensure_ascii=False), repr({"prompt": note})):
        assert "Jane" not in redact_quoted(body, [note]) and "confirm" not in redact_quoted(body, [note])
    # Layout a message shares with an error page (indentation, rules of dashes) is not its text.
    page, code = "<div>\n" + " " * 32 + "-" * 30 + "</div>", " " * 32 + "return x\n" + "-" * 30
    assert redact_quoted(page, [code]) == page


def test_an_error_and_its_causes_share_the_escaped_forms_of_what_was_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    import middleware.core.text as text
    from middleware.provider import ProviderOptions, provider_error

    made: list[int] = []
    forms = text._quoted_forms
    monkeypatch.setattr(text, "_quoted_forms", lambda said: made.append(len(said)) or forms(said))
    quote = "my card number is 4111 1111 1111 1111 and it expires soon"
    try:
        try:
            try:
                raise ValueError(f"upstream refused {quote!r}")
            except ValueError as inner:
                raise RuntimeError(f"proxy: {quote}") from inner
        except RuntimeError:
            raise OSError(f"content policy: {quote}")  # noqa: B904 (chained implicitly, as SDKs do)
    except OSError as exc:
        error = provider_error("gpt-4o-mini", exc, ProviderOptions({}), sent=["x" * 50_000, quote])
    told, cause = [str(error)], error.__cause__
    while cause is not None:
        told.append(str(cause))
        cause = cause.__cause__
    assert len(told) == 4 and not any("4111" in line for line in told)
    # Four errors searched, and each sent text's escaped forms made once (a retelling made
    # them again for every cause: up to 8 causes of 262,144 characters each).
    assert made == [50_000, len(quote)]


def test_logs_hold_no_content_and_no_secrets_by_default(atlas: Config, tmp_path: Path) -> None:
    """Usage lines and debug events from a full chat carry neither text nor credentials."""
    log = tmp_path / "u.jsonl"
    config = atlas.with_overrides(usage_log={"path": str(log)}, store={"url": "memory://secrets-default"})
    with SessionManager(config) as mgr, capture_events() as events:
        mgr.chat("s", "navigate to watchlist on google_tv", model="scripted/atlas", api_key=KEY)
        mgr.record_turn(
            "s",
            user="my password is hunter2",
            assistant="noted",
            tool_calls=[ToolCall(name="navigate_to_node", arguments={"userinterface_name": "hunter2_tv"})],
        )
    written = log.read_text() + repr(events)
    for secret in (KEY, "hunter2", "watchlist on google_tv"):
        assert secret not in written


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("redis://user:pa55@host:6379/0", "pa55"),
        (f"Incorrect API key provided: {KEY}", KEY),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ('{"api_key": "k-123456"}', "k-123456"),
        ("password=swordfish&db=0", "swordfish"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstu", "AIzaSyA1234567890abcdefghijklmnopqrstu"),
        ("access_token=abcdef123", "abcdef123"),
        ("DB_PASSWORD=hunter22", "hunter22"),
        ("client_secret: 'zzzzzz'", "zzzzzz"),
        ("x-api-key: abcdefgh", "abcdefgh"),
    ],
)
def test_redaction_covers_the_usual_shapes(text: str, hidden: str) -> None:
    """URL passwords, provider keys, bearer tokens and key=value secrets are masked, a pair
    whose name ends in a secret word too."""
    assert hidden not in redact_secrets(text)


@pytest.mark.parametrize("text", ["max_tokens=500", "token_count=5", "tokenizer=gpt2", "input_tokens: 12", "secretive=no"])
def test_names_that_only_hold_a_secret_word_are_not_pairs(text: str) -> None:
    assert redact_secrets(text) == text


def test_redaction_reads_a_long_word_once() -> None:
    """A pair's name is matched from the start of a word only: matched from every position,
    a 20,000-letter word (a tool's error may hold one) took 20 s; 200,000 would take half an hour."""
    started = time.perf_counter()
    assert redact_secrets("g" * 200_000 + " access_token=abcdef123") == "g" * 200_000 + " access_token=***"
    assert time.perf_counter() - started < 2.0


# Keys in the formats providers issue, each as a provider might echo it back in an error.
PROVIDER_KEYS = {
    "hex": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b",
    "huggingface": "hf_QwErTyUiOpAsDfGhJkLzXcVbNm12345678",
    "perplexity": "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",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "github": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "openai": "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe",
    "no known format": "k3y_with.no/known+format=Zq81",
}


class ProviderAuthError(Exception):
    """What a provider SDK raises on a rejected key: it quotes the key, and carries it as an attribute."""

    def __init__(self, key: str) -> None:
        super().__init__(f"401 Unauthorized: invalid api key '{key}' (Authorization: Bearer {key})")
        self.key = key


def formatted_everywhere(error: BaseException) -> str:
    """``error`` as every usual formatter renders it: its text and repr, and those of each
    exception in its chain, traceback.format_exception, a logging handler's line, and
    structlog's plain, dict (JSON) and rich (console, with local variables) tracebacks.

    The frames of the tests (the caller, who holds the key it passed) are left out."""
    import io
    import json
    import logging
    import traceback

    import structlog

    tb = error.__traceback__
    while tb is not None and Path(tb.tb_frame.f_code.co_filename).is_relative_to(Path(__file__).parent):
        tb = tb.tb_next
    error = error.with_traceback(tb)
    exc_info = (type(error), error, tb)
    parts = ["".join(traceback.format_exception(error)), logging.Formatter().formatException(exc_info)]
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen), repr(seen.args), repr(vars(seen))]
        seen = seen.__cause__ or seen.__context__
    stream = io.StringIO()
    logger = logging.getLogger(f"test-secrets-{uuid.uuid4().hex}")
    logger.addHandler(logging.StreamHandler(stream))
    logger.propagate = False
    logger.error("chat failed", exc_info=exc_info)
    parts.append(stream.getvalue())
    event = {"event": "chat failed", "exc_info": exc_info}
    parts.append(structlog.processors.format_exc_info(None, "error", dict(event))["exception"])
    parts.append(json.dumps(structlog.processors.dict_tracebacks(None, "error", dict(event)), default=repr))
    parts.append(structlog.dev.ConsoleRenderer(colors=False)(None, "error", dict(event)))
    return "\n".join(parts)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize("kind", list(PROVIDER_KEYS))
def test_a_key_the_provider_echoes_is_masked_in_the_error_and_its_whole_chain(
    kind: str, stream: bool, face: str, loop: Any, atlas: Config, tmp_path: Path
) -> None:
    """A provider error quoting the api_key (any format, even none known) becomes an LLMError
    whose text, cause chain and formatted tracebacks (traceback, logging, structlog with
    local variables) hold no trace of the key, yet still say what failed."""
    from tests.conftest import open_manager

    key = PROVIDER_KEYS[kind]

    def rejects(messages: Any, tools: Any) -> Any:
        raise ProviderAuthError(key)

    name = f"rejects-{uuid.uuid4().hex[:6]}"
    register(name, rejects)
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")}, store={"url": f"memory://{name}"})
    manager = open_manager(face, config, loop)
    try:
        with pytest.raises(LLMError) as info:
            result = manager.chat("s", "hello", model=f"scripted/{name}", api_key=key, stream=stream)
            if stream:
                list(result)
    finally:
        manager.close()
    text = formatted_everywhere(info.value)
    assert key not in text
    assert "401 Unauthorized: invalid api key" in text and "***" in str(info.value)
    assert "ProviderAuthError" in text  # the cause chain still names what the provider raised


def test_a_key_read_from_the_environment_is_masked_too(atlas: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key litellm would take from the environment (no api_key given) is masked as literally."""
    key = "envkey.no-known-format.Zq81Zq81"
    monkeypatch.setenv("SOMEPROVIDER_API_KEY", key)

    def rejects(messages: Any, tools: Any) -> Any:
        raise ProviderAuthError(key)

    name = f"rejects-env-{uuid.uuid4().hex[:6]}"
    register(name, rejects)
    config = atlas.with_overrides(usage_log={"path": str(tmp_path / "u.jsonl")}, store={"url": f"memory://{name}"})
    with SessionManager(config) as mgr, pytest.raises(LLMError) as info:
        mgr.chat("s", "hello", model=f"scripted/{name}")
    assert key not in formatted_everywhere(info.value) and "401 Unauthorized" in str(info.value)


@pytest.mark.parametrize("kind", [kind for kind in PROVIDER_KEYS if kind != "no known format"])
def test_keys_in_known_formats_are_masked_even_when_not_given(kind: str) -> None:
    """A key nobody passed in (another provider's, a leaked one) is still masked by its format."""
    key = PROVIDER_KEYS[kind]
    masked = redact_secrets(f"upstream said: token {key} is not valid for this project")
    assert key not in masked and "***" in masked and masked.startswith("upstream said: token ")


def test_a_provider_error_quotes_a_huge_model_name_cut_short_and_at_once() -> None:
    """Found: a client's model name of megabytes was quoted whole in the error, after a hint
    compared it with every known name (seconds of work for one bad request)."""
    import time

    from middleware.provider import ProviderOptions, provider_error

    name = "M" * 2_000_000
    started = time.perf_counter()
    error = provider_error(name, ValueError("LLM Provider NOT provided. Pass in the LLM provider"), ProviderOptions({}),
                           known=["gpt-4o-mini", "claude-sonnet-4-5"])  # fmt: skip
    assert time.perf_counter() - started < 1
    assert len(str(error)) < 1_000 and "(2,000,000 characters)" in str(error) and "'provider/model'" in str(error)
    assert "Did you mean 'gpt-4o-mini'?" in str(provider_error("gpt-4o-minii", ValueError("LLM Provider NOT provided"),
                                                                ProviderOptions({}), known=["gpt-4o-mini"]))  # fmt: skip


def _failing_tool_turn(atlas: Config, tool: Any, **options: Any) -> tuple[str, Any, str]:
    """One chat turn whose model calls ``tool`` (which raises) with argument ``x``, then
    replies: what the model was told of the failure, the result, and what the store holds."""
    seen: list[Any] = []
    argument = next(iter(inspect.signature(tool).parameters))

    def bot(messages: Any, tools: Any) -> Any:
        seen.append(messages[-1])
        if messages[-1]["role"] == "tool":
            return {"role": "assistant", "content": "done"}
        call = {"name": tool.__name__, "arguments": json.dumps({argument: "x"})}
        return {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "function": call}]}

    name = f"tool-error-{uuid.uuid4().hex[:6]}"
    register(name, bot)
    with SessionManager(atlas.with_overrides(store={"url": f"memory://{name}"})) as mgr:
        result = mgr.chat("s", "do it", model=f"scripted/{name}", tools=[tool], **options)
        stored = repr(mgr.inspect("s", traces=10)) + repr(mgr.get_state("s"))
    return seen[-1]["content"], result, stored


TOOL_SECRETS = {
    "URL password": ("redis://app:Sup3rS3cretPassw0rd@db.internal:6379/0", "Sup3rS3cretPassw0rd"),
    "api_key pair": ("api_key=Zq81-no-known-format-Zq81", "Zq81-no-known-format-Zq81"),
    "key format": ("using sk-live-abcdefghijklmnop", "abcdefghijklmnop"),
    "access_token pair": ("access_token=ya29.A0ARrdaM-secret-part", "ya29.A0ARrdaM-secret-part"),
    "client_secret JSON": ('{"client_secret": "GOCSPX-1a2b3c4d5e6f"}', "GOCSPX-1a2b3c4d5e6f"),
    "db_password colon": ("db_password: correct-horse-battery", "correct-horse-battery"),
    "environment": ("handshake with value envtoken.Zq81Zq81.x failed", "envtoken.Zq81Zq81.x"),
}


@pytest.mark.parametrize("kind", TOOL_SECRETS)
def test_a_failing_tools_error_reaches_the_model_and_the_store_with_its_secrets_masked(
    atlas: Config, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Found in review: a tool's exception text went to the model (and into the turn's record:
    traces, archive) as it was, credentials and all. It is masked now as provider errors are,
    and still says what failed."""
    text, secret = TOOL_SECRETS[kind]
    monkeypatch.setenv("INTERNAL_SERVICE_TOKEN", "envtoken.Zq81Zq81.x")

    def lookup(q: str) -> str:
        """Look it up."""
        raise ConnectionError(f"could not connect to db.internal: {text}")

    told, result, stored = _failing_tool_turn(atlas, lookup)
    assert secret not in told and secret not in repr(result.tool_calls) and secret not in stored
    assert told.startswith('{"error":"ConnectionError: could not connect to db.internal: ') and "***" in told
    assert not result.tool_calls[0].ok and "could not connect to db.internal" in stored  # the record holds the error


def test_a_failing_tools_error_is_masked_of_the_credentials_given_to_chat(atlas: Config) -> None:
    """Found in review: a key given to chat() (``api_key=``, no known format, in no
    environment variable) was masked in provider errors but not in a tool's error, which
    went to the model and into the turn's record as it was."""
    key = "Zq81opaque" + uuid.uuid4().hex[:12]

    def fetch(url: str) -> str:
        """Fetch a page."""
        raise PermissionError(f"upstream refused the request made with {key}")

    told, result, stored = _failing_tool_turn(atlas, fetch, api_key=key)
    assert told.startswith('{"error":"PermissionError: upstream refused the request made with ')
    assert key not in told and key not in repr(result.tool_calls) and key not in stored
    assert "upstream refused the request" in stored  # what failed is still recorded


def test_a_credential_in_a_cookie_or_session_header_given_to_chat_is_masked_too(atlas: Config) -> None:
    """The names that mark a credential are one list (``text.SECRET_NAME``) for the summary's
    values and for what chat() is given: a Cookie header (no key, token or password in its
    name) was not masked in a tool's error before they were."""
    cookie = "sid=Zq81opaque" + uuid.uuid4().hex[:12]

    def fetch(url: str) -> str:
        """Fetch a page."""
        raise PermissionError(f"upstream refused the request made with {cookie}")

    told, result, stored = _failing_tool_turn(atlas, fetch, extra_headers={"Cookie": cookie})
    assert told.startswith('{"error":"PermissionError: upstream refused the request made with ')
    assert cookie not in told and cookie not in repr(result.tool_calls) and cookie not in stored
