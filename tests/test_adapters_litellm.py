"""The LiteLLM proxy hook, added by config to a real ``litellm`` proxy process, with the
official openai client talking to the proxy and a scripted model behind it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from middleware import Config, SessionManager
from middleware.adapters.litellm_proxy import tenant_of
from middleware.testing import free_port
from tests.adapter_models import get_weather
from tests.conftest import REPO, wait_for_health

pytest.importorskip("litellm.proxy.proxy_server")
pytestmark = pytest.mark.slow
KEY = "sk-proxy-master-key-for-tests"
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
    }
]


def _master() -> Any:
    """What the proxy tells the hook of a request sent with its master key."""
    from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
    from litellm.proxy._types import UserAPIKeyAuth

    return UserAPIKeyAuth(api_key=LITELLM_PROXY_MASTER_KEY_ALIAS)


@pytest.fixture(params=[KEY])
def proxy(request: pytest.FixtureRequest, real_redis_url: str, tmp_path: Path) -> Iterator[tuple[str, Config]]:
    """A litellm proxy whose config adds the middleware's hook; its base URL and the middleware
    config of the master key's tenant. Parametrised with None: a proxy that checks no keys."""
    (tmp_path / "mw.yaml").write_text(f"store:\n  url: {real_redis_url}\nusage_log:\n  path: {tmp_path / 'usage.jsonl'}\n")
    # The proxy loads callbacks from files beside its config: this one brings the scripted model, then the hook.
    (tmp_path / "with_model.py").write_text(f"import sys\nsys.path.insert(0, {str(REPO)!r})\nimport tests.adapter_models\n"
                                            "from middleware.adapters.litellm_proxy import hook\n")  # fmt: skip
    (tmp_path / "proxy.yaml").write_text("model_list:\n  - model_name: weather\n    litellm_params:\n      model: scripted/adapters\n"
                                         "litellm_settings:\n  callbacks: with_model.hook\n")  # fmt: skip
    port = free_port()
    env = {
        **os.environ,
        "MIDDLEWARE_CONFIG": str(tmp_path / "mw.yaml"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    if request.param:
        env["LITELLM_MASTER_KEY"] = request.param
    else:  # the proxy's own switch for running without keys, meant for local development
        env["LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY"] = "true"
    env.pop("REDIS_URL", None)
    command = [
        sys.executable,
        "-m",
        "litellm.proxy.proxy_cli",
        "--config",
        str(tmp_path / "proxy.yaml"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    process = subprocess.Popen(
        command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=(tmp_path / "proxy.log").open("w")
    )
    try:
        wait_for_health(f"http://127.0.0.1:{port}/health/liveliness", lambda: process.poll() is None, tmp_path / "proxy.log", 120)
        config = Config().with_overrides(store={"url": real_redis_url}, usage_log={"path": None})
        yield f"http://127.0.0.1:{port}/v1", config.for_tenant(tenant_of(_master()))
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_proxy_clients_get_memory_and_tool_turns_recorded(proxy: tuple[str, Config], tmp_path: Path) -> None:
    """Through the proxy: a tool round trip sending only new messages, then plain turns; the session
    remembers the tool's argument and the prompt stays small."""
    url, config = proxy
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=60)
    first = client.chat.completions.create(model="weather", messages=[{"role": "user", "content": "weather in Paris?"}], tools=TOOLS,  # type: ignore[arg-type]
                                           user="px")  # fmt: skip
    (call,) = first.choices[0].message.tool_calls or ()
    result = get_weather(**json.loads(call.function.arguments))  # type: ignore[union-attr]
    final = client.chat.completions.create(model="weather", tools=TOOLS, user="px",  # type: ignore[arg-type]
                                           messages=[{"role": "tool", "tool_call_id": call.id, "content": result}])  # fmt: skip
    assert final.choices[0].message.content == "clear in Paris"
    for text in ("one", "two", "three", "four"):
        reply = client.chat.completions.create(model="weather", messages=[{"role": "user", "content": text}], user="px")
        with SessionManager(config) as mgr:  # recorded before the proxy answered
            assert mgr.get_state("px").recent[-1]["content"] == reply.choices[0].message.content
    with SessionManager(config) as mgr:
        state = mgr.get_state("px")
    assert state.turns == 5 and state.context == {"city": "Paris"}
    lines: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30  # the proxy logs after it answers
    while len(lines) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
        lines = (
            [json.loads(line) for line in (tmp_path / "usage.jsonl").read_text().splitlines()]
            if (tmp_path / "usage.jsonl").exists()
            else []
        )
    assert [line["kind"] for line in lines] == ["litellm_proxy"] * 6
    assert lines[-1]["tokens"]["total"] < lines[-1]["full_history_tokens"]  # the summary and the last turn, not the history


def test_requests_without_a_session_pass_the_proxy_untouched(proxy: tuple[str, Config]) -> None:
    """No user or session: the hook leaves the request alone and records nothing."""
    url, config = proxy
    client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, timeout=60)
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    reply = client.chat.completions.create(model="weather", messages=history)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "ok: c"
    with SessionManager(config) as mgr:
        assert mgr.list_sessions().total == 0


@pytest.mark.parametrize("proxy", [None], indirect=True)
def test_a_key_never_reaches_another_keys_sessions(proxy: tuple[str, Config]) -> None:
    """Two keys name the same session (``user``): each gets its own memory, neither reads nor
    writes the other's (a proxy that checks no keys: the key a client sends is its tenant)."""
    url, _ = proxy
    alice = openai.OpenAI(base_url=url, api_key="sk-alice", max_retries=0, timeout=60)
    mallory = openai.OpenAI(base_url=url, api_key="sk-mallory", max_retries=0, timeout=60)
    alice.chat.completions.create(model="weather", messages=[{"role": "user", "content": "my code is Oslo"}], user="shared")
    mallory.chat.completions.create(model="weather", messages=[{"role": "user", "content": "my code is Lima"}], user="shared")
    seen = {}
    for name, client in (("alice", alice), ("mallory", mallory)):
        reply = client.chat.completions.create(model="weather", messages=[{"role": "user", "content": "what do you know?"}],
                                               user="shared")  # fmt: skip
        seen[name] = reply.choices[0].message.content or ""
    assert "Oslo" in seen["alice"] and "Lima" not in seen["alice"]
    assert "Lima" in seen["mallory"] and "Oslo" not in seen["mallory"]
