"""SQL of the loop brake of each project: agent turns since the last human message, tokens
used, and whether (and why) it is tripped."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from room.rules.entities import iso
from room.store.db import Tx
from room.store.dialect import Connection, dialect_for


def ensure_brake(conn: Connection, project_id: int) -> None:
    conn.execute("INSERT OR IGNORE INTO project_brakes (project_id) VALUES (:p)", {"p": project_id})


def brake(conn: Connection, project_id: int) -> dict[str, Any]:
    """Read-only: a project whose brake never moved has no row yet. ``held``: the ids of the
    members the brake holds, sorted, or None (the whole project, or nobody while it is clear);
    ``turns_by_member``: agent turns since the last human message, by member id."""
    row = conn.execute(
        "SELECT agent_turns, tokens_used, tripped, tripped_detail, tripped_at, held_json,"
        " turns_json FROM project_brakes WHERE project_id = :p",
        {"p": project_id},
    ).fetchone()
    if row is None:
        return {
            "agent_turns": 0,
            "tokens_used": 0,
            "tripped": None,
            "detail": None,
            "tripped_at": None,
            "held": None,
            "turns_by_member": {},
        }
    return {
        "agent_turns": row[0],
        "tokens_used": row[1],
        "tripped": row[2],
        "detail": json.loads(row[3]) if row[3] else None,
        "tripped_at": iso(row[4]),
        "held": sorted(json.loads(row[5])) if row[5] else None,
        "turns_by_member": {int(k): int(v) for k, v in json.loads(row[6] or "{}").items()},
    }


def add_tokens(conn: Connection, project_id: int, tokens: int) -> None:
    ensure_brake(conn, project_id)
    conn.execute(
        "UPDATE project_brakes SET tokens_used = tokens_used + :n WHERE project_id = :p",
        {"n": tokens, "p": project_id},
    )


def count_agent_turn(conn: Connection, tx: Tx, project_id: int, member_id: int) -> int:
    """One more agent turn since the last human message, counted for the project and for
    ``member_id``; returns the project's new count."""
    ensure_brake(conn, project_id)
    turns = dialect_for(conn).json_count_up("turns_json", ":m")
    row = conn.execute(
        f"UPDATE project_brakes SET agent_turns = agent_turns + 1, turns_json = {turns}"
        " WHERE project_id = :p RETURNING agent_turns",
        {"p": project_id, "m": member_id},
    ).fetchone()
    tx.agent_turns[project_id] = int(row[0])
    return int(row[0])


def reset_agent_turns(conn: Connection, tx: Tx, project_id: int) -> None:
    """Every human message resets the count. A count this transaction knows to be zero
    (``tx.agent_turns``) costs no statement: the send path runs this on every human message."""
    if tx.agent_turns.get(project_id) == 0:
        return
    conn.execute(
        "UPDATE project_brakes SET agent_turns = 0, turns_json = '{}' WHERE project_id = :p"
        " AND agent_turns != 0",
        {"p": project_id},
    )
    tx.agent_turns[project_id] = 0


def trip(
    conn: Connection,
    project_id: int,
    reason: str,
    detail: dict[str, Any],
    now: float,
    held: Collection[int] | None,
) -> bool:
    """Trip the brake, holding ``held`` (None: the whole project); False when it was already
    tripped (the first reason stands: see :func:`hold`)."""
    ensure_brake(conn, project_id)
    cur = conn.execute(
        "UPDATE project_brakes SET tripped = :r, tripped_detail = :d, tripped_at = :now,"
        " held_json = :h WHERE project_id = :p AND tripped IS NULL",
        {
            "p": project_id,
            "r": reason,
            "d": json.dumps(detail, ensure_ascii=False),
            "now": now,
            "h": None if held is None else json.dumps(sorted(held)),
        },
    )
    return cur.rowcount == 1


def hold(conn: Connection, project_id: int, held: Collection[int] | None) -> None:
    """A tripped brake now holds ``held`` (None: the whole project)."""
    conn.execute(
        "UPDATE project_brakes SET held_json = :h WHERE project_id = :p AND tripped IS NOT NULL",
        {"p": project_id, "h": None if held is None else json.dumps(sorted(held))},
    )


def holds_member(conn: Connection, project_id: int, member_id: int) -> bool:
    """Whether the project's brake holds ``member_id`` now."""
    holds = dialect_for(conn).json_int_array_has("held_json", ":m")
    row = conn.execute(
        "SELECT 1 FROM project_brakes WHERE project_id = :p AND tripped IS NOT NULL AND"
        f" (held_json IS NULL OR {holds})",
        {"p": project_id, "m": member_id},
    ).fetchone()
    return row is not None


def clear_brake(conn: Connection, tx: Tx, project_id: int, by: int) -> None:
    ensure_brake(conn, project_id)
    conn.execute(
        "UPDATE project_brakes SET tripped = NULL, tripped_detail = NULL, tripped_at = NULL,"
        " held_json = NULL, agent_turns = 0, turns_json = '{}', cleared_by = :by,"
        " cleared_at = :now WHERE project_id = :p",
        {"p": project_id, "by": by, "now": tx.now},
    )
    tx.agent_turns[project_id] = 0
