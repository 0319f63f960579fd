"""Tests for the `middleware` command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from middleware.cli import main
from tests.conftest import ATLAS_PATH

COMMANDS = [
    [],
    ["demo"],
    ["chat"],
    ["report"],
    ["inspect"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "reset"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "middleware")
def test_every_command_has_help(command: list[str]) -> None:
    """--help works on every command and says what it does."""
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 4


def test_python_dash_m_runs_the_cli() -> None:
    """`python -m middleware` is the same command."""
    out = subprocess.run([sys.executable, "-m", "middleware", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "demo" in out.stdout and "report" in out.stdout


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Run `middleware demo` once, in a subprocess as a user would, with no Redis or key."""
    folder = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "MIDDLEWARE_CONFIG", "OPENAI_API_KEY"}}
    out = subprocess.run([sys.executable, "-m", "middleware", "demo"], cwd=folder, env={**env, "COLUMNS": "80"},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return folder / "middleware-usage.jsonl", out.stdout


def test_demo_plays_twelve_turns_offline_and_writes_the_log(demo_log: tuple[Path, str]) -> None:
    """The demo shows every turn with tokens sent against the full history, then the log."""
    log, stdout = demo_log
    assert "take control of device1" in stdout and "what have we done so" in stdout  # cut to fit 80 columns
    # Found: at 80 columns every figure column was empty. Each turn is one line with its figures, within 80 columns.
    lines = stdout.splitlines()
    rows = [line for line in lines if re.match(r"^ +\d+  .+ +[\d,]+ +[\d,]+ +-?\d+% +-?\d+% *$", line)]
    assert len(rows) == 12 and max(len(line) for line in lines) <= 80 and len(lines) < 60
    assert "% saved" in stdout and "middleware report" in stdout
    assert "saved in effective prompt cost" in stdout  # the headline: caching modelled on both sides
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(r["cache"]["rules"] == "openai" and r["cache"]["saved_pct"] is not None for r in records)
    first_calls = [r for r in records if r["step"] == 0]
    assert len(first_calls) == 12 and {r["model"] for r in records} == {"scripted/atlas"}
    assert first_calls[-1]["saved_pct"] > 60  # the prompt stays flat while the history grows
    assert first_calls[-1]["tokens"]["total"] < 1.3 * first_calls[2]["tokens"]["total"]
    # Found: the first call's layers read "context": -1 (a section counted apart, merged in the prompt).
    assert all(v >= 0 for r in records for v in r["tokens"].values())
    assert all(sum(v for k, v in r["tokens"].items() if k != "total") + 3 == r["tokens"]["total"] for r in records)


def test_report_on_the_demo_log(demo_log: tuple[Path, str], tmp_path: Path) -> None:
    """`middleware report` prints the totals and writes the HTML page."""
    log, _ = demo_log
    page = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(log), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert "total" in result.output and "scripted/atlas" in result.output
    assert "<svg" in page.read_text()
    session = json.loads(log.read_text().splitlines()[0])["session"]
    assert session.startswith("demo-")  # each demo run plays in a session of its own
    as_json = CliRunner().invoke(main, ["report", str(log), "--format", "json", "--session", session])
    assert json.loads(as_json.output)["total"]["turns"] == 12


def test_report_says_when_a_session_is_not_in_the_log(demo_log: tuple[Path, str]) -> None:
    """--session with an id the log does not hold is an error that says so and names one it does."""
    log, _ = demo_log
    result = CliRunner().invoke(main, ["report", str(log), "--session", "nobody"])
    session = json.loads(log.read_text().splitlines()[0])["session"]
    assert result.exit_code == 1 and "No calls of session 'nobody'" in result.output and session in result.output


def test_the_demo_stores_where_the_config_says(tmp_path: Path, real_redis_url: str) -> None:
    """The demo plays Atlas whatever the config, but takes its store and usage log from it."""
    config = tmp_path / "mine.yaml"
    config.write_text(f"store: {{url: '{real_redis_url}'}}\nusage_log: {{path: logs/u.jsonl}}\nassistant: {{name: Nova}}\n")
    result = CliRunner().invoke(main, ["--config", str(config), "demo", "--session", "d1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "logs" / "u.jsonl").is_file() and "middleware inspect shows it" in result.output
    shown = CliRunner().invoke(main, ["--config", str(config), "sessions", "show", "d1", "--json"])
    assert json.loads(shown.output)["turns"] == 12


def test_report_rejects_a_bad_since(demo_log: tuple[Path, str]) -> None:
    """A wrong --since is a usage error naming the option."""
    result = CliRunner().invoke(main, ["report", str(demo_log[0]), "--since", "someday"])
    assert result.exit_code == 2 and "--since" in result.output


def test_report_caps_a_long_since_in_its_error(demo_log: tuple[Path, str]) -> None:
    """Found: `report --since <300 x's>` echoed all 300 characters. The value is quoted as
    --session's is, at most 100 characters, marked where cut."""
    for value, problem in [("x" * 300, "is not a date, a time or a duration"), ("9" * 300 + "d", "goes back beyond year 1")]:
        result = CliRunner().invoke(main, ["report", str(demo_log[0]), "--since", value])
        assert result.exit_code == 2 and "Invalid value for --since" in result.output, result.output
        assert value[:60] not in result.output and f"'{value[:40]}" in result.output
        assert "..." in result.output and f"{value[-40:]}' {problem}" in result.output
        assert f"' {problem}; expected one like 2026-11-21, 2026-11-21T18:00Z, 30m, 2h or 7d." in result.output
    far = CliRunner().invoke(main, ["report", str(demo_log[0]), "--since", "99999999999d"])  # found: a traceback
    assert far.exit_code == 2 and "'99999999999d' goes back beyond year 1" in far.output and "Traceback" not in far.output


def test_the_report_page_renders_in_headless_chromium(demo_log: tuple[Path, str], tmp_path: Path) -> None:
    """Chromium loads the page offline and paints it (a screenshot of real size and content)."""
    from tests.browser import screenshot
    from tests.conftest import require_binary

    chromium = require_binary("chromium")
    page = tmp_path / "report.html"
    CliRunner().invoke(main, ["report", str(demo_log[0]), "--html", str(page)])
    shot = tmp_path / "shot.png"
    screenshot(chromium, page.as_uri(), shot, size="900,1200")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page is a few kB


def test_sessions_commands_against_real_redis(real_redis_url: str) -> None:
    """list, show (readable and JSON) and reset work on a real server."""
    from middleware import SessionManager, ToolCall, load_config

    with SessionManager(load_config(), redis_url=real_redis_url) as mgr:
        for sid in ["user-1", "user-2", "other"]:
            mgr.record_turn(
                sid,
                user="navigate to watchlist on google_tv",
                assistant="done",
                tool_calls=[ToolCall(name="navigate_to_node", arguments={"userinterface_name": "google_tv"})],
            )
    runner = CliRunner()
    listed = runner.invoke(main, ["--redis-url", real_redis_url, "sessions", "list", "--search", "user"])
    assert listed.exit_code == 0 and "user-1" in listed.output and "other" not in listed.output
    shown = runner.invoke(main, ["--redis-url", real_redis_url, "sessions", "show", "user-1", "--json"])
    assert json.loads(shown.output)["context"] == {"userinterface_name": "google_tv"}
    readable = runner.invoke(main, ["--redis-url", real_redis_url, "sessions", "show", "user-1"])
    assert "userinterface_name: google_tv" in readable.output
    reset = runner.invoke(main, ["--redis-url", real_redis_url, "sessions", "reset", "user-1", "--yes"])
    assert reset.exit_code == 0
    after = runner.invoke(main, ["--redis-url", real_redis_url, "sessions", "list"])
    assert "user-1" not in after.output and "user-2" in after.output


def test_chat_command_reads_stdin_and_remembers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped input drives `middleware chat`; /state shows what the session holds."""
    monkeypatch.chdir(tmp_path)  # the default usage log is written to the working directory
    result = CliRunner().invoke(
        main, ["--config", str(ATLAS_PATH), "chat", "--model", "scripted/atlas", "--session", "c1"],
        input="take control of device1 on sunri-pi1\nnavigate to watchlist on google_tv\n/state\n/exit\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "In control of device1" in result.output and "Navigated to watchlist" in result.output
    assert "google_tv" in result.output.split("Navigated to watchlist")[-1]  # from /state


def test_library_errors_are_one_clear_line(tmp_path: Path) -> None:
    """A bad config gives a short error, not a traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("summary: {lines: -1}\n")
    result = CliRunner().invoke(main, ["--config", str(bad), "sessions", "list"])
    assert result.exit_code == 1 and "Config 'summary.lines'" in result.output and "Traceback" not in result.output


def test_unreachable_store_is_reported_without_password() -> None:
    """A dead Redis gives one line naming the store, password hidden."""
    from middleware.testing import free_port

    url = f"redis://:pw-hunter2@127.0.0.1:{free_port()}/0"
    result = CliRunner().invoke(main, ["--redis-url", url, "sessions", "list"])
    assert result.exit_code == 1 and "unreachable" in result.output and "hunter2" not in result.output


# What stored text or a log may hold that a terminal or rich would act on instead of showing:
# rich markup (a closing tag that crashes, a hyperlink), ANSI colour, an OSC 8 hyperlink, a
# one-byte C1 CSI, a bell, a bidi override.
MARKUP_ID = "[/bold]"
LINK_ID = "[link=https://evil.example]x[/link]"
ESCAPES = "\x1b[31mred\x1b[0m \x1b]8;;https://evil.example\x1b\\osc\x1b]8;;\x1b\\ \x9b2J \x07 \u202eevil"
RAW_CONTROLS = ("\x1b", "\x9b", "\x07", "\u202e")


def shown_raw(output: str) -> list[str]:
    """The control characters of ESCAPES that reached the output unescaped."""
    return [char for char in RAW_CONTROLS if char in output]


@pytest.fixture
def hostile_store(real_redis_url: str) -> str:
    """A real Redis holding sessions whose ids are rich markup and whose stored text carries
    escape sequences, plus one id with an escape sequence written straight into Redis."""
    from middleware import SessionManager, ToolCall, load_config
    from middleware.store.keys import session_keys

    with SessionManager(load_config(), redis_url=real_redis_url) as mgr:
        owned = mgr.resolve_session(f"alice{MARKUP_ID}", "atlas")
        mgr.manage_notes(f"alice{MARKUP_ID}", "atlas", "overwrite", content=f"## Notes\n{ESCAPES} {LINK_ID}")
        for sid in (MARKUP_ID, LINK_ID, owned):
            mgr.record_turn(sid, user=f"hi {ESCAPES} [bold]", assistant=f"{LINK_ID} {ESCAPES} :warning:",
                            tool_calls=[ToolCall(name="navigate_to_node", arguments={"node": f"[/red]{ESCAPES}"})])  # fmt: skip
        raw = mgr.store.client
        forged = "forged\x1b[2J\x1b]8;;https://evil.example\x07"
        raw.hset(session_keys("mw", forged).meta, mapping={"turns": 1, "updated": 1_700_000_000, "created": 1_700_000_000})
        raw.zadd("mw:sessions", {forged: 1_700_000_000})
    return real_redis_url


def test_sessions_list_prints_ids_as_text(hostile_store: str) -> None:
    """Ids that are rich markup list as written (no MarkupError, no link), and an id holding
    escape sequences lists with them escaped."""
    result = CliRunner().invoke(main, ["--redis-url", hostile_store, "sessions", "list"])
    assert result.exit_code == 0, result.output
    assert MARKUP_ID in result.output and LINK_ID in result.output
    assert "forged\\x1b[2J" in result.output and shown_raw(result.output) == []


@pytest.mark.parametrize("sid", [MARKUP_ID, LINK_ID, "alice"])
def test_sessions_show_prints_stored_text_as_text(hostile_store: str, sid: str) -> None:
    """The readable view shows ids, owners, context, summary, recent messages and notes
    literally: markup stays text, escape sequences are shown escaped, never sent raw."""
    if sid == "alice":
        sid = next(s for s in _listed_ids(hostile_store) if s.startswith("alice"))
    result = CliRunner().invoke(main, ["--redis-url", hostile_store, "sessions", "show", sid])
    assert result.exit_code == 0, result.output
    assert sid in result.output and LINK_ID in result.output and ":warning:" in result.output
    assert "\\x1b[31mred" in result.output and "\\u202eevil" in result.output
    assert shown_raw(result.output) == []
    if sid.startswith("alice"):
        assert f"user alice{MARKUP_ID}" in result.output and "## Notes" in result.output


def _listed_ids(url: str) -> list[str]:
    from middleware import SessionManager, load_config

    with SessionManager(load_config(), redis_url=url) as mgr:
        return [entry.session_id for entry in mgr.list_sessions(page_size=200).entries]


def test_sessions_show_json_escapes_what_json_leaves_raw(hostile_store: str) -> None:
    """--json is the same data, with C1 controls and bidi overrides written as \\u escapes."""
    result = CliRunner().invoke(main, ["--redis-url", hostile_store, "sessions", "show", LINK_ID, "--json"])
    assert result.exit_code == 0 and shown_raw(result.output) == []
    data = json.loads(result.output)
    assert data["session_id"] == LINK_ID and ESCAPES in data["recent"][-1]["content"]


def test_report_prints_logged_names_as_text(tmp_path: Path) -> None:
    """Session ids and model names read from a usage log print literally in every format."""
    log = tmp_path / "u.jsonl"
    record = {"kind": "chat", "session": f"{MARKUP_ID}{ESCAPES}", "turn": 1, "step": 0, "model": LINK_ID,
              "tokens": {"total": 10}, "full_history_tokens": 20, "saved_tokens": 10, "saved_pct": 50.0,
              "cost_usd": None, "cost_saved_usd": None, "latency_ms": 1.0, "tool_calls": 0,
              "event": "llm.call", "time": "2026-11-21T19:32:53.518633Z"}  # fmt: skip
    log.write_text(json.dumps(record) + "\n")
    for fmt in ("table", "csv", "json"):
        # Wide enough that the table's name column does not fold the names across lines.
        result = CliRunner().invoke(main, ["report", str(log), "--format", fmt], env={"COLUMNS": "250"})
        assert result.exit_code == 0, result.output
        assert shown_raw(result.output) == [], fmt
        assert LINK_ID in result.output and MARKUP_ID in result.output, fmt


def test_chat_prints_replies_and_errors_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's reply (streamed or not) and a provider error holding markup or escape
    sequences print literally; neither crashes the chat nor reaches the terminal raw."""
    from middleware.testing import register

    def hostile(messages: object, tools: object) -> dict[str, object]:
        last = messages[-1]["content"]  # type: ignore[index]
        if last == "fail":
            # Escapes of its own: a run it shared with the reply before it would be masked as
            # quoted message text (see test_secrets), not printed.
            raise RuntimeError(
                "bad request [/red] \x07 \x9b2J \x1b]8;;https://bad.example\x1b\\x\x1b]8;;\x1b\\ \x1b[32mgreen\x1b[0m"
            )
        return {"role": "assistant", "content": f"{LINK_ID} [/bold] {ESCAPES}", "tool_calls": None}

    register("hostile-cli", hostile)
    monkeypatch.chdir(tmp_path)
    for stream in ("--stream", "--no-stream"):
        result = CliRunner().invoke(
            main, ["--redis-url", "memory://cli-hostile", "chat", "--model", "scripted/hostile-cli", stream, "--session", MARKUP_ID],
            input="hello\nfail\n/state\n/exit\n",
        )  # fmt: skip
        # The failed turn is reported and the chat goes on (/state still answers), but the
        # command's status tells a script that a message got no reply.
        assert result.exit_code == 1, result.output
        assert "1 turn got no reply (the model call failed)" in result.output
        assert f"{LINK_ID} [/bold]" in result.output and "[/red]" in result.output
        assert "\\x1b[31mred" in result.output and "\\x1b[32mgreen" in result.output and shown_raw(result.output) == []


def test_chat_exits_0_when_every_turn_got_a_reply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: `chat` exited 0 after a failed model call, so a script piping messages in
    could not tell. Every turn answered: status 0; two failed: status 1, counted."""
    from middleware.testing import register

    def flaky(messages: object, tools: object) -> dict[str, object]:
        if messages[-1]["content"].startswith("fail"):  # type: ignore[index]
            raise RuntimeError("upstream down")
        return {"role": "assistant", "content": "ok", "tool_calls": None}

    register("flaky-cli", flaky)
    monkeypatch.chdir(tmp_path)
    args = ["--redis-url", "memory://cli-flaky", "chat", "--model", "scripted/flaky-cli", "--no-stream"]
    assert CliRunner().invoke(main, args, input="hello\nagain\n").exit_code == 0
    result = CliRunner().invoke(main, args, input="fail one\nhello\nfail two\n")
    assert result.exit_code == 1 and "2 turns got no reply" in result.output, result.output
    assert result.output.count("> ok") == 1


def test_the_demo_prints_a_markup_session_id_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`demo --session` with an id that is rich markup plays and names the session as written."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--redis-url", "memory://cli-demo-markup", "demo", "--session", LINK_ID + MARKUP_ID])
    assert result.exit_code == 0, result.output
    assert f"session '{LINK_ID}{MARKUP_ID}'" in result.output and f"--session {LINK_ID}{MARKUP_ID}" in result.output


def test_a_page_beyond_any_listing_is_a_clear_error(real_redis_url: str) -> None:
    """`sessions list --page 99999999999999999999` names the page and the limit; it is not
    reported as a store failure."""
    result = CliRunner().invoke(main, ["--redis-url", real_redis_url, "sessions", "list", "--page", "99999999999999999999"])
    assert result.exit_code == 1 and "Page 99999999999999999999 is out of range" in result.output
    assert "Redis" not in result.output


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [("--page", "0", "x>=1"), ("--page", "-5", "x>=1"), ("--page-size", "0", "1<=x<=200"),
     ("--page-size", "100000", "1<=x<=200")],
)  # fmt: skip
def test_sessions_list_refuses_pages_out_of_range(option: str, value: str, expected: str) -> None:
    """Found: --page 0 and --page-size 0 or 100000 were silently clamped, though the help
    says "(1-200)". They are usage errors naming the value and the range (no store is asked)."""
    result = CliRunner().invoke(main, ["--redis-url", "memory://cli-range", "sessions", "list", option, value])
    assert result.exit_code == 2 and f"Invalid value for '{option}': {value} is not in the range {expected}" in result.output


