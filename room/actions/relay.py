"""Several servers on one PostgreSQL database: each server's sockets get every project event in
seq order, whichever server committed it (docs/storage.md, "Several writers").

The database is the log of record (DESIGN.md §9). A server publishes its own commits to its
hub as before, while they follow on from what it published last; the events other servers
committed it reads from the database (``events``, the same frames a resume replays) and
publishes in seq order: when one of its own commits would skip a seq (another server's event
came in between), and on a short poll of ``projects.last_seq`` of the projects it has live
subscribers to. A lost race costs latency, never an event or an order: nothing is published
below or beside what this server already published for a project.

What stays per server: the frames outside the stream (typing, delivery labels, rosters,
presence) reach only the sockets of the server whose effect made them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial

from room.infra.hub import Hub
from room.store import Database
from room.store import messages as messages_store
from room.store.db import chunks
from room.store.dialect import Connection

log = logging.getLogger(__name__)

POLL_SECS = 0.05  # how often the projects with live subscribers are checked for others' events
PAGE = 500  # events read per statement while catching up


class Relay:
    """One per server on PostgreSQL (``Services.relay``); SQLite's single server needs none."""

    def __init__(self, db: Database, hub: Hub, poll_secs: float = POLL_SECS) -> None:
        self.db = db
        self.hub = hub
        self.poll_secs = poll_secs
        # Project → the highest seq published to this server's hub; a project is here while
        # it has had a live subscriber here (from the first one's replay end on).
        self._published: dict[int, int] = {}
        self._pumping: dict[int, asyncio.Task[None]] = {}
        self._again: set[int] = set()
        self._poller: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll(), name="relay-poll")

    async def close(self) -> None:
        tasks = [t for t in (self._poller, *self._pumping.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def went_live(self, project_id: int, last_seq: int) -> None:
        """A subscriber went live having had everything up to ``last_seq``. The first one of a
        project starts its relay there (a later one's replay ended at or after it)."""
        self._published.setdefault(project_id, last_seq)

    def publish(self, project_id: int, seq: int, frame: str) -> None:
        """This server committed event ``seq``: published now if it follows on, else read back
        in order with the events before it that another server committed."""
        top = self._published.get(project_id)
        if top is None:
            # Nobody live here yet: a subscriber still replaying gets it in its buffer.
            self.hub.publish(project_id, seq, frame)
            return
        if seq == top + 1:
            self._published[project_id] = seq
            self.hub.publish(project_id, seq, frame)
        elif seq > top:
            self._pump(project_id)

    def _pump(self, project_id: int) -> None:
        if project_id in self._pumping:
            self._again.add(project_id)
            return
        task = asyncio.get_running_loop().create_task(self._catch_up(project_id))
        self._pumping[project_id] = task

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
                if len(page) < PAGE and project_id not in self._again:
                    return
        except Exception:
            log.warning("relaying project %d's events failed; the poll tries again", project_id,
                        exc_info=True)  # fmt: skip
        finally:
            self._pumping.pop(project_id, None)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_secs)
            for project_id in [p for p in self._published if not self.hub.subscriber_count(p)]:
                del self._published[project_id]  # nobody here any more: a new first one starts it
            ids = sorted(self._published)
            if not ids:
                continue
            try:
                heads = await self.db.read(partial(_heads, ids=ids))
            except Exception:
                log.warning("reading the projects' last seqs failed", exc_info=True)
                continue
            for project_id, last_seq in heads:
                top = self._published.get(project_id)
                if top is not None and last_seq > top:
                    self._pump(project_id)


def _heads(conn: Connection, ids: list[int]) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for part in chunks(ids):
        marks = ", ".join("?" * len(part))
        found += [
            (int(r[0]), int(r[1]))
            for r in conn.execute(f"SELECT id, last_seq FROM projects WHERE id IN ({marks})", part)
        ]
    return found
