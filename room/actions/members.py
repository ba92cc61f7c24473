"""Member operations (human only): add an agent, pause, resume, stop current work, leave.

Permission comes from the pure table in ``room.rules.lifecycle`` (an owner may act on anyone, a
human on themself, an agent never); every attempt, allowed or refused, is audited. Members change
only while the project is open (active or paused), and a project always keeps one owner: the last
owner can neither leave nor give up the role.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Any

from room.actions import stops
from room.actions import tasks as task_actions
from room.actions.deliveries import set_deliveries
from room.actions.notices import post_notice
from room.actions.projects import AgentSpec, insert_agent
from room.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError, RoomError
from room.rules import notices
from room.rules.effects import Broadcast, CloseAgentSockets, CutMember, RosterChanged, Wake
from room.rules.entities import Member
from room.rules.ledger import OPEN_STATES, DeliveryState, Reason
from room.rules.lifecycle import ActorKind, MemberOp, MemberStatus, decide_member
from room.rules.ops import members_frame, viewer_kind
from room.rules.protocol import encode
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import auth as auth_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store.dialect import Connection

log = logging.getLogger(__name__)

LAST_OWNER = (
    "项目至少保留一位所有者：请先让另一位成员成为所有者"
    " (A project keeps at least one owner: make someone else an owner first.)"
)

_D = DeliveryState


def actor_kind(actor: Member) -> ActorKind:
    return viewer_kind(actor)


def announce_members(conn: Connection, tx: Tx, project_id: int) -> None:
    """The roster changed: after the commit the cached roster is dropped and every subscriber
    gets the new ``members`` frame."""
    members = members_store.wire_list(conn, project_id)
    state = projects_store.state_of(conn, project_id) or "purged"
    projects_store.bump_roster(conn, project_id)
    tx.emit(RosterChanged(project_id))
    tx.emit(Broadcast(project_id, encode(members_frame(project_id, members, state))))


async def add_agent(core: Services, actor: Member, spec: AgentSpec, driver: str) -> Member:
    if not actor.is_owner:
        raise ForbiddenError("only a project owner adds members", code="not_owner")
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> Member:
        projects_store.require_open(conn, project_id)
        member_id = insert_agent(conn, tx, project_id, spec)
        conn.execute(
            "UPDATE members SET driver = :d WHERE id = :id", {"d": driver, "id": member_id}
        )
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind="human",
            actor_id=actor.id,
            project_id=project_id,
            action="member.add",
            outcome="ok",
            detail={
                "member_id": member_id,
                "handle": spec.handle,
                "role": spec.role,
                "driver": driver,
            },
        )
        announce_members(conn, tx, project_id)
        member = members_store.get(conn, member_id)
        assert member is not None
        return member

    return await core.db.write(job, locks=(project_id,))


async def member_op(core: Services, actor: Member, target_id: int, op: str) -> dict[str, Any]:
    """Run ``op`` (pause, resume, stop, leave) on a member; refused attempts change nothing but
    the audit log."""
    project_id = actor.project_id
    if op not in MemberOp.__members__.values():
        raise BadRequestError(
            f"unknown member operation {op!r}", code="bad_op", allowed=[o.value for o in MemberOp]
        )
    member_op_ = MemberOp(op)
    roster = await core.rosters.get(project_id)
    target = roster.member(target_id)
    if target is None:
        raise NotFoundError("no such member in this project", code="no_member")
    decision = decide_member(
        MemberStatus(target.status), member_op_, actor_kind(actor), is_self=target.id == actor.id
    )
    if not decision.allowed:
        await core.db.write(
            lambda conn, tx: _audit_refused(conn, tx, actor, target, op, decision.reason or ""),
            locks=(project_id,),
        )
        decision.raise_if_refused()
    stopped = False
    left: list[stops.StillRunning] | None = None  # a cluster's stop: the turns not yet settled
    if member_op_ in (MemberOp.STOP, MemberOp.LEAVE):
        # Checked first, so a refused stop stops nothing. The write checks again; should it
        # refuse after all (a race with a lifecycle change), a stop request is all that is left.
        early = await core.db.read(lambda conn: _refusal(conn, actor, target_id, member_op_))
        if early is not None:
            await core.db.write(
                lambda conn, tx: _audit_refused(conn, tx, actor, target, op, early.code),
                locks=(project_id,),
            )
            raise early
        stopped = core.agents.stop_member(target_id)
        if core.relay is not None:  # a cluster: the turn may run on another node
            # Read before the request goes out: the node running it may settle the row before
            # a read after it, and the answer would say no turn ran.
            was = await core.db.read(lambda conn: stops.running_in(conn, project_id, target_id))
            if not stopped:
                core.relay.stop_elsewhere(target_id)
            # Confirmed once the turn's row is settled, wherever it ran (room.actions.stops).
            stopped = stopped or bool(was)
            left = await stops.settled(core, project_id, target_id, core.settings.stop_confirm_secs)

    owed: list[int] = []  # the pending stops this answer recorded (member_stops)

    def job(conn: Connection, tx: Tx) -> dict[str, Any] | RoomError:
        owed.clear()  # the writer may run a job twice
        refusal = _refusal(conn, actor, target_id, member_op_)
        if refusal is not None:
            _audit_refused(conn, tx, actor, target, op, refusal.code)
            return refusal
        result: dict[str, Any] = {"member_id": target_id, "op": op, "stop_requested": stopped}
        if left is not None:
            result["stop_confirmed"] = not left
            if left:
                result["running_on"] = [s.wire() for s in left]
        if member_op_ is MemberOp.PAUSE:
            members_store.set_status(conn, target_id, "paused", tx.now)
            held = _move(conn, tx, target_id, (_D.PENDING,), _D.HELD, Reason.MEMBER_PAUSED)
            result["held"] = held
        elif member_op_ is MemberOp.RESUME:
            members_store.set_status(conn, target_id, "active", tx.now)
            if projects_store.state_of(conn, project_id) == "active":
                result["released"] = _move(conn, tx, target_id, (_D.HELD,), _D.PENDING, None)
                tx.emit(Wake(project_id, (target_id,)))
        elif member_op_ is MemberOp.LEAVE:
            members_store.set_status(conn, target_id, "left", tx.now)
            result["handed_off"] = task_actions.handoff_open_tasks(conn, tx, project_id, target_id)
            auth_store.revoke_member_tokens(conn, target_id, tx.now)
            result["cancelled"] = _move(
                conn, tx, target_id, OPEN_STATES, _D.CANCELLED, Reason.RECIPIENT_LEFT
            )
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind=actor.kind,
            actor_id=actor.id,
            project_id=project_id,
            action=f"member.{op}",
            from_state=target.status,
            outcome="ok",
            detail={k: v for k, v in result.items() if k != "op"},
        )
        if member_op_ is MemberOp.STOP and left:
            # Not true yet: owed once the turns' rows are settled, whoever sees that first
            # (room.actions.stops; durable, so a restart of this node does not lose it).
            owed[:] = stops.record_pending(
                conn, tx, left, project_id=project_id, by=actor.display_name,
                handle=target.handle,
            )  # fmt: skip
        else:
            post_notice(
                conn,
                tx,
                project_id,
                notices.member_op(op, actor.display_name, target.handle),
                {"member_op": op, "member_id": target_id},
            )
        announce_members(conn, tx, project_id)
        if member_op_ is MemberOp.LEAVE:
            # Last, after the notice and the roster: whoever left sees both, then stops
            # receiving the project live, on every socket they had open.
            tx.emit(CutMember(project_id, target_id))
            if target.kind == "agent":
                # Its tokens are revoked above; the sockets they opened close too (an external
                # agent's process learns it has left instead of idling on a dead connection).
                reason = "this agent left the project; its tokens are revoked"
                tx.emit(CloseAgentSockets(target_id, reason))
        return result

    outcome = await core.db.write(job, locks=(project_id,))
    if isinstance(outcome, RoomError):
        raise outcome
    if owed:
        _confirm_later(core, project_id, list(owed))
    return outcome


def _confirm_later(core: Services, project_id: int, owed: list[int]) -> None:
    """A cluster's stop the other node has not confirmed yet (paused, cut off): the notice that
    the member's work stopped is posted once its turn's row is settled (that node ended it, or
    another adopted the project's lease), not before. This node reads the row every
    :data:`~room.actions.stops.CONFIRM_LATER_POLL_SECS` for up to
    :data:`~room.actions.stops.CONFIRM_LATER_SECS`; the row recorded with the answer
    (``member_stops``) outlives that and this node: any node's leases sweep posts the notice
    then, once (room.actions.stops.finish_pending)."""

    async def wait() -> None:
        deadline = time.monotonic() + stops.CONFIRM_LATER_SECS
        while time.monotonic() < deadline:
            try:
                await stops.finish_settled(core, project_id)
                if not await core.db.read(lambda conn: stops.pending(conn, owed)):
                    return
            except RoomError:  # the database away for a moment: the row waits, read again
                log.warning("a pending stop's notice: reading its turn failed", exc_info=True)
            await asyncio.sleep(stops.CONFIRM_LATER_POLL_SECS)

    task = asyncio.get_running_loop().create_task(wait())
    core.background.add(task)
    task.add_done_callback(core.background.discard)


def _refusal(conn: Connection, actor: Member, target_id: int, op: MemberOp) -> RoomError | None:
    """Why ``op`` cannot run now, checked again inside the write (the roster read before it may
    be stale): the project closed, the member changed status, or the last owner would leave."""
    try:
        projects_store.require_open(conn, actor.project_id, projects_store.MEMBER_OPEN_STATES)
        current = members_store.get(conn, target_id)
        if current is None or current.project_id != actor.project_id:
            raise NotFoundError("no such member in this project", code="no_member")
        # The actor as they are now (an owner demoted or gone meanwhile acts no more).
        acting = members_store.get(conn, actor.id)
        if acting is None or acting.status == "left":
            raise ForbiddenError("you are not a member of this project", code="not_member")
        decide_member(
            MemberStatus(current.status), op, actor_kind(acting), is_self=target_id == actor.id
        ).raise_if_refused()
        if (
            op is MemberOp.LEAVE
            and current.kind == "human"
            and current.is_owner
            and _owner_count(conn, actor.project_id) <= 1
        ):
            raise ConflictError(LAST_OWNER, code="last_owner")
    except RoomError as exc:
        return exc
    return None


def _audit_refused(
    conn: Connection, tx: Tx, actor: Member, target: Member, op: str, reason: str
) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor.kind,
        actor_id=actor.id,
        project_id=actor.project_id,
        action=f"member.{op}",
        from_state=target.status,
        outcome="refused",
        detail={"target": target.id, "reason": reason},
    )


def _move(
    conn: Connection,
    tx: Tx,
    member_id: int,
    from_states: Collection[DeliveryState],
    to_state: DeliveryState,
    code: Reason | None,
) -> int:
    ids = deliveries_store.of_member(conn, member_id, from_states)
    if to_state is DeliveryState.PENDING:
        deliveries_store.unbind(conn, ids)
    set_deliveries(conn, tx, ids, to_state, code=code)
    return len(ids)


async def set_role(core: Services, actor: Member, target_id: int, role: str) -> dict[str, Any]:
    """Grant or withdraw the owner role of a person (owners only; never the last owner)."""
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        target = members_store.get(conn, target_id)
        refusal = None
        state = projects_store.state_of(conn, project_id) or "purged"
        if actor.kind != "human":
            refusal = ("agent_forbidden", "agents have no path to roles")
        elif not actor.is_owner:
            refusal = ("not_owner", "only a project owner grants roles")
        elif target is None or target.project_id != project_id or target.kind != "human":
            refusal = ("no_member", "roles are for people in this project")
        elif target.status == "left":
            refusal = ("member_left", "该成员已离开项目 (The member has left the project.)")
        elif state not in projects_store.OPEN_STATES:
            refusal = (
                "project_closed",
                f"项目处于 {state}，请先恢复项目 (The project is {state}; restore it first.)",
            )
        elif role == "member" and target.is_owner and _owner_count(conn, project_id) <= 1:
            refusal = ("last_owner", LAST_OWNER)
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind=actor.kind,
            actor_id=actor.id,
            project_id=project_id,
            action="member.role",
            from_state=target.role if target else None,
            outcome="refused" if refusal else "ok",
            detail={"target": target_id, "role": role, "reason": refusal[0] if refusal else None},
        )
        if refusal is not None:
            return {"refused": refusal}
        conn.execute("UPDATE members SET role = :r WHERE id = :id", {"r": role, "id": target_id})
        announce_members(conn, tx, project_id)
        return {"member_id": target_id, "role": role}

    result = await core.db.write(job, locks=(project_id,))
    if "refused" in result:
        code, message = result["refused"]
        if code in ("agent_forbidden", "not_owner"):
            raise ForbiddenError(message, code=code)
        if code == "no_member":
            raise BadRequestError(message, code=code)
        raise ConflictError(message, code=code)
    return result


def _owner_count(conn: Connection, project_id: int) -> int:
    return int(
        conn.execute(
            "SELECT count(*) FROM members WHERE project_id = :p AND kind = 'human'"
            " AND role = 'owner' AND status != 'left'",
            {"p": project_id},
        ).fetchone()[0]
    )
