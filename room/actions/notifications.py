"""Notifications (docs/protocol.md, "Notifications"): a person's level per project and their
inbox across projects.

The level is the person's choice for one project: ``all`` (the default: unread badges count
every message, alerts for mentions and followed threads), ``mentions`` (badges and alerts for
mentions and followed-thread replies only) or ``none`` (no badge, no alert). The page honours it;
the inbox lists unread mentions and followed-thread replies of every project whatever the level
(it is read on purpose).
"""

from __future__ import annotations

import json
from typing import Any

from room.errors import BadRequestError
from room.rules.entities import Member
from room.services import Services
from room.store import Tx
from room.store import notifications as notifications_store
from room.store import projects as projects_store
from room.store.dialect import Connection

MAX_INBOX = 200


async def set_level(core: Services, member: Member, level: str) -> dict[str, Any]:
    """Set a person's notification level in their project."""
    if level not in notifications_store.LEVELS:
        raise BadRequestError(
            "level is one of all, mentions, none",
            code="bad_level",
            allowed=list(notifications_store.LEVELS),
        )
    if member.kind != "human":
        raise BadRequestError("notification levels are people's", code="not_a_person")

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        notifications_store.set_level(conn, member.id, level, tx.now)
        return {"project_id": member.project_id, "level": level}

    result: dict[str, Any] = await core.db.write(job)
    return result


async def inbox(core: Services, user_id: int, limit: int = 50) -> dict[str, Any]:
    """The person's unread mentions and followed-thread replies across their projects, newest
    first: ``{"items": [{project_id, project_name, reason, message}], "levels": {...}}``."""
    if not 1 <= limit <= MAX_INBOX:
        raise BadRequestError(f"limit is 1–{MAX_INBOX}", code="bad_query")

    def read(conn: Connection) -> dict[str, Any]:
        items = notifications_store.inbox(conn, user_id, limit)
        names = {p.id: p.name for p in projects_store.list_for_user(conn, user_id)}
        return {
            "items": [
                {
                    "project_id": i["project_id"],
                    "project_name": names.get(i["project_id"], ""),
                    "reason": i["reason"],
                    "message": json.loads(i["message"]),
                }
                for i in items
                if i["project_id"] in names
            ],
        }

    result: dict[str, Any] = await core.db.read(read)
    return result
