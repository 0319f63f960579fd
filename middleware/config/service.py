"""The settings of the service around memory, as frozen sections of ``Config``: the store,
token counting, prompt caching figures, the usage log and the endpoint."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator

from ..core.text import redact_url
from .sections import Section

__all__ = ["ApiKey", "CachingConfig", "ServeConfig", "StoreConfig", "TokensConfig", "UpstreamModel", "UsageLogConfig",
           "tenant_name"]  # fmt: skip

# A tenant's name, as it appears in Redis key names and logs.
TENANT = re.compile(r"^[A-Za-z0-9_.\-]{1,48}$")


class StoreConfig(Section):
    # memory:// (embedded, in-process), redis://, rediss:// (TLS), unix://
    url: str = "memory://"
    key_prefix: str = Field(default="mw", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-:]+$")
    # Idle time after which a whole session expires; 0 keeps sessions forever.
    ttl_seconds: int = Field(default=7 * 24 * 3600, ge=0)
    timeout_seconds: float = Field(default=2.0, gt=0, le=600)
    # The URL names any node of a Redis Cluster (keys of a session share one slot).
    cluster: bool = False
    # raise: an unreachable store raises StoreUnavailableError. degrade: compose from
    # the system prompt and the current message, keep unrecorded turns in memory.
    on_store_error: Literal["raise", "degrade"] = "raise"
    # Turns held in memory while the store is unreachable (degrade): the oldest are dropped
    # past either bound, with a store.pending_overflow error.
    max_pending_turns: int = Field(default=10_000, ge=1)
    max_pending_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)

    def __repr_args__(self) -> Any:
        # A password in the URL must not reach logs or tracebacks through a repr.
        for name, value in super().__repr_args__():
            yield name, redact_url(value) if name == "url" and isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        scheme = value.split("://", 1)[0].lower() if "://" in value else ""
        if scheme not in {"memory", "redis", "rediss", "unix"}:
            raise ValueError("a URL starting with memory://, redis://, rediss:// or unix://")
        return value


class TokensConfig(Section):
    # The model whose tokenizer counts tokens; any litellm model string.
    model: str = "gpt-4o-mini"
    # Force a tiktoken encoding (cl100k_base, o200k_base, p50k_base); None chooses from the model.
    encoding: str | None = None
    # Hard cap on the composed prompt in tokens (tool schemas included). None: the
    # model's context window (from litellm's local price map) minus reply_reserve.
    budget: int | None = Field(default=None, ge=64)
    reply_reserve: int = Field(default=4096, ge=0)
    # Cap on notes + context keys + summary together (seed 003's context_limit); None: no cap.
    # What gives first: summary lines (oldest first), then notes (cut in the middle),
    # then context keys (least recently set first).
    memory_budget: int | None = Field(default=None, ge=16)
    max_message_chars: int = Field(default=200_000, ge=100)


class CachingConfig(Section):
    """Prompt caching: how the usage figures model it, and Anthropic cache breakpoints."""

    # Whose caching rules the figures (and disclosure.cache_aware) follow: auto (from the
    # model's provider: OpenAI, Anthropic, Gemini, else none), or one of them for every model.
    rules: Literal["auto", "openai", "anthropic", "gemini", "none"] = "auto"
    # A session's cache counts as warm when its previous call came less than this long ago.
    ttl_seconds: float = Field(default=300.0, gt=0, le=86_400)
    # Anthropic models: mark the stable prefix (tools, the static system text or the notes
    # and keys set earlier after it, the memory that changes only now and then) and, when a
    # later call of the turn is likely enough to read it, the last message with
    # cache_control breakpoints, so the provider caches them (Anthropic caches nothing
    # unmarked). Off only for a server that refuses cache_control behind a Claude price
    # (caching.price_as).
    anthropic_breakpoints: bool = True
    # Anthropic models with tool search (Claude 4.5 and later, called by that name on
    # Anthropic's API from chat() or the endpoint, with no api_base of the call's own), their
    # requests marked: the tools the loader loads are sent deferred (defer_loading) and named
    # in its answer as tool references, which the provider expands there, so the tools and
    # system text before them are still read from the cache.
    tool_references: bool = True
    # Price the figures (and choose the caching rules, which disclosure.cache_aware follows)
    # as this model instead of the one called: for aliases, proxies and self-hosted names
    # litellm has no price for.
    price_as: str | None = None
    # While a session is young, resend its own history (each turn's messages, tool calls and
    # results as traces keep them), append-only, with every schema, where the model's caching
    # makes that cost no more per turn than the composed prompt; from the first turn it does
    # not, the composed prompt for good. Turns the middleware calls the model for (chat(), a
    # wrapped chatbot, the endpoint). Needs traces.max_entries above the session's turns.
    resend_history: bool = True


class UsageLogConfig(Section):
    """The token usage log: one JSON line per LLM call. The library writes none unless
    ``path`` is set; ``middleware`` commands and the endpoint they serve log to
    ``middleware-usage.jsonl`` in the current folder unless a config sets ``path`` (null:
    no log)."""

    path: str | None = None
    include_content: bool = False


class UpstreamModel(Section):
    """A model clients may ask for: the litellm model it stands for, and where that model
    is served when it is not the provider's own address (a local OpenAI-compatible server)."""

    model: str = Field(min_length=1)
    api_base: str | None = None


