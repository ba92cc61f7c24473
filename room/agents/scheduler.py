"""The agents' scheduler: what actions wake (``core.Waker``), handing each member to the driver
that serves it — the external driver while an external agent has a socket open, else the
in-process driver (docs/architecture.md, "Agents")."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from room.agents.drivers import ExternalDriver, InProcessDriver
from room.agents.leasing import Leasing
from room.agents.tools import BUILTIN_TOOLS, Tool, Toolbox, WorkEnv
from room.agents.turn import TurnEnv, read_only_roles
from room.infra.sandbox import Sandbox
from room.providers import ProviderRegistry
from room.rules.entities import Member
from room.services import Services
from room.store import deliveries as deliveries_store

STOP_CONFIRM_SECS = 5.0


@dataclass(frozen=True, slots=True)
class AgentSettings:
    max_concurrent_turns: int = 4
    context_tokens: int = 32_000
    stop_confirm_secs: float = STOP_CONFIRM_SECS


class Scheduler:
    def __init__(
        self,
        core: Services,
        registry: ProviderRegistry,
        settings: AgentSettings,
        tools: Mapping[str, Tool] = BUILTIN_TOOLS,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.core = core
        self.registry = registry
        self.settings = settings
        self.tools = dict(tools)
        self.closing = False
        # Set by start(), once the start-up reconciliation has settled what the last run of
        # this node left: a turn opened before it (on another node's wake heard on the bus, or
        # an effect of the start-up's own writes) would be taken for a leftover and settled
        # while it ran on, consuming deliveries the settling had unbound.
        self.started = False
        self.recovery: dict[str, Any] = {}
        # The command runner as the start-up probe found it, and the serial-mode writer locks:
        # one per server, owned here (no module-level state).
        self.work = WorkEnv(sandbox) if sandbox is not None else None
        env = TurnEnv(
            core, registry, self.tools, settings.context_tokens, lambda: self.closing, self.work
        )
        self.external = ExternalDriver(core)
        self.in_process = InProcessDriver(env, settings.max_concurrent_turns)
        # Several nodes on PostgreSQL: turns under a lease, on the project's home node only.
        if core.db.backend == "postgresql" and core.db.node is not None:
            self.in_process.leasing = Leasing(core, core.db.node, core.settings.lease_secs)

    # -- waking -------------------------------------------------------------------------------

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None:
        if not self.started:  # start() wakes everything then pending, from the database
            return
        for member_id in member_ids:
            if self.external.takes(member_id):
                self.external.wake(project_id, member_id)
            else:
                self.in_process.wake(project_id, member_id)

    def wake_project(self, project_id: int) -> None:
        """After a resume or a cleared brake: everything pending in the project."""
        asyncio.get_running_loop().create_task(self._wake_pending(project_id))

    async def _wake_pending(self, project_id: int | None) -> None:
        pairs = await self.core.db.read(deliveries_store.members_with_pending)
        for pid, member_id in pairs:
            if project_id is None or pid == project_id:
                self.wake(pid, [member_id])

    async def start(self) -> None:
        """After the start-up reconciliation: wake every member with deliveries pending (the
        wakes before now were dropped) and, in a cluster, start the leases' loop (its sweeps
        find the research and the member stops waiting for this node)."""
        self.started = True
        await self._wake_pending(None)
        if self.in_process.leasing is not None:
            self.in_process.leasing.start(self.in_process)

    async def close(self) -> None:
        self.closing = True
        if self.in_process.leasing is not None:
            await self.in_process.leasing.close()
        await self.in_process.close()
        await self.registry.aclose()

    # -- stopping -----------------------------------------------------------------------------

    def stop_member(self, member_id: int) -> bool:
        """Request a running turn to stop; True when one was running."""
        return self.in_process.stop_member(member_id)

    async def stop_project(self, project_id: int, wait_secs: float | None = None) -> bool:
        """Request every running turn of a project to stop; True once all are confirmed
        stopped (re-read from the sessions themselves), False if any is still running."""
        wait = self.settings.stop_confirm_secs if wait_secs is None else wait_secs
        if self.core.relay is not None:  # a cluster: the project's turns may run elsewhere
            self.core.relay.stop_project_elsewhere(project_id)
        return await self.in_process.stop_project(project_id, wait)

    def running_members(self, project_id: int) -> list[int]:
        return self.in_process.running_members(project_id)

    # -- what members may do --------------------------------------------------------------------

    def member_tools(self, member: Member, stored: Mapping[str, Any]) -> dict[str, Any]:
        """An agent's ``tools``, ``read_only`` and ``sandboxed`` for its wire object, from the
        project's stored settings (``read_only_roles``) and the start-up probe: ``sandboxed``
        says whether its commands run isolated on this server."""
        read_only = member.role in read_only_roles(stored)
        toolbox = Toolbox(self.tools, member.role, read_only=read_only)
        sandbox = self.work.sandbox if self.work is not None else None
        return {
            "tools": [spec.name for spec in toolbox.specs()],
            "read_only": toolbox.read_only,
            "sandboxed": bool(sandbox is not None and sandbox.info.isolated),
        }
