"""Project lifecycle: pause, resume, archive, trash, restore, purge — people only
(docs/lifecycle.md).

The pure table in ``room.rules.lifecycle`` decides; this module carries decisions out and audits
every attempt, allowed or refused (a refused attempt changes nothing else). Stops are honest:

1. write ``stopping`` (admission and wake-ups are blocked from this commit on),
2. ask every running turn of the project to stop,
3. re-read the sessions' real state, and enter the target only when all are confirmed stopped;
   otherwise ``stop_unconfirmed``, from which a person retries the check or cancels back.

Trash writes a snapshot digest (counts and hashes of members, messages, ledger, tasks, memory,
decisions); restore recomputes it and refuses on mismatch with a per-table report, and lands in
``paused`` with a new epoch. Deliveries still open at trash time are cancelled and open invite
links revoked: restore never brings old pending requests or invites back.

Archived and trashed projects are read-only: every other action that changes a project's
members, routes, limits or invites calls ``projects_store.require_open`` inside its write, so
nothing lands after the archive or trash committed (it would break the restore's snapshot).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from room.actions import research as research_actions
from room.actions import stops
from room.actions import tasks as task_actions
from room.actions.deliveries import set_deliveries
from room.actions.members import actor_kind
from room.actions.notices import post_notice
from room.errors import BadRequestError, ConflictError, NotFoundError
from room.rules import notices
from room.rules.effects import Broadcast, PresenceChanged, WakeProject
from room.rules.entities import Member, Project
from room.rules.ledger import OPEN_STATES, DeliveryState, Reason
from room.rules.lifecycle import (
    Decision,
    PendingStop,
    Procedure,
    ProjectOp,
    ProjectState,
    decide,
    finish_stop,
)
from room.rules.ops import project_for, project_frame
from room.rules.portfolio import parse_hours
from room.rules.protocol import encode
from room.rules.research import GateFailure
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import deliveries as deliveries_store
from room.store import memory as memory_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store
from room.store.dialect import Connection

# What the trash digest covers: (name, SQL selecting the rows of one project, deterministic).
DIGEST_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "members",
        "SELECT id, kind, role, handle, display_name, status FROM members"
        " WHERE project_id = :p ORDER BY id",
    ),
    (
        "messages",
        "SELECT id, seq, author_id, kind, body, deleted_at IS NOT NULL FROM messages"
        " WHERE project_id = :p ORDER BY seq",
    ),
    (
        "ledger",
        "SELECT id, message_id, recipient_id, state, mode FROM deliveries"
        " WHERE project_id = :p ORDER BY id",
    ),
)

_D = DeliveryState


def digest(conn: Connection, project_id: int) -> dict[str, dict[str, Any]]:
    """Counts and SHA-256 of the project's rows, table by table."""
    out: dict[str, dict[str, Any]] = {}
    for name, sql in DIGEST_QUERIES:
        hasher = hashlib.sha256()
        count = 0
        for row in conn.execute(sql, {"p": project_id}):
            hasher.update(json.dumps(list(row), ensure_ascii=False).encode())
            count += 1
        out[name] = {"count": count, "sha256": hasher.hexdigest()}
    out |= task_actions.digest_rows(conn, project_id)
    out |= memory_store.digest_rows(conn, project_id)
    return out


def _publish_project(conn: Connection, tx: Tx, project_id: int) -> Project:
    project = projects_store.get(conn, project_id)
    assert project is not None
    frame = encode(project_frame(project.to_wire()))
    tx.emit(Broadcast(project_id, frame))
    tx.emit(PresenceChanged(project_id))  # agents of a closed project are not here
    return project


def _audit(
    conn: Connection,
    tx: Tx,
    actor: Member,
    project_id: int,
    op: str,
    from_state: str,
    outcome: str,
    **detail: Any,
) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor.kind,
        actor_id=actor.id,
        project_id=project_id,
        action=f"project.{op}",
        from_state=from_state,
        outcome=outcome,
        detail=detail,
    )


async def load(core: Services, project_id: int) -> Project:
    project = await core.db.read(lambda conn: projects_store.get(conn, project_id))
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    return project


def decision_for(project: Project, op: str, actor: Member) -> Decision[ProjectState]:
    pending = None
    if project.stop_target and project.state_from:
        pending = PendingStop(ProjectState(project.stop_target), ProjectState(project.state_from))
    return decide(ProjectState(project.state), ProjectOp(op), actor_kind(actor), pending=pending)


