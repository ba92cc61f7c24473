"""The fan-out pass (issue 18): one send straight to the socket in the common case, and the
outbox path — with its order and its slow-reader bound — whenever anything else is going on.

The transport side is a recording stand-in here (what ``room.infra.transport`` hands an outbox
through ``room.direct_watch``); tests/test_transport_direct.py checks the real protocol's side.
"""

from __future__ import annotations

import asyncio
import json
import random
import struct
from typing import NamedTuple

import pytest

from room.infra.fanout import Subscription
from room.infra.frames import CLOSE_SLOW_CONSUMER, Frame
from room.infra.hub import Hub
from room.infra.outbox import Outbox

pytestmark = pytest.mark.anyio


Log = list[tuple[str, str, bytes]]  # (connection, path, bytes), in the order they left


class Wire:
    """One connection's socket and transport as the hub sees them, recording in one stream
    everything that left, by which path."""

    def __init__(self, log: Log, name: str) -> None:
        self.log = log
        self.name = name
        self.buffer = bytearray()  # what the transport holds unsent
        self.accept: int | None = None  # bytes the socket takes per send (None: all)
        self.raises: BaseException | None = None
        self.writable = True  # for the medium path (``room.direct_write``)
        self.queued: list[str] = []  # frames the sender task would send the ASGI way
        self.on_link: object = None
        self.hook: list[object] = []  # called before a send (shared by the wires of a test)
        self.closed_with: int | None = None

    def send(self, wire: bytes) -> int:
        for hook in self.hook:
            hook(self)  # type: ignore[operator]
        if self.raises is not None:
            raise self.raises
        took = len(wire) if self.accept is None else min(self.accept, len(wire))
        self.log.append((self.name, "send", wire[:took]))
        return took

    def write(self, wire: bytes) -> None:
        self.log.append((self.name, "write", wire))

    def direct(self, wire: bytes) -> bool:
        if not self.writable:
            return False
        self.log.append((self.name, "direct", wire))
        return True

    def watch(self, on_link: object) -> None:
        self.on_link = on_link
        on_link(self, self.buffer, self.write)  # type: ignore[operator]

    def unlink(self) -> None:
        self.on_link(None, None, None)  # type: ignore[operator]

    async def send_text(self, text: str) -> None:
        self.queued.append(text)

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = code


def _outbox(hub: Hub, wire: Wire, limit: int = 100) -> Outbox:
    return Outbox(
        wire.send_text, wire.close, limit=limit, direct=wire.direct, flusher=hub.flusher,
        name=wire.name, watch=wire.watch,
    )  # fmt: skip


def _live(hub: Hub, outbox: Outbox, project: int = 1, member: int = 7) -> None:
    hub.go_live(hub.subscribe(project, outbox, member_id=member), 0)


def _frames(data: bytes) -> list[dict[str, object]]:
    out, at = [], 0
    while at < len(data):
        assert data[at] == 0x81
        size, at = data[at + 1], at + 2
        if size == 126:
            size, at = struct.unpack("!H", data[at : at + 2])[0], at + 2
        out.append(json.loads(data[at : at + size]))
        at += size
    return out


def _received(log: Log, name: str) -> list[dict[str, object]]:
    """What the client at ``name`` reads, in order, whatever path each byte took."""
    return _frames(b"".join(wire for who, _, wire in log if who == name))


def _event(seq: int) -> str:
    return f'{{"type":"message","seq":{seq}}}'


async def _turn() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_a_live_idle_subscriber_gets_the_turn_in_one_send_to_its_socket() -> None:
    hub, log = Hub(), Log()
    wires = [Wire(log, f"c{i}") for i in range(3)]
    outboxes = [_outbox(hub, w) for w in wires]
    for outbox in outboxes:
        _live(hub, outbox)
    hub.publish(1, 1, _event(1))
    hub.publish(1, 2, _event(2))
    hub.broadcast(1, '{"type":"members","n":3}')
    assert log == []  # nothing before the end of the turn
    await _turn()
    # One send per connection with the whole turn, nothing through the outbox.
    assert sorted(who for who, path, _ in log if path == "send") == ["c0", "c1", "c2"]
    assert {path for _, path, _ in log} == {"send"}
    for wire in wires:
        assert [f.get("seq", f["type"]) for f in _received(log, wire.name)] == [1, 2, "members"]
    assert all(o.send_now is not None and not o._batch and not o._queue for o in outboxes)


