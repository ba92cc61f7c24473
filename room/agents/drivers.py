"""The drivers the agents' scheduler hands members to.

* :class:`InProcessDriver` runs an in-process agent's turns with a provider: one session per
  member, one turn at a time, a bounded number of turns at once. A session with work opens a
  turn (its deliveries claimed and the dispatch rule checked in that one write), runs it, and
  repeats while there is work; then it stops (idle sessions hold no task).
* :class:`ExternalDriver` pushes an external agent's deliveries to the sockets it has open
  (registered by ``/ws`` in ``core.inboxes``); the agent confirms them itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from room.actions import leases as lease_actions
from room.actions import presence
from room.actions import turns as turn_actions
from room.agents.leasing import Leasing
from room.agents.memory import MemorySession
from room.agents.turn import Turn, TurnEnv, TurnOutcome
from room.errors import LeaseLostError
from room.rules.entities import Member
from room.rules.injection import MEMORY_WRITE_TOOLS
from room.rules.leases import Home
from room.services import Services
from room.store.leases import FENCE, Fence

log = logging.getLogger(__name__)

# A shared workspace another node still holds: how soon its waiting work is tried again.
WORKSPACE_RETRY_SECS = 1.0


class ExternalDriver:
    def __init__(self, core: Services) -> None:
        self.core = core

    def takes(self, member_id: int) -> bool:
        return bool(self.core.inboxes.of(member_id))

    def wake(self, project_id: int, member_id: int) -> None:
        loop = asyncio.get_running_loop()
        for push in self.core.inboxes.of(member_id):
            task = loop.create_task(push(member_id))
            self.core.background.add(task)
            task.add_done_callback(self.core.background.discard)


class Session:
    """An in-process agent's session: whether it has work, and the turn it runs."""

    def __init__(self, driver: InProcessDriver, project_id: int, member_id: int) -> None:
        self.driver = driver
        self.project_id = project_id
        self.member_id = member_id
        self.task: asyncio.Task[None] | None = None
        self.poked = False
        self.turn: Turn | None = None
        self.turn_task: asyncio.Task[object] | None = None
        self.in_slot = False  # opening or running a turn: see slot()
        # The project records section this session's turns start from, and its reminders.
        self.memory = MemorySession()

    @property
    def running(self) -> bool:
        return self.turn is not None

    def poke(self) -> None:
        self.poked = True
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(
                self._work(), name=f"session {self.member_id}"
            )

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the driver's turn slots, held from taking the lease's fence until the turn
        ends: the lease loop renews the lease for it all that time. Counting only a running
        turn let a tick that came while the turn's row was being written see the project idle
        and drop its lease, which then lapsed under the turn, and the node never noticed it
        adopted by another (the turn went on until a write was refused)."""
        async with self.driver.slots:
            self.in_slot = True
            try:
                yield
            finally:
                self.in_slot = False

    def request_stop(self) -> None:
        if self.turn is not None:
            self.turn.stop()

    async def _work(self) -> None:
        driver = self.driver
        core = driver.env.core
        try:
            while self.poked and not driver.env.closing():
                self.poked = False
                FENCE.set(None)  # the lease's own writes are not a turn's
                member = (await core.rosters.get(self.project_id)).member(self.member_id)
                if member is None or member.kind != "agent" or member.driver != "builtin":
                    return
                leasing = driver.leasing
                if leasing is not None:  # a cluster: turns run on the project's home only
                    where = await leasing.where(self.project_id)
                    if where is Home.OFFLINE:
                        await lease_actions.home_offline(core, self.project_id)
                    if where is not Home.HERE:
                        return
                async with self.slot():
                    fence = None if leasing is None else await leasing.fence(self.project_id)
                    if isinstance(fence, float):  # another node's lease: tried when it lapses
                        if leasing is None or not leasing.holder_busy(self.project_id):
                            asyncio.get_running_loop().call_later(fence, self.poke)
                        return
                    if leasing is not None and fence is None:  # the home moved meanwhile
                        return
                    leave = (
                        None if leasing is None else await leasing.enter_workspace(self.project_id)
                    )
                    if leasing is not None and leave is None:
                        # A shared workspace another node still works in (one paused past the
                        # lease this node adopted): the work waits, pending, and is tried again.
                        asyncio.get_running_loop().call_later(WORKSPACE_RETRY_SECS, self.poke)
                        return
                    try:
                        outcome = await self._turn(member, fence)
                    finally:
                        if leave is not None:
                            leave()
                    if outcome is None:
                        continue
                # More may have arrived during the turn.
                self.poked = self.poked or outcome.look_again
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s worker failed", self.member_id)

    async def _turn(self, member: Member, fence: Fence | None) -> TurnOutcome | None:
        """Open and run one turn under ``fence``; None when none opened (look again)."""
        driver = self.driver
        core = driver.env.core
        leasing = driver.leasing
        # The turn's writes, from its opening on, carry the lease's fence.
        FENCE.set(fence)
        # Claimed only once a slot is free: what waits for a slot stays 'pending'
        # (a pause meanwhile holds it; it is never failed for waiting).
        limits = await turn_actions.limits(core, self.project_id)
        try:
            start = await turn_actions.begin_turn(
                core, self.member_id, limits.agent_turn_cap, project_id=self.project_id
            )
        except LeaseLostError:  # adopted since this node last renewed it
            assert leasing is not None
            leasing.forget(self.project_id)
            self.poked = True  # looked at again: the home, then the lease
            return None
        if start.turn_id is None:
            # Dispatch is closed (woken again when it reopens) or nothing is pending;
            # a wake that came meanwhile (a resume) is looked at, not lost.
            return None
        turn = self.turn = Turn(driver.env, member, start, limits, self.memory)
        self.turn_task = asyncio.ensure_future(turn.run())
        presence.schedule(core, self.project_id)  # running
        try:
            outcome = await self.turn_task
        finally:
            self.turn = None
            self.turn_task = None
            self.memory.after_turn(
                now=time.time(),
                work=turn.tools_ok if turn.can_record else (),
                recorded=bool(MEMORY_WRITE_TOOLS & set(turn.tools_ok)),
                max_given=core.settings.memory_reminder_max,
                gap_secs=core.settings.memory_reminder_gap_secs,
            )
            presence.schedule(core, self.project_id)  # idle again
        return outcome


class InProcessDriver:
    def __init__(self, env: TurnEnv, max_concurrent_turns: int) -> None:
        self.env = env
        self.slots = asyncio.Semaphore(max_concurrent_turns)
        self.sessions: dict[int, Session] = {}
        # PostgreSQL: the node's leases and the projects' homes (room.agents.leasing); None on
        # SQLite, whose single server needs neither.
        self.leasing: Leasing | None = None

    def wake(self, project_id: int, member_id: int) -> None:
        session = self.sessions.get(member_id)
        if session is None:
            session = self.sessions[member_id] = Session(self, project_id, member_id)
        session.poke()

    def wake_here(self, project_id: int, member_id: int) -> None:
        self.wake(project_id, member_id)

    def busy(self, member_id: int) -> bool:
        """Whether the member's session is at work here (opening, running or ending a turn)."""
        session = self.sessions.get(member_id)
        return session is not None and session.task is not None and not session.task.done()

    def stop_lost(self, project_id: int) -> None:
        """The project's lease was lost: its turns here stop (their writes are refused)."""
        for session in self.sessions.values():
            if session.project_id == project_id:
                session.request_stop()

    def stop_member(self, member_id: int) -> bool:
        session = self.sessions.get(member_id)
        if session is None or not session.running:
            return False
        session.request_stop()
        return True

    async def stop_project(self, project_id: int, wait_secs: float) -> bool:
        sessions = [s for s in self.sessions.values() if s.project_id == project_id]
        for session in sessions:
            session.request_stop()
        pending = [s.turn_task for s in sessions if s.turn_task is not None]
        if pending:
            await asyncio.wait(pending, timeout=wait_secs)
        return not any(s.running for s in sessions)

    def running_members(self, project_id: int) -> list[int]:
        return [
            s.member_id for s in self.sessions.values() if s.project_id == project_id and s.running
        ]

    def leased_members(self, project_id: int) -> list[int]:
        """Members opening or running a turn of the project: its lease is renewed for them."""
        return [
            s.member_id for s in self.sessions.values() if s.project_id == project_id and s.in_slot
        ]

    async def close(self) -> None:
        tasks = [s.task for s in self.sessions.values() if s.task is not None]
        for session in self.sessions.values():
            session.request_stop()
            if session.turn_task is not None:
                session.turn_task.cancel()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
