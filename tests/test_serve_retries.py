"""A client that sends a request again (it timed out, or lost its connection) gets the first
attempt's answer: the model is not called twice, nor the turn recorded twice. Driven by the
official ``openai`` client, whose retries say so (``x-stainless-retry-count``), and by plain
HTTP with an ``Idempotency-Key``, over a real socket, with an upstream that takes its time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from middleware import Config, SessionManager
from middleware.runner import run
from middleware.serve import create_app
from middleware.store import RedisStore, live, retries
from middleware.store import keys as store_keys
from middleware.store import load as store_load
from middleware.testing import mock_openai_app, serving

SLOW_SECONDS = 3.0


class Upstream:
    """A provider on loopback that answers each request after ``delay`` seconds (each on its own thread)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.delay = SLOW_SECONDS
        self.fail_first = False  # the first request gets a 500

    def respond(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> dict[str, Any]:
        """Calls ``lookup`` when offered it, then answers from its result; else answers the message."""
        time.sleep(self.delay)
        if tools and messages[-1]["role"] == "user":
            call = {"id": f"call-{len(self.requests)}", "function": {"name": "lookup", "arguments": {"q": "x"}}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"role": "assistant", "content": f"answer {len(self.requests)} to {messages[-1]['content']}"}


LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "Looks a thing up.",
           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]  # fmt: skip


@pytest.fixture
def upstream() -> Iterator[tuple[Upstream, str]]:
    provider = Upstream()
    with serving(mock_openai_app(responder=provider.respond, requests=provider.requests)) as url:
        yield provider, f"{url}/v1"


@pytest.fixture
def config(store_url: str, log_path: Path, upstream: tuple[Upstream, str]) -> Config:
    return Config().with_overrides(store={"url": store_url}, usage_log={"path": str(log_path)},
                                   serve={"models": {"m": {"model": "openai/slow", "api_base": upstream[1]}}})  # fmt: skip


@pytest.fixture
def url(config: Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-mock")
    with serving(create_app(config)) as served:
        yield served


def recent(config: Config, session: str) -> tuple[int, list[str]]:
    with SessionManager(config) as mgr:
        state = mgr.get_state(session)
    return state.turns, [str(m["content"]) for m in state.recent]


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_retry_after_a_client_timeout_gets_the_first_attempts_answer(
    url: str, config: Config, upstream: tuple[Upstream, str], stream: bool
) -> None:
    """The model takes 3 s, the client gives up after 1.5 s and tries once more: one upstream
    call, one turn, and the retry gets the answer the first attempt paid for. Streamed, the
    first attempt's client left before the model's first chunk: its stream runs to its end
    unheard, and the retry gets the whole answer."""
    provider, _ = upstream
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=1.5, max_retries=1)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hello"}], extra_headers={"X-Session-Id": "r1"}, stream=stream
    )
    assert raw.headers["x-middleware-replayed"].startswith("the answer of an earlier attempt")
    if stream:
        assert "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices) == "answer 1 to hello"
    else:
        reply = raw.parse()
        assert reply.choices[0].message.content == "answer 1 to hello"
        assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert len(provider.requests) == 1
    assert recent(config, "r1") == (1, ["hello", "answer 1 to hello"])
    # the replay reached its client: the same message sent again, even marked a retry (its own
    # first attempt never arrived; an SDK retries after half a second at the soonest), is a new turn
    provider.delay = 0
    time.sleep(0.5)
    again = client.with_options(max_retries=0).chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "hello"}], stream=stream,
        extra_headers={"X-Session-Id": "r1", "x-stainless-retry-count": "1"},
    )  # fmt: skip
    assert "x-middleware-replayed" not in again.headers
    parsed = again.parse()
    if stream:  # read to its end: the turn is recorded as the stream ends
        assert "".join(chunk.choices[0].delta.content or "" for chunk in parsed if chunk.choices) == "answer 2 to hello"
    assert len(provider.requests) == 2 and recent(config, "r1") == (2, ["hello", "answer 2 to hello"])


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"X-Session-Id": "r2", **headers}, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_request_sent_again_with_its_idempotency_key_while_it_runs_waits_for_its_answer(
    url: str, config: Config, upstream: tuple[Upstream, str], stream: bool
) -> None:
    """Two sends of one request with one Idempotency-Key, the second while the first runs:
    one upstream call, one turn, the same answer to both (streamed as the retry asked)."""
    provider, _ = upstream
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "once"}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    first: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: first.append(post(url, body, **{"Idempotency-Key": "k-1"})))
    sender.start()
    time.sleep(0.8)
    second = post(url, body, **{"Idempotency-Key": "k-1"})
    sender.join()
    assert first[0].status_code == second.status_code == 200
    assert "x-middleware-replayed" not in first[0].headers and "x-middleware-replayed" in second.headers
    answer = "answer 1 to once"
    if stream:
        for response in (first[0], second):
            events = [orjson.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
            assert "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]) == answer
            assert events[-2]["choices"][0]["finish_reason"] == "stop" and events[-1]["usage"]["prompt_tokens"] > 0
            assert response.text.endswith("data: [DONE]\n\n")
    else:
        assert first[0].json()["choices"][0]["message"]["content"] == second.json()["choices"][0]["message"]["content"] == answer
        assert second.json()["id"] == first[0].json()["id"]
    assert len(provider.requests) == 1
    assert recent(config, "r2") == (1, ["once", answer])


@pytest.mark.slow
def test_a_retry_of_a_request_whose_answer_is_a_tool_call_gets_that_call_and_the_turn_goes_on_once(
    url: str, config: Config, upstream: tuple[Upstream, str]
) -> None:
    """The first attempt's answer asks the client to run a tool: the retry gets the same call
    (the same id), and the client's result ends one turn."""
    provider, _ = upstream
    body = {"model": "m", "messages": [{"role": "user", "content": "find x"}], "tools": LOOKUP}
    first: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: first.append(post(url, body, **{"Idempotency-Key": "k-3", "X-Session-Id": "r5"})))
    sender.start()
    time.sleep(0.8)
    second = post(url, body, **{"Idempotency-Key": "k-3", "X-Session-Id": "r5"})
    sender.join()
    calls = [response.json()["choices"][0]["message"]["tool_calls"] for response in (first[0], second)]
    assert calls[0] == calls[1] and calls[0][0]["id"] == "call-1"
    assert second.json()["choices"][0]["finish_reason"] == "tool_calls"
    provider.delay = 0
    result = {"role": "tool", "tool_call_id": "call-1", "content": "x is 42"}
    ended = post(url, {**body, "messages": [*body["messages"], second.json()["choices"][0]["message"], result]},
                 **{"X-Session-Id": "r5"})  # fmt: skip
    assert ended.json()["choices"][0]["message"]["content"] == "answer 2 to x is 42"
    assert len(provider.requests) == 2
    assert recent(config, "r5") == (1, ["find x", "answer 2 to x is 42"])


