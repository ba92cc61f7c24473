"""Several servers on one PostgreSQL database: each server's sockets get every project event in
seq order, whichever server committed it (docs/storage.md, "Several writers").

The database is the log of record (DESIGN.md §9). A server publishes its own commits to its
hub as before, while they follow on from what it published last; the events other servers
committed it reads from the database (``events``, the same frames a resume replays) and
publishes in seq order: when one of its own commits would skip a seq (another server's event
came in between), and on a short poll of ``projects.last_seq`` of the projects it has live
subscribers to. A lost race costs latency, never an event or an order: nothing is published
below or beside what this server already published for a project.

With a bus (``--bus nats://…``, room.infra.bus, docs/cluster.md) a server also publishes each
of its commits as a hint on the project's subject, and the hints of the others feed a
per-project sequencer here: a seq already published is dropped, the next one goes out (and the
held ones that follow it), a gap waits briefly (:data:`GAP_WAIT_SECS`) for the hint in flight and
is then refilled from the database. The poll stays as the safety net at a much longer period
(``bus_poll_secs``) while the bus is up, back to :data:`POLL_SECS` while it is down, and every
project is swept when the bus (re)connects: a hint that never came costs latency only.

Without a bus, the frames outside the stream (typing, delivery labels, rosters, presence) reach
only the sockets of the server whose effect made them; with one, room.infra.bus.ClusterHub
carries them, and a roster change is told to the others (:meth:`Relay.roster_changed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from room.infra.bus import Bus, ClusterHub
from room.infra.fanout import Subscription
from room.infra.hub import Hub
from room.services import EventRelay
from room.store import Database
from room.store import messages as messages_store
from room.store.db import chunks
from room.store.dialect import Connection

log = logging.getLogger(__name__)

POLL_SECS = 0.05  # how often the projects with live subscribers are checked for others' events
PAGE = 500  # events read per statement while catching up
GAP_WAIT_SECS = 0.02  # a hint ahead of the next seq waits this long for the ones in flight
# ``room_bus_lag_seconds``: from another server's commit to this one hearing its hint.
LAG_BOUNDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class Relay:
    """One per server on PostgreSQL (``Services.relay``); SQLite's single server needs none."""

    def __init__(
        self,
        db: Database,
        hub: Hub,
        poll_secs: float = POLL_SECS,
        *,
        bus: Bus | None = None,
        bus_poll_secs: float = 1.0,
        on_roster: Callable[[int], None] = lambda project_id: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.hub = hub
        self.poll_secs = poll_secs
        self.bus = bus
        self.bus_poll_secs = bus_poll_secs
        self.on_roster = on_roster
        self.clock = clock  # wall time: an event hint says when it was sent, for the lag
        # The sequencer's hints that came ahead of the next seq: project → seq → frame.
        self._held: dict[int, dict[int, str]] = {}
        self._gap_timers: dict[int, asyncio.TimerHandle] = {}
        self._wake = asyncio.Event()
        self.hints_applied = 0  # events published from a hint (``/metrics``)
        self.hints_dropped = 0  # hints of a seq already published
        self.refills = 0  # catch-ups from the database (a gap, the poll, a sweep)
        self.peer_checks = 0  # checks of the last seqs asked by a node whose bus came (back) up
        # The bus's lag (``/metrics``): counts per upper bound of LAG_BOUNDS (the last slot
        # past every bound), and their sum in seconds.
        self.lag_counts = [0] * (len(LAG_BOUNDS) + 1)
        self.lag_seconds = 0.0
        # What else the bus brings (the agents' wakes and stop requests, room/app.py): each
        # handler says whether the hint was its.
        self.handlers: list[Callable[[int | None, dict[str, Any]], bool]] = []
        # A node's bus came (back) up, this one's or another's: what it could not say meanwhile
        # (agents' wakes) is looked for in the database now (room.agents.leasing's sweep).
        self.on_rejoin: Callable[[], None] = lambda: None
        if bus is not None:
            bus.on_hint = self._heard
            bus.on_reconnect = self.sweep
            bus.on_disconnect = self._wake.set
        # Project → the highest seq published to this server's hub; a project is here while
        # it has had a live subscriber here (from the first one's replay end on).
        self._published: dict[int, int] = {}
        # Project → where its stream here began: the first live subscriber's last seq.
        self._began: dict[int, int] = {}
        self._pumping: dict[int, asyncio.Task[None]] = {}
        self._again: set[int] = set()
        self._poller: asyncio.Task[None] | None = None
        self._failing = False  # a read failed: check again at the short period (_retry_soon)

    def start(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll(), name="relay-poll")
        if self.bus is not None:
            self.bus.start()

    async def close(self) -> None:
        for timer in self._gap_timers.values():
            timer.cancel()
        if self.bus is not None:
            await self.bus.close()
        tasks = [t for t in (self._poller, *self._pumping.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def went_live(self, project_id: int, last_seq: int) -> None:
        """A subscriber went live having had everything up to ``last_seq``. The first one of a
        project starts its relay there; a later one's replay reached :meth:`began` first."""
        if project_id in self._published:
            return
        self._published[project_id] = self._began[project_id] = last_seq
        if self.bus is not None:
            self.bus.follow(project_id)
        # What committed since that subscriber's replay read the database — another server's
        # (its hints were dropped: nobody was live here) or this one's own (not published
        # while nobody was live, see :meth:`publish`) — is not held anywhere: one read now,
        # rather than waiting for the next hint or the poll.
        self._pump(project_id)

    def began(self, project_id: int) -> int | None:
        """The seq after which this server's hub has had (or will have) every event of the
        project in order, while one of its subscribers stays registered; None while none is
        live. A subscriber registered before another one went live buffered only what came
        after this: its replay must reach it before it goes live (room.ws), or the events
        between its read of the database and the other's would be skipped."""
        return self._began.get(project_id) if project_id in self._published else None

    def stats(self) -> dict[str, float]:
        """What ``/metrics`` shows of the relay and the bus (docs/cluster.md)."""
        bus = self.bus
        return {
            "bus_up": float(bus is not None and bus.up),
            "bus_published": float(bus.published if bus else 0),
            "bus_received": float(bus.received if bus else 0),
            "bus_unsent": float(bus.unsent if bus else 0),
            "hints_applied": float(self.hints_applied),
            "hints_dropped": float(self.hints_dropped),
            "refills": float(self.refills),
            "peer_checks": float(self.peer_checks),
            "followed": float(len(self._published)),
            "peers": float(len(bus.peers()) if bus else 0),
        }

    def lag(self) -> tuple[tuple[float, ...], list[int], float]:
        """The bus's lag as ``/metrics`` shows it: bounds, counts per bound, their sum."""
        return LAG_BOUNDS, list(self.lag_counts), self.lag_seconds

    def live_nodes(self) -> list[str] | None:
        """The other nodes heard on the bus lately; None when this node cannot tell a node
        that is down from one that is up: without a bus, while it is down, and for the first
        heartbeats after it came (back) up (``Bus.peers_known``)."""
        if self.bus is None or not self.bus.peers_known:
            return None
        return self.bus.peers()

    def roster_changed(self, project_id: int) -> None:
        """This server changed the project's roster: the others drop their cached one."""
        if self.bus is not None:
            self.bus.send(project_id, {"k": "r"})

    def sweep(self) -> None:
        """Catch up every followed project from the database (the bus came (back) up: hints
        may have been lost meanwhile)."""
        self._wake.set()
        for project_id in list(self._published):
            self._pump(project_id)
        self.on_rejoin()

    def _heard(self, project_id: int | None, hint: dict[str, Any]) -> None:
        kind = hint.get("k")
        if kind == "e" and project_id is not None:
            self._observe_lag(hint.get("t"))
            self._sequence(project_id, int(hint["s"]), str(hint["f"]))
        elif kind == "r" and project_id is not None:
            self.on_roster(project_id)
        elif kind == "sw" and project_id is None:
            self.peer_checks += 1
            self._wake.set()  # another node's bus came (back) up: check the last seqs now
            self.on_rejoin()  # and the agents' deliveries it committed meanwhile
        elif isinstance(self.hub, ClusterHub) and self.hub.heard(project_id, hint):
            return
        else:
            for handler in self.handlers:
                if handler(project_id, hint):
                    return

    def _observe_lag(self, sent: object) -> None:
        """An event hint's time from its commit (the sending server's clock) to now (this
        one's): the nodes' clocks are kept in sync (NTP) for the leases already; a skew shows
        as lag, or as none (a negative lag counts as 0). A hint without a time is not counted."""
        if isinstance(sent, bool) or not isinstance(sent, int | float):
            return
        lag = max(0.0, self.clock() - sent)
        self.lag_counts[bisect_left(LAG_BOUNDS, lag)] += 1
        self.lag_seconds += lag

    def wake_elsewhere(self, project_id: int, member_ids: list[int]) -> None:
        """Agents woken here: an external one's socket may be on another server."""
        if self.bus is not None and member_ids:
            self.bus.send(None, {"k": "w", "p": project_id, "m": member_ids})

    def stop_project_elsewhere(self, project_id: int) -> None:
        """Every turn of the project is asked to stop (archive, trash, purge): some may run on
        other servers. Only this server's are confirmed by the stop; the others' end at their
        next step boundary, as a stop requested here does."""
        if self.bus is not None:
            self.bus.send(None, {"k": "sp", "p": project_id})

    def start_research_elsewhere(self, research_id: int) -> None:
        """A research run started here runs on its project's home: that node is told (its
        runner checks where the project's work runs; the leases' sweep is the safety net)."""
        if self.bus is not None:
            self.bus.send(None, {"k": "rs", "r": research_id})

    def stop_research_elsewhere(self, research_id: int) -> None:
        """A research run paused or stopped here that does not run here: its node stops it
        (its next step's gate would, after its model call)."""
        if self.bus is not None:
            self.bus.send(None, {"k": "rx", "r": research_id})

    def stop_elsewhere(self, member_id: int) -> None:
        """A stop request for a turn that does not run here: it may run on another server."""
        if self.bus is not None:
            self.bus.send(None, {"k": "s", "m": member_id})

    def _sequence(self, project_id: int, seq: int, frame: str) -> None:
        """Another server's event ``seq``: the sequencer."""
        top = self._published.get(project_id)
        if top is None:  # nobody live here (yet): a replay reads it from the database
            return
        if seq <= top:
            self.hints_dropped += 1
            return
        if seq > top + 1:  # one before it is in flight, or lost: wait briefly, then refill
            self._held.setdefault(project_id, {})[seq] = frame
            if project_id not in self._gap_timers:
                loop = asyncio.get_running_loop()
                self._gap_timers[project_id] = loop.call_later(
                    GAP_WAIT_SECS, self._gap_expired, project_id
                )
            return
        self._published[project_id] = seq
        self.hub.publish(project_id, seq, frame)
        self.hints_applied += 1
        self._drain(project_id)

    def _drain(self, project_id: int) -> None:
        """Publish the held hints that follow on from what was published; forget the older."""
        held = self._held.get(project_id)
        if held is None:
            return
        top = self._published.get(project_id)
        while top is not None and (frame := held.pop(top + 1, None)) is not None:
            top += 1
            self._published[project_id] = top
            self.hub.publish(project_id, top, frame)
            self.hints_applied += 1
        for seq in [s for s in held if top is None or s <= top]:
            del held[seq]
        if not held:
            del self._held[project_id]
            timer = self._gap_timers.pop(project_id, None)
            if timer is not None:
                timer.cancel()

    def _gap_expired(self, project_id: int) -> None:
        self._gap_timers.pop(project_id, None)
        if project_id in self._held:
            self._pump(project_id)

    def publish(self, project_id: int, seq: int, frame: str) -> None:
        """This server committed event ``seq``: published now if it follows on, else read back
        in order with the events before it that another server committed. With a bus, the
        others hear of it."""
        if self.bus is not None:
            self.bus.send(project_id, {"k": "e", "s": seq, "f": frame, "t": self.clock()})
        top = self._published.get(project_id)
        if top is None:
            # Nobody live here yet: not published, for a subscriber still replaying would
            # buffer it ahead of the other servers' events before it, whose hints were dropped
            # (it skipped them: 1, then 4). Its replay, or the read when it goes live, has it.
            return
        if seq == top + 1:
            self._published[project_id] = seq
            self.hub.publish(project_id, seq, frame)
            self._drain(project_id)
        elif seq > top:
            self._pump(project_id)

    def _pump(self, project_id: int) -> None:
        if project_id in self._pumping:
            self._again.add(project_id)
            return
        task = asyncio.get_running_loop().create_task(self._catch_up(project_id))
        self._pumping[project_id] = task
        self.refills += 1

    async def _catch_up(self, project_id: int) -> None:
        try:
            while True:
                self._again.discard(project_id)
                top = self._published.get(project_id)
                if top is None:
                    return
                page = await self.db.read(
                    partial(messages_store.replay, project_id=project_id, after_seq=top, limit=PAGE)
                )
                for seq, frame in page:
                    current = self._published.get(project_id)
                    if current is None:
                        return
                    if seq == current + 1:
                        self._published[project_id] = seq
                        self.hub.publish(project_id, seq, frame)
                self._drain(project_id)
                if len(page) < PAGE and project_id not in self._again:
                    return
        except Exception:
            # Said once per outage (every 50 ms it would flood the log); the rest at debug.
            log.log(logging.DEBUG if self._failing else logging.WARNING,
                    "relaying project %d's events failed; the poll tries again", project_id,
                    exc_info=True)  # fmt: skip
            self._retry_soon()
        finally:
            self._pumping.pop(project_id, None)

    def _retry_soon(self) -> None:
        """A read of the database failed (its link is down): the next check comes at the short
        period, whatever the bus, until one succeeds. A sweep or a refill that failed would
        otherwise wait for the long poll while the bus is up."""
        self._failing = True

    async def _poll(self) -> None:
        while True:
            bus_up = self.bus is not None and self.bus.up
            period = self.bus_poll_secs if bus_up and not self._failing else self.poll_secs
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # the bus went down: the short period now
                await asyncio.wait_for(self._wake.wait(), period)
            for project_id in [p for p in self._published if not self.hub.subscriber_count(p)]:
                del self._published[project_id]  # nobody here any more: a new first one starts it
                self._began.pop(project_id, None)
                self._held.pop(project_id, None)
                if self.bus is not None:
                    self.bus.unfollow(project_id)
            ids = sorted(self._published)
            if not ids:
                continue
            try:
                heads = await self.db.read(partial(_heads, ids=ids))
            except Exception:
                log.log(logging.DEBUG if self._failing else logging.WARNING,
                        "reading the projects' last seqs failed", exc_info=True)  # fmt: skip
                self._retry_soon()
                continue
            self._failing = False
            for project_id, last_seq in heads:
                top = self._published.get(project_id)
                if top is not None and last_seq > top:
                    self._pump(project_id)


async def go_live(
    hub: Hub,
    relay: EventRelay | None,
    sub: Subscription,
    last: int,
    replay: Callable[[int], Awaitable[int]],
) -> None:
    """A subscriber that had everything up to ``last`` (its replay's end, or the head it was
    told) goes live: the events buffered meanwhile follow, then the stream.

    On several servers, another subscriber of the project may have gone live here after this
    one's read of the database, starting the server's stream further on (:meth:`Relay.began`):
    this one buffered only what came after that, so it first replays on up to it (``replay``
    sends the events after a seq from the database and returns the last one sent)."""
    if relay is not None and sub.active:
        began = relay.began(sub.project_id)
        if began is not None and last < began:
            last = await replay(last)
    hub.go_live(sub, last)
    if relay is not None:  # what it had, buffered frames included
        relay.went_live(sub.project_id, sub.last_seq)


def _heads(conn: Connection, ids: list[int]) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for part in chunks(ids):
        marks = ", ".join("?" * len(part))
        found += [
            (int(r[0]), int(r[1]))
            for r in conn.execute(f"SELECT id, last_seq FROM projects WHERE id IN ({marks})", part)
        ]
    return found
