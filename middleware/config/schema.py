"""Configuration as frozen values: validated pydantic models, nothing read or cached here.

``Config()`` is the library default: a neutral assistant, auto context keys, no skills,
the embedded ``memory://`` store. ``middleware.config.load_config`` reads a YAML file into
one. Errors name the key, the bad value and what was expected::

    Config 'summary.lines' has value -1. Expected: Input should be greater than or equal to 0.

The sections live in ``sections`` (memory and the prompt) and ``service`` (the store,
counting, caching figures, the log, the endpoint).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.text import cut_middle, quoted, redact_url
from ..exceptions import ConfigError
from .sections import (
    AssistantConfig,
    ContextConfig,
    DisclosureConfig,
    MemoryConfig,
    NotesConfig,
    PromptConfig,
    RecentConfig,
    Section,
    Skill,
    SummaryConfig,
    TracesConfig,
)
from .service import CachingConfig, ServeConfig, StoreConfig, TokensConfig, UsageLogConfig

__all__ = ["Config", "validate_config"]


class Config(Section):
    # A ValidationError's text never quotes what was given (the endpoint's client keys are
    # settings); validate_config's ConfigError quotes a bad value, cut short, and never a key.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    assistant: AssistantConfig = Field(default_factory=AssistantConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    summary: SummaryConfig = Field(default_factory=SummaryConfig)
    recent: RecentConfig = Field(default_factory=RecentConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    # Skills listed in the system prompt (a config file's skills_dir adds those it holds).
    skills: tuple[Skill, ...] = ()
    store: StoreConfig = Field(default_factory=StoreConfig)
    tokens: TokensConfig = Field(default_factory=TokensConfig)
    usage_log: UsageLogConfig = Field(default_factory=UsageLogConfig)
    notes: NotesConfig = Field(default_factory=NotesConfig)
    traces: TracesConfig = Field(default_factory=TracesConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    disclosure: DisclosureConfig = Field(default_factory=DisclosureConfig)
    caching: CachingConfig = Field(default_factory=CachingConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    # The default LLM for chat(); any litellm model string.
    model: str = "gpt-4o-mini"
    # Tool rounds one chat turn may take before it stops with a note.
    max_tool_rounds: int = Field(default=8, ge=0, le=100)
    max_session_id_chars: int = Field(default=256, ge=1, le=4096)

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        names = [skill.name for skill in self.skills]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"skills has duplicate names {duplicates}")
        keys = set(self.context.keys or ())
        for key in self.context.labels:
            if self.context.keys is not None and key not in keys:
                raise ValueError(f"context.labels names '{key}', which is not in context.keys")
        return self

    def with_overrides(self, **sections: Any) -> Config:
        """Return a copy with some settings replaced, validated like a loaded file.

        ``config.with_overrides(store={"url": "redis://127.0.0.1:6379/0"})``
        """
        data = self.model_dump(mode="python")
        for section, values in sections.items():
            if isinstance(values, Mapping) and isinstance(data.get(section), dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        return validate_config(data, source="overrides")

    def for_tenant(self, tenant: str | None) -> Config:
        """This config with its keys under the tenant's own prefix (``<prefix>:t:<tenant>``):
        the tenant's sessions, notes, listing and vectors, which no other tenant's keys reach.
        None: this config."""
        if tenant is None:
            return self
        store = self.store.model_copy(update={"key_prefix": f"{self.store.key_prefix}:t:{tenant}"})
        return self.model_copy(update={"store": store})


# What a config error quotes is cut to these lengths: a value (or a key) may be megabytes,
# or a structure of aliases that would expand to billions of items.
_QUOTED_CHARS = 200
_SECRET = ("serve", "api_keys")  # the setting whose values an error never quotes
_KEY_CHARS = 100
_EXPECTED_CHARS = 300


def _suggest(loc: Sequence[Any]) -> str:
    """ " Did you mean 'memory.recall'?" for a key close to a known one, else the known
    settings where it stands (a few of them), or "" where they are not known."""
    model: Any = Config
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        model = field.annotation if field is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return ""
    known = sorted(model.model_fields)
    where = ".".join(str(part) for part in loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f" Did you mean '{where + '.' if where else ''}{close[0]}'?"
    listed = ", ".join(known[:12]) + (", …" if len(known) > 12 else "")
    return f" Known settings{' of ' + where if where else ''}: {listed}."


def _describe(error: Mapping[str, Any]) -> str:
    key = cut_middle(".".join(str(part) for part in error["loc"]) or "(top level)", _KEY_CHARS, " … ")
    if error["type"] == "extra_forbidden":
        return f"Config '{key}' is not a known setting (value {quoted(error['input'], _QUOTED_CHARS)}).{_suggest(error['loc'])}"
    if error["type"] == "missing":
        return f"Config '{key}' is required but missing."
    # A validator's message may quote the value too (a tool reference, a key name).
    expected = cut_middle(error["msg"].removeprefix("Value error, "), _EXPECTED_CHARS, " … ")
    value = error["input"]
    if tuple(map(str, error["loc"][: len(_SECRET)])) == _SECRET:  # the endpoint's client keys: never quoted
        return f"Config '{key}' has a value not shown (it holds client keys). Expected: {expected}."
    if key == "store.url" and isinstance(value, str):
        value = redact_url(value)
    return f"Config '{key}' has value {quoted(value, _QUOTED_CHARS)}. Expected: {expected}."


def validate_config(data: Any, *, source: str) -> Config:
    """``data`` (a mapping of settings) as a Config; ConfigError naming the first bad key."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"Config file {source} holds a {type(data).__name__}; expected a mapping of settings.")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # A value that may take one of several forms (a key or a {key, tenant} entry) fails each
        # of them: the form it does not have says less than what is wrong in the one it has.
        first = next((error for error in errors if not str(error["type"]).endswith("_type")), errors[0])
        original = (first.get("ctx") or {}).get("error")
        if isinstance(original, ConfigError):  # already names its key (a skill file, say)
            raise original from None
        message = _describe(first)
        if len(errors) > 1:
            message += f" ({len(errors) - 1} more problem(s) in {source})"
        key = ".".join(str(part) for part in first["loc"])
        raise ConfigError(message, key=key) from None