async def test_a_frame_pushed_to_one_connection_keeps_its_place_among_published_ones() -> None:
    hub, log = Hub(), Log()
    sender, other = Wire(log, "sender"), Wire(log, "other")
    a, b = _outbox(hub, sender), _outbox(hub, other)
    _live(hub, a)
    _live(hub, b)
    hub.publish(1, 5, _event(5))
    a.push('{"type":"ack","seq":5}')  # the sender's ack, after its message's event
    hub.publish(1, 6, _event(6))
    hub.broadcast(1, '{"type":"delivery","message_id":6}')
    await _turn()
    assert [f["type"] for f in _received(log, "sender")] == [
        "message",
        "ack",
        "message",
        "delivery",
    ]
    assert [f.get("seq") for f in _received(log, "sender")][:3] == [5, 5, 6]
    # The sender's turn went through its outbox, in one write; the other's is one send.
    assert [path for who, path, _ in log if who == "sender"] == ["direct"]
    assert [path for who, path, _ in log if who == "other"] == ["send"]
    # Idle again: the next turn is a direct send for both.
    hub.publish(1, 7, _event(7))
    await _turn()
    assert [path for who, path, _ in log if who == "sender"] == ["direct", "send"]


async def test_frames_queued_for_a_full_socket_stay_ahead_of_later_ones() -> None:
    hub, log = Hub(), Log()
    wire = Wire(log, "c")
    outbox = _outbox(hub, wire)
    _live(hub, outbox)
    wire.unlink()  # the transport paused writing: no direct path
    wire.writable = False
    hub.publish(1, 1, _event(1))
    await _turn()
    assert [json.loads(f.text)["seq"] for f in outbox._queue] == [1]
    wire.watch(wire.on_link)  # writable again, but the queue is not empty
    wire.writable = True
    assert outbox.send_now is None
    hub.publish(1, 2, _event(2))
    outbox.push('{"type":"pong"}')
    await _turn()
    assert log == []  # nothing overtook the queue: the sender task sends it all, in order
    assert [json.loads(f.text).get("seq", "pong") for f in outbox._queue] == [1, 2, "pong"]


async def test_a_transport_with_bytes_buffered_gets_no_send_past_them() -> None:
    hub, log = Hub(), Log()
    wire = Wire(log, "c")
    outbox = _outbox(hub, wire)
    _live(hub, outbox)
    wire.buffer += b"\x89\x00"  # a ping (or the tail of an earlier frame) waits in the transport
    hub.publish(1, 1, _event(1))
    await _turn()
    assert [path for _, path, _ in log] == ["write"]  # behind the buffered bytes, in order
    assert _received(log, "c") == [{"type": "message", "seq": 1}]


async def test_what_the_socket_does_not_take_goes_to_the_transport() -> None:
    hub, log = Hub(), Log()
    short, failed = Wire(log, "short"), Wire(log, "failed")
    _live(hub, _outbox(hub, short))
    _live(hub, _outbox(hub, failed))
    short.accept = 7
    failed.raises = BlockingIOError()
    hub.publish(1, 1, _event(1))
    await _turn()
    assert [path for who, path, _ in log if who == "short"] == ["send", "write"]
    assert [path for who, path, _ in log if who == "failed"] == ["write"]
    assert _received(log, "short") == _received(log, "failed") == [{"type": "message", "seq": 1}]


