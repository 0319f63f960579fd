"""The README's snippets and commands run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "MIDDLEWARE_CONFIG"}}


def test_readme_has_python_snippets() -> None:
    """The README shows the library in Python, not only in prose."""
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_python_snippet_runs_as_written(index: int, tmp_path: Path) -> None:
    """Each ```python block runs in a fresh interpreter from an unrelated folder."""
    result = subprocess.run(
        [sys.executable, "-c", SNIPPETS[index]],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def run_snippet(marker: str, tmp_path: Path) -> list[str]:
    snippet = next(s for s in SNIPPETS if marker in s)
    result = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_message_building_snippet_prints_the_injected_context(tmp_path: Path) -> None:
    """The build_messages snippet shows the interface carried into the next prompt."""
    assert run_snippet('build_messages("s1", "goto shop")', tmp_path)[0] == "- userinterface_name: google_tv"


def test_wrap_snippet_remembers_both_turns(tmp_path: Path) -> None:
    """The wrap snippet replies through the wrapped bot and records two turns."""
    assert run_snippet("mgr.wrap(my_chatbot)", tmp_path) == [
        "echo: navigate to watchlist on google_tv", "echo: goto shop", "2 turns remembered"]


def test_tools_snippet_runs_the_tool_and_keeps_its_argument(tmp_path: Path) -> None:
    """The chat-with-tools snippet calls get_weather and remembers the city (auto mode)."""
    lines = run_snippet("tools=[get_weather]", tmp_path)
    assert lines[0].startswith("clear, 18°C in Paris | [('get_weather'")
    assert lines[1] == "{'city': 'Paris'}"


def test_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's test command."""
    command = re.search(r"## Run the tests\n\n```bash\n(.+?)\n```", README).group(1)  # type: ignore[union-attr]
    assert command in (REPO / ".ci" / "run").read_text()


def test_notes_snippet_shows_the_notes_in_the_prompt(tmp_path: Path) -> None:
    """The users-and-notes snippet edits notes, shows them quoted, and starts a new session."""
    lines = run_snippet('mgr.resolve_session("alice", "atlas")', tmp_path)
    assert lines == ["## Devices", "- device2", "['> ## Devices', '> - device2']", "True True"]
