"""Agent sessions: one per agent member, one turn at a time, a bounded number of turns at once.

``wake`` is called after a commit that gave members deliveries. A session with work runs a
worker task: check that dispatch is open (project active, member active, loop brake clear) →
claim its pending deliveries → run a turn → repeat while there is work; then it stops (idle
sessions hold no task). External agents (``driver = 'external'``) get no turns here: their
deliveries are offered to their live sockets instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from room.actions import runtime as runtime_actions
from room.core import Core
from room.models import Member
from room.providers import ProviderRegistry
from room.routing import Pool, PoolPick, ResolvedRoute, resolve_route
from room.runtime.tools import BUILTIN_TOOLS, Tool
from room.runtime.turn import Turn
from room.store import projects as projects_store
from room.store import routes as routes_store
from room.store import runtime as rt_store

log = logging.getLogger(__name__)

STOP_CONFIRM_SECS = 5.0


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    max_concurrent_turns: int = 4
    max_steps: int = 8
    agent_turn_cap: int = 12
    token_budget: int | None = None
    context_tokens: int = 6_000
    stop_confirm_secs: float = STOP_CONFIRM_SECS


@dataclass(frozen=True, slots=True)
class Limits:
    max_steps: int
    agent_turn_cap: int
    token_budget: int | None


class Session:
    def __init__(self, runtime: Runtime, project_id: int, member_id: int) -> None:
        self.runtime = runtime
        self.project_id = project_id
        self.member_id = member_id
        self.task: asyncio.Task[None] | None = None
        self.poked = False
        self.stop_requested = False
        self.turn_id: int | None = None
        self.call_task: asyncio.Future[Any] | None = None
        self.turn_task: asyncio.Task[Any] | None = None

    @property
    def running(self) -> bool:
        return self.turn_id is not None

    def poke(self) -> None:
        self.poked = True
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(
                self._work(), name=f"session {self.member_id}"
            )

    def request_stop(self) -> None:
        self.stop_requested = True
        if self.call_task is not None and not self.call_task.done():
            self.call_task.cancel()  # abandon the in-flight model call

    async def _work(self) -> None:
        rt = self.runtime
        try:
            while self.poked and not rt.closing:
                self.poked = False
                member = await rt.dispatchable(self.project_id, self.member_id)
                if member is None:
                    return
                self.stop_requested = False
                async with rt.slots:
                    # Claimed only once a slot is free: what waits for a slot stays 'pending'
                    # (a pause meanwhile holds it; it is never failed for waiting).
                    inbound = await runtime_actions.claim(rt.core, self.member_id)
                    if not inbound:
                        continue
                    self.turn_task = asyncio.ensure_future(Turn(rt, self, member, inbound).run())
                    try:
                        await self.turn_task
                    finally:
                        self.turn_task = None
                self.poked = True  # more may have arrived during the turn
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("session %s worker failed", self.member_id)


ExternalPush = Callable[[int], Coroutine[Any, Any, None]]


class Runtime:
    def __init__(
        self,
        core: Core,
        registry: ProviderRegistry,
        settings: RuntimeSettings,
        tools: Mapping[str, Tool] = BUILTIN_TOOLS,
    ) -> None:
        self.core = core
        self.registry = registry
        self.settings = settings
        self.tools = dict(tools)
        self.slots = asyncio.Semaphore(settings.max_concurrent_turns)
        self.sessions: dict[int, Session] = {}
        self.external: dict[int, set[ExternalPush]] = {}
        self.closing = False
        self.recovery: dict[str, Any] = {}

    # -- waking -------------------------------------------------------------------------------

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None:
        for member_id in member_ids:
            pushes = self.external.get(member_id)
            if pushes:
                for push in list(pushes):
                    asyncio.get_running_loop().create_task(push(member_id))
                continue
            session = self.sessions.get(member_id)
            if session is None:
                session = self.sessions[member_id] = Session(self, project_id, member_id)
            session.poke()

    def wake_project(self, project_id: int) -> None:
        """After a resume or a cleared brake: everything pending in the project."""
        asyncio.get_running_loop().create_task(self._wake_pending(project_id))

    async def _wake_pending(self, project_id: int | None) -> None:
        pairs = await self.core.db.read(rt_store.members_with_pending)
        for pid, member_id in pairs:
            if project_id is None or pid == project_id:
                self.wake(pid, [member_id])

    async def start(self) -> None:
        await self._wake_pending(None)

    async def close(self) -> None:
        self.closing = True
        tasks = [s.task for s in self.sessions.values() if s.task is not None]
        for session in self.sessions.values():
            session.request_stop()
            if session.turn_task is not None:
                session.turn_task.cancel()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        await self.registry.aclose()

    # -- external agents ----------------------------------------------------------------------

    def attach_external(self, member_id: int, push: ExternalPush) -> None:
        self.external.setdefault(member_id, set()).add(push)

    def detach_external(self, member_id: int, push: ExternalPush) -> None:
        pushes = self.external.get(member_id)
        if pushes is not None:
            pushes.discard(push)
            if not pushes:
                del self.external[member_id]

    # -- dispatch checks ----------------------------------------------------------------------

    async def dispatchable(self, project_id: int, member_id: int) -> Member | None:
        """The member, if its deliveries may be dispatched now (else they wait, untouched)."""
        roster = await self.core.rosters.get(project_id)
        member = roster.member(member_id)
        if member is None or member.kind != "agent" or member.status != "active":
            return None
        if member.driver != "builtin":
            return None

        def read(conn: Any) -> tuple[str | None, str | None]:
            return projects_store.state_of(conn, project_id), rt_store.brake(conn, project_id)[
                "tripped"
            ]

        state, tripped = await self.core.db.read(read)
        if state != "active" or tripped is not None:
            return None
        return member

    async def limits(self, project_id: int) -> Limits:
        """The project's limits; a missing or unusable value falls back to the server's."""
        values = await self.core.db.read(lambda conn: projects_store.settings(conn, project_id))

        def number(key: str, default: int | None) -> int | None:
            value = values.get(key)
            return value if isinstance(value, int) and value > 0 else default

        return Limits(
            max_steps=number("max_steps", self.settings.max_steps) or self.settings.max_steps,
            agent_turn_cap=number("agent_turn_cap", self.settings.agent_turn_cap)
            or self.settings.agent_turn_cap,
            token_budget=number("token_budget", self.settings.token_budget),
        )

    async def brake_tripped(self, project_id: int) -> bool:
        brake = await self.core.db.read(lambda conn: rt_store.brake(conn, project_id))
        return brake["tripped"] is not None

    async def route_for(self, member: Member) -> ResolvedRoute:
        """Resolved at every request, so a change applies from the next one."""
        config = await self.core.db.read(
            lambda conn: routes_store.settings(conn, member.project_id)
        )
        return resolve_config(config, member)

    async def repeats_itself(self, member: Member, text: str, reply_id: int | None) -> bool:
        """The same final answer as one of the member's last three messages."""
        project_id = member.project_id

        def read(conn: Any) -> list[str]:
            return [
                str(r[0])
                for r in conn.execute(
                    "SELECT body FROM messages WHERE project_id = :p AND author_id = :m"
                    " AND id != :r AND deleted_at IS NULL ORDER BY seq DESC LIMIT 3",
                    {"p": project_id, "m": member.id, "r": reply_id or 0},
                )
            ]

        recent = await self.core.db.read(read)
        normal = " ".join(text.split())
        return bool(normal) and any(" ".join(r.split()) == normal for r in recent)

    # -- stopping -----------------------------------------------------------------------------

    def stop_member(self, member_id: int) -> bool:
        """Request a running turn to stop; True when one was running."""
        session = self.sessions.get(member_id)
        if session is None or not session.running:
            return False
        session.request_stop()
        return True

    async def stop_project(self, project_id: int, wait_secs: float | None = None) -> bool:
        """Request every running turn of a project to stop; True once all are confirmed
        stopped (re-read from the sessions themselves), False if any is still running."""
        sessions = [s for s in self.sessions.values() if s.project_id == project_id]
        for session in sessions:
            session.request_stop()
        pending = [s.turn_task for s in sessions if s.turn_task is not None]
        if pending:
            wait = self.settings.stop_confirm_secs if wait_secs is None else wait_secs
            await asyncio.wait(pending, timeout=wait)
        return not any(s.running for s in sessions)

    def running_members(self, project_id: int) -> list[int]:
        return [
            s.member_id for s in self.sessions.values() if s.project_id == project_id and s.running
        ]


def resolve_config(
    config: Mapping[tuple[str, str], Mapping[str, Any]], member: Member
) -> ResolvedRoute:
    def value(scope: str, target: str = "") -> str | None:
        found = config.get((scope, target))
        return str(found["value"]) if found else None

    pool_raw = value("pool")
    pool = None
    if pool_raw:
        data = json.loads(pool_raw)
        pool = Pool(tuple(data.get("models", ())), bool(data.get("enabled", True)))
    pick_raw = config.get(("pool_pick", str(member.id)))
    pick = PoolPick(str(pick_raw["value"]), str(pick_raw.get("reason") or "")) if pick_raw else None
    return resolve_route(
        project_default=value("project"),
        role_default=value("role", member.role),
        member_route=value("member", str(member.id)),
        pool=pool,
        pool_pick=pick,
    )
