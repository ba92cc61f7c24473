"""SQL of the people an operator administers (``room users``): the list, disabling and enabling,
the sessions and links a disabled person loses, and the change log the server polls
(``user_changes``, room.store.schema_users)."""

from __future__ import annotations

from typing import Any

from room.rules.entities import USER_COLUMNS, User
from room.store.dialect import POSTGRESQL, Connection, dialect_for


def find(conn: Connection, who: str) -> User | None:
    """A person by handle (``@`` optional, ASCII case ignored) or by id."""
    handle = who.strip().lstrip("@")
    where = dialect_for(conn).nocase_equals("handle", ":h")
    row = conn.execute(f"SELECT {USER_COLUMNS} FROM users WHERE {where}", {"h": handle}).fetchone()
    if row is None and handle.isdigit():
        row = conn.execute(
            f"SELECT {USER_COLUMNS} FROM users WHERE id = :id", {"id": int(handle)}
        ).fetchone()
    return User.from_row(row) if row else None


def list_all(conn: Connection, now: float) -> list[dict[str, Any]]:
    """Every person with how many projects they are in and how many live sessions they have."""
    rows = conn.execute(
        "SELECT u.id, u.handle, u.display_name, u.is_admin, u.disabled_at, u.created_at,"
        " (SELECT count(*) FROM members m WHERE m.user_id = u.id AND m.status != 'left'),"
        " (SELECT count(*) FROM sessions s WHERE s.user_id = u.id AND s.revoked_at IS NULL"
        "  AND s.expires_at > :now),"
        " (SELECT max(s.created_at) FROM sessions s WHERE s.user_id = u.id)"
        " FROM users u ORDER BY u.id",
        {"now": now},
    ).fetchall()
    return [
        {
            "id": int(r[0]),
            "handle": r[1],
            "display_name": r[2],
            "admin": bool(r[3]),
            "disabled_at": r[4],
            "created_at": r[5],
            "projects": int(r[6]),
            "sessions": int(r[7]),
            "last_sign_in": r[8],
        }
        for r in rows
    ]


def set_disabled(conn: Connection, user_id: int, disabled_at: float | None) -> None:
    conn.execute(
        "UPDATE users SET disabled_at = :at WHERE id = :id", {"id": user_id, "at": disabled_at}
    )


def end_sessions(conn: Connection, user_id: int, now: float) -> int:
    """Revoke the person's live sessions; how many were live."""
    return conn.execute(
        "UPDATE sessions SET revoked_at = :now"
        " WHERE user_id = :u AND revoked_at IS NULL AND expires_at > :now",
        {"u": user_id, "now": now},
    ).rowcount


def void_login_links(conn: Connection, user_id: int, now: float) -> int:
    """Expire the person's unused login links; how many."""
    return conn.execute(
        "UPDATE login_links SET expires_at = :now"
        " WHERE user_id = :u AND purpose = 'login' AND used_at IS NULL AND expires_at > :now",
        {"u": user_id, "now": now},
    ).rowcount


def is_disabled_session(conn: Connection, token_hash: str) -> bool:
    """Whether this session digest belongs to a disabled person (why a session stopped
    working, asked only once it has)."""
    row = conn.execute(
        "SELECT 1 FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.token_hash = :h AND u.disabled_at IS NOT NULL",
        {"h": token_hash},
    ).fetchone()
    return row is not None


def disabled_members(conn: Connection, project_id: int) -> frozenset[int]:
    """The member ids of a project's people whose accounts are disabled."""
    rows = conn.execute(
        "SELECT m.id FROM members m JOIN users u ON u.id = m.user_id"
        " WHERE m.project_id = :p AND u.disabled_at IS NOT NULL",
        {"p": project_id},
    )
    return frozenset(int(r[0]) for r in rows)


# -- the change log the server polls ------------------------------------------------------------


def record_change(conn: Connection, user_id: int, action: str, now: float) -> None:
    """Log a change for the servers to poll by id (:func:`changes_since`). The poll's watermark
    needs ids that commit in id order: SQLite's one writer gives them. On PostgreSQL ids come
    from a sequence and several processes write (servers, ``room users``): a lower id could
    commit after a higher one that a poll already passed, and be missed for good. So the
    writer first takes the table's ``EXCLUSIVE`` lock (reads go on; the next writer waits for
    this transaction's end): an id is handed out only when no other change is in flight, so
    every poll sees a prefix of the ids. Changes are rare operator acts; the wait is short."""
    if dialect_for(conn) is POSTGRESQL:
        conn.execute("LOCK TABLE user_changes IN EXCLUSIVE MODE")
    conn.execute(
        "INSERT INTO user_changes (user_id, action, at) VALUES (:u, :a, :now)",
        {"u": user_id, "a": action, "now": now},
    )


def last_change(conn: Connection) -> int:
    row = conn.execute("SELECT max(id) FROM user_changes").fetchone()
    return int(row[0] or 0)


def changes_since(conn: Connection, after: int) -> list[tuple[int, int, str]]:
    """(id, user_id, action) of the changes after ``after``, oldest first."""
    rows = conn.execute(
        "SELECT id, user_id, action FROM user_changes WHERE id > :after ORDER BY id",
        {"after": after},
    )
    return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]
