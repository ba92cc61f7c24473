"""Live fan-out: which connections watch which project, and a bounded outbox per connection.

``publish`` and ``broadcast`` never await and never touch a subscriber: they record the frame
(JSON-encoded once by the caller, framed for the wire once here) on the project's fan-out of this
loop turn. At the end of the turn the :class:`Flusher` makes one pass over each project's
subscribers with everything the project published in the turn, joined into one wire string; the
common case — a live subscriber, nothing waiting in its outbox, an open and writable connection
whose transport has nothing buffered — is one ``send`` straight to its socket, read from the
project's flat table of such subscribers (:class:`Channel`, kept as their state changes, so the
pass touches two list entries per subscriber rather than its objects). Everything else
(frames of that connection pushed in the same turn, a full socket, a connection without the
direct path) goes through the connection's outbox as before: frames pushed to a connection
(acks, errors, person frames) first take the project frames published before them, so each
connection sees frames in the order they were published and pushed. A connection's frames of a
turn leave in one write; when the socket is not writable they wait in its bounded outbox,
drained by the connection's own sender task. A reader that stops reading fills its outbox and is
cut (close code 1013, "resume with since") without slowing anyone else; it loses nothing,
because on reconnect it replays from its cursor.

Sequenced project events (messages, edits …) go through ``publish`` and carry a seq; ephemeral
ones (typing, read cursors, delivery labels, roster and task views) go through ``broadcast`` and
are not replayed; a subscriber still replaying gets them right after its replay (typing excepted).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from bisect import bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sized
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

CLOSE_SLOW_CONSUMER = 1013  # "Try Again Later": the client resumes from its cursor
CLOSE_SIGNED_OUT = 4401  # the session behind the connection ended: sign in again

SendText = Callable[[str], Awaitable[None]]
DirectWrite = Callable[[bytes], bool]
Close = Callable[[int, str], Awaitable[None]]


class Socket(Protocol):
    """Where a direct write goes: the connection's socket (its ``send``: bytes taken, or
    OSError)."""

    def send(self, data: bytes, /) -> int: ...


# What the transport hands an outbox while its connection can take a direct write (or three
# Nones): the socket, the transport's write buffer (a sized object, empty when nothing waits in
# it: read in place, no call) and the transport's ``write``.
Write = Callable[[bytes], None]
OnLink = Callable[[Socket | None, Sized | None, Write | None], None]
WatchLink = Callable[[OnLink], None]
CLOSE_INTERNAL = 1011  # a frame could not be written: the client resumes from its cursor


def text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented RFC 6455 text frame (what a server sends)."""
    n = len(payload)
    if n < 126:
        head = bytes((0x81, n))
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x81, 126, n)
    else:
        head = struct.pack("!BBQ", 0x81, 127, n)
    return head + payload


@dataclass(slots=True)
class Frame:
    """A frame encoded once: the JSON text, and its wire bytes made on first use."""

    text: str
    _wire: bytes | None = None

    @property
    def wire(self) -> bytes:
        if self._wire is None:
            self._wire = text_frame(self.text.encode())
        return self._wire


class Flusher:
    """Writes everything published and pushed during one turn of the event loop, at its end.

    Frames published while the loop works through its ready callbacks — the events of a whole
    group commit, a broadcast after them — make one pass per project over its subscribers
    (:class:`_Fanout`); frames pushed to single connections (the acks of that commit) are
    coalesced per connection into one socket write: one system call per connection per turn
    instead of one per frame.
    """

    def __init__(self) -> None:
        self._dirty: list[Outbox] = []
        self._scheduled = False
        self.fanouts: dict[int, _Fanout] = {}  # by project id, this turn
        self.order = 0  # counts every published or broadcast frame: the order they were made in

    def mark(self, outbox: Outbox) -> None:
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
        exclude: Outbox | None = None,
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

    def settle(self, outbox: Outbox) -> None:
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
            if not outbox._add(frame):
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


