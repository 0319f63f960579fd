"""Token-efficient memory middleware between a chatbot and its LLM.

Each session is remembered as context keys, a three-line rolling summary and
the last turn; every call gets a short system prompt plus trimmed history::

    from middleware import SessionManager, ToolCall

    mgr = SessionManager.from_config()            # embedded default, memory:// store
    messages = mgr.build_messages("s1", "goto shop")
    mgr.record_turn("s1", user="goto shop", assistant="Navigated to 'shop'",
                    tool_calls=[ToolCall(name="navigate_to_node", arguments={"node": "shop"})])

``import middleware`` does not import litellm.
"""

from __future__ import annotations

from .composer import apply_turn, build_messages, compose, is_valid_chat
from .config import Config, load_config
from .exceptions import (
    ConfigError,
    InvalidInputError,
    InvalidMessageError,
    InvalidSessionIdError,
    InvalidToolCallError,
    LLMError,
    MiddlewareError,
    StoreError,
    StoreUnavailableError,
    TokenBudgetError,
)
from .manager import AsyncSessionManager, SessionManager
from .notes import NotesError
from .state import Prompt, SessionState, TokenBreakdown, ToolCall, Turn, TurnUpdate

__version__ = "0.1.0"

__all__ = [
    "AsyncSessionManager",
    "Config",
    "ConfigError",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "InvalidToolCallError",
    "LLMError",
    "MiddlewareError",
    "NotesError",
    "Prompt",
    "SessionManager",
    "SessionState",
    "StoreError",
    "StoreUnavailableError",
    "TokenBreakdown",
    "TokenBudgetError",
    "ToolCall",
    "Turn",
    "TurnUpdate",
    "__version__",
    "apply_turn",
    "build_messages",
    "compose",
    "is_valid_chat",
    "load_config",
]
