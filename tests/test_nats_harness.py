"""The private nats-server of the cluster tests (tests/support/nats.py): it starts on a free port
of 127.0.0.1, carries a message between two clients, goes away and comes back on the same port,
and leaves nothing behind."""

from __future__ import annotations

import socket

import nats
import pytest

from tests.support.nats import NatsServer

pytestmark = pytest.mark.anyio


def up(server: NatsServer) -> bool:
    return server.running


async def test_a_private_server_carries_messages_and_comes_back(nats_server: NatsServer) -> None:
    assert nats_server.running and nats_server.version
    folder = nats_server.folder
    assert folder is not None and folder.is_dir()
    sub_client = await nats.connect(nats_server.url)
    pub_client = await nats.connect(nats_server.url)
    try:
        sub = await sub_client.subscribe("room.test")
        await sub_client.flush()
        await pub_client.publish("room.test", b"hello")
        got = await sub.next_msg(timeout=5)
        assert got.data == b"hello"
    finally:
        await sub_client.close()
        await pub_client.close()
    port = nats_server.port
    nats_server.stop_for_now()
    assert not up(nats_server)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    nats_server.resume()
    assert nats_server.port == port and up(nats_server)
    again = await nats.connect(nats_server.url)
    await again.close()
    nats_server.stop()
    assert not folder.exists()
