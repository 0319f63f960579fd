"""``middleware serve``: an OpenAI-compatible endpoint that gives any chatbot memory.

Point an OpenAI client's ``base_url`` at it; it composes the session's short prompt before
every call and records each turn (see ``middleware.serve.app``).
"""

from __future__ import annotations

try:
    import starlette  # noqa: F401
except ImportError as exc:  # the library alone: the endpoint and the inspector come with an extra
    raise ImportError(f'{__name__} needs starlette and uvicorn: pip install "token-middleware[serve]"') from exc

from .app import Endpoint, app_from_environment, create_app

__all__ = ["Endpoint", "app_from_environment", "create_app"]
