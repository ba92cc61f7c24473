"""A minimal WebSocket client on raw non-blocking sockets, cheap enough to be a load generator.

The ``websockets`` client costs tens of µs per frame; this one costs a few. It does only what the
bench needs: the HTTP Upgrade handshake (checking ``Sec-WebSocket-Accept`` as a browser does), masked client text frames (a zero mask key: valid
framing, and the payload is copied unchanged), unmasked server frames (text, ping → pong,
close), and nothing else: no fragmentation, no extensions, no UTF-8 check. Callers get each text
payload as ``bytes`` with the time it was read and look for what they need with ``bytes.find``.

Each socket is watched with ``loop.add_reader`` (one callback per readable socket, no transport
or protocol objects in between). With ``timestamps=True`` the socket also asks the kernel for
``SO_TIMESTAMPNS``: every read then carries the ``CLOCK_REALTIME`` instant the data reached the
socket, which separates the server's latency from the generator's own queueing.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import struct
import time
from collections.abc import Callable

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux value; Python does not export it
READ_BYTES = 1 << 18
_ANC_SPACE = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("@qq")

OP_TEXT, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x8, 0x9, 0xA
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3

# on_text(payload, read_monotonic_ns, arrival_realtime_ns or 0)
TextHandler = Callable[[bytes, int, int], None]


class HandshakeError(Exception):
    pass


def accept_key(key: str | bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` a server must answer to ``Sec-WebSocket-Key: key``."""
    raw = key.encode() if isinstance(key, str) else key
    return base64.b64encode(hashlib.sha1(raw + GUID).digest())


def check_accept(head: bytes, key: str) -> None:
    """Refuse a ``101`` whose ``Sec-WebSocket-Accept`` is not the one RFC 6455 asks for (a
    browser would drop the connection)."""
    got = b""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-accept":
            got = value.strip()
    if got != accept_key(key):
        raise HandshakeError(f"bad Sec-WebSocket-Accept {got!r}, expected {accept_key(key)!r}")


def client_frame(payload: bytes, opcode: int = OP_TEXT) -> bytes:
    """A masked, unfragmented client frame with an all-zero mask key (payload unchanged)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


class WsClient:
    """One connection. ``on_text`` is called for every text frame the server sends."""

    def __init__(self, on_text: TextHandler, *, timestamps: bool = False) -> None:
        self.on_text = on_text
        self.timestamps = timestamps
        self.sock: socket.socket | None = None
        self.closed = False
        self.close_code: int | None = None
        self.frames_in = 0
        self.bytes_in = 0
        self._buf = bytearray()
        self._need = 0
        self._out = bytearray()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed_waiter: asyncio.Future[None] | None = None

    async def connect(
        self, host: str, port: int, path: str = "/ws", headers: dict[str, str] | None = None
    ) -> None:
        loop = self._loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.timestamps:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setblocking(False)
        await loop.sock_connect(sock, (host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        await loop.sock_sendall(sock, ("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await loop.sock_recv(sock, 65536)
            if not chunk:
                raise HandshakeError(f"connection closed during handshake: {head[:200]!r}")
            head += chunk
        status, _, rest = head.partition(b"\r\n\r\n")
        if not status.startswith(b"HTTP/1.1 101"):
            sock.close()
            raise HandshakeError(status.split(b"\r\n", 1)[0].decode(errors="replace"))
        try:
            check_accept(status, key)
        except HandshakeError:
            sock.close()
            raise
        self.sock = sock
        self._closed_waiter = loop.create_future()
        loop.add_reader(sock.fileno(), self._readable)
        if rest:
            self._feed(rest, time.monotonic_ns(), 0)

    # -- writing ---------------------------------------------------------------------------------

    def send_text(self, payload: bytes) -> None:
        self.write(client_frame(payload))

    def write(self, data: bytes) -> None:
        """Write pre-framed bytes; what the socket refuses now is written when it drains."""
        if self.closed or self.sock is None:
            return
        if self._out:
            self._out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._lost()
            return
        if sent < len(data):
            self._out += data[sent:]
            assert self._loop is not None
            self._loop.add_writer(self.sock.fileno(), self._writable)

    def _writable(self) -> None:
        assert self.sock is not None and self._loop is not None
        try:
            sent = self.sock.send(self._out)
        except BlockingIOError:
            return
        except OSError:
            self._lost()
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self.sock.fileno())

    # -- reading ---------------------------------------------------------------------------------

    def _readable(self) -> None:
        sock = self.sock
        assert sock is not None
        arrival = 0
        try:
            if self.timestamps:
                data, anc, _flags, _addr = sock.recvmsg(READ_BYTES, _ANC_SPACE)
                for level, kind, raw in anc:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = _TIMESPEC.unpack(raw[: _TIMESPEC.size])
                        arrival = sec * 1_000_000_000 + nsec
            else:
                data = sock.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            self._lost()
            return
        if not data:
            self._lost()
            return
        self.bytes_in += len(data)
        self._feed(data, time.monotonic_ns(), arrival)

    def _feed(self, data: bytes, now: int, arrival: int) -> None:
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:  # a large frame still arriving: no re-parse, no copy
                return
            data = bytes(buf)
            buf.clear()
        pos, end = 0, len(data)
        need = 0
        while end - pos >= 2:
            b0, b1 = data[pos], data[pos + 1]
            n, off = b1 & 0x7F, pos + 2
            if n == 126:
                if end - pos < 4:
                    break
                n, off = (data[pos + 2] << 8) | data[pos + 3], pos + 4
            elif n == 127:
                if end - pos < 10:
                    break
                n, off = int.from_bytes(data[pos + 2 : pos + 10], "big"), pos + 10
            if b1 & 0x80:  # a masked server frame is a protocol error; the bench never sees one
                raise ValueError("server frames must not be masked")
            if off + n > end:
                need = off + n - pos
                break
            payload = data[off : off + n]
            pos = off + n
            opcode = b0 & 0x0F
            self.frames_in += 1
            if opcode == OP_TEXT:
                self.on_text(payload, now, arrival)
            elif opcode == OP_PING:
                self.write(client_frame(payload, OP_PONG))
            elif opcode == OP_CLOSE:
                self.close_code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self._lost()
                return
        if pos < end:
            buf += data[pos:]
            self._need = need

    # -- closing ---------------------------------------------------------------------------------

    def _lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.sock is not None and self._loop is not None:
            fd = self.sock.fileno()
            if fd >= 0:
                self._loop.remove_reader(fd)
                self._loop.remove_writer(fd)
            self.sock.close()
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def close(self) -> None:
        """Send a close frame (best effort) and drop the socket without waiting for the echo."""
        if not self.closed and self.sock is not None:
            try:
                self.sock.send(client_frame(struct.pack("!H", 1000), OP_CLOSE))
            except OSError:
                pass
        self._lost()

    async def wait_closed(self) -> None:
        if self._closed_waiter is not None:
            await self._closed_waiter
