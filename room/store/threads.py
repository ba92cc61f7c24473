"""Threads: a root message and the replies under it (schema: room.store.schema_threads).

The reply count and the newest reply are maintained in the transaction of the send and of a
delete (:func:`add_reply`, :func:`recount`); the root's stored wire object carries them as
``thread`` (``{"replies", "last_reply_at", "last_reply_id"}``), so history pages never count.
"""

from __future__ import annotations

from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection


def root_of(conn: Connection, message_id: int) -> int:
    """The root of the thread a reply to ``message_id`` joins: the message's own root when it is
    a reply itself, else the message."""
    row = conn.execute(
        "SELECT root_id FROM thread_replies WHERE message_id = :m", {"m": message_id}
    ).fetchone()
    return int(row[0]) if row else message_id


def thread_of(conn: Connection, message_id: int) -> int | None:
    """The root of the thread ``message_id`` is a reply in (None: not a reply)."""
    row = conn.execute(
        "SELECT root_id FROM thread_replies WHERE message_id = :m", {"m": message_id}
    ).fetchone()
    return int(row[0]) if row else None


def add_reply(
    conn: Connection, *, project_id: int, root_id: int, message_id: int, now: float
) -> dict[str, Any]:
    """Put a new reply in its root's thread (made on the first reply); returns the summary."""
    conn.execute(
        "INSERT INTO threads (root_id, project_id, replies, last_reply_id, last_reply_at)"
        " VALUES (:r, :p, 1, :m, :now) ON CONFLICT (root_id) DO UPDATE SET"
        " replies = threads.replies + 1, last_reply_id = excluded.last_reply_id,"
        " last_reply_at = excluded.last_reply_at",
        {"r": root_id, "p": project_id, "m": message_id, "now": now},
    )
    conn.execute(
        "INSERT INTO thread_replies (message_id, root_id) VALUES (:m, :r)",
        {"m": message_id, "r": root_id},
    )
    return summary(conn, root_id) or {}


def ensure(conn: Connection, root_id: int, project_id: int) -> None:
    """A thread for ``root_id`` (with no reply yet, when it had none): followed before its
    first reply."""
    conn.execute(
        "INSERT INTO threads (root_id, project_id, replies) VALUES (:r, :p, 0)"
        " ON CONFLICT (root_id) DO NOTHING",
        {"r": root_id, "p": project_id},
    )


def recount(conn: Connection, root_id: int) -> dict[str, Any] | None:
    """Count the thread's replies again (after one was deleted); returns the summary."""
    conn.execute(
        "UPDATE threads SET"
        " replies = (SELECT count(*) FROM thread_replies r JOIN messages m ON m.id = r.message_id"
        "  WHERE r.root_id = :r AND m.deleted_at IS NULL),"
        " last_reply_id = (SELECT max(r.message_id) FROM thread_replies r"
        "  JOIN messages m ON m.id = r.message_id WHERE r.root_id = :r AND m.deleted_at IS NULL)"
        " WHERE root_id = :r",
        {"r": root_id},
    )
    conn.execute(
        "UPDATE threads SET last_reply_at = (SELECT created_at FROM messages"
        " WHERE id = threads.last_reply_id) WHERE root_id = :r",
        {"r": root_id},
    )
    return summary(conn, root_id)


def summary(conn: Connection, root_id: int) -> dict[str, Any] | None:
    """``{"replies", "last_reply_at", "last_reply_id"}`` of a thread (None: no thread)."""
    row = conn.execute(
        "SELECT replies, last_reply_at, last_reply_id FROM threads WHERE root_id = :r",
        {"r": root_id},
    ).fetchone()
    if row is None:
        return None
    return {
        "replies": int(row[0]),
        "last_reply_at": iso(row[1]),
        "last_reply_id": None if row[2] is None else int(row[2]),
    }


def page(conn: Connection, root_id: int, before: int | None, limit: int) -> tuple[list[str], bool]:
    """Up to ``limit`` replies of a thread (stored wire objects) with id < before, oldest
    first, and whether older ones exist; keyset on ``thread_replies_root``."""
    end = 1 << 62 if before is None else max(0, min(before, 1 << 62))
    rows = conn.execute(
        "SELECT m.frame FROM thread_replies r JOIN messages m ON m.id = r.message_id"
        " WHERE r.root_id = :r AND r.message_id < :before ORDER BY r.message_id DESC LIMIT :n",
        {"r": root_id, "before": end, "n": limit + 1},
    ).fetchall()
    frames = [str(row[0]) for row in rows[:limit]]
    frames.reverse()
    return frames, len(rows) > limit


def count_before(conn: Connection, root_id: int, before: int | None) -> int:
    """How many replies of the thread have an id below ``before`` (None: all of them)."""
    end = 1 << 62 if before is None else before
    row = conn.execute(
        "SELECT count(*) FROM thread_replies WHERE root_id = :r AND message_id < :before",
        {"r": root_id, "before": end},
    ).fetchone()
    return int(row[0])


def follow(
    conn: Connection, root_id: int, member_id: int, following: bool, now: float, *, keep: bool
) -> None:
    """Record whether ``member_id`` follows the thread; with ``keep`` an earlier explicit choice
    stays (the root's author when someone replies)."""
    conflict = (
        "DO NOTHING"
        if keep
        else "DO UPDATE SET following = excluded.following, updated_at = excluded.updated_at"
    )
    conn.execute(
        "INSERT INTO thread_follows (root_id, member_id, following, updated_at)"
        f" VALUES (:r, :m, :f, :now) ON CONFLICT (root_id, member_id) {conflict}",
        {"r": root_id, "m": member_id, "f": 1 if following else 0, "now": now},
    )


def is_following(conn: Connection, root_id: int, member_id: int) -> bool:
    row = conn.execute(
        "SELECT following FROM thread_follows WHERE root_id = :r AND member_id = :m",
        {"r": root_id, "m": member_id},
    ).fetchone()
    return bool(row and row[0])


def followers(conn: Connection, root_id: int) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT member_id FROM thread_follows WHERE root_id = :r AND following = 1"
            " ORDER BY member_id",
            {"r": root_id},
        )
    ]


def followed_roots(conn: Connection, member_id: int) -> list[int]:
    """The roots of the threads ``member_id`` follows."""
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT root_id FROM thread_follows WHERE member_id = :m AND following = 1"
            " ORDER BY root_id",
            {"m": member_id},
        )
    ]


def purge_project(conn: Connection, project_id: int) -> dict[str, int]:
    """Delete a project's threads (before its messages: the rows refer to them)."""
    roots = "(SELECT root_id FROM threads WHERE project_id = :p)"
    counts = {}
    for table in ("thread_follows", "thread_replies"):
        cur = conn.execute(f"DELETE FROM {table} WHERE root_id IN {roots}", {"p": project_id})
        counts[table] = int(cur.rowcount)
    cur = conn.execute("DELETE FROM threads WHERE project_id = :p", {"p": project_id})
    counts["threads"] = int(cur.rowcount)
    return counts