def _order(entry: tuple[int, int, Frame, Outbox | None, frozenset[int] | None]) -> int:
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
        self.entries: list[tuple[int, int, Frame, Outbox | None, frozenset[int] | None]] = []
        self.excluded: list[Outbox] = []  # connections some entry is not for (a typist's own)
        self.narrowed = False  # some entry is for some members only

    def add(
        self,
        order: int,
        seq: int,
        frame: Frame,
        exclude: Outbox | None,
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
                        if not outbox._add(frame):
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


class Outbox:
    """One connection's outgoing frames, bounded; ``push`` never blocks.

    Pushed frames wait in ``_batch`` until the :class:`Flusher` writes them together; when the
    socket is not writable they move to ``_queue``, drained by the connection's sender task, and
    everything after them queues behind them (order is kept). Past ``limit`` frames or
    ``limit_bytes`` waiting, the connection is cut as a slow consumer.

    ``send_now`` says whether the fan-out pass may write straight to the socket: the socket
    while nothing waits here (batch and queue empty, not closed) and the transport says the
    connection is open and writable (``watch``, from :mod:`room.infra.transport`), else None. Every
    change of it is told to the channels of the connection's subscriptions (their fast path).
    """

    # Slots: a fan-out touches a thousand of these right after a thousand socket writes have
    # pushed them out of the CPU caches; fewer, denser objects make that pass cheaper.
    __slots__ = (
        "_batch", "_close", "_direct", "_flusher", "_idle_waiters", "_link_sock", "_queue",
        "_send_text", "_task", "_waiting_bytes", "_wake", "close_reason", "closed", "limit",
        "limit_bytes", "name", "pending", "send_now", "stall_secs", "subs", "write",
    )  # fmt: skip

    def __init__(
        self,
        send_text: SendText,
        close: Close,
        *,
        limit: int,
        limit_bytes: int = 16 * 1024 * 1024,
        direct: DirectWrite | None = None,
        flusher: Flusher | None = None,
        name: str = "",
        stall_secs: float | None = None,
        watch: WatchLink | None = None,
    ) -> None:
        self._send_text = send_text
        self._close = close
        self._direct = direct
        self._flusher = flusher or Flusher()
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.stall_secs = stall_secs  # a frame that cannot leave for this long cuts (1013)
        self._waiting_bytes = 0  # in _batch and _queue
        self._idle_waiters: list[asyncio.Future[None]] = []  # wait_sent callers
        self.name = name
        self._batch: list[Frame] = []
        self._queue: deque[Frame] = deque()
        self._wake = asyncio.Event()
        self.closed = False
        self.close_reason: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.subs: list[Subscription] = []  # this connection's project subscriptions
        self._link_sock: Socket | None = None
        self.send_now: Socket | None = None
        self.pending: Sized = b""  # the transport's write buffer
        self.write: Write = _no_write
        if watch is not None:
            watch(self._link)

    def _link(self, sock: Socket | None, pending: Sized | None, write: Write | None) -> None:
        """The transport's direct path opened (the socket, the transport's write buffer and
        write) or closed (Nones)."""
        self._link_sock = sock
        if pending is not None and write is not None:
            self.pending, self.write = pending, write
        self._idle()

    def _idle(self) -> None:
        """Nothing waits here any more: the fan-out may write straight to the socket again."""
        if not self._batch and not self._queue and not self.closed:
            self._ready(self._link_sock)

    def _ready(self, sock: Socket | None) -> None:
        """``send_now`` is now ``sock``: the fast paths of this connection's projects follow."""
        if sock is not self.send_now:
            self.send_now = sock
            for sub in self.subs:
                sub.channel.refresh(sub)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._drain(), name=f"outbox {self.name}"
        )

    def push(self, frame: Frame | str) -> bool:
        """A frame for this connection alone, after whatever its projects published before it
        in this loop turn."""
        if self.closed:
            return False
        if isinstance(frame, str):
            frame = Frame(frame)
        if self.subs and self._flusher.fanouts:
            self._flusher.settle(self)
        return self._add(frame)

    def _add(self, frame: Frame) -> bool:
        if self.closed:
            return False
        if self._queue:
            return self._enqueue(frame)
        batch = self._batch
        size = len(frame.text)
        if len(batch) >= self.limit or self._waiting_bytes + size > self.limit_bytes:
            self.cut("slow consumer: outbox full; reconnect and resume with since")
            return False
        if not batch:
            self._ready(None)
            self._flusher.mark(self)
        batch.append(frame)
        self._waiting_bytes += size
        return True

    def flush(self) -> None:
        # Once per connection per loop turn with frames for it, for every subscriber of a
        # fan-out: the common path (nothing queued, the socket takes it) stays short.
        batch = self._batch
        if not batch:
            return
        self._batch = []
        if self.closed:
            return
        if not self._queue and self._direct is not None:
            wire = batch[0].wire if len(batch) == 1 else b"".join([f.wire for f in batch])
            if self._direct(wire):
                self._waiting_bytes = 0  # nothing was queued: the batch was all that waited
                self._ready(self._link_sock)
                if self._idle_waiters:
                    self._wake_idle()
                return
        self._waiting_bytes -= sum(len(f.text) for f in batch)
        for frame in batch:
            if not self._enqueue(frame):
                return
        self._idle()  # the queue took nothing (a zero limit …): nothing waits

    def _enqueue(self, frame: Frame) -> bool:
        size = len(frame.text)
        if len(self._queue) >= self.limit or self._waiting_bytes + size > self.limit_bytes:
            self.cut("slow consumer: outbox full; reconnect and resume with since")
            return False
        self._queue.append(frame)
        self._ready(None)
        self._waiting_bytes += size
        self._wake.set()
        return True

    def _settle(self) -> None:
        if not self._queue and not self._batch:
            self._idle()
            if self._idle_waiters:
                self._wake_idle()

    def _wake_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_sent(self, wait_secs: float) -> bool:
        """Wait until everything pushed so far left for the socket (backpressure for large
        replays); False if the connection is closed or did not take it in time."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(wait_secs):
                while not self.closed and (self._batch or self._queue):
                    waiter = loop.create_future()
                    self._idle_waiters.append(waiter)
                    await waiter
                    await asyncio.sleep(0)  # a frame pushed just now may still be batched
        except TimeoutError:
            return False
        return not self.closed

    def fail(self, stage: str) -> None:
        """Writing to this connection raised: log it and cut the connection (it resumes from
        its cursor, nothing is lost); called from an ``except`` block."""
        log.exception("%s to %s failed", stage, self.name)
        self.cut("server error while writing; reconnect and resume with since", CLOSE_INTERNAL)

    def cut(self, reason: str, code: int = CLOSE_SLOW_CONSUMER) -> None:
        if self.closed:
            return
        self.closed, self.close_reason = True, reason
        self._ready(None)
        self._queue.clear()
        self._batch.clear()
        self._waiting_bytes = 0
        self._wake.set()
        self._wake_idle()
        log.info("cutting connection %s: %s", self.name, reason)
        asyncio.get_running_loop().create_task(self._close_quietly(code, reason))

    async def _close_quietly(self, code: int, reason: str) -> None:
        try:
            await self._close(code, reason[:120])
        except Exception:  # already gone
            pass

    async def _drain(self) -> None:
        try:
            while not self.closed:
                await self._wake.wait()
                self._wake.clear()
                while self._queue and not self.closed:
                    frame = self._queue[0]
                    try:
                        async with asyncio.timeout(self.stall_secs):
                            await self._send_text(frame.text)
                    except TimeoutError:
                        self.cut(
                            f"slow consumer: nothing read for {self.stall_secs:g} s; "
                            "reconnect and resume with since"
                        )
                        return
                    if self._queue and self._queue[0] is frame:
                        self._queue.popleft()
                        self._waiting_bytes -= len(frame.text)
                self._settle()
        except Exception:
            self.closed = True
            self._ready(None)
            self._wake_idle()

    async def aclose(self) -> None:
        self.closed = True
        self._ready(None)
        self._wake.set()
        self._wake_idle()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass


def _no_write(wire: bytes) -> None:
    raise RuntimeError("no direct path")  # send_now is None whenever this is in place


@dataclass(slots=True, eq=False)
class Subscription:
    project_id: int
    outbox: Outbox
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


class Hub:
    def __init__(self) -> None:
        self._projects: dict[int, Channel] = {}
        self._replaying: dict[int, set[Subscription]] = {}  # not live yet, by project
        # Connections by the digest of the browser session that opened them (or an agent's
        # ``agent_session`` key), so signing out (or leaving) closes them too.
        self._sessions: dict[str, set[Outbox]] = {}
        # Each person's open connections by user id: presence (a person with one is online)
        # and the frames addressed to a person wherever they look (unread counts).
        self._people: dict[int, set[Outbox]] = {}
        self.flusher = Flusher()
        self.connections = 0  # open WebSocket connections (``/metrics``)
        self.messages = 0  # new messages published since the start (``/metrics``)

    def attach_person(self, user_id: int, outbox: Outbox) -> bool:
        """A person's connection opened; True if it is their first (they came online)."""
        outboxes = self._people.setdefault(user_id, set())
        outboxes.add(outbox)
        return len(outboxes) == 1

    def detach_person(self, user_id: int, outbox: Outbox) -> bool:
        """A person's connection closed; True if it was their last (they went offline)."""
        outboxes = self._people.get(user_id)
        if outboxes is None or outbox not in outboxes:
            return False
        outboxes.discard(outbox)
        if outboxes:
            return False
        del self._people[user_id]
        return True

    def person_online(self, user_id: int | None) -> bool:
        return user_id is not None and user_id in self._people

    def to_person(self, user_id: int, frame: Frame | str) -> None:
        """A frame for one person, on every connection they have open (not replayed)."""
        outboxes = self._people.get(user_id)
        if not outboxes:
            return
        if isinstance(frame, str):
            frame = Frame(frame)
        for outbox in outboxes:
            outbox.push(frame)

    @staticmethod
    def agent_session(member_id: int) -> str:
        """The key an agent's connections are attached under (browser sessions use their
        digest, which never starts like this): a member who leaves has them closed."""
        return f"agent:{member_id}"

    @staticmethod
    def token_session(token_digest: str) -> str:
        """The key an agent's connection is also attached under: the token that opened it, so
        a revocation the server only reads later (the CLI's) closes exactly those."""
        return f"token:{token_digest}"

    def credentials(self) -> tuple[set[str], set[str]]:
        """The browser-session digests and agent-token digests open connections rest on."""
        sessions: set[str] = set()
        tokens: set[str] = set()
        for key in self._sessions:
            if key.startswith("token:"):
                tokens.add(key.removeprefix("token:"))
            elif not key.startswith("agent:"):
                sessions.add(key)
        return sessions, tokens

    def attach_session(self, session: str, outbox: Outbox) -> None:
        self._sessions.setdefault(session, set()).add(outbox)

    def detach_session(self, session: str, outbox: Outbox) -> None:
        outboxes = self._sessions.get(session)
        if outboxes is not None:
            outboxes.discard(outbox)
            if not outboxes:
                del self._sessions[session]

    def cut_session(self, session: str, reason: str, code: int) -> int:
        """The session ended (sign-out): close every connection it opened."""
        outboxes = self._sessions.pop(session, set())
        for outbox in outboxes:
            outbox.cut(reason, code=code)
        return len(outboxes)

    def subscribe(self, project_id: int, outbox: Outbox, member_id: int) -> Subscription:
        """Register first (buffering), replay from the store, then :meth:`go_live`."""
        if outbox._flusher is not self.flusher:
            raise ValueError("the outbox must write through this hub's flusher")
        channel = self._projects.get(project_id)
        if channel is None:
            channel = self._projects[project_id] = Channel()
        sub = Subscription(project_id, outbox, member_id, channel)
        channel.add(sub)
        self._replaying.setdefault(project_id, set()).add(sub)
        outbox.subs.append(sub)
        return sub

    def go_live(self, sub: Subscription, last_seq: int) -> None:
        """Flush what was published during the replay, skipping what the replay already sent,
        then the state frames broadcast meanwhile (after the events they may refer to)."""
        if not sub.active:  # cut while replaying (the member left): nothing more goes out
            sub.buffer.clear()
            sub.side.clear()
            return
        self._discard(self._replaying, sub)
        sub.settled = self.flusher.order  # what was published so far is in buffer and side
        sub.last_seq = last_seq
        for seq, frame in sub.buffer:
            if seq > sub.last_seq:
                sub.last_seq = seq
                sub.outbox.push(frame)
        for frame in sub.side:
            sub.outbox.push(frame)
        sub.buffer.clear()
        sub.side.clear()
        sub.live = True
        sub.channel.refresh(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        if sub.active and sub.live and self.flusher.fanouts:
            self.flusher.settle(sub.outbox)  # what was published before this still goes out
        sub.active = False
        channel = sub.channel
        channel.remove(sub)
        if not channel.subs and self._projects.get(sub.project_id) is channel:
            del self._projects[sub.project_id]
        self._discard(self._replaying, sub)
        if sub in sub.outbox.subs:
            sub.outbox.subs.remove(sub)

    @staticmethod
    def _discard(by_project: dict[int, set[Subscription]], sub: Subscription) -> None:
        subs = by_project.get(sub.project_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del by_project[sub.project_id]

    def publish(self, project_id: int, seq: int, frame: Frame | str) -> None:
        """A committed, sequenced event of a project, to every subscriber, in seq order."""
        channel = self._projects.get(project_id)
        if channel is None:
            return
        if seq > channel.top_seq:
            channel.top_seq = seq
        subs = channel.subs
        if isinstance(frame, str):
            frame = Frame(frame)
        replaying = self._replaying.get(project_id)
        if replaying:
            for sub in replaying:
                sub.buffer.append((seq, frame))
                sub.hold()
            if len(replaying) == len(subs):
                return
        self.flusher.fan_out(project_id, channel, seq, frame)

    def broadcast(
        self,
        project_id: int,
        frame: Frame | str,
        *,
        exclude: Outbox | None = None,
        only_members: Iterable[int] | None = None,
        volatile: bool = False,
    ) -> None:
        """A frame outside the replayable stream. Live subscribers get it now; one still
        replaying gets it after the replay, unless it is ``volatile`` (typing: stale at once)."""
        channel = self._projects.get(project_id)
        if channel is None:
            return
        subs = channel.subs
        if isinstance(frame, str):
            frame = Frame(frame)
        members = frozenset(only_members) if only_members is not None else None
        replaying = self._replaying.get(project_id)
        if replaying:
            if not volatile:
                for sub in replaying:
                    if sub.outbox is exclude or (
                        members is not None and sub.member_id not in members
                    ):
                        continue
                    sub.side.append(frame)
                    sub.hold()
            if len(replaying) == len(subs):
                return
        self.flusher.fan_out(project_id, channel, 0, frame, exclude, members)

    def subscriber_count(self, project_id: int | None = None) -> int:
        if project_id is not None:
            channel = self._projects.get(project_id)
            return 0 if channel is None else len(channel.subs)
        return sum(len(c.subs) for c in self._projects.values())

    def cut_member(self, project_id: int, member_id: int) -> None:
        """A member left: end their subscriptions to the project at once (they may still be
        connected for other projects)."""
        frame = Frame(f'{{"type":"unsubscribed","project_id":{project_id},"reason":"left"}}')
        for sub in self._subs(project_id):
            if sub.member_id == member_id:
                self.unsubscribe(sub)
                sub.outbox.push(frame)

    def cut_project(self, project_id: int, reason: str) -> None:
        for sub in self._subs(project_id):
            sub.outbox.cut(reason, code=1001)

    def _subs(self, project_id: int) -> list[Subscription]:
        channel = self._projects.get(project_id)
        return [] if channel is None else list(channel.subs)
