"""Agents: the scheduler, its drivers, the turn loop and the room tools (docs/architecture.md,
"Agents")."""

from room.agents.scheduler import AgentSettings, Scheduler

__all__ = ["AgentSettings", "Scheduler"]
