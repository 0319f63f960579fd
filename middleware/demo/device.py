"""A simulated device lab: the tools of the device-navigation skill.

Devices on hosts show user interfaces (``google_tv``, ``android_mobile``) whose
screens form a navigation tree. ``navigate_to_node`` walks the shortest path and
returns the transitions it took, shaped like a real test bench's results (so the
token figures of the demo are realistic). State lives in a ``DeviceLab``; the
module-level functions act on a default lab and are what the skill lists.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from typing import Any

from ..connectors import Connector
from ..core.state import Turn

__all__ = [
    "LAB",
    "DeviceLab",
    "ScreenConnector",
    "click_element",
    "get_current_node",
    "get_node_tree",
    "navigate_to_node",
    "take_control",
]

TREES: dict[str, dict[str, list[str]]] = {
    "google_tv": {
        "home": ["menu", "search", "live_tv"],
        "menu": ["home", "watchlist", "apps", "settings", "library", "profile"],
        "watchlist": ["menu"],
        "apps": ["menu", "shop", "featured_apps"],
        "shop": ["apps"],
        "featured_apps": ["apps"],
        "settings": ["menu", "network", "display"],
        "network": ["settings"],
        "display": ["settings"],
        "library": ["menu"],
        "profile": ["menu"],
        "search": ["home"],
        "live_tv": ["home"],
    },
    "android_mobile": {
        "home": ["app_drawer", "notifications"],
        "app_drawer": ["home", "settings", "play_store"],
        "settings": ["app_drawer", "wifi", "bluetooth"],
        "wifi": ["settings"],
        "bluetooth": ["settings"],
        "play_store": ["app_drawer"],
        "notifications": ["home"],
    },
}
TREE_IDS = {
    "google_tv": "8f3c2a1e-5b7d-4c9a-a0e2-6d1f4b3c9e7a",
    "android_mobile": "2b9e4d7c-1a3f-4e8b-9c6d-5f0a7e2b1d4c",
}
HOSTS = {"sunri-pi1": ["device1", "device2"], "sunri-pi2": ["device3"]}
_KEYS = ["RIGHT", "DOWN", "OK", "LEFT", "UP"]


def _path(tree: dict[str, list[str]], start: str, goal: str) -> list[str] | None:
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for nxt in tree.get(node, []):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return None


class DeviceLab:
    """Which device is under control, and where each device is in each interface."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.controlled: tuple[str, str] | None = None
        self.position: dict[tuple[str, str], str] = {}

    def reset(self) -> None:
        with self._lock:
            self.controlled, self.position = None, {}

    def snapshot(self) -> dict[tuple[str, str], str]:
        """Where each device is in each interface, now."""
        with self._lock:
            return dict(self.position)

    def take_control(self, host_name: str, device_id: str) -> dict[str, Any]:
        if device_id not in HOSTS.get(host_name, []):
            return {"success": False, "error": f"no device '{device_id}' on host '{host_name}'", "hosts": HOSTS}
        with self._lock:
            self.controlled = (host_name, device_id)
        return {
            "success": True,
            "host_name": host_name,
            "device_id": device_id,
            "control_session": f"ctrl-{host_name}-{device_id}",
            "capabilities": ["remote_control", "screenshot", "video_capture", "image_match"],
            "interfaces": sorted(TREES),
        }

    def _device(self, device_id: str | None) -> str | None:
        if device_id:
            return device_id
        return self.controlled[1] if self.controlled else None

    def navigate_to_node(
        self, node: str, userinterface_name: str, tree_id: str | None = None, device_id: str | None = None
    ) -> dict[str, Any]:
        tree = TREES.get(userinterface_name)
        if tree is None:
            return {"success": False, "error": f"unknown interface '{userinterface_name}'", "interfaces": sorted(TREES)}
        if tree_id and tree_id != TREE_IDS[userinterface_name]:
            return {"success": False, "error": f"tree '{tree_id}' does not belong to {userinterface_name}"}
        device = self._device(device_id)
        if device is None:
            return {"success": False, "error": "no device under control: call take_control first"}
        if node not in tree:
            return {"success": False, "error": f"no node '{node}' in {userinterface_name}", "nodes": sorted(tree)}
        with self._lock:
            start = self.position.get((device, userinterface_name), "home")
            path = _path(tree, start, node) or [start]
            self.position[(device, userinterface_name)] = node
        steps = [
            {"from": a, "to": b, "action": "press_key", "params": {"key": _KEYS[i % len(_KEYS)]}, "verified": True}
            for i, (a, b) in enumerate(itertools.pairwise(path))
        ]
        return {
            "success": True,
            "userinterface_name": userinterface_name,
            "tree_id": TREE_IDS[userinterface_name],
            "device_id": device,
            "target_node": node,
            "transitions": steps,
            "execution_time_ms": 1200 + 850 * len(steps),
            "screenshot": f"/captures/{userinterface_name}/{device}/{node}.jpg",
            "message": f"Navigation to '{node}' completed in {len(steps)} steps",
        }

    def get_current_node(self, userinterface_name: str, device_id: str | None = None) -> dict[str, Any]:
        device = self._device(device_id)
        if userinterface_name not in TREES:
            return {"success": False, "error": f"unknown interface '{userinterface_name}'"}
        if device is None:
            return {"success": False, "error": "no device under control: call take_control first"}
        node = self.position.get((device, userinterface_name), "home")
        return {
            "success": True,
            "userinterface_name": userinterface_name,
            "device_id": device,
            "current_node": node,
            "verified_by": "image_match",
            "confidence": 0.97,
            "screen": {"title": node.replace("_", " ").title(), "elements": TREES[userinterface_name][node]},
        }

    def click_element(self, element: str, userinterface_name: str, device_id: str | None = None) -> dict[str, Any]:
        current = self.get_current_node(userinterface_name, device_id)
        if not current["success"]:
            return current
        targets = TREES[userinterface_name][current["current_node"]]
        wanted = element.strip().lower().replace(" ", "_")
        if wanted not in targets:
            return {"success": False, "error": f"no element '{element}' on {current['current_node']}", "elements": targets}
        with self._lock:
            self.position[(current["device_id"], userinterface_name)] = wanted
        return {"success": True, "element": wanted, "from_node": current["current_node"], "to_node": wanted}

    def get_node_tree(self, userinterface_name: str) -> dict[str, Any]:
        tree = TREES.get(userinterface_name)
        if tree is None:
            return {"success": False, "error": f"unknown interface '{userinterface_name}'", "interfaces": sorted(TREES)}
        return {
            "success": True,
            "userinterface_name": userinterface_name,
            "tree_id": TREE_IDS[userinterface_name],
            "nodes": [{"id": node, "edges": edges} for node, edges in tree.items()],
        }