def test_sessions_show_of_an_unknown_session_says_where_ids_are_listed() -> None:
    """Found: `sessions show nosuch` said only "no session 'nosuch'". It names the command
    that lists the sessions, and quotes a long id at most 100 characters."""
    result = CliRunner().invoke(main, ["--redis-url", "memory://cli-nosuch", "sessions", "show", "nosuch"])
    assert result.exit_code == 1 and "no session 'nosuch'" in result.output
    assert "`middleware sessions list` lists them" in result.output
    long = CliRunner().invoke(main, ["--redis-url", "memory://cli-nosuch", "sessions", "show", "y" * 250])
    assert long.exit_code == 1 and "y" * 60 not in long.output and "y" * 40 + "..." + "y" * 40 in long.output


def test_store_options_work_after_the_command_too(real_redis_url: str) -> None:
    """Found: `sessions show X --redis-url …` said "No such option" (the option had to come
    before the subcommand). Given after it, it is used, and wins over the one before."""
    from middleware import Config, SessionManager

    with SessionManager(Config().with_overrides(store={"url": real_redis_url})) as mgr:
        mgr.record_turn("after-option", user="goto shop", assistant="On the shop screen.")
    result = CliRunner().invoke(main, ["--redis-url", "memory://", "sessions", "show", "after-option", "--json",
                                       "--redis-url", real_redis_url])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["turns"] == 1
    refused = CliRunner().invoke(main, ["sessions", "show", "after-option", "--tenant", "no spaces!"])
    assert refused.exit_code == 2 and "--tenant" in refused.output and "expected letters" in refused.output


