"""What goes to a WebSocket: frames encoded once, the socket a direct write goes to, the close
codes the server cuts connections with."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Protocol

CLOSE_SLOW_CONSUMER = 1013  # "Try Again Later": the client resumes from its cursor
CLOSE_SIGNED_OUT = 4401  # the session behind the connection ended: sign in again
CLOSE_INTERNAL = 1011  # a frame could not be written: the client resumes from its cursor


class Socket(Protocol):
    """Where a direct write goes: the connection's socket (its ``send``: bytes taken, or
    OSError)."""

    def send(self, data: bytes, /) -> int: ...


# What the transport hands an outbox while its connection can take a direct write (or three
# Nones): the socket, the transport's write buffer (a sized object, empty when nothing waits in
# it: read in place, no call) and the transport's ``write``.
Write = Callable[[bytes], None]
OnLink = Callable[[Socket | None, Sized | None, Write | None], None]
WatchLink = Callable[[OnLink], None]


def text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented RFC 6455 text frame (what a server sends)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x81, n))
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x81, 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 127, n)
    return head + payload


@dataclass(slots=True)
class Frame:
    """A frame encoded once: the JSON text, and its wire bytes made on first use."""

    text: str
    _wire: bytes | None = None

    @property
    def wire(self) -> bytes:
        if self._wire is None:
            self._wire = text_frame(self.text.encode())
        return self._wire
