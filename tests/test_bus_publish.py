"""room.infra.bus.Bus.send on a private nats-server: a hint is queued in the caller's turn of
the loop and written to the bus before anything that turn schedules after it (the node's own
fan-out, room.infra.fanout.Flusher), so the other nodes hear of an event while this node is
still writing it to its own sockets (docs/cluster.md, "Benchmark"); a publish that has to wait
(nats-py's buffer or flush queue full) still completes, in order, in a task."""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import orjson
from nats.aio.msg import Msg

from room.infra.bus import Bus, _run_now
from tests.support.nats import NatsServer

WAIT_SECS = 10.0


async def _connected(url: str) -> Bus:
    bus = Bus(url, "node-a", "c0ffee")
    bus.start()
    up = asyncio.Event()
    bus.on_reconnect = up.set  # told once it is connected (the relay's sweep, in a node)
    async with asyncio.timeout(WAIT_SECS):
        await up.wait()
    return bus


async def _written_before_the_next_callbacks(url: str) -> None:
    bus = await _connected(url)
    listener = await nats.connect(url)
    heard: list[dict[str, Any]] = []
    got = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        heard.append(orjson.loads(msg.data))
        if len(heard) == 3:
            got.set()

    try:
        await listener.subscribe("room.c0ffee.p.7", cb=on_msg)
        await listener.flush()
        nc = bus._nc
        assert nc is not None
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, int, int]] = []
        before = bus.published  # its first heartbeat
        for seq in (1, 2, 3):  # three commits of one turn, then its fan-out
            bus.send(7, {"k": "e", "s": seq, "f": "{}"})
            seen.append(("sent", bus.published - before, nc.pending_data_size))
        # The node's own fan-out of this turn is scheduled after its hints (Flusher.fan_out).
        loop.call_soon(
            lambda: seen.append(("fan-out", bus.published - before, nc.pending_data_size))
        )
        async with asyncio.timeout(WAIT_SECS):
            await got.wait()
        # Each publish ran in the caller's turn (counted at once, its bytes in nats-py's
        # buffer); by the time the fan-out runs, the flusher has written all three.
        assert [s[:2] for s in seen] == [("sent", 1), ("sent", 2), ("sent", 3), ("fan-out", 3)]
        assert seen[2][2] > 0
        assert seen[3][2] == 0
        assert [h["s"] for h in heard] == [1, 2, 3]
    finally:
        await listener.close()
        await bus.close()


def test_a_hint_is_written_before_the_turns_own_fan_out(nats_server: NatsServer) -> None:
    asyncio.run(_written_before_the_next_callbacks(nats_server.url))


async def _suspending() -> None:
    done: list[str] = []
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def publish(name: str) -> None:
        done.append(f"{name} queued")
        got = await gate  # nats-py waiting for room in its flush queue
        await asyncio.sleep(0)  # a bare yield
        done.append(f"{name} {got}")

    _run_now(publish("one"))
    assert done == ["one queued"]  # ran at once, up to where it waits
    _run_now(publish("two"))
    assert done == ["one queued", "two queued"]
    gate.set_result("written")
    for _ in range(5):
        await asyncio.sleep(0)
    assert done == ["one queued", "two queued", "one written", "two written"]


def test_a_publish_that_has_to_wait_completes_in_a_task() -> None:
    asyncio.run(_suspending())
