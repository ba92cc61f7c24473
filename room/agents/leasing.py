"""A node's leases on running projects' agent turns, and where those turns run (docs/cluster.md,
"Agents across nodes"; the rules in room.rules.leases).

On PostgreSQL the in-process driver asks :class:`Leasing` before it opens a turn: whether the
project's home is this node (else the turn runs on the home, or waits with
``home_node_offline`` while the home is not heard from) and the fence to run it under (the
lease taken, renewed or adopted). A loop renews the leases of the projects with turns here
(being opened — from the fence taken on — or running) every third of ``lease_secs``; a lease
found lost stops those turns (their writes are refused by the fence anyway). The same loop
settles the turns the database says run here and no session runs (their opening committed as
the node lost the database, before it heard of it), and sweeps the waiting work: the pending
deliveries of projects whose home is this node are dispatched (a wake lost on the bus, a
project moved here), and those whose home is offline say so (so do research runs, whose
wall-clock budget stops counting meanwhile); member stops answered unconfirmed
whose turns are settled now get their notices (room.actions.stops).

SQLite is exempt by design: one server holds the database file (the data folder's lock), so
nobody else can write a turn's rows, and a copied or restored folder, which carries another
node id, must not wait out a lease of its former self.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol

from room.actions import leases as lease_actions
from room.actions import research as research_actions
from room.actions import stops as stop_actions
from room.actions.tenancy import workspaces_folder
from room.actions.workspaces import floating
from room.infra.wslock import WorkspaceLocks
from room.rules.leases import Claim, Home, Lease, home_of, renew_due
from room.services import Services
from room.store import Tx
from room.store import leases as leases_store
from room.store import research as research_store
from room.store.dialect import Connection
from room.store.leases import Fence

log = logging.getLogger(__name__)


class Leasing:
    def __init__(self, core: Services, node: str, lease_secs: float) -> None:
        self.core = core
        self.node = node
        self.lease_secs = lease_secs
        self.held: dict[int, Lease] = {}  # the leases this node took, as it last wrote them
        # Projects whose workspace is in the shared folder (no home: any node, under the
        # lease), as :meth:`where` last found them; and who held a lease this node was refused.
        self.floats: dict[int, bool] = {}
        self.refused_by: dict[int, str] = {}
        # The research runner's side (room.agents.research_run): the projects it runs research
        # of here (their leases are renewed too), and how to start a run here.
        self.research: ResearchHere | None = None
        # The locks this node holds on shared workspaces (room.infra.wslock); None when the
        # operator declared no shared folder.
        shared = core.settings.workspaces_dir is not None
        self.workspaces = WorkspaceLocks(workspaces_folder(core.settings)) if shared else None
        self._locking = asyncio.Lock()
        self._blocked: set[int] = set()  # projects whose shared workspace was found held
        self._task: asyncio.Task[None] | None = None
        self._soon = asyncio.Event()  # sweep now, not at the next third of lease_secs

    def live(self) -> list[str] | None:
        """The other nodes heard from lately; None when this node cannot tell (no bus, or the
        bus is down): a home is then taken to be up."""
        relay = self.core.relay
        return None if relay is None else relay.live_nodes()

    async def where(self, project_id: int) -> Home:
        """Where the project's agent work runs, seen from here: a project whose workspace is
        in the shared folder runs here (the lease decides between the nodes)."""

        def read(conn: Connection) -> tuple[str | None, bool]:
            return leases_store.home_of(conn, project_id), floating(self.core, conn, project_id)

        home, floats = await self.core.db.read(read)
        self.floats[project_id] = floats
        return Home.HERE if floats else home_of(home, self.node, self.live())

    def holder_busy(self, project_id: int) -> bool:
        """A floating project's lease was refused to this node and its holder is heard from:
        that node was woken too and works in the project (nothing to try again here; the sweep
        looks again)."""
        live = self.live()
        holder = self.refused_by.get(project_id)
        return self.floats.get(project_id, False) and live is not None and holder in live

    async def fence(self, project_id: int) -> Fence | float | None:
        """The fence to open the project's next turn under; else the seconds until another
        node's lease lapses (try again then), or None when this node is not the home."""
        now = time.time()
        lease = self.held.get(project_id)
        if lease is not None and not renew_due(lease.expires_at, now, self.lease_secs):
            return Fence(project_id, lease.token)
        outcome, lease = await lease_actions.hold(
            self.core, project_id, self.lease_secs, floating=self.floats.get(project_id, False)
        )
        if lease is None:
            return None
        if outcome is Claim.REFUSED:
            self.refused_by[project_id] = lease.holder
            return max(0.1, lease.expires_at - now)
        if outcome is Claim.ADOPT:
            log.info("project %d: adopted the lapsed lease (token %d)", project_id, lease.token)
        self.held[project_id] = lease
        return Fence(project_id, lease.token)

    async def enter_workspace(self, project_id: int) -> Callable[[], None] | None:
        """Before a turn or a research run of the project opens here: in a shared workspace,
        hold its lock — None while another node holds it (one paused past the lease this node
        adopted, still able to run a command there once it wakes). Else what lets it go once
        the turn or run ended (nothing to let go elsewhere: a home node's own disk needs no
        lock, the lease keeps the others away)."""
        if self.workspaces is None or not self.floats.get(project_id, False):
            return _nothing
        workspaces = self.workspaces
        async with self._locking:
            entered = await asyncio.to_thread(workspaces.enter, project_id)
        if not entered:
            self.core.db.leases.workspace_refused += 1
            if project_id not in self._blocked:  # said once, not at every retry
                self._blocked.add(project_id)
                log.warning("project %d: another node still holds its shared workspace; its "
                            "work here waits", project_id)  # fmt: skip
            return None
        self._blocked.discard(project_id)
        return lambda: workspaces.leave(project_id)

    def forget(self, project_id: int) -> None:
        """The lease was found lost (a write refused): taken anew before the next turn."""
        if self.held.pop(project_id, None) is not None:
            self.core.db.leases.lost += 1

    # -- the loop -------------------------------------------------------------------------------

    def start(self, running: RunningTurns) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(running), name="leases")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.workspaces is not None:
            self.workspaces.close()

    def sweep_soon(self) -> None:
        """Sweep now: a node's bus came (back) up, so wakes sent while it was down — or by it,
        while it could not send — were lost; the waiting deliveries are in the database."""
        self._soon.set()

    async def _loop(self, running: RunningTurns) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._soon.wait(), self.lease_secs / 3)
            self._soon.clear()
            try:
                await self.tick(running)
            except Exception:  # the database away for a moment: the next tick tries again
                log.warning("renewing the leases failed", exc_info=True)

    async def tick(self, running: RunningTurns) -> None:
        researching = set(self.research.projects()) if self.research is not None else set()
        busy = sorted(p for p in self.held if running.leased_members(p) or p in researching)
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
                self.core.db.leases.lost += 1
                log.warning("project %d: the lease was lost; its turns here stop", project_id)
                running.stop_lost(project_id)
                if self.research is not None:
                    self.research.stop_lost(project_id)
        await self.sweep(running)

    async def sweep(self, running: RunningTurns) -> None:
        # Turns opened here whose opening this node never heard of (its database link went
        # between the commit and the answer): no session runs them, and they would keep their
        # members from every later turn. Read first, then checked against the sessions, so a
        # turn being opened now (its session busy) is never taken for one.
        mine = await self.core.db.read(lambda c: leases_store.running_at(c, self.node))
        unheard = [turn for turn, member in mine if not running.busy(member)]
        if unheard:
            settled = await lease_actions.settle_unheard(self.core, unheard)
            for member_id in settled:
                log.warning("member %d: settled a turn this node opened but never ran", member_id)
        # Turns another node still runs in a project moved here: adopted once its lease lapsed
        # (the adoption settles them; their deliveries wait again and are dispatched below).
        orphaned = await self.core.db.read(lambda c: leases_store.orphaned_at(c, self.node))
        work = await self.core.db.read(leases_store.waiting_work)
        research = await self.core.db.read(research_store.waiting)
        projects = {w[0] for w in work} | {r[1] for r in research} | {o[0] for o in orphaned}
        floats = await self.core.db.read(
            lambda conn: {p: floating(self.core, conn, p) for p in projects}
        )
        self.floats.update(floats)
        # Work another node runs in a project moved here, or in one whose workspace is shared
        # (a node paused or dead there holds its lease): adopted once that lapsed (the
        # adoption settles it; its deliveries wait again and are dispatched below).
        for project_id, home in orphaned:
            if home == self.node or floats[project_id]:
                await self.fence(project_id)
        live = self.live()
        # Research running in a project whose work is here, and not running here (started on
        # another node, a hint lost, the project moved here): its runner starts it.
        for research_id, project_id, home, waits in research:
            where = Home.HERE if floats[project_id] else home_of(home, self.node, live)
            if where is Home.HERE and self.research is not None:
                self.research.start(research_id, forward=False)
            elif where is Home.OFFLINE and waits is None:
                # Its home is not heard: it cannot step, so its wall-clock budget stops
                # counting and its card says why (home_node_offline) until the home is back.
                await self.core.db.write(partial(_wait_for_home, research_id), locks=(project_id,))
        offline: set[int] = set()
        for project_id, member_id, home, marked in work:
            where = Home.HERE if floats[project_id] else home_of(home, self.node, live)
            if where is Home.HERE:
                running.wake_here(project_id, member_id)
            elif where is Home.OFFLINE and not marked:
                offline.add(project_id)
        for project_id in sorted(offline):
            await lease_actions.home_offline(self.core, project_id)
        # Member stops answered unconfirmed whose turns still run here: the hint that asked
        # this node may have been lost (it was paused or cut off from the bus) and the node
        # asked may have restarted since, so nobody asks again; the owed row does.
        owed = await self.core.db.read(lambda c: stop_actions.owed_running_at(c, self.node))
        for member_id in owed:
            if running.stop_member(member_id):
                log.info("member %d: stopped a turn whose stop was owed", member_id)
        # Member stops answered unconfirmed whose turns are settled now: their notices, once,
        # whichever node gets there first (the node asked may have restarted meanwhile).
        posted = await stop_actions.finish_settled(self.core)
        if posted:
            log.info("posted %d notice(s) of member stops confirmed later", posted)


def _nothing() -> None:
    return None


def _wait_for_home(research_id: int, conn: Connection, tx: Tx) -> bool:
    return research_actions.wait_for_home(conn, tx, research_id)


class ResearchHere(Protocol):
    """What the loop needs of the research runner (room.agents.research_run.ResearchRunner)."""

    def projects(self) -> list[int]: ...

    def stop_lost(self, project_id: int) -> None: ...

    def start(self, research_id: int, *, forward: bool = True) -> None: ...


class RunningTurns(Protocol):
    """What the loop needs of the in-process driver (room.agents.drivers.InProcessDriver)."""

    def leased_members(self, project_id: int) -> list[int]: ...

    def stop_lost(self, project_id: int) -> None: ...

    def wake_here(self, project_id: int, member_id: int) -> None: ...

    def busy(self, member_id: int) -> bool: ...

    def stop_member(self, member_id: int) -> bool: ...