async def refuse(core: Services, actor: Member, project: Project, op: str, reason: str) -> None:
    await core.db.write(
        lambda conn, tx: _audit(
            conn, tx, actor, project.id, op, project.state, "refused", reason=reason
        ),
        locks=(project.id,),
    )


# The operations that take a reason (stored in ``projects.state_reason``, shown and audited).
REASON_OPS = frozenset({ProjectOp.PAUSE, ProjectOp.ARCHIVE, ProjectOp.COMPLETE, ProjectOp.ABANDON})
MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class Extras:
    """What an operation may carry besides its name: the reason (pause, archive, complete,
    abandon) and the actual hours (complete)."""

    reason: str | None = None
    actual_hours: float | None = None
    hours_unknown: bool = False  # complete with ``actual_hours: "unknown"``, said explicitly


#: What ``actual_hours`` says when a person completing a project does not know them.
HOURS_UNKNOWN = "unknown"


def check_extras(op: str, reason: str | None, actual_hours: Any) -> Extras:
    if reason is not None:
        reason = " ".join(unicodedata.normalize("NFC", reason).split()) or None
    if reason is not None and op not in REASON_OPS:
        raise BadRequestError(
            f"{op} 不接受原因 (this operation takes no reason)",
            code="reason_not_accepted",
            field="reason",
            allowed=sorted(REASON_OPS),
        )
    if reason is not None and len(reason) > MAX_REASON_CHARS:
        raise BadRequestError(
            f"原因最多 {MAX_REASON_CHARS} 个字符 (the reason is at most {MAX_REASON_CHARS} "
            "characters)",
            code="reason_too_long",
            field="reason",
        )
    if actual_hours is not None and op != ProjectOp.COMPLETE:
        raise BadRequestError(
            "只有标记完成时填写实际工时 (actual hours are given when marking complete)",
            code="hours_not_accepted",
            field="actual_hours",
        )
    if actual_hours == HOURS_UNKNOWN:
        return Extras(reason, None, hours_unknown=True)
    return Extras(reason, parse_hours(actual_hours, "actual_hours"))


def require_hours(op: str, extras: Extras) -> None:
    """Completing a project records its actual hours (the estimates rule reads them; once it is
    complete its timeline is read-only), or says they are unknown."""
    if op == ProjectOp.COMPLETE and extras.actual_hours is None and not extras.hours_unknown:
        raise BadRequestError(
            '标记完成时要填写实际工时，不知道就填 "unknown" '
            '(give actual_hours when marking complete, or "unknown")',
            code="actual_hours_required",
            field="actual_hours",
        )


async def run(
    core: Services,
    actor: Member,
    project_id: int,
    op: str,
    *,
    reason: str | None = None,
    actual_hours: Any = None,
) -> dict[str, Any]:
    """Carry out a lifecycle operation other than purge (see ``room.actions.purge``).

    ``reason`` goes with pause, archive, complete and abandon; ``actual_hours`` with complete
    (docs/portfolio.md: the estimates rule compares it with the estimate)."""
    if op not in {o.value for o in ProjectOp} or op == ProjectOp.PURGE:
        raise BadRequestError(
            f"unknown lifecycle operation {op!r}",
            code="bad_op",
            allowed=[o.value for o in ProjectOp if o is not ProjectOp.PURGE],
        )
    extras = check_extras(op, reason, actual_hours)
    project = await load(core, project_id)
    decision = decision_for(project, op, actor)
    if not decision.allowed:
        await refuse(core, actor, project, op, decision.reason or "")
        decision.raise_if_refused()
    require_hours(op, extras)
    assert decision.target is not None
    try:
        return await _carry_out(core, actor, project, op, decision, extras)
    except ConflictError as exc:
        # Refusals found only on the way (mostly inside a write, which rolls back with them).
        if exc.code in ("state_changed", "snapshot_mismatch"):
            await refuse(core, actor, project, op, exc.code)
        raise


async def _carry_out(
    core: Services,
    actor: Member,
    project: Project,
    op: str,
    decision: Decision[ProjectState],
    extras: Extras,
) -> dict[str, Any]:
    if decision.procedure is Procedure.STOP:
        return await _stop_sequence(core, actor, project, op, decision, extras)
    if op == ProjectOp.RESTORE and project.state == ProjectState.TRASHED:
        report = await core.db.read(lambda conn: _verify_snapshot(conn, project.id))
        if not report["ok"]:
            raise ConflictError(
                "回收站快照与当前数据不一致，拒绝恢复 (The trash snapshot does not match the data.)",
                code="snapshot_mismatch",
                report=report,
            )
    return await core.db.write(
        lambda conn, tx: _direct(conn, tx, actor, project, op, decision), locks=(project.id,)
    )


