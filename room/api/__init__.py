"""JSON over HTTP: the same actions as the WebSocket, for the page, scripts and the CLI.

Cookie-authenticated mutations need the session's CSRF token (``X-CSRF-Token``); bearer tokens
don't. Errors are ``{"error": {"code", "message", "details"?}}`` with the error's HTTP status.
"""

from room.api import agents, base, lifecycle, tasks

__all__ = ["agents", "base", "endpoints", "lifecycle", "tasks"]

# The member role endpoint must come before the generic member operation endpoint.
endpoints = [*base.endpoints, *lifecycle.endpoints, *agents.endpoints, *tasks.endpoints]
