"""The relay's per-project sequencer (room/actions/relay.py, docs/cluster.md) over hints that
come duplicated, reordered, late or never, mixed with the server's own commits and crashes of
the other servers between their commit and their publish: whatever happens, the hub sees each
seq exactly once and in order, every prefix contiguous, and after a sweep everything committed.

The database is a list of committed frames; the bus is a stand-in that hands the hints to the
relay's callback (the real NATS path is tests/test_cluster_bus.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.actions import relay as relay_module
from room.actions.relay import Relay
from room.infra.hub import Hub
from room.infra.outbox import Outbox
from room.store import messages as messages_store

PROJECT = 7


class FakeDatabase:
    """``events`` of one project, committed in seq order."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    async def read(self, fn: Callable[..., Any]) -> Any:
        await asyncio.sleep(0)  # a read yields, as the real one does
        assert isinstance(fn, partial)
        if fn.func is messages_store.replay:
            after, limit = fn.keywords["after_seq"], fn.keywords["limit"]
            return [(s, f) for s, f in enumerate(self.frames, 1) if s > after][:limit]
        return [(PROJECT, len(self.frames))]  # the poll's heads


class FakeHub:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def publish(self, project_id: int, seq: int, frame: str) -> None:
        assert project_id == PROJECT and frame == f"f{seq}"
        self.seen.append(seq)

    def subscriber_count(self, project_id: int | None = None) -> int:
        return 1


class FakeBus:
    def __init__(self) -> None:
        self.on_hint: Callable[[int | None, dict[str, Any]], None] = lambda p, h: None
        self.on_reconnect: Callable[[], None] = lambda: None
        self.on_disconnect: Callable[[], None] = lambda: None
        self.up = True
        self.sent: list[dict[str, Any]] = []

    def send(self, project_id: int | None, hint: dict[str, Any]) -> None:
        self.sent.append(hint)

    def follow(self, project_id: int) -> None:
        pass

    def unfollow(self, project_id: int) -> None:
        pass

    async def close(self) -> None:
        self.up = False


# One step: commit the next event (another server's, or this one's own), deliver a held hint, or
# let the loop run (gap timers, refills).
STEP = st.sampled_from(["theirs", "theirs", "own", "crash", "deliver", "deliver", "run"])


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(0, 3),
    steps=st.lists(STEP, min_size=1, max_size=60),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_seq_once_and_in_order_whatever_the_hints_do(
    start: int, steps: list[str], seed: int
) -> None:
    asyncio.run(_scenario(start, steps, random.Random(seed)))


async def _scenario(start: int, steps: list[str], rng: random.Random) -> None:
    db, hub, bus = FakeDatabase(), FakeHub(), FakeBus()
    relay = Relay(db, hub, bus=bus)  # type: ignore[arg-type]
    db.frames = [f"f{s}" for s in range(1, start + 1)]
    relay.went_live(PROJECT, start)  # a subscriber had everything up to ``start``
    in_flight: list[int] = []

    def check() -> None:
        assert hub.seen == list(range(start + 1, start + 1 + len(hub.seen))), hub.seen

    for step in steps:
        if step in ("theirs", "own", "crash"):
            db.frames.append(f"f{len(db.frames) + 1}")  # committed
            seq = len(db.frames)
            if step == "own":
                relay.publish(PROJECT, seq, f"f{seq}")
                sent = dict(bus.sent[-1])
                assert isinstance(sent.pop("t"), float)  # when (room_bus_lag_seconds)
                assert sent == {"k": "e", "s": seq, "f": f"f{seq}"}
            elif step == "theirs":  # its hint: lost, once, or twice, in flight for a while
                in_flight += [seq] * rng.choice([0, 1, 1, 1, 2])
            # "crash": the other server died between its commit and its publish: no hint
        elif step == "deliver" and in_flight:
            seq = in_flight.pop(rng.randrange(len(in_flight)))
            bus.on_hint(PROJECT, {"k": "e", "s": seq, "f": f"f{seq}"})
        elif step == "run":
            await asyncio.sleep(relay_module.GAP_WAIT_SECS * rng.choice([0, 2]))
        check()
    for seq in in_flight:  # the late ones come in the end, in any order
        bus.on_hint(PROJECT, {"k": "e", "s": seq, "f": f"f{seq}"})
        check()
    bus.on_reconnect()  # the sweep (as on a bus reconnect; the poll does the same)
    for _ in range(100):
        await asyncio.sleep(0)
        if len(hub.seen) == len(db.frames) - start and not relay._pumping:
            break
    await asyncio.sleep(relay_module.GAP_WAIT_SECS * 2)  # a gap timer left over fires harmlessly
    await relay.close()
    check()
    assert hub.seen == list(range(start + 1, len(db.frames) + 1))


