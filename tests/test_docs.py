"""The documentation runs as written: every ```python block of README.md and docs/**/*.md,
the command lines it shows, the figures it quotes from the demo and the worked example, and
the site itself (`mkdocs build --strict`). The reference pages name everything they list."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

import middleware
from middleware import Config, SessionManager
from middleware.cli import main
from middleware.testing import free_port
from tests.conftest import REPO, wait_for_health

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[a-z]*)\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: where it is and what it holds (dedented)."""

    page: str  # relative to the repository, e.g. docs/guides/wrap.md
    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(lang: str) -> list[Block]:
    found = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match["lang"] == lang:
                indent = len(match["indent"])
                code = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
                found.append(Block(str(path.relative_to(REPO)), text.count("\n", 0, match.start()) + 1, lang, code))
    return found


def page(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def words(name: str) -> str:
    """A page's text with its line breaks and runs of spaces as single spaces."""
    return " ".join(page(name).split())


SNIPPETS = blocks("python")


def clean_env() -> dict[str, str]:
    """The environment a new user has: no Redis or config of ours, and no flag keeping
    litellm off the network (the suite sets it for itself; a snippet must not need it)."""
    unset = {"REDIS_URL", "MIDDLEWARE_CONFIG", "LITELLM_LOCAL_MODEL_COST_MAP"}
    return {k: v for k, v in os.environ.items() if k not in unset}


def test_the_docs_show_the_library_in_python() -> None:
    """README and the site show the library in Python, not only in prose: every guide that
    has an example in the README's old sections still has it."""
    pages = {snippet.page for snippet in SNIPPETS}
    assert len(SNIPPETS) >= 15 and "README.md" in pages
    assert {"docs/guides/wrap.md", "docs/guides/chat.md", "docs/guides/endpoint.md", "docs/guides/notes.md"} <= pages


# --- every ```python block runs as written ---------------------------------------------------

DOCS_ENDPOINT = "http://127.0.0.1:8400"  # where the client snippet points: `middleware serve` as it starts


@contextmanager
def docs_endpoint(folder: Path) -> Iterator[str]:
    """`middleware serve` as the client snippet expects it, serving the snippet's model name
    with the offline scripted/echo model (an alias in serve.models), on a free port rather
    than its default 8400 (a server the user runs there must not answer the tests): its URL."""

    port = free_port()
    (folder / "serve.yaml").write_text("serve:\n  models:\n    gpt-4o-mini: scripted/echo\nusage_log:\n  path: null\n")
    process = subprocess.Popen([sys.executable, "-m", "middleware", "--config", str(folder / "serve.yaml"), "serve", "--port", str(port)],
                               cwd=folder, env=clean_env(), stdout=subprocess.DEVNULL, stderr=(folder / "serve.log").open("w"))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(f"{url}/health", lambda: process.poll() is None, folder / "serve.log")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def snippet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    """Each ```python block run once, in a fresh interpreter from an unrelated folder (with the
    endpoint running for the snippet that points a client at it, there), by block id; the
    tests below read what it printed."""
    runs = {}
    with docs_endpoint(tmp_path_factory.mktemp("endpoint")) as url:
        for snippet in SNIPPETS:
            folder = tmp_path_factory.mktemp("snippet")
            runs[snippet.id] = subprocess.run([sys.executable, "-c", snippet.code.replace(DOCS_ENDPOINT, url)], cwd=folder,
                                              env=clean_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    return runs


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda snippet: snippet.id)
def test_python_snippet_runs_as_written(snippet: Block, snippet_runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """Each ```python block runs in a fresh interpreter from an unrelated folder."""
    result = snippet_runs[snippet.id]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "model cost map" not in result.stderr, "the snippet made litellm fetch its price map: " + result.stderr[-300:]


@pytest.fixture
def run_snippet(snippet_runs: dict[str, subprocess.CompletedProcess[str]]) -> Callable[[str], list[str]]:
    """What the snippets holding ``marker`` printed, line by line: the same for each of them,
    wherever they live."""

    def lines_of(marker: str) -> list[str]:
        outputs = {}
        for snippet in SNIPPETS:
            if marker in snippet.code:
                result = snippet_runs[snippet.id]
                assert result.returncode == 0, f"{snippet.id}: {result.stderr}"
                outputs[snippet.id] = result.stdout.splitlines()
        assert outputs, f"no snippet holds {marker!r}"
        first = next(iter(outputs.values()))
        assert all(lines == first for lines in outputs.values()), outputs
        return first

    return lines_of


QUICKSTART = 'mgr.build_messages("user-42", "goto shop")'


def test_quickstart_prints_the_tool_arguments_as_context(run_snippet: Callable[[str], list[str]]) -> None:
    """The quickstart (README and Getting started) shows the recorded call's arguments as the
    next prompt's defaults, and the last turn, without the tool call."""
    assert run_snippet(QUICKSTART) == [
        "system    You are a helpful assistant. / ## Current Context (use as defaults) / - node: watchlist "
        "/ - userinterface_name: google_tv",
        "user      navigate to watchlist on google_tv",
        "assistant Navigated.",
        "user      goto shop",
    ]


def test_the_quickstart_output_shown_is_what_it_prints(run_snippet: Callable[[str], list[str]]) -> None:
    """The ```text block after each quickstart shows its output (a line ending in … is cut there)."""
    printed = run_snippet(QUICKSTART)
    texts = blocks("text")
    for snippet in (s for s in SNIPPETS if QUICKSTART in s.code):
        shown = next(t for t in texts if t.page == snippet.page and t.line > snippet.line).code.splitlines()
        assert len(shown) == len(printed), snippet.page
        for want, got in zip(shown, printed, strict=True):
            assert got.startswith(want[:-1].rstrip()) if want.endswith("…") else got == want, (snippet.page, want, got)


def test_message_building_snippet_prints_the_injected_context(run_snippet: Callable[[str], list[str]]) -> None:
    """The build_messages snippet shows the interface carried into the next prompt."""
    assert run_snippet('build_messages("s1", "goto shop")')[0] == "- userinterface_name: google_tv"


def test_the_sentence_window_snippet_prints_the_line_it_shows(run_snippet: Callable[[str], list[str]]) -> None:
    """The long-range memory guide's sentence window: the recalled line holds the name the
    question's words did not reach, and the guide shows exactly what the snippet prints."""
    (printed,) = run_snippet('prepare("gym", "Who do I train with on Tuesdays?")')
    (snippet,) = [s for s in SNIPPETS if 'prepare("gym"' in s.code]
    shown = next(t for t in blocks("text") if t.page == snippet.page and t.line > snippet.line).code.strip()
    assert printed == shown and "Dana Whitfield" in printed


def test_the_last_turns_result_snippet_prints_the_lines_it_shows(run_snippet: Callable[[str], list[str]]) -> None:
    """The long-range memory guide's last-turn results: a question about what the last call
    found recalls its result, the same request again recalls nothing, as the guide shows."""
    printed = run_snippet('mgr.prepare("desk", message)')
    (snippet,) = [s for s in SNIPPETS if 'mgr.prepare("desk", message)' in s.code]
    shown = next(t for t in blocks("text") if t.page == snippet.page and t.line > snippet.line).code.strip()
    assert printed == shown.splitlines() and "2026-12-20" in printed[0] and printed[1].endswith("-> []")


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
    assert run_snippet("MiddlewareSession(") == [
        "echo: my name is Ada", "echo: what is my name?",
        "     user: • my name is Ada → echo: my name is Ada", "assistant: Understood.",
        "     user: what is my name?", "assistant: echo: what is my name?",
    ]  # fmt: skip


def test_the_langchain_snippet_records_both_turns(run_snippet: Callable[[str], list[str]]) -> None:
    """create_agent with MemoryMiddleware answers twice and remembers two turns."""
    assert run_snippet("MemoryMiddleware(manager)") == ["echo: my name is Ada", "echo: what is my name?", "2 turns remembered"]


def test_notes_snippet_shows_the_notes_in_the_prompt(run_snippet: Callable[[str], list[str]]) -> None:
    """The users-and-notes snippet edits notes, shows them quoted, and starts a new session."""
    lines = run_snippet('mgr.resolve_session("alice", "atlas")')
    assert lines == ["## Devices", "- device2", "['> ## Devices', '> - device2']", "True True"]


def test_async_snippet_awaits_the_same_operations(run_snippet: Callable[[str], list[str]]) -> None:
    """The asyncio snippet records a turn and builds the next prompt with the given instructions."""
    assert run_snippet("AsyncSessionManager(instructions=") == [
        "['system', 'user', 'assistant', 'user'] | You are a helpful assistant. / Answer in one sentence.",
    ]


def test_the_recall_snippet_finds_the_order_number(run_snippet: Callable[[str], list[str]]) -> None:
    """The long-range memory snippet prints the order number recalled from turn 1, with why."""
    lines = run_snippet("order number A-48213")
    assert lines[0].startswith("turn 1: The supplier gave me order number A-48213") and "order" in lines[0]
    assert lines[-1].startswith("recall tokens:") and int(lines[-1].split()[-1]) > 0


def test_disclosure_snippet_loads_the_tool_it_was_not_sent(run_snippet: Callable[[str], list[str]]) -> None:
    """The disclosure snippet's model sees only the loader, loads cat, and the next calls carry it."""
    assert run_snippet('model="scripted/reader"') == ["It says hello. ('cat',) [1, 2, 2]"]


def test_the_observation_and_connector_snippets_print_their_lines(run_snippet: Callable[[str], list[str]]) -> None:
    """The observation renders its template; the connector's line is in the Current State section."""
    assert run_snippet('observe="Read {path}') == ["Read report.txt (12 lines): Q3 revenue: 4.2M"]
    assert run_snippet("class Thermostat(Connector)")[-2:] == [
        "## Current State (observed data)",
        '- thermostat: "target 21.0 °C"',
    ]


def test_python_snippets_type_check(tmp_path: Path) -> None:
    """Every ```python block passes mypy --strict against the installed package."""
    from mypy import api

    files = []
    for index, snippet in enumerate(SNIPPETS):
        files.append(tmp_path / f"snippet_{index}.py")
        files[-1].write_text(snippet.code)
    out, err, status = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / ".mypy"), *map(str, files)])
    named = "\n".join(f"snippet_{index}.py: {snippet.id}" for index, snippet in enumerate(SNIPPETS))
    assert status == 0, out + err + "\n" + named


