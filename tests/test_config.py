"""Tests for middleware.config and middleware.loader: defaults, loading, paths, environment
overrides and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from middleware import Config, ConfigError, SessionManager, load_config
from middleware.core.composer import Composer
from tests.conftest import REPO


def test_the_library_default_is_a_neutral_assistant(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no file: no persona, auto context keys, no skills or tools, the embedded store."""
    monkeypatch.delenv("MIDDLEWARE_CONFIG", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    config = load_config()
    assert config == Config()
    assert config.context.auto and config.skills == () and config.store.url == "memory://"
    with SessionManager() as mgr:
        assert mgr.build_messages("s", "hi")[0] == {"role": "system", "content": "You are a helpful assistant."}
        assert mgr.toolset().schemas == []
    with SessionManager.from_config() as mgr:
        assert mgr.config == Config() and mgr.build_messages("s", "hi")[1] == {"role": "user", "content": "hi"}


def test_the_demo_config_is_the_atlas_assistant(atlas: Config) -> None:
    """The demo brings its own configuration: Atlas, tracked device keys, its skill."""
    assert atlas.assistant.name == "Atlas"
    assert atlas.context.keys == ("userinterface_name", "tree_id", "host_name", "device_id")
    assert "navigate_to_node" in (atlas.context.tools or ())
    assert atlas.summary.lines == 3 and atlas.recent.messages == 2
    assert [skill.name for skill in atlas.skills] == ["device-navigation"]
    assert atlas.store == Config().store and atlas.usage_log == Config().usage_log  # the caller's to choose


def test_the_example_file_holds_the_library_defaults() -> None:
    """config.yaml at the top of the repository sets every section to the library default,
    but for the usage log, which it keeps where the commands keep theirs (resolved against
    its own folder; the library alone writes none)."""
    example = load_config(REPO / "config.yaml", env={})
    assert example.usage_log.path == str(REPO / "middleware-usage.jsonl")
    assert Config().usage_log.path is None
    assert example.with_overrides(usage_log={"path": None}) == Config()


def test_config_values_read_no_files() -> None:
    """A Config is a value: the skills folder is the loader's key, not the model's."""
    with pytest.raises(ConfigError, match="'skills_dir' is not a known setting"):
        Config().with_overrides(skills_dir="skills")
    assert not any(name.startswith("_") for name in Config.__private_attributes__)


def test_every_relative_path_in_a_file_is_relative_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """skills_dir and usage_log.path both resolve against the config file's folder, whatever
    the working directory; absolute paths stay as written."""
    (tmp_path / "conf" / "sk" / "one").mkdir(parents=True)
    (tmp_path / "conf" / "sk" / "one" / "SKILL.md").write_text("---\nname: one\ndescription: The first skill.\n---\n")
    (tmp_path / "conf" / "c.yaml").write_text("skills_dir: sk\nusage_log: {path: logs/usage.jsonl}\n")
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/c.yaml", env={})
    assert config.usage_log.path == str(tmp_path / "conf" / "logs" / "usage.jsonl")
    assert [skill.name for skill in config.skills] == ["one"]
    (tmp_path / "conf" / "d.yaml").write_text(f"usage_log: {{path: {tmp_path / 'abs.jsonl'}}}\n")
    assert load_config(tmp_path / "conf" / "d.yaml", env={}).usage_log.path == str(tmp_path / "abs.jsonl")


def test_a_config_caches_nothing(atlas: Config) -> None:
    """Composing leaves the config as it was: the composer owns its memos."""
    before = atlas.model_dump()
    Composer(atlas, SessionManager(atlas).tokenizer).compose(__import__("middleware").SessionState(), "hi")
    assert atlas.model_dump() == before and not hasattr(atlas, "_derived")


def test_the_system_prompt_can_be_given_to_the_manager(atlas: Config) -> None:
    """system_prompt= sends the caller's own text (braces and all) before the memory sections;
    instructions= fills the default template; both at once is an error."""
    with SessionManager(system_prompt="You are Max {the} travel agent.") as mgr:
        mgr.record_turn("max", user="book Rome", assistant="ok", tool_calls=[{"name": "book", "arguments": {"city": "Rome"}}])
        system = mgr.build_messages("max", "and Paris?")[0]["content"]
        assert system == "You are Max {the} travel agent.\n## Current Context (use as defaults)\n- city: Rome"
    with SessionManager(instructions="Answer in French.") as mgr:
        assert mgr.build_messages("fr", "hi")[0]["content"] == "You are a helpful assistant.\nAnswer in French."
    with SessionManager(atlas, system_prompt="Be brief.") as mgr:  # the skills section stays
        assert mgr.build_messages("brief", "hi")[0]["content"].startswith("Be brief.\n## Skills\n- device-navigation:")
    with pytest.raises(ConfigError, match="not both"):
        SessionManager(system_prompt="a", instructions="b")


def test_environment_overrides_path_and_store_url(tmp_path: Path) -> None:
    """$MIDDLEWARE_CONFIG picks the file and $REDIS_URL replaces store.url."""
    path = tmp_path / "other.yaml"
    path.write_text("assistant: {name: Nova}\nstore: {url: 'memory://x', key_prefix: nv}\n")
    config = load_config(env={"MIDDLEWARE_CONFIG": str(path), "REDIS_URL": "redis://127.0.0.1:6390/2"})
    assert config.assistant.name == "Nova"
    assert config.store.url == "redis://127.0.0.1:6390/2"
    assert config.store.key_prefix == "nv"  # the rest of the section is kept


def test_empty_file_gives_defaults_and_still_takes_redis_url(tmp_path: Path) -> None:
    """An empty YAML file is a valid config of defaults."""
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path, env={}).store.url == "memory://"
    assert load_config(path, env={"REDIS_URL": "redis://127.0.0.1:1/0"}).store.url == "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("yaml_text", "fragments"),
    [
        ("summary: {lines: -1}", ["'summary.lines'", "-1", "greater than or equal to 0"]),
        ("summary: {lines: three}", ["'summary.lines'", "'three'", "integer"]),
        ("summary: {linez: 3}", ["'summary.linez'", "not a known setting"]),
        ("recent: {messages: 3}", ["'recent.messages'", "3", "even"]),
        ("store: {url: 'http://x'}", ["'store.url'", "'http://x'", "redis://"]),
        ("store: {url: 'http://u:hunter2@x'}", ["'store.url'", "***"]),
        ("store: {ttl_seconds: -5}", ["'store.ttl_seconds'", "-5"]),
        ("context: {keys: ['bad key!']}", ["'context.keys'", "bad key!"]),
        ("context: {keys: [a], labels: {b: B}}", ["labels", "'b'", "not in context.keys"]),
        ("prompt: {template: 'Hi {name}'}", ["'prompt.template'", "{context}"]),
        ("prompt: {template: '{context} trailing'}", ["'prompt.template'", "must end with {context}"]),
        ("prompt: {template: '{nope} {context}'}", ["'prompt.template'", "unknown field '{nope}'"]),
        ("summary: {templates: {t: '{a.__class__}'}}", ["'summary.templates'", "only plain"]),
        ("tokens: {budget: 10}", ["'tokens.budget'", "10", "64"]),
        ("- just\n- a list", ["holds a list", "mapping"]),
        ("assistant: {name: ''}", ["'assistant.name'", "''"]),
    ],
)
def test_errors_name_the_key_the_value_and_what_was_expected(tmp_path: Path, yaml_text: str, fragments: list[str]) -> None:
    """Every invalid setting raises ConfigError naming the key, the bad value and the expectation."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert "hunter2" not in message


def test_missing_file_and_invalid_yaml_are_clear_errors(tmp_path: Path) -> None:
    """A missing file and a YAML syntax error are ConfigErrors naming the file."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", env={})
    bad = tmp_path / "broken.yaml"
    bad.write_text("summary: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML") as raised:
        load_config(bad, env={})
    # One line, saying where the parser stopped and why (a terminal shows an error's line breaks escaped).
    assert "\n" not in str(raised.value) and "line 1, column 19: expected ',' or ']'" in str(raised.value)
    bad.write_text("store:\n  url: a: b\n")
    with pytest.raises(ConfigError, match="line 2, column 9: mapping values are not allowed here"):
        load_config(bad, env={})


