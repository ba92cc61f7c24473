"""JSON over HTTP: the same actions as the WebSocket, for the page, scripts and the CLI.

Cookie-authenticated mutations need the session's CSRF token (``X-CSRF-Token``); bearer tokens
don't. Errors are ``{"error": {"code", "message", "details"?}}`` with the error's HTTP status.
"""

from room.api import (
    agents,
    attachments,
    cluster,
    lifecycle,
    memory,
    messages,
    notifications,
    packs,
    portfolio,
    projects,
    requests,
    research,
    search,
    server,
    task_edits,
    tasks,
    workspaces,
)

__all__ = [
    "agents",
    "attachments",
    "cluster",
    "endpoints",
    "lifecycle",
    "memory",
    "messages",
    "notifications",
    "packs",
    "portfolio",
    "projects",
    "requests",
    "research",
    "search",
    "server",
    "task_edits",
    "tasks",
    "workspaces",
]

# The member role endpoint must come before the generic member operation endpoint, the task
# diff and merge endpoints and the card move before the generic task event endpoint.
endpoints = [
    *server.endpoints,
    *projects.endpoints,
    *cluster.endpoints,
    *messages.endpoints,
    *notifications.endpoints,
    *lifecycle.endpoints,
    *agents.endpoints,
    *workspaces.endpoints,
    *search.endpoints,
    *portfolio.endpoints,
    *task_edits.endpoints,
    *tasks.endpoints,
    *memory.endpoints,
    *packs.endpoints,
    *attachments.endpoints,
    *research.endpoints,
]
