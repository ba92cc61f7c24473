"""The cluster tests' TCP proxy (tests/support/proxy.py) against a small echo server: it
forwards, a cut resets the open connections and refuses new ones, a restore forwards again, and
a delay holds the bytes back without losing or reordering any."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from tests.support.proxy import LinkProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionResetError:  # the proxy's cut
            pass


@pytest.fixture
def echo() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def connect(proxy: LinkProxy) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    return conn


def exchange(conn: socket.socket, payload: bytes) -> bytes:
    conn.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = conn.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_forwards_cuts_refuses_and_restores(echo: int) -> None:
    with LinkProxy("127.0.0.1", echo) as proxy:
        assert proxy.url(f"nats://127.0.0.1:{echo}") == f"nats://127.0.0.1:{proxy.port}"
        assert proxy.url(f"postgresql://u@127.0.0.1:{echo}/db") == (
            f"postgresql://u@127.0.0.1:{proxy.port}/db"
        )
        first = connect(proxy)
        assert exchange(first, b"hello") == b"hello"
        assert proxy.open_links == 1

        proxy.cut()
        # The open connection is reset: its next read fails or sees the end.
        with pytest.raises(OSError):
            first.sendall(b"more")
            if first.recv(10) == b"":
                raise ConnectionResetError("closed")
        # A new one is accepted at the TCP level and reset at once: no byte gets through.
        with pytest.raises(OSError), connect(proxy) as refused:
            refused.sendall(b"anyone?")
            if refused.recv(10) == b"":
                raise ConnectionResetError("closed")
        assert proxy.refused >= 1 and proxy.open_links == 0

        proxy.restore()
        again = connect(proxy)
        assert exchange(again, b"back") == b"back"
        for conn in (first, again):
            conn.close()


def test_a_delay_holds_the_bytes_back_and_keeps_their_order(echo: int) -> None:
    with LinkProxy("127.0.0.1", echo) as proxy:
        conn = connect(proxy)
        proxy.delay(0.3)
        conn.sendall(b"slow")
        conn.settimeout(0.05)  # a lower bound only: the echo cannot come back before 0.6 s
        with pytest.raises(TimeoutError):
            conn.recv(10)
        conn.settimeout(5)
        payload = bytes(range(256)) * 2000  # many chunks: order and completeness
        conn.sendall(payload)
        got = b""
        while len(got) < len(b"slow") + len(payload):
            got += conn.recv(65536)
        assert got == b"slow" + payload
        proxy.restore()
        assert exchange(conn, b"fast") == b"fast"
        conn.close()