def _direct(
    conn: Connection,
    tx: Tx,
    actor: Member,
    project: Project,
    op: str,
    decision: Decision[ProjectState],
) -> dict[str, Any]:
    """resume, restore, cancel_stop: no running turn is involved."""
    current = projects_store.get(conn, project.id)
    if current is None or current.state != project.state:
        raise ConflictError("the project changed state meanwhile; try again", code="state_changed")
    target = decision.target
    assert target is not None
    detail: dict[str, Any] = {}
    if op == ProjectOp.RESTORE:
        if project.state == ProjectState.TRASHED:
            report = _verify_snapshot(conn, project.id)
            if not report["ok"]:
                raise ConflictError(
                    "the trash snapshot changed meanwhile", code="snapshot_mismatch"
                )
            detail["snapshot_ok"] = True
        detail["epoch"] = projects_store.bump_epoch(conn, project.id)
    projects_store.set_state(
        conn, project.id, state=target.value, state_from=None, stop_target=None, now=tx.now
    )
    if op != ProjectOp.CANCEL_STOP:
        # Resume and restore leave the paused/archived/complete/abandoned state and its reason.
        projects_store.set_state_reason(conn, project.id, None)
    if target is ProjectState.ACTIVE:
        released = _release_held(conn, tx, project.id)
        detail["released"] = released
        tx.emit(WakeProject(project.id))
    _audit(conn, tx, actor, project.id, op, project.state, "ok", to=target.value, **detail)
    notice = notices.lifecycle(
        target.value,
        actor.display_name,
        restored_from=project.state if op == ProjectOp.RESTORE else None,
        cancelled=op == ProjectOp.CANCEL_STOP,
    )
    post_notice(conn, tx, project.id, notice, {"lifecycle": op, "state": target.value})
    updated = _publish_project(conn, tx, project.id)
    return {"project": project_for(updated, actor_kind(actor)), "outcome": "ok", **detail}


async def _stop_sequence(
    core: Services,
    actor: Member,
    project: Project,
    op: str,
    decision: Decision[ProjectState],
    extras: Extras,
) -> dict[str, Any]:
    target = decision.target
    assert target is not None and decision.from_state is not None
    from_state = decision.from_state

    def begin(conn: Connection, tx: Tx) -> None:
        current = projects_store.get(conn, project.id)
        if current is None or current.state != project.state:
            raise ConflictError(
                "the project changed state meanwhile; try again", code="state_changed"
            )
        # From this commit on, nothing new is admitted or woken.
        projects_store.set_state(
            conn,
            project.id,
            state=ProjectState.STOPPING.value,
            state_from=from_state.value,
            stop_target=target.value,
            now=tx.now,
        )
        _audit(conn, tx, actor, project.id, op, project.state, "stopping", target=target.value)
        _publish_project(conn, tx, project.id)

    await core.db.write(begin, locks=(project.id,))
    # A research run checks the project before every step; its sessions are stopped here too.
    await core.research.stop_project(project.id)
    all_stopped = await core.agents.stop_project(project.id)
    running = core.agents.running_members(project.id)
    elsewhere: list[stops.StillRunning] = []
    if core.relay is not None:
        # A cluster: some turns may run on other nodes (asked on the bus). The stop confirms
        # only once the database shows every turn of the project settled, wherever it ran.
        elsewhere = await stops.settled(core, project.id, None, core.settings.stop_confirm_secs)
        running = sorted({*running, *(s.member_id for s in elsewhere)})
    reached = finish_stop(target, all_stopped and not running)

    def finish(conn: Connection, tx: Tx) -> dict[str, Any]:
        detail: dict[str, Any] = {"still_running": running}
        if elsewhere:  # which node has not confirmed yet (retry_stop checks again)
            detail["running_on"] = [s.wire() for s in elsewhere]
        if reached in (
            ProjectState.TRASHED, ProjectState.ARCHIVED, ProjectState.COMPLETE,
            ProjectState.ABANDONED,
        ):  # fmt: skip
            # Research stops, its approval is revoked and its sessions released; a restore
            # bumps the epoch, which no old approval binds.
            detail["research_revoked"] = research_actions.revoke_project(
                conn, tx, project.id, actor
            )
        else:
            # Paused (or the stop unconfirmed): the runner was stopped with the project; its
            # running research stops, with the notice saying why.
            research_actions.halt_project(conn, tx, project.id, GateFailure.PROJECT_NOT_ACTIVE)
        if reached is ProjectState.STOP_UNCONFIRMED:
            projects_store.set_state(
                conn,
                project.id,
                state=reached.value,
                state_from=from_state.value,
                stop_target=target.value,
                now=tx.now,
            )
        else:
            projects_store.set_state(
                conn, project.id, state=reached.value, state_from=None, stop_target=None, now=tx.now
            )
            if reached is ProjectState.TRASHED:
                detail["cancelled"] = _cancel_open(conn, tx, project.id)
                detail["invites_revoked"] = _revoke_invites(conn, tx, project.id)
            else:
                detail["held"] = _hold_pending(conn, tx, project.id)
            projects_store.set_state_reason(conn, project.id, extras.reason)
            if extras.reason:
                detail["reason"] = extras.reason
            if reached is ProjectState.COMPLETE and extras.actual_hours is not None:
                portfolio_store.set_actual_hours(
                    conn, project.id, extras.actual_hours, by=actor.id, now=tx.now
                )
                detail["actual_hours"] = extras.actual_hours
            elif reached is ProjectState.COMPLETE and extras.hours_unknown:
                detail["actual_hours"] = HOURS_UNKNOWN
        notice = notices.lifecycle(
            reached.value,
            actor.display_name,
            reason=extras.reason if reached is not ProjectState.STOP_UNCONFIRMED else None,
            days=core.settings.trash_retention_days,
        )
        post_notice(conn, tx, project.id, notice, {"lifecycle": op, "state": reached.value})
        if reached is ProjectState.TRASHED:
            # Taken last, so the snapshot holds exactly what restore will find.
            snapshot = digest(conn, project.id)
            conn.execute(
                "INSERT INTO project_snapshots (project_id, digest_json, created_at,"
                " created_by) VALUES (:p, :d, :now, :by)",
                {
                    "p": project.id,
                    "d": json.dumps(snapshot, sort_keys=True),
                    "now": tx.now,
                    "by": actor.id,
                },
            )
            detail["snapshot"] = snapshot
        outcome = "ok" if reached is target else "stop_unconfirmed"
        _audit(
            conn, tx, actor, project.id, op, from_state.value, outcome, to=reached.value, **detail
        )
        updated = _publish_project(conn, tx, project.id)
        return {"project": project_for(updated, actor_kind(actor)), "outcome": outcome, **detail}

    return await core.db.write(finish, locks=(project.id,))