async def test_a_connection_closing_in_the_middle_of_a_fan_out_gets_nothing_more() -> None:
    hub, log = Hub(), Log()
    wires = [Wire(log, f"c{i}") for i in range(4)]
    outboxes = {w.name: _outbox(hub, w) for w in wires}
    for outbox in outboxes.values():
        _live(hub, outbox)
    hub.publish(1, 1, _event(1))
    await _turn()
    # While the next turn fans out, the first connection written sees two not written yet
    # close: one's transport starts closing (a peer's close frame), the other is cut.
    sent: set[str] = set()
    victims: list[Wire] = []

    def closing(wire: Wire) -> None:
        sent.add(wire.name)
        if not victims:
            victims.extend(w for w in wires if w.name not in sent)
            transport_closing, outbox_cut = victims[:2]
            transport_closing.unlink()
            transport_closing.writable = False  # direct_write refuses a closing transport
            outboxes[outbox_cut.name].cut("closing", code=1001)

    hooks: list[object] = [closing]
    for wire in wires:
        wire.hook = hooks
    hub.publish(1, 2, _event(2))
    await _turn()
    for wire in wires:
        got = [f["seq"] for f in _received(log, wire.name)]
        assert got == ([1] if wire in victims[:2] else [1, 2])  # nothing after the close


async def test_a_reader_that_stops_is_cut_at_the_outbox_bound() -> None:
    hub, log = Hub(), Log()
    stalled, reader = Wire(log, "stalled"), Wire(log, "reader")
    slow = _outbox(hub, stalled, limit=3)
    _live(hub, slow)
    _live(hub, _outbox(hub, reader, limit=3))
    stalled.unlink()
    stalled.writable = False
    for seq in range(1, 4):
        hub.publish(1, seq, _event(seq))
        await _turn()
        assert not slow.closed  # up to the bound: queued
    assert len(slow._queue) == 3
    hub.publish(1, 4, _event(4))
    await _turn()
    assert slow.closed and slow.close_reason is not None
    assert slow.close_reason.startswith("slow consumer")
    assert [f["seq"] for f in _received(log, "reader")] == [1, 2, 3, 4]  # not slowed


async def test_a_subscriber_whose_replay_overlaps_the_live_stream_gets_each_seq_once() -> None:
    hub, log = Hub(), Log()
    wire = Wire(log, "c")
    outbox = _outbox(hub, wire)
    sub = hub.subscribe(1, outbox, member_id=7)
    hub.go_live(sub, 6)  # the replay already sent up to 6 (committed, not yet published)
    hub.publish(1, 6, _event(6))
    hub.publish(1, 7, _event(7))
    await _turn()
    assert [f["seq"] for f in _received(log, "c")] == [7]


async def test_one_connection_failing_in_the_flusher_does_not_stop_the_others() -> None:
    hub, log = Hub(), Log()
    bad, good = Wire(log, "bad"), Wire(log, "good")
    a, b = _outbox(hub, bad), _outbox(hub, good)
    a.push(Frame('{"type":"error","req_id":"\ud800"}'))  # cannot be encoded for the wire
    b.push('{"type":"pong"}')
    await _turn()
    assert _received(log, "good") == [{"type": "pong"}]
    assert a.closed and a.close_reason is not None and "resume" in a.close_reason
    assert bad.closed_with == 1011 != CLOSE_SLOW_CONSUMER
    b.push('{"type":"pong","n":2}')  # the good one is not wedged either
    await _turn()
    assert _received(log, "good")[-1] == {"type": "pong", "n": 2}


async def test_one_subscriber_failing_in_the_fan_out_does_not_stop_the_others() -> None:
    hub, log = Hub(), Log()
    bad, good = Wire(log, "bad"), Wire(log, "good")
    first, second = _outbox(hub, bad), _outbox(hub, good)
    _live(hub, first)
    _live(hub, second)
    bad.raises = RuntimeError("boom")  # not a socket error: a bug somewhere under send
    hub.publish(1, 1, _event(1))
    await _turn()
    assert _received(log, "good") == [{"type": "message", "seq": 1}]
    assert first.closed and not second.closed
    await _turn()
    assert bad.closed_with == 1011  # "internal error" (it resumes), not a slow consumer


