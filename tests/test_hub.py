"""The hub's ordering guarantees for a subscriber that is still replaying."""

from __future__ import annotations

import json

import pytest

from room.hub import Frame, Hub, Outbox


async def _noop_send(text: str) -> None:
    pass


async def _noop_close(code: int, reason: str) -> None:
    pass


def _outbox() -> Outbox:
    return Outbox(_noop_send, _noop_close, limit=100)


def _waiting(outbox: Outbox) -> list[dict[str, object]]:
    frames: list[Frame] = list(outbox._batch) + list(outbox._queue)
    return [json.loads(f.text) for f in frames]


@pytest.mark.anyio
async def test_state_frames_sent_during_a_replay_arrive_after_it() -> None:
    hub = Hub()
    outbox = _outbox()
    sub = hub.subscribe(1, outbox, member_id=7)
    hub.publish(1, 5, '{"type":"event","seq":5}')
    hub.broadcast(1, '{"type":"members","n":2}')
    hub.broadcast(1, '{"type":"typing","member_id":3}', volatile=True)
    hub.broadcast(1, '{"type":"tasks","n":1}', only_members=[8])  # not for this member
    hub.publish(1, 6, '{"type":"event","seq":6}')
    assert _waiting(outbox) == []  # nothing before the replay ends
    outbox.push('{"type":"batch","upto":5}')  # the replay itself
    hub.go_live(sub, 5)
    assert [f["type"] for f in _waiting(outbox)] == ["batch", "event", "members"]
    assert _waiting(outbox)[1]["seq"] == 6
    hub.broadcast(1, '{"type":"typing","member_id":3}', volatile=True)
    assert _waiting(outbox)[-1]["type"] == "typing"  # live now: even volatile frames go


@pytest.mark.anyio
async def test_a_replay_that_piles_up_too_much_is_cut() -> None:
    hub = Hub()
    outbox = _outbox()
    sub = hub.subscribe(1, outbox, member_id=7)
    sub.buffer_limit = 3
    for n in range(4):
        hub.broadcast(1, f'{{"type":"members","n":{n}}}')
    assert outbox.closed
    assert outbox.close_reason is not None and "replay" in outbox.close_reason
