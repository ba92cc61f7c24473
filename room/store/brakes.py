"""SQL of the loop brake of each project: agent turns since the last human message, tokens
used, and whether (and why) it is tripped."""

from __future__ import annotations

import json
from typing import Any

from room.rules.entities import iso
from room.store.db import Tx
from room.store.dialect import Connection


def ensure_brake(conn: Connection, project_id: int) -> None:
    conn.execute("INSERT OR IGNORE INTO project_brakes (project_id) VALUES (:p)", {"p": project_id})


def brake(conn: Connection, project_id: int) -> dict[str, Any]:
    """Read-only: a project whose brake never moved has no row yet."""
    row = conn.execute(
        "SELECT agent_turns, tokens_used, tripped, tripped_detail, tripped_at FROM project_brakes"
        " WHERE project_id = :p",
        {"p": project_id},
    ).fetchone()
    if row is None:
        return {
            "agent_turns": 0,
            "tokens_used": 0,
            "tripped": None,
            "detail": None,
            "tripped_at": None,
        }
    return {
        "agent_turns": row[0],
        "tokens_used": row[1],
        "tripped": row[2],
        "detail": json.loads(row[3]) if row[3] else None,
        "tripped_at": iso(row[4]),
    }


def add_tokens(conn: Connection, project_id: int, tokens: int) -> None:
    ensure_brake(conn, project_id)
    conn.execute(
        "UPDATE project_brakes SET tokens_used = tokens_used + :n WHERE project_id = :p",
        {"n": tokens, "p": project_id},
    )


def count_agent_turn(conn: Connection, tx: Tx, project_id: int) -> int:
    """One more agent turn since the last human message; returns the new count."""
    ensure_brake(conn, project_id)
    row = conn.execute(
        "UPDATE project_brakes SET agent_turns = agent_turns + 1 WHERE project_id = :p"
        " RETURNING agent_turns",
        {"p": project_id},
    ).fetchone()
    tx.agent_turns[project_id] = int(row[0])
    return int(row[0])


def reset_agent_turns(conn: Connection, tx: Tx, project_id: int) -> None:
    """Every human message resets the count. A count this writer knows to be zero
    (``tx.agent_turns``) costs no statement: the send path runs this on every human message."""
    if tx.agent_turns.get(project_id) == 0:
        return
    conn.execute(
        "UPDATE project_brakes SET agent_turns = 0 WHERE project_id = :p AND agent_turns != 0",
        {"p": project_id},
    )
    tx.agent_turns[project_id] = 0


def trip(
    conn: Connection, project_id: int, reason: str, detail: dict[str, Any], now: float
) -> bool:
    """Trip the brake; False when it was already tripped (the first reason stands)."""
    ensure_brake(conn, project_id)
    cur = conn.execute(
        "UPDATE project_brakes SET tripped = :r, tripped_detail = :d, tripped_at = :now"
        " WHERE project_id = :p AND tripped IS NULL",
        {"p": project_id, "r": reason, "d": json.dumps(detail, ensure_ascii=False), "now": now},
    )
    return cur.rowcount == 1


def clear_brake(conn: Connection, tx: Tx, project_id: int, by: int) -> None:
    ensure_brake(conn, project_id)
    conn.execute(
        "UPDATE project_brakes SET tripped = NULL, tripped_detail = NULL, tripped_at = NULL,"
        " agent_turns = 0, cleared_by = :by, cleared_at = :now WHERE project_id = :p",
        {"p": project_id, "by": by, "now": tx.now},
    )
    tx.agent_turns[project_id] = 0