def _hold_pending(conn: Connection, tx: Tx, project_id: int) -> int:
    ids = deliveries_store.of_project(conn, project_id, (_D.PENDING,))
    set_deliveries(conn, tx, ids, _D.HELD, code=Reason.PROJECT_NOT_ACTIVE)
    return len(ids)


def _release_held(conn: Connection, tx: Tx, project_id: int) -> int:
    ids = deliveries_store.held_for_active_members(conn, project_id)
    deliveries_store.unbind(conn, ids)
    set_deliveries(conn, tx, ids, _D.PENDING)
    return len(ids)


def _cancel_open(conn: Connection, tx: Tx, project_id: int) -> int:
    ids = deliveries_store.of_project(conn, project_id, OPEN_STATES)
    set_deliveries(conn, tx, ids, _D.CANCELLED, code=Reason.PROJECT_TRASHED)
    return len(ids)


def _revoke_invites(conn: Connection, tx: Tx, project_id: int) -> int:
    """Open invite links die with the trash (marked used): a restore does not revive them."""
    return conn.execute(
        "UPDATE login_links SET used_at = :now WHERE project_id = :p AND purpose = 'invite'"
        " AND used_at IS NULL",
        {"p": project_id, "now": tx.now},
    ).rowcount


def _verify_snapshot(conn: Connection, project_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT digest_json FROM project_snapshots WHERE project_id = :p ORDER BY id DESC LIMIT 1",
        {"p": project_id},
    ).fetchone()
    if row is None:
        return {"ok": False, "missing": True, "differences": {}}
    expected = json.loads(row[0])
    actual = digest(conn, project_id)
    differences = {
        name: {"expected": expected.get(name), "actual": actual.get(name)}
        for name in sorted(set(expected) | set(actual))
        if expected.get(name) != actual.get(name)
    }
    return {"ok": not differences, "differences": differences}


def restart_stops(conn: Connection, tx: Tx) -> list[int]:
    """After a crash, a ``stopping`` project never confirmed its stop: ``stop_unconfirmed``."""
    ids = [int(r[0]) for r in conn.execute("SELECT id FROM projects WHERE state = 'stopping'")]
    conn.executemany(
        "UPDATE projects SET state = 'stop_unconfirmed', state_at = ? WHERE id = ?",
        [(tx.now, i) for i in ids],
    )
    return ids
