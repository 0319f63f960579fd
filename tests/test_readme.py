"""The README's snippets and commands run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "MIDDLEWARE_CONFIG"}}


def test_readme_has_python_snippets() -> None:
    """The README shows the library in Python, not only in prose."""
    assert len(SNIPPETS) >= 2


@pytest.fixture(scope="module")
def snippet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, subprocess.CompletedProcess[str]]:
    """Each ```python block run once, in a fresh interpreter from an unrelated folder;
    the tests below read what it printed."""
    runs = {}
    for index, snippet in enumerate(SNIPPETS):
        folder = tmp_path_factory.mktemp(f"snippet{index}")
        runs[index] = subprocess.run([sys.executable, "-c", snippet], cwd=folder, env=clean_env(),
                                     capture_output=True, text=True, timeout=120)  # fmt: skip
    return runs


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_python_snippet_runs_as_written(index: int, snippet_runs: dict[int, subprocess.CompletedProcess[str]]) -> None:
    """Each ```python block runs in a fresh interpreter from an unrelated folder."""
    result = snippet_runs[index]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


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


def test_wrap_snippet_remembers_both_turns(run_snippet: Callable[[str], list[str]]) -> None:
    """The wrap snippet replies through the wrapped bot and records two turns."""
    assert run_snippet("mgr.wrap(my_chatbot)") == [
        "echo: navigate to watchlist on google_tv",
        "echo: goto shop",
        "2 turns remembered",
    ]


def test_tools_snippet_runs_the_tool_and_keeps_its_argument(run_snippet: Callable[[str], list[str]]) -> None:
    """The chat-with-tools snippet calls get_weather and remembers the city (auto mode)."""
    lines = run_snippet("tools=[get_weather]")
    assert lines[0].startswith("clear, 18°C in Paris | [('get_weather'")
    assert lines[1] == "{'city': 'Paris'}"


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command."""
    command = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", README).group(1)  # type: ignore[union-attr]
    assert command in (REPO / ".ci" / "run").read_text()


def test_notes_snippet_shows_the_notes_in_the_prompt(run_snippet: Callable[[str], list[str]]) -> None:
    """The users-and-notes snippet edits notes, shows them quoted, and starts a new session."""
    lines = run_snippet('mgr.resolve_session("alice", "atlas")')
    assert lines == ["## Devices", "- device2", "['> ## Devices', '> - device2']", "True True"]
