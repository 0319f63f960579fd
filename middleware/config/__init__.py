"""Configuration: frozen settings (``schema``) and reading them from files, skill folders and
the environment (``files``)."""

from __future__ import annotations

from .files import ENV_CONFIG, ENV_REDIS_URL, load_config, load_skills
from .schema import Config, validate_config
from .sections import (
    AssistantConfig,
    ContextConfig,
    DisclosureConfig,
    MemoryConfig,
    NotesConfig,
    PromptConfig,
    RecentConfig,
    Skill,
    SummaryConfig,
    TracesConfig,
    template_for,
)
from .service import ApiKey, CachingConfig, ServeConfig, StoreConfig, TokensConfig, UpstreamModel, UsageLogConfig

__all__ = [
    "ENV_CONFIG",
    "ENV_REDIS_URL",
    "ApiKey",
    "AssistantConfig",
    "CachingConfig",
    "Config",
    "ContextConfig",
    "DisclosureConfig",
    "MemoryConfig",
    "NotesConfig",
    "PromptConfig",
    "RecentConfig",
    "ServeConfig",
    "Skill",
    "StoreConfig",
    "SummaryConfig",
    "TokensConfig",
    "TracesConfig",
    "UpstreamModel",
    "UsageLogConfig",
    "load_config",
    "load_skills",
    "template_for",
    "validate_config",
]
