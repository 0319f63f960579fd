"""The ``middleware`` command line: the demo, chat, the usage report, the endpoint, the
inspector and the session commands."""

from __future__ import annotations

from .main import main

__all__ = ["main"]
