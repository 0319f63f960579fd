"""The composer as plain functions, for those who keep session state elsewhere.

Each takes the config and, optionally, a tokenizer (by default the one ``tokens.model``
names, counted offline); the composer for a config is kept, so what it rendered and
counted once is not rendered or counted again.
"""

from __future__ import annotations

from ..config.schema import Config
from ..core.composer import Composer
from ..core.state import Prompt, SessionState, Turn, TurnUpdate
from ..exceptions import InvalidInputError
from ..lru import Lru
from ..tokens import Tokenizer, get_tokenizer

__all__ = ["apply_turn", "build_messages", "compose", "composer_for"]

# By id(config): the config itself is kept beside its composer, so an id is never reused while cached.
_composers: Lru[tuple[Config, Tokenizer, Composer]] = Lru(64)


def _kind(value: object) -> str:
    return type(value).__name__[:40]


def _checked(state: SessionState) -> SessionState:
    """``state`` when its parts have the types the composer reads; InvalidInputError naming
    the first that does not (a state built by hand: the store's are checked as decoded)."""
    if not isinstance(state, SessionState):
        raise InvalidInputError(f"The state is a {_kind(state)}; expected a SessionState.")
    for name, kind, item in (("context", dict, str), ("earlier", dict, str), ("summary", list, str), ("recent", list, dict)):
        value = getattr(state, name)
        if not isinstance(value, kind):
            raise InvalidInputError(f"SessionState.{name} is a {_kind(value)}; expected a {kind.__name__}.")
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        bad = next((entry for entry in items if not isinstance(entry, item)), None)
        if bad is not None:
            raise InvalidInputError(f"SessionState.{name} holds a value of type {_kind(bad)}; expected {item.__name__} entries.")
    return state


def composer_for(config: Config, tokenizer: Tokenizer | None = None) -> Composer:
    """The composer of ``config``, counting with ``tokenizer`` (default: the config's)."""
    if not isinstance(config, Config):
        raise InvalidInputError(f"The config is a {_kind(config)}; expected a Config (Config() for the defaults).")
    tokenizer = tokenizer or get_tokenizer(config.tokens.model, encoding=config.tokens.encoding)
    key = f"{id(config)}:{id(tokenizer)}"
    cached = _composers.get(key)
    if cached is not None and cached[0] is config and cached[1] is tokenizer:
        return cached[2]
    composer = Composer(config, tokenizer)
    _composers.put(key, (config, tokenizer, composer))
    return composer


def compose(
    state: SessionState,
    user_message: str,
    config: Config,
    *,
    tokenizer: Tokenizer | None = None,
    budget: int | None = None,
    extra_tokens: int = 0,
) -> Prompt:
    """The messages to send for ``user_message`` and their token figures.

    ``budget`` (default ``config.tokens.budget``) caps the prompt in tokens, counting
    ``extra_tokens`` sent beside the messages (tool schemas). The system prompt and the
    current message are never cut; if they alone exceed the budget, TokenBudgetError.
    """
    return composer_for(config, tokenizer).compose(_checked(state), user_message, budget=budget, extra_tokens=extra_tokens)


def build_messages(state: SessionState, user_message: str, config: Config) -> list[dict[str, str]]:
    """OpenAI-format messages for ``user_message`` given what the session remembers."""
    return compose(state, user_message, config).messages


def apply_turn(
    turn: Turn, config: Config, *, tokenizer: Tokenizer | None = None, turn_id: str = "", prompt: str = ""
) -> TurnUpdate:
    """What recording ``turn`` writes: derived from the turn alone, so writers commute."""
    if not isinstance(turn, Turn):
        raise InvalidInputError(f"The turn is a {_kind(turn)}; expected a Turn (Turn(user=..., assistant=...)).")
    return composer_for(config, tokenizer).apply_turn(turn, turn_id=turn_id, prompt=prompt)