class ApiKey(Section):
    """A client key of the endpoint and the tenant it belongs to: keys that name one tenant
    share its sessions. A key given alone (a string) is a tenant of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # its errors never quote a key

    key: str = Field(min_length=1, repr=False)
    tenant: str = Field(pattern=TENANT.pattern)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        if DIGESTED.fullmatch(value):
            raise ValueError(
                f"tenant {value!r} has the form of a digested name (key- or team- and 16 hex digits), which is kept "
                "for digests of keys and team ids; expected another name"
            )
        return value


# The form tenant_name gives: no tenant named by hand may take it, or it could share a digested tenant's memory.
DIGESTED = re.compile(r"(key|team)-[0-9a-f]{16}")


def tenant_name(secret: str, kind: str = "key") -> str:
    """The tenant of a key given alone (or of another name that cannot appear in key names):
    named by a digest of it, never by it."""
    return f"{kind}-" + hashlib.sha256(secret.encode()).hexdigest()[:16]


class ServeConfig(Section):
    """``middleware serve``: the OpenAI-compatible endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # its errors never quote a key

    host: str = "127.0.0.1"  # loopback by default: off loopback it needs api_keys
    port: int = Field(default=8400, ge=1, le=65535)
    # Bearer keys clients must send (Authorization: Bearer <key>); empty: no check. Each key
    # belongs to a tenant, whose sessions no other tenant's key reaches: a key given as a
    # string is a tenant of its own; {key, tenant} entries that name one tenant share it.
    # Keys for the upstream providers never come from here: litellm reads them from the environment.
    api_keys: tuple[str | ApiKey, ...] = Field(default=(), repr=False)
    # Model names clients may ask for -> the litellm model each stands for (a string, or
    # {model, api_base}). Empty: any litellm model string is forwarded as it is.
    models: dict[str, str | UpstreamModel] = Field(default_factory=dict)
    # How long a finished turn waits for an earlier-arrived turn of its session to finish
    # before it is recorded anyway (the earlier one's process died during its upstream call).
    order_wait_seconds: float = Field(default=30.0, ge=0, le=86_400)
    # The longest request body accepted, in bytes (counted as it arrives, chunked bodies too).
    max_body_bytes: int = Field(default=8_000_000, ge=1_000)
    # How long a request's body may take to arrive, in seconds (a 408 past it).
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # How long a connection may stay idle, and send a request head, in seconds.
    idle_timeout_seconds: float = Field(default=5.0, gt=0, le=3600)
    # Connections (and requests in progress) served at once; past it, new requests get a 503.
    max_connections: int = Field(default=10_000, ge=1)
    # A request that names no session: passthrough (sent upstream untouched, with an
    # X-Middleware-Warning header) or reject (a 400).
    without_session: Literal["passthrough", "reject"] = "passthrough"
    # One structured line per request (the "middleware" logger, INFO): status, tenant,
    # session, model, latency, calls, tokens sent and saved. middleware serve prints them.
    access_log: bool = True

    @field_validator("models")
    @classmethod
    def _models(cls, value: dict[str, str | UpstreamModel]) -> dict[str, str | UpstreamModel]:
        for alias, model in value.items():
            if not alias.strip() or (isinstance(model, str) and not model.strip()):
                raise ValueError(f"alias {alias!r} -> {model!r}: expected non-empty names")
        return value

    @field_validator("api_keys")
    @classmethod
    def _api_keys(cls, value: tuple[str | ApiKey, ...]) -> tuple[str | ApiKey, ...]:
        seen: set[str] = set()
        for index, entry in enumerate(value):
            key = entry if isinstance(entry, str) else entry.key
            if not key.strip():
                raise ValueError(f"key {index + 1} is empty or blank; expected a secret clients send as a bearer token")
            if key != key.strip() or any(char.isspace() or not char.isprintable() for char in key):
                raise ValueError(f"key {index + 1} holds whitespace or an invisible character; a bearer token cannot")
            if key in seen:
                raise ValueError(f"key {index + 1} is given twice; each key belongs to one tenant")
            seen.add(key)
        return value

    def tenants(self) -> list[tuple[bytes, str]]:
        """Each client key, as bytes, with the tenant it belongs to."""
        return [(entry.encode(), tenant_name(entry)) if isinstance(entry, str) else (entry.key.encode(), entry.tenant)
                for entry in self.api_keys]  # fmt: skip

    def upstream(self, name: str) -> UpstreamModel | None:
        """What the model a client named stands for; None when aliases are set and it is none of them."""
        if not self.models:
            return UpstreamModel(model=name)
        target = self.models.get(name)
        return UpstreamModel(model=target) if isinstance(target, str) else target
