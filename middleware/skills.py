"""Skills: named capabilities listed compactly in the system prompt.

A skill is a folder holding ``SKILL.md`` (or a single ``<name>.md`` file) that
starts with YAML front matter::

    ---
    name: device-navigation
    description: Move around a device's screens and report where it is.
    tools:                                  # optional: Python callables, "module:function"
      - middleware.demo.device:navigate_to_node
    ---
    Longer notes for people (not sent to the model).

The system prompt lists each skill as ``- name: description``; the tools reach
the model as tool schemas, so they are not repeated in the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .exceptions import ConfigError
from .text import one_line

__all__ = ["Skill", "load_skills", "render_skills"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?P<yaml>.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_TOOL_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class Skill(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: str = Field(min_length=1, max_length=500)
    tools: tuple[str, ...] = ()
    source: str | None = Field(default=None, exclude=True)

    @field_validator("tools")
    @classmethod
    def _tool_refs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for ref in value:
            if not _TOOL_REF.match(ref):
                raise ValueError(f"tool '{ref}' is not a 'module:function' reference")
        return value

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(ref.rsplit(":", 1)[1] for ref in self.tools)


def _skill_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*/SKILL.md")) + sorted(folder.glob("*.md"))
    return [f for f in files if f.name.lower() != "readme.md"]


def parse_skill_file(path: Path) -> dict[str, Any]:
    import yaml

    text = path.read_text(encoding="utf-8")
    match = _FRONT_MATTER.match(text)
    if not match:
        raise ConfigError(f"Skill file {str(path)!r} has no YAML front matter (a block between '---' lines).")
    try:
        data = yaml.safe_load(match.group("yaml"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"Skill file {str(path)!r} has invalid front matter: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Skill file {str(path)!r}: front matter must be a mapping with name and description.")
    return {**data, "source": str(path)}


def load_skills(folder: str | Path) -> list[dict[str, Any]]:
    """Raw skill definitions found in ``folder``; validated later as part of the config."""
    path = Path(folder)
    if not path.is_dir():
        raise ConfigError(f"Config 'skills_dir' has value {str(path)!r}. Expected: an existing folder.", key="skills_dir")
    return [parse_skill_file(file) for file in _skill_files(path)]


def render_skills(skills: Iterable[Skill], header: str) -> str:
    """The Skills section, one line per skill, or "" when there are none."""
    lines = [f"- {skill.name}: {one_line(skill.description, 300)}" for skill in skills]
    return "\n".join([header, *lines]) if lines else ""
