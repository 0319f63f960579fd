"""``middleware serve``: an OpenAI-compatible endpoint that gives any chatbot memory.

Point an OpenAI client's ``base_url`` at it; it composes the session's short prompt before
every call and records each turn (see ``middleware.serve.app``).
"""

from __future__ import annotations

from ..exceptions import require

require("starlette", "serve", "starlette uvicorn")  # the library alone: the endpoint comes with an extra

from .app import Endpoint, app_from_environment, create_app  # noqa: E402 (after the check)

__all__ = ["Endpoint", "app_from_environment", "create_app"]