async def test_a_frame_pushed_before_anything_was_published_stays_first() -> None:
    hub, log = Hub(), Log()
    wire = Wire(log, "c")
    outbox = _outbox(hub, wire)
    _live(hub, outbox)
    outbox.push('{"type":"pong"}')  # waits in the outbox for the end of the turn
    hub.publish(1, 1, _event(1))
    await _turn()
    assert [f["type"] for f in _received(log, "c")] == ["pong", "message"]


async def test_acks_between_the_events_of_one_commit_keep_their_places() -> None:
    # A group commit: each message's event, then its sender's ack, many in one turn.
    hub, log = Hub(), Log()
    sender, watcher = Wire(log, "sender"), Wire(log, "watcher")
    a = _outbox(hub, sender, limit=1000)
    _live(hub, a)
    _live(hub, _outbox(hub, watcher, limit=1000))
    hub.broadcast(1, '{"type":"typing","member_id":9}', exclude=a, volatile=True)
    for seq in range(1, 201):
        hub.publish(1, seq, _event(seq))
        a.push(f'{{"type":"ack","seq":{seq}}}')
    await _turn()
    got = [(f["type"], f["seq"]) for f in _received(log, "sender")]
    assert got == [(kind, n) for n in range(1, 201) for kind in ("message", "ack")]
    assert [f.get("seq") for f in _received(log, "watcher")] == [None, *range(1, 201)]


def _check_table(hub: Hub, project: int = 1) -> None:
    """The project's fast-path table holds exactly its live, caught-up, idle and writable
    subscribers, each with its current socket and transport buffer."""
    channel = hub._projects.get(project)
    if channel is None:
        return
    fast = {
        sub
        for sub in channel.subs
        if sub.live and sub.active and sub.outbox.send_now is not None
        and sub.last_seq <= channel.top_seq
    }  # fmt: skip
    assert set(channel.owners) == fast
    assert channel.others == channel.subs - fast
    for slot, sub in enumerate(channel.owners):
        assert sub.slot == slot
        assert channel.socks[slot] is sub.outbox.send_now
        assert channel.pendings[slot] is sub.outbox.pending
    assert all(sub.slot == -1 for sub in channel.others)
    assert not channel.busy and not channel.deferred and not channel.turn_order


async def test_the_fast_path_table_follows_every_state_change() -> None:
    # Random links and unlinks, pushes, unsubscribes and subscribes between published frames:
    # after every turn the table is exactly who may be written to straight away, and what each
    # connection reads by direct paths is in seq order, without a gap or a repeat while it
    # stayed linked and subscribed.
    rng = random.Random(18)
    hub, log = Hub(), Log()
    wires = [Wire(log, f"c{i}") for i in range(24)]
    outboxes = [_outbox(hub, w, limit=10_000) for w in wires]
    subs = {
        w.name: hub.subscribe(1, o, member_id=i)
        for i, (w, o) in enumerate(zip(wires, outboxes, strict=True))
    }
    for sub in subs.values():
        hub.go_live(sub, 0)
    steady = {w.name for w in wires[:6]}  # never touched: they must get every seq
    seq = 0
    for _ in range(300):
        for _ in range(rng.randrange(4)):
            wire = rng.choice(wires[6:])
            outbox = outboxes[wires.index(wire)]
            action = rng.randrange(5)
            if action == 0 and wire.on_link is not None:
                wire.unlink()
                wire.writable = False
            elif action == 1:
                wire.writable = True
                wire.watch(wire.on_link)
            elif action == 2:
                outbox.push('{"type":"pong"}')
            elif action == 3 and wire.name in subs:
                hub.unsubscribe(subs.pop(wire.name))
            elif action == 4 and wire.name not in subs and not outbox.closed:
                sub = subs[wire.name] = hub.subscribe(1, outbox, member_id=7)
                hub.go_live(sub, seq + rng.randrange(2))  # a replay may overlap what comes
        for _ in range(rng.randrange(1, 3)):
            seq += 1
            hub.publish(1, seq, _event(seq))
        if rng.randrange(4) == 0:
            hub.broadcast(1, '{"type":"typing"}', exclude=rng.choice(outboxes), volatile=True)
        await _turn()
        _check_table(hub)
    for wire in wires:
        seqs = [int(str(f["seq"])) for f in _received(log, wire.name) if f["type"] == "message"]
        assert seqs == sorted(set(seqs)), wire.name  # in order, none twice
        if wire.name in steady:
            assert seqs == list(range(1, seq + 1))
    assert any(path == "send" for _, path, _ in log)


