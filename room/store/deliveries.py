"""SQL of the delivery ledger: one row per (message, recipient). Every statement that reads or
moves a delivery row is here; the rules the moves follow are :mod:`room.rules.ledger`'s
(docs/architecture.md, "The delivery ledger")."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from room.rules.attachments import wire as attachment_wire
from room.rules.entities import iso
from room.rules.ledger import ALLOWED_FROM, DeliveryState, Reason, detail_of, text_of
from room.store import attachments as attachments_store
from room.store.db import Appends, BulkInsert
from room.store.dialect import POSTGRESQL, SQLITE, Connection, Dialect, dialect_for

DELIVERIES = BulkInsert(
    "deliveries",
    ("project_id", "message_id", "recipient_id", "state", "created_at", "updated_at"),
    verb="INSERT OR IGNORE",
)

# (delivery, project, message, recipient) of a row that moved: what a ``delivery`` frame names.
Moved = tuple[int, int, int, int]


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
    # What only agents read after the body: the tool call a notice asks for (the message's
    # ``meta.for_agents``; people see the body alone). See docs/agents.md.
    for_agents: str = ""
    # The message's files (``room.rules.attachments.wire``): read at their ``url`` with the token.
    attachments: tuple[dict[str, Any], ...] = ()

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
            "for_agents": self.for_agents,
            "created_at": iso(self.created_at),
            "attachments": list(self.attachments),
        }


def _inbound_sql(dialect: Dialect) -> str:
    for_agents = dialect.json_text("m.frame", "meta", "for_agents")
    return (
        "SELECT d.id, d.message_id, d.project_id, m.seq, m.author_id, m.body, m.created_at,"
        f" a.handle, a.display_name, COALESCE({for_agents}, '')"
        " FROM deliveries d JOIN messages m ON m.id = d.message_id"
        " LEFT JOIN members a ON a.id = m.author_id"
    )


# The SELECT of an inbound delivery, per dialect (the text for agents is read from the frame).
_INBOUND = {dialect: _inbound_sql(dialect) for dialect in (SQLITE, POSTGRESQL)}


def _inbound(conn: Connection, rows: Iterable[Sequence[Any]]) -> list[Inbound]:
    found = [Inbound(*row) for row in rows]
    files = attachments_store.for_messages(conn, sorted({i.message_id for i in found}))
    if not files:
        return found
    return [
        replace(i, attachments=tuple(attachment_wire(r) for r in files[i.message_id]))
        if i.message_id in files
        else i
        for i in found
    ]


def _ids(rows: Iterable[Sequence[Any]]) -> list[int]:
    return [int(r[0]) for r in rows]


def _marks(values: Collection[Any]) -> str:
    return ",".join("?" * len(values))


# -- writing rows ------------------------------------------------------------------------------


def insert_many(
    conn: Connection,
    *,
    project_id: int,
    message_id: int,
    recipients: Iterable[tuple[int, str]],
    now: float,
    appends: Appends | None = None,
) -> None:
    """``recipients`` are (member_id, initial state) — see :func:`room.rules.ledger.initial_state`.
    A state is bound as a plain ``str``: the driver adapts an enum member slowly."""
    rows = [
        (project_id, message_id, member_id, str(state), now, now) for member_id, state in recipients
    ]
    DELIVERIES.write(conn, rows, appends)


def set_state(
    conn: Connection,
    ids: Sequence[int],
    state: DeliveryState | str,
    now: float,
    *,
    mode: str | None = None,
    code: Reason | None = None,
    detail: str | None = None,
    allowed_from: Collection[str] | None = None,
) -> list[Moved]:
    """Move deliveries to ``state`` where the ledger allows it (rows in other states are left
    alone); the row's reason becomes ``code`` and its text ``detail`` (else the code's text).
    Returns the rows that moved."""
    if not ids:
        return []
    target = DeliveryState(state)
    sources = ALLOWED_FROM[target] if allowed_from is None else allowed_from
    sql = (
        "UPDATE deliveries SET state = :state, updated_at = :now, mode = COALESCE(:mode, mode),"
        " reason = :reason, reason_code = :code WHERE id = :id"
        f" AND state IN ({', '.join(repr(str(s)) for s in sorted(sources))})"
        " RETURNING id, project_id, message_id, recipient_id"
    )
    params = {
        "state": target.value,
        "now": now,
        "mode": mode,
        "reason": detail if detail is not None else text_of(code),
        "code": None if code is None else code.value,
    }
    rows = []
    for delivery_id in ids:
        row = conn.execute(sql, {**params, "id": delivery_id}).fetchone()
        if row is not None:
            rows.append((int(row[0]), int(row[1]), int(row[2]), int(row[3])))
    return rows


def unbind(conn: Connection, ids: Sequence[int]) -> None:
    """Forget the turn and the socket a delivery was handed to (it goes back to wait)."""
    conn.executemany(
        "UPDATE deliveries SET turn_id = NULL, handoff = NULL WHERE id = ?", [(i,) for i in ids]
    )


def take_into_turn(conn: Connection, ids: Sequence[int], turn_id: int) -> None:
    conn.executemany("UPDATE deliveries SET turn_id = ? WHERE id = ?", [(turn_id, i) for i in ids])


def mark_offered(conn: Connection, ids: Sequence[int], handoff: str) -> None:
    conn.executemany("UPDATE deliveries SET handoff = ? WHERE id = ?", [(handoff, i) for i in ids])


def cancel_open_for_message(
    conn: Connection, message_id: int, code: Reason, now: float
) -> list[tuple[int, int]]:
    """Retracted before delivery: pending and held rows become ``cancelled``; returns
    (delivery id, recipient id) per row."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "UPDATE deliveries SET state = 'cancelled', reason = :reason, reason_code = :code,"
            " updated_at = :now WHERE message_id = :m AND state IN ('pending', 'held')"
            " RETURNING id, recipient_id",
            {"m": message_id, "reason": text_of(code), "code": code.value, "now": now},
        )
    ]


