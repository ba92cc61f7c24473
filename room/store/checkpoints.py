"""SQL of agents' task checkpoints: the member's current task recorded at each turn's start,
steps, steers and end, and when a restart cut a turn off (``room.actions.checkpoints``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from room.store.dialect import Connection

KEEP_PER_MEMBER = 50  # older checkpoints of a member are pruned (the turns table keeps history)

_COLUMNS = (
    "id, project_id, member_id, turn_id, phase, state, step, summary, did_json, next, blocked,"
    " last_tool, pending_tools_json, prompt_json, created_at"
)


def insert(
    conn: Connection,
    *,
    project_id: int,
    member_id: int,
    turn_id: int,
    phase: str,
    state: str,
    step: int,
    summary: str,
    did: Sequence[str],
    next: str,
    blocked: str,
    last_tool: str,
    pending_tools: Sequence[str],
    prompt: Sequence[dict[str, Any]],
    now: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO checkpoints (project_id, member_id, turn_id, phase, state, step, summary,"
        " did_json, next, blocked, last_tool, pending_tools_json, prompt_json, created_at)"
        " VALUES (:p, :m, :t, :phase, :state, :step, :summary, :did, :next, :blocked, :last,"
        " :pending, :prompt, :now) RETURNING id",
        {
            "p": project_id,
            "m": member_id,
            "t": turn_id,
            "phase": phase,
            "state": state,
            "step": step,
            "summary": summary,
            "did": json.dumps(list(did), ensure_ascii=False),
            "next": next,
            "blocked": blocked,
            "last": last_tool,
            "pending": json.dumps(list(pending_tools), ensure_ascii=False),
            "prompt": json.dumps(list(prompt), ensure_ascii=False),
            "now": now,
        },
    )
    checkpoint_id = int(cur.fetchone()[0])
    conn.execute(
        "DELETE FROM checkpoints WHERE member_id = :m AND id <= (SELECT id FROM checkpoints"
        " WHERE member_id = :m ORDER BY id DESC LIMIT 1 OFFSET :keep)",
        {"m": member_id, "keep": KEEP_PER_MEMBER},
    )
    return checkpoint_id


def _row(r: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": r[0],
        "project_id": r[1],
        "member_id": r[2],
        "turn_id": r[3],
        "phase": r[4],
        "state": r[5],
        "step": r[6],
        "summary": r[7],
        "did": json.loads(r[8]),
        "next": r[9],
        "blocked": r[10],
        "last_tool": r[11],
        "pending_tools": json.loads(r[12]),
        "prompt": json.loads(r[13]),
        "created_at": r[14],
    }


def latest(conn: Connection, member_id: int) -> dict[str, Any] | None:
    """The member's newest checkpoint, or None."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoints WHERE member_id = :m ORDER BY id DESC LIMIT 1",
        {"m": member_id},
    ).fetchone()
    return _row(row) if row else None


def latest_of_turn(conn: Connection, turn_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoints WHERE turn_id = :t ORDER BY id DESC LIMIT 1",
        {"t": turn_id},
    ).fetchone()
    return _row(row) if row else None


def latest_before_turn(conn: Connection, member_id: int, turn_id: int) -> dict[str, Any] | None:
    """The member's newest checkpoint of a turn before ``turn_id``."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM checkpoints WHERE member_id = :m AND turn_id < :t"
        " ORDER BY id DESC LIMIT 1",
        {"m": member_id, "t": turn_id},
    ).fetchone()
    return _row(row) if row else None


def of_member(conn: Connection, member_id: int, limit: int = 20) -> list[dict[str, Any]]:
    """The member's checkpoints, newest first."""
    return [
        _row(r)
        for r in conn.execute(
            f"SELECT {_COLUMNS} FROM checkpoints WHERE member_id = :m ORDER BY id DESC"
            " LIMIT :limit",
            {"m": member_id, "limit": limit},
        )
    ]
