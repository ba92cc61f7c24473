"""An upload's body past h11 (room.infra.transport's ``room.body_into``) through a real server and
raw sockets: whatever the pieces the client sends it in, the stored file is byte for byte the body
(sizes around the 4 KB blocks of direct writes and the 4 MB buffers), the connection goes on to its
next request (kept alive, or pipelined in the same send), a client that stops mid-body leaves no
temporary file, no traceback in the log and a server that serves on, and a chunked body (the
ordinary h11 path) is stored whole."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.server import ServerProcess, Session

MB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("body") / "data"
    proc = ServerProcess(data, env={"ROOM_ATTACHMENT_MAX_BYTES": str(64 * MB)}).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def owner(server: ServerProcess) -> Session:
    return server.login()


def _connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _post_head(server: ServerProcess, who: Session, name: str, extra: str) -> bytes:
    return (
        f"POST /api/projects/1/attachments?name={name} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{server.port}\r\nCookie: room_session={who.cookie}\r\n"
        f"X-CSRF-Token: {who.csrf}\r\n{extra}\r\n"
    ).encode()


def _get_head(server: ServerProcess, who: Session, path: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Cookie: room_session={who.cookie}\r\n\r\n"
    ).encode()


class Reader:
    """Responses read one after another from one connection."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        assert chunk, f"connection closed; had {self.buf[:200]!r}"
        self.buf += chunk

    def response(self) -> tuple[int, bytes]:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(self.buf) < length:
            self._fill()
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(head.split()[1]), body


def _stored(server: ServerProcess, who: Session, attachment: dict[str, Any]) -> bytes:
    sock = _connect(server)
    try:
        sock.sendall(_get_head(server, who, attachment["url"]))
        status, body = Reader(sock).response()
    finally:
        sock.close()
    assert status == 200
    return body


@pytest.mark.parametrize(
    "size", [1, 4095, 4096, 4097, 4 * MB, 4 * MB + 1, 8 * MB - 4096 + 7, 9 * MB + 123]
)
def test_the_stored_file_is_the_body_whatever_pieces_it_came_in(
    server: ServerProcess, owner: Session, size: int
) -> None:
    content = os.urandom(size)
    sock = _connect(server)
    try:
        sock.sendall(_post_head(server, owner, "x.bin", f"Content-Length: {size}\r\n"))
        # Pieces of odd sizes, so no read lines up with a block or a buffer.
        at, step = 0, 1
        while at < size:
            sock.sendall(content[at : at + step])
            at += step
            step = step * 7 + 13 if step < 3 * MB else 5
        status, raw = Reader(sock).response()
    finally:
        sock.close()
    assert status == 201, raw
    attachment = json.loads(raw)["attachment"]
    assert attachment["size"] == size
    assert hashlib.sha256(_stored(server, owner, attachment)).digest() == (
        hashlib.sha256(content).digest()
    )


def test_the_connection_serves_the_next_request_kept_alive_and_pipelined(
    server: ServerProcess, owner: Session
) -> None:
    first, second = os.urandom(5 * MB + 3), os.urandom(300_000)
    sock = _connect(server)
    reader = Reader(sock)
    try:
        sock.sendall(_post_head(server, owner, "a.bin", f"Content-Length: {len(first)}\r\n"))
        sock.sendall(first)
        status, raw = reader.response()
        assert status == 201, raw
        # Kept alive: the next request on the same connection, after the answer.
        sock.sendall(_get_head(server, owner, "/api/me"))
        assert reader.response()[0] == 200
        # Pipelined: a body and the request after it in one send.
        sock.sendall(
            _post_head(server, owner, "b.bin", f"Content-Length: {len(second)}\r\n")
            + second
            + _get_head(server, owner, "/api/me")
        )
        status, raw = reader.response()
        assert status == 201, raw
        me_status, me = reader.response()
    finally:
        sock.close()
    assert me_status == 200 and json.loads(me)["csrf_token"] == owner.csrf
    assert _stored(server, owner, json.loads(raw)["attachment"]) == second


def test_a_client_that_stops_mid_body_leaves_no_temporary_file(
    server: ServerProcess, owner: Session
) -> None:
    tmp = server.data / "attachments" / "tmp"
    sock = _connect(server)
    sock.sendall(_post_head(server, owner, "cut.bin", f"Content-Length: {20 * MB}\r\n"))
    sock.sendall(os.urandom(9 * MB))
    deadline = time.monotonic() + 20
    while not list(tmp.glob("*.part")):  # the upload is under way
        assert time.monotonic() < deadline, "the upload never started"
        time.sleep(0.02)
    sock.close()
    while list(tmp.glob("*.part")):
        assert time.monotonic() < deadline, "the temporary file stayed"
        time.sleep(0.02)
    status, _ = server.request("GET", "/healthz")
    assert status == 200
    assert "ClientDisconnect" not in server.log_path.read_text()  # a quiet line, no traceback


def test_a_chunked_body_is_stored_whole(server: ServerProcess, owner: Session) -> None:
    content = os.urandom(6 * MB + 77)
    sock = _connect(server)
    try:
        sock.sendall(_post_head(server, owner, "c.bin", "Transfer-Encoding: chunked\r\n"))
        at, step = 0, 3
        while at < len(content):
            piece = content[at : at + step]
            sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            at += step
            step = min(step * 5 + 1, 1_500_000)
        sock.sendall(b"0\r\n\r\n")
        status, raw = Reader(sock).response()
    finally:
        sock.close()
    assert status == 201, raw
    assert _stored(server, owner, json.loads(raw)["attachment"]) == content


def test_an_upload_past_the_servers_bound_gets_its_503_while_still_sending(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """One upload holds the only slot (``attachment_concurrent_uploads`` 1) mid-body; another,
    sending its whole body at once, reads a whole 503 ``uploads_busy`` (not a reset), and the
    first then completes."""
    data = tmp_path_factory.mktemp("busy") / "data"
    env = {"ROOM_ATTACHMENT_CONCURRENT_UPLOADS": "1", "ROOM_ATTACHMENT_WAIT_SECS": "0.3"}
    proc = ServerProcess(data, env={**env, "ROOM_ATTACHMENT_MAX_BYTES": str(64 * MB)}).start()
    try:
        who = proc.login()
        first = _connect(proc)
        first.sendall(_post_head(proc, who, "a.bin", f"Content-Length: {4 * MB}\r\n") + b"a" * MB)
        # The first is being received (its first megabyte read) before the second asks.
        deadline = time.monotonic() + 10
        while not list((data / "attachments" / "tmp").glob("*")):
            assert time.monotonic() < deadline, "the first upload never started"
            time.sleep(0.05)
        second = _connect(proc)
        head = _post_head(proc, who, "b.bin", f"Content-Length: {8 * MB}\r\n")
        errors: list[str] = []

        def send() -> None:
            try:
                second.sendall(head + b"b" * (8 * MB))
            except OSError as exc:  # the server may stop reading once it has answered
                errors.append(repr(exc))

        sender = threading.Thread(target=send)
        sender.start()
        status, body = Reader(second).response()
        sender.join(30)
        assert status == 503, body
        error = json.loads(body)["error"]
        assert error["code"] == "uploads_busy" and error["details"]["retry_after_ms"] > 0
        second.close()
        first.sendall(b"a" * (3 * MB))
        status, body = Reader(first).response()
        assert status == 201, body
        assert json.loads(body)["attachment"]["size"] == 4 * MB
        first.close()
    finally:
        proc.stop()