def reconcile_record(
    conn: Connection,
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


# -- reading rows ------------------------------------------------------------------------------


def for_message(conn: Connection, message_id: int) -> list[dict[str, Any]]:
    return [
        {
            "id": r[0],
            "recipient_id": r[1],
            "state": r[2],
            "mode": r[3],
            "reason": r[4],
            "reason_code": r[5],
            "reason_detail": detail_of(r[5], r[4]),
            "updated_at": iso(r[6]),
            "retries": r[7],
        }
        for r in conn.execute(
            "SELECT id, recipient_id, state, mode, reason, reason_code, updated_at,"
            " (SELECT count(*) FROM reconciliations c WHERE c.delivery_id = deliveries.id"
            " AND c.from_state = 'failed' AND c.reason LIKE 'retried by %')"
            " FROM deliveries WHERE message_id = :m ORDER BY recipient_id",
            {"m": message_id},
        )
    ]


def retry_facts(conn: Connection, delivery_id: int) -> dict[str, Any] | None:
    """What a retry of ``delivery_id`` decides on: its project, message, sender, recipient,
    state and reason, and whether its message was deleted."""
    row = conn.execute(
        "SELECT m.project_id, d.message_id, m.author_id, d.recipient_id, d.state, d.reason_code,"
        " m.deleted_at IS NOT NULL FROM deliveries d JOIN messages m ON m.id = d.message_id"
        " WHERE d.id = :d",
        {"d": delivery_id},
    ).fetchone()
    if row is None:
        return None
    keys = ("project_id", "message_id", "author_id", "recipient_id", "state", "reason_code")
    return {**dict(zip(keys, row[:6], strict=True)), "deleted": bool(row[6])}


def retries(conn: Connection, delivery_id: int) -> int:
    """How many times a person (or the sender) asked for this delivery again."""
    row = conn.execute(
        "SELECT count(*) FROM reconciliations WHERE delivery_id = :d AND from_state = 'failed'"
        " AND reason LIKE 'retried by %'",
        {"d": delivery_id},
    ).fetchone()
    return int(row[0])


def recipients(conn: Connection, message_id: int) -> set[int]:
    return {
        int(r[0])
        for r in conn.execute(
            "SELECT recipient_id FROM deliveries WHERE message_id = :m", {"m": message_id}
        )
    }


def state_of(conn: Connection, delivery_id: int) -> str:
    row = conn.execute("SELECT state FROM deliveries WHERE id = ?", (delivery_id,)).fetchone()
    return str(row[0]) if row else ""


def pending_of(conn: Connection, member_id: int, limit: int, *, unoffered: bool) -> list[int]:
    """The oldest pending deliveries of a member (``unoffered``: not yet offered to a socket)."""
    extra = " AND handoff IS NULL" if unoffered else ""
    return _ids(
        conn.execute(
            "SELECT id FROM deliveries WHERE recipient_id = :m AND state = 'pending'"
            f"{extra} ORDER BY id LIMIT :limit",
            {"m": member_id, "limit": limit},
        )
    )


def of_member(conn: Connection, member_id: int, states: Collection[str]) -> list[int]:
    return _ids(
        conn.execute(
            f"SELECT id FROM deliveries WHERE recipient_id = ? AND state IN ({_marks(states)})"
            " ORDER BY id",
            [member_id, *states],
        )
    )


def of_project(conn: Connection, project_id: int, states: Collection[str]) -> list[int]:
    return _ids(
        conn.execute(
            f"SELECT id FROM deliveries WHERE project_id = ? AND state IN ({_marks(states)})"
            " ORDER BY id",
            [project_id, *states],
        )
    )


def held_for_active_members(conn: Connection, project_id: int) -> list[int]:
    """A project's ``held`` rows whose recipient is active (released on resume)."""
    return _ids(
        conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE d.project_id = :p AND d.state = 'held' AND m.status = 'active' ORDER BY d.id",
            {"p": project_id},
        )
    )