# --- the command lines shown are the commands' own -------------------------------------------


def command_lines() -> list[str]:
    """Every `middleware ...` command the pages show: lines of ```bash blocks and inline code,
    without environment assignments, comments or what follows `&&`."""
    found = []
    sources = [block.code for block in blocks("bash")]
    sources += [span for path in PAGES for span in re.findall(r"`([^`\n]+)`", path.read_text(encoding="utf-8"))]
    for source in sources:
        for line in source.splitlines():
            for part in line.split("#")[0].split("&&"):
                if not re.search(r"(^|\s)middleware\s", part):
                    continue
                words = shlex.split(part)
                while words and re.match(r"^[A-Z_]+=", words[0]):
                    words.pop(0)
                if words[:1] == ["middleware"] and len(words) > 1:
                    found.append(shlex.join(words))
    return sorted(set(found))


def test_the_pages_show_commands() -> None:
    assert {"middleware demo", "middleware serve", "middleware inspect"} <= set(command_lines())


@pytest.mark.parametrize("command", command_lines())
def test_every_command_shown_is_accepted(command: str) -> None:
    """Each `middleware ...` command line of the pages names a real command with options it
    takes: the same line with --help added prints that command's help (it runs nothing)."""
    result = CliRunner().invoke(main, [*shlex.split(command)[1:], "--help"])
    assert result.exit_code == 0 and "Usage: " in result.output, result.output


