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

YAML is read with ``yaml.SafeLoader``, bounded: a document may expand to at most
``MAX_YAML_NODES`` nodes, an alias counting as often as it is used (so a "billion laughs"
file of a few hundred bytes is refused while it is read), and nest at most
``MAX_YAML_DEPTH`` levels.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.text import cut_middle
from ..exceptions import ConfigError
from .schema import Config, validate_config

__all__ = [
    "COMMAND_USAGE_LOG", "ENV_CONFIG", "ENV_REDIS_URL", "MAX_YAML_DEPTH", "MAX_YAML_NODES", "load_config", "load_skills",
    "with_command_log",
]  # fmt: skip

ENV_CONFIG = "MIDDLEWARE_CONFIG"
ENV_REDIS_URL = "REDIS_URL"
# Keys of a config file that name files or folders, resolved against the file's folder.
_PATHS = (("skills_dir",), ("usage_log", "path"))
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
# A whole config is a few hundred nodes; these bounds leave room for large ones.
MAX_YAML_NODES = 10_000
MAX_YAML_DEPTH = 64


class _Refused(Exception):
    """A YAML document past the loader's bounds (the reason, without the file)."""


@functools.cache
def _bounded_loader() -> type[Any]:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """SafeLoader that counts every node as often as aliases repeat it, and how deep nodes
        nest, refusing a document past the bounds as it is composed, before anything is built."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.expanded: dict[int, int] = {}  # id(node) -> nodes it stands for, aliases expanded
            self.depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):  # the anchored node, already counted unless still open
                node = super().compose_node(parent, index)
                if id(node) not in self.expanded:
                    raise _Refused("has an alias that refers to itself")
                return node
            self.depth += 1
            try:
                if self.depth > MAX_YAML_DEPTH:
                    raise _Refused(f"nests deeper than {MAX_YAML_DEPTH} levels")
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            size = self.expanded[id(node)] = 1 + sum(self.expanded[id(child)] for child in _children(node))
            if size > MAX_YAML_NODES:
                raise _Refused(f"expands to more than {MAX_YAML_NODES:,} YAML nodes (aliases count each time they are used)")
            return node

    return BoundedLoader


def _children(node: Any) -> list[Any]:
    if isinstance(node.value, list):  # a sequence's items, or a mapping's (key, value) pairs
        return [part for item in node.value for part in (item if isinstance(item, tuple) else (item,))]
    return []


def _parse_yaml(text: str, where: str) -> Any:
    """``text`` parsed within the bounds; ConfigError naming ``where`` for anything unreadable."""
    import yaml

    try:
        return yaml.load(text, Loader=_bounded_loader())  # a SafeLoader subclass: safe
    except _Refused as exc:
        raise ConfigError(f"{where} {exc}; refusing to read it.") from None
    except yaml.MarkedYAMLError as exc:  # where the parser stopped, and why, on one line
        mark = exc.problem_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"{where} is not valid YAML: {at}{cut_middle(str(exc.problem or exc.context), 300)}".rstrip(".")
                          + ".") from None  # fmt: skip
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {cut_middle(str(exc), 500)}".rstrip(".") + ".") from None
    except (ValueError, OverflowError) as exc:  # a number or a date past what Python converts
        raise ConfigError(f"{where} holds a value YAML cannot convert: {cut_middle(str(exc), 200)}".rstrip(".") + ".") from None


# Where ``middleware`` commands and the endpoint they serve log usage when a config does
# not say (the library alone writes no file it was not asked for).
COMMAND_USAGE_LOG = "middleware-usage.jsonl"


def with_command_log(config: Config) -> Config:
    """``config`` as a command runs it: its usage log at ``COMMAND_USAGE_LOG`` unless the
    config set ``usage_log.path`` itself (a path, or null for none). Give it what
    ``load_config`` returned: overrides mark every setting as set."""
    if "path" in config.usage_log.model_fields_set:
        return config
    return config.with_overrides(usage_log={"path": COMMAND_USAGE_LOG})


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
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"Config file {str(file)!r} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Config file {str(file)!r} cannot be read: {exc}.") from None
    data = _parse_yaml(text, f"Config file {str(file)!r}")
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
    match = _FRONT_MATTER.match(path.read_text(encoding="utf-8"))
    if not match:
        raise ConfigError(f"Skill file {str(path)!r} has no YAML front matter (a block between '---' lines).")
    data = _parse_yaml(match.group("yaml"), f"The front matter of skill file {str(path)!r}")
    if not isinstance(data, dict):
        raise ConfigError(f"Skill file {str(path)!r}: front matter must be a mapping with name and description.")
    return {**data, "source": str(path)}
