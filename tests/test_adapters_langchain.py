"""The LangChain adapters, run through the real ``create_agent`` graph and
``RunnableWithMessageHistory`` with a scripted model (``ChatLiteLLM`` over litellm)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

from middleware import AsyncSessionManager, Config, SessionManager
from middleware.exceptions import ConfigError
from tests.adapter_models import MODEL, SEEN, get_weather

pytest.importorskip("langchain.agents")
pytest.importorskip("langchain_litellm")
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_litellm import ChatLiteLLM

from middleware.adapters.langchain import MemoryMiddleware, MiddlewareChatMessageHistory

warnings.filterwarnings("ignore", message="Pydantic serializer warnings")


@pytest.fixture
def config(store_url: str) -> Config:
    return Config().with_overrides(store={"url": store_url}, usage_log={"path": None})


def build(manager: Any, **kwargs: Any) -> Any:
    return create_agent(
        ChatLiteLLM(model=MODEL), [tool(get_weather)], system_prompt="Be brief.", middleware=[MemoryMiddleware(manager, **kwargs)]
    )


def ask(agent: Any, text: str, thread: str) -> Any:
    return agent.invoke({"messages": [{"role": "user", "content": text}]}, {"configurable": {"thread_id": thread}})


def test_the_agent_is_sent_the_composed_memory_and_its_turns_are_recorded(config: Config) -> None:
    """before_model puts memory + the current message in place of the history; after_agent records
    the turn with its tool call, so the context key reaches the next prompt."""
    with SessionManager(config) as mgr:
        agent = build(mgr)
        first = ask(agent, "weather in Paris?", "t1")
        ask(agent, "thanks", "t1")
        out = ask(agent, "and now?", "t1")
        state = mgr.get_state("t1")
    assert first["messages"][-1].content == "clear in Paris" and out["messages"][-1].content == "ok: and now?"
    assert state.turns == 3 and state.context == {"city": "Paris"}
    assert state.summary == ['• weather in Paris? → get_weather: "Paris", "clear"', "• thanks → ok: thanks"]
    sent = SEEN[-1]
    assert sent[0] == {"role": "system", "content": "Be brief."} and "- city: Paris" in sent[1]["content"]
    assert [m["content"] for m in sent[-3:]] == ["thanks", "ok: thanks", "and now?"]
    assert not any(m.get("tool_calls") for m in sent)


def test_the_agent_is_sent_what_recall_finds_for_its_current_message(config: Config) -> None:
    """The memory is composed for the turn's own message, as chat() composes it: a fact said
    turns ago, out of the recent window and the summary, is recalled when the message asks for it."""
    with SessionManager(config.with_overrides(summary={"lines": 1})) as mgr:
        agent = build(mgr)
        ask(agent, "my locker code is 4417 at the Harbour gym", "t5")
        for text in ("thanks", "ok then", "fine", "sure", "great"):
            ask(agent, text, "t5")
        ask(agent, "what is my locker code at the gym?", "t5")
        expected = mgr.prepare("t5", "what is my locker code at the gym?").messages[0]["content"]
    memory = SEEN[-1][1]["content"]
    assert "4417" in memory and memory in expected


def test_within_a_turn_the_tool_loop_is_kept(config: Config) -> None:
    """The model's second call of a turn is sent the tool call and its result after the current message."""
    with SessionManager(config) as mgr:
        ask(build(mgr), "weather in Rome?", "t2")
    roles = [m["role"] for m in SEEN[-1]]
    assert roles[-3:] == ["user", "assistant", "tool"]


def test_the_async_agent_takes_an_async_manager(config: Config) -> None:
    """ainvoke runs the async hooks, with an AsyncSessionManager and a session given up front."""

    async def scenario() -> Any:
        mgr = AsyncSessionManager(config)
        agent = build(mgr, session_id="a-1")
        await agent.ainvoke({"messages": [{"role": "user", "content": "weather in Lima?"}]})
        await agent.ainvoke({"messages": [{"role": "user", "content": "ok"}]})
        state = await mgr.get_state("a-1")
        await mgr.close()
        return state

    state = asyncio.run(scenario())
    assert state.turns == 2 and state.context == {"city": "Lima"}


def test_a_sync_agent_with_an_async_manager_says_what_to_pass(config: Config) -> None:
    async def make() -> AsyncSessionManager:
        return AsyncSessionManager(config)

    with pytest.raises(ConfigError, match="give MemoryMiddleware a SessionManager"):
        ask(build(asyncio.run(make())), "hi", "t3")


def test_the_chat_history_gives_older_chains_the_composed_memory(config: Config) -> None:
    """RunnableWithMessageHistory reads the composed memory and adds each exchange, recorded as a turn."""
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), MessagesPlaceholder("history"), ("human", "{question}")])
    with SessionManager(config) as mgr:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chain = RunnableWithMessageHistory(prompt | ChatLiteLLM(model=MODEL), lambda sid: MiddlewareChatMessageHistory(sid, mgr),
                                               input_messages_key="question", history_messages_key="history")  # fmt: skip
            for question in ("one", "two", "three"):
                chain.invoke({"question": question}, {"configurable": {"session_id": "h"}})
        state = mgr.get_state("h")
        history = MiddlewareChatMessageHistory("h", mgr)
        shown = [m.content for m in history.messages]
        history.clear()
        assert mgr.get_state("h").turns == 0
    assert state.turns == 3 and state.summary == ["• one → ok: one", "• two → ok: two"]
    assert [m["content"] for m in SEEN[-1][1:]] == ["[Previous conversation summary]\n• one → ok: one", "Understood.",
                                                    "two", "ok: two", "three"]  # fmt: skip
    assert shown[-2:] == ["three", "ok: three"]


def test_the_chat_history_drops_a_turn_it_can_never_record(config: Config) -> None:
    """Found: a message past the limits stayed pending, so every later add_messages raised and
    recorded the turns before it again. The bad turn is dropped (its error raised); each turn
    is recorded once and the history goes on."""
    from langchain_core.messages import AIMessage, HumanMessage

    from middleware.exceptions import InvalidMessageError

    with SessionManager(config) as mgr:
        history = MiddlewareChatMessageHistory("h-bad", mgr)
        with pytest.raises(InvalidMessageError, match="limit is 200,000"):
            history.add_messages([HumanMessage("turn one"), AIMessage("reply one"), HumanMessage("x" * 300_000), AIMessage("no")])
        history.add_messages([HumanMessage("turn two"), AIMessage("reply two")])
        state = mgr.get_state("h-bad")
        shown = [m.content for m in history.messages]
    assert state.turns == 2 and state.summary == ["• turn one → reply one"]
    assert shown[-2:] == ["turn two", "reply two"]


def test_a_thread_id_that_is_not_a_string_is_named(config: Config) -> None:
    """Found: thread_id=42 was told "needs a session", as if none had been given."""
    with SessionManager(config) as mgr, pytest.raises(ConfigError, match="found a session id of type int; expected a string"):
        build(mgr).invoke({"messages": [{"role": "user", "content": "hi"}]}, {"configurable": {"thread_id": 42}})