LAB = DeviceLab()


def take_control(host_name: str, device_id: str) -> dict[str, Any]:
    """Take control of a test device; must come before navigating it.

    Args:
        host_name: the host the device is attached to, e.g. "sunri-pi1".
        device_id: the device on that host, e.g. "device1".
    """
    return LAB.take_control(host_name, device_id)


def navigate_to_node(
    node: str, userinterface_name: str, tree_id: str | None = None, device_id: str | None = None
) -> dict[str, Any]:
    """Walk the shortest path to a screen (node) of a user interface.

    Args:
        node: the screen to reach, e.g. "shop".
        userinterface_name: the interface, e.g. "google_tv".
        tree_id: the interface's navigation tree id, when known.
        device_id: the device; defaults to the one under control.
    """
    return LAB.navigate_to_node(node, userinterface_name, tree_id, device_id)


def get_current_node(userinterface_name: str, device_id: str | None = None) -> dict[str, Any]:
    """Report which screen the device shows now.

    Args:
        userinterface_name: the interface, e.g. "google_tv".
        device_id: the device; defaults to the one under control.
    """
    return LAB.get_current_node(userinterface_name, device_id)


def click_element(element: str, userinterface_name: str, device_id: str | None = None) -> dict[str, Any]:
    """Select an element of the current screen, e.g. "featured apps".

    Args:
        element: the element to click.
        userinterface_name: the interface, e.g. "google_tv".
        device_id: the device; defaults to the one under control.
    """
    return LAB.click_element(element, userinterface_name, device_id)


def get_node_tree(userinterface_name: str) -> dict[str, Any]:
    """List the screens of an interface and how they connect.

    Args:
        userinterface_name: the interface, e.g. "google_tv".
    """
    return LAB.get_node_tree(userinterface_name)


class ScreenConnector(Connector):
    """The demo's connector: what the device under control shows, before every call, and
    each screen change it sees after a turn (diffing the lab against what it saw last)."""

    name = "screen"

    def __init__(self, lab: DeviceLab | None = None) -> None:
        self.lab = lab or LAB
        self._seen: dict[tuple[str, str], str] = {}

    def render(self, session_id: str) -> list[str]:
        if self.lab.controlled is None:
            return ["no device under control"]
        host, device = self.lab.controlled
        screens = {ui: node for (dev, ui), node in sorted(self.lab.snapshot().items()) if dev == device}
        shown = ", ".join(f"{ui} on {node}" for ui, node in screens.items()) or "home screen"
        return [f"{device} on {host}: {shown}"]

    def observe(self, session_id: str, turn: Turn) -> list[str]:
        now = self.lab.snapshot()
        changes = [f"{device} {ui}: {self._seen.get((device, ui), 'home')} → {node}"
                   for (device, ui), node in sorted(now.items()) if self._seen.get((device, ui)) != node]  # fmt: skip
        self._seen = now
        return changes
