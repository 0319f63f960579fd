"""Reading configuration: YAML files, the skills folder, environment overrides, skill tools.

The file is an explicit path, else ``$MIDDLEWARE_CONFIG``; with neither, the library
default ``Config()`` (a neutral assistant). ``$REDIS_URL`` replaces ``store.url``. Every
relative path in a file (``skills_dir``, ``usage_log.path``) is resolved against the
folder of that file, so a config copied elsewhere keeps pointing at its own neighbours.

A skill is a folder holding ``SKILL.md`` (or a single ``<name>.md`` file) that starts
with YAML front matter::

    ---
    name: device-navigation
    description: Move around a device's screens and report where it is.
    tools:                                  # optional: Python callables, "module:function"
      - mypackage.tools:navigate_to_node
    ---
    Longer notes for people (not sent to the model).
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import Config, validate_config
from .exceptions import ConfigError
from .tools import Tool

__all__ = ["ENV_CONFIG", "ENV_REDIS_URL", "import_tool", "load_config", "load_skills"]

ENV_CONFIG = "MIDDLEWARE_CONFIG"
ENV_REDIS_URL = "REDIS_URL"
# Keys of a config file that name files or folders, resolved against the file's folder.
_PATHS = (("skills_dir",), ("usage_log", "path"))
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def load_config(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate a configuration file (or the library default, with no file).

    ``path`` wins, then ``$MIDDLEWARE_CONFIG``; with neither, ``Config()``.
    ``$REDIS_URL`` replaces ``store.url``. Read ``env`` instead of ``os.environ`` when given.
    """
    env = os.environ if env is None else env
    chosen = path if path is not None else env.get(ENV_CONFIG) or None
    data: dict[str, Any] = {}
    source = "defaults"
    if chosen is not None:
        file = Path(chosen)
        source = repr(str(file))
        data = _relative_to(_read_yaml(file), file.parent.resolve())
    if env.get(ENV_REDIS_URL):
        store = data.get("store")
        data = {**data, "store": {**(store if isinstance(store, dict) else {}), "url": env[ENV_REDIS_URL]}}
    if data.get("skills_dir"):
        data = {**data, "skills": [*(data.get("skills") or []), *load_skills(data["skills_dir"])]}
    data.pop("skills_dir", None)
    return validate_config(data, source=source)


def _read_yaml(file: Path) -> dict[str, Any]:
    import yaml

    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"Config file {str(file)!r} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Config file {str(file)!r} cannot be read: {exc}.") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {str(file)!r} is not valid YAML: {exc}".rstrip(".") + ".") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {str(file)!r} holds a {type(data).__name__}; expected a mapping of settings.")
    return data


def _relative_to(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` with its relative paths made absolute against ``folder``."""
    for keys in _PATHS:
        *parents, name = keys
        section = data
        for part in parents:
            section = section.get(part) if isinstance(section, dict) else None  # type: ignore[assignment]
        if isinstance(section, dict) and isinstance(section.get(name), str) and not Path(section[name]).is_absolute():
            section[name] = str(folder / section[name])
    return data


def load_skills(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The skill definitions found in ``folder`` (validated as part of the config)."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"Config 'skills_dir' has value {str(path)!r}. Expected: an existing folder.", key="skills_dir")
    files = sorted(path.glob("*/SKILL.md")) + sorted(path.glob("*.md"))
    return [_parse_skill_file(file) for file in files if file.name.lower() != "readme.md"]


def _parse_skill_file(path: Path) -> dict[str, Any]:
    import yaml

    match = _FRONT_MATTER.match(path.read_text(encoding="utf-8"))
    if not match:
        raise ConfigError(f"Skill file {str(path)!r} has no YAML front matter (a block between '---' lines).")
    try:
        data = yaml.safe_load(match.group("yaml"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"Skill file {str(path)!r} has invalid front matter: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Skill file {str(path)!r}: front matter must be a mapping with name and description.")
    return {**data, "source": str(path)}


def import_tool(ref: str, skill: str) -> Tool:
    """The tool a skill names as ``module:function``."""
    module_name, _, attribute = ref.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Skill '{skill}' lists tool {ref!r}, which cannot be imported: {exc}.", key="skills") from None
    return Tool(fn)
