"""Token-efficient memory middleware between a chatbot and its LLM.

Each session is remembered as context keys, a three-line rolling summary and
the last turn; every call gets a short system prompt plus trimmed history::

    from middleware import SessionManager, ToolCall

    mgr = SessionManager()                        # a neutral assistant, memory:// store
    messages = mgr.build_messages("s1", "goto shop")
    mgr.record_turn("s1", user="goto shop", assistant="Navigated to 'shop'",
                    tool_calls=[ToolCall(name="navigate_to_node", arguments={"node": "shop"})])

``import middleware`` does not import litellm.
"""

from __future__ import annotations

from .config.files import load_config
from .config.schema import Config
from .connectors import Connector
from .core.composer import is_valid_chat
from .core.state import Prompt, SessionPage, SessionState, SessionSummary, TokenBreakdown, ToolCall, Turn, TurnUpdate
from .exceptions import (
    ConfigError,
    InvalidInputError,
    InvalidMessageError,
    InvalidSessionIdError,
    InvalidToolCallError,
    LLMError,
    MiddlewareError,
    NotesError,
    RedactedError,
    StoreError,
    StoreUnavailableError,
    TokenBudgetError,
)
from .session.manager import AsyncSessionManager, SessionManager
from .session.standalone import apply_turn, build_messages, compose
from .store.drivers import AsyncRedisStore, AsyncSessionStore, RedisStore, SessionStore
from .store.sessions import Inspection
from .tools import Tool, ToolList, Toolset
from .turn.chat import AsyncChatStream, ChatResult, ChatStream

__version__ = "0.1.0"

__all__ = [
    "AsyncChatStream",
    "AsyncRedisStore",
    "AsyncSessionManager",
    "AsyncSessionStore",
    "ChatResult",
    "ChatStream",
    "Config",
    "ConfigError",
    "Connector",
    "Inspection",
    "InvalidInputError",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "InvalidToolCallError",
    "LLMError",
    "MiddlewareError",
    "NotesError",
    "Prompt",
    "RedactedError",
    "RedisStore",
    "SessionManager",
    "SessionPage",
    "SessionState",
    "SessionStore",
    "SessionSummary",
    "StoreError",
    "StoreUnavailableError",
    "TokenBreakdown",
    "TokenBudgetError",
    "Tool",
    "ToolCall",
    "ToolList",
    "Toolset",
    "Turn",
    "TurnUpdate",
    "__version__",
    "apply_turn",
    "build_messages",
    "compose",
    "is_valid_chat",
    "load_config",
]
