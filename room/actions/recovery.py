"""The start-up reconciliation: what a crash left mid-hand-off is resolved against each
session's own record, never re-sent blindly (docs/architecture.md, "The delivery ledger").

* a turn left ``running``: if its final reply was posted (found by its idempotency key), it
  completed; if it had already acted (``room_send``), its deliveries fail rather than run twice;
  otherwise nothing it did reached anyone and its deliveries go back to ``pending``.
* deliveries in an in-process session's inbox that no turn took go back to ``pending``.
* hand-offs to external agents become ``unknown`` until the agent confirms (it reconciles on its
  next connection).

Every row passes through ``unknown`` with a reconcile record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from room.actions import checkpoints
from room.actions.deliveries import set_deliveries, settle_via_unknown
from room.actions.notices import post_notice
from room.actions.turns import final_txn
from room.rules import notices
from room.rules.ledger import DeliveryState, Reason
from room.store import Tx
from room.store import checkpoints as checkpoints_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import turns as turns_store
from room.store.dialect import POSTGRESQL, Connection, dialect_for

_D = DeliveryState


@dataclass(slots=True)
class Report:
    turns_interrupted: int = 0
    redispatched: int = 0
    failed: int = 0
    completed: int = 0
    awaiting_external: int = 0
    notices: list[str] = field(default_factory=list)
    paused_projects_with_work: list[int] = field(default_factory=list)


def reconcile_on_start(conn: Connection, tx: Tx) -> dict[str, Any]:
    """Run every step of the reconciliation in one write; returns its report (also audited)."""
    report = Report()
    settle_running_turns(conn, tx, report)
    return_inboxes(conn, tx, report)
    await_external_agents(conn, tx, report)
    report.paused_projects_with_work = deliveries_store.paused_projects_with_work(conn)
    return _audit(conn, tx, report)


def via_unknown(
    conn: Connection,
    tx: Tx,
    ids: list[int],
    to: DeliveryState,
    code: Reason,
    mode: str | None = None,
) -> None:
    """Settle rows caught by the restart, each through ``unknown`` with reconcile records."""
    settle_via_unknown(conn, tx, ids, to, code, mode, why="restart")


def settling_node(conn: Connection, tx: Tx) -> str | None:
    """Whose leftovers a start settles: on PostgreSQL this node's (and those naming none), since
    another server on the database may be running its own; on SQLite all of them (None): the
    database file is one server's (its data lock), and a restored or copied folder holds the
    turns of a node id it no longer has."""
    return tx.node if dialect_for(conn) is POSTGRESQL else None


def settle_running_turns(conn: Connection, tx: Tx, report: Report) -> None:
    # Only this node's turns (and those that name none): another server on the same database
    # may be running its own right now (docs/storage.md, "Several writers").
    for turn in turns_store.running_turns(conn, settling_node(conn, tx)):
        settle_turn(conn, tx, report, *turn)


def settle_turn(
    conn: Connection,
    tx: Tx,
    report: Report,
    turn_id: int,
    project_id: int,
    member_id: int,
    side_effects: int,
    *,
    error: str = "server restart",
) -> None:
    """Settle one turn left ``running`` by a server that no longer runs it (restarted, or one
    whose lease another node adopted: room.actions.leases) from the session's own record."""
    report.turns_interrupted += 1
    ids = [
        d
        for d, s in deliveries_store.of_turn(conn, turn_id)
        if s in (_D.DELIVERED, _D.CONSUMED, _D.UNKNOWN)
    ]
    reply = messages_store.find_txn(conn, member_id, final_txn(turn_id))
    if reply is not None:
        via_unknown(conn, tx, ids, _D.CONSUMED, Reason.RESTART_REPLY_POSTED, "queue")
        turns_store.update_turn(
            conn, turn_id, state="completed", reply_message_id=reply[0], ended_at=tx.now
        )
        checkpoints.record(conn, tx, turn_id, "end", state="completed")
        report.completed += 1
        return
    turns_store.update_turn(conn, turn_id, state="interrupted", error=error, ended_at=tx.now)
    # The prompt it left pending and the calls that never finished, for the next turn.
    last = checkpoints_store.latest_of_turn(conn, turn_id)
    pending = last["pending_tools"] if last else []
    checkpoints.record(conn, tx, turn_id, "interrupted", state="interrupted", pending_tools=pending)
    if side_effects:
        via_unknown(conn, tx, ids, _D.FAILED, Reason.RESTART_AFTER_EFFECT)
        report.failed += len(ids)
        member = members_store.get(conn, member_id)
        notice = notices.restart_interrupted(member.handle if member else None, turn_id)
        meta = {"turn_id": turn_id, "member_id": member_id, "retry": ids}
        post_notice(conn, tx, project_id, notice, meta)
        report.notices.append(notice.body)
    else:
        turns_store.supersede_turn_transcript(conn, turn_id)
        via_unknown(conn, tx, ids, _D.PENDING, Reason.RESTART_BEFORE_EFFECT)
        report.redispatched += len(ids)


def return_inboxes(conn: Connection, tx: Tx, report: Report) -> None:
    """In-process inboxes are memory: what no turn took is still unseen by the session's record."""
    inbox = deliveries_store.in_builtin_inboxes(conn, settling_node(conn, tx))
    via_unknown(conn, tx, inbox, _D.PENDING, Reason.RESTART_IN_INBOX)
    report.redispatched += len(inbox)


def await_external_agents(conn: Connection, tx: Tx, report: Report) -> None:
    external = deliveries_store.handed_to_external(conn, settling_node(conn, tx))
    for delivery_id in external:
        deliveries_store.reconcile_record(
            conn,
            delivery_id,
            deliveries_store.state_of(conn, delivery_id),
            _D.UNKNOWN,
            "restart: awaiting the external agent's confirmation",
            tx.now,
        )
    set_deliveries(conn, tx, external, _D.UNKNOWN, code=Reason.AWAITING_CONFIRMATION)
    report.awaiting_external = len(external)


def _audit(conn: Connection, tx: Tx, report: Report) -> dict[str, Any]:
    data: dict[str, Any] = {
        "turns_interrupted": report.turns_interrupted,
        "redispatched": report.redispatched,
        "failed": report.failed,
        "completed": report.completed,
        "awaiting_external": report.awaiting_external,
        "notices": report.notices,
        "paused_projects_with_work": report.paused_projects_with_work,
        "at": tx.now,
    }
    conn.execute(
        "INSERT INTO audit_events (at, actor_kind, project_id, action, outcome, detail_json)"
        " VALUES (:at, 'system', NULL, 'runtime.reconcile', 'ok', :d)",
        {"at": tx.now, "d": json.dumps({k: v for k, v in data.items() if k != "notices"})},
    )
    return data