def test_a_session_manager_given_settings_that_are_not_a_config_says_what_it_expects() -> None:
    """Found: SessionManager(config={...}) failed with "'dict' object has no attribute 'tokens'"."""
    with pytest.raises(ConfigError, match=r"config is a dict; expected a Config \(Config.model_validate\(settings\)"):
        SessionManager(config={"memory": {"recall_tokens": 0}})  # type: ignore[arg-type]


def test_skills_dir_errors(tmp_path: Path) -> None:
    """A missing skills folder and a skill file without front matter name what is wrong."""
    path = tmp_path / "c.yaml"
    path.write_text("skills_dir: nowhere\n")
    with pytest.raises(ConfigError, match="skills_dir"):
        load_config(path, env={})
    (tmp_path / "sk").mkdir()
    (tmp_path / "sk" / "x.md").write_text("no front matter here")
    path.write_text("skills_dir: sk\n")
    with pytest.raises(ConfigError, match="front matter"):
        load_config(path, env={})


def test_skills_dir_is_relative_to_the_config_file(tmp_path: Path) -> None:
    """skills_dir resolves against the config file's folder, not the working directory."""
    (tmp_path / "sk" / "one").mkdir(parents=True)
    (tmp_path / "sk" / "one" / "SKILL.md").write_text("---\nname: one\ndescription: The first skill.\n---\nbody\n")
    (tmp_path / "c.yaml").write_text("skills_dir: sk\nskills: [{name: inline, description: Given inline.}]\n")
    config = load_config(tmp_path / "c.yaml", env={})
    assert [s.name for s in config.skills] == ["inline", "one"]


