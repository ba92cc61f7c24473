"""SQL of agents' turns and of each agent session's transcript (its own record)."""

from __future__ import annotations

import json
from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection, locks_rows


def insert_turn(
    conn: Connection,
    *,
    project_id: int,
    member_id: int,
    trigger: int | None,
    now: float,
    owner: str | None = None,
) -> int:
    """A running turn of ``member_id``, run by the node ``owner``. At most one turn of a member
    runs: the unique index ``turns_one_running`` refuses a second (a duplicate key error)."""
    cur = conn.execute(
        "INSERT INTO turns (project_id, member_id, state, trigger_message_id, started_at, owner)"
        " VALUES (:p, :m, 'running', :t, :now, :o) RETURNING id",
        {"p": project_id, "m": member_id, "t": trigger, "now": now, "o": owner},
    )
    return int(cur.fetchone()[0])


def running_of(conn: Connection, member_id: int) -> int | None:
    """The member's running turn, if any (on PostgreSQL after :func:`lock_member`, so no other
    process opens one in between)."""
    row = conn.execute(
        "SELECT id FROM turns WHERE member_id = :m AND state = 'running'", {"m": member_id}
    ).fetchone()
    return int(row[0]) if row else None


def lock_member(conn: Connection, member_id: int) -> None:
    """PostgreSQL: lock the member's row until the transaction ends (the writers of several
    processes open a member's turns one at a time); SQLite's write transaction holds the file.

    ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: the latter also blocks the foreign-key checks
    (``FOR KEY SHARE``) of every row naming the member — a send's deliveries to it — so a send
    holding its project's row and a turn opening (holding the member's, then needing the
    project's for its own foreign key) deadlocked across nodes."""
    if locks_rows(conn):
        conn.execute(
            "SELECT id FROM members WHERE id = ? FOR NO KEY UPDATE", (member_id,)
        ).fetchall()


def update_turn(conn: Connection, turn_id: int, **fields: Any) -> None:
    allowed = {"state", "reply_message_id", "steps", "side_effects", "error", "ended_at"}
    assert set(fields) <= allowed, fields
    assignments = ", ".join(f"{key} = :{key}" for key in fields)
    conn.execute(f"UPDATE turns SET {assignments} WHERE id = :id", {**fields, "id": turn_id})


def running_turns(conn: Connection, owner: str | None = None) -> list[tuple[int, int, int, int]]:
    """(turn, project, member, side_effects) of the turns node ``owner`` left running (by a
    crash), and of those that name no node (opened before turns named theirs); every running
    turn when ``owner`` is None. Another node's running turns are its own: it may be running
    them now."""
    mine = " AND (owner IS NULL OR owner = :o)" if owner is not None else ""
    return [
        (int(r[0]), int(r[1]), int(r[2]), int(r[3]))
        for r in conn.execute(
            "SELECT id, project_id, member_id, side_effects FROM turns WHERE state = 'running'"
            + mine
            + " ORDER BY id",
            {"o": owner},
        )
    ]


def last_turn(conn: Connection, member_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT id, state, steps, error, started_at, ended_at FROM turns WHERE member_id = :m"
        " ORDER BY id DESC LIMIT 1",
        {"m": member_id},
    ).fetchone()
    if row is None:
        return None
    return {
        "id": row[0],
        "state": row[1],
        "steps": row[2],
        "error": row[3],
        "started_at": iso(row[4]),
        "ended_at": iso(row[5]),
    }


def append_transcript(
    conn: Connection,
    *,
    member_id: int,
    turn_id: int | None,
    role: str,
    content: str,
    now: float,
    name: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    delivery_id: int | None = None,
    research_id: int | None = None,
) -> int:
    cur = conn.execute(
        "INSERT INTO transcript_entries (member_id, turn_id, role, content, name,"
        " tool_calls_json, tool_call_id, delivery_id, research_id, created_at) VALUES (:m, :t,"
        " :role, :content, :name, :calls, :call_id, :d, :research, :now) RETURNING id",
        {
            "m": member_id,
            "t": turn_id,
            "role": role,
            "content": content,
            "name": name,
            "calls": json.dumps(tool_calls, ensure_ascii=False) if tool_calls else None,
            "call_id": tool_call_id,
            "d": delivery_id,
            "research": research_id,
            "now": now,
        },
    )
    return int(cur.fetchone()[0])


def supersede_turn_transcript(conn: Connection, turn_id: int) -> None:
    conn.execute("UPDATE transcript_entries SET superseded = 1 WHERE turn_id = :t", {"t": turn_id})


_TRANSCRIPT_COLUMNS = "id, turn_id, role, content, name, tool_calls_json, tool_call_id, delivery_id"


def _entry(r: Any) -> dict[str, Any]:
    return {
        "id": r[0],
        "turn_id": r[1],
        "role": r[2],
        "content": r[3],
        "name": r[4],
        "tool_calls": json.loads(r[5]) if r[5] else [],
        "tool_call_id": r[6],
        "delivery_id": r[7],
    }


def transcript(conn: Connection, member_id: int, limit: int = 200) -> list[dict[str, Any]]:
    """The member's recent transcript (oldest first), without superseded entries."""
    rows = conn.execute(
        f"SELECT {_TRANSCRIPT_COLUMNS} FROM transcript_entries"
        " WHERE member_id = :m AND superseded = 0 AND research_id IS NULL"
        " ORDER BY id DESC LIMIT :limit",
        {"m": member_id, "limit": limit},
    ).fetchall()
    out = [_entry(r) for r in rows]
    out.reverse()
    return out


def research_transcript(conn: Connection, research_id: int, member_id: int) -> list[dict[str, Any]]:
    """One member's research-session transcript, oldest first."""
    return [
        _entry(r)
        for r in conn.execute(
            f"SELECT {_TRANSCRIPT_COLUMNS} FROM transcript_entries WHERE research_id = :r"
            " AND member_id = :m ORDER BY id",
            {"r": research_id, "m": member_id},
        )
    ]


def transcript_of_turn(conn: Connection, turn_id: int) -> list[dict[str, Any]]:
    """One turn's transcript entries, oldest first."""
    return [
        _entry(r)
        for r in conn.execute(
            f"SELECT {_TRANSCRIPT_COLUMNS} FROM transcript_entries WHERE turn_id = :t ORDER BY id",
            {"t": turn_id},
        )
    ]
