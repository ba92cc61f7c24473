"""The loop brake's writes: counting agent turns, tripping it (with a notice in the room saying
whom it holds), the turns it interrupts, and a person clearing it — which resumes them
(docs/architecture.md, "Agents"; docs/agents.md, "The loop brake").

A brake holds the members of the loop it caught, not the team (whom: :mod:`room.rules.brakes`):
the others go on working. A running turn of a held member stops at its next step boundary,
recorded ``braked`` with a notice naming the member and its task; when a person clears the
brake, the prompt that turn took in and never answered is dispatched once more, as a restart
does for a turn it cut short (:func:`room.actions.deliveries.settle_via_unknown`), and the next
turn starts from the turn's checkpoint.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from room.actions.deliveries import dispatch_blocker, settle_via_unknown
from room.actions.notices import post_notice
from room.rules import brakes as brake_rules
from room.rules import notices
from room.rules.effects import WakeProject
from room.rules.ledger import DeliveryState, Reason, waiting_state
from room.rules.tasks import TaskState
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import brakes as brakes_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store.dialect import Connection

_D = DeliveryState


def trip(
    conn: Connection,
    tx: Tx,
    project_id: int,
    reason: str,
    detail: dict[str, Any],
    held: Collection[int] | None = None,
) -> None:
    """Trip the brake for ``reason``, holding ``held`` (None: the whole project; a
    project-wide reason always holds everyone). While a brake stands, a new trip only adds the
    members it holds that were not held yet (the first reason stands); the room is told whom."""
    if reason in brake_rules.PROJECT_WIDE:
        held = None
    current = brakes_store.brake(conn, project_id)
    after, added = brake_rules.merge_holds(current["tripped"], current["held"], held)
    if current["tripped"] is None:
        brakes_store.trip(conn, project_id, reason, detail, tx.now, after)
    elif added is not None and not added:
        return  # it holds them already
    else:
        brakes_store.hold(conn, project_id, after)
    handles = _handles(conn, sorted(added)) if added is not None else None
    meta = {"brake": reason, **detail, "held": sorted(added) if added is not None else None}
    post_notice(conn, tx, project_id, notices.brake_tripped(reason, detail, handles), meta)
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind="system",
        actor_id=None,
        project_id=project_id,
        action="brake.trip",
        outcome="ok",
        detail={"reason": reason, **detail, "held": meta["held"]},
    )


def _handles(conn: Connection, member_ids: Sequence[int]) -> list[str]:
    found = (members_store.get(conn, m) for m in member_ids)
    return [m.handle for m in found if m is not None]


def count_turn(conn: Connection, tx: Tx, project_id: int, member_id: int, cap: int) -> bool:
    """Count one more agent turn of ``member_id``; past ``cap`` the brake holds the loop
    (:func:`room.rules.brakes.cap_loop`), and the turn is refused (False) if its member is in it."""
    count = brakes_store.count_agent_turn(conn, tx, project_id, member_id)
    if count <= cap:
        return True
    loop = brake_rules.cap_loop(brakes_store.brake(conn, project_id)["turns_by_member"])
    trip(conn, tx, project_id, "agent_turn_cap", {"agent_turns": count - 1, "cap": cap}, loop)
    return member_id not in loop


def count_external_turn(
    conn: Connection, tx: Tx, project_id: int, member_id: int, cap: int
) -> None:
    """An external agent's ``queue`` consume is the start of one of its own turns. It already
    began (a consume is a report), so an external agent may run one turn more than an
    in-process one, which is refused before it starts; nothing more is offered once held."""
    if brakes_store.holds_member(conn, project_id, member_id):
        return
    count = brakes_store.count_agent_turn(conn, tx, project_id, member_id)
    if count > cap:
        loop = brake_rules.cap_loop(brakes_store.brake(conn, project_id)["turns_by_member"])
        trip(conn, tx, project_id, "agent_turn_cap", {"agent_turns": count, "cap": cap}, loop)


def repetition_partners(conn: Connection, message_ids: Sequence[int]) -> list[int]:
    """The agents the messages ``message_ids`` replied to (their authors) or woke (their
    recipients): with the author who repeats them, the loop a repetition brake holds."""
    found: set[int] = set()
    for message_id in message_ids:
        rows = conn.execute(
            "SELECT d.recipient_id FROM deliveries d JOIN members r ON r.id = d.recipient_id"
            " WHERE d.message_id = :m AND r.kind = 'agent'"
            " UNION SELECT t.author_id FROM messages m JOIN messages t ON t.id = m.reply_to"
            " JOIN members a ON a.id = t.author_id WHERE m.id = :m AND a.kind = 'agent'",
            {"m": message_id},
        )
        found.update(int(r[0]) for r in rows)
    return sorted(found)


def interrupted(
    conn: Connection, tx: Tx, project_id: int, member_id: int, turn_id: int, step: int
) -> None:
    """A held member's running turn stopped at a step boundary: recorded to resume when the
    brake is cleared, with a notice naming the member and its task. Should the brake be gone
    already (cleared since the turn looked), it is resumed at once."""
    conn.execute("UPDATE turns SET brake_resume = 1 WHERE id = :t", {"t": turn_id})
    member = members_store.get(conn, member_id)
    handle = member.handle if member is not None else str(member_id)
    tasks = _working_on(conn, project_id, member_id)
    post_notice(
        conn,
        tx,
        project_id,
        notices.brake_interrupted(handle, tasks, turn_id, step),
        {"brake": "interrupted", "turn_id": turn_id, "member_id": member_id},
    )
    if not brakes_store.holds_member(conn, project_id, member_id):
        _resume(conn, tx, [(turn_id, member_id)])
        tx.emit(WakeProject(project_id))


def _working_on(conn: Connection, project_id: int, member_id: int) -> list[tuple[str, str]]:
    """(key, title) of the tasks the member is at (in progress, else open), three at most."""
    tasks = tasks_store.open_tasks_of(conn, project_id, member_id)
    working = [t for t in tasks if t.state == TaskState.IN_PROGRESS] or tasks
    return [(t.key, t.title) for t in working[:3]]


def _resume(conn: Connection, tx: Tx, turns: Sequence[tuple[int, int]]) -> list[int]:
    """Dispatch once more what each interrupted turn took in and left unanswered; returns the
    members resumed."""
    members = []
    for turn_id, member_id in turns:
        ids = [
            d
            for d, s in deliveries_store.of_turn(conn, turn_id)
            if s in (_D.DELIVERED, _D.CONSUMED)
        ]
        # Back to wait: pending, or held while the member or the project is paused.
        to = waiting_state(dispatch_blocker(conn, member_id))
        settle_via_unknown(conn, tx, ids, to, Reason.BRAKE_RESUMED, why="brake cleared by a person")
        conn.execute("UPDATE turns SET brake_resume = 2 WHERE id = :t", {"t": turn_id})
        members.append(member_id)
    return members


async def trip_brake(
    core: Services,
    project_id: int,
    reason: str,
    detail: dict[str, Any],
    held: Collection[int] | None = None,
) -> None:
    await core.db.write(
        lambda conn, tx: trip(conn, tx, project_id, reason, detail, held), locks=(project_id,)
    )


async def trip_repetition(
    core: Services, project_id: int, member_id: int, detail: dict[str, Any], repeated: list[int]
) -> None:
    """A member's final answer repeats ``repeated`` (its new message first): the brake holds it
    and the agents those answers replied to or woke."""

    def job(conn: Connection, tx: Tx) -> None:
        loop = brake_rules.repetition_loop(member_id, repetition_partners(conn, repeated))
        trip(conn, tx, project_id, "repetition", detail, loop)

    await core.db.write(job, locks=(project_id,))


async def clear_brake(core: Services, project_id: int, human_member_id: int) -> dict[str, Any]:
    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        # Archived and trashed projects are read-only: a clearing notice would change the
        # messages the trash snapshot hashed.
        projects_store.require_open(conn, project_id)
        before = brakes_store.brake(conn, project_id)
        brakes_store.clear_brake(conn, tx, project_id, human_member_id)
        waiting = [
            (int(r[0]), int(r[1]))
            for r in conn.execute(
                "SELECT id, member_id FROM turns WHERE project_id = :p AND brake_resume = 1"
                " ORDER BY id",
                {"p": project_id},
            )
        ]
        resumed = _resume(conn, tx, waiting)
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind="human",
            actor_id=human_member_id,
            project_id=project_id,
            action="brake.clear",
            outcome="ok",
            detail={"was": before["tripped"], "held": before["held"], "resumed_turns": waiting},
        )
        tx.emit(WakeProject(project_id))  # dispatch may reopen: everything pending is looked at
        if before["tripped"] or resumed:
            notice = notices.brake_cleared(_handles(conn, sorted(set(resumed))))
            post_notice(conn, tx, project_id, notice, {"brake": "cleared", "resumed": resumed})
        return brakes_store.brake(conn, project_id)

    return await core.db.write(job, locks=(project_id,))
