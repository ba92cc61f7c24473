"""The quota reservations of uploads under way (``upload_reservations``, 0027).

Every statement here runs in the writer's transaction holding the project's lock (PostgreSQL:
its row, ``Database.submit(..., locks=(project,))``; SQLite: the database's write lock), so what
:func:`reserved` counts cannot change before :func:`reserve` takes its share.
"""

from __future__ import annotations

from room.store.dialect import Connection


def reap(conn: Connection, project_id: int, now: float) -> int:
    """Delete the project's reservations that expired (their upload's server died); how many."""
    cur = conn.execute(
        "DELETE FROM upload_reservations WHERE project_id = :p AND expires_at <= :now",
        {"p": project_id, "now": now},
    )
    return int(cur.rowcount or 0)


def reserved(conn: Connection, project_id: int, now: float) -> int:
    """The bytes the project's live reservations hold (expired ones count for nothing)."""
    row = conn.execute(
        "SELECT COALESCE(SUM(bytes), 0) FROM upload_reservations"
        " WHERE project_id = :p AND expires_at > :now",
        {"p": project_id, "now": now},
    ).fetchone()
    return int(row[0])


def reserve(
    conn: Connection, project_id: int, size: int, node: str, now: float, expires_at: float
) -> int:
    """Take ``size`` bytes of the project's quota until ``expires_at``; the reservation's id."""
    row = conn.execute(
        "INSERT INTO upload_reservations (project_id, bytes, node, created_at, expires_at)"
        " VALUES (:p, :bytes, :node, :now, :until) RETURNING id",
        {"p": project_id, "bytes": size, "node": node, "now": now, "until": expires_at},
    ).fetchone()
    return int(row[0])


def renew(conn: Connection, reservation_id: int, expires_at: float) -> bool:
    """Push a live reservation's expiry on; False if it is gone (reaped after it expired)."""
    cur = conn.execute(
        "UPDATE upload_reservations SET expires_at = :until WHERE id = :id",
        {"id": reservation_id, "until": expires_at},
    )
    return bool(cur.rowcount)


def release(conn: Connection, reservation_id: int) -> None:
    conn.execute("DELETE FROM upload_reservations WHERE id = :id", {"id": reservation_id})
