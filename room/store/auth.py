"""Users, browser sessions, one-time links and agent tokens. Secrets are stored as SHA-256."""

from __future__ import annotations

import hashlib

from room.rules.entities import MEMBER_COLUMNS, USER_COLUMNS, Member, User
from room.store.db import chunks
from room.store.dialect import Connection, dialect_for


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def insert_user(
    conn: Connection, *, handle: str, display_name: str, is_admin: bool, now: float
) -> int:
    cur = conn.execute(
        "INSERT INTO users (handle, display_name, is_admin, created_at)"
        " VALUES (:handle, :display_name, :is_admin, :now) RETURNING id",
        {"handle": handle, "display_name": display_name, "is_admin": int(is_admin), "now": now},
    )
    return int(cur.fetchone()[0])


def get_user(conn: Connection, user_id: int) -> User | None:
    row = conn.execute(
        f"SELECT {USER_COLUMNS} FROM users WHERE id = :id", {"id": user_id}
    ).fetchone()
    return User.from_row(row) if row else None


def admin_user(conn: Connection) -> User | None:
    row = conn.execute(
        f"SELECT {USER_COLUMNS} FROM users WHERE is_admin = 1 ORDER BY id LIMIT 1"
    ).fetchone()
    return User.from_row(row) if row else None


def user_handle_taken(conn: Connection, handle: str) -> bool:
    """Whether a person already has ``handle``, ignoring ASCII case (as the unique key does)."""
    where = dialect_for(conn).nocase_equals("handle", ":h")
    return conn.execute(f"SELECT 1 FROM users WHERE {where}", {"h": handle}).fetchone() is not None


# -- one-time links ------------------------------------------------------------------------------


def insert_link(
    conn: Connection,
    *,
    secret: str,
    purpose: str,
    user_id: int | None,
    project_id: int | None,
    role: str | None,
    created_by: int | None,
    now: float,
    expires_at: float,
) -> None:
    conn.execute(
        "INSERT INTO login_links (token_hash, purpose, user_id, project_id, role, created_by,"
        " created_at, expires_at) VALUES (:h, :purpose, :user_id, :project_id, :role,"
        " :created_by, :now, :expires_at)",
        {
            "h": digest(secret),
            "purpose": purpose,
            "user_id": user_id,
            "project_id": project_id,
            "role": role,
            "created_by": created_by,
            "now": now,
            "expires_at": expires_at,
        },
    )


def link_project(conn: Connection, secret: str) -> int | None:
    """The project a link invites to (None: a login link, or no such link)."""
    row = conn.execute(
        "SELECT project_id FROM login_links WHERE token_hash = :h", {"h": digest(secret)}
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def take_link(
    conn: Connection, secret: str, now: float
) -> tuple[str, int | None, int | None, str | None] | None:
    """Mark an unused, unexpired link used; returns (purpose, user_id, project_id, role)."""
    row = conn.execute(
        "UPDATE login_links SET used_at = :now WHERE token_hash = :h AND used_at IS NULL"
        " AND expires_at > :now RETURNING purpose, user_id, project_id, role",
        {"h": digest(secret), "now": now},
    ).fetchone()
    return (row[0], row[1], row[2], row[3]) if row else None


def mark_link_user(conn: Connection, secret: str, user_id: int) -> None:
    conn.execute(
        "UPDATE login_links SET used_by = :u WHERE token_hash = :h",
        {"h": digest(secret), "u": user_id},
    )


# -- sessions ------------------------------------------------------------------------------------


def insert_session(
    conn: Connection,
    *,
    secret: str,
    user_id: int,
    csrf_token: str,
    now: float,
    expires_at: float,
) -> None:
    conn.execute(
        "INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at)"
        " VALUES (:h, :user_id, :csrf, :now, :expires_at)",
        {
            "h": digest(secret),
            "user_id": user_id,
            "csrf": csrf_token,
            "now": now,
            "expires_at": expires_at,
        },
    )


def session_user(conn: Connection, secret: str, now: float) -> tuple[User, str] | None:
    row = conn.execute(
        f"SELECT {', '.join('u.' + c.strip() for c in USER_COLUMNS.split(','))}, s.csrf_token"
        " FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.token_hash = :h AND s.revoked_at IS NULL AND s.expires_at > :now"
        " AND u.disabled_at IS NULL",
        {"h": digest(secret), "now": now},
    ).fetchone()
    return (User.from_row(row[:5]), str(row[5])) if row else None


def revoke_session(conn: Connection, secret: str, now: float) -> None:
    conn.execute(
        "UPDATE sessions SET revoked_at = :now WHERE token_hash = :h",
        {"h": digest(secret), "now": now},
    )


# -- agent tokens --------------------------------------------------------------------------------


def insert_agent_token(conn: Connection, *, member_id: int, secret: str, now: float) -> None:
    conn.execute(
        "INSERT INTO agent_tokens (member_id, token_hash, created_at) VALUES (:m, :h, :now)",
        {"m": member_id, "h": digest(secret), "now": now},
    )


def token_member(conn: Connection, secret: str) -> Member | None:
    row = conn.execute(
        f"SELECT {', '.join('m.' + c.strip() for c in MEMBER_COLUMNS.split(','))}"
        " FROM agent_tokens t JOIN members m ON m.id = t.member_id"
        " WHERE t.token_hash = :h AND t.revoked_at IS NULL AND m.status != 'left'",
        {"h": digest(secret)},
    ).fetchone()
    return Member.from_row(row) if row else None


def live_credentials(
    conn: Connection, sessions: set[str], tokens: set[str], now: float
) -> tuple[set[str], set[str]]:
    """Which of these session and token digests still prove someone (a statement per 64)."""
    live_sessions: set[str] = set()
    for chunk in chunks(sorted(sessions)):
        marks = ", ".join("?" * len(chunk))
        live_sessions.update(
            str(row[0])
            for row in conn.execute(
                f"SELECT token_hash FROM sessions WHERE token_hash IN ({marks})"
                " AND revoked_at IS NULL AND expires_at > ?",
                (*chunk, now),
            )
        )
    live_tokens: set[str] = set()
    for chunk in chunks(sorted(tokens)):
        marks = ", ".join("?" * len(chunk))
        live_tokens.update(
            str(row[0])
            for row in conn.execute(
                "SELECT t.token_hash FROM agent_tokens t JOIN members m ON m.id = t.member_id"
                f" WHERE t.token_hash IN ({marks}) AND t.revoked_at IS NULL AND m.status != 'left'",
                chunk,
            )
        )
    return live_sessions, live_tokens


def revoke_member_tokens(conn: Connection, member_id: int, now: float) -> int:
    """Revoke every live token of the member; how many were live."""
    return conn.execute(
        "UPDATE agent_tokens SET revoked_at = :now WHERE member_id = :m AND revoked_at IS NULL",
        {"m": member_id, "now": now},
    ).rowcount