def own_in_states(
    conn: Connection, member_id: int, ids: Sequence[int], states: Collection[str]
) -> list[int]:
    """Those of ``ids`` addressed to ``member_id`` and in one of ``states``."""
    if not ids:
        return []
    return _ids(
        conn.execute(
            f"SELECT id FROM deliveries WHERE id IN ({_marks(ids)}) AND recipient_id = ?"
            f" AND state IN ({_marks(states)}) ORDER BY id",
            [*ids, member_id, *states],
        )
    )


def offered_to(conn: Connection, member_id: int, handoff: str) -> list[int]:
    """Deliveries offered to one socket that it never confirmed."""
    return _ids(
        conn.execute(
            "SELECT id FROM deliveries WHERE recipient_id = :m AND handoff = :h"
            " AND state = 'pending'",
            {"m": member_id, "h": handoff},
        )
    )


def inbound_by_ids(conn: Connection, ids: Sequence[int]) -> list[Inbound]:
    if not ids:
        return []
    return _inbound(
        conn,
        conn.execute(
            f"{_INBOUND[dialect_for(conn)]} WHERE d.id IN ({_marks(ids)}) ORDER BY d.id", ids
        ),
    )


def unsettled(conn: Connection, member_id: int) -> list[Inbound]:
    """An external agent's deliveries whose fate it must confirm: ``unknown`` or ``delivered``."""
    return _inbound(
        conn,
        conn.execute(
            f"{_INBOUND[dialect_for(conn)]} WHERE d.recipient_id = :m"
            " AND d.state IN ('unknown', 'delivered')"
            " ORDER BY d.id",
            {"m": member_id},
        ),
    )


def of_turn(conn: Connection, turn_id: int) -> list[tuple[int, str]]:
    """(delivery, state) of the deliveries a turn took."""
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, state FROM deliveries WHERE turn_id = :t ORDER BY id", {"t": turn_id}
        )
    ]


def still_taken(conn: Connection, turn_id: int, ids: Sequence[int]) -> set[int]:
    """Those of ``ids`` still bound to ``turn_id`` (by their keys: no scan of the ledger)."""
    if not ids:
        return set()
    return set(
        _ids(
            conn.execute(
                f"SELECT id FROM deliveries WHERE id IN ({_marks(ids)}) AND turn_id = ?",
                [*ids, turn_id],
            )
        )
    )


def in_builtin_inboxes(conn: Connection, node: str | None = None) -> list[int]:
    """Delivered to an in-process session and taken by no turn (its inbox is memory), except
    for a member whose running turn another node owns: that node's session holds the inbox,
    and it is live (a member's inbox fills while its turn runs; one turn runs per member)."""
    return _ids(
        conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE d.state = 'delivered' AND d.turn_id IS NULL AND m.driver = 'builtin'"
            " AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.member_id = d.recipient_id"
            " AND t.state = 'running' AND t.owner IS NOT NULL AND t.owner <> :node)",
            {"node": node},
        )
    )


def handed_to_external(conn: Connection, node: str | None = None) -> list[int]:
    """Delivered to, or offered to, an external agent and not confirmed consumed, except what
    another node's socket was handed (``handoff`` is ``<node>:<socket>``; that server holds the
    socket and may be running)."""
    mine = f"{node}:%" if node else "%"
    return _ids(
        conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE m.driver = 'external' AND (d.state = 'delivered'"
            " OR (d.state = 'pending' AND d.handoff IS NOT NULL))"
            " AND NOT (d.handoff IS NOT NULL AND d.handoff LIKE '%:%'"
            " AND d.handoff NOT LIKE :mine)",
            {"mine": mine},
        )
    )


def paused_projects_with_work(conn: Connection) -> list[int]:
    return _ids(
        conn.execute(
            "SELECT DISTINCT d.project_id FROM deliveries d JOIN projects p ON p.id = d.project_id"
            " WHERE d.state IN ('pending', 'held') AND p.state != 'active'"
        )
    )


def members_with_pending(conn: Connection) -> list[tuple[int, int]]:
    """(project, member) pairs with pending deliveries in active projects."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT DISTINCT d.project_id, d.recipient_id FROM deliveries d"
            " JOIN projects p ON p.id = d.project_id"
            " WHERE d.state = 'pending' AND p.state = 'active'"
        )
    ]


def dispatch_facts(conn: Connection, member_id: int) -> tuple[str, str, int, bool] | None:
    """What :func:`room.rules.ledger.dispatch_blocker` decides on, read inside the writer's
    transaction: (project state, member status, project id, whether the project's brake holds
    this member — the whole project, or the loop it is in)."""
    holds = dialect_for(conn).json_int_array_has("b.held_json", "m.id")
    row = conn.execute(
        "SELECT p.state, m.status, p.id, b.tripped IS NOT NULL AND (b.held_json IS NULL OR"
        f" {holds}) FROM members m"
        " JOIN projects p ON p.id = m.project_id"
        " LEFT JOIN project_brakes b ON b.project_id = p.id WHERE m.id = :m",
        {"m": member_id},
    ).fetchone()
    if row is None:
        return None
    return str(row[0]), str(row[1]), int(row[2]), bool(row[3])