# -- subscribers going live ----------------------------------------------------------------------
#
# Until a subscriber of the project goes live here, the relay has no position for it: the hints
# of the others are dropped (the replay reads the database). This server's own commits used to
# go straight to the hub then, where a replaying subscriber buffers them: one that came after
# another server's commit (whose hint was dropped) reached the subscriber ahead of it — seq 1,
# then 4 ("skipped 2..3" in tests/test_cluster_soak.py). And a subscriber whose read of the
# database came before another one's, which went live first, buffered only what the relay
# published from that other one's position on: the events between were skipped.


class Recorder:
    """A subscriber: its connection's outbox, whose socket records the frames it is sent (no
    direct path), and the subscribe handshake of room.ws in two halves."""

    def __init__(self, hub: Hub, relay: Relay, db: FakeDatabase, since: int) -> None:
        self.hub, self.relay, self.db = hub, relay, db
        self.texts: list[str] = []
        self.outbox = Outbox(self._send, _no_close, limit=10_000, flusher=hub.flusher)
        self.outbox.start()
        self.sub = hub.subscribe(PROJECT, self.outbox, member_id=1)  # registered: buffering
        self.since = since
        self.read: int | None = None  # how far its replay's read of the database saw
        self.live = False

    async def _send(self, text: str) -> None:
        self.texts.append(text)

    def seqs(self) -> list[int]:
        return [int(t[1:]) for t in self.texts]

    def read_now(self) -> None:
        """Its replay reads the database (the frames go out now; the read's answer, later)."""
        self.read = len(self.db.frames)
        for seq in range(self.since + 1, self.read + 1):
            self.outbox.push(f"f{seq}")

    async def replay(self, last: int) -> int:
        await asyncio.sleep(0)
        for seq in range(last + 1, len(self.db.frames) + 1):
            self.outbox.push(f"f{seq}")
        return max(last, len(self.db.frames))

    async def go_live(self) -> None:
        if self.read is None:
            self.read_now()
        assert self.read is not None
        self.live = True
        await relay_module.go_live(self.hub, self.relay, self.sub, self.read, self.replay)


async def _no_close(code: int, reason: str) -> None:
    pass


async def _settled(relay: Relay, recorders: list[Recorder], want: int) -> None:
    for _ in range(200):
        await asyncio.sleep(0)
        if all(len(r.texts) >= want for r in recorders) and not relay._pumping:
            return


@pytest.mark.anyio
async def test_an_own_commit_during_the_first_replay_does_not_overtake_another_servers() -> None:
    db, hub, bus = FakeDatabase(), Hub(), FakeBus()
    relay = Relay(db, hub, bus=bus)  # type: ignore[arg-type]
    db.frames = ["f1"]
    reader = Recorder(hub, relay, db, since=1)
    reader.read_now()  # its replay: nothing after 1
    db.frames += ["f2", "f3"]  # another server commits 2 and 3; their hints come early:
    bus.on_hint(PROJECT, {"k": "e", "s": 2, "f": "f2"})  # nobody live here yet, dropped
    bus.on_hint(PROJECT, {"k": "e", "s": 3, "f": "f3"})
    db.frames.append("f4")  # this server commits 4
    relay.publish(PROJECT, 4, "f4")
    await reader.go_live()  # the replay's read (which saw 1) is answered
    await _settled(relay, [reader], 3)
    assert reader.seqs() == [2, 3, 4]  # not [4]: 2 and 3 skipped
    db.frames.append("f5")
    relay.publish(PROJECT, 5, "f5")
    await _settled(relay, [reader], 4)
    assert reader.seqs() == [2, 3, 4, 5]
    await reader.outbox.aclose()
    await relay.close()


@pytest.mark.anyio
async def test_a_replay_read_before_another_subscribers_reads_on_to_where_that_one_began() -> None:
    db, hub, bus = FakeDatabase(), Hub(), FakeBus()
    relay = Relay(db, hub, bus=bus)  # type: ignore[arg-type]
    db.frames = ["f1"]
    slow = Recorder(hub, relay, db, since=1)
    slow.read_now()  # sees 1
    db.frames += ["f2", "f3"]  # another server's, hints lost
    fast = Recorder(hub, relay, db, since=1)
    await fast.go_live()  # read 2 and 3, live first: this server's stream begins at 3
    db.frames.append("f4")
    bus.on_hint(PROJECT, {"k": "e", "s": 4, "f": "f4"})
    await slow.go_live()  # its read (which saw 1) is answered only now
    db.frames.append("f5")
    relay.publish(PROJECT, 5, "f5")
    await _settled(relay, [slow, fast], 4)
    assert fast.seqs() == [2, 3, 4, 5]
    assert slow.seqs() == [2, 3, 4, 5]  # not [4, 5]: 2 and 3 were in neither replay nor buffer
    for reader in (slow, fast):
        await reader.outbox.aclose()
    await relay.close()


