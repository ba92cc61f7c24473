"""One loop turn's fan-out: what each project published during the turn, written at its end in
one pass over the project's subscribers (docs/architecture.md, "The path of one send").

:class:`Flusher` gathers the turn's frames per project (:class:`_Fanout`) and the connections
pushed to; :class:`Channel` is one project's subscribers and the flat fast-path table the pass
runs through; :class:`Subscription` is one connection's subscription to one project. A
connection's own outbox (:class:`room.infra.outbox.Outbox`) is seen here only as
:class:`Connection`.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Protocol

from room.infra.frames import Frame, Socket, Write


class Connection(Protocol):
    """A connection's outbox as the fan-out sees it (:class:`room.infra.outbox.Outbox`)."""

    subs: list[Subscription]
    send_now: Socket | None  # the socket while a direct write may go straight to it
    pending: Sized  # the transport's write buffer (empty: nothing waits in it)
    write: Write  # the transport's write

    def add(self, frame: Frame) -> bool: ...

    def push(self, frame: Frame | str) -> bool: ...

    def flush(self) -> None: ...

    def fail(self, stage: str) -> None: ...

    def cut(self, reason: str, code: int = ...) -> None: ...


class Flusher:
    """Writes everything published and pushed during one turn of the event loop, at its end.

    Frames published while the loop works through its ready callbacks — the events of a whole
    group commit, a broadcast after them — make one pass per project over its subscribers
    (:class:`_Fanout`); frames pushed to single connections (the acks of that commit) are
    coalesced per connection into one socket write: one system call per connection per turn
    instead of one per frame.
    """

    def __init__(self) -> None:
        self._dirty: list[Connection] = []
        self._scheduled = False
        self.fanouts: dict[int, _Fanout] = {}  # by project id, this turn
        self.order = 0  # counts every published or broadcast frame: the order they were made in

    def mark(self, outbox: Connection) -> None:
        self._dirty.append(outbox)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def fan_out(
        self,
        project_id: int,
        channel: Channel,
        seq: int,
        frame: Frame,
        exclude: Connection | None = None,
        members: frozenset[int] | None = None,
    ) -> None:
        """``frame`` for the live subscribers of a project, at the end of this turn (``seq`` 0:
        not sequenced; ``exclude`` and ``members`` narrow who gets it)."""
        self.order += 1
        fan = self.fanouts.get(project_id)
        if fan is None:
            fan = self.fanouts[project_id] = _Fanout(channel, self.order)
            channel.turn_order = self.order
            if not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._run)
        fan.add(self.order, seq, frame, exclude, members)

    def settle(self, outbox: Connection) -> None:
        """Before a frame is pushed to one connection: move the project frames published to it
        earlier in this turn into its outbox, so that they stay ahead of it."""
        fanouts = self.fanouts
        taken: list[tuple[int, Frame]] = []
        projects = 0
        for sub in outbox.subs:
            fan = fanouts.get(sub.project_id)
            if fan is None or not sub.live:
                continue
            before = len(taken)
            fan.take(sub, taken)
            sub.settled = self.order
            sub.channel.refresh(sub)  # off the fast path until its project's pass is done
            projects += len(taken) > before
        if projects > 1:
            taken.sort(key=lambda item: item[0])
        for _, frame in taken:
            if not outbox.add(frame):
                return

    def _run(self) -> None:
        fanouts, self.fanouts = self.fanouts, {}
        for fan in fanouts.values():
            fan.deliver()
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for outbox in dirty:
            # One connection's failure (a frame that cannot be encoded …) is that connection's
            # alone: the others of the turn are still written.
            try:
                outbox.flush()
            except Exception:
                outbox.fail("flush")


def _order(entry: tuple[int, int, Frame, Connection | None, frozenset[int] | None]) -> int:
    return entry[0]


HELD = b"held"  # a fast-path entry whose subscriber changed during the pass


