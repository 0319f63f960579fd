"""Adapters for the frameworks chatbots are built on, each a thin shell over a session manager
and each behind an optional extra:

- ``middleware.adapters.agents``: an OpenAI Agents SDK ``Session`` (``pip install "token-middleware[agents]"``);
- ``middleware.adapters.langchain``: a LangChain v1 agent middleware and a ``BaseChatMessageHistory``
  (``pip install "token-middleware[langchain]"``);
- ``middleware.adapters.litellm_proxy``: a LiteLLM proxy hook (``pip install "token-middleware[litellm-proxy]"``).
"""