def test_the_demo_output_and_figures_are_what_the_demo_prints(tmp_path: Path) -> None:
    """Getting started shows the demo's table at 80 columns and quotes its figures; the usage
    log page quotes the same run and one of its log lines. All of it is what `middleware demo`
    prints and logs, run as a user would, with no Redis or key."""
    env = {k: v for k, v in clean_env().items() if k != "OPENAI_API_KEY"}
    out = subprocess.run([sys.executable, "-m", "middleware", "demo"], cwd=tmp_path, env={**env, "COLUMNS": "80"},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    printed = [line.rstrip() for line in out.stdout.splitlines()]
    shown = next(b for b in blocks("text") if b.page == "docs/getting-started.md" and "LLM calls" in b.code)
    for line in shown.code.splitlines():
        assert line.strip() in {"", "…"} or line.rstrip() in printed, line

    records = [json.loads(line) for line in (tmp_path / "middleware-usage.jsonl").read_text().splitlines()]
    first = records[0]
    sent, full = sum(r["tokens"]["total"] for r in records), sum(r["full_history_tokens"] for r in records)
    raw = re.search(r"Raw prompt tokens: .*?(\d+)% saved", " ".join(printed))
    effective = re.search(r"(\d+)% saved in effective prompt cost", " ".join(printed))
    assert raw and effective and round(100 * (1 - sent / full)) == int(raw[1])
    started = words("docs/getting-started.md")
    assert f"Tool schemas, {first['tools']['full_tokens']} tokens" in started
    assert f"costs {first['tokens']['total'] - first['full_history_tokens']} tokens" in started
    assert f"at most {max(r['tokens']['total'] for r in records)} tokens on any call" in started
    assert f"Raw tokens fall {raw[1]}% over all {len(records)} calls" in started
    assert f"saving is {effective[1]}%" in started

    usage = words("docs/guides/usage-log.md")
    assert f"{raw[1]}% fewer raw tokens is {effective[1]}% less effective cost" in usage
    assert f"the middleware's prompt (at most {max(r['tokens']['total'] for r in records)} tokens) never does" in usage
    assert f"({100 * (1 - sent / full):.1f}% for the demo)" in usage
    example = json.loads(next(b for b in blocks("json") if b.page == "docs/guides/usage-log.md").code)
    line = next(r for r in records if r["turn"] == example["turn"] and r["step"] == example["step"])
    for key in example.keys() - {"session", "time", "latency_ms"}:
        assert same(example[key], line[key]), key


def same(shown: Any, logged: Any) -> bool:
    """Equal, floats to 9 significant digits (as a log line is shown, rounded)."""
    if isinstance(shown, dict) and isinstance(logged, dict):
        return shown.keys() == logged.keys() and all(same(shown[k], logged[k]) for k in shown)
    if isinstance(shown, float) or isinstance(logged, float):
        return math.isclose(shown, logged, rel_tol=1e-9)
    return bool(shown == logged)


def test_the_worked_example_is_what_the_script_prints(atlas: Config) -> None:
    """The worked example's table and the cover_recent figures are benchmarks.worked_example's."""
    from benchmarks.worked_example import FINAL_REQUEST, TURNS, replay, window_choice

    text = words("docs/worked-example.md")
    for row in replay(atlas, TURNS, FINAL_REQUEST):
        history = f"{row.history_sent} / {row.history_full} / {row.history_saved:.0%}"
        assert f"| {row.turn} | {row.message} | {row.sent} | {row.full} | {row.saved:.0%} | {history} |" in text, row
    (_, total_off, _, kept_off), (_, total_on, _, kept_on) = window_choice(atlas)
    assert f"**{total_off}** tokens over the conversation against **{total_on}**" in text
    assert f"names **{kept_off}** earlier turns against **{kept_on}**" in text


# --- the reference pages name everything they list -------------------------------------------


def config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) and name != "skills":
            keys += config_keys(field.annotation, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def test_every_config_key_is_documented() -> None:
    """Each setting of Config (and the loader's skills_dir) has a row in the configuration
    reference's tables, and the example config.yaml names it."""
    documented = re.findall(r"^\| ([^|]+) \|", page("docs/reference/configuration.md"), re.M)
    named = {key for row in documented for key in re.findall(r"`([a-z_.]+)`", row)}
    keys = config_keys(Config)
    assert len(keys) > 40 and [key for key in [*keys, "skills_dir"] if key not in named] == []
    example = (REPO / "config.yaml").read_text()
    assert [key for key in keys if key.split(".")[-1] + ":" not in example] == []


def test_the_python_api_page_names_every_public_name() -> None:
    """Every name of middleware.__all__ and every public method of the managers is on the page."""
    text = page("docs/reference/python-api.md")
    names = [name for name in middleware.__all__ if name != "__version__"]
    methods = [name for name in dir(SessionManager) if not name.startswith("_")]
    assert [name for name in names if not re.search(rf"`{name}[`(]", text)] == []
    assert [name for name in methods if not re.search(rf"[`.]{name}[`(]", text)] == []


def test_the_testing_guide_names_every_helper() -> None:
    from middleware import testing

    text = page("docs/guides/testing.md")
    assert [name for name in testing.__all__ if not re.search(rf"`{name}[`(]", text)] == []


def test_the_errors_page_names_every_event_and_error() -> None:
    """Every event the library logs (log.<level>("<event>", ...)) and every error class."""
    text = page("docs/reference/errors.md") + page("docs/reference/python-api.md")
    events = set()
    for path in (REPO / "middleware").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for call in re.finditer(r"\blog\.(?:debug|info|warning|error|exception)\(", source):
            head = source[call.end() :].split("=", 1)[0]  # the event name comes before the first keyword
            events.update(re.findall(r'"([a-z_]+\.[a-z_]+)"', head))
    assert len(events) > 20 and sorted(event for event in events if f"`{event}" not in text) == []
    from middleware import exceptions

    errors = [name for name in exceptions.__all__ if name.endswith("Error")]
    assert [name for name in errors if f"`{name}`" not in text] == []


def test_the_http_page_names_every_route() -> None:
    """Every route of the endpoint and of the inspector."""
    from starlette.routing import Route

    from middleware.inspector.app import create_app as inspector_app
    from middleware.serve import create_app as serve_app

    text = page("docs/reference/http-api.md")
    apps = [serve_app(Config()), inspector_app(SessionManager(Config()))]
    routes = [(method, route.path) for app in apps for route in app.routes if isinstance(route, Route)
              for method in sorted((route.methods or {"GET"}) - {"HEAD"})]  # fmt: skip
    assert len(routes) >= 8 and [r for r in routes if f"`{r[0]} {r[1]}" not in text] == []


def test_the_storage_page_names_every_key() -> None:
    from middleware.store.keys import PairKeys, SessionKeys

    text = page("docs/reference/storage.md")
    assert [name for name in (*SessionKeys._fields, *PairKeys._fields) if f":{name}`" not in text] == []


def test_the_cli_page_names_every_command() -> None:
    """The overview table names every command (their --help is generated into the page)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    text = page("docs/reference/cli.md")
    paths = [" ".join(path) for path, _ in hooks.command_help(main, ("middleware",))][1:]
    assert len(paths) >= 8 and [path for path in paths if f"`{path}`" not in text] == []


# --- the site builds ---------------------------------------------------------------------------


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` succeeds (broken links and anchors, pages left out of the nav and
    missing snippets are errors), with the generated parts in place."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "Usage: middleware sessions reset [OPTIONS] SESSION_ID" in cli and "&lt;!-- cli-help --&gt;" not in cli
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    headings = re.findall(r"^## (.+)$", page("BENCHMARKS.md"), re.M)
    assert headings and all(heading.split("`")[0].strip() in benchmarks for heading in headings)
    assert 'src="../benchmark-tokens.png"' in benchmarks and (site / "benchmark-tokens.png").is_file()
    assert not list(site.rglob("*.py")), "docs/*.py must not be published"
