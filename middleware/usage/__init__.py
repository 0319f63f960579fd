"""The token usage log: one line per LLM call, what a provider's cache would bill, and the report over the log."""