class Channel:
    """One project's subscribers, and the table its fan-out pass runs through.

    ``socks`` and ``pendings`` are parallel flat lists, one entry per subscriber on the fast
    path — live, caught up with the project's stream, nothing waiting in its outbox, its
    connection open and writable (the outbox's ``send_now``) — holding its socket and its
    transport's write buffer. The pass reads those two and nothing else of a subscriber: after a
    thousand socket writes have pushed everything out of the CPU caches, every object touched
    per subscriber costs more than the Python around it. The table follows state changes
    (:meth:`refresh`, called by the outbox whenever ``send_now`` changes and by the hub when a
    subscriber goes live, is settled or leaves); everyone else is in ``others``, served one by
    one through their outboxes. No per-subscriber seq is written on the fast path: a subscriber
    on it has had everything up to ``top_seq``, and sequenced frames come in seq order.
    """

    __slots__ = (
        "_by_sock", "busy", "deferred", "others", "owners", "pendings", "socks", "subs",
        "top_seq", "turn_order",
    )  # fmt: skip

    def __init__(self) -> None:
        self.subs: set[Subscription] = set()
        self.others: set[Subscription] = set()  # in subs, not on the fast path
        self.socks: list[Socket] = []
        self.pendings: list[Sized] = []
        self.owners: list[Subscription] = []
        self._by_sock: dict[Socket, Subscription] = {}
        self.top_seq = 0  # the highest seq published to this project
        self.turn_order = 0  # the Flusher's order of this project's first frame of the turn
        self.busy = False  # its pass runs: changes wait in ``deferred`` until it is done
        self.deferred: list[Subscription] = []

    def add(self, sub: Subscription) -> None:
        self.subs.add(sub)
        self.others.add(sub)

    def remove(self, sub: Subscription) -> None:
        self.subs.discard(sub)
        self.others.discard(sub)
        if sub.slot >= 0:
            if self.busy:
                self._hold(sub)
            else:
                self._unslot(sub)

    def refresh(self, sub: Subscription) -> None:
        """Put ``sub`` on the fast path or take it off, as its state now says."""
        if self.busy:
            self._hold(sub)
            return
        sock = sub.outbox.send_now
        ready = (
            sock is not None
            and sub.live
            and sub.active
            and sub in self.subs
            and sub.last_seq <= self.top_seq  # not ahead of the stream (a replay's overlap)
        )
        if ready and self.turn_order and (sub.slot < 0 or sub.settled >= self.turn_order):
            # A pass is due this turn: one given some of its frames already, or not on the fast
            # path when they were published (its replay may have sent some: ``top_seq`` already
            # counts them), is served one by one by that pass, which checks each seq.
            ready = False
            self.deferred.append(sub)
        if not ready:
            if sub.slot >= 0:
                self._unslot(sub)
            if sub in self.subs:
                self.others.add(sub)
            return
        assert sock is not None
        if sub.slot >= 0:
            if self.socks[sub.slot] is sock:
                self.pendings[sub.slot] = sub.outbox.pending
                return
            self._unslot(sub)
        if sock in self._by_sock:  # the same connection twice in one project: one by one
            self.others.add(sub)
            return
        sub.slot = len(self.socks)
        self.socks.append(sock)
        self.pendings.append(sub.outbox.pending)
        self.owners.append(sub)
        self._by_sock[sock] = sub
        self.others.discard(sub)

    def _hold(self, sub: Subscription) -> None:
        """During the pass: the table stays as it is, but a subscriber whose state changed is
        not written to by it (its entry reads as "transport busy"); it is looked at again
        once the pass is done."""
        if sub.slot >= 0:
            self.pendings[sub.slot] = HELD
        self.deferred.append(sub)

    def _unslot(self, sub: Subscription) -> None:
        slot, last = sub.slot, len(self.socks) - 1
        del self._by_sock[self.socks[slot]]
        if slot != last:
            moved = self.owners[last]
            self.socks[slot], self.pendings[slot] = self.socks[last], self.pendings[last]
            self.owners[slot] = moved
            moved.slot = slot
        self.socks.pop()
        self.pendings.pop()
        self.owners.pop()
        sub.slot = -1

    def owner(self, sock: Socket) -> Subscription:
        return self._by_sock[sock]

    def end_turn(self) -> None:
        """The project's pass is done: what changed meanwhile takes effect."""
        self.busy = False
        self.turn_order = 0
        while self.deferred:
            deferred, self.deferred = self.deferred, []
            for sub in deferred:
                self.refresh(sub)


