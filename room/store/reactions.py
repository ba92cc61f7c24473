"""Emoji reactions on messages (migration ``0016_reactions``): one row per (message, emoji,
member). No ledger, no mentions: a reaction changes the message's stored wire object, which
is republished as a sequenced ``message_updated`` event (room.actions.reactions)."""

from __future__ import annotations

from typing import Any

from room.rules.reactions import summarise
from room.store.dialect import Connection


def add(conn: Connection, message_id: int, emoji: str, member_id: int, now: float) -> bool:
    """True when the reaction is new (a second identical one changes nothing)."""
    cur = conn.execute(
        "INSERT OR IGNORE INTO reactions (message_id, emoji, member_id, created_at)"
        " VALUES (:m, :e, :who, :now)",
        {"m": message_id, "e": emoji, "who": member_id, "now": now},
    )
    return cur.rowcount > 0


def remove(conn: Connection, message_id: int, emoji: str, member_id: int) -> bool:
    cur = conn.execute(
        "DELETE FROM reactions WHERE message_id = :m AND emoji = :e AND member_id = :who",
        {"m": message_id, "e": emoji, "who": member_id},
    )
    return cur.rowcount > 0


def kinds(conn: Connection, message_id: int) -> set[str]:
    return {
        str(row[0])
        for row in conn.execute(
            "SELECT DISTINCT emoji FROM reactions WHERE message_id = :m", {"m": message_id}
        )
    }


def of_message(conn: Connection, message_id: int) -> list[dict[str, Any]]:
    """The message's ``reactions`` wire value (room.rules.reactions.summarise)."""
    rows = conn.execute(
        "SELECT emoji, member_id FROM reactions WHERE message_id = :m"
        " ORDER BY created_at, member_id",
        {"m": message_id},
    )
    return summarise((str(e), int(m)) for e, m in rows)


def delete_for_message(conn: Connection, message_id: int) -> None:
    conn.execute("DELETE FROM reactions WHERE message_id = :m", {"m": message_id})


def purge_project(conn: Connection, project_id: int) -> int:
    cur = conn.execute(
        "DELETE FROM reactions WHERE message_id IN (SELECT id FROM messages WHERE project_id = :p)",
        {"p": project_id},
    )
    return cur.rowcount