async def test_a_subscriber_going_live_mid_turn_gets_only_what_came_after() -> None:
    # Typing is not held for a replaying subscriber; if it goes live in the same turn, the
    # turn's pass must not hand it the typing frame published before.
    hub, log = Hub(), Log()
    watcher, late = Wire(log, "watcher"), Wire(log, "late")
    _live(hub, _outbox(hub, watcher))
    sub = hub.subscribe(1, _outbox(hub, late), member_id=8)
    hub.publish(1, 1, _event(1))
    await _turn()
    hub.broadcast(1, '{"type":"typing"}', volatile=True)
    hub.go_live(sub, 1)  # its replay had seq 1
    hub.publish(1, 2, _event(2))
    await _turn()
    assert [f.get("seq", f["type"]) for f in _received(log, "watcher")] == [1, "typing", 2]
    assert [f.get("seq", f["type"]) for f in _received(log, "late")] == [2]
    hub.publish(1, 3, _event(3))
    await _turn()
    assert [path for who, path, _ in log if who == "late"][-1] == "send"  # fast again
    _check_table(hub)


async def test_a_typing_frame_skips_the_typist_and_keeps_everyone_else_on_one_send() -> None:
    hub, log = Hub(), Log()
    wires = [Wire(log, f"c{i}") for i in range(4)]
    outboxes = [_outbox(hub, w) for w in wires]
    for outbox in outboxes:
        _live(hub, outbox)
    hub.publish(1, 1, _event(1))
    hub.broadcast(1, '{"type":"typing"}', exclude=outboxes[2], volatile=True)
    hub.publish(1, 2, _event(2))
    await _turn()
    for wire in wires:
        got = [f.get("seq", f["type"]) for f in _received(log, wire.name)]
        assert got == ([1, 2] if wire is wires[2] else [1, "typing", 2])
    assert [path for who, path, _ in log if who != "c2"] == ["send"] * 3
    hub.publish(1, 3, _event(3))
    await _turn()
    assert [path for who, path, _ in log if who == "c2"][-1] == "send"  # the typist too, again
    _check_table(hub)


async def test_a_replay_ahead_of_the_stream_gets_no_repeat_when_its_link_comes_back_mid_turn() -> (
    None
):
    # Its replay sent seq 2 (committed, not yet published). In the turn that publishes 2, its
    # transport pauses and resumes writing before the pass: the pass must not hand it 2 again.
    hub, log = Hub(), Log()
    other, late = Wire(log, "other"), Wire(log, "late")
    _live(hub, _outbox(hub, other))
    hub.publish(1, 1, _event(1))
    await _turn()
    sub = hub.subscribe(1, _outbox(hub, late), member_id=8)
    hub.go_live(sub, 2)
    await _turn()
    hub.publish(1, 2, _event(2))
    late.unlink()
    late.watch(late.on_link)
    await _turn()
    hub.publish(1, 3, _event(3))
    await _turn()
    assert [f["seq"] for f in _received(log, "other")] == [1, 2, 3]
    assert [f["seq"] for f in _received(log, "late")] == [3]
    _check_table(hub)


def _aligned(data: bytes) -> bool:
    """Whether ``data`` ends at the end of a frame."""
    at = 0
    while at < len(data):
        size, at = data[at + 1] if at + 1 < len(data) else 0, at + 2
        if size == 126:
            size, at = struct.unpack("!H", data[at : at + 2].rjust(2, b"\0"))[0], at + 2
        at += size
    return at == len(data)


