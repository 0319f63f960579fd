"""Every error the library raises, named by who is at fault.

- ``ConfigError``: the caller's configuration.
- ``InvalidInputError`` and its subclasses: a value the caller passed in.
- ``StoreError`` and its subclasses: the session store (Redis) failed.
- ``LLMError``: the model provider failed (raised by the chat wrapper). Its ``__cause__``
  is a ``RedactedError``: the provider's error retold with every secret masked.

All of them derive from ``MiddlewareError``; input and config errors are also
``ValueError`` so code that already catches ``ValueError`` keeps working.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "ConfigError",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidRequestError",
    "InvalidSessionIdError",
    "InvalidToolCallError",
    "LLMError",
    "MiddlewareError",
    "NotesError",
    "RedactedError",
    "StoreError",
    "StoreUnavailableError",
    "TokenBudgetError",
    "require",
]


class MiddlewareError(Exception):
    """Base class of every error raised by ``middleware``."""


class ConfigError(MiddlewareError, ValueError):
    """The configuration is invalid: the message names the key, the value and what was expected."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class InvalidInputError(MiddlewareError, ValueError):
    """A value passed to a public function is not acceptable."""


class InvalidSessionIdError(InvalidInputError):
    """A session id is not a non-empty string of printable characters within the length limit."""


class InvalidMessageError(InvalidInputError):
    """A message is not a string, is empty, or is larger than the configured limit."""


class InvalidToolCallError(InvalidInputError):
    """A tool call has no usable name or arguments of an unusable type."""


class InvalidRequestError(InvalidInputError):
    """A request to the OpenAI-compatible endpoint that cannot be served. The message names
    the parameter and its bad value (cut short), never message content or keys; ``status``
    is the HTTP status to answer with and ``param``/``code`` fill OpenAI's error fields."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


class NotesError(InvalidInputError):
    """A notes operation that cannot be carried out as asked."""


class TokenBudgetError(InvalidInputError):
    """The parts of the prompt that are never cut already exceed the token budget."""


class StoreError(MiddlewareError):
    """The session store failed. The message names the store, never its password."""


class StoreUnavailableError(StoreError):
    """The session store could not be reached within the configured timeout."""


class LLMError(MiddlewareError):
    """The model provider failed or returned something unusable. ``status_code``: the HTTP
    status the provider answered with, when it answered with one (401, 429, 500...)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class RedactedError(MiddlewareError):
    """Stands in for a third party's exception whose text may quote a secret (a provider
    echoing the API key): its type, where it was raised and its message, secrets masked.

    An ``LLMError`` is raised from a chain of these instead of the provider's own exceptions,
    which are dropped with their frames (whose local variables hold the key), so a logged
    traceback shows what failed and where, and no key.
    """

    def __init__(self, message: str, *, type_name: str, location: str | None = None) -> None:
        super().__init__(message)
        self.type_name = type_name  # the original's qualified name, e.g. "litellm.exceptions.AuthenticationError"
        self.location = location  # where it was raised, e.g. "litellm/main.py:1234 in completion"


def require(module: str, extra: str, package: str) -> ModuleType:
    """``module``, or an ImportError that says which pip command installs it (the extra of
    ours that brings it, or the package itself)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f'{module} is not installed: pip install "token-middleware[{extra}]" (or pip install {package})'
        ) from exc