# The same under Hypothesis: two subscribers replay while the steps run, each reading the
# database at one step and going live at a later one.
SUBSCRIBE_STEP = st.sampled_from(
    ["theirs", "theirs", "own", "crash", "deliver", "run", "read0", "read1", "live0", "live1"]
)


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 3),
    steps=st.lists(SUBSCRIBE_STEP, min_size=1, max_size=40),
    seed=st.integers(0, 2**32 - 1),
)
def test_subscribers_going_live_get_each_seq_once_and_in_order(
    start: int, steps: list[str], seed: int
) -> None:
    asyncio.run(_subscribe_scenario(start, steps, random.Random(seed)))


async def _subscribe_scenario(start: int, steps: list[str], rng: random.Random) -> None:
    db, hub, bus = FakeDatabase(), Hub(), FakeBus()
    relay = Relay(db, hub, bus=bus)  # type: ignore[arg-type]
    db.frames = [f"f{s}" for s in range(1, start + 1)]
    readers = [Recorder(hub, relay, db, since=start) for _ in range(2)]
    in_flight: list[int] = []

    async def check() -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the fan-out's turn, the outbox's sender
        for reader in readers:
            seen = reader.seqs()
            assert seen == list(range(start + 1, start + 1 + len(seen))), seen

    for step in steps:
        if step in ("theirs", "own", "crash"):
            db.frames.append(f"f{len(db.frames) + 1}")
            seq = len(db.frames)
            if step == "own":
                relay.publish(PROJECT, seq, f"f{seq}")
            elif step == "theirs":
                in_flight += [seq] * rng.choice([0, 1, 1, 2])
        elif step == "deliver" and in_flight:
            seq = in_flight.pop(rng.randrange(len(in_flight)))
            bus.on_hint(PROJECT, {"k": "e", "s": seq, "f": f"f{seq}"})
        elif step == "run":
            await asyncio.sleep(relay_module.GAP_WAIT_SECS * rng.choice([0, 2]))
        elif step.startswith("read") and readers[int(step[-1])].read is None:
            readers[int(step[-1])].read_now()
        elif step.startswith("live") and not readers[int(step[-1])].live:
            await readers[int(step[-1])].go_live()
        await check()
    for reader in readers:
        if not reader.live:
            await reader.go_live()
    for seq in in_flight:
        bus.on_hint(PROJECT, {"k": "e", "s": seq, "f": f"f{seq}"})
    bus.on_reconnect()
    await _settled(relay, readers, len(db.frames) - start)
    await asyncio.sleep(relay_module.GAP_WAIT_SECS * 2)
    await check()
    for reader in readers:
        assert reader.seqs() == list(range(start + 1, len(db.frames) + 1))
        await reader.outbox.aclose()
    await relay.close()


async def _lag_scenario() -> None:
    bus = FakeBus()
    now = [1000.0]
    relay = Relay(FakeDatabase(), FakeHub(), bus=bus, clock=lambda: now[0])  # type: ignore[arg-type]
    relay.went_live(PROJECT, 0)
    relay.publish(PROJECT, 1, "f1")  # this server's own commit: its hint says when
    assert bus.sent[-1] == {"k": "e", "s": 1, "f": "f1", "t": 1000.0}
    now[0] = 1000.5
    bus.on_hint(PROJECT, {"k": "e", "s": 2, "f": "f2", "t": 1000.497})  # 3 ms on the way
    bus.on_hint(PROJECT, {"k": "e", "s": 3, "f": "f3", "t": 1000.7})  # a clock ahead: 0
    bus.on_hint(PROJECT, {"k": "e", "s": 4, "f": "f4"})  # an older node's: not counted
    bus.on_hint(PROJECT, {"k": "e", "s": 5, "f": "f5", "t": True})  # not a time
    bounds, counts, total = relay.lag()
    assert counts[bounds.index(0.0005)] == 1  # the 0 s of the clock ahead
    assert counts[bounds.index(0.005)] == 1  # 3 ms: in (2.5 ms, 5 ms]
    assert sum(counts) == 2
    assert abs(total - 0.003) < 1e-6
    assert relay.hub.seen == [1, 2, 3, 4, 5]  # type: ignore[attr-defined]
    await relay.close()


def test_the_bus_lag_is_measured_from_the_hints_time() -> None:
    asyncio.run(_lag_scenario())
