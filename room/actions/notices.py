"""System notices: messages in the timeline with no author, which wake nobody."""

from __future__ import annotations

from typing import Any

from room.actions.messages import append_message
from room.rules.notices import Notice
from room.rules.render import render
from room.store import Tx
from room.store.dialect import Connection


def insert_notice(
    conn: Connection, tx: Tx, project_id: int, body: str, meta: dict[str, Any]
) -> int:
    """A system message in the timeline (no author, wakes nobody)."""
    message_id, _, _ = append_message(
        conn,
        tx,
        project_id=project_id,
        author_id=None,
        kind="system",
        body=body,
        html=render(body),
        meta=meta,
    )
    return message_id


def post_notice(
    conn: Connection, tx: Tx, project_id: int, notice: Notice, meta: dict[str, Any]
) -> int:
    """A coded notice (:mod:`room.rules.notices`): its Chinese body, and ``meta.notice`` for the
    page to word in the reader's language."""
    return insert_notice(conn, tx, project_id, notice.body, {**meta, "notice": notice.meta()})
