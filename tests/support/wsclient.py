"""A small test client over a real ``websockets`` connection."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from websockets.asyncio.client import ClientConnection, connect

if TYPE_CHECKING:
    from tests.support.server import ServerProcess

Frame = dict[str, Any]


class Client:
    # When a test uses the ``clients`` fixture, every client opened is dropped at its end.
    registry: list[Client] | None = None

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[Frame] = []  # every frame received, batches expanded
        if Client.registry is not None:
            Client.registry.append(self)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        cookie: str | None = None,
        token: str | None = None,
        origin: str | None = None,
        **kwargs: Any,
    ) -> Client:
        headers = {}
        if cookie:
            headers["Cookie"] = f"room_session={cookie}"
        if token:
            headers["Authorization"] = f"Bearer {token}"
        ws = await connect(
            url,
            additional_headers=headers,
            origin=origin,  # type: ignore[arg-type]
            compression=None,
            max_size=None,
            open_timeout=5,
            **kwargs,
        )
        return cls(ws)

    async def send(self, frame: Frame | str) -> None:
        await self.ws.send(
            frame if isinstance(frame, str) else json.dumps(frame, ensure_ascii=False)
        )

    async def recv(self, timeout: float = 5.0) -> Frame:
        with anyio.fail_after(timeout):
            raw = await self.ws.recv()
        frame = json.loads(raw)
        if frame.get("type") == "batch":
            self.frames.extend(frame["frames"])
        self.frames.append(frame)
        return frame

    async def wait_for(
        self, predicate: Callable[[Frame], bool] | str, timeout: float = 5.0
    ) -> Frame:
        """Receive until a frame matches (a type name or a predicate); earlier ones are kept."""
        check = (lambda f: f.get("type") == predicate) if isinstance(predicate, str) else predicate
        with anyio.fail_after(timeout):
            while True:
                frame = await self.recv(timeout)
                if check(frame):
                    return frame

    def messages(self) -> list[Frame]:
        return [f for f in self.frames if f.get("type") == "message"]

    async def close(self) -> None:
        await self.ws.close()

    def drop(self) -> None:
        """End the connection without a closing handshake (a test is over). ``close`` would wait
        up to its 10 s close timeout when frames the test never read fill the client's queue:
        reading stops, so it cannot see the server hang up."""
        transport = self.ws.transport
        if transport is not None and not transport.is_closing():
            transport.abort()


async def subscribed(
    server: ServerProcess,
    cookie: str,
    project_id: int,
    *,
    answers: tuple[str, ...] = ("subscribed",),
    **sub: Any,
) -> Client:
    """A client of ``server`` signed in with ``cookie``, subscribed to ``project_id`` (``sub``:
    the subscribe frame's other fields) once the server's answer is one of ``answers``."""
    client = await Client.open(server.ws_url, cookie=cookie, origin=server.origin)
    await client.wait_for("hello")
    await client.send({"type": "subscribe", "project_id": project_id, **sub})
    await client.wait_for(lambda f: f["type"] in answers)
    return client