def test_a_retry_of_a_request_the_model_failed_runs_as_a_new_turn(
    url: str, config: Config, upstream: tuple[Upstream, str]
) -> None:
    """The first attempt got a provider error and went no further: the retry calls the model
    and its turn is the session's only one."""
    provider, base = upstream
    provider.delay = 0
    failing = config.with_overrides(serve={"models": {"m": {"model": "openai/error-500", "api_base": base}}})
    with serving(create_app(failing)) as broken:
        assert post(broken, {"model": "m", "messages": [{"role": "user", "content": "again"}]},
                    **{"Idempotency-Key": "k-2", "X-Session-Id": "r3"}).status_code == 500  # fmt: skip
    retried = post(url, {"model": "m", "messages": [{"role": "user", "content": "again"}]},
                   **{"Idempotency-Key": "k-2", "X-Session-Id": "r3"})  # fmt: skip
    assert retried.status_code == 200 and "x-middleware-replayed" not in retried.headers
    assert recent(config, "r3") == (1, ["again", retried.json()["choices"][0]["message"]["content"]])


def test_the_same_body_sent_twice_without_a_retry_header_is_two_turns(
    url: str, config: Config, upstream: tuple[Upstream, str]
) -> None:
    """A user may say the same thing twice: only a retry (as the client says) or a repeated
    idempotency key is taken for the first attempt."""
    provider, _ = upstream
    provider.delay = 0
    body = {"model": "m", "messages": [{"role": "user", "content": "yes"}]}
    answers = [post(url, body, **{"X-Session-Id": "r4"}).json()["choices"][0]["message"]["content"] for _ in range(2)]
    assert answers == ["answer 1 to yes", "answer 2 to yes"]
    assert recent(config, "r4")[0] == 2


