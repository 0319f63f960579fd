"""The demo domain of the design notes: "Atlas", a device-navigation assistant.

``device`` simulates a test lab (the tools of the device-navigation skill);
``atlas`` is the scripted model served as ``scripted/atlas``; ``SCRIPT`` is the
conversation ``middleware demo`` plays.
"""

from __future__ import annotations

__all__ = ["SCRIPT"]

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
