"""The README's snippets and commands run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pydantic import BaseModel

from middleware import Config
from middleware.testing import free_port
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def clean_env() -> dict[str, str]:
    """The environment a new user has: no Redis or config of ours, and no flag keeping
    litellm off the network (the suite sets it for itself; a snippet must not need it)."""
    unset = {"REDIS_URL", "MIDDLEWARE_CONFIG", "LITELLM_LOCAL_MODEL_COST_MAP"}
    return {k: v for k, v in os.environ.items() if k not in unset}


def test_readme_has_python_snippets() -> None:
    """The README shows the library in Python, not only in prose."""
    assert len(SNIPPETS) >= 2


README_ENDPOINT = "http://127.0.0.1:8400"  # where the README's client snippet points: `middleware serve` as it starts


@contextmanager
def readme_endpoint(folder: Path) -> Iterator[str]:
    """`middleware serve` as the README's client snippet expects it, serving the snippet's model
    name with the offline scripted/echo model (an alias in serve.models), on a free port rather
    than its default 8400 (a server the user runs there must not answer the tests): its URL."""
    import httpx

    port = free_port()
    (folder / "serve.yaml").write_text("serve:\n  models:\n    gpt-4o-mini: scripted/echo\nusage_log:\n  path: null\n")
    process = subprocess.Popen([sys.executable, "-m", "middleware", "--config", str(folder / "serve.yaml"), "serve", "--port", str(port)],
                               cwd=folder, env=clean_env(), stdout=subprocess.DEVNULL, stderr=(folder / "serve.log").open("w"))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (folder / "serve.log").read_text()
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def snippet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, subprocess.CompletedProcess[str]]:
    """Each ```python block run once, in a fresh interpreter from an unrelated folder (with the
    endpoint running for the snippet that points a client at it, there); the tests below read what it printed."""
    runs = {}
    with readme_endpoint(tmp_path_factory.mktemp("endpoint")) as url:
        for index, snippet in enumerate(SNIPPETS):
            folder = tmp_path_factory.mktemp(f"snippet{index}")
            runs[index] = subprocess.run([sys.executable, "-c", snippet.replace(README_ENDPOINT, url)], cwd=folder, env=clean_env(),
                                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return runs


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_python_snippet_runs_as_written(index: int, snippet_runs: dict[int, subprocess.CompletedProcess[str]]) -> None:
    """Each ```python block runs in a fresh interpreter from an unrelated folder."""
    result = snippet_runs[index]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "model cost map" not in result.stderr, "the snippet made litellm fetch its price map: " + result.stderr[-300:]


@pytest.fixture
def run_snippet(snippet_runs: dict[int, subprocess.CompletedProcess[str]]) -> Callable[[str], list[str]]:
    def lines_of(marker: str) -> list[str]:
        result = snippet_runs[next(i for i, s in enumerate(SNIPPETS) if marker in s)]
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    return lines_of


def test_message_building_snippet_prints_the_injected_context(run_snippet: Callable[[str], list[str]]) -> None:
    """The build_messages snippet shows the interface carried into the next prompt."""
    assert run_snippet('build_messages("s1", "goto shop")')[0] == "- userinterface_name: google_tv"


def test_wrap_snippet_remembers_both_turns_and_passes_arguments_through(run_snippet: Callable[[str], list[str]]) -> None:
    """The wrap snippet replies through the wrapped bot, passes its extra argument, records two turns."""
    assert run_snippet("mgr.wrap(my_chatbot)") == [
        "echo: find me a flight to Rome (temperature 0.7)",
        "echo: and a hotel near the station (temperature 0.2)",
        "2 turns remembered",
    ]


def test_tools_snippet_runs_the_tool_and_keeps_its_argument(run_snippet: Callable[[str], list[str]]) -> None:
    """The chat-with-tools snippet calls get_weather and remembers the city (auto mode)."""
    lines = run_snippet("tools=[get_weather]")
    assert lines[0].startswith("clear, 18°C in Paris | [('get_weather'")
    assert lines[1] == "{'city': 'Paris'}"
    assert lines[2] == "clear, 18°C in Paris"  # the streamed reply


def test_the_openai_client_snippet_talks_to_the_endpoint(run_snippet: Callable[[str], list[str]]) -> None:
    """The five lines reach `middleware serve` on its default address and print the reply."""
    assert run_snippet('base_url="http://127.0.0.1:8400/v1"') == ["echo: goto shop"]


def test_the_in_process_endpoint_snippet_answers_in_one_session(run_snippet: Callable[[str], list[str]]) -> None:
    """Two turns through the endpoint, then the usage of the last call."""
    lines = run_snippet("with serving(create_app(Config())) as url:")
    assert lines[:2] == ["echo: my name is Ada", "echo: what is my name?"] and lines[2].startswith("CompletionUsage(")


def test_the_agents_snippet_remembers_across_runs(run_snippet: Callable[[str], list[str]]) -> None:
    """Runner.run with the session twice; get_items is the composed memory (the summary exchange and
    the last turn), not the transcript."""
    assert run_snippet("MiddlewareSession(") == ["echo: my name is Ada", "echo: what is my name?",
                                                 "['user', 'assistant', 'user', 'assistant']"]  # fmt: skip


def test_the_langchain_snippet_records_both_turns(run_snippet: Callable[[str], list[str]]) -> None:
    """create_agent with MemoryMiddleware answers twice and remembers two turns."""
    assert run_snippet("MemoryMiddleware(manager)") == ["echo: my name is Ada", "echo: what is my name?", "2 turns remembered"]


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command."""
    command = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", README).group(1)  # type: ignore[union-attr]
    assert command in (REPO / ".ci" / "run").read_text()


