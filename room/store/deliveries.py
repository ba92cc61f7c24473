"""The delivery ledger (DESIGN §5): one row per (message, recipient)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from room.models import iso
from room.store.db import Appends, BulkInsert

STATES = ("pending", "held", "delivered", "consumed", "unknown", "failed", "cancelled")
OPEN_STATES = ("pending", "held", "delivered", "unknown")


DELIVERIES = BulkInsert(
    "deliveries",
    ("project_id", "message_id", "recipient_id", "state", "created_at", "updated_at"),
    verb="INSERT OR IGNORE",
)


def insert_many(
    conn: sqlite3.Connection,
    *,
    project_id: int,
    message_id: int,
    recipients: Iterable[tuple[int, str]],
    now: float,
    appends: Appends | None = None,
) -> None:
    """``recipients`` are (member_id, initial state) with state ``pending`` or ``held``."""
    rows = [(project_id, message_id, member_id, state, now, now) for member_id, state in recipients]
    DELIVERIES.write(conn, rows, appends)


def for_message(conn: sqlite3.Connection, message_id: int) -> list[dict[str, Any]]:
    return [
        {
            "id": r[0],
            "recipient_id": r[1],
            "state": r[2],
            "mode": r[3],
            "reason": r[4],
            "updated_at": iso(r[5]),
        }
        for r in conn.execute(
            "SELECT id, recipient_id, state, mode, reason, updated_at FROM deliveries"
            " WHERE message_id = :m ORDER BY recipient_id",
            {"m": message_id},
        )
    ]


def recipients(conn: sqlite3.Connection, message_id: int) -> set[int]:
    return {
        int(r[0])
        for r in conn.execute(
            "SELECT recipient_id FROM deliveries WHERE message_id = :m", {"m": message_id}
        )
    }


def cancel_open_for_message(
    conn: sqlite3.Connection, message_id: int, reason: str, now: float
) -> list[tuple[int, int]]:
    """Retracted before delivery: pending and held rows become ``cancelled``; returns
    (delivery id, recipient id) per row."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "UPDATE deliveries SET state = 'cancelled', reason = :reason, updated_at = :now"
            " WHERE message_id = :m AND state IN ('pending', 'held') RETURNING id, recipient_id",
            {"m": message_id, "reason": reason, "now": now},
        )
    ]
