"""The usage sink: the one place that prices an LLM call, splits it into what a provider's
cache would bill on both sides, builds its usage record and writes it to the log.

Every entrance (chat turns, wrapped chatbots, the endpoint, the LiteLLM proxy hook) reports
each call it made as a ``CallMade`` and hands it to ``UsageSink.made``; the record's fields
are described in ``middleware.usage.log``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import llm
from ..config.schema import Config
from ..core.state import Prompt, TokenBreakdown, built
from ..tokens import Tokenizer
from .log import UsageLog
from .pricing import Billing

__all__ = ["CallMade", "UsageSink", "passthrough_call", "usage_record"]


@dataclass(frozen=True, kw_only=True)
class CallMade:
    """One LLM call of a session's turn, as its entrance saw it."""

    kind: str  # chat, stream, wrap, serve, litellm_proxy
    session: str
    turn: int
    step: int  # the call's place in the turn's tool loop, from 0
    model: str  # the model called (a wrapped chatbot's: the one its reply names, else "wrapped")
    priced: bool = True  # False: no model name to price the call by (a wrapped reply that named none)
    prompt: Prompt  # the composed prompt the call opened with
    sent: Sequence[Mapping[str, Any]]  # the messages as sent (breakpoints included): the prompt, then the tool loop
    schemas: Sequence[Mapping[str, Any]] | None  # the tool schemas as sent
    reply: Mapping[str, Any]  # the assistant message ({} for a call that failed)
    usage: Any  # what the provider reported
    latency: float  # seconds
    # The prompt a chatbot that resends its full history with every schema would send for
    # this call; None for a call it would not make (one after a round that only loaded schemas).
    full_tokens: int | None
    tools: Mapping[str, Any] | None = None  # how many schemas were sent, of how many (see ``tools_line``)
    static_prefix: str = ""  # the system text that stays the same from call to call
    error: int | None = None  # the HTTP status a failed call came back with


def usage_record(
    *,
    kind: str,
    session: str,
    turn: int,
    step: int,
    model: str,
    prompt: Prompt,
    loop_tokens: int,
    tools_tokens: int,
    full_history_tokens: int,
    provider: dict[str, int | None],
    cost_usd: float | None,
    price_per_token: float | None,
    latency_ms: float,
    tool_calls: int,
    cache: dict[str, Any] | None = None,
    tools: Mapping[str, Any] | None = None,
    tenant: str | None = None,
) -> dict[str, Any]:
    """The fields of one line (``tenant``: the endpoint's tenant whose session it is). ``full_history_tokens`` is the whole prompt a chatbot that
    resends its full history with every tool schema would send for this call (0 for a call
    it would not make: one after a round that only loaded schemas). ``cache`` splits both
    sides into what the provider reads from its cache, writes and bills in full, with the
    effective costs (see ``middleware.usage.pricing``); ``tools`` says how many schemas were sent."""
    layers = prompt.tokens.as_dict()
    sent = prompt.tokens.total + loop_tokens + tools_tokens
    saved = full_history_tokens - sent
    line = {
        "kind": kind,
        **({"tenant": tenant} if tenant is not None else {}),
        "session": session,
        "turn": turn,
        "step": step,
        "model": model,
        "tokens": {
            **{k: v for k, v in layers.items() if k != "total"},
            "tool_loop": loop_tokens,
            "tools": tools_tokens,
            "total": sent,
        },
        "full_history_tokens": full_history_tokens,
        "saved_tokens": saved,
        "saved_pct": round(100 * saved / full_history_tokens, 1) if full_history_tokens else 0.0,
        "provider": provider,
        "cost_usd": cost_usd,
        "cost_saved_usd": saved * price_per_token if price_per_token is not None else None,
        "latency_ms": round(latency_ms, 2),
        "tool_calls": tool_calls,
    }
    if tools is not None:
        line["tools"] = dict(tools)
    if cache is not None:
        line["cache"] = cache
    return line