def test_errors_that_used_to_mislead_say_what_to_do(tmp_path: Path) -> None:
    """Found (a new user's first hour): a sync manager given to the Agents SDK session failed on
    first use with "object SessionState can't be used in 'await' expression"; a wrapped chatbot
    called with the message alone said "missing 1 required positional argument: 'user_message'";
    a config typo named no near setting; a mistyped model got litellm's message alone."""
    from middleware import Config, SessionManager
    from middleware.adapters.agents import MiddlewareSession
    from middleware.exceptions import ConfigError, LLMError

    with SessionManager() as mgr:
        with pytest.raises(TypeError, match=r"needs an AsyncSessionManager .* not SessionManager"):
            MiddlewareSession("misleading-errors", mgr)  # type: ignore[arg-type]
        bot = mgr.wrap(lambda messages: "hi")
        with pytest.raises(TypeError, match=r"called as <lambda>\(session_id, user_message.*pass the session id first"):
            bot("what is my name?")  # type: ignore[call-arg]
        assert bot("misleading-errors", "what is my name?") == "hi"
        with pytest.raises(LLMError, match=r"Did you mean 'gpt-4o-mini'\? A model is a litellm model string"):
            mgr.chat("misleading-errors", "hello", model="gpt-4o-mnii")
    with pytest.raises(ConfigError, match=r"'memory.recal' is not a known setting .*Did you mean 'memory.recall'\?"):
        Config().with_overrides(memory={"recal": "semantic"})
    with pytest.raises(ConfigError, match=r"Known settings of memory: archive_turns, "):
        Config().with_overrides(memory={"zzz": 1})


@pytest.mark.parametrize(("command", "port"), [("serve", "99999"), ("serve", "0"), ("inspect", "70000"), ("inspect", "0")])
def test_a_port_out_of_range_is_refused_not_wrapped(command: str, port: str) -> None:
    """Found: `serve --port 99999` announced port 99999 and listened on 34463 (the number
    wrapped), and `serve --port 0` served on the config's port; both are usage errors now."""
    result = CliRunner().invoke(main, [command, "--port", port])
    assert result.exit_code == 2 and f"{port} is not in the range 1<=x<=65535" in result.output
