"""Notification levels (schema: room.store.schema_notify) and the inbox: a person's unread
mentions and followed-thread replies across their projects."""

from __future__ import annotations

from typing import Any

from room.store.dialect import Connection

LEVELS = ("all", "mentions", "none")
DEFAULT_LEVEL = "all"
INBOX_SCAN = 2_000  # messages looked at after each read cursor, at most, per project


def levels_for_user(conn: Connection, user_id: int) -> dict[int, str]:
    """Per project of ``user_id``: the level chosen (projects with none chosen are left out)."""
    return {
        int(r[0]): str(r[1])
        for r in conn.execute(
            "SELECT m.project_id, n.level FROM notification_levels n"
            " JOIN members m ON m.id = n.member_id WHERE m.user_id = :u",
            {"u": user_id},
        )
    }


def level_of(conn: Connection, member_id: int) -> str:
    row = conn.execute(
        "SELECT level FROM notification_levels WHERE member_id = :m", {"m": member_id}
    ).fetchone()
    return str(row[0]) if row else DEFAULT_LEVEL


def set_level(conn: Connection, member_id: int, level: str, now: float) -> None:
    conn.execute(
        "INSERT INTO notification_levels (member_id, level, updated_at) VALUES (:m, :l, :now)"
        " ON CONFLICT (member_id) DO UPDATE SET level = excluded.level,"
        " updated_at = excluded.updated_at",
        {"m": member_id, "l": level, "now": now},
    )


# Chat messages by others after the member's read cursor (at most INBOX_SCAN per project), not
# deleted, that mention the member or are replies in a thread the member follows.
_INBOX = (
    "SELECT y.project_id, y.frame, y.seq,"
    " EXISTS (SELECT 1 FROM mentions WHERE message_id = y.id AND member_id = me.id) AS mentioned"
    " FROM members me LEFT JOIN read_cursors rc ON rc.member_id = me.id"
    " JOIN (SELECT id, project_id, seq, kind, author_id, deleted_at, frame FROM messages) y"
    " ON y.project_id = me.project_id AND y.seq > coalesce(rc.seq, 0)"
    " AND y.seq <= coalesce(rc.seq, 0) + :scan"
    " WHERE me.user_id = :u AND me.status != 'left' AND y.kind = 'chat'"
    " AND y.deleted_at IS NULL AND (y.author_id IS NULL OR y.author_id != me.id)"
    " AND (EXISTS (SELECT 1 FROM mentions WHERE message_id = y.id AND member_id = me.id)"
    "  OR EXISTS (SELECT 1 FROM thread_replies r JOIN thread_follows f ON f.root_id = r.root_id"
    "   WHERE r.message_id = y.id AND f.member_id = me.id AND f.following = 1))"
    " ORDER BY y.id DESC LIMIT :limit"
)


def inbox(conn: Connection, user_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` unread items of ``user_id``, newest first: ``{project_id, reason
    ("mention" | "thread"), message}`` (``message``: the stored wire object, as text)."""
    return [
        {
            "project_id": int(r[0]),
            "reason": "mention" if r[3] else "thread",
            "message": str(r[1]),
        }
        for r in conn.execute(_INBOX, {"u": user_id, "scan": INBOX_SCAN, "limit": limit})
    ]
