"""Floor for fan-out: the cheapest broadcast Python can do here, with no framework at all.

Run as ``python -m benchlib.floor --port P``, pinned to the server core by the caller. Raw
non-blocking sockets on an asyncio loop: the WebSocket handshake by hand, client frames unmasked
by hand, and for each ``send`` one ``message`` frame (shaped like the server's, encoded and framed
once) written with one ``socket.send`` per subscriber, then an ``ack``. Nothing is stored, nothing
is checked. What this reaches is the machine's limit for one process on one core — the kernel's
cost of a loopback TCP send dominates — and so a bound on what any Python server can do here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct

from benchlib.shapes import ack_frame, message_frame
from benchlib.wsraw import accept_key


def server_frame(payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, n) + payload
    return struct.pack("!BBQ", 0x81, 127, n) + payload


class Broadcaster:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.subscribers: list[socket.socket] = []
        self.seq = 0
        self.short_writes = 0

    async def serve(self, port: int) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(4096)
        listener.setblocking(False)
        while True:
            conn, _ = await self.loop.sock_accept(listener)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.loop.create_task(self.handle(conn))

    async def handle(self, conn: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await self.loop.sock_recv(conn, 65536)
            if not chunk:
                conn.close()
                return
            head += chunk
        request, _, buf = head.partition(b"\r\n\r\n")
        key = b""
        for line in request.split(b"\r\n"):
            if line.lower().startswith(b"sec-websocket-key:"):
                key = line.split(b":", 1)[1].strip()
        accept = accept_key(key)
        await self.loop.sock_sendall(
            conn,
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n",
        )
        data = bytearray(buf)
        while True:
            while True:
                frame = _take_frame(data)
                if frame is None:
                    break
                self.on_frame(conn, frame)
            chunk = await self.loop.sock_recv(conn, 65536)
            if not chunk:
                if conn in self.subscribers:
                    self.subscribers.remove(conn)
                conn.close()
                return
            data += chunk

    def on_frame(self, conn: socket.socket, payload: bytes) -> None:
        frame = json.loads(payload)
        kind = frame.get("type")
        if kind == "subscribe":
            self.subscribers.append(conn)
            conn.send(server_frame(b'{"type":"subscribed","head_seq":%d}' % self.seq))
        elif kind == "send":
            self.seq += 1
            txn = frame["client_txn_id"]
            text = message_frame(self.seq, frame["project_id"], frame["body"], txn)
            wire = server_frame(text.encode())
            for sub in self.subscribers:
                try:
                    if sub.send(wire) < len(wire):
                        self.short_writes += 1
                except BlockingIOError:
                    self.short_writes += 1
            conn.send(server_frame(ack_frame(txn, self.seq).encode()))


def _take_frame(data: bytearray) -> bytes | None:
    """Pop one complete client text frame from ``data`` (unmasking it), or None."""
    if len(data) < 2:
        return None
    n, off = data[1] & 0x7F, 2
    if n == 126:
        if len(data) < 4:
            return None
        n, off = int.from_bytes(data[2:4], "big"), 4
    elif n == 127:
        if len(data) < 10:
            return None
        n, off = int.from_bytes(data[2:10], "big"), 10
    masked = data[1] & 0x80
    key = bytes(data[off : off + 4]) if masked else b""
    off += 4 if masked else 0
    if len(data) < off + n:
        return None
    payload = bytes(data[off : off + n])
    del data[: off + n]
    if masked and key != b"\0\0\0\0":
        mask = (key * (n // 4 + 1))[:n]
        payload = (int.from_bytes(payload, "big") ^ int.from_bytes(mask, "big")).to_bytes(n, "big")
    return payload


async def main_async(port: int) -> None:
    await Broadcaster().serve(port)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main_async(parser.parse_args().port))


if __name__ == "__main__":
    main()
