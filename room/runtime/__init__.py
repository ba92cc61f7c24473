"""Agent sessions, the turn loop and the room tools (DESIGN §6)."""

from room.runtime.runtime import Runtime, RuntimeSettings

__all__ = ["Runtime", "RuntimeSettings"]