class _Transport(Wire):
    """A wire whose transport keeps what the socket did not take (as asyncio's does) until the
    test lets it out, and which refuses a socket send past bytes still buffered."""

    def send(self, wire: bytes) -> int:
        assert not self.buffer, f"{self.name}: a send past bytes the transport holds"
        return super().send(wire)

    def write(self, wire: bytes) -> None:
        super().write(wire)
        self.buffer += wire

    async def send_text(self, text: str) -> None:
        self.log.append((self.name, "asgi", Frame(text).wire))


@pytest.mark.slow
async def test_every_connection_reads_its_frames_once_and_in_place_whatever_happens() -> None:
    # Two projects, connections in one or both, pushes between published frames, typing and
    # member-only broadcasts, short sends, full sockets, transports holding bytes, replays
    # (frames held while they run, overlapping the stream), links dropping and coming back,
    # unsubscribes, slow readers cut at a small outbox bound and cuts in the middle of a pass.
    # Against a model of what each connection should read: all its frames once; each project's
    # frames, and the frames pushed to it, in the order they were made.
    for run in range(60):
        await _model_run(run)


class _Replay(NamedTuple):
    sub: Subscription
    held: list[tuple[int, int]]  # (seq, id) published while it runs
    side: list[int]  # ids of state frames broadcast while it runs
    start: int  # the project's top seq when it began