@pytest.mark.slow
def test_a_retry_waits_for_a_first_attempt_that_runs_past_the_order_wait(
    store_url: str, log_path: Path, upstream: tuple[Upstream, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt runs 4 s, past serve.order_wait_seconds (1 s), where its place in the
    session's order lapses: its retries still wait for it (a 409 the SDK tries again, then
    its answer), as it says it is alive: one upstream call, one turn."""
    provider, base = upstream
    provider.delay = 4.0
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key-for-the-mock")
    config = Config().with_overrides(store={"url": store_url}, usage_log={"path": str(log_path)},
                                     serve={"order_wait_seconds": 1, "models": {"m": {"model": "openai/slow", "api_base": base}}})  # fmt: skip
    with serving(create_app(config)) as served:
        client = openai.OpenAI(base_url=f"{served}/v1", api_key="unused", timeout=1.5, max_retries=4)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "slow"}], extra_headers={"X-Session-Id": "r6"}
        )
        assert raw.parse().choices[0].message.content == "answer 1 to slow"
        assert "x-middleware-replayed" in raw.headers
    assert len(provider.requests) == 1
    assert recent(config, "r6") == (1, ["slow", "answer 1 to slow"])


def test_a_retry_header_on_a_message_whose_like_was_answered_before_is_a_new_turn(
    url: str, config: Config, upstream: tuple[Upstream, str]
) -> None:
    """A client that sends only its newest message says "ok" twice; the second's first attempt
    never reached the endpoint, so its retry finds the first "ok", whose answer reached its
    client: it is a new message, and a new turn, not a replay of the old answer."""
    provider, _ = upstream
    provider.delay = 0
    body = {"model": "m", "messages": [{"role": "user", "content": "ok"}]}
    assert post(url, body, **{"X-Session-Id": "r7"}).json()["choices"][0]["message"]["content"] == "answer 1 to ok"
    time.sleep(0.5)  # an SDK retries after half a second at the soonest
    again = post(url, body, **{"X-Session-Id": "r7", "x-stainless-retry-count": "1"})
    assert again.json()["choices"][0]["message"]["content"] == "answer 2 to ok"
    assert "x-middleware-replayed" not in again.headers
    assert recent(config, "r7")[0] == 2


def test_an_idempotency_key_sent_again_with_another_body_names_another_request(
    url: str, config: Config, upstream: tuple[Upstream, str]
) -> None:
    provider, _ = upstream
    provider.delay = 0
    for text in ("first", "second"):
        answer = post(url, {"model": "m", "messages": [{"role": "user", "content": text}]},
                      **{"X-Session-Id": "r8", "Idempotency-Key": "same"})  # fmt: skip
        assert answer.json()["choices"][0]["message"]["content"].endswith(f"to {text}")
    assert recent(config, "r8")[0] == 2


def test_a_retry_of_a_request_gone_silent_runs_as_a_new_turn_and_of_one_alive_waits(store_url: str) -> None:
    """The ring in Redis: a retry finds its first attempt by key; while that attempt says it
    is alive the retry waits (None), once it is silent for ALIVE_SECONDS, or its slot is
    taken by a newer request, the retry runs anew (GAVE_UP); a kept answer is given back."""
    config = Config().with_overrides(store={"url": store_url})
    layout, driver = store_keys.Layout.of(config), RedisStore.from_url(store_url, config.store)

    def arrive(key: str, nonce: str, *, retry: bool = False) -> live.Arrival:
        command = live.arrive_command(layout, "s", waiting=(), reserve=True, mark_import=False, now=time.time(), wait=30,
                                      key=key, retry=retry, nonce=nonce)  # fmt: skip
        return live.arrival(run(store_load.load(layout, "s", ahead=[command]), driver.send).ahead[0], key)

    first = arrive("aa", "01")
    assert first.slot >= 0 and first.retried is None
    found = arrive("aa", "02", retry=True).retried
    assert found == retries.Retry(first.slot, "aa", "01")
    assert run(retries.answer_of(layout, "s", found, now=time.time()), driver.send) is None  # just arrived: alive
    later = time.time() + retries.ALIVE_SECONDS + 1
    assert run(retries.answer_of(layout, "s", found, now=later), driver.send) == retries.GAVE_UP  # silent since
    assert run(retries.beat(layout, "s", "01", now=later), driver.send)
    assert run(retries.answer_of(layout, "s", found, now=later), driver.send) is None  # it spoke again
    kept = retries.Answer(first.slot, "01", b'{"message": {}}')
    run(store_load.load(layout, "s", ahead=[retries.answer_command(layout, "s", kept)]), driver.send)
    assert run(retries.answer_of(layout, "s", found, now=later + 60), driver.send) == b'{"message": {}}'
    stale = retries.Answer(first.slot, "99", b"not mine")  # another request's nonce: not written
    run(store_load.load(layout, "s", ahead=[retries.answer_command(layout, "s", stale)]), driver.send)
    assert run(retries.answer_of(layout, "s", found, now=later), driver.send) == b'{"message": {}}'
    for n in range(4):  # four newer requests take every slot
        arrive(f"b{n}", f"1{n}")
    assert run(retries.answer_of(layout, "s", found, now=time.time()), driver.send) == retries.GAVE_UP
    assert arrive("aa", "03", retry=True).retried is None  # no longer in the ring
    driver.close()
