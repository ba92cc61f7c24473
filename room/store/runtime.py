"""SQL of agent sessions: claiming deliveries, turns, transcripts, model requests, brakes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from room.models import iso


@dataclass(frozen=True, slots=True)
class Inbound:
    """A delivery and the message it carries, as handed to a session."""

    delivery_id: int
    message_id: int
    project_id: int
    seq: int
    author_id: int | None
    body: str
    created_at: float
    author_handle: str | None = None
    author_name: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "delivery_id": self.delivery_id,
            "message_id": self.message_id,
            "project_id": self.project_id,
            "seq": self.seq,
            "author_id": self.author_id,
            "author_handle": self.author_handle,
            "author_name": self.author_name,
            "body": self.body,
            "created_at": iso(self.created_at),
        }


_INBOUND = (
    "SELECT d.id, d.message_id, d.project_id, m.seq, m.author_id, m.body, m.created_at,"
    " a.handle, a.display_name"
    " FROM deliveries d JOIN messages m ON m.id = d.message_id"
    " LEFT JOIN members a ON a.id = m.author_id"
)


def _inbound(rows: Iterable[Sequence[Any]]) -> list[Inbound]:
    return [Inbound(*row) for row in rows]


def claim_pending(
    conn: sqlite3.Connection, member_id: int, now: float, limit: int = 50
) -> list[Inbound]:
    """Hand the oldest pending deliveries of a member to its in-process session (→ delivered)."""
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM deliveries WHERE recipient_id = :m AND state = 'pending'"
            " ORDER BY id LIMIT :limit",
            {"m": member_id, "limit": limit},
        )
    ]
    if not ids:
        return []
    set_state(conn, ids, "delivered", now)
    return inbound_by_ids(conn, ids)


def offer_pending(
    conn: sqlite3.Connection, member_id: int, handoff: str, limit: int = 50
) -> list[Inbound]:
    """Mark pending deliveries as handed to an external connection (they stay ``pending`` until
    the agent confirms receipt)."""
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM deliveries WHERE recipient_id = :m AND state = 'pending'"
            " AND handoff IS NULL ORDER BY id LIMIT :limit",
            {"m": member_id, "limit": limit},
        )
    ]
    if not ids:
        return []
    conn.executemany("UPDATE deliveries SET handoff = ? WHERE id = ?", [(handoff, i) for i in ids])
    return inbound_by_ids(conn, ids)


def inbound_by_ids(conn: sqlite3.Connection, ids: Sequence[int]) -> list[Inbound]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    return _inbound(conn.execute(f"{_INBOUND} WHERE d.id IN ({marks}) ORDER BY d.id", list(ids)))


def delivered_not_taken(conn: sqlite3.Connection, member_id: int) -> list[Inbound]:
    """Deliveries in the session's inbox that no turn has taken yet."""
    return _inbound(
        conn.execute(
            f"{_INBOUND} WHERE d.recipient_id = :m AND d.state = 'delivered' AND d.turn_id IS NULL"
            " ORDER BY d.id",
            {"m": member_id},
        )
    )


def unsettled(conn: sqlite3.Connection, member_id: int) -> list[Inbound]:
    """An external agent's deliveries whose fate it must confirm: ``unknown`` or ``delivered``."""
    return _inbound(
        conn.execute(
            f"{_INBOUND} WHERE d.recipient_id = :m AND d.state IN ('unknown', 'delivered')"
            " ORDER BY d.id",
            {"m": member_id},
        )
    )


# The ledger's transitions (DESIGN §5): a state may only be reached from these. Terminal
# states (consumed, failed, cancelled) are left only by the start-up reconciliation, which says
# so explicitly (``allowed_from``).
ALLOWED_FROM: dict[str, tuple[str, ...]] = {
    "delivered": ("pending", "unknown"),
    "consumed": ("pending", "delivered", "unknown"),
    "held": ("pending", "delivered", "unknown"),
    "pending": ("held", "delivered", "unknown"),
    "unknown": ("pending", "delivered"),
    "failed": ("pending", "held", "delivered", "unknown"),
    "cancelled": ("pending", "held", "delivered", "unknown"),
}


def set_state(
    conn: sqlite3.Connection,
    ids: Sequence[int],
    state: str,
    now: float,
    *,
    mode: str | None = None,
    reason: str | None = None,
    allowed_from: Sequence[str] | None = None,
) -> list[tuple[int, int, int, int]]:
    """Move deliveries to ``state`` where the ledger allows it (rows in other states are left
    alone); returns (delivery, project, message, recipient) of the rows that moved."""
    if not ids:
        return []
    sources = ALLOWED_FROM[state] if allowed_from is None else tuple(allowed_from)
    sql = (
        "UPDATE deliveries SET state = :state, updated_at = :now,"
        " mode = COALESCE(:mode, mode), reason = :reason WHERE id = :id"
        f" AND state IN ({', '.join(repr(s) for s in sources)})"
        " RETURNING id, project_id, message_id, recipient_id"
    )
    rows = []
    for delivery_id in ids:
        row = conn.execute(
            sql, {"state": state, "now": now, "mode": mode, "reason": reason, "id": delivery_id}
        ).fetchone()
        if row is not None:
            rows.append((int(row[0]), int(row[1]), int(row[2]), int(row[3])))
    return rows


