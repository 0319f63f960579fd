"""A script's command packed for the wire without redis-py's per-argument layers.

A turn's load and record are one script each, of about twenty arguments. redis-py packs a
command by passing every argument through its encoder and checking each for a memoryview
before hiredis packs them: for these commands that was about a tenth of a build's time
in Python. ``packed`` encodes the arguments as that encoder does (text in the
connection's encoding, numbers by ``repr``, bytes as they are) and hands them to hiredis
at once. Where hiredis is not installed, or an argument is of another kind (a bool, which
redis-py refuses, say), it gives None and redis-py packs the command, errors included.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["packed"]


def _hiredis_packer() -> Callable[..., Any] | None:
    try:
        from hiredis import pack_command
    except ImportError:
        return None
    return pack_command


_PACK = _hiredis_packer()


def packed(args: Sequence[Any], encoding: str = "utf-8", errors: str = "strict") -> list[bytes] | None:
    """``args`` (a command's name and arguments) as RESP, in the list
    ``Connection.send_packed_command`` takes; None where redis-py is to pack them."""
    if _PACK is None:
        return None
    out: list[bytes] = []
    for arg in args:
        kind = type(arg)
        if kind is str:
            out.append(arg.encode(encoding, errors))
        elif kind is bytes:
            out.append(arg)
        elif kind is int or kind is float:
            out.append(repr(arg).encode())
        else:  # bool, memoryview, a subclass: as redis-py would have it
            return None
    wire: bytes = _PACK(tuple(out))
    return [wire]
