"""The demo: "Atlas", a device-navigation assistant, with its own configuration.

``device`` simulates a test lab (the tools of the device-navigation skill);
``atlas`` is the scripted model, served as ``scripted/atlas`` once this package is
imported; ``SCRIPT`` is the conversation ``middleware demo`` plays; ``CONFIG_PATH``
is Atlas's configuration (persona, tracked context keys, summary templates, skill).
"""

from __future__ import annotations

from pathlib import Path

from ..config.files import load_config
from ..config.schema import Config
from ..testing.scripted import register
from .atlas import respond

__all__ = ["CONFIG_PATH", "SCRIPT", "demo_config"]

CONFIG_PATH = Path(__file__).resolve().parent / "atlas.yaml"

register("atlas", respond)

# Each request omits what earlier turns established (interface, device, tree):
# the scripted model only finds it in the Current Context the middleware injects.
SCRIPT: tuple[str, ...] = (
    "take control of device1 on sunri-pi1",
    "navigate to watchlist on google_tv",
    "goto shop",
    "check current node",
    "open settings",
    "go to network",
    "show the node tree",
    "goto search",
    "go to live_tv",
    "now show current node",
    "goto home",
    "what have we done so far?",
)


def demo_config(settings: Config | None = None) -> Config:
    """Atlas's configuration, storing and logging where ``settings`` say (their ``store``
    and ``usage_log`` sections; the library defaults without them)."""
    settings = settings or Config()
    atlas = load_config(CONFIG_PATH, env={})
    return atlas.with_overrides(store=settings.store.model_dump(), usage_log=settings.usage_log.model_dump())