def passthrough_call(
    messages: Any, tools: Any, reply: Mapping[str, Any], usage: Any, *, model: str, latency: float, tokenizer: Tokenizer,
    counting_model: str,
) -> CallMade:  # fmt: skip
    """A request the endpoint sent upstream untouched (it named no session), as a call: its
    prompt counted from the messages as sent, against itself (nothing saved)."""
    sent = tokenizer.count_messages(m for m in messages if isinstance(m, Mapping)) if isinstance(messages, list) else 0
    schemas = [t for t in tools if isinstance(t, Mapping)] if isinstance(tools, list) else None
    breakdown = built(TokenBreakdown, system=0, notes=0, context=0, summary=0, recent=0, current=max(sent - 3, 0), priming=3)
    prompt = built(Prompt, messages=[], tokens=breakdown, full_history_tokens=breakdown.total, turn=0, trimmed=())
    return CallMade(kind="passthrough", session="", turn=0, step=0, model=model, prompt=prompt, sent=[], schemas=schemas,
                    reply=reply, usage=usage, latency=latency, full_tokens=breakdown.total + llm.tools_tokens(counting_model, schemas))  # fmt: skip


class UsageSink:
    """Prices, records and logs every LLM call of one engine (see the module docstring)."""

    def __init__(self, config: Config, tokenizer: Tokenizer, *, log: UsageLog | None = None, tenant: str | None = None) -> None:
        """``log``: a log this sink shares (a tenant's, see ``for_tenant``), else its own."""
        self.tokenizer = tokenizer
        self.counting_model = config.tokens.model  # whose tokenizer counts schemas, as for every figure
        self.billing = Billing(config, tokenizer)
        self.log = log if log is not None else UsageLog(config.usage_log.path, include_content=config.usage_log.include_content)
        self.tenant = tenant

    def for_tenant(self, config: Config, tenant: str | None) -> UsageSink:
        """The sink of ``tenant``'s engine: this sink's log, its lines naming the tenant, and a
        billing of its own. Two tenants' sessions of one id are two sessions: the provider
        cache one's calls would leave is not the other's."""
        return UsageSink(config, self.tokenizer, log=self.log, tenant=tenant)

    def made(self, call: CallMade) -> dict[str, Any]:
        """Write the usage line of ``call``; returns what was written (without content)."""
        provider, count = llm.usage_of(call.usage), self.tokenizer.count_message
        loop = call.sent[len(call.prompt.messages) :]
        # What the provider would read from its cache (a failed call leaves its cache as it was).
        cache = None
        if call.error is None and call.session:  # a request that named no session has no cache to follow
            cache = self.billing.call(call.session, call.model, tools=call.schemas, messages=call.sent, full_tokens=call.full_tokens,
                                      now=time.time(), static_prefix=call.static_prefix,
                                      static_tokens=self.tokenizer.count_chat("system", call.static_prefix))  # fmt: skip
        record = usage_record(
            kind=call.kind, session=call.session, turn=call.turn, step=call.step, model=call.model, prompt=call.prompt,
            loop_tokens=sum(map(count, loop)), tools_tokens=llm.tools_tokens(self.counting_model, call.schemas),
            full_history_tokens=call.full_tokens or 0, provider=provider,
            cost_usd=llm.cost_of(call.model, provider) if call.priced else None,
            price_per_token=llm.input_price(call.model) if call.priced else None, latency_ms=call.latency * 1000,
            tool_calls=len(call.reply.get("tool_calls") or ()), cache=cache, tools=call.tools, tenant=self.tenant,
        )  # fmt: skip
        if call.error is not None:
            record["error_status"] = call.error
        return self.log.write(record, content={"messages": list(call.sent), "reply": dict(call.reply)})

    def forget(self, session_id: str) -> None:
        """Forget a session's provider cache (it was reset)."""
        self.billing.forget(session_id)

    def close(self) -> None:
        self.log.close()
