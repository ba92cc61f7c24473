"""Writes of the delivery ledger: moving rows, handing them to sessions and to external agents'
sockets, and what those agents report back (docs/architecture.md, "The delivery ledger").

Every move follows :mod:`room.rules.ledger` (its transition table and its one dispatch rule) and is
announced to the project's subscribers as an ephemeral ``delivery`` frame after the commit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from room.actions.messages import publish_deliveries
from room.errors import ConflictError, ForbiddenError, NotFoundError
from room.rules import ledger
from room.rules.effects import Wake
from room.rules.entities import Member
from room.rules.ledger import DeliveryState, Reason
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import deliveries as deliveries_store
from room.store import projects as projects_store
from room.store.deliveries import Inbound
from room.store.dialect import Connection

_D = DeliveryState
CLAIM_LIMIT = 50


def set_deliveries(
    conn: Connection,
    tx: Tx,
    ids: Sequence[int],
    state: DeliveryState,
    *,
    mode: str | None = None,
    code: Reason | None = None,
    detail: str | None = None,
    allowed_from: Collection[str] | None = None,
) -> None:
    """Move rows (where the ledger allows it) and announce each move after the commit."""
    rows = deliveries_store.set_state(
        conn, ids, state, tx.now, mode=mode, code=code, detail=detail, allowed_from=allowed_from
    )
    reason = detail if detail is not None else ledger.text_of(code)
    publish_deliveries(tx, rows, state, mode, reason, code)


def settle_via_unknown(
    conn: Connection,
    tx: Tx,
    ids: Sequence[int],
    to: DeliveryState,
    code: Reason,
    mode: str | None = None,
    *,
    why: str,
) -> None:
    """Settle rows of a turn that was cut short — by a restart, or by a brake a person then
    cleared — each through ``unknown`` with two reconcile records (``why``, then ``code``'s
    text). The one path that may leave ``consumed``: a prompt the turn took in but never
    answered goes back to wait (``pending``, or ``held`` while its recipient or the project is
    paused; unbound from the turn), to be dispatched once more."""
    for delivery_id in ids:
        before = deliveries_store.state_of(conn, delivery_id)
        deliveries_store.reconcile_record(conn, delivery_id, before, _D.UNKNOWN, why, tx.now)
        deliveries_store.reconcile_record(
            conn, delivery_id, _D.UNKNOWN, to, ledger.REASON_TEXTS[code], tx.now
        )
    if to in (_D.PENDING, _D.HELD):
        deliveries_store.unbind(conn, ids)
    set_deliveries(conn, tx, ids, to, mode=mode, code=code, allowed_from=ledger.RECONCILE_FROM)


def dispatch_blocker(conn: Connection, member_id: int) -> Reason | None:
    """:func:`room.rules.ledger.dispatch_blocker` on the facts as this transaction sees them (so a
    pause committed a moment ago counts). A member that does not exist is treated as left."""
    facts = deliveries_store.dispatch_facts(conn, member_id)
    if facts is None:
        return Reason.RECIPIENT_LEFT
    project_state, member_status, _, tripped = facts
    return ledger.dispatch_blocker(project_state, member_status, tripped)


def release(
    conn: Connection,
    tx: Tx,
    member_id: int,
    ids: Sequence[int],
    code: Reason,
    detail: str | None = None,
) -> None:
    """Deliveries a session took but no model ever answered go back, never failed: ``held``
    while the project or member is paused or closed, else ``pending`` for the next dispatch."""
    if not ids:
        return
    to = ledger.waiting_state(dispatch_blocker(conn, member_id))
    deliveries_store.unbind(conn, ids)
    set_deliveries(conn, tx, ids, to, code=code, detail=detail)


def claim(conn: Connection, tx: Tx, member_id: int) -> list[Inbound]:
    """pending → delivered, the oldest first: the deliveries now sit in the in-process session.
    The caller has checked the dispatch rule in this same write."""
    ids = deliveries_store.pending_of(conn, member_id, CLAIM_LIMIT, unoffered=False)
    if not ids:
        return []
    moved = deliveries_store.set_state(conn, ids, _D.DELIVERED, tx.now)
    publish_deliveries(tx, moved, _D.DELIVERED)
    return deliveries_store.inbound_by_ids(conn, [row[0] for row in moved])


async def release_claimed(core: Services, member_id: int, ids: Sequence[int], code: Reason) -> None:
    await core.db.write(lambda conn, tx: release(conn, tx, member_id, ids, code))


async def offer(core: Services, member_id: int, handoff: str) -> list[Inbound]:
    """Pending deliveries handed to an external agent's socket (still pending until receipt);
    only while dispatch is open, each to one socket."""

    def job(conn: Connection, tx: Tx) -> list[Inbound]:
        if dispatch_blocker(conn, member_id) is not None:
            return []
        ids = deliveries_store.pending_of(conn, member_id, CLAIM_LIMIT, unoffered=True)
        deliveries_store.mark_offered(conn, ids, handoff)
        return deliveries_store.inbound_by_ids(conn, ids)

    return await core.db.write(job)


def confirm(
    conn: Connection,
    tx: Tx,
    member_id: int,
    delivery_ids: Sequence[int],
    state: DeliveryState,
    mode: str | None = None,
) -> list[int]:
    """An external agent reports ``received`` (→ delivered), ``consumed`` (with its mode) or
    asks for a delivery again (→ pending, or held while dispatch is closed). Returns the rows
    of its own that moved."""
    own = deliveries_store.own_in_states(conn, member_id, delivery_ids, ledger.CONFIRM_FROM[state])
    for delivery_id in own:
        if deliveries_store.state_of(conn, delivery_id) == _D.UNKNOWN:
            deliveries_store.reconcile_record(
                conn, delivery_id, _D.UNKNOWN, state, "confirmed by the external agent", tx.now
            )
    if state is _D.PENDING:  # asked for again: waits while paused, like any delivery
        release(conn, tx, member_id, own, Reason.REDELIVERY_REQUESTED)
    else:
        set_deliveries(conn, tx, own, state, mode=mode)
    return own


async def socket_lost(core: Services, member_id: int, handoff: str) -> int:
    """An external agent's socket closed: hand-offs it never confirmed become ``unknown``."""

    def job(conn: Connection, tx: Tx) -> int:
        ids = deliveries_store.offered_to(conn, member_id, handoff)
        for delivery_id in ids:
            deliveries_store.reconcile_record(
                conn, delivery_id, _D.PENDING, _D.UNKNOWN, "socket lost before receipt", tx.now
            )
        set_deliveries(conn, tx, ids, _D.UNKNOWN, code=Reason.SOCKET_LOST)
        return len(ids)

    return await core.db.write(job)


