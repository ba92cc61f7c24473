"""uvicorn's sans-I/O websockets protocol, plus a direct write path for pre-framed text.

Fan-out to a thousand sockets cannot afford a coroutine, an ASGI message dict and a frame
serialisation per socket. This subclass offers the ASGI app one extension,
``scope["extensions"]["room.direct_write"]``: a function that writes an already-framed text
frame straight to the transport when the connection is open and writable, and returns False
otherwise (the caller then queues it and sends it the ordinary ASGI way). Everything else —
handshake, pings, close, inbound frames and their limits — is uvicorn's and websockets' own.

If uvicorn changes shape, the extension is simply absent and the hub falls back to ASGI sends.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State


def offers_direct_write(protocol: type[Any] | str) -> bool:
    """Whether a server running this websocket protocol (uvicorn's ``ws`` option: a class or a
    name) gives its connections the direct write path."""
    return isinstance(protocol, type) and issubclass(protocol, RoomWebSocketProtocol)


class RoomWebSocketProtocol(WebSocketsSansIOProtocol):
    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions["room.direct_write"] = self.direct_write

    _direct_open = False  # handshake done and accepted: checked once

    def direct_write(self, wire: bytes) -> bool:
        # Called once per connection per loop turn that has frames for it: few, cheap checks.
        if self.close_sent or self.disconnected or not self.writable.is_set():
            return False
        if not self._direct_open:
            if not self.handshake_complete or self.initial_response is not None:
                return False
            self._direct_open = True
        transport = self.transport
        if self.conn.state is not State.OPEN or transport.is_closing():
            return False
        transport.write(wire)
        return True
