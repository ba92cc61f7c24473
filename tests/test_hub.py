"""The hub's ordering guarantees for a subscriber that is still replaying."""

from __future__ import annotations

import asyncio
import json

import pytest

from room.infra.frames import Frame
from room.infra.hub import Hub
from room.infra.outbox import Outbox


async def _noop_send(text: str) -> None:
    pass


async def _noop_close(code: int, reason: str) -> None:
    pass


def _outbox(hub: Hub | None = None) -> Outbox:
    return Outbox(_noop_send, _noop_close, limit=100, flusher=hub.flusher if hub else None)


async def _waiting(outbox: Outbox) -> list[dict[str, object]]:
    """Everything waiting for the socket once this loop turn's fan-out ran (no sender task runs
    here, so it stays queued)."""
    await asyncio.sleep(0)
    frames: list[Frame] = list(outbox._batch) + list(outbox._queue)
    return [json.loads(f.text) for f in frames]


@pytest.mark.anyio
async def test_state_frames_sent_during_a_replay_arrive_after_it() -> None:
    hub = Hub()
    outbox = _outbox(hub)
    sub = hub.subscribe(1, outbox, member_id=7)
    hub.publish(1, 5, '{"type":"event","seq":5}')
    hub.broadcast(1, '{"type":"members","n":2}')
    hub.broadcast(1, '{"type":"typing","member_id":3}', volatile=True)
    hub.broadcast(1, '{"type":"tasks","n":1}', only_members=[8])  # not for this member
    hub.publish(1, 6, '{"type":"event","seq":6}')
    assert await _waiting(outbox) == []  # nothing before the replay ends
    outbox.push('{"type":"batch","upto":5}')  # the replay itself
    hub.go_live(sub, 5)
    assert [f["type"] for f in await _waiting(outbox)] == ["batch", "event", "members"]
    assert (await _waiting(outbox))[1]["seq"] == 6
    hub.broadcast(1, '{"type":"typing","member_id":3}', volatile=True)
    assert (await _waiting(outbox))[-1]["type"] == "typing"  # live now: even volatile frames go


@pytest.mark.anyio
async def test_a_replay_that_piles_up_too_much_is_cut() -> None:
    hub = Hub()
    outbox = _outbox(hub)
    sub = hub.subscribe(1, outbox, member_id=7)
    sub.buffer_limit = 3
    for n in range(4):
        hub.broadcast(1, f'{{"type":"members","n":{n}}}')
    assert outbox.closed
    assert outbox.close_reason is not None and "replay" in outbox.close_reason


@pytest.mark.anyio
async def test_wait_sent_follows_the_queue_until_the_socket_takes_it() -> None:
    # The replay reads its next page only once the last one left: wait_sent is that gate.
    sent: list[str] = []
    gate = asyncio.Event()

    async def slow_send(text: str) -> None:
        await gate.wait()
        sent.append(text)

    outbox = Outbox(slow_send, _noop_close, limit=100, direct=lambda wire: False)
    outbox.start()
    try:
        assert await outbox.wait_sent(0.1)  # nothing waiting: at once
        outbox.push('{"type":"batch","page":1}')
        assert not await outbox.wait_sent(0.05)  # the socket did not take it in time
        waiting = asyncio.ensure_future(outbox.wait_sent(5))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        gate.set()
        assert await waiting
        assert sent == ['{"type":"batch","page":1}']

        gate.clear()
        outbox.push('{"type":"batch","page":2}')
        waiting = asyncio.ensure_future(outbox.wait_sent(5))
        await asyncio.sleep(0.01)
        outbox.cut("test")
        assert not await asyncio.wait_for(waiting, 1)  # cut: False, and without waiting out
    finally:
        await outbox.aclose()
