"""One connection's outgoing frames, bounded: ``push`` never blocks, a reader that stops reading
is cut (1013, "resume with since") without slowing anyone else."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sized

from room.infra.fanout import Flusher, Subscription
from room.infra.frames import CLOSE_INTERNAL, CLOSE_SLOW_CONSUMER, Frame, Socket, WatchLink, Write

log = logging.getLogger(__name__)

SendText = Callable[[str], Awaitable[None]]
DirectWrite = Callable[[bytes], bool]
Close = Callable[[int, str], Awaitable[None]]


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

    @property
    def flusher(self) -> Flusher:
        """The turn's flusher this outbox writes through (a hub's own)."""
        return self._flusher

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
        return self.add(frame)

    def add(self, frame: Frame) -> bool:
        """A frame for this connection, with no regard to what its projects published this
        turn (the fan-out's own: it keeps the order itself); :meth:`push` for anyone else."""
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
