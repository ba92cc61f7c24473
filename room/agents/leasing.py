"""A node's leases on running projects' agent turns, and where those turns run (docs/cluster.md,
"Agents across nodes"; the rules in room.rules.leases).

On PostgreSQL the in-process driver asks :class:`Leasing` before it opens a turn: whether the
project's home is this node (else the turn runs on the home, or waits with
``home_node_offline`` while the home is not heard from) and the fence to run it under (the
lease taken, renewed or adopted). A loop renews the leases of the projects with turns here
(being opened — from the fence taken on — or running) every third of ``lease_secs``; a lease
found lost stops those turns (their writes are refused by the fence anyway). The same loop
sweeps the waiting work: the pending deliveries of projects whose home is this node are
dispatched (a wake lost on the bus, a project moved here), and those whose home is offline say
so.

SQLite is exempt by design: one server holds the database file (the data folder's lock), so
nobody else can write a turn's rows, and a copied or restored folder, which carries another
node id, must not wait out a lease of its former self.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from room.actions import leases as lease_actions
from room.rules.leases import Claim, Home, Lease, home_of, renew_due
from room.services import Services
from room.store import leases as leases_store
from room.store.leases import Fence

log = logging.getLogger(__name__)


class Leasing:
    def __init__(self, core: Services, node: str, lease_secs: float) -> None:
        self.core = core
        self.node = node
        self.lease_secs = lease_secs
        self.held: dict[int, Lease] = {}  # the leases this node took, as it last wrote them
        self.lost = 0  # leases found adopted by another node (``/metrics`` later)
        self._task: asyncio.Task[None] | None = None

    def live(self) -> list[str] | None:
        """The other nodes heard from lately; None when this node cannot tell (no bus, or the
        bus is down): a home is then taken to be up."""
        relay = self.core.relay
        return None if relay is None else relay.live_nodes()

    async def where(self, project_id: int) -> Home:
        home = await self.core.db.read(lambda conn: leases_store.home_of(conn, project_id))
        return home_of(home, self.node, self.live())

    async def fence(self, project_id: int) -> Fence | float | None:
        """The fence to open the project's next turn under; else the seconds until another
        node's lease lapses (try again then), or None when this node is not the home."""
        now = time.time()
        lease = self.held.get(project_id)
        if lease is not None and not renew_due(lease.expires_at, now, self.lease_secs):
            return Fence(project_id, lease.token)
        outcome, lease = await lease_actions.hold(self.core, project_id, self.lease_secs)
        if lease is None:
            return None
        if outcome is Claim.REFUSED:
            return max(0.1, lease.expires_at - now)
        if outcome is Claim.ADOPT:
            log.info("project %d: adopted the lapsed lease (token %d)", project_id, lease.token)
        self.held[project_id] = lease
        return Fence(project_id, lease.token)

    def forget(self, project_id: int) -> None:
        """The lease was found lost (a write refused): taken anew before the next turn."""
        if self.held.pop(project_id, None) is not None:
            self.lost += 1

    # -- the loop -------------------------------------------------------------------------------

    def start(self, running: RunningTurns) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(running), name="leases")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self, running: RunningTurns) -> None:
        while True:
            await asyncio.sleep(self.lease_secs / 3)
            try:
                await self.tick(running)
            except Exception:  # the database away for a moment: the next tick tries again
                log.warning("renewing the leases failed", exc_info=True)

    async def tick(self, running: RunningTurns) -> None:
        busy = sorted(p for p in self.held if running.leased_members(p))
        for project_id in [p for p in self.held if p not in busy]:
            del self.held[project_id]  # idle: left to lapse (taken again by the next turn)
        if busy:
            kept = set(await lease_actions.renew(self.core, busy, self.lease_secs))
            now = time.time()
            for project_id in busy:
                lease = self.held.get(project_id)
                if project_id in kept and lease is not None:
                    self.held[project_id] = Lease(lease.holder, lease.token, now + self.lease_secs)
                    continue
                self.held.pop(project_id, None)
                self.lost += 1
                log.warning("project %d: the lease was lost; its turns here stop", project_id)
                running.stop_lost(project_id)
        await self.sweep(running)

    async def sweep(self, running: RunningTurns) -> None:
        # Turns another node still runs in a project moved here: adopted once its lease lapsed
        # (the adoption settles them; their deliveries wait again and are dispatched below).
        orphaned = await self.core.db.read(lambda c: leases_store.orphaned_at(c, self.node))
        for project_id in orphaned:
            await self.fence(project_id)
        work = await self.core.db.read(leases_store.waiting_work)
        live = self.live()
        offline: set[int] = set()
        for project_id, member_id, home, marked in work:
            where = home_of(home, self.node, live)
            if where is Home.HERE:
                running.wake_here(project_id, member_id)
            elif where is Home.OFFLINE and not marked:
                offline.add(project_id)
        for project_id in sorted(offline):
            await lease_actions.home_offline(self.core, project_id)


class RunningTurns(Protocol):
    """What the loop needs of the in-process driver (room.agents.drivers.InProcessDriver)."""

    def leased_members(self, project_id: int) -> list[int]: ...

    def stop_lost(self, project_id: int) -> None: ...

    def wake_here(self, project_id: int, member_id: int) -> None: ...