def test_with_overrides_validates_and_keeps_the_rest(atlas: Config) -> None:
    """with_overrides replaces settings in a section, re-validates, and keeps the skills."""
    changed = atlas.with_overrides(store={"url": "redis://127.0.0.1:6379/3"})
    assert changed.store.url == "redis://127.0.0.1:6379/3"
    assert changed.store.key_prefix == atlas.store.key_prefix
    assert [s.name for s in changed.skills] == [s.name for s in atlas.skills]
    with pytest.raises(ConfigError, match=r"'summary\.lines'"):
        atlas.with_overrides(summary={"lines": "x"})


# "Billion laughs": nine levels of nine aliases, 9**9 strings from a file of a few hundred bytes.
ALIAS_BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)),
        "assistant: {name: *i}",
    ]
)


@pytest.mark.timeout(60)
def test_an_alias_bomb_is_refused_with_a_short_error(tmp_path: Path) -> None:
    """A config file of a few hundred bytes whose aliases expand to 9**9 nodes is refused while
    it is read, with an error naming the file and the limit, short instead of hundreds of MB."""
    path = tmp_path / "laughs.yaml"
    path.write_text(ALIAS_BOMB)
    assert path.stat().st_size < 600
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    message = str(info.value)
    assert str(path) in message and "10,000" in message and "alias" in message and len(message) < 500


@pytest.mark.timeout(60)
def test_an_alias_bomb_in_a_skill_is_refused_too(tmp_path: Path) -> None:
    """A skill's front matter is read with the same bounds."""
    (tmp_path / "sk").mkdir()
    (tmp_path / "sk" / "bomb.md").write_text(
        f"---\nname: bomb\ndescription: x\n{ALIAS_BOMB.replace('assistant', 'extra')}\n---\n"
    )
    (tmp_path / "c.yaml").write_text("skills_dir: sk\n")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "c.yaml", env={})
    assert "bomb.md" in str(info.value) and "10,000" in str(info.value) and len(str(info.value)) < 500