async def _model_run(run: int) -> None:
    rng = random.Random(7700 + run)
    hub, log = Hub(), Log()
    wires = [_Transport(log, f"c{i}") for i in range(10)]
    dead: dict[int, int] = {}  # a cut connection: the log's length when it was cut
    outboxes: list[Outbox] = []

    class Recorded(Outbox):
        def cut(self, reason: str, code: int = CLOSE_SLOW_CONSUMER) -> None:
            if not self.closed:
                dead.setdefault(outboxes.index(self), len(log))
            super().cut(reason, code)

    for wire in wires:
        limit = rng.choice((100_000, 100_000, 12))
        outboxes.append(
            Recorded(wire.send_text, wire.close, limit=limit, direct=wire.direct,
                     flusher=hub.flusher, name=wire.name, watch=wire.watch)
        )  # fmt: skip
    for outbox in outboxes:
        outbox.start()  # its sender task: what waits in its queue goes the ASGI way
    subs: dict[tuple[int, int], Subscription] = {}  # (conn, project): live
    replays: dict[tuple[int, int], _Replay] = {}
    expected: dict[int, list[int]] = {i: [] for i in range(len(wires))}
    skip: dict[tuple[int, int], int] = {}  # (conn, project): seqs its replay sent
    project_of: dict[int, int | None] = {}
    top = {1: 0, 2: 0}
    uid = 0

    def subscribe(c: int, p: int, overlap: int) -> None:
        sub = subs[c, p] = hub.subscribe(p, outboxes[c], member_id=c)
        hub.go_live(sub, top[p] + overlap)
        skip[c, p] = top[p] + overlap

    def go_live(c: int, p: int) -> None:
        replay = replays.pop((c, p))
        last = max(replay.start, top[p] - rng.randrange(3)) + rng.randrange(2)
        hub.go_live(replay.sub, last)
        if outboxes[c].closed:
            hub.unsubscribe(replay.sub)
            return
        subs[c, p], skip[c, p] = replay.sub, max(last, top[p])
        for seq, held in replay.held:
            if seq > last:
                last = seq
                expected[c].append(held)
        expected[c].extend(replay.side)

    for c in range(len(wires)):
        for p in (1, 2):
            if rng.random() < 0.7:
                subscribe(c, p, 0)
    hooks: list[object] = []
    for wire in wires:
        wire.hook = hooks
    for _ in range(150):
        hooks.clear()
        if rng.random() < 0.1:
            victim = rng.randrange(len(wires))

            def cut_mid_pass(sending: Wire, victim: int = victim) -> None:
                if sending is not wires[victim]:  # another one, while this one is written
                    outboxes[victim].cut("cut in the test", code=1001)

            hooks.append(cut_mid_pass)
        for _ in range(rng.randrange(1, 8)):
            c, p = rng.randrange(len(wires)), rng.choice((1, 2))
            wire, outbox = wires[c], outboxes[c]
            action = rng.randrange(12)
            uid += 1
            to = [cc for cc, pp in subs if pp == p]  # live subscribers of the project
            if action <= 2:
                top[p] += 1
                hub.publish(p, top[p], f'{{"type":"message","seq":{top[p]},"id":{uid}}}')
                project_of[uid] = p
                for cc in to:
                    if top[p] > skip[cc, p]:
                        expected[cc].append(uid)
                for (_, pp), replay in replays.items():
                    if pp == p:
                        replay.held.append((top[p], uid))
            elif action == 3:
                hub.broadcast(p, f'{{"type":"typing","id":{uid}}}', exclude=outbox,
                              volatile=True)  # fmt: skip
                project_of[uid] = p
                for cc in to:
                    if cc != c:
                        expected[cc].append(uid)
            elif action == 4:
                only = set(rng.sample(range(len(wires)), 3))
                if rng.random() < 0.3:
                    only.discard(c)
                    hub.broadcast(p, f'{{"type":"label","id":{uid}}}', only_members=only,
                                  exclude=outbox)  # fmt: skip
                else:
                    hub.broadcast(p, f'{{"type":"label","id":{uid}}}', only_members=only)
                project_of[uid] = p
                for cc in to:
                    if cc in only:
                        expected[cc].append(uid)
                for (cc, pp), replay in replays.items():
                    if pp == p and cc in only:
                        replay.side.append(uid)
            elif action == 5 and not outbox.closed:
                outbox.push(f'{{"type":"ack","id":{uid}}}')
                project_of[uid] = None
                expected[c].append(uid)
            elif action == 6:
                if wire.on_link is not None and wire.writable:
                    wire.unlink()
                    wire.writable = False
                else:
                    wire.writable = True
                    wire.watch(wire.on_link)
            elif action == 7:
                wire.accept = rng.choice((None, None, 0, 3, 40))
            elif action == 8 and (c, p) in subs:
                hub.unsubscribe(subs.pop((c, p)))
            elif action == 8 and (c, p) in replays:
                hub.unsubscribe(replays.pop((c, p)).sub)
            elif action == 9 and (c, p) not in subs and (c, p) not in replays:
                if outbox.closed:
                    pass
                elif rng.random() < 0.5:
                    subscribe(c, p, rng.randrange(2))
                else:
                    sub = hub.subscribe(p, outbox, member_id=c)
                    replays[c, p] = _Replay(sub, [], [], top[p])
            elif action >= 10 and (c, p) in replays:
                go_live(c, p)
        await _turn()
        for wire in wires:
            if rng.random() < 0.5:
                wire.buffer.clear()  # the transport got its bytes out
        for c in dead:  # the connection's handler ends its subscriptions
            for p in (1, 2):
                if (c, p) in subs:
                    hub.unsubscribe(subs.pop((c, p)))
                if (c, p) in replays:
                    hub.unsubscribe(replays.pop((c, p)).sub)
    for wire in wires:
        wire.writable = True
        wire.accept = None
        wire.watch(wire.on_link)
    for _ in range(5):
        await _turn()
    for outbox in outboxes:
        await outbox.aclose()
    for c, wire in enumerate(wires):
        if c in dead:
            # Nothing once it was cut, but the rest of a frame the socket took part of.
            before = b"".join(b for who, _, b in log[: dead[c]] if who == wire.name)
            after = [(path, b) for who, path, b in log[dead[c] :] if who == wire.name]
            if after:
                assert [path for path, _ in after] == ["write"], (run, wire.name)
                assert not _aligned(before) and _aligned(before + after[0][1])
            continue
        got = [int(str(f["id"])) for f in _received(log, wire.name)]
        assert sorted(got) == sorted(expected[c]), (run, wire.name)  # each once
        for p in (1, 2):
            keep = (p, None)
            mine = [u for u in got if project_of[u] in keep]
            assert mine == [u for u in expected[c] if project_of[u] in keep], (run, wire.name)
