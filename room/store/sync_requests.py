"""SQL of sync receipts: a decision's revision asks the owner of each bound task to confirm they
synced with it; a request is answered, or closed unanswered (superseded, the task closed)."""

from __future__ import annotations

from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection


def insert_sync_request(
    conn: Connection,
    *,
    project_id: int,
    decision_id: int,
    revision: int,
    task_id: int,
    owner_id: int,
    now: float,
) -> None:
    # An older request of this task that nobody answered is now moot: the newer one replaces it.
    conn.execute(
        "UPDATE sync_requests SET closed = 'superseded' WHERE task_id = :t"
        " AND synced_at IS NULL AND closed IS NULL",
        {"t": task_id},
    )
    conn.execute(
        "INSERT OR IGNORE INTO sync_requests (project_id, decision_id, revision, task_id,"
        " owner_id, requested_at) VALUES (:p, :d, :r, :t, :o, :now)",
        {"p": project_id, "d": decision_id, "r": revision, "t": task_id, "o": owner_id,
         "now": now},
    )  # fmt: skip


def open_sync_requests(conn: Connection, task_id: int) -> list[dict[str, Any]]:
    return [
        {"id": r[0], "decision": f"ADR-{int(r[1]):04d}", "revision": r[2], "owner_id": r[3],
         "requested_at": iso(r[4])}
        for r in conn.execute(
            "SELECT s.id, d.number, s.revision, s.owner_id, s.requested_at FROM sync_requests s"
            " JOIN decisions d ON d.id = s.decision_id WHERE s.task_id = :t"
            " AND s.synced_at IS NULL AND s.closed IS NULL ORDER BY s.id",
            {"t": task_id},
        )
    ]  # fmt: skip


def mark_synced(
    conn: Connection, task_id: int, by: int, note: str | None, now: float
) -> list[tuple[int, int]]:
    """Answer every open request of a task; returns the (decision id, revision) answered."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "UPDATE sync_requests SET synced_at = :now, synced_by = :by, note = :note"
            " WHERE task_id = :t AND synced_at IS NULL AND closed IS NULL"
            " RETURNING decision_id, revision",
            {"t": task_id, "by": by, "note": note, "now": now},
        )
    ]


def close_sync_requests(conn: Connection, task_id: int, reason: str) -> None:
    conn.execute(
        "UPDATE sync_requests SET closed = :reason WHERE task_id = :t"
        " AND synced_at IS NULL AND closed IS NULL",
        {"t": task_id, "reason": reason},
    )


def sync_requests_of(conn: Connection, decision_id: int) -> list[dict[str, Any]]:
    return [
        {"revision": r[0], "task_id": r[1], "task": r[2], "owner_id": r[3],
         "requested_at": iso(r[4]), "synced": r[5] is not None, "synced_at": iso(r[5]),
         "synced_by": r[6], "note": r[7], "closed": r[8]}
        for r in conn.execute(
            "SELECT s.revision, s.task_id, t.key, s.owner_id, s.requested_at, s.synced_at,"
            " s.synced_by, s.note, s.closed FROM sync_requests s JOIN tasks t ON t.id = s.task_id"
            " WHERE s.decision_id = :d ORDER BY s.revision, t.position",
            {"d": decision_id},
        )
    ]  # fmt: skip