def test_a_config_within_the_bounds_still_uses_aliases(tmp_path: Path) -> None:
    """Aliases are fine in an ordinary config: they count once per use, far under the limit."""
    path = tmp_path / "ok.yaml"
    path.write_text("context: {keys: [device_id, host_name]}\nsummary: {templates: {nav: &at 'at {device_id}', goto: *at}}\n")
    config = load_config(path, env={})
    assert config.summary.templates == {"nav": "at {device_id}", "goto": "at {device_id}"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("summary: {lines: " + "9" * 5_000 + "}", "holds a value YAML cannot convert"),
        ("created: 2026-13-45\n", "holds a value YAML cannot convert"),
        ("assistant: " + "[" * 5_000 + "]" * 5_000, "deeper than 64"),
        ("assistant: " + "{a: " * 2_000 + "1" + "}" * 2_000, "deeper than 64"),
        ("x: &x [*x]\n", "itself"),
    ],
    ids=["huge int", "bad date", "deep list", "deep mapping", "recursive alias"],
)
def test_yaml_that_cannot_be_built_is_a_config_error(tmp_path: Path, text: str, fragment: str) -> None:
    """Numbers too large to convert, impossible dates, nesting thousands deep and an alias of
    itself are ConfigErrors naming the file, never a ValueError or RecursionError."""
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert str(path) in str(info.value) and fragment in str(info.value) and len(str(info.value)) < 500


@pytest.mark.parametrize(
    "text",
    [
        "assistant: {name: " + "n" * 100_000 + "}",
        "assistant: {nme: " + "v" * 100_000 + "}",
        "context: {keys: ['" + "bad key " * 20_000 + "']}",
        "store: {url: 'http://" + "h" * 100_000 + "'}",
        "summary: {lines: [" + ", ".join(["1"] * 5_000) + "]}",
        "assistant:\n  ? " + "k" * 100_000 + "\n  : 1\n",
    ],
    ids=["long value", "unknown key's value", "validator message", "url", "big list", "long key"],
)
def test_config_errors_quote_values_cut_short(tmp_path: Path, text: str) -> None:
    """Whatever the bad value (or key) weighs, the error quotes at most a few hundred characters."""
    path = tmp_path / "big.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert len(str(info.value)) < 800 and str(info.value).startswith("Config")


def test_with_overrides_errors_quote_values_cut_short() -> None:
    """The same holds for settings given in Python, a nested structure of 9**9 strings included."""
    bomb: list[object] = ["lol"] * 9
    for _ in range(8):
        bomb = [bomb] * 9
    for overrides in ({"assistant": {"name": "n" * 100_000}}, {"summary": {"lines": bomb}}, {"summary": {"lines": 10**5_000}}):
        with pytest.raises(ConfigError) as info:
            Config().with_overrides(**overrides)
        assert len(str(info.value)) < 800


def test_the_library_writes_no_file_it_was_not_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: every chat() wrote middleware-usage.jsonl into the current folder. The library
    logs only where usage_log.path says; the commands keep their log in the current folder
    unless their config says otherwise (a path, or null for none)."""
    from middleware import SessionManager
    from middleware.config.files import COMMAND_USAGE_LOG, with_command_log

    monkeypatch.chdir(tmp_path)
    with SessionManager() as mgr:
        mgr.chat("s", "hello", model="scripted/echo")
    assert list(tmp_path.iterdir()) == []
    assert with_command_log(load_config(env={})).usage_log.path == COMMAND_USAGE_LOG
    (tmp_path / "none.yaml").write_text("usage_log: {path: null}\n")
    (tmp_path / "own.yaml").write_text("usage_log: {path: calls.jsonl, include_content: false}\n")
    (tmp_path / "other.yaml").write_text("usage_log: {include_content: true}\n")
    assert with_command_log(load_config(tmp_path / "none.yaml", env={})).usage_log.path is None
    assert with_command_log(load_config(tmp_path / "own.yaml", env={})).usage_log.path == str(tmp_path / "calls.jsonl")
    assert with_command_log(load_config(tmp_path / "other.yaml", env={})).usage_log.path == COMMAND_USAGE_LOG


def test_an_entry_that_may_take_several_forms_is_told_what_is_wrong_in_the_form_it_has() -> None:
    """Found: a {key, tenant} entry with an empty tenant was reported as "Input should be a
    valid string" (the other form an entry may take), the real problem hidden in "1 more"."""
    with pytest.raises(ConfigError, match=r"serve\.api_keys\.0\.ApiKey\.tenant.*String should match pattern"):
        Config().with_overrides(serve={"api_keys": [{"key": "sk-live-1", "tenant": ""}]})
    with pytest.raises(ConfigError, match=r"'serve\.port' has value 'abc'\. Expected: Input should be a valid integer"):
        Config().with_overrides(serve={"port": "abc"})