def take_into_turn(conn: sqlite3.Connection, ids: Sequence[int], turn_id: int) -> None:
    conn.executemany("UPDATE deliveries SET turn_id = ? WHERE id = ?", [(turn_id, i) for i in ids])


def deliveries_of_turn(conn: sqlite3.Connection, turn_id: int) -> list[tuple[int, str]]:
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, state FROM deliveries WHERE turn_id = :t ORDER BY id", {"t": turn_id}
        )
    ]


# -- turns -----------------------------------------------------------------------------------


def insert_turn(
    conn: sqlite3.Connection, *, project_id: int, member_id: int, trigger: int | None, now: float
) -> int:
    cur = conn.execute(
        "INSERT INTO turns (project_id, member_id, state, trigger_message_id, started_at)"
        " VALUES (:p, :m, 'running', :t, :now)",
        {"p": project_id, "m": member_id, "t": trigger, "now": now},
    )
    return int(cur.lastrowid or 0)


def update_turn(conn: sqlite3.Connection, turn_id: int, **fields: Any) -> None:
    allowed = {"state", "reply_message_id", "steps", "side_effects", "error", "ended_at"}
    assert set(fields) <= allowed, fields
    assignments = ", ".join(f"{key} = :{key}" for key in fields)
    conn.execute(f"UPDATE turns SET {assignments} WHERE id = :id", {**fields, "id": turn_id})


def running_turns(conn: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """(turn, project, member, side_effects) of turns left running (by a crash)."""
    return [
        (int(r[0]), int(r[1]), int(r[2]), int(r[3]))
        for r in conn.execute(
            "SELECT id, project_id, member_id, side_effects FROM turns WHERE state = 'running'"
        )
    ]


def last_turn(conn: sqlite3.Connection, member_id: int) -> dict[str, Any] | None:
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


# -- transcript ------------------------------------------------------------------------------


def append_transcript(
    conn: sqlite3.Connection,
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
) -> int:
    cur = conn.execute(
        "INSERT INTO transcript_entries (member_id, turn_id, role, content, name,"
        " tool_calls_json, tool_call_id, delivery_id, created_at) VALUES (:m, :t, :role,"
        " :content, :name, :calls, :call_id, :d, :now)",
        {
            "m": member_id,
            "t": turn_id,
            "role": role,
            "content": content,
            "name": name,
            "calls": json.dumps(tool_calls, ensure_ascii=False) if tool_calls else None,
            "call_id": tool_call_id,
            "d": delivery_id,
            "now": now,
        },
    )
    return int(cur.lastrowid or 0)


def supersede_turn_transcript(conn: sqlite3.Connection, turn_id: int) -> None:
    conn.execute("UPDATE transcript_entries SET superseded = 1 WHERE turn_id = :t", {"t": turn_id})


def transcript(conn: sqlite3.Connection, member_id: int, limit: int = 200) -> list[dict[str, Any]]:
    """The member's recent transcript (oldest first), without superseded entries."""
    rows = conn.execute(
        "SELECT id, turn_id, role, content, name, tool_calls_json, tool_call_id, delivery_id"
        " FROM transcript_entries WHERE member_id = :m AND superseded = 0"
        " ORDER BY id DESC LIMIT :limit",
        {"m": member_id, "limit": limit},
    ).fetchall()
    out = [
        {
            "id": r[0],
            "turn_id": r[1],
            "role": r[2],
            "content": r[3],
            "name": r[4],
            "tool_calls": json.loads(r[5]) if r[5] else [],
            "tool_call_id": r[6],
            "delivery_id": r[7],
        }
        for r in rows
    ]
    out.reverse()
    return out


# -- model requests and usage ------------------------------------------------------------------


def record_request(conn: sqlite3.Connection, **row: Any) -> int:
    cur = conn.execute(
        "INSERT INTO model_requests (project_id, member_id, turn_id, model_id, route_source,"
        " provider, model_reported, latency_ms, input_tokens, output_tokens, usage_reported, ok,"
        " error_code, created_at) VALUES (:project_id, :member_id, :turn_id, :model_id,"
        " :route_source, :provider, :model_reported, :latency_ms, :input_tokens,"
        " :output_tokens, :usage_reported, :ok, :error_code, :now)",
        row,
    )
    tokens = int(row.get("input_tokens", 0)) + int(row.get("output_tokens", 0))
    if tokens:
        ensure_brake(conn, int(row["project_id"]))
        conn.execute(
            "UPDATE project_brakes SET tokens_used = tokens_used + :n WHERE project_id = :p",
            {"n": tokens, "p": row["project_id"]},
        )
    return int(cur.lastrowid or 0)


def observed_route(conn: sqlite3.Connection, member_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT model_id, route_source, provider, model_reported, latency_ms, input_tokens,"
        " output_tokens, usage_reported, ok, error_code, created_at FROM model_requests"
        " WHERE member_id = :m ORDER BY id DESC LIMIT 1",
        {"m": member_id},
    ).fetchone()
    if row is None:
        return None
    keys = [
        "model_id",
        "route_source",
        "provider",
        "model_reported",
        "latency_ms",
        "input_tokens",
        "output_tokens",
        "usage_reported",
        "ok",
        "error_code",
        "at",
    ]
    data = dict(zip(keys, row, strict=True))
    data["at"] = iso(data["at"])
    data["ok"] = bool(data["ok"])
    data["usage_reported"] = bool(data["usage_reported"])
    return data


def usage(conn: sqlite3.Connection, project_id: int) -> dict[str, Any]:
    members = {
        int(r[0]): {"requests": r[1], "input_tokens": r[2], "output_tokens": r[3]}
        for r in conn.execute(
            "SELECT member_id, count(*), sum(input_tokens), sum(output_tokens)"
            " FROM model_requests WHERE project_id = :p GROUP BY member_id",
            {"p": project_id},
        )
    }
    total = conn.execute(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),"
        " coalesce(sum(usage_reported = 0), 0) FROM model_requests WHERE project_id = :p",
        {"p": project_id},
    ).fetchone()
    return {
        "requests": total[0],
        "input_tokens": total[1],
        "output_tokens": total[2],
        "requests_without_usage": total[3],
        "members": {str(k): v for k, v in members.items()},
    }


