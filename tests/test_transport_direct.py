"""``room.direct_watch`` on the real protocol (issue 18): the hub's cached "write straight to the
socket" flag follows the connection — on after the accept, off while the transport is paused
(above its high-water mark), on again when it drains, off for good once a close frame arrives —
and what is written through it reaches a real client as a valid frame."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from room.hub import text_frame
from room.transport import RoomWebSocketProtocol

Link = tuple[Any, Any, Any]


class App:
    """One WebSocket endpoint that records what its watcher is told."""

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.protocol: Any = None
        self.done = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        watch = scope["extensions"]["room.direct_watch"]
        self.protocol = watch.__self__
        watch(lambda *link: self.links.append(link))
        while (await receive())["type"] != "websocket.disconnect":
            pass
        self.done.set()

    def linked(self) -> list[bool]:
        return [link[0] is not None for link in self.links]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served() -> Iterator[tuple[App, int]]:
    app, port = App(), _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, ws=RoomWebSocketProtocol,
        ws_per_message_deflate=False, log_level="warning", lifespan="off",
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield app, port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _on_loop(app: App, fn: Callable[[], Any]) -> Any:
    loop: asyncio.AbstractEventLoop = app.protocol.loop

    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=5)


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_the_direct_path_follows_the_connection_and_writes_valid_frames(
    served: tuple[App, int],
) -> None:
    app, port = served
    with connect(f"ws://127.0.0.1:{port}/", compression=None) as client:
        _until(lambda: bool(app.links))
        assert app.linked() == [True]  # open after the accept
        sock, buffer, _write = app.links[0]
        assert _on_loop(app, lambda: len(buffer)) == 0  # the transport's own, empty
        assert buffer is app.protocol.transport._buffer

        # What goes through the socket's send is one whole frame on the client's side.
        assert _on_loop(app, lambda: sock.send(text_frame(b'{"type":"direct"}'))) > 0
        assert client.recv(timeout=5) == '{"type":"direct"}'

        # Above the transport's high-water mark: off; drained: on again.
        _on_loop(app, app.protocol.pause_writing)
        assert app.linked() == [True, False]
        _on_loop(app, app.protocol.resume_writing)
        assert app.linked() == [True, False, True]

        client.close()  # the close handshake: off
        assert app.done.wait(10)
    assert app.linked() == [True, False, True, False]


def test_a_connection_closed_by_the_server_is_off_at_once(served: tuple[App, int]) -> None:
    app, port = served
    with connect(f"ws://127.0.0.1:{port}/", compression=None) as client:
        _until(lambda: bool(app.links))
        _on_loop(app, lambda: app.protocol.cut(1013, "slow consumer", 1.0))
        assert app.linked() == [True, False]
        with pytest.raises(ConnectionClosed) as closed:
            client.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
