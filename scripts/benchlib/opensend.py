"""Open-loop senders over raw WebSocket connections, shared by the workloads that post messages.

Message ``g`` (0, 1, 2 …) is due at ``start + g / rate`` and goes out on connection
``g % senders`` whatever the acks are doing: the offered load follows the clock, not the server.
A ticker wakes every ``TICK_SECS`` and writes every frame that has fallen due, one ``send`` call
per connection per tick. Ack latency is measured from the *scheduled* time, so a generator or
server that falls behind shows up in the numbers (no coordinated omission); how late frames
actually left is recorded separately as the generator's lag.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchlib.corpus import PROJECT_ID, filler
from benchlib.wsraw import WsClient, client_frame

TICK_SECS = 0.0005
_ACK = b'{"type":"ack","client_txn_id":"'
_ERROR = b'{"type":"error"'


@dataclass
class SendLog:
    """What one open-loop run observed; times are ``monotonic_ns``."""

    start: int = 0
    rate: float = 0.0
    senders: int = 0
    sent: int = 0
    acked: int = 0
    errors: int = 0
    first_error: bytes = b""
    ack_at: list[int] = field(default_factory=list)  # receive time of each ack
    ack_lat: list[int] = field(default_factory=list)  # ack time - scheduled time
    ack_sched: list[int] = field(default_factory=list)  # scheduled time of each acked message
    ack_seq: list[int] = field(default_factory=list)
    lag: list[int] = field(default_factory=list)  # per tick: now - scheduled time of oldest due

    def scheduled(self, g: int) -> int:
        return self.start + int(g * 1e9 / self.rate)


class OpenLoopSender:
    """``senders`` connections posting ``rate`` messages/s in total to project 1."""

    def __init__(
        self,
        clients: list[WsClient],
        rate: float,
        *,
        body: Callable[[int, int], bytes] | None = None,
        prefix: str = "s",
    ) -> None:
        self.clients = clients
        self.log = SendLog(rate=rate, senders=len(clients))
        self.prefix = prefix
        self._finished = False
        self._drained = asyncio.Event()
        # One line of plain prose, no trailing blank: the render fast path, like most chat.
        tail = filler(random.Random(3), 255).rstrip(" ,").encode()
        self._head = f'{{"type":"send","project_id":{PROJECT_ID},"client_txn_id":"{prefix}'.encode()
        self._body = body or (lambda mono, real: b"probe %d %d %s" % (mono, real, tail))

    def on_text(self, payload: bytes, now: int, arrival: int) -> None:
        """Hook this into each sender connection's ``on_text``."""
        log = self.log
        if payload.startswith(_ACK):
            start = len(_ACK) + len(self.prefix)
            end = payload.find(b'"', start)
            g = int(payload[start:end])
            s = payload.find(b'"seq":', end) + 6
            seq = int(payload[s : payload.find(b",", s)])
            sched = log.scheduled(g)
            log.acked += 1
            log.ack_at.append(now)
            log.ack_lat.append(now - sched)
            log.ack_sched.append(sched)
            log.ack_seq.append(seq)
        elif payload.startswith(_ERROR):
            log.errors += 1
            if not log.first_error:
                log.first_error = payload[:300]
        else:
            return
        if self._finished and self._answered():
            self._drained.set()

    async def run(self, duration: float, start_delay: float = 0.05) -> SendLog:
        log = self.log
        n = len(self.clients)
        log.start = time.monotonic_ns() + int(start_delay * 1e9)
        stop = log.start + int(duration * 1e9)
        period = 1e9 / log.rate
        head, body = self._head, self._body
        g = 0
        pending: list[list[bytes]] = [[] for _ in range(n)]
        while True:
            now = time.monotonic_ns()
            if now >= stop:
                break
            due = int((now - log.start) / period) + 1 if now >= log.start else 0
            if due > g:
                log.lag.append(now - log.scheduled(g))
                # The body carries when it really leaves (both clocks), for send→receive latency.
                real = time.time_ns()
                while g < due:
                    payload = b'%s%d","body":"%s"}' % (head, g, body(now, real))
                    pending[g % n].append(client_frame(payload))
                    g += 1
                for i, frames in enumerate(pending):
                    if frames:
                        self.clients[i].write(b"".join(frames))
                        frames.clear()
            await asyncio.sleep(TICK_SECS)
        log.sent = g
        self._finished = True
        if self._answered():
            self._drained.set()
        return log

    async def drain(self, limit_secs: float) -> None:
        """Wait until every sent message is acked (or errored), or ``limit_secs`` pass."""
        if self._answered():
            return
        try:
            async with asyncio.timeout(limit_secs):
                await self._drained.wait()
        except TimeoutError:
            pass

    def _answered(self) -> bool:
        log = self.log
        return log.sent > 0 and log.acked + log.errors >= log.sent
