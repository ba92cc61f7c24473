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


def set_contact(conn: Connection, user_id: int, email: str | None, lang: str | None) -> None:
    """The digest's address (None: none) and language (None: unchanged)."""
    conn.execute(
        "UPDATE users SET email = :e, lang = coalesce(:l, lang) WHERE id = :u",
        {"e": email, "l": lang, "u": user_id},
    )


def set_lang(conn: Connection, user_id: int, lang: str) -> None:
    conn.execute("UPDATE users SET lang = :l WHERE id = :u", {"l": lang, "u": user_id})


def contact(conn: Connection, user_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT email, lang FROM users WHERE id = :u", {"u": user_id}).fetchone()
    return {"email": row[0], "lang": row[1]} if row else {"email": None, "lang": "zh"}


def digest_due(conn: Connection, now: float, away_secs: float) -> list[dict[str, Any]]:
    """People with an email address, not disabled, whose last activity (a read cursor moved, a
    message written, in any project) is ``away_secs`` old or more: ``{user_id, email, lang,
    name, since}`` (``since``: mentions after this time are news — the later of the last
    digest and the last activity)."""
    rows = conn.execute(
        "SELECT u.id, u.email, u.lang, u.display_name, coalesce(u.digest_at, 0),"
        " coalesce((SELECT max(rc.updated_at) FROM read_cursors rc JOIN members m"
        "  ON m.id = rc.member_id WHERE m.user_id = u.id), 0),"
        " coalesce((SELECT max(x.created_at) FROM messages x JOIN members m"
        "  ON m.id = x.author_id WHERE m.user_id = u.id), 0)"
        " FROM users u WHERE u.email IS NOT NULL AND u.disabled_at IS NULL",
    ).fetchall()
    due = []
    for r in rows:
        active = max(float(r[5]), float(r[6]))
        if now - active >= away_secs:
            due.append(
                {
                    "user_id": int(r[0]),
                    "email": str(r[1]),
                    "lang": str(r[2]),
                    "name": str(r[3]),
                    "since": max(float(r[4]), active),
                }
            )
    return due


def mark_digest(conn: Connection, user_id: int, at: float) -> None:
    conn.execute("UPDATE users SET digest_at = :at WHERE id = :u", {"at": at, "u": user_id})
