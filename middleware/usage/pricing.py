"""The cache figures of the usage log: what a provider would bill for each call, cached or not.

For every LLM call, the usage line splits the prompt into what the provider would read
from its cache, write to it (Anthropic's premium) and bill in full, for what was sent and
for the full-history counterfactual, following the model's caching rules
(``middleware.core.caching``) and priced from litellm's local price map. The full history
only grows, so its previous call is its prefix; what was sent is compared block by block
with the session's earlier calls. The model of each session's cache lives in this process
(an LRU of sessions): a session's first call in a process reads nothing, on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import llm
from ..config.schema import Config
from ..core.caching import CacheState, Rules, Split, blocks, growing_blocks, request_parts, split
from ..core.composer import REPLY_PRIMING
from ..lru import Lru
from ..tokens import Tokenizer

__all__ = ["Billing", "cache_line"]


@dataclass(frozen=True)
class _Caches:
    sent: CacheState
    full: CacheState
    full_prefix: int  # the last full-history call's prompt tokens: the next one's prefix


def _side(part: Split, rules: Rules) -> dict[str, Any]:
    cost = part.cost(rules)
    return {**part.as_dict(), "cost_usd": round(cost, 9) if cost is not None else None}


def cache_line(rules: Rules, sent: Split, full: Split | None) -> dict[str, Any]:
    """The ``cache`` field of a usage line: both sides' split and cost, and the saving in
    effective cost (None when the model has no price). ``full`` is None for a call the
    full-history chatbot would not have made (a loader round)."""
    ours, theirs = _side(sent, rules), _side(full or Split(), rules)
    sent_cost, full_cost = ours["cost_usd"], theirs["cost_usd"]
    saved = full_cost - sent_cost if sent_cost is not None and full_cost is not None else None
    return {
        "rules": rules.kind,
        "sent": ours,
        "full_history": theirs,
        "saved_usd": round(saved, 9) if saved is not None else None,
        "saved_pct": round(100 * saved / full_cost, 1) if saved is not None and full_cost else None,
    }


class Billing:
    """Each session's provider cache as this process has seen it, and the figures it gives."""

    def __init__(self, config: Config, tokenizer: Tokenizer) -> None:
        self.kind = config.caching.rules
        self.price_as = config.caching.price_as
        self.ttl = config.caching.ttl_seconds
        self.tokenizer = tokenizer
        self.counting_model = config.tokens.model  # whose tokenizer counts schemas, as for every figure
        self._caches: Lru[_Caches] = Lru(4_096)

    def rules(self, model: str) -> Rules:
        """The caching rules and prices the figures use for calls to ``model``."""
        return llm.cache_rules(self.price_as or model, self.kind)

    def call(
        self,
        session_id: str,
        model: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        messages: Sequence[Mapping[str, Any]],
        full_tokens: int | None,
        now: float,
        static_prefix: str = "",
        static_tokens: int = 0,
    ) -> dict[str, Any]:
        """The ``cache`` field for one call of ``session_id``: ``tools`` and ``messages`` as
        sent (with any cache_control), ``full_tokens`` the full-history counterpart's prompt
        tokens (None: it would not have made this call)."""
        rules = self.rules(model)
        caches = self._caches.get(session_id) or _Caches(CacheState(), CacheState(), 0)
        sizes = llm.tool_sizes(self.counting_model, tools)
        prompt = blocks(request_parts(tools, sizes, messages, self.tokenizer.count_message, static_prefix=static_prefix,
                                      static_tokens=static_tokens, priming=REPLY_PRIMING))  # fmt: skip
        sent, sent_state = split(prompt, caches.sent, rules, now=now, ttl=self.ttl)
        full, full_state, prefix = None, caches.full, caches.full_prefix
        if full_tokens is not None:
            content = max(full_tokens - REPLY_PRIMING, 0)
            grown = growing_blocks(prefix, content, priming=full_tokens - content, breakpoints=rules.explicit)
            full, full_state = split(grown, caches.full, rules, now=now, ttl=self.ttl)
            prefix = content
        self._caches.put(session_id, _Caches(sent_state, full_state, prefix))
        return cache_line(rules, sent, full)

    def forget(self, session_id: str) -> None:
        self._caches.forget(session_id)
