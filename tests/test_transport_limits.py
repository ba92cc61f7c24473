"""The transport against clients that misbehave on purpose (issue 14, item 22), over a real server
and raw sockets: a reader that stops reading is cut with 1013 and its connection released, a
client that never finishes its headers is closed, a text frame that is not UTF-8 closes with 1007
and one quiet log line. Waits are bounded; the settings make them short."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server import ServerProcess


@pytest.fixture
def quick(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data",
        env={"ROOM_WS_STALL_SECS": "2", "ROOM_HEADER_TIMEOUT_SECS": "1"},
    ).start()
    try:
        yield server
    finally:
        server.stop()


def _until(check: Callable[[], bool], secs: float = 20.0) -> None:
    deadline = time.monotonic() + secs
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _health(server: ServerProcess) -> dict[str, Any]:
    status, data = server.request("GET", "/healthz")
    assert status == 200
    return dict(data)


def _ws(
    server: ServerProcess, cookie: str | None = None, rcvbuf: int | None = None
) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", server.port))
    key = base64.b64encode(os.urandom(16)).decode()
    extra = f"Cookie: room_session={cookie}\r\n" if cookie else ""
    sock.sendall(
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: {server.origin}\r\n"
        f"{extra}\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _send_text(sock: socket.socket, payload: bytes) -> None:
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        header = bytes([0x81, 0x80 | len(payload)])
    else:
        header = bytes([0x81, 0x80 | 126]) + struct.pack("!H", len(payload))
    sock.sendall(header + mask + masked)


def _read_all(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything until the server closes; True if it ended with a reset (dropped)."""
    data = bytearray()
    try:
        while chunk := sock.recv(1 << 16):
            data += chunk
    except ConnectionResetError:
        return bytes(data), True
    return bytes(data), False


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at + 2 <= len(data):
        opcode, size = data[at] & 0x0F, data[at + 1] & 0x7F
        at += 2
        if size == 126:
            size = struct.unpack("!H", data[at : at + 2])[0]
            at += 2
        elif size == 127:
            size = struct.unpack("!Q", data[at : at + 8])[0]
            at += 8
        if at + size > len(data):
            break
        out.append((opcode, data[at : at + size]))
        at += size
    return out


def _close_code(frames: list[tuple[int, bytes]]) -> int | None:
    closes = [payload for opcode, payload in frames if opcode == 8]
    return struct.unpack("!H", closes[-1][:2])[0] if closes else None


def test_a_text_frame_that_is_not_utf8_closes_1007_with_one_quiet_line(
    quick: ServerProcess,
) -> None:
    for _ in range(3):
        sock = _ws(quick)
        _send_text(sock, b"\xff\xfe{}")
        data, _reset = _read_all(sock)
        sock.close()
        assert _close_code(_frames(data)) == 1007
    assert "Traceback" not in quick.log and "Invalid UTF-8" not in quick.log


def test_a_client_that_never_finishes_its_headers_is_closed(quick: ServerProcess) -> None:
    socks = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", quick.port), timeout=10)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    # A header line now and then, never the blank line that ends them (slowloris).
    closed: set[int] = set()
    deadline = time.monotonic() + 15
    while len(closed) < len(socks):
        assert time.monotonic() < deadline, f"{len(socks) - len(closed)} still open"
        for index, sock in enumerate(socks):
            if index in closed:
                continue
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                sock.setblocking(False)
                if sock.recv(1) == b"":
                    closed.add(index)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(index)
            finally:
                sock.setblocking(True)
        time.sleep(0.2)
    for sock in socks:
        sock.close()
    # A well-behaved client on a kept-alive connection is not affected.
    with socket.create_connection(("127.0.0.1", quick.port), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert _response(sock).startswith(b"HTTP/1.1 200")
            time.sleep(0.6)


def _response(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers and a Content-Length body), however it was segmented."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    while len(body) < length:
        body += sock.recv(4096)
    return data


def test_a_reader_that_stops_is_cut_with_1013_and_its_connection_released(
    quick: ServerProcess,
) -> None:
    owner = quick.login()
    project = int(quick.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
    baseline = _health(quick)["connections"]
    readers = []
    for _ in range(2):
        sock = _ws(quick, owner.cookie, rcvbuf=4096)
        _send_text(sock, json.dumps({"type": "subscribe", "project_id": project}).encode())
        readers.append(sock)
    _until(lambda: _health(quick)["subscribers"] == 2)
    # Neither socket reads from here on; the room keeps talking.
    body = "数据" * 12_000
    sent = 0
    while _health(quick)["subscribers"] > 0:
        assert sent < 400, "the stalled readers were never cut"
        status, _ = quick.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": f"{sent} {body}", "client_txn_id": uuid.uuid4().hex},
            headers={"X-CSRF-Token": owner.csrf}, cookie=owner.cookie,
        )  # fmt: skip
        assert status in (200, 201)
        sent += 1
    # The first reader wakes up within the grace: it reads what was buffered, then the 1013.
    first, _reset = _read_all(readers[0])
    frames = _frames(first)
    assert _close_code(frames) == 1013
    reason = next(p for op, p in frames if op == 8)[2:].decode()
    assert reason.startswith("slow consumer")
    # The second never reads again: its connection is dropped, not kept forever.
    _until(lambda: _health(quick)["connections"] == baseline)
    with contextlib.suppress(OSError):
        _read_all(readers[1])
    for sock in readers:
        sock.close()