def test_notes_snippet_shows_the_notes_in_the_prompt(run_snippet: Callable[[str], list[str]]) -> None:
    """The users-and-notes snippet edits notes, shows them quoted, and starts a new session."""
    lines = run_snippet('mgr.resolve_session("alice", "atlas")')
    assert lines == ["## Devices", "- device2", "['> ## Devices', '> - device2']", "True True"]


def test_async_snippet_awaits_the_same_operations(run_snippet: Callable[[str], list[str]]) -> None:
    """The asyncio snippet records a turn and builds the next prompt with the given instructions."""
    assert run_snippet("AsyncSessionManager(") == [
        "['system', 'user', 'assistant', 'user'] | You are a helpful assistant. / Answer in one sentence.",
    ]


def test_python_snippets_type_check(tmp_path: Path) -> None:
    """Every ```python block passes mypy --strict against the installed package."""
    from mypy import api

    files = []
    for index, snippet in enumerate(SNIPPETS):
        files.append(tmp_path / f"snippet_{index}.py")
        files[-1].write_text(snippet)
    out, err, status = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), *map(str, files)])
    assert status == 0, out + err


def config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) and name != "skills":
            keys += config_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_every_config_key_is_documented() -> None:
    """Each setting of Config (and the loader's skills_dir) has a row in the README's table,
    and the example config.yaml names it."""
    table = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| ([^|]+) \|", table, re.M))
    named = {key for row in documented for key in re.findall(r"`([a-z_.]+)`", row)}
    keys = config_keys(Config)
    assert len(keys) > 40 and [key for key in [*keys, "skills_dir"] if key not in named] == []
    example = (REPO / "config.yaml").read_text()
    assert [key for key in keys if key.split(".")[-1] + ":" not in example] == []


def test_the_recall_snippet_finds_the_order_number(run_snippet: Callable[[str], list[str]]) -> None:
    """The long-range memory snippet prints the order number recalled from turn 1, with why."""
    lines = run_snippet("order number A-48213")
    assert lines[0].startswith("turn 1: The supplier gave me order number A-48213") and "order" in lines[0]
    assert lines[-1].startswith("recall tokens:") and int(lines[-1].split()[-1]) > 0


def test_disclosure_snippet_loads_the_tool_it_was_not_sent(run_snippet: Callable[[str], list[str]]) -> None:
    """The disclosure snippet's model sees only the loader, loads cat, and the next calls carry it."""
    assert run_snippet('model="scripted/reader"') == ["It says hello. ('cat',) [1, 2, 2]"]
