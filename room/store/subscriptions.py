"""What a WebSocket subscription reads (:mod:`room.ws`): the project, its members and their read
cursors when it starts, in one read, and a message's delivery receipts. The replay's pages are
:func:`room.store.messages.replay`; whether a cursor may be replayed from is the pure
:mod:`room.rules.resume`."""

from __future__ import annotations

from typing import Any, NamedTuple

from room.rules.entities import Project
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store.dialect import Connection


class Snapshot(NamedTuple):
    """A project as a new subscription first sees it (None: no such project)."""

    project: Project | None
    members: list[dict[str, object]]
    read_cursors: dict[int, int]


def snapshot(conn: Connection, *, project_id: int) -> Snapshot:
    return Snapshot(
        projects_store.get(conn, project_id),
        members_store.wire_list(conn, project_id),
        messages_store.read_cursors(conn, project_id),
    )


def receipts(conn: Connection, *, project_id: int, message_id: int) -> list[dict[str, Any]] | None:
    """The delivery rows of a message of this project; None when it has no such message."""
    row = messages_store.get_row(conn, message_id)
    if row is None or row["project_id"] != project_id:
        return None
    return deliveries_store.for_message(conn, message_id)
