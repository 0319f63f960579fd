"""Benchmarks: `python -m benchmarks` runs them all and writes BENCHMARKS.md."""

import os

# The peers import litellm directly; without this litellm would try to fetch its price
# map from the network on import. Nothing here downloads at run time.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
