"""``room.direct_watch`` on the real protocol (issue 18): the hub's cached "write straight to the
socket" flag follows the connection — on after the accept, off while the transport is paused
(above its high-water mark), on again when it drains, off for good once a close frame arrives —
and what is written through it reaches a real client as a valid frame.

And the reading side: a connection keeps reading while fewer than ``READ_HIGH_MESSAGES``
messages (and ``READ_HIGH_BYTES``) wait for the app, stops past either mark however much the peer
sends, and reads again once the app has taken them down to the low marks."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from room.infra.frames import text_frame
from room.infra.transport import (
    READ_HIGH_BYTES,
    READ_HIGH_MESSAGES,
    READ_LOW_BYTES,
    READ_LOW_MESSAGES,
    RoomWebSocketProtocol,
)

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


@contextmanager
def _serving(app: Any) -> Iterator[int]:
    port = _free_port()
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
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def served() -> Iterator[tuple[App, int]]:
    app = App()
    with _serving(app) as port:
        yield app, port


def _on_loop(app: App | Holding, fn: Callable[[], Any]) -> Any:
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


class Holding:
    """One WebSocket endpoint that takes nothing it receives until released, then takes
    everything, noting after each message how many still wait and whether the socket is read,
    and ends at the close."""

    def __init__(self) -> None:
        self.protocol: Any = None
        self.release: asyncio.Event | None = None
        self.received: list[str] = []
        self.after: list[tuple[int, bool]] = []  # (messages still queued, reading) per message
        self.done = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        self.release = asyncio.Event()
        self.protocol = scope["extensions"]["room.direct_watch"].__self__
        await self.release.wait()
        # As room.ws takes them: what is queued without a wait, the rest (and the close) awaited.
        receive_nowait = scope["extensions"]["room.receive_nowait"]
        while True:
            text = receive_nowait()
            if text is None:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message["text"]
            self.received.append(text)
            self.after.append(self.state())
        assert receive_nowait() is None
        self.done.set()

    def state(self) -> tuple[int, bool]:
        return self.protocol.queue.qsize(), self.protocol.transport.is_reading()


@pytest.fixture
def holding() -> Iterator[tuple[Holding, int]]:
    app = Holding()
    with _serving(app) as port:
        yield app, port


@pytest.mark.parametrize("size", [10, 50_000], ids=["by count", "by size"])
def test_a_connection_reads_on_below_its_high_water_mark_and_stops_past_it(
    holding: tuple[Holding, int], size: int
) -> None:
    app, port = holding
    # Frames of ``size`` characters: past the mark after this many (the messages' or the bytes').
    mark = min(READ_HIGH_MESSAGES, -(-READ_HIGH_BYTES // size))
    with connect(f"ws://127.0.0.1:{port}/", compression=None, max_size=None) as client:
        _until(lambda: app.release is not None)
        sent: list[str] = []
        # One frame at a time, each in a read of its own: below the mark the socket is read on.
        for i in range(mark):
            sent.append(f"{i:<{size}}")
            client.send(sent[-1])
            _until(lambda: _on_loop(app, app.state)[0] == len(sent))
            assert _on_loop(app, app.state) == (len(sent), len(sent) < mark)
        # Past it, whatever more the peer sends waits in the socket buffers, not in the server.
        sent += [f"more {i:<{size}}" for i in range(200 if size < 1000 else 3)]
        for text in sent[mark:]:
            client.send(text)
        time.sleep(0.3)  # room for a server that would read on (none of it must be queued)
        assert _on_loop(app, app.state) == (mark, False)

        # Released: the app takes the messages; the socket is read again at the low marks, and
        # every message arrives once, in order.
        assert app.release is not None
        _on_loop(app, app.release.set)
        _until(lambda: len(app.received) == len(sent))
        assert app.received == sent
    assert app.done.wait(10)
    low = min(READ_LOW_MESSAGES, READ_LOW_BYTES // size)
    assert app.after[: mark - low] == [(mark - n, False) for n in range(1, mark - low)] + [
        (low, True)
    ]


def test_queued_frames_are_taken_without_a_wait_and_the_close_after_them(
    holding: tuple[Holding, int],
) -> None:
    app, port = holding
    with connect(f"ws://127.0.0.1:{port}/", compression=None) as client:
        _until(lambda: app.release is not None)
        for text in ("a", "b", "c"):
            client.send(text)
    # The close handshake is the protocol's: done while the app still holds its three frames.
    _until(lambda: _on_loop(app, app.state)[0] >= 4)  # and the disconnect behind them
    assert app.release is not None
    _on_loop(app, app.release.set)
    assert app.done.wait(10)
    assert app.received == ["a", "b", "c"]  # then the disconnect: taken once, by receive