RETRIED = "retried by {who}"  # the reconcile record of a retry (failed → pending)


async def retry_failed(core: Services, actor: Member, delivery_id: int) -> dict[str, Any]:
    """A person of the project, or the message's sender, asks for a ``failed`` delivery again:
    it goes back to wait (``pending``, or ``held`` while its recipient or the project is paused)
    and is dispatched once more — once: a second request finds it no longer failed
    (``delivery_not_failed``, 409). The retry is recorded in the ledger's reconciliations
    (``failed → pending``, "retried by @handle") and the audit log."""

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        row = deliveries_store.retry_facts(conn, delivery_id)
        if row is None or row["project_id"] != actor.project_id:
            raise NotFoundError("no such delivery", code="no_delivery")
        if actor.kind != "human" and row["author_id"] != actor.id:
            raise ForbiddenError(
                "only a person, or the message's sender, retries a delivery", code="not_sender"
            )
        if row["state"] != _D.FAILED:
            raise ConflictError(
                f"only a failed delivery is retried; this one is {row['state']}",
                code="delivery_not_failed",
                state=row["state"],
            )
        if row["deleted"]:
            raise ConflictError("the message was deleted", code="message_deleted")
        projects_store.require_open(conn, actor.project_id)  # archived and trashed: read-only
        blocker = dispatch_blocker(conn, row["recipient_id"])
        if blocker is Reason.RECIPIENT_LEFT:
            raise ConflictError("the recipient left the project", code="recipient_left")
        to = ledger.waiting_state(blocker)
        who = f"@{actor.handle}"
        deliveries_store.reconcile_record(
            conn, delivery_id, _D.FAILED, to, RETRIED.format(who=who), tx.now
        )
        deliveries_store.unbind(conn, [delivery_id])
        set_deliveries(
            conn, tx, [delivery_id], to, code=Reason.RETRY_REQUESTED, allowed_from=ledger.RETRY_FROM
        )
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind=actor.kind,
            actor_id=actor.id,
            project_id=actor.project_id,
            action="delivery.retry",
            outcome="ok",
            detail={"delivery_id": delivery_id, "to": to.value, "was": row["reason_code"]},
        )
        tx.emit(Wake(actor.project_id, (row["recipient_id"],)))
        return {
            "delivery": {
                "id": delivery_id,
                "message_id": row["message_id"],
                "recipient_id": row["recipient_id"],
                "state": to.value,
                "reason_code": Reason.RETRY_REQUESTED.value,
                "retries": deliveries_store.retries(conn, delivery_id),
            }
        }

    result: dict[str, Any] = await core.db.write(job, locks=(actor.project_id,))
    return result