class _Fanout:
    """What one project published during one loop turn, for one pass over its subscribers."""

    __slots__ = ("channel", "entries", "excluded", "first_order", "narrowed")

    def __init__(self, channel: Channel, first_order: int) -> None:
        self.channel = channel
        self.first_order = first_order
        # (order, seq or 0, frame, exclude, members), in the order they were made
        self.entries: list[tuple[int, int, Frame, Connection | None, frozenset[int] | None]] = []
        self.excluded: list[Connection] = []  # connections some entry is not for (a typist's own)
        self.narrowed = False  # some entry is for some members only

    def add(
        self,
        order: int,
        seq: int,
        frame: Frame,
        exclude: Connection | None,
        members: frozenset[int] | None,
    ) -> None:
        self.entries.append((order, seq, frame, exclude, members))
        if exclude is not None:
            self.excluded.append(exclude)
        if members is not None:
            self.narrowed = True

    def take(self, sub: Subscription, out: list[tuple[int, Frame]]) -> None:
        """The entries ``sub`` should get and has not got yet (seq and filters checked)."""
        outbox = sub.outbox
        entries = self.entries
        # Entries are in order: start after the last one it was given (a connection that is
        # pushed to after each of many published frames costs no rescan of the turn).
        start = bisect_right(entries, sub.settled, key=_order) if sub.settled else 0
        for index in range(start, len(entries)):
            order, seq, frame, exclude, members = entries[index]
            if seq:
                if seq <= sub.last_seq:
                    continue  # the replay sent it already
                sub.last_seq = seq
            elif outbox is exclude or (members is not None and sub.member_id not in members):
                continue
            out.append((order, frame))

    def deliver(self) -> None:
        channel = self.channel
        channel.busy = True
        try:
            if not self.narrowed:
                for outbox in self.excluded:  # they go one by one (the entries filtered)
                    for sub in outbox.subs:
                        if sub.channel is channel:
                            channel._hold(sub)
                slow = self._fast(channel)
                slow += channel.others
            else:  # member-only frames: per subscriber
                slow = list(channel.subs)
            for sub in slow:
                if not sub.live:
                    continue  # still replaying: it holds these frames in its own buffer
                outbox = sub.outbox
                try:
                    taken: list[tuple[int, Frame]] = []
                    self.take(sub, taken)
                    for _, frame in taken:
                        if not outbox.add(frame):
                            break
                except Exception:
                    outbox.fail("fan-out")
                if outbox.send_now is not None:  # nothing was added: caught up, it may be
                    channel.deferred.append(sub)  # fast again (a change of send_now says so)
        finally:
            channel.end_turn()

    def _fast(self, channel: Channel) -> list[Subscription]:
        """The common case in one pass over the channel's flat table: one send straight to
        each socket whose transport has nothing buffered (so nothing can be overtaken).
        Returns the subscribers of the table whose state changed meanwhile."""
        entries = self.entries
        if len(entries) == 1:
            wire = entries[0][2].wire
        else:
            wire = b"".join([entry[2].wire for entry in entries])
        size = len(wire)
        rest: list[tuple[Socket, int]] = []
        for sock, pending in zip(channel.socks, channel.pendings, strict=True):
            if pending:
                rest.append((sock, 0))
                continue
            try:
                sent = sock.send(wire)
            except OSError:  # EAGAIN, or a failed socket the transport will report
                sent = 0
            except Exception:
                channel.owner(sock).outbox.fail("fan-out")
                continue
            if sent != size:
                rest.append((sock, sent))
        # The transport takes what the socket did not (behind what it already holds).
        held: list[Subscription] = []
        for sock, sent in rest:
            sub = channel.owner(sock)
            if not sent and channel.pendings[sub.slot] is HELD:
                held.append(sub)  # served one by one, as its state now says
                continue
            outbox = sub.outbox
            try:
                outbox.write(wire[sent:] if sent else wire)
            except Exception:
                outbox.fail("fan-out")
        return held


@dataclass(slots=True, eq=False)
class Subscription:
    project_id: int
    outbox: Connection
    member_id: int
    channel: Channel
    live: bool = False
    active: bool = True  # False once unsubscribed (or cut): a replay still running stops
    # The last seq it was given, where that matters: a replay's end (frames at or below it are
    # not sent again); not kept up to date on the fast path, where every new seq is above it.
    last_seq: int = 0
    settled: int = 0  # the Flusher's order up to which this subscriber was given frames
    slot: int = -1  # its entry in the channel's fast-path table, or -1
    buffer: list[tuple[int, Frame]] = field(default_factory=list)
    # State frames (members, project, tasks, delivery labels) broadcast during the replay, in
    # order: they are not in the replayable stream, so dropping them would leave a stale view.
    side: list[Frame] = field(default_factory=list)
    buffer_limit: int = 10_000

    def hold(self) -> None:
        if len(self.buffer) + len(self.side) > self.buffer_limit:
            self.outbox.cut("too many events during replay; resume with since")
