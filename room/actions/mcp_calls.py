"""What an external agent's MCP client did (docs/agents.md, "Coding agents over MCP"): each tool
call is audited, and shown in the timeline as a ``tool`` message like an in-process turn's step
(``meta.tool.via = "mcp"``), in one write after the call ran.

The call itself ran through the same tools as an in-process turn's (``room.agents.tools``); only
the record is written here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from room.actions import brakes as brake_actions
from room.actions.deliveries import CLAIM_LIMIT, confirm, dispatch_blocker
from room.actions.messages import append_message
from room.actions.turns import ToolResult, tool_activity
from room.rules.entities import Member
from room.rules.ledger import DeliveryState
from room.rules.render import render
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import deliveries as deliveries_store
from room.store import projects as projects_store
from room.store.deliveries import Inbound
from room.store.dialect import Connection
from room.store.projects import OPEN_STATES

#: The audit log's action for one MCP tool call; ``outcome`` is ``ok``, ``failed`` (the tool
#: answered ``{"ok": false, …}``) or ``refused`` (not granted, rate limited).
AUDIT_ACTION = "mcp.tool_call"


async def record_call(
    core: Services,
    member: Member,
    name: str,
    arguments: Mapping[str, Any],
    *,
    ok: bool,
    outcome: str,
    error: str | None = None,
    detail: Mapping[str, Any] | None = None,
    session: str | None = None,
) -> None:
    """Audit one call of ``member``'s MCP client and, while its project takes writes (active or
    paused), show it in the timeline as a ``tool`` message authored by the member: it mentions
    and wakes nobody, and agents' contexts leave it out, as for an in-process step."""
    call_id = uuid.uuid4().hex
    body, meta = tool_activity(
        [{"id": call_id, "name": name, "arguments": dict(arguments)}],
        [ToolResult(call_id, "", ok, detail)],
    )
    meta["tool"]["via"] = "mcp"

    def job(conn: Connection, tx: Tx) -> None:
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind="agent",
            actor_id=member.id,
            project_id=member.project_id,
            action=AUDIT_ACTION,
            outcome=outcome,
            detail={"tool": name, "error": error, "session": session},
        )
        if projects_store.state_of(conn, member.project_id) in OPEN_STATES:
            append_message(
                conn,
                tx,
                project_id=member.project_id,
                author_id=member.id,
                kind="tool",
                body=body,
                html=render(body),
                meta=meta,
            )

    await core.db.write(job, locks=(member.project_id,))


def take_inbox_in(
    conn: Connection, tx: Tx, member: Member, handoff: str, turn_cap: int | None
) -> list[Inbound]:
    """An MCP client reads its unread deliveries (the ``room://inbox`` resource): in this one
    write they are handed to it and taken, pending → delivered → consumed (mode ``queue``), each
    move announced and recorded as an external agent's ``received`` then ``consume`` would be —
    the read is the agent taking them into its own turn, which counts toward the loop brake like
    ``room agent``'s. Nothing moves while dispatch is closed (a paused member or project: the
    rows wait ``held``), and rows already offered to a ``/ws`` socket are left to it."""
    if dispatch_blocker(conn, member.id) is not None:
        return []
    ids = deliveries_store.pending_of(conn, member.id, CLAIM_LIMIT, unoffered=True)
    if not ids:
        return []
    deliveries_store.mark_offered(conn, ids, handoff)
    items = deliveries_store.inbound_by_ids(conn, ids)
    confirm(conn, tx, member.id, ids, DeliveryState.DELIVERED)
    taken = confirm(conn, tx, member.id, ids, DeliveryState.CONSUMED, "queue")
    if taken and turn_cap is not None:
        brake_actions.count_external_turn(conn, tx, member.project_id, member.id, turn_cap)
    return items


async def take_inbox(
    core: Services, member: Member, handoff: str, turn_cap: int | None
) -> list[Inbound]:
    return await core.db.write(
        lambda conn, tx: take_inbox_in(conn, tx, member, handoff, turn_cap),
        locks=(member.project_id,),
    )


async def has_unread(core: Services, member_id: int) -> bool:
    """Whether an MCP client reading its inbox now would get something (what a resource update
    notification promises)."""

    def read(conn: Connection) -> bool:
        if dispatch_blocker(conn, member_id) is not None:
            return False
        return bool(deliveries_store.pending_of(conn, member_id, 1, unoffered=True))

    return await core.db.read(read)