# -- loop brake --------------------------------------------------------------------------------


def ensure_brake(conn: sqlite3.Connection, project_id: int) -> None:
    conn.execute("INSERT OR IGNORE INTO project_brakes (project_id) VALUES (:p)", {"p": project_id})


def brake(conn: sqlite3.Connection, project_id: int) -> dict[str, Any]:
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


def count_agent_turn(
    conn: sqlite3.Connection, project_id: int, counters: dict[str, int] | None = None
) -> int:
    ensure_brake(conn, project_id)
    row = conn.execute(
        "UPDATE project_brakes SET agent_turns = agent_turns + 1 WHERE project_id = :p"
        " RETURNING agent_turns",
        {"p": project_id},
    ).fetchone()
    if counters is not None:
        counters[f"agent_turns:{project_id}"] = int(row[0])
    return int(row[0])


def reset_agent_turns(
    conn: sqlite3.Connection, project_id: int, counters: dict[str, int] | None = None
) -> None:
    """Every human message resets the count; with the writer's ``counters`` (see ``Tx``) a
    count already known to be zero costs no statement."""
    key = f"agent_turns:{project_id}"
    if counters is not None and counters.get(key) == 0:
        return
    conn.execute(
        "UPDATE project_brakes SET agent_turns = 0 WHERE project_id = :p AND agent_turns != 0",
        {"p": project_id},
    )
    if counters is not None:
        counters[key] = 0


def trip(
    conn: sqlite3.Connection, project_id: int, reason: str, detail: dict[str, Any], now: float
) -> bool:
    """Trip the brake; False when it was already tripped (the first reason stands)."""
    ensure_brake(conn, project_id)
    cur = conn.execute(
        "UPDATE project_brakes SET tripped = :r, tripped_detail = :d, tripped_at = :now"
        " WHERE project_id = :p AND tripped IS NULL",
        {"p": project_id, "r": reason, "d": json.dumps(detail, ensure_ascii=False), "now": now},
    )
    return cur.rowcount == 1


def clear_brake(conn: sqlite3.Connection, project_id: int, by: int, now: float) -> None:
    ensure_brake(conn, project_id)
    conn.execute(
        "UPDATE project_brakes SET tripped = NULL, tripped_detail = NULL, tripped_at = NULL,"
        " agent_turns = 0, cleared_by = :by, cleared_at = :now WHERE project_id = :p",
        {"p": project_id, "by": by, "now": now},
    )


def reconcile_record(
    conn: sqlite3.Connection,
    delivery_id: int,
    from_state: str,
    to_state: str,
    reason: str,
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO reconciliations (delivery_id, from_state, to_state, reason, at)"
        " VALUES (:d, :f, :t, :r, :now)",
        {"d": delivery_id, "f": from_state, "t": to_state, "r": reason, "now": now},
    )


def members_with_pending(conn: sqlite3.Connection) -> list[tuple[int, int]]:
    """(project, member) pairs with pending deliveries in active projects."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT DISTINCT d.project_id, d.recipient_id FROM deliveries d"
            " JOIN projects p ON p.id = d.project_id"
            " WHERE d.state = 'pending' AND p.state = 'active'"
        )
    ]
