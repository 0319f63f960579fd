"""The pure core: values, text rules, the composer, recall ranking, tool disclosure and the caching rules.

Nothing here touches a file, the environment, the clock, the network, Redis or
litellm; the shell (managers, store drivers, runner, llm) does the I/O. A test
reads these modules' imports to keep it so.
"""
