"""What the endpoint counts, shown at ``GET /metrics`` in Prometheus's text format, and the
access line it logs per request. No I/O.

Figures are per process: with ``middleware serve --workers N``, each worker counts its own
requests (scrape each, or sum them in the query). Behind client keys they are per tenant: a
tenant's scrape shows its own requests and those refused for their key, which are no
tenant's (``Endpoint.scrape``).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Metrics", "request_figures"]

# Upper bounds of the request latency histogram, in seconds.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def request_figures(lines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The tokens a request's upstream calls sent and saved (against the full history), and how many calls it made."""
    sent = saved = calls = 0
    for line in lines:
        calls += 1
        sent += int((line.get("tokens") or {}).get("total") or 0)
        saved += int(line.get("saved_tokens") or 0)
    return {"calls": calls, "tokens_sent": sent, "tokens_saved": saved}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters and a latency histogram, in memory."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status) -> requests
        self.errors: Counter[str] = Counter()  # "upstream", "store", "internal" -> errors
        self.tokens: Counter[str] = Counter()  # "sent", "saved" -> tokens
        self.latency = [0] * (len(BUCKETS) + 1)
        self.latency_sum = 0.0

    def request(self, route: str, status: int, seconds: float, figures: Mapping[str, int] | None = None) -> None:
        """Count a request that ended with ``status`` after ``seconds``."""
        self.requests[(route, status)] += 1
        self.latency[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.latency_sum += seconds
        if figures:
            self.tokens["sent"] += figures.get("tokens_sent", 0)
            self.tokens["saved"] += figures.get("tokens_saved", 0)

    def error(self, kind: str) -> None:
        self.errors[kind] += 1

    @classmethod
    def total(cls, parts: Iterable[Metrics]) -> Metrics:
        """The figures of ``parts`` together."""
        out = cls()
        for part in parts:
            out.requests.update(part.requests)
            out.errors.update(part.errors)
            out.tokens.update(part.tokens)
            out.latency = [a + b for a, b in zip(out.latency, part.latency, strict=True)]
            out.latency_sum += part.latency_sum
        return out

    def render(self) -> str:
        """The figures in Prometheus's text exposition format."""
        out = ["# HELP middleware_requests_total Requests answered, by route and HTTP status.",
               "# TYPE middleware_requests_total counter"]  # fmt: skip
        out += [f'middleware_requests_total{{route="{_label(route)}",status="{status}"}} {count}'
                for (route, status), count in sorted(self.requests.items())]  # fmt: skip
        out += ["# HELP middleware_request_seconds Time from a request's arrival to its answer (a stream's end).",
                "# TYPE middleware_request_seconds histogram"]  # fmt: skip
        total = 0
        for bound, count in zip((*BUCKETS, float("inf")), self.latency, strict=True):
            total += count
            out.append(f'middleware_request_seconds_bucket{{le="{"+Inf" if bound == float("inf") else bound}"}} {total}')
        out += [f"middleware_request_seconds_sum {self.latency_sum:.6f}", f"middleware_request_seconds_count {total}"]
        out += ["# HELP middleware_errors_total Failures: of the upstream provider, of the session store, of the endpoint itself.",
                "# TYPE middleware_errors_total counter"]  # fmt: skip
        out += [f'middleware_errors_total{{kind="{kind}"}} {self.errors[kind]}' for kind in ("upstream", "store", "internal")]
        out += ["# HELP middleware_tokens_total Prompt tokens sent upstream, and saved against sending the full history.",
                "# TYPE middleware_tokens_total counter"]  # fmt: skip
        out += [f'middleware_tokens_total{{kind="{kind}"}} {self.tokens[kind]}' for kind in ("sent", "saved")]
        return "\n".join(out) + "\n"
